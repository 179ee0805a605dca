"""The ModernBERT family (issue 31): transformers' `ModernBertModel` / `ModernBertForMaskedLM` parity both
ways, both config spellings, the chunked local attention against a dense band, byte-level word starts,
and pre-training with SpanBERT's objectives through the one pipeline (resume exact, two processes = one).
Every task through every family is tests/test_families.py; device placement and bf16, test_device.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from spanbert import families, model, modernbert
from spanbert.checkpoint_files import SBO_FILE
from spanbert.cli import main
from spanbert.errors import SpanBertError
from spanbert.tokenization import train_byte_level_tokenizer

transformers = pytest.importorskip("transformers")
needs_hf_modernbert = pytest.mark.skipif(
    not hasattr(transformers, "ModernBertModel"), reason="transformers before 4.48 has no ModernBERT"
)

TEXTS = ["The human ran to the river, and the river ran on.", "Mary met John in Paris; they talked about rivers."] * 40


def hf_config(**kw):
    base = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                local_attention=16, global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                cls_token_id=2, sep_token_id=3, global_rope_theta=160000.0, local_rope_theta=10000.0)  # fmt: skip
    return transformers.ModernBertConfig(**{**base, **kw})


def padded_batch(B: int, T: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 300, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    for b in range(1, B):
        mask[b, T - (b * T) // (B + 1) :] = 0  # right padding of several lengths
    return ids, mask


@pytest.fixture(params=["grid", "ragged"])
def attention_path(request, monkeypatch):
    """The two ways a padded batch is attended: the padded grid with a key mask (GPU), or one sequence
    at a time over its real tokens (CPU, when it saves work): forced either way."""
    if request.param == "grid":
        monkeypatch.setattr(model, "RAGGED_DEVICES", ())
    else:
        monkeypatch.setattr(model, "RAGGED_SAVING", 1.0)
        monkeypatch.setattr(model, "RAGGED_MIN_WORK", 0.0)
    return request.param


@needs_hf_modernbert
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("T", [12, 40, 100])  # global only for short rows; band mask; chunked local attention (> 8 x 8)
def test_hidden_states_equal_transformers_on_a_padded_batch(impl, T, attention_path):
    torch.manual_seed(0)
    hf = transformers.ModernBertModel(hf_config(attn_implementation=impl)).eval()
    ours = modernbert.Encoder(modernbert.ModernBertConfig.from_hf_dict(hf.config.to_dict()), add_pooling_layer=False)
    ours.load_state_dict(hf.state_dict())  # the same names: no remapping
    ours.eval()
    ids, mask = padded_batch(3, T)
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask, output_hidden_states=True)
        got = ours(ids, mask, output_hidden_states=True)
        unpadded = ours(ids)
        ref_unpadded = hf(ids).last_hidden_state
    keep = mask.bool()
    assert len(got) == len(ref.hidden_states) == 5
    for a, b in zip(ref.hidden_states, got):
        assert (a - b)[keep].abs().max() <= 1e-4
    assert (ref.last_hidden_state - got[-1])[keep].abs().max() <= 1e-4
    assert torch.all(got[-1][~keep] == 0)  # padding is never computed on: zeros there
    assert (ref_unpadded - unpadded).abs().max() <= 1e-4


@pytest.mark.parametrize("T,half", [(9, 2), (33, 4), (64, 8), (70, 8), (130, 16)])
def test_chunked_local_attention_equals_a_dense_band(T, half):
    torch.manual_seed(T)
    q, k, v = (torch.randn(2, 3, T, 8) for _ in range(3))
    key_mask = torch.ones(2, T, dtype=torch.bool)
    key_mask[1, T - T // 3 :] = False
    i = torch.arange(T)
    band = (i[:, None] - i[None, :]).abs() <= half
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band & key_mask[:, None, None, :])
    got = modernbert.local_attention_chunked(q, k, v, half, key_mask)
    real = key_mask[:, None, :, None].expand_as(ref)  # rows of real queries (padded rows are unused)
    assert torch.allclose(got[real], ref[real], atol=1e-5)
    assert torch.isfinite(got).all()  # every row keeps a key: no NaN even where a row is only padding


def test_local_attention_costs_linear_time_in_the_sequence():
    """The chunked path's score tensor grows with T (chunks of 2 x half against 4 x half keys), not T^2."""
    seen = []
    real = modernbert._sdpa

    def spy(q, k, v, mask, p):
        seen.append(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])
        return real(q, k, v, mask, p)

    for T in (256, 512):
        seen.clear()
        modernbert._sdpa = spy
        try:
            q = torch.randn(1, 2, T, 8)
            modernbert.attend(q, q, q, 8, None)
        finally:
            modernbert._sdpa = real
        assert seen == [T * 2 * (4 * 8)]  # B n nh c w = T nh w


