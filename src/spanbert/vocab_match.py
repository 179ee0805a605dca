"""Whether a vocabulary is the one behind some token ids, checked by content wherever a model folder, a
corpus and a tokenizer meet (issue 58.1): a model's embedding rows, a corpus's stored ids and a tokenizer's
vocabulary each mean something only under the vocabulary they were made with.

- `fingerprint`: one short hash of a vocabulary's tokens in id order and its casing, recorded where ids
  are stored (a prepared corpus's meta.json) so that a later check compares two strings;
- `check_same_ids`: the content comparison (also the fallback for a corpus that has no fingerprint): a
  token that another vocabulary gives another id is an error naming the option, both folders and the
  first token that moved;
- `casing_warning`: a plausible but risky mismatch (a lower-casing tokenizer over a cased vocabulary, a
  case-keeping one over a lower-cased vocabulary, two tokenizers that case differently) is a warning
  saying what to do;
- `check_coverage`: a vocabulary that maps most of a text sample to ``[UNK]`` is an error; a sizable
  share of ``[UNK]`` a warning.

Vocabularies are plain ``{token: id}`` mappings and tokenizers anything with ``get_vocab()``,
``do_lower_case``, ``unk_id`` and ``encode(text).ids`` (`spanbert.tokenization.Tokenizer`); this module
imports only the errors, so the tokenizer, corpus and pre-training modules can all call it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spanbert.errors import SpanBertError

UNK_ERROR = 0.5
"""A sample whose word pieces are more than this share ``[UNK]``: the vocabulary does not fit the text."""
UNK_WARNING = 0.05
"""A share above this (an English corpus under BERT's vocabulary has ~0.1 %) is said."""
MIN_PIECES = 1000
"""A sample of fewer word pieces says nothing either way (a few test sentences under a tiny vocabulary)."""


def tokens_by_id(vocab: Mapping[str, int]) -> list[str | None]:
    """The tokens of ``vocab`` in id order (None for an id no token has)."""
    out: list[str | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for token, i in vocab.items():
        if out[i] is None or token < out[i]:  # a duplicate id: one deterministic token
            out[i] = token
    return out


def fingerprint(vocab: Mapping[str, int], lower: bool) -> str:
    """``sha256:`` + the first 16 hex digits of the hash of the tokens in id order and the casing: two
    vocabularies have the same fingerprint exactly when every id names the same token and they case alike."""
    h = hashlib.sha256(b"lower\n" if lower else b"cased\n")
    for token in tokens_by_id(vocab):
        h.update(b"\x00" if token is None else token.encode("utf-8"))
        h.update(b"\n")
    return "sha256:" + h.hexdigest()[:16]


def tokenizer_fingerprint(tok: Any) -> str:
    """`fingerprint` of a tokenizer's vocabulary (added tokens included) and casing."""
    return fingerprint(tok.get_vocab(), bool(getattr(tok, "do_lower_case", False)))


def id_differences(own: Mapping[str, int], other: Mapping[str, int]) -> list[tuple[int, str | None, str | None]]:
    """(id, token under ``own``, token under ``other``) for every id below both sizes that names another token,
    in id order. Ids one vocabulary has beyond the other's size are not differences (a vocabulary extended with
    new tokens, such as entity markers, keeps the ids of the one it extends)."""
    a, b = tokens_by_id(own), tokens_by_id(other)
    return [(i, a[i], b[i]) for i in range(min(len(a), len(b))) if a[i] != b[i]]


def check_same_ids(
    own: Mapping[str, int], other: Mapping[str, int], option: str, other_name: str, own_name: str, why: str
) -> None:
    """Refuse ``other`` (given with ``option``, at ``other_name``) where the ids were made under ``own`` (the
    vocabulary of ``own_name``) and any id both have names another token: one error naming the option, both
    places, the first moved token and how many moved. ``why``: what the ids are (``its embedding rows are
    learned per id``), said in the message."""
    moved = id_differences(own, other)
    if not moved:
        return
    i, was, now = moved[0]
    shown = lambda t: "no token" if t is None else repr(t)  # noqa: E731
    raise SpanBertError(
        f"{option}: found {other_name} giving id {i} to {shown(now)} where {own_name} gives it to {shown(was)} "
        f"({len(moved):,} of {min(len(tokens_by_id(own)), len(tokens_by_id(other))):,} ids name other tokens); "
        f"expected the vocabulary of {own_name} ({why})"
    )


def cased_vocabulary(vocab: Mapping[str, int]) -> bool | None:
    """Whether a vocabulary is cased (it has word pieces with capitals), lower-cased (letters, none of them
    capitals) or None when it has too few letters to tell (a vocabulary of special tokens)."""
    letters = capitals = 0
    for token in vocab:
        if token.startswith("[") and token.endswith("]"):
            continue  # [CLS], [unused0]: specials say nothing of the casing
        word = token[2:] if token.startswith("##") else token
        if any(c.isalpha() for c in word):
            letters += 1
            capitals += any(c.isupper() for c in word)
    if letters < 20:
        return None
    return capitals / letters > 0.01


def casing_warning(tok: Any, where: str, own: Any | None = None, own_name: str = "") -> str | None:
    """The ``warning:`` line for a risky casing of ``tok`` (loaded from ``where``), or None: it cases otherwise
    than ``own``, the tokenizer the ids were made with (``own_name``: whose it is), it lower-cases its input
    while its vocabulary is cased (capitals never reach the model), or it keeps the case while the vocabulary
    is lower-cased (every capitalised word splits or becomes [UNK]). Says what to do."""
    lower = bool(getattr(tok, "do_lower_case", False))
    if own is not None and bool(getattr(own, "do_lower_case", False)) != lower:
        return (
            f"warning: {where} {'lower-cases' if lower else 'keeps the case of'} its input (do_lower_case "
            f"{str(lower).lower()}) but the tokenizer of {own_name} {'keeps the case' if lower else 'lower-cases'}: "
            f"the same text gives other ids than those it was made with; use the tokenizer of {own_name} (or set "
            f"do_lower_case {str(not lower).lower()} in the tokenizer_config.json of {where})"
        )
    cased = cased_vocabulary(tok.get_vocab())
    if cased is None or cased != lower:
        return None
    if lower:
        return (
            f"warning: {where} lower-cases its input (do_lower_case true) but its vocabulary is cased: its "
            f"capitalised word pieces never occur; set do_lower_case false in {where}/tokenizer_config.json "
            f"if the model was trained on cased text"
        )
    return (
        f"warning: {where} keeps the case of its input (do_lower_case false) but its vocabulary is lower-cased: "
        f"capitalised words split into pieces or become [UNK]; set do_lower_case true in "
        f"{where}/tokenizer_config.json if the model was trained on lower-cased text"
    )


def unknown_share(tok: Any, texts: Iterable[str]) -> tuple[int, int]:
    """([UNK] pieces, word pieces) of ``texts`` under ``tok``, special framing tokens left out."""
    unk = total = 0
    specials = {getattr(tok, n) for n in ("cls_id", "sep_id", "pad_id", "mask_id") if hasattr(tok, n)}
    for text in texts:
        ids = [i for i in tok.encode(text).ids if i not in specials]
        total += len(ids)
        unk += sum(1 for i in ids if i == tok.unk_id)
    return unk, total


def check_coverage(unk: int, total: int, option: str, where: str, sample: str, refuse: bool = True) -> str | None:
    """One error (`SpanBertError`) when more than `UNK_ERROR` of ``total`` word pieces of ``sample`` are [UNK]
    under the vocabulary at ``where`` (given with ``option``) and ``refuse`` (the sample is the text itself: a
    corpus), else the ``warning:`` line when more than `UNK_WARNING` are (a task file's sample holds its tags
    and keys too: said, not refused), else None."""
    if total < MIN_PIECES:
        return None
    share = unk / total
    said = f"{unk:,} of {total:,} word pieces ({share:.0%}) of {sample} are [UNK] under the vocabulary {where} ({option})"
    if share > UNK_ERROR and refuse:
        raise SpanBertError(
            f"{option}: found {said}; expected a vocabulary that covers the text (a model would learn nothing "
            f"from it): use the vocabulary the text was meant for, or train one on it (spanbert tokenizer train)"
        )
    if share > UNK_WARNING:
        return (
            f"warning: {said}; the model cannot tell those words apart: check that this is the vocabulary meant "
            f"for this text"
        )
    return None


SAMPLE_CHARS = 200_000
"""How much text `text_sample` reads: enough lines for a share of [UNK] to mean something, read in
milliseconds whatever the size of the corpus."""


def text_sample(paths: Sequence[str | os.PathLike], max_chars: int = SAMPLE_CHARS) -> list[str]:
    """The first lines of ``paths`` (text, .jsonl, a .gz of either; a folder: the files in it), at most
    ``max_chars`` characters in all, spread over the files: what a share of [UNK] is measured on. Bytes that
    are not UTF-8 are left out (the readers that follow name them); an unreadable file gives nothing."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p) if os.path.isfile(os.path.join(p, n)))
        elif os.path.isfile(p):
            files.append(str(p))
    lines: list[str] = []
    share = max_chars // max(len(files), 1)
    for f in files:
        read = 0
        try:
            opener = gzip.open if f.endswith(".gz") else open
            with opener(f, "rt", encoding="utf-8", errors="ignore") as stream:
                for line in stream:
                    if line.strip():
                        lines.append(line[:10_000])
                        read += len(lines[-1])
                    if read >= share:
                        break
        except (OSError, EOFError, ValueError):  # not gzip, cut short: the reader names it later
            continue
    return lines
