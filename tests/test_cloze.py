"""The two-tower cloze model (spanbert/cloze.py): no target leak, gradients, overfitting, save/load,
pre-training end to end, exact resume, two processes = one, the paper's optimiser and schedule."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from test_pretrain import synthetic_docs

from spanbert import cloze
from spanbert.cli import main
from spanbert.cloze import (
    TwoTowerModel,
    adaptive_cutoffs,
    bilm_inputs,
    build_model,
    cloze_config,
    count_targets,
    load_two_tower,
    train_cloze_tokenizer,
)
from spanbert.cloze_config import ClozeConfig
from spanbert.errors import SpanBertError
from spanbert.pretrain import pretrain
from spanbert.pretrain_config import PretrainConfig
from spanbert.training_args import TrainingArguments

V = 40
BOS, EOS = 2, 3


def tiny(**kw) -> ClozeConfig:
    base = dict(vocab_size=V, d_model=32, num_layers=2, num_heads=4, ffn_dim=64, final_heads=4, pad_id=0,
                bos_id=BOS, eos_id=EOS, sep_id=4)  # fmt: skip
    return ClozeConfig(**{**base, **kw})


def model_of(seed: int = 0, **kw) -> TwoTowerModel:
    torch.manual_seed(seed)
    cfg = tiny(**kw)
    chars = None
    if cfg.input == "char_cnn":
        chars = cloze.word_characters([f"w{i}" for i in range(V)], cfg.max_word_chars)
    return TwoTowerModel(cfg, word_chars=chars).eval()


def sample(T: int = 10, B: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = BOS
    ids[:, -1] = EOS
    mask = torch.ones_like(ids)
    if B > 1:  # the second row is shorter: padding must not matter either
        ids[1, T - 3] = EOS
        ids[1, T - 2 :] = 0
        mask[1, T - 2 :] = 0
    return ids, mask


def states(model, ids, mask, full_context=False):
    t = model.towers(ids, mask)
    hidden = model.combine(t["forward"], t["backward"], t["mask"], full_context=full_context)
    return t, hidden


def changed(ids: torch.Tensor, row: int, pos: int) -> torch.Tensor:
    out = ids.clone()
    out[row, pos] = 5 + (int(out[row, pos]) - 5 + 7) % (V - 5)  # another ordinary token
    return out


@pytest.mark.parametrize("query", ["sum", "concat"])
def test_cloze_prediction_never_sees_its_target(query):
    model = model_of(query=query)
    ids, mask = sample()
    with torch.no_grad():
        _, h = states(model, ids, mask)
        for i in range(1, 9):
            _, h_i = states(model, changed(ids, 0, i), mask)
            assert torch.allclose(h_i[0, i], h[0, i], atol=1e-6), f"token {i} leaked into its own prediction"
            for j in (i - 1, i + 1):  # a neighbour (in 1..8) changes the prediction
                if 1 <= j <= 8:
                    _, h_j = states(model, changed(ids, 0, j), mask)
                    assert not torch.allclose(h_j[0, i], h[0, i], atol=1e-4), (i, j)
        # every output's distribution over the vocabulary too (the classifier adds nothing of token i)
        lp = model.log_probs(h)
        lp_changed = model.log_probs(states(model, changed(ids, 0, 4), mask)[1])
        assert torch.allclose(lp[0, 4], lp_changed[0, 4], atol=1e-5)


def test_each_tower_state_depends_only_on_its_side():
    model = model_of()
    ids, mask = sample(B=1)
    with torch.no_grad():
        t, _ = states(model, ids, mask)
        for j in range(10):
            t2, _ = states(model, changed(ids, 0, j), mask)
            for i in range(10):
                same_f = torch.allclose(t2["forward"][0, i], t["forward"][0, i], atol=1e-6)
                same_b = torch.allclose(t2["backward"][0, i], t["backward"][0, i], atol=1e-6)
                assert same_f == (j > i), ("forward", i, j)  # F_i sees t_1..t_i only
                assert same_b == (j < i), ("backward", i, j)  # B_i sees t_i..t_n only


def test_bilm_prediction_never_sees_the_token_it_predicts():
    model = model_of(objective="bilm")
    assert not hasattr(model, "combine_attn")  # §6.3: no combination module
    ids, mask = sample(B=1)
    with torch.no_grad():
        t = model.towers(ids, mask)
        f_prev, b_next = bilm_inputs(t["forward"], t["backward"])
        for k in range(10):
            t2 = model.towers(changed(ids, 0, k), mask)
            f2, b2 = bilm_inputs(t2["forward"], t2["backward"])
            assert torch.allclose(f2[0, k], f_prev[0, k], atol=1e-6), k  # F_{k-1} predicts t_k
            assert torch.allclose(b2[0, k], b_next[0, k], atol=1e-6), k  # B_{k+1} predicts t_k
            if 1 <= k <= 8:
                assert not torch.allclose(f2[0, k + 1], f_prev[0, k + 1], atol=1e-4)  # t_k feeds t_{k+1}'s


def test_fine_tuning_combination_sees_every_state():
    model = model_of()
    ids, mask = sample()
    with torch.no_grad():
        out = model.encode(ids, mask, full_context=True)
        for j in range(10):
            out_j = model.encode(changed(ids, 0, j), mask, full_context=True)
            for i in range(10):
                assert not torch.allclose(out_j["hidden"][0, i], out["hidden"][0, i], atol=1e-5), (i, j)
        assert out["hidden"].shape == (2, 10, 32)
        assert len(out["layers"]) == 2 + 2 and all(x.shape == (2, 10, 32) for x in out["layers"])
        assert torch.equal(out["hidden"][1, 8:], torch.zeros(2, 32))  # padding is zero
        masked = model.encode(ids, mask, full_context=False)["hidden"]
        t, h = states(model, ids, mask)
        assert torch.allclose(masked[0], h[0], atol=1e-6)


@pytest.mark.parametrize("input_kind", ["bpe", "char_cnn"])
@pytest.mark.parametrize("objective", ["cloze", "bilm", "cloze-bilm"])
def test_every_parameter_gets_a_gradient(objective, input_kind):
    extra = (
        dict(char_dim=8, char_filters=[[1, 4], [2, 8], [3, 8]], max_word_chars=6) if input_kind == "char_cnn" else {}
    )
    model = model_of(objective=objective, input=input_kind, **extra).train()
    ids, mask = sample(T=24, B=4)
    out = model(ids, mask)
    assert set(out["loss_terms"]) == set(count_targets({"input_ids": ids, "attention_mask": mask}, objective))
    out["loss"].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_adaptive_tail_bands_stay_in_the_graph_without_targets():
    """DDP needs every parameter in every step's graph, also a tail band no target falls in."""
    model = model_of(input="char_cnn", char_dim=8, char_filters=[[1, 4]], max_word_chars=4).train()
    ids = torch.tensor([[BOS, 1, 2, 1, EOS]])  # cloze targets 1, 2, 1: all in the head band (ids < 3)
    model(ids)["loss"].backward()
    for name, p in model.adaptive_softmax.tail.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() == 0, name