@needs_hf_modernbert
def test_both_config_spellings_read_the_same_and_ours_round_trips():
    old = {"model_type": "modernbert", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 4, "num_attention_heads": 4, "global_attn_every_n_layers": 2,
           "global_rope_theta": 80000.0, "local_rope_theta": 5000.0, "local_attention": 16}  # fmt: skip
    new = {k: v for k, v in old.items() if not k.endswith("rope_theta") and k != "global_attn_every_n_layers"}
    new["layer_types"] = ["full_attention", "sliding_attention"] * 2
    new["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}}  # fmt: skip
    a, b = modernbert.ModernBertConfig.from_hf_dict(old), modernbert.ModernBertConfig.from_hf_dict(new)
    assert a == b and a.layer_types == ("full_attention", "sliding_attention") * 2
    assert modernbert.ModernBertConfig.from_hf_dict(a.to_hf_dict()) == a
    hf = transformers.ModernBertConfig(**{k: v for k, v in a.to_hf_dict().items() if k != "model_type"})
    assert list(hf.layer_types) == list(a.layer_types)
    assert hf.rope_parameters["sliding_attention"]["rope_theta"] == 5000.0


@pytest.mark.parametrize(
    "change,text",
    [
        ({"hidden_size": 66}, "divisible by the number of heads"),
        ({"layer_types": ["full_attention"]}, "expected one per layer"),
        ({"layer_types": ["global"] * 4}, "expected a list of"),
        ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0}}}, "not implemented"),
        ({"local_attention": "128"}, "local_attention"),
        ({"classifier_pooling": "max"}, "expected cls or mean"),
    ],
)
def test_a_bad_config_is_a_clear_error(change, text):
    raw = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
           "num_attention_heads": 4, **change}  # fmt: skip
    with pytest.raises(SpanBertError, match=text) as e:
        modernbert.ModernBertConfig.from_hf_dict(raw, source="cfg.json")
    assert str(e.value).startswith("cfg.json: ")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A folder written by transformers (`ModernBertForMaskedLM.save_pretrained`) with a byte-level vocabulary."""
    folder = tmp_path_factory.mktemp("hf-modernbert")
    tok = train_byte_level_tokenizer(None, 300, texts=TEXTS)
    torch.manual_seed(0)
    cfg = hf_config(vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, cls_token_id=tok.cls_id, sep_token_id=tok.sep_id,
                    bos_token_id=tok.cls_id, eos_token_id=tok.sep_id)  # fmt: skip
    transformers.ModernBertForMaskedLM(cfg).save_pretrained(folder)
    tok.save(folder)
    return folder


@needs_hf_modernbert
def test_a_transformers_folder_loads_through_the_one_loader(hf_folder):
    assert families.family_of(hf_folder) == "modernbert"
    encoder = families.load_encoder(hf_folder, add_pooling_layer=True)
    hf = transformers.ModernBertForMaskedLM.from_pretrained(hf_folder).eval()
    ids, mask = padded_batch(2, 30)
    with torch.no_grad():
        ref = hf.model(ids, attention_mask=mask).last_hidden_state
        got = encoder(ids, mask)
    assert (ref - got)[mask.bool()].abs().max() <= 1e-4
    # the sentence head is the MLM head's transform, as transformers' classification models load it
    assert torch.equal(encoder.head.dense.weight, hf.head.dense.weight)
    tok = families.load_framed_tokenizer(hf_folder)
    assert tok.byte_level and (tok.cls_id, tok.sep_id) == (hf.config.cls_token_id, hf.config.sep_token_id)


def test_byte_level_word_starts_mark_words_not_pieces():
    tok = train_byte_level_tokenizer(None, 300, texts=TEXTS)
    enc = tok.encode("The humans ran, unhurried.")
    pieces = tok.convert_ids_to_tokens(enc.ids)
    words, current = [], ""
    for piece, start in zip(pieces, enc.word_starts):
        if start and current:
            words.append(current)
            current = ""
        current += piece.replace("Ġ", " ")
    words.append(current)
    assert [w.strip() for w in words] == ["The", "humans", "ran", ",", "unhurried", "."]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """`spanbert pretrain --family modernbert --system spanbert`: a tiny run, exported."""
    out = tmp_path_factory.mktemp("pre") / "run"
    corpus = out.parent / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(TEXTS[i : i + 3]) for i in range(0, 60, 3)))
    assert main(["pretrain", "--family", "modernbert", "--system", "spanbert", "--model", "tiny", "--corpus", str(corpus),
                 "--vocab_size", "320", "--max_seq_length", "64", "--per_device_train_batch_size", "4", "--max_steps", "3",
                 "--tokens_per_update", "0", "--gradient_accumulation_steps", "1", "--warmup_steps", "0", "--save_steps", "0",
                 "--num_proc", "0", "--device", "cpu", "--disable_tqdm", "--report_to", "none", "--output_dir", str(out),
                 "--threads", "1"]) == 0  # fmt: skip
    return out / "final"


@needs_hf_modernbert
def test_an_exported_model_opens_in_transformers_with_equal_logits(exported):
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert config["spanbert"]["system"] == "spanbert" and config["spanbert"]["sbo"] is True
    assert (exported / SBO_FILE).is_file()  # beside model.safetensors: transformers loads that alone
    hf = transformers.AutoModelForMaskedLM.from_pretrained(exported).eval()
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    tok = transformers.AutoTokenizer.from_pretrained(exported)
    enc = tok(["The human ran to the river.", "Mary met John"], padding=True, return_tensors="pt")
    assert tok.convert_ids_to_tokens(enc["input_ids"][0])[0] == "[CLS]"
    ours = modernbert.ModernBertForPreTraining.from_pretrained(exported)
    B, T = enc["input_ids"].shape
    with torch.no_grad():
        ref = hf(**enc).logits
        got = ours(enc["input_ids"], enc["attention_mask"], mlm_positions=torch.arange(B * T))["mlm_logits"].view(B, T, -1)
    assert (ref - got)[enc["attention_mask"].bool()].abs().max() <= 1e-4
    # and the loader reads it as an encoder for every task
    assert families.load_encoder(exported).model_type == "modernbert"


# every special token, at the start, between words, glued to a word, twice in a row, at the end
SPECIAL_SENTENCES = [
    "The human ran to the [MASK] of France.",
    "[CLS] Mary met [MASK] [MASK] in Paris. [SEP] They talked. [SEP]",
    "the[MASK]of rivers [UNK] and [PAD] [PAD]",
    "  [MASK]  spaced  out  [SEP]",
]


@pytest.mark.parametrize("kind", ["byte-level", "wordpiece"])
def test_transformers_tokenizes_text_with_special_tokens_as_we_do_both_ways(kind, tmp_path):
    """Our saved tokenizer read by transformers gives our ids, and transformers' tokenizer saved by it gives
    the same ids when we read it back; [MASK] takes the space before it in byte-level BPE (a mask stands
    for a whole word with its space: ``Ġthe [MASK] Ġof``, no stray ``Ġ``)."""
    from spanbert.tokenization import load_tokenizer, train_tokenizer

    ours = train_byte_level_tokenizer(None, 300, texts=TEXTS) if kind == "byte-level" else train_tokenizer(None, 300, texts=TEXTS)
    ours.save(tmp_path / "ours", model_max_length=8192)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    assert theirs.model_max_length == 8192
    theirs.save_pretrained(tmp_path / "theirs")
    back = load_tokenizer(tmp_path / "theirs")
    for text in SPECIAL_SENTENCES:
        ids = ours.encode(text).ids.tolist()
        assert theirs(text, add_special_tokens=False)["input_ids"] == ids, text
        assert back.encode(text).ids.tolist() == ids, text
        assert theirs.decode(ids) == ours.decode(ids, skip_special_tokens=False), text
    if kind == "byte-level":
        pieces = ours.convert_ids_to_tokens(ours.encode("ran to the [MASK] of").ids)
        at = pieces.index("[MASK]")
        assert pieces[at - 1] == "Ġthe" and pieces[at + 1].startswith("Ġ"), pieces  # the space before it is in it


def test_an_exported_tokenizer_says_the_models_longest_input(exported):
    config = json.loads((exported / "config.json").read_text())
    assert transformers.AutoTokenizer.from_pretrained(exported).model_max_length == config["max_position_embeddings"] == 8192


@needs_hf_modernbert
@pytest.mark.parametrize("head", ["mlm", "sbo"])
def test_fill_predicts_with_either_head_of_a_modernbert_folder(exported, head, capsys):
    text = "The human ran to the [MASK] of France."
    assert main(["fill", "--model", str(exported), "--text", text, "--head", head, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    tok = transformers.AutoTokenizer.from_pretrained(exported)
    enc = tok(text, return_tensors="pt")
    position = enc["input_ids"][0].tolist().index(tok.mask_token_id)
    assert [p["position"] for p in got["predictions"]] == [position]  # the framing transformers gives the text
    assert len(got["predictions"][0]["candidates"]) == 5
    if head == "mlm":  # the MLM head's best guess is transformers' ModernBertForMaskedLM's (special tokens aside)
        with torch.no_grad():
            logits = transformers.AutoModelForMaskedLM.from_pretrained(exported).eval()(**enc).logits[0, position]
        logits[tok.all_special_ids] = -float("inf")
        best = int(logits.argmax())
        word, prob = got["predictions"][0]["candidates"][0]
        assert word == tok.decode([best]).strip() or word == tok.convert_ids_to_tokens(best)
        assert prob == pytest.approx(float(logits.softmax(-1)[best]), abs=1e-4)


def test_fill_with_a_head_the_folder_lacks_is_a_clean_error(exported, tmp_path, cli_error):
    import shutil

    bare = tmp_path / "no-sbo"
    shutil.copytree(exported, bare)
    (bare / SBO_FILE).unlink()
    cli_error(["fill", "--model", str(bare), "--text", "a [MASK] b", "--head", "sbo"], names=str(bare),
              contains="needs the span boundary head")  # fmt: skip
    # the MLM head alone still fills; without being told, the loader adds no random span head
    assert modernbert.ModernBertForPreTraining.from_pretrained(bare, require=("mlm",)).span_predictions is None


def _pretrain_argv(corpus: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return ["pretrain", "--family", "modernbert", "--system", "spanbert", "--model", "tiny", "--corpus", str(corpus),
            "--vocab_size", "320", "--max_seq_length", "48", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "1", "--tokens_per_update", "0", "--warmup_steps", "0", "--save_steps", "2",
            "--max_steps", str(steps), "--num_proc", "0", "--device", "cpu", "--disable_tqdm", "--report_to", "none",
            "--max_eval_blocks", "0", "--output_dir", str(out), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(" ".join(TEXTS[i : i + 4]) for i in range(0, 80, 4)))
    return path


def test_resume_is_bit_exact(corpus, tmp_path):
    """4 steps straight == 2 steps, then --resume to 4: data order, masks and optimizer state come back exactly."""
    assert main(_pretrain_argv(corpus, tmp_path / "a", 4)) == 0
    assert main(_pretrain_argv(corpus, tmp_path / "b", 4, "--stop_at_step", "2")) == 0  # as if killed at step 2
    assert main(_pretrain_argv(corpus, tmp_path / "b", 4, "--resume")) == 0
    a, b = (load_file(str(tmp_path / x / "final" / "model.safetensors")) for x in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


DDP = r"""
import sys
from spanbert.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_two_processes_equal_one(corpus, tmp_path):
    """torchrun 2 x gloo with the accumulation halved computes the one-process updates."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = _pretrain_argv(corpus, tmp_path / "one", 3)
    one[one.index("--gradient_accumulation_steps") + 1] = "2"
    assert main(one) == 0
    two = _pretrain_argv(corpus, tmp_path / "two", 3)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), *two]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    a, b = (load_file(str(tmp_path / x / "final" / "model.safetensors")) for x in ("one", "two"))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k


def test_a_two_segment_system_is_refused_on_modernbert(tmp_path, cli_error):
    cli_error(["pretrain", "--family", "modernbert", "--system", "bert", "--model", "tiny", "--output_dir",
               str(tmp_path / "o")], contains="expected one of: spanbert, bert-1seq")  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_the_modernbert_recipe_masks_thirty_percent(corpus, tmp_path):
    from spanbert.pretrain_config import PretrainConfig, system_of

    cfg = PretrainConfig(system="modernbert-mlm", model="tiny")
    assert system_of(cfg).family == "modernbert" and system_of(cfg).mask_prob == 0.3
    out = tmp_path / "mlm"
    argv = _pretrain_argv(corpus, out, 1)
    argv[argv.index("--system") + 1] = "modernbert-mlm"
    argv[argv.index("--save_steps") + 1] = "1"
    assert main(argv) == 0
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["spanbert"]["sbo"] is False and config["spanbert"]["system"] == "modernbert-mlm"
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["run_config"]["MaskingConfig"]["mask_prob"] == 0.3
    # the recipe's 30% is a default: a --mask_prob the user names wins, the usual 0.15 included
    assert main([*argv[: argv.index("--output_dir")], "--output_dir", str(tmp_path / "named"), "--mask_prob", "0.15"]) == 0
    state = json.loads((tmp_path / "named" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["run_config"]["MaskingConfig"]["mask_prob"] == 0.15


def test_flops_count_local_layers_by_their_window():
    cfg = modernbert.modernbert_config("base", vocab_size=50368)
    short, long = modernbert.flops_per_token(cfg, 512), modernbert.flops_per_token(cfg, 8192)
    # 1 in 3 layers is global: the per-token cost grows with T for those alone
    per_global = 3 * 2 * 2 * cfg.hidden_size
    assert long - short == pytest.approx(per_global * (8192 - 512) * cfg.layer_types.count("full_attention"))
    assert np.isfinite(short)


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=(-1, -1)):
    """`varlen_attn`'s contract on the CPU: each packed sequence attends within itself (and its window)."""
    half = None if window_size[0] < 0 else window_size[0]
    bounds = cu_q.tolist()
    assert cu_k.tolist() == bounds and max_q >= max(b - a for a, b in zip(bounds, bounds[1:]))
    out = [modernbert.attend(*(t[a:b].transpose(0, 1)[None] for t in (q, k, v)), half, None)[0].transpose(0, 1)
           for a, b in zip(bounds, bounds[1:])]  # fmt: skip
    return torch.cat(out)


