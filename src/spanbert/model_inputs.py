"""Model inputs from texts, as a transformers tokenizer gives them: `Tokenizer.__call__`.

Framing (the model family's start, between-segment and end markers: ``tok.cls_id``, ``mid_id``, ``sep_id``),
padding on the right and truncation by transformers' strategies, over the wrapped tokenizer's ids (no
special tokens added). Lists, or torch tensors for ``return_tensors="pt"``; the results equal
`transformers.BertTokenizerFast` on the same vocabulary (tests/test_model_inputs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanbert.errors import SpanBertError


def model_inputs(
    tok: Any,
    text: str | Sequence[str],
    text_pair: str | Sequence[str] | None = None,
    *,
    padding: bool | str = False,
    truncation: bool | str = False,
    max_length: int | None = None,
    return_tensors: str | None = None,
    return_token_type_ids: bool = True,
    return_attention_mask: bool = True,
    add_special_tokens: bool = True,
) -> dict[str, Any]:
    """Model inputs for one text or a batch under the tokenizer ``tok`` (a `spanbert.tokenization.Tokenizer`,
    whose call this is), as a transformers tokenizer gives them.

    ``tok(["a text", "another"], padding=True, truncation=True, max_length=128, return_tensors="pt")``
    returns ``{"input_ids", "token_type_ids", "attention_mask"}``: each text framed as the model family
    frames it (``[CLS] a [SEP]``; a pair ``[CLS] a [SEP] b [SEP]`` with token type 1 on ``b [SEP]``),
    ``[PAD]`` on the right with attention mask 0. ``padding``: False, True or ``"longest"`` (the batch's
    longest), ``"max_length"``. ``truncation``: False, True or ``"longest_first"`` (a token at a time from
    the longer of a pair, as transformers' fast tokenizers cut), ``"only_first"``, ``"only_second"``; to
    ``max_length``, by default ``tok.model_max_length``. ``return_tensors="pt"``: torch tensors (B, T) (a
    single text gets B = 1); otherwise lists, unnested for a single text. Results equal
    `transformers.BertTokenizerFast` on the same vocabulary (tests/test_model_inputs.py).
    """
    single = isinstance(text, str)
    texts = [text] if single else list(text)
    if text_pair is None:
        pairs: list[str] | None = None
    else:
        pairs = [text_pair] if isinstance(text_pair, str) else list(text_pair)
        if len(pairs) != len(texts):
            raise SpanBertError(f"text_pair: found {len(pairs)} texts, expected one for each of the {len(texts)} in text")
    for name, values in (("text", texts), ("text_pair", pairs or [])):
        bad = next((v for v in values if not isinstance(v, str)), None)
        if bad is not None:
            raise SpanBertError(f"{name}: found {type(bad).__name__} {bad!r}, expected a str or a list of str")
    padding = _choice("padding", padding, {False: "do_not_pad", True: "longest"}, ("do_not_pad", "longest", "max_length"))
    truncation = _choice(
        "truncation", truncation, {False: "do_not_truncate", True: "longest_first"},
        ("do_not_truncate", "longest_first", "only_first", "only_second"),
    )  # fmt: skip
    if return_tensors not in (None, "pt"):  # refused before any work
        raise SpanBertError(f"return_tensors: found {return_tensors!r}, expected 'pt' (torch tensors) or None (lists)")
    if max_length is None and (truncation != "do_not_truncate" or padding == "max_length"):
        max_length = tok.model_max_length
    # the ids alone, as lists of ints, straight from the wrapped tokenizer: `Tokenizer.encode_batch` would
    # also build offsets and word starts, which model inputs do not use
    firsts = [e.ids for e in tok.hf.encode_batch(texts, add_special_tokens=False)]
    seconds = [e.ids for e in tok.hf.encode_batch(pairs, add_special_tokens=False)] if pairs is not None else None
    extra = (3 if pairs is not None else 2) if add_special_tokens else 0
    rows, types = [], []
    for i, a in enumerate(firsts):
        b = seconds[i] if seconds is not None else None
        if truncation != "do_not_truncate":
            a, b = _truncate(a, b, max(int(max_length) - extra, 0), truncation)
        if add_special_tokens:
            row = [tok.cls_id, *a] + ([tok.mid_id, *b, tok.sep_id] if b is not None else [tok.sep_id])
            type_row = [0] * (len(a) + 2) + ([1] * (len(b) + 1) if b is not None else [])
        else:
            row, type_row = a + (b or []), [0] * len(a) + [1] * len(b or [])
        rows.append(row)
        types.append(type_row)
    target = int(max_length) if padding == "max_length" else max(map(len, rows), default=0)
    masks = [[1] * len(r) for r in rows]
    if padding != "do_not_pad":
        for r, t, m in zip(rows, types, masks):
            pad = max(target - len(r), 0)
            r += [tok.pad_id] * pad
            t += [0] * pad
            m += [0] * pad
    out: dict[str, Any] = {"input_ids": rows}
    if return_token_type_ids:
        out["token_type_ids"] = types
    if return_attention_mask:
        out["attention_mask"] = masks
    if return_tensors is not None:
        if len({len(r) for r in rows}) > 1:
            raise SpanBertError(
                f"return_tensors: found texts of {min(map(len, rows))} to {max(map(len, rows))} tokens, "
                "expected one length for a tensor: pass padding=True (and truncation=True for texts "
                "longer than the model)"
            )
        import torch  # the tokenizer itself needs no torch

        return {k: torch.tensor(v, dtype=torch.long).reshape(len(rows), -1) for k, v in out.items()}
    return {k: v[0] for k, v in out.items()} if single else out


def _choice(name: str, value: bool | str, booleans: dict[bool, str], names: tuple[str, ...]) -> str:
    """A `Tokenizer.__call__` strategy by its transformers name; True and False as transformers reads them."""
    if isinstance(value, bool):
        return booleans[value]
    if value not in names:
        raise SpanBertError(f"{name}: found {value!r}, expected True, False or one of {', '.join(map(repr, names))}")
    return value


def _truncate(a: list[int], b: list[int] | None, budget: int, strategy: str) -> tuple[list[int], list[int] | None]:
    """Cut a text (and its pair) to ``budget`` tokens in all. ``longest_first`` as the Rust tokenizers do it:
    only the longer text is cut while the shorter fits in half the budget, else both to half (the longer
    one gets the odd token); ``only_first``/``only_second`` cut that text alone (a pair whose other text
    alone exceeds the budget stays as long as it must)."""
    if b is None:
        return a[:budget], None
    if len(a) + len(b) <= budget:
        return a, b
    if strategy == "only_first":
        return a[: max(budget - len(b), 0)], b
    if strategy == "only_second":
        return a, b[: max(budget - len(a), 0)]
    short, long_ = sorted((len(a), len(b)))
    if short > budget // 2:
        short, long_ = budget // 2, budget // 2 + budget % 2
    else:
        long_ = budget - short
    if len(a) > len(b):
        return a[:long_], b[:short]
    return a[:short], b[:long_]