def test_target_counts_match_the_model_terms():
    ids, mask = sample()
    counts = count_targets({"input_ids": ids, "attention_mask": mask}, "cloze-bilm")
    assert counts == {"cloze": 8 + 6, "bilm_fwd": 9 + 7, "bilm_bwd": 9 + 7}
    model = model_of(objective="cloze-bilm").train()
    out = model(ids, mask)
    w = model.config.bilm_weight
    assert torch.allclose(out["loss_terms"]["bilm_fwd"], w * out["bilm_fwd_loss"])
    assert torch.allclose(out["loss"], out["cloze_loss"] + w * (out["bilm_fwd_loss"] + out["bilm_bwd_loss"]))


@pytest.mark.parametrize("objective", ["cloze", "cloze-bilm"])
def test_overfits_a_small_batch(objective):
    model = model_of(objective=objective, dropout=0.0, attention_dropout=0.0, relu_dropout=0.0).train()
    ids, mask = sample(T=12, B=4, seed=3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(150):
        out = model(ids, mask)
        first = first if first is not None else float(out["cloze_loss"])
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    assert first > 3.0 and float(out["cloze_loss"]) < 0.3, (first, float(out["cloze_loss"]))


@pytest.mark.parametrize("input_kind", ["bpe", "char_cnn"])
def test_save_load_round_trip(tmp_path, input_kind):
    texts = [d.replace("\n", " ") for d in synthetic_docs(4)]
    tok = train_cloze_tokenizer(None, 120, "bpe" if input_kind == "bpe" else "words", texts=texts)
    extra = dict(char_dim=8, char_filters=[[1, 4], [2, 8]], max_word_chars=8) if input_kind == "char_cnn" else {}
    torch.manual_seed(0)
    model = build_model(cloze_config("tiny", input=input_kind, **extra), tok).eval()
    model.save_pretrained(tmp_path / "m", tokenizer=tok)
    loaded, tok2 = load_two_tower(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "cloze-two-tower"
    assert tok2.get_vocab() == tok.get_vocab()
    enc = tok2.encode(texts[0][:200]).ids.tolist()
    ids = torch.tensor([[model.config.bos_id, *enc, model.config.eos_id]])
    with torch.no_grad():
        a, b = model.encode(ids), loaded.encode(ids)
        assert torch.equal(a["hidden"], b["hidden"])
        assert all(torch.equal(x, y) for x, y in zip(a["layers"], b["layers"]))
        assert torch.equal(model(ids)["loss"], loaded(ids)["loss"])


def test_loading_something_else_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(SpanBertError, match="expected 'cloze-two-tower'"):
        load_two_tower(tmp_path)


def test_a_model_spec_sets_the_config_fields():
    # the presets and the spec's form are tested in test_cloze_config.py; here its values reach the config
    cfg = cloze_config("tiny:input=char_cnn,dropout=0,char_filters=[[1;4];[2;8]]", vocab_size=V)
    assert cfg.input == "char_cnn" and cfg.dropout == 0.0 and cfg.char_filters == [[1, 4], [2, 8]]
    assert cfg.vocab_size == V and cfg.d_model == 64
    for spec, text in [
        ("tiny:query=mean", "query"),
        ("tiny:char_filters=[1;", "expected a JSON list"),
    ]:
        with pytest.raises(SpanBertError, match=text):
            cloze_config(spec)


def test_twelve_final_heads_over_an_indivisible_width():
    model = model_of(d_model=32, final_heads=3)  # as 12 heads over d = 1024 (Table 1, base)
    ids, mask = sample()
    with torch.no_grad():
        assert model.encode(ids, mask)["hidden"].shape == (2, 10, 32)


def test_adaptive_softmax_bands_scale_with_the_vocabulary():
    assert adaptive_cutoffs(700_000) == [60_000, 220_000]  # §5.2: 60K at d, 160K at d/4, the rest at d/16
    assert adaptive_cutoffs(7000) == [600, 2200]
    assert adaptive_cutoffs(V) == [3, 13]
    m = model_of(input="char_cnn", char_dim=8, char_filters=[[1, 4]], max_word_chars=4)
    head_band, mid, rest = 3, 13 - 3, V - 13
    assert m.adaptive_softmax.head.in_features == 32 and m.adaptive_softmax.head.out_features == head_band + 2
    assert [x.out_features for x in m.adaptive_softmax.tail[0]] == [32 // 4, mid]  # d/4
    assert [x.out_features for x in m.adaptive_softmax.tail[1]] == [32 // 16, rest]  # d/16


def test_word_tokenizer_is_deterministic_and_has_the_markers():
    texts = [d.replace("\n", " ") for d in synthetic_docs(3)]
    a = train_cloze_tokenizer(None, 30, "words", texts=texts)
    b = train_cloze_tokenizer(None, 30, "words", texts=list(reversed(texts)))
    assert a.get_vocab() == b.get_vocab()
    assert a.pad_id == 0 and {"<s>", "</s>", "<sep>"} <= set(a.get_vocab())
    assert a.encode("the river flows").ids.tolist() == [a.token_to_id(w) for w in ("the", "river", "flows")]


def test_paper_schedule_and_optimizer(tmp_path):
    from spanbert.optim import cosine_lambda, make_optimizer
    from spanbert.training_args import TrainingArguments

    args = cloze.paper_training_arguments(TrainingArguments(output_dir=str(tmp_path), warmup_steps=16_000))
    assert (args.optim, args.momentum, args.max_grad_norm, args.weight_decay) == ("nesterov", 0.99, 0.1, 0.0)
    f = cosine_lambda(100_000, args.warmup_steps, args.learning_rate, args.warmup_init_lr, args.min_lr)
    assert f(0) == pytest.approx(1e-7)  # §5.2: 1e-7 -> 1 over 16K steps, cosine to 1e-4
    assert f(8_000) == pytest.approx(0.5, rel=1e-6)
    assert f(16_000) == pytest.approx(1.0)
    assert f(58_000) == pytest.approx(1e-4 + 0.5 * (1 - 1e-4))
    assert f(100_000) == pytest.approx(1e-4)
    p = torch.nn.Parameter(torch.ones(3))
    opt = make_optimizer([{"params": [p], "lr": 1.0, "weight_decay": 0.0}], args, torch.device("cpu"))
    g = opt.param_groups[0]
    assert isinstance(opt, torch.optim.SGD) and g["nesterov"] and g["momentum"] == 0.99 and g["weight_decay"] == 0.0


# ---------------------------------------------------------------------------------------------
# spanbert pretrain --system cloze|bilm|cloze-bilm


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("cloze_corpus") / "corpus.txt"
    path.write_text("\n\n".join(synthetic_docs()) + "\n")
    return path


@pytest.fixture(scope="module")
def prepared(text, tmp_path_factory):
    """The corpus tokenized once with one BPE vocabulary: runs compared weight for weight must share
    it (HF's BPE trainer is not bit-reproducible between calls, see docs/cloze.md)."""
    from spanbert.preprocess import preprocess

    root = tmp_path_factory.mktemp("cloze_prepared")
    tok = train_cloze_tokenizer([text], 150, "bpe", output_dir=root / "tok")
    return preprocess([text], tok, root / "pre", progress=False)


def job(text, out, system="cloze", model="tiny", vocab_size=150, **kw):
    # a prepared corpus brings its own vocabulary: a --vocab_size beside it would be refused (issue 58)
    sized = {} if vocab_size is None else {"vocab_size": vocab_size}
    cfg = PretrainConfig(system=system, model=model, corpus=str(text), max_seq_length=32, eval_fraction=0.2,
                         max_eval_blocks=8, tokens_per_update=0, num_proc=0, **sized)  # fmt: skip
    base = dict(output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=1, max_steps=4,
                warmup_steps=1, learning_rate=1e-3, save_steps=2, eval_steps=2, logging_steps=2, device="cpu",
                report_to="none", disable_tqdm=True, max_tokens_per_batch=0)  # fmt: skip
    return cfg, TrainingArguments(**{**base, **kw})


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("system", ["cloze", "bilm", "cloze-bilm"])
def test_pretrain_each_system_end_to_end(text, tmp_path, system):
    cfg, args = job(text, tmp_path / "run", system=system)
    final = pretrain(cfg, args).model_dir
    model, tok = load_two_tower(final)
    assert model.config.objective == system and tok.token_to_id("<s>") == model.config.bos_id
    metrics = json.loads((final / "train_metrics.json").read_text())
    key = "cloze_loss" if system != "bilm" else "bilm_fwd_loss"
    assert math.isfinite(metrics[f"eval/{key}"] if f"eval/{key}" in metrics else metrics[key])
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert any(k.endswith(key) for r in log for k in r)


def test_the_earlier_dataset_builder_still_builds_two_tower_blocks(prepared):
    # `build_cloze_datasets` is kept for callers of the API before the one pipeline (issue 30)
    from spanbert import cloze
    from spanbert.pretrain_data import build_cloze_datasets

    cfg, _ = job(prepared, prepared)
    train_set, eval_set = build_cloze_datasets(cfg, prepared, cloze.cloze_config("tiny", objective="cloze"))
    assert len(train_set) > 0 and eval_set is not None and len(eval_set) > 0


def test_pretrain_char_cnn_words(text, tmp_path):
    spec = "tiny:input=char_cnn,char_dim=8,char_filters=[[1;8];[2;8];[3;8]]"
    cfg, args = job(text, tmp_path / "run", model=spec, max_steps=2)
    final = pretrain(cfg, args).model_dir
    model, tok = load_two_tower(final)
    assert model.config.input == "char_cnn" and hasattr(model, "adaptive_softmax")
    assert type(tok.hf.model).__name__ == "WordLevel"
    assert json.loads((final / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_resume_is_exact(prepared, tmp_path):
    cfg, args = job(prepared, tmp_path / "straight", vocab_size=None, max_steps=4)
    pretrain(cfg, args)
    cfg, args = job(prepared, tmp_path / "split", vocab_size=None, max_steps=4, stop_at_step=2)
    pretrain(cfg, args)
    cfg, args = job(prepared, tmp_path / "split", vocab_size=None, max_steps=4, resume=True)
    pretrain(cfg, args)
    a, b = weights(tmp_path / "straight" / "final"), weights(tmp_path / "split" / "final")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_cloze_options_are_refused_clearly(text, tmp_path):
    cfg, args = job(text, tmp_path / "run")
    with pytest.raises(SpanBertError, match="--masking"):
        pretrain(dataclasses.replace(cfg, masking="span"), args)
    assert not (tmp_path / "run").exists()


DDP = r"""
import sys, torch
from spanbert.pretrain import pretrain_cloze
from spanbert.pretrain_config import PretrainConfig
from spanbert.training_args import TrainingArguments
text, out, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = PretrainConfig(system="cloze-bilm", model="tiny", corpus=text, max_seq_length=32,
                     eval_fraction=0.2, max_eval_blocks=8, tokens_per_update=0, num_proc=0)
args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                         max_steps=3, warmup_steps=1, learning_rate=1e-3, save_steps=0, eval_steps=3,
                         device="cpu", report_to="none", disable_tqdm=True, max_tokens_per_batch=0)
pretrain_cloze(cfg, args, model_overrides=dict(dropout=0.0, attention_dropout=0.0, relu_dropout=0.0))
"""


@pytest.mark.slow
def test_two_processes_equal_one(prepared, tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for nproc, batch in ((1, 4), (2, 2)):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script)]
        proc = subprocess.run(cmd + [str(prepared), str(tmp_path / f"n{nproc}"), str(batch)], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    a, b = weights(tmp_path / "n1" / "final"), weights(tmp_path / "n2" / "final")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    m1 = json.loads((tmp_path / "n1" / "final" / "train_metrics.json").read_text())
    m2 = json.loads((tmp_path / "n2" / "final" / "train_metrics.json").read_text())
    for k in m1:
        if k.startswith("eval/"):
            assert m2[k] == pytest.approx(m1[k], rel=1e-5), k


def test_pretraining_with_the_paper_optimizer_runs(text, tmp_path):
    """`optimizer=nesterov` through the CLI: SGD with Nesterov momentum under the cosine schedule (on the
    module's small corpus: the built-in one cost 40 s of vocabulary and preprocessing for 4 steps)."""
    run = tmp_path / "run"
    code = main(["pretrain", "--system", "cloze", "--model", "tiny:optimizer=nesterov", "--max_steps", "4",
                 "--corpus", str(text),
                 "--warmup_steps", "2", "--max_seq_length", "32", "--vocab_size", "200", "--max_eval_blocks", "0",
                 "--output_dir", str(run), "--disable_tqdm", "--report_to", "none", "--device", "cpu"])  # fmt: skip
    assert code == 0
    state = json.loads(next(run.glob("checkpoint-*/trainer_state.json")).read_text())
    assert state["args"]["optim"] == "nesterov" and state["args"]["lr_scheduler_type"] == "cosine"
    assert state["args"]["max_grad_norm"] == 0.1 and state["args"]["learning_rate"] == 1.0
