"""Malformed input to `spanbert pretrain`, `spanbert preprocess` and `spanbert tokenizer train`: each
case is a clean error (exit 2, `error: ` naming the file or option, no traceback) raised before any work,
with nothing left behind in the folder it was given."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

TEXT = (
    "The river flows past old stone bridges.\nMerchants sell bread and fish to travellers.\n\n"
    "Boats arrive each morning before the bells ring.\nThe valley is quiet.\n"
) * 3


def _text(tmp: Path, name: str = "corpus.txt", content: str | bytes = TEXT) -> Path:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def good_corpus(tmp_path_factory) -> Path:
    """A valid preprocessed corpus that the cases copy and damage."""
    from spanbert.preprocess import preprocess
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("good")
    text = _text(root)
    tok = train_tokenizer([text], vocab_size=120, output_dir=root / "tok", show_progress=False)
    return preprocess([text], tok, root / "pre", progress=False, num_workers=1)


def _damaged(tmp: Path, good: Path, damage: Callable[[Path], None]) -> Path:
    import shutil

    pre = tmp / "pre"
    shutil.copytree(good, pre)
    damage(pre)
    return pre


def _edit_meta(fn: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(pre: Path) -> None:
        meta = json.loads((pre / "meta.json").read_text())
        result = fn(meta)
        (pre / "meta.json").write_text(json.dumps(meta if result is None else result))

    return damage


def _truncate(name: str, keep: int = 3) -> Callable[[Path], None]:
    def damage(pre: Path) -> None:
        data = (pre / name).read_bytes()
        (pre / name).write_bytes(data[:keep])

    return damage


def _pretrain(tmp: Path, *argv: str) -> list[str]:
    return ["pretrain", "--output_dir", str(tmp / "run"), "--disable_tqdm", "--max_steps", "1", *argv]


def _yaml(tmp: Path, content: str) -> Path:
    return _text(tmp, "config.yaml", content)


# (build(tmp, good_corpus) -> (argv, the file or option the message names))
CASES = [
    # ---- pretrain: the corpus
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(t / "missing.txt")), "missing.txt"), id="pretrain-missing-corpus"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_text(t, content=b"caf\xe9 ok\n\nmore text\n"))), "corpus.txt"), id="pretrain-non-utf8-corpus"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_text(t, "c.jsonl", '{"text": "fine"}\n{not json\n'))), "c.jsonl"), id="pretrain-bad-jsonl"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_text(t, "c.jsonl", '{"body": "no text field"}\n'))), "c.jsonl"), id="pretrain-jsonl-without-text"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_text(t, content="\n\n  \n"))), "corpus.txt"), id="pretrain-empty-corpus"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str((t / "empty_dir").mkdir() or t / "empty_dir")), "empty_dir"), id="pretrain-folder-without-text"),
    # ---- pretrain: a damaged `spanbert preprocess` folder is never read as text
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _truncate("meta.json", 40)))), "meta.json"), id="meta-truncated"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: [m])))), "meta.json"), id="meta-not-an-object"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: m.update(format="v0"))))), "meta.json"), id="meta-wrong-format"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: m.pop("shards"))))), "meta.json"), id="meta-no-shards"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: m.update(num_tokens=m["num_tokens"] + 5))))), "meta.json"), id="meta-wrong-token-count"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: m.update(vocab_size="many"))))), "meta.json"), id="meta-vocab-not-int"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _truncate("shard-00000.ids")))), "shard-00000.ids"), id="ids-truncated"),
    # a shard that says it stores its word starts (meta.json), without the file; and one derived from the ids without the table
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _edit_meta(lambda m: m["shards"][0].pop("word_starts") and None)))), "shard-00000.starts"), id="starts-missing"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, lambda p: (p / "word_starts.npy").unlink()))), "word_starts.npy"), id="word-start-table-missing"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _truncate("shard-00000.docs", 8)))), "shard-00000.docs"), id="docs-short"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, _truncate("shard-00000.paras", 5)))), "shard-00000.paras"), id="paras-odd-size"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, lambda p: (p / "unigram.npy").unlink()))), "unigram.npy"), id="unigram-missing"),
    pytest.param(lambda t, g: (_pretrain(t, "--corpus", str(_damaged(t, g, lambda p: np.save(p / "unigram.npy", np.zeros(3, np.int64))))), "unigram.npy"), id="unigram-wrong-size"),
    # ---- pretrain: options
    pytest.param(lambda t, g: (_pretrain(t, "--system", "roberta"), "--system"), id="unknown-system"),
    pytest.param(lambda t, g: (_pretrain(t, "--model", "huge"), "--model"), id="unknown-model"),
    pytest.param(lambda t, g: (_pretrain(t, "--masking", "random"), "--masking"), id="unknown-masking"),
    pytest.param(lambda t, g: (_pretrain(t, "--mask_prob", "1.5"), "--mask_prob"), id="mask-prob-above-1"),
    pytest.param(lambda t, g: (_pretrain(t, "--geometric_p", "0"), "--geometric_p"), id="geometric-p-zero"),
    pytest.param(lambda t, g: (_pretrain(t, "--eval_fraction", "1.5"), "--eval_fraction"), id="eval-fraction-above-1"),
    pytest.param(lambda t, g: (_pretrain(t, "--eval_fraction", "0"), "--eval_fraction"), id="eval-fraction-zero"),
    pytest.param(lambda t, g: (_pretrain(t, "--num_proc", "-1"), "--num_proc"), id="negative-num-proc"),
    pytest.param(lambda t, g: (_pretrain(t, "--max_seq_length", "4"), "--max_seq_length"), id="max-seq-length-too-short"),
    pytest.param(lambda t, g: (_pretrain(t, "--pad_to", "64", "--max_seq_length", "128"), "--pad_to"), id="pad-to-below-seq-length"),
    pytest.param(lambda t, g: (_pretrain(t, "--vocab_size", "3"), "--vocab_size"), id="vocab-size-too-small"),
    pytest.param(lambda t, g: (_pretrain(t, "--tokenizer", str((t / "no_tok").mkdir() or t / "no_tok")), "no_tok"), id="tokenizer-folder-empty"),
    pytest.param(lambda t, g: (_pretrain(t, "--init-from", str(t / "no_ckpt")), "config.json"), id="init-from-missing"),
    pytest.param(lambda t, g: (_pretrain(t, "--init-from", str(_checkpoint(t, 64)), "--max_seq_length", "128"), "--max_seq_length"), id="seq-length-above-positions"),
    pytest.param(lambda t, g: (_pretrain(t, "--device", "tpu"), "device"), id="unknown-device"),
    pytest.param(lambda t, g: (_pretrain(t, "--learning_rate", "-1"), "--learning_rate"), id="negative-learning-rate"),
    pytest.param(lambda t, g: (_pretrain(t, "--adam_beta1", "1.5"), "--adam_beta1"), id="beta-above-1"),
    pytest.param(lambda t, g: (_pretrain(t, "--warmup_steps", "-1"), "--warmup_steps"), id="negative-warmup"),
    pytest.param(lambda t, g: (_pretrain(t, "--resume", "--overwrite_output_dir"), "--overwrite_output_dir"), id="resume-and-overwrite"),
    pytest.param(lambda t, g: (_pretrain(t, "learnin_rate=3"), "learnin_rate"), id="unknown-override"),
    pytest.param(lambda t, g: (_pretrain(t, "--output_name", "a/b"), "--output_name"), id="output-name-with-slash"),
    pytest.param(lambda t, g: (_pretrain(t, "--output_dir", str(_previous_run(t))), "previous"), id="existing-output-dir"),
    # ---- pretrain: YAML
    pytest.param(lambda t, g: (_pretrain(t, "--config", str(_yaml(t, "PretrainConfig: 3\n"))), "config.yaml"), id="yaml-section-scalar"),
    pytest.param(lambda t, g: (_pretrain(t, "--config", str(_yaml(t, "MaskingConfig:\n  mask_rate: 0.2\n"))), "config.yaml"), id="yaml-unknown-key-in-section"),
    pytest.param(lambda t, g: (_pretrain(t, "--config", str(_yaml(t, "learnig_rate: 0.1\n"))), "config.yaml"), id="yaml-unknown-key"),
    pytest.param(lambda t, g: (_pretrain(t, "--config", str(_yaml(t, "TrainingArguments:\n  max_steps: many\n"))), "config.yaml"), id="yaml-wrong-type"),
    pytest.param(lambda t, g: (_pretrain(t, "--config", str(_yaml(t, "system: [bert\n"))), "config.yaml"), id="yaml-not-yaml"),
    # ---- preprocess
    pytest.param(lambda t, g: (_preprocess(t, g, str(t / "missing.txt")), "missing.txt"), id="preprocess-missing-corpus"),
    pytest.param(lambda t, g: (_preprocess(t, g, str(_text(t, content=b"ok\n\xff\xfe\n"))), "corpus.txt"), id="preprocess-non-utf8"),
    pytest.param(lambda t, g: (_preprocess(t, g, str(_text(t, "c.jsonl", '{"text": 3}\n'))), "c.jsonl"), id="preprocess-jsonl-text-not-string"),
    pytest.param(lambda t, g: (_preprocess(t, g, str(_text(t, content="\n"))), "corpus.txt"), id="preprocess-empty-corpus"),
    pytest.param(lambda t, g: (["preprocess", "--corpus", str(_text(t)), "--tokenizer", str(t / "no_tok"), "--output_dir", str(t / "out")], "no_tok"), id="preprocess-missing-tokenizer"),
    pytest.param(lambda t, g: (_preprocess(t, g, str(_text(t)), "--num_workers", "-2"), "--num_workers"), id="preprocess-negative-workers"),
    # ---- tokenizer train
    pytest.param(lambda t, g: (["tokenizer", "train", "--corpus", str(t / "missing.txt"), "--output_dir", str(t / "tok")], "missing.txt"), id="tokenizer-missing-corpus"),
    pytest.param(lambda t, g: (["tokenizer", "train", "--corpus", str(_text(t, content=b"\xff\xfe\xfa\n")), "--output_dir", str(t / "tok")], "corpus.txt"), id="tokenizer-non-utf8"),
]


def _preprocess(tmp: Path, good: Path, corpus: str, *argv: str) -> list[str]:
    return ["preprocess", "--corpus", corpus, "--tokenizer", str(good / "tokenizer"), "--output_dir", str(tmp / "out"), "--quiet", *argv]


def _checkpoint(tmp: Path, positions: int) -> Path:
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining

    ckpt = tmp / "ckpt"
    SpanBertForPreTraining(model_config("tiny", vocab_size=100, max_position_embeddings=positions)).save_pretrained(ckpt)
    return ckpt


def _previous_run(tmp: Path) -> Path:
    run = tmp / "previous"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "latest").write_text("checkpoint-2\n")
    return run


@pytest.mark.parametrize("build", CASES)
def test_malformed_pretrain_input(build, tmp_path, good_corpus, cli_error):
    argv, names = build(tmp_path, good_corpus)
    cli_error(argv, names=names, out=tmp_path)


def test_preprocess_never_replaces_what_it_did_not_write(tmp_path, good_corpus, cli_error, capsys):
    # issue 30, audit item 1: `--output_dir X` once replaced a file X, or a folder of the user's files,
    # by the corpus folder (exit 0). Now each is refused before any work, and nothing changes on disk.
    from spanbert.cli import main

    text = str(_text(tmp_path))
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("keep me too\n")
    cases = [
        (afile, "found a file, expected a folder"),
        (notes, "found a folder holding other files (notes.txt)"),
        (afile / "corpus", f"found a file at {afile}"),
    ]
    for out, contains in cases:
        argv = ["preprocess", "--corpus", text, "--tokenizer", str(good_corpus / "tokenizer"), "--output_dir", str(out), "--quiet"]
        cli_error(argv, names=out, contains=contains, out=tmp_path)
    assert afile.read_text() == "keep me\n" and (notes / "notes.txt").read_text() == "keep me too\n"
    # an earlier corpus of the same command is replaced, as before
    corpus = tmp_path / "corpus"
    argv = ["preprocess", "--corpus", text, "--tokenizer", str(good_corpus / "tokenizer"), "--output_dir", str(corpus), "--quiet"]
    assert main(argv) == 0 and main(argv) == 0
    assert (corpus / "meta.json").is_file()
