"""Pre-training: every system overfits a batch, the job runs end to end, `fill` uses both heads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spanbert import data
from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.masking import MaskingConfig
from spanbert.model import SpanBertForPreTraining
from spanbert.pretrain import SYSTEMS, PretrainConfig, fill, main, pretrain
from spanbert.tokenization import train_tokenizer
from spanbert.trainer import TrainingArguments

WORDS = (
    "the river flows past old stone bridges while merchants sell bread and fish to travellers who "
    "arrive by boat each morning before the bells of the cathedral ring across the quiet valley"
).split()


def synthetic_docs(n_docs: int = 12, n_paras: int = 6) -> list[str]:
    g = torch.Generator().manual_seed(0)
    docs = []
    for _ in range(n_docs):
        paras = []
        for _ in range(n_paras):
            idx = torch.randint(len(WORDS), (24,), generator=g).tolist()
            paras.append(" ".join(WORDS[i] for i in idx).capitalize() + ".")
        docs.append("\n".join(paras))
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    text = root / "corpus.txt"
    text.write_text("\n\n".join(synthetic_docs()) + "\n")
    tok = train_tokenizer([text], vocab_size=200, output_dir=root / "tok", show_progress=False)
    out = data.preprocess([text], tok, root / "pre", progress=False)
    return root, text, tok, out


def corpus_with_candidates(out) -> data.TokenCorpus:
    """The corpus with synthetic entity / noun-phrase candidates (spaCy's are tested in test_data.py):
    every whole word that starts at a multiple of 7 tokens, as if it were a mention."""
    tc = data.TokenCorpus(out)
    _, word_starts = tc.tokens(0, tc.num_tokens)  # the test corpus is one shard
    starts = np.flatnonzero(word_starts)
    ends = np.append(starts[1:], tc.num_tokens) - 1
    keep = starts % 7 == 0
    spans = np.stack([starts[keep], ends[keep]], 1).astype(np.int64)
    tc.candidate_spans = {"entity": spans, "noun_phrase": spans}
    return tc


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_each_system_overfits_one_batch(corpus, system):
    _, _, tok, out = corpus
    scheme, mode, sbo, short = SYSTEMS[system]
    source = corpus_with_candidates(out) if scheme in ("named_entity", "noun_phrase") else out
    ds = data.PretrainDataset(source, tok, max_seq_length=48, mode=mode, short_seq_prob=short, seed=1,
                              masking=MaskingConfig(scheme=scheme))
    ds.set_epoch(0)
    batch = data.collate_pretrain([ds[i] for i in range(4)])
    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = SpanBertForPreTraining(cfg, sbo=sbo, nsp=mode == "nsp")
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    first = None
    for _ in range(150):
        out_ = model(**batch)
        first = first if first is not None else float(out_["loss"].detach())
        out_["loss"].backward()
        opt.step()
        opt.zero_grad()
    final = model(**batch)
    assert float(final["loss"]) < 0.05 * first and float(final["loss"]) < 0.3, (system, first, float(final["loss"]))
    assert float(final["mlm_acc"]) == 1.0
    if sbo:
        assert "sbo_loss" in final and float(final["sbo_acc"]) > 0.95
    if mode == "nsp":
        assert float(final["nsp_acc"]) == 1.0


@pytest.mark.parametrize("system", ["named_entity", "noun_phrase"])
def test_linguistic_schemes_need_candidates(corpus, system):
    _, _, tok, out = corpus
    with pytest.raises(SpanBertError, match="candidate"):
        data.PretrainDataset(out, tok, max_seq_length=48, masking=MaskingConfig(scheme=system))


def test_pretrain_job_end_to_end_and_resume(corpus, tmp_path):
    _, text, _, _ = corpus
    cfg = PretrainConfig(corpus=str(text), model="tiny", vocab_size=200, max_seq_length=48, num_proc=0, eval_fraction=0.1)
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=8, per_device_train_batch_size=4, learning_rate=1e-3,
        warmup_steps=2, save_steps=4, eval_steps=4, logging_steps=2, disable_tqdm=True, report_to="none",
    )
    final = pretrain(cfg, args)
    assert (final / "config.json").exists() and (final / "vocab.txt").exists()
    meta = json.loads((final / "config.json").read_text())["spanbert"]
    assert meta["system"] == "spanbert" and meta["sbo"] is True
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert any("eval/mlm_loss" in r and "eval/sbo_loss" in r for r in log)
    assert any("train/sbo_acc" in r for r in log)
    # the exported model loads in transformers as a masked LM
    transformers = pytest.importorskip("transformers")
    transformers.BertForMaskedLM.from_pretrained(final)
    tok = transformers.AutoTokenizer.from_pretrained(final)
    assert tok.tokenize("The River") == ["The", "River"] or tok.tokenize("The River")[0] != "the"


def test_init_from_continues_a_checkpoint(corpus, tmp_path):
    _, text, tok, out = corpus
    torch.manual_seed(0)
    base = SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=False)
    base.save_pretrained(tmp_path / "hf", tokenizer=tok)
    cfg = PretrainConfig(corpus=str(out), init_from=str(tmp_path / "hf"), max_seq_length=48)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=2,
                             disable_tqdm=True, report_to="none", save_steps=0)
    final = pretrain(cfg, args)
    model = SpanBertForPreTraining.from_pretrained(final)
    assert model.cls.span_predictions is not None  # SBO added on top of the BERT checkpoint


def test_cli_rejects_unknown_options(capsys):
    with pytest.raises(SpanBertError, match="valid options"):
        main(["--max_steps", "1", "learnin_rate=3"])
    with pytest.raises(SpanBertError, match="unknown system"):
        pretrain(PretrainConfig(system="roberta"), TrainingArguments())


def test_fill_with_both_heads(corpus, tmp_path):
    _, _, tok, _ = corpus
    torch.manual_seed(0)
    model = SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size))
    for head in ("mlm", "sbo"):
        out = fill(model, tok, "the river {MASK*2} past old stone bridges", head=head, top_k=3)
        assert len(out["predictions"]) == 2 and len(out["predictions"][0]["candidates"]) == 3
        assert "[MASK]" not in out["text"]
    with pytest.raises(SpanBertError, match="no \\[MASK\\]"):
        fill(model, tok, "no masks here")
    with pytest.raises(SpanBertError, match="span boundary head"):
        fill(SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=False), tok, "a [MASK]", head="sbo")
