"""Preprocessing in parts (`spanbert.corpus_parts`, `spanbert preprocess --parts N [--part K]`, `--merge`): parts of
whole files balanced by size, each an independent corpus folder; a killed run resumes part by part; the merge
equals the corpus made in one piece (token stream, documents, lines, word starts, summed unigram counts); a
part made from other input is refused; corpora made with another tokenizer are not merged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import synthetic_docs, write_txt

from spanbert.cli import main
from spanbert.corpus import TokenCorpus
from spanbert.corpus_parts import merge, part_files
from spanbert.errors import SpanBertError
from spanbert.preprocess import preprocess


@pytest.fixture
def texts(tmp_path) -> Path:
    folder = tmp_path / "text"
    folder.mkdir()
    for i in range(3):
        write_txt(folder / f"part{i}.txt", synthetic_docs(12, seed=i))
    return folder


def _same_corpus(a: Path, b: Path) -> None:
    x, y = TokenCorpus(a), TokenCorpus(b)
    assert x.num_tokens == y.num_tokens and x.num_docs == y.num_docs
    assert np.array_equal(x.doc_bounds, y.doc_bounds) and np.array_equal(x.para_starts, y.para_starts)
    for c0, c1 in zip(x.doc_bounds.tolist(), y.doc_bounds.tolist()):
        assert all(np.array_equal(p, q) for p, q in zip(x.tokens(*c0), y.tokens(*c1)))
    assert np.array_equal(x.unigram_counts(), y.unigram_counts())


def test_parts_are_runs_of_whole_files_balanced_by_size(tmp_path):
    files = []
    for i, size in enumerate([10, 10, 10, 70, 5, 5]):
        files.append(tmp_path / f"f{i}.txt")
        files[-1].write_text("x" * size)
    assert [len(g) for g in part_files(files, 2)] == [3, 3]  # 30 and 80 bytes: the nearest to halves
    assert [len(g) for g in part_files(files, 3)] == [3, 1, 2]
    assert [len(g) for g in part_files(files, 6)] == [1] * 6
    assert sum(part_files(files, 4), []) == files
    with pytest.raises(SpanBertError, match="--parts 7: found 6 input file"):
        part_files(files, 7)


def test_parts_resume_part_by_part_and_merge_to_the_one_piece_corpus(tmp_path, texts, tok_dir, capsys):
    one = preprocess(texts, tok_dir, tmp_path / "one", num_workers=1, progress=False)
    out = tmp_path / "corpus"
    argv = ["preprocess", "--corpus", str(texts), "--tokenizer", str(tok_dir), "--output_dir", str(out), "--parts", "2",
            "--num_workers", "1", "--quiet"]  # fmt: skip
    assert main([*argv, "--part", "1"]) == 0  # one machine builds part 1 ...
    first = tmp_path / "corpus.parts" / "part-00001-of-00002"
    assert (first / "meta.json").is_file() and not out.exists()
    assert "when every part is done" in capsys.readouterr().out
    built = (first / "meta.json").stat().st_mtime_ns
    # ... another is killed while building part 2: only its hidden temporary folder is left
    (tmp_path / "corpus.parts" / ".part-00002-of-00002.tmp-999").mkdir()
    assert main(argv) == 0  # the same command again: part 1 kept, part 2 built, both merged
    said = capsys.readouterr().out
    assert "part 1 of 2: " in said and "complete already, kept" in said and "part 2 of 2: 2 file(s) ->" in said
    assert "merged from 2 part(s)" in said
    assert (first / "meta.json").stat().st_mtime_ns == built
    assert not (tmp_path / "corpus.parts" / ".part-00002-of-00002.tmp-999").exists()  # the killed build's, removed
    _same_corpus(out, one)
    meta = json.loads((out / "meta.json").read_text())
    assert [m["num_tokens"] for m in meta["merged"]] == [TokenCorpus(first).num_tokens, meta["num_tokens"] - TokenCorpus(first).num_tokens]
    assert (out / "shard-00001.ids").stat().st_ino == (tmp_path / "corpus.parts" / "part-00002-of-00002" / "shard-00000.ids").stat().st_ino
    assert main(argv) == 0 and "complete already" in capsys.readouterr().out  # all there: a merge only


def test_a_part_made_from_other_input_is_refused(tmp_path, texts, tok_dir, cli_error):
    argv = ["preprocess", "--corpus", str(texts), "--tokenizer", str(tok_dir), "--output_dir", str(tmp_path / "c"),
            "--parts", "2", "--num_workers", "1", "--quiet"]  # fmt: skip
    assert main([*argv, "--part", "1"]) == 0
    with open(texts / "part0.txt", "a") as f:
        f.write("\nmore text in a new document\n")
    cli_error(argv, names="part-00001-of-00002", contains="made from other input or options (files differ)")
    cli_error([*argv, "--dupe_factor", "2"], contains="--dupe_factor: found it with --parts")
    cli_error(["preprocess", "--output_dir", str(tmp_path / "d")], contains="--corpus: found none")


def test_merge_adds_a_corpus_to_another(tmp_path, texts, tok_dir, cli_error):
    a = preprocess(texts / "part0.txt", tok_dir, tmp_path / "a", num_workers=1, progress=False)
    b = preprocess([texts / "part1.txt", texts / "part2.txt"], tok_dir, tmp_path / "b", num_workers=1, progress=False)
    assert main(["preprocess", "--merge", str(a), str(b), "--output_dir", str(tmp_path / "ab")]) == 0
    _same_corpus(tmp_path / "ab", preprocess(texts, tok_dir, tmp_path / "one", num_workers=1, progress=False))
    assert np.array_equal(TokenCorpus(tmp_path / "ab").unigram_counts(),
                          TokenCorpus(a).unigram_counts() + TokenCorpus(b).unigram_counts())  # fmt: skip
    c = tmp_path / "c"  # the same corpus, its vocabulary's last two tokens swapped: another tokenizer
    shutil.copytree(a, c)
    (c / "tokenizer" / "tokenizer.json").unlink(missing_ok=True)
    meta = json.loads((c / "meta.json").read_text())
    meta.pop("vocab_fingerprint", None)  # so the vocabulary is told from the tokenizer files
    (c / "meta.json").write_text(json.dumps(meta))
    vocab = (c / "tokenizer" / "vocab.txt").read_text().splitlines()
    (c / "tokenizer" / "vocab.txt").write_text("\n".join(vocab[:-2] + vocab[-1:] + vocab[-2:-1]) + "\n")
    cli_error(["preprocess", "--merge", str(a), str(c), "--output_dir", str(tmp_path / "ac")], names="tokenizer",
              contains="expected corpora made with the same tokenizer", out=tmp_path / "ac")
    cli_error(["preprocess", "--merge", str(a), "--corpus", str(texts), "--output_dir", str(tmp_path / "x")],
              contains="--corpus: found it with --merge")
    with pytest.raises(SpanBertError, match="found no corpus folder"):
        merge([], tmp_path / "none")
