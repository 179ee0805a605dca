"""BERT's left-to-right baseline (§5.1, Table 5 "LTR & No NSP", "+ BiLSTM"): causal attention in the
encoder, kept through save/load and in every task model; next-token pre-training; the QA biLSTM."""

from __future__ import annotations

import json

import pytest
import torch
from test_pretrain import synthetic_docs
from test_qa import synthetic_squad

from spanbert.collate import collate_pretrain, pretrain_target_counts
from spanbert.config import model_config
from spanbert.dataset import PretrainDataset
from spanbert.errors import SpanBertError
from spanbert.model import Encoder, SpanBertForPreTraining
from spanbert.preprocess import preprocess
from spanbert.pretrain import pretrain
from spanbert.pretrain_config import PretrainConfig
from spanbert.samplers import CausalLMBlocks
from spanbert.tasks.qa import SpanBertForQuestionAnswering
from spanbert.tokenization import train_tokenizer
from spanbert.training_args import TrainingArguments

VOCAB = 120


def causal_config(**overrides):
    return model_config("tiny", vocab_size=VOCAB, is_decoder=True, **overrides)


def _batch(padded: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (2, 12), generator=g)
    if not padded:
        return ids, None
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0
    ids[1, 9:] = 0
    return ids, mask


def _run(model, ids, mask, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)  # the same dropout masks in both runs of a perturbation pair
    return model(ids, attention_mask=mask)


@pytest.mark.parametrize("train", [False, True], ids=["eval-sdpa", "train-explicit-dropout"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padded-unpadded"])
def test_no_position_attends_to_a_later_one(train, padded):
    torch.manual_seed(0)
    enc = Encoder(causal_config()).train(train)
    ids, mask = _batch(padded)
    base = _run(enc, ids, mask)  # (B, T, H)
    for j in (1, 5, 8):
        changed = ids.clone()
        changed[:, j] = (changed[:, j] + 7) % (VOCAB - 5) + 5
        out = _run(enc, changed, mask)
        torch.testing.assert_close(out[:, :j], base[:, :j], atol=0, rtol=0)  # left of j: untouched, bit for bit
        assert (out[0, j:] - base[0, j:]).abs().amax() > 1e-3  # j onwards sees the change
    # the same weights without the flag are bidirectional: position 0 moves when position 5 does
    bidi = Encoder(model_config("tiny", vocab_size=VOCAB)).train(train)
    bidi.load_state_dict(enc.state_dict())
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 7) % (VOCAB - 5) + 5
    assert (_run(bidi, changed, mask)[:, 0] - _run(bidi, ids, mask)[:, 0]).abs().amax() > 1e-4


def test_left_padding_gives_finite_gradients():
    # a padded query before the first real token must not make a NaN softmax row (its gradient
    # would reach the real keys through the attention matmul)
    torch.manual_seed(0)
    enc = Encoder(causal_config()).train()
    ids = torch.randint(5, VOCAB, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :3] = 0
    enc(ids, attention_mask=mask)[mask.bool()].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in enc.parameters() if p.grad is not None)


def test_matches_transformers_causal_bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ours = Encoder(causal_config()).eval()
    hf = transformers.BertModel(transformers.BertConfig(**ours.config.to_hf_dict())).eval()
    hf.load_state_dict(ours.state_dict(), strict=False)
    for padded in (False, True):
        ids, mask = _batch(padded)
        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        with torch.no_grad():
            a = ours(ids, attention_mask=mask)
            b = hf(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-4)


def _causal_lm_item(ids: list[int]) -> dict:
    import numpy as np

    labels = np.full(len(ids), -100, dtype=np.int64)
    labels[:-1] = ids[1:]
    empty = np.zeros(0, dtype=np.int64)
    return {"input_ids": np.array(ids, dtype=np.int64), "labels": labels, "token_type_ids": np.zeros(len(ids), dtype=np.int64),
            "sbo_positions": empty, "sbo_left": empty, "sbo_right": empty, "sbo_rel": empty}  # fmt: skip


