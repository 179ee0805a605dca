"""A pre-training run's data (`spanbert.pretrain_data`): the held-out split by whole documents, the corpus and
vocabulary prepared once and reused on resume (a resume with other data or settings refused), an interrupted
preparation leaving nothing."""

from __future__ import annotations

import numpy as np
import pytest
from test_pretrain import corpus  # noqa: F401 - the module-scoped tiny corpus fixture

from spanbert import preprocess as preprocess_module
from spanbert.blocks import held_out_documents
from spanbert.corpus import TokenCorpus
from spanbert.errors import SpanBertError
from spanbert.folders import MANIFEST
from spanbert.pretrain import pretrain
from spanbert.pretrain_config import PretrainConfig
from spanbert.training_args import TrainingArguments


def _doc_of(bounds: np.ndarray, start: int, end: int) -> int:
    """The document [start, end) lies in (asserting it lies inside one)."""
    d = int(np.searchsorted(bounds[:, 0], start, side="right")) - 1
    assert bounds[d, 0] <= start <= end <= bounds[d, 1], (start, end, bounds[d])
    return d


@pytest.mark.parametrize("system", ["spanbert", "bert"])
def test_held_out_split_is_by_documents_and_does_not_leak(corpus, system):  # noqa: F811
    _, _, tok, out = corpus
    from spanbert.pretrain_data import build_datasets

    cfg = PretrainConfig(system=system, max_seq_length=48, eval_fraction=0.25, max_eval_blocks=1000)
    train_set, eval_set = build_datasets(cfg, out, tok, seed=3)
    bounds = TokenCorpus(out).doc_bounds
    split = held_out_documents(bounds, 0.25, 2, 2)
    assert 0 < split < len(bounds)
    assert train_set.documents == (0, split) and eval_set.dataset.documents == (split, len(bounds))
    if system == "bert":  # both segments of every pair, the "random next" ones too, stay on their side
        assert (train_set.pairs[:, 4] == 1).any()
        for side, pairs in (("train", train_set.pairs), ("eval", eval_set.dataset.pairs)):
            for a0, a1, b0, b1, _ in pairs.tolist():
                docs = {_doc_of(bounds, a0, a1), _doc_of(bounds, b0, b1)}
                assert all((d < split) == (side == "train") for d in docs), (side, docs, split)
    else:
        for side, blocks in (("train", train_set.blocks), ("eval", eval_set.dataset.blocks)):
            for s, e in blocks.tolist():
                assert (_doc_of(bounds, s, e) < split) == (side == "train")
    # every token of the corpus is in exactly one of the two sets
    n_train = int((train_set.blocks[:, 1] - train_set.blocks[:, 0]).sum()) if system == "spanbert" else None
    if n_train is not None:
        n_eval = int((eval_set.dataset.blocks[:, 1] - eval_set.dataset.blocks[:, 0]).sum())
        assert n_train + n_eval == int(bounds[-1, 1] - bounds[0, 0])


def test_resume_reuses_the_prepared_data(corpus, tmp_path, capsys, monkeypatch):  # noqa: F811
    _, text, _, _ = corpus
    run = tmp_path / "run"
    cfg = PretrainConfig(corpus=str(text), model="tiny", vocab_size=200, max_seq_length=48, num_proc=0, eval_fraction=0.2)
    args = TrainingArguments(output_dir=str(run), max_steps=2, per_device_train_batch_size=4, save_steps=2,
                             disable_tqdm=True, report_to="none")
    final = pretrain(cfg, args).model_dir
    vocab = (run / "data" / "tokenizer" / "vocab.txt").read_bytes()
    assert (final / "vocab.txt").read_bytes() == vocab
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == [MANIFEST]  # no temporary folder left
    import spanbert.tokenization as tokenization

    def no_training(*a, **k):
        raise AssertionError("a resumed run trained a tokenizer")

    monkeypatch.setattr(tokenization, "train_tokenizer", no_training)
    monkeypatch.setattr(preprocess_module, "preprocess", no_training)
    capsys.readouterr()
    pretrain(cfg, dataclasses_replace(args, max_steps=4, resume=True))
    assert "reusing" in capsys.readouterr().out
    assert (final / "vocab.txt").read_bytes() == vocab
    # a fresh run into the same folder is refused before any work
    with pytest.raises(SpanBertError, match="--resume"):
        pretrain(cfg, args)
    # a resume with another corpus is refused before any work
    other = tmp_path / "other.txt"
    other.write_text(text.read_text())
    with pytest.raises(SpanBertError, match="prepared.json"):
        pretrain(dataclasses_replace(cfg, corpus=str(other)), dataclasses_replace(args, max_steps=6, resume=True))


def test_resume_with_changed_settings_is_refused(corpus, tmp_path):  # noqa: F811
    _, _, _, out = corpus
    cfg = PretrainConfig(corpus=str(out), model="tiny", max_seq_length=48, eval_fraction=0.2)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4,
                             save_steps=2, disable_tqdm=True, report_to="none")
    pretrain(cfg, args)
    for change in (dict(max_seq_length=40), dict(system="span-1seq"), dict(sbo_warmup_steps=4)):
        with pytest.raises(SpanBertError):
            pretrain(dataclasses_replace(cfg, **change), dataclasses_replace(args, max_steps=4, resume=True))


def dataclasses_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_interrupted_preparation_leaves_nothing(corpus, tmp_path, monkeypatch):  # noqa: F811
    """A kill while the data is prepared (here: an interrupt inside preprocessing, after the tokenizer
    was trained) leaves no `data/` (nor the new run folder); the next run prepares it cleanly."""
    _, text, _, _ = corpus
    run = tmp_path / "run"
    cfg = PretrainConfig(corpus=str(text), model="tiny", vocab_size=200, max_seq_length=48, num_proc=0)
    args = TrainingArguments(output_dir=str(run), max_steps=1, per_device_train_batch_size=4, save_steps=0,
                             disable_tqdm=True, report_to="none")
    real = preprocess_module.preprocess

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(preprocess_module, "preprocess", killed)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, args)
    assert not run.exists()
    monkeypatch.setattr(preprocess_module, "preprocess", real)
    final = pretrain(cfg, args).model_dir
    assert (final / "vocab.txt").read_bytes() == (run / "data" / "tokenizer" / "vocab.txt").read_bytes()
    assert sorted(p.name for p in (run / "data").iterdir()) == ["prepared.json", "preprocessed", "tokenizer"]