@pytest.mark.parametrize("padded", [True, False])
def test_the_packed_flash_path_gives_the_grids_states(padded, monkeypatch):
    """The GPU's varlen path (packed real tokens, cumulative lengths, each token's RoPE position in its
    row), run on the CPU against `varlen_attn`'s contract: the states of the padded grid."""
    torch.manual_seed(0)
    cfg = modernbert.modernbert_config("tiny", vocab_size=300, local_attention=8, pad_token_id=0)
    encoder = modernbert.Encoder(cfg).eval()
    ids, mask = padded_batch(3, 50)
    if not padded:
        mask = torch.ones_like(mask)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ref = encoder(ids, mask).float()  # the grid (VARLEN_DEVICES is CUDA's)
        monkeypatch.setattr(modernbert, "VARLEN", True)
        monkeypatch.setattr(modernbert, "VARLEN_DEVICES", ("cpu",))
        calls = []
        monkeypatch.setattr(modernbert, "varlen_attn", lambda *a, **k: calls.append(k) or _reference_varlen(*a, **k))
        assert modernbert.Layout(cfg, ids, mask, half_precision=True).varlen
        got = encoder(ids, mask).float()
    assert [c["window_size"] for c in calls] == [(-1, -1), (4, 4), (4, 4)]  # global, local, local
    keep = mask.bool()
    assert (got - ref)[keep].abs().max() <= 0.02 * ref[keep].abs().max()
    assert torch.all(got[~keep] == 0)


