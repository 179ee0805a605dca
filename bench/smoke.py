"""What the benchmarks' `--smoke` modes share: a tiny corpus made in seconds from the built-in text
(Python's reference-manual topics), so a smoke run needs no data and checks only that a script still
runs and prints its figures (tests/test_bench.py runs every script's smoke mode).
"""

from __future__ import annotations

from pathlib import Path

SMOKE_CHARS = 200_000


def tiny_text(folder: Path, chars: int = SMOKE_CHARS) -> Path:
    """The first ``chars`` characters of the built-in corpus, whole lines, as ``folder/corpus.txt``."""
    from spanbert.preprocess import builtin_corpus

    folder.mkdir(parents=True, exist_ok=True)
    full = builtin_corpus(folder / "builtin.txt")
    text = full.read_text(encoding="utf-8")[:chars]
    out = folder / "corpus.txt"
    out.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
    full.unlink()
    return out


def tiny_corpus(folder: Path, vocab_size: int = 2000) -> tuple[Path, Path]:
    """(tokenizer folder, preprocessed corpus folder) of `tiny_text`, under ``folder``."""
    from spanbert.preprocess import preprocess
    from spanbert.tokenization import train_tokenizer

    text = tiny_text(folder)
    train_tokenizer([text], vocab_size=vocab_size, output_dir=folder / "tok", show_progress=False)
    preprocess([text], folder / "tok", folder / "corpus", num_workers=0, progress=False)
    return folder / "tok", folder / "corpus"
