"""Preprocessing spread over processes and machines: a corpus built in independent parts, then merged (issue 57).

`spanbert preprocess --parts N` cuts the input files (in `tokenization.corpus_files` order) into N runs of
whole files of about equal size (`part_files`); part k is an ordinary corpus folder of its own,
``OUT.parts/part-KKKKK-of-NNNNN``, built atomically by `preprocess.preprocess` and claimed (locked) while
it is built, so any number of processes, on any machines sharing the folder, can each build parts
(``--part K``) at once. A part records what it was made from (its files with their sizes, the tokenizer,
the options: `part_spec`); a part already there with the same record is kept, so a killed run resumes
part by part (only the part it was in is built again). Without ``--part`` every missing part is built,
in turn, then `merge` joins them into ``OUT``.

`merge` joins any corpora made with the same tokenizer (parts, or an old corpus and a new one: text
added to a corpus) into one: their shards, renumbered, are hard links to the parts' files (a copy where
the folders are on different file systems), the unigram counts are summed, and meta.json lists what was
merged. The merged folder appears atomically; the parts can be deleted afterwards. Static masks, which
depend on the whole corpus's held-out split, are not merged (a part with them is refused).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import vocab_match
from spanbert.corpus import FORMAT, WORD_STARTS, TokenCorpus
from spanbert.errors import DataError, SpanBertError
from spanbert.utils import atomic_dir

SHARD_SUFFIXES = ("ids", "starts", "docs", "paras", "entity", "noun_phrase")


def part_files(files: Sequence[Path], parts: int) -> list[list[Path]]:
    """The files of each of ``parts`` parts: consecutive runs of ``files``, each about 1/parts of their bytes
    (a file is never split; every part gets at least one)."""
    if parts < 1:
        raise SpanBertError(f"--parts: found {parts}, expected at least 1")
    if parts > len(files):
        raise SpanBertError(
            f"--parts {parts}: found {len(files)} input file(s), expected at least one per part (a file is not "
            "split: cut a large one first, e.g. with `split -C 1G`, or ask for fewer parts)"
        )
    sizes = np.array([max(1, f.stat().st_size) for f in files], dtype=np.int64)
    ends = np.cumsum(sizes)
    # the k-th cut is the file boundary nearest to k/parts of the bytes, keeping at least one file for
    # every part
    cuts = [0]
    for k in range(1, parts):
        target = ends[-1] * k / parts
        c = int(np.searchsorted(ends, target, side="left")) + 1  # the first boundary at or past the target
        if c > 1 and target - ends[c - 2] <= ends[c - 1] - target:
            c -= 1  # the boundary before it is nearer
        c = min(max(c, cuts[-1] + 1), len(files) - (parts - k))
        cuts.append(c)
    cuts.append(len(files))
    return [list(files[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def part_dir(parts_dir: Path, k: int, parts: int) -> Path:
    """The folder of part ``k`` (1-based) of ``parts``."""
    return Path(parts_dir) / f"part-{k:05d}-of-{parts:05d}"


def default_parts_dir(output_dir: Path) -> Path:
    output_dir = Path(output_dir)
    return output_dir.with_name(output_dir.name + ".parts")


def vocabulary_of(corpus: TokenCorpus) -> str:
    """The fingerprint of a corpus's vocabulary (`vocab_match.tokenizer_fingerprint`): meta.json's, or its
    tokenizer's for a corpus written before it was recorded. Corpora are merged only when theirs agree."""
    return corpus.meta.get("vocab_fingerprint") or vocab_match.tokenizer_fingerprint(corpus.tokenizer)


def part_spec(files: Sequence[Path], k: int, parts: int, tokenizer: str, options: dict[str, Any]) -> dict[str, Any]:
    """What part ``k`` of ``parts`` is made from: its files (path and size), the vocabulary's fingerprint and
    the preprocessing options that change the arrays. A part on disk with another spec is not reused."""
    return {
        "index": k,
        "of": parts,
        "files": [[str(Path(f).resolve()), Path(f).stat().st_size] for f in files],
        "tokenizer": tokenizer,
        "options": options,
    }


def finished_part(folder: Path, spec: dict[str, Any]) -> bool:
    """True when ``folder`` holds a complete part made from ``spec``; an error when it holds one made otherwise."""
    meta = folder / "meta.json"
    if not meta.is_file():
        return False
    try:
        found = json.loads(meta.read_text(encoding="utf-8")).get("part")
    except (OSError, ValueError):
        return False  # an unreadable meta.json: the part is built again
    if found != spec:
        raise SpanBertError(
            f"{folder}: found a part made from other input or options ({_difference(found, spec)}), expected part "
            f"{spec['index']} of {spec['of']} of this corpus; remove it (or choose another --parts_dir) to build it again"
        )
    return True


def _difference(found: Any, spec: dict[str, Any]) -> str:
    if not isinstance(found, dict):
        return "no part record"
    for key in spec:
        if found.get(key) != spec[key]:
            return f"{key} differ"
    return "extra fields"