def test_a_malformed_modernbert_folder_is_a_clean_error(tmp_path, cli_error):
    """--init_from a ModernBERT folder whose config.json has a string size: one error line naming the
    file and the key, exit 2, before anything is written."""
    folder = tmp_path / "bad"
    folder.mkdir()
    raw = {"model_type": "modernbert", "vocab_size": 300, "hidden_size": "64", "intermediate_size": 96,
           "num_hidden_layers": 3, "num_attention_heads": 2}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(raw))
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    cli_error(["pretrain", "--family", "modernbert", "--system", "spanbert", "--model", "tiny", "--init_from", str(folder),
               "--output_dir", str(tmp_path / "out")], names=folder / "config.json", contains="hidden_size")  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("T", [12, 40, 100])  # global only; band mask; chunked local attention
def test_attention_dropout_trains_through_the_cpu_dropout_core(T, attention_path, monkeypatch):
    """With attention_dropout > 0 every layer kind (global, banded local, chunked local) runs
    `spanbert.attention`'s CPU dropout core in training: reproducible from the seed, finite gradients,
    different from the eval-mode states, and padding still never computed on."""
    import spanbert.attention as sa

    monkeypatch.setattr(sa, "FUSED_MIN_ELEMENTS", 0)  # the chunked function even at these tiny sizes
    torch.manual_seed(0)
    cfg = modernbert.ModernBertConfig.from_hf_dict(hf_config(attention_dropout=0.2).to_dict())
    enc = modernbert.Encoder(cfg, add_pooling_layer=False)
    ids, mask = padded_batch(3, T)
    keep = mask.bool()
    outs = []
    for _ in range(2):
        torch.manual_seed(1)
        enc.train().zero_grad()
        out = enc(ids, mask)
        (out[keep] ** 2).mean().backward()
        outs.append((out.detach(), [p.grad.clone() for p in enc.parameters() if p.grad is not None]))
    assert torch.equal(outs[0][0], outs[1][0])
    assert all(torch.equal(a, b) for a, b in zip(outs[0][1], outs[1][1]))
    assert all(torch.isfinite(g).all() for g in outs[0][1])
    with torch.no_grad():
        evaluated = enc.eval()(ids, mask)
    assert not torch.allclose(evaluated[keep], outs[0][0][keep], atol=1e-3)
    assert torch.all(outs[0][0][~keep] == 0)