def test_flag_round_trips_and_task_models_keep_the_left_only_constraint(tmp_path):
    transformers = pytest.importorskip("transformers")
    from spanbert.tasks.classification import SequenceClassifier
    from spanbert.tasks.task_folders import load_encoder

    torch.manual_seed(0)
    lm = SpanBertForPreTraining(causal_config(), sbo=False, nsp=False).eval()
    lm.save_pretrained(tmp_path / "ltr")
    saved = json.loads((tmp_path / "ltr" / "config.json").read_text())
    assert saved["is_decoder"] is True and saved["architectures"] == ["BertLMHeadModel"]
    # transformers reads it as its causal BERT: the same next-token logits at every position
    hf = transformers.BertLMHeadModel.from_pretrained(tmp_path / "ltr").eval()
    assert hf.config.is_decoder
    ids, mask = _batch(padded=True)
    batch = collate_pretrain([_causal_lm_item(ids[0].tolist()), _causal_lm_item(ids[1, :9].tolist())])
    with torch.no_grad():
        ours = lm(**batch)["mlm_logits"]  # (N, V) at every position that has a next token
        ref = hf(ids, attention_mask=mask).logits.reshape(-1, VOCAB)[batch["mlm_positions"]]
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)

    # every task loads the encoder through Encoder.from_pretrained: still causal
    enc = load_encoder(tmp_path / "ltr", add_pooling_layer=True)
    assert enc.config.is_decoder
    qa_model = SpanBertForQuestionAnswering(enc.config, load_encoder(tmp_path / "ltr")).eval()
    changed = ids.clone()
    changed[:, 6] += 1
    with torch.no_grad():
        a, b = qa_model(ids, attention_mask=mask), qa_model(changed, attention_mask=mask)
    torch.testing.assert_close(a["start_logits"][:, :6], b["start_logits"][:, :6], atol=0, rtol=0)
    # ... and the fine-tuned model saved from it too
    from spanbert.tasks.qa import load_qa_model
    from spanbert.tasks.task_folders import save_finetuned
    from spanbert.tokenization import train_tokenizer as _train

    tok = _train(None, VOCAB, texts=["a b c d e f g h"] * 3, show_progress=False, min_frequency=1)
    save_finetuned(qa_model, tmp_path / "qa", tok, "BertForQuestionAnswering")
    assert load_qa_model(tmp_path / "qa")[0].bert.config.is_decoder

    # sentence classification pools the last real token (the only one that saw the whole input)
    clf = SequenceClassifier(enc, num_labels=3, dropout=0.0).eval()
    with torch.no_grad():
        both = clf(ids, attention_mask=mask)["logits"]  # (2, 3), row 1 padded after 9 tokens
        alone = clf(ids[1:, :9])["logits"]
        last = ids.clone()
        last[0, -1] += 1  # the last token of row 0 changes its sentence representation
        moved = clf(last, attention_mask=mask)["logits"]
    torch.testing.assert_close(both[1:], alone, atol=1e-5, rtol=1e-4)
    assert (moved[0] - both[0]).abs().amax() > 1e-4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltr_corpus")
    text = root / "corpus.txt"
    text.write_text("\n\n".join(synthetic_docs()) + "\n")
    tok = train_tokenizer([text], vocab_size=200, output_dir=root / "tok", show_progress=False)
    out = preprocess([text], tok, root / "pre", progress=False)
    return text, tok, out


def test_blocks_are_unmasked_and_labelled_with_the_next_token(corpus):
    _, tok, out = corpus
    masked = PretrainDataset(out, tok, max_seq_length=48, mode="single", seed=1)
    ltr = CausalLMBlocks(masked)
    assert len(ltr) == len(masked) and (ltr.lengths() == masked.lengths()).all()
    for i in (0, len(ltr) - 1):
        item = ltr[i]
        start, end = masked.blocks[i].tolist()
        ids = item["input_ids"]
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and (ids[1:-1] == masked.corpus.tokens(start, end)[0]).all()
        assert (item["labels"][:-1] == ids[1:]).all() and item["labels"][-1] == -100
    batch = collate_pretrain([ltr[0], ltr[1]])
    assert pretrain_target_counts(batch) == {"mlm": int(ltr.lengths()[:2].sum()) - 2, "sbo": 0}


def test_ltr_overfits_one_batch(corpus):
    _, tok, out = corpus
    ltr = CausalLMBlocks(PretrainDataset(out, tok, max_seq_length=32, mode="single", seed=1))
    batch = collate_pretrain([ltr[i] for i in range(4)])
    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=tok.vocab_size, is_decoder=True, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)  # fmt: skip
    model = SpanBertForPreTraining(cfg, sbo=False, nsp=False)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    first = float(model(**batch)["loss"].detach())
    for _ in range(150):
        model(**batch)["loss"].backward()
        opt.step()
        opt.zero_grad()
    final = model(**batch)
    # every position but [CLS] has a distinct left context; [CLS] -> first word is 4-way ambiguous
    assert float(final["loss"]) < 0.1 * first and float(final["mlm_acc"]) > 0.95, (first, float(final["loss"]))