def build_parts(
    build: Callable[[list[Path], Path, dict[str, Any]], None],
    files: Sequence[Path],
    parts: int,
    parts_dir: Path,
    tokenizer: str,
    options: dict[str, Any],
    only: int | None = None,
    say: Callable[[str], None] = print,
) -> tuple[list[Path], list[int]]:
    """Build the parts that are missing (only part ``only`` when given) with ``build(files, folder, spec)``;
    returns (every part folder, the parts another process holds now). A part being built by another
    process (its folder locked) is left to it."""
    groups = part_files(list(files), parts)
    wanted = [only] if only is not None else list(range(1, parts + 1))
    if only is not None and not 1 <= only <= parts:
        raise SpanBertError(f"--part: found {only}, expected 1 .. {parts} (--parts {parts})")
    busy = []
    for k in wanted:
        folder = part_dir(parts_dir, k, parts)
        spec = part_spec(groups[k - 1], k, parts, tokenizer, options)
        if finished_part(folder, spec):
            say(f"part {k} of {parts}: {folder} is complete already, kept")
            continue
        try:
            build(groups[k - 1], folder, spec)
        except SpanBertError as e:
            if "another command writing this folder" not in str(e):  # `folders.Claim`: locked by another process
                raise
            busy.append(k)
            say(f"part {k} of {parts}: {folder} is being built by another process ({e}); left to it")
            continue
        say(f"part {k} of {parts}: {len(groups[k - 1])} file(s) -> {folder}")
    return [part_dir(parts_dir, k, parts) for k in range(1, parts + 1)], busy


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or no hard links there: a copy
        shutil.copyfile(src, dst)


def merge(corpora: Sequence[str | os.PathLike], output_dir: str | os.PathLike) -> Path:
    """Join ``corpora`` (preprocessed folders made with the same tokenizer) into ``output_dir``, in order: the
    shards renumbered (hard links, else copies), the unigram counts summed, one meta.json. Atomic."""
    folders = [Path(c) for c in corpora]
    if not folders:
        raise SpanBertError("--merge: found no corpus folder, expected one or more")
    opened = [TokenCorpus(f) for f in folders]
    first = opened[0]
    tok = vocabulary_of(first)
    for c in opened:
        for key in ("vocab_size", "id_dtype"):
            if c.meta[key] != first.meta[key]:
                raise SpanBertError(f"{c.path}: found {key} {c.meta[key]!r}, expected {first.meta[key]!r} as in {first.path}")
        if vocabulary_of(c) != tok:
            raise SpanBertError(f"{c.path / 'tokenizer'}: found another vocabulary than {first.path / 'tokenizer'}, "
                                "expected corpora made with the same tokenizer")  # fmt: skip
        if sorted(c.meta.get("candidates", [])) != sorted(first.meta.get("candidates", [])):
            raise SpanBertError(f"{c.path}: found candidates {c.meta.get('candidates')}, expected "
                                f"{first.meta.get('candidates')} as in {first.path}")  # fmt: skip
        if c.meta.get("static_masks"):
            raise SpanBertError(f"{c.path}: found static masks, expected none (they depend on the whole corpus's "
                                "held-out split: make the parts without --dupe_factor)")  # fmt: skip
    tables = [np.load(c.path / WORD_STARTS) for c in opened if (c.path / WORD_STARTS).is_file()]
    if any(not np.array_equal(t, tables[0]) for t in tables):
        raise SpanBertError(f"{WORD_STARTS}: found different word-start tables, expected the same tokenizer's")
    counts = np.zeros(first.vocab_size, dtype=np.int64)
    shards, sources, merged = [], [], []
    with atomic_dir(output_dir) as tmp:
        shutil.copytree(first.path / "tokenizer", tmp / "tokenizer")
        for c in opened:
            counts += c.unigram_counts()
            for s in c.meta["shards"]:
                name = f"shard-{len(shards):05d}"
                for suffix in SHARD_SUFFIXES:
                    src = c.path / f"{s['name']}.{suffix}"
                    if src.is_file():
                        _link(src, tmp / f"{name}.{suffix}")
                shards.append({**s, "name": name})
            sources += c.meta.get("sources", [])
            merged.append({"path": str(c.path.resolve()), "num_tokens": c.num_tokens, "num_docs": c.num_docs,
                           "shards": len(c.meta["shards"])})  # fmt: skip
        np.save(tmp / "unigram.npy", counts)
        if tables:
            np.save(tmp / WORD_STARTS, tables[0])
        meta = {
            "format": FORMAT,
            "num_tokens": sum(c.num_tokens for c in opened),
            "num_docs": sum(c.num_docs for c in opened),
            "vocab_size": first.vocab_size,
            "id_dtype": first.meta["id_dtype"],
            "candidates": list(first.meta.get("candidates", [])),
            "one_doc_per_line": first.meta.get("one_doc_per_line", False),
            "max_line_bytes": first.meta.get("max_line_bytes"),
            "sources": sources,
            "seconds": round(sum(float(c.meta.get("seconds", 0.0)) for c in opened), 3),
            "vocab_fingerprint": tok,
            "merged": merged,
            "shards": shards,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        try:
            TokenCorpus(tmp)  # the merged folder reads back before it appears
        except DataError as e:
            raise SpanBertError(f"--merge: the merged corpus does not read back: {e}") from None
    return Path(output_dir)


__all__ = ["build_parts", "default_parts_dir", "finished_part", "merge", "part_dir", "part_files", "part_spec", "vocabulary_of"]