def test_ragged_attention_gradients_equal_the_grid_and_cost_no_per_sequence_copies(monkeypatch):
    """The CPU's one-sequence-at-a-time path gives the padded grid's gradients, and its backward writes
    no zero-filled copy per sequence: sliced rows did (B of them a tensor, quadratic in the batch; a
    third of a 64 x 128 pre-training step), split rows give one concatenation."""
    cfg = modernbert.modernbert_config("tiny", vocab_size=300, pad_token_id=0, cls_token_id=1, sep_token_id=2)
    torch.manual_seed(0)
    ours = modernbert.Encoder(cfg, add_pooling_layer=False).eval()
    ids, mask = padded_batch(6, 40)
    mask[3] = 0  # a row of padding only: no token of it reaches attention
    keep = mask.bool()
    probe = torch.randn(int(keep.sum()), cfg.hidden_size)  # a loss whose gradients are all of one scale

    def grads(ragged: bool) -> tuple[dict[str, torch.Tensor], int]:
        monkeypatch.setattr(model, "RAGGED_SAVING", 1.0 if ragged else 0.0)
        monkeypatch.setattr(model, "RAGGED_MIN_WORK", 0.0)
        ours.zero_grad()
        with torch.profiler.profile() as prof:
            h = ours(ids, mask)
            (h[keep] * probe).sum().backward()
        slices = sum(e.count for e in prof.key_averages() if e.key == "aten::slice_backward")
        return {n: p.grad.clone() for n, p in ours.named_parameters() if p.grad is not None}, slices

    grid, _ = grads(False)
    ragged, slices = grads(True)
    assert grid.keys() == ragged.keys()
    for n in grid:
        assert (grid[n] - ragged[n]).abs().max() <= 1e-5 * grid[n].abs().max(), n  # float summation order
    assert slices == 0