def test_ltr_system_checks(corpus, tmp_path):
    text, tok, _ = corpus
    with pytest.raises(SpanBertError, match="--masking"):
        PretrainConfig(system="ltr", masking="span")
    torch.manual_seed(0)
    SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=False).save_pretrained(
        tmp_path / "bidi", tokenizer=tok
    )
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, disable_tqdm=True, report_to="none")
    with pytest.raises(SpanBertError, match="bidirectional checkpoint"):
        pretrain(PretrainConfig(system="ltr", corpus=str(text), init_from=str(tmp_path / "bidi"), max_seq_length=48), args)
    with pytest.raises(SpanBertError, match="--max_predictions"):
        pretrain(PretrainConfig(system="ltr", corpus=str(text), model="tiny", max_seq_length=48, max_predictions=20), args)
    assert not (tmp_path / "run").exists()


def test_bilstm_ignores_padding():
    torch.manual_seed(0)
    model = SpanBertForQuestionAnswering(causal_config(), bilstm=True).eval()
    ids, mask = _batch(padded=True)
    with torch.no_grad():
        both = model(ids, attention_mask=mask)["start_logits"]
        alone = model(ids[1:, :9])["start_logits"]
        changed = ids.clone()
        changed[0, 8] += 1
        moved = model(changed, attention_mask=mask)["start_logits"]
    torch.testing.assert_close(both[1, :9], alone[0], atol=1e-5, rtol=1e-4)
    assert (moved[0, :8] - both[0, :8]).abs().amax() > 1e-4  # the biLSTM gives earlier tokens right context


def test_ltr_pretrain_then_bilstm_squad_through_the_cli(corpus, tmp_path, capsys):
    from spanbert.cli import main

    text, _, _ = corpus
    common = ["--report_to", "none", "--disable_tqdm", "--device", "cpu"]
    rc = main(["pretrain", "--system", "ltr", "--model", "tiny", "--corpus", str(text), "--vocab_size", "200",
               "--max_seq_length", "48", "--max_steps", "4", "--tokens_per_update", "0", "--per_device_train_batch_size", "4",
               "--warmup_steps", "1", "--learning_rate", "1e-3", "--output_dir", str(tmp_path / "pt"), "--eval_fraction", "0.2",
               "--eval_steps", "4", "--save_steps", "0", "--num_proc", "0", *common])  # fmt: skip
    assert rc == 0
    final = tmp_path / "pt" / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["is_decoder"] is True and config["spanbert"]["system"] == "ltr" and config["spanbert"]["masking"] == "none"
    log = [json.loads(line) for line in (tmp_path / "pt" / "log.jsonl").read_text().splitlines()]
    assert any("eval/mlm_loss" in r for r in log) and not any("eval/sbo_loss" in r or "eval/nsp_loss" in r for r in log)
    assert "fill" not in capsys.readouterr().out  # its head predicts the next token, not a [MASK]

    train = tmp_path / "train.json"
    train.write_text(json.dumps(synthetic_squad(2)))
    out = tmp_path / "ft"
    rc = main(["finetune", "squad", "--model", str(final), "--train_file", str(train), "--output_dir", str(out),
               "--bilstm", "true", "--max_seq_length", "48", "--doc_stride", "16", "--max_steps", "3",
               "--per_device_train_batch_size", "4", "--logging_steps", "1", *common])  # fmt: skip
    assert rc == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["spanbert"]["bilstm"] is True and saved["is_decoder"] is True
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert sum("train/loss" in r for r in log) == 3
    preds = tmp_path / "preds.json"
    rc = main(["predict", "squad", "--model", str(out), "--data", str(train), "--output", str(preds), "--device", "cpu"])
    assert rc == 0 and len(json.loads(preds.read_text())) == 8
    # prediction reloads the trained biLSTM: the same logits as the model that was saved
    from spanbert.tasks.qa import load_qa_model

    model = load_qa_model(out)[0]
    assert model.bilstm is not None and model.bert.config.is_decoder


def test_bilstm_qa_learns(tmp_path):
    """The "+ BiLSTM" head on a causal encoder fits 8 questions through `finetune_qa`."""
    from test_qa import _texts

    from spanbert.tasks.qa import QAConfig, finetune_qa

    tok = train_tokenizer(None, 300, texts=_texts(synthetic_squad(2)) * 3, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, is_decoder=True), add_pooling_layer=False).save_pretrained(
        tmp_path / "enc", tokenizer=tok
    )
    train = tmp_path / "train.json"
    train.write_text(json.dumps(synthetic_squad(2)))
    targs = TrainingArguments(output_dir=str(tmp_path / "ft"), max_steps=150, learning_rate=2e-3, warmup_ratio=0.05,
                              per_device_train_batch_size=8, disable_tqdm=True, report_to="none", save_steps=0,
                              logging_steps=150, device="cpu")  # fmt: skip
    metrics = finetune_qa("squad", tmp_path / "enc", train, train, targs, QAConfig(max_seq_length=48, doc_stride=16, bilstm=True))
    assert metrics["f1"] >= 90.0, metrics
