"""`spanbert fill`: predict the masked tokens of a text with a pre-trained model's MLM head, or a run of
them with its span boundary head (SpanBERT §3.2), to see what a pre-training run has learnt."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert.distributed import eprint0, print0
from spanbert.errors import SpanBertError, utf8_argument
from spanbert.families import FAMILIES, family_of, read_config
from spanbert.pretrain_config import fill_parser
from spanbert.tokenization import load_tokenizer_for

_MASK_RUN = re.compile(r"\{MASK\*(\d+)\}")


def fill(model, tok, text: str, head: str = "mlm", top_k: int = 5) -> dict[str, Any]:
    """Predict every `[MASK]` in ``text``; `{MASK*n}` is shorthand for n masks.

    head="mlm": the MLM head at each masked position. head="sbo": the span boundary head, which
    sees only the two tokens around each run of masks and the position inside it (§3.2). ``model`` is
    a pre-training model of the BERT or the ModernBERT family.
    """
    text = _MASK_RUN.sub(lambda m: " ".join(["[MASK]"] * int(m.group(1))), text)
    pieces = text.split("[MASK]")
    ids: list[int] = [tok.cls_id]
    masked: list[int] = []
    for i, piece in enumerate(pieces):
        if piece.strip():
            ids += tok.encode(_fill_piece(piece, i, tok.byte_level)).ids.tolist()
        if i < len(pieces) - 1:
            masked.append(len(ids))
            ids.append(tok.mask_id)
    ids.append(tok.sep_id)
    if not masked:
        raise SpanBertError("the text has no [MASK] (write [MASK] per token, or {MASK*n} for a run of n)")
    if head == "sbo" and _span_head(model) is None:
        raise SpanBertError("this model has no span boundary head (pre-trained without SBO); use --head mlm")
    if len(ids) > model.config.max_position_embeddings:
        raise SpanBertError(f"the text is {len(ids)} tokens; the model takes at most {model.config.max_position_embeddings}")
    input_ids = torch.tensor([ids])
    positions = torch.tensor(masked)
    # runs of consecutive masks are the spans; their outside neighbours are the SBO boundaries
    starts = [p for j, p in enumerate(masked) if j == 0 or masked[j - 1] != p - 1]
    span_start = {p: max(s for s in starts if s <= p) for p in masked}
    span_end = {}
    for p in reversed(masked):
        span_end[p] = span_end.get(p + 1, p) if (p + 1) in masked else p
    batch = dict(input_ids=input_ids, mlm_positions=positions)
    if head == "sbo":
        batch.update(
            sbo_positions=positions,
            sbo_left=torch.tensor([span_start[p] - 1 for p in masked]),
            sbo_right=torch.tensor([span_end[p] + 1 for p in masked]),
            sbo_rel=torch.tensor([p - span_start[p] for p in masked]),
        )
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    logits = out["sbo_logits" if head == "sbo" else "mlm_logits"]  # (N, V)
    # never propose special tokens
    logits[:, torch.as_tensor(tok.special_ids(), dtype=torch.long)] = -float("inf")
    probs = logits.softmax(-1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    filled = list(ids)
    predictions = []
    for j, p in enumerate(masked):
        cands = [(_shown(tok, int(i)), float(pr)) for pr, i in zip(top.values[j], top.indices[j])]
        filled[p] = int(top.indices[j, 0])
        predictions.append({"position": p, "candidates": cands})
    return {"text": tok.decode(filled[1:-1]), "predictions": predictions}


def _fill_piece(piece: str, index: int, byte_level: bool) -> str:
    """The text between two masks, as the tokenizer must see it. WordPiece: the words alone. Byte-level
    BPE (ModernBERT): a word's leading space is part of its token, and a mask stands for a word with
    its space, so the space before a mask goes with the mask and a word after one keeps its own."""
    if not byte_level:
        return piece.strip()
    if index == 0:
        return piece.rstrip()
    return (" " if piece[:1].isspace() else "") + piece.strip()


def _span_head(model: nn.Module) -> nn.Module | None:
    """The span boundary head of a BERT (``cls.span_predictions``) or ModernBERT pre-training model."""
    return getattr(getattr(model, "cls", model), "span_predictions", None)


def _shown(tok: Any, i: int) -> str:
    """A candidate token as a person reads it: WordPiece's own (``##ing`` says it continues a word),
    byte-level BPE's as text (``Ġcapital`` -> ``capital``); a piece of a character's bytes as stored."""
    if not tok.byte_level:
        return tok.id_to_token(i)
    text = tok.decode([i], skip_special_tokens=False).strip()
    return text if text and "\ufffd" not in text else tok.id_to_token(i)


UNDERTRAINED_ACC = 0.5
"""Below this share of held-out masked tokens predicted, `spanbert fill` says what to expect of the model."""


def expectation(model_dir: str | Path, head: str) -> str | None:
    """A note on what ``head`` of the pre-trained model in ``model_dir`` can be expected to fill, from what
    its pre-training recorded (``train_metrics.json``: the held-out accuracy of its last evaluation, else
    the training batches'); None for a model that predicts at least `UNDERTRAINED_ACC` of them, or one that
    recorded nothing (an imported checkpoint)."""
    folder = Path(model_dir)
    try:
        config = json.loads((folder / "config.json").read_text())
        metrics = json.loads((folder / "train_metrics.json").read_text())
    except (OSError, ValueError):
        config, metrics = {}, None
    if (config.get("spanbert") or {}).get("random_init") or config.get("random_init"):
        return ("note: this model was never trained (spanbert pretrain --random_init): its predictions are "
                "random tokens, a control for fine-tuning, not a model to fill text with")  # fmt: skip
    if not isinstance(metrics, dict):
        return None
    acc, where = metrics.get(f"eval_{head}_acc"), "held-out"
    if not isinstance(acc, (int, float)):
        acc, where = metrics.get(f"{head}_acc"), "training"
    if not isinstance(acc, (int, float)) or acc >= UNDERTRAINED_ACC:
        return None
    return (f"note: this model's {head.upper()} head predicted {acc:.0%} of the masked tokens of its last {where} "
            "batches: expect frequent tokens (punctuation, 'the', 'of') more than the missing words. Short CPU "
            "runs stay there (the quick start ends near 11%, the README's 40-minute small model 16%); "
            "filling spans with the right words takes pre-training at the paper's scale")  # fmt: skip


def fill_main(argv: list[str], prog: str = "spanbert fill") -> int:
    p = fill_parser(prog)
    args = p.parse_args(argv)

    # what the arguments alone decide is checked before a model is read
    text = utf8_argument(args.text, "--text")
    if "[MASK]" not in text and not _MASK_RUN.search(text):
        raise SpanBertError("--text: found no [MASK]; expected [MASK] per token, or {MASK*n} for a run of n")
    if args.top_k < 1:
        raise SpanBertError(f"--top_k: found {args.top_k}; expected an integer >= 1")

    if Path(args.model).is_dir():  # a run's folder for its model: the error points to its final/
        read_config(args.model)
    tok = load_tokenizer_for(args.model, args.tokenizer)  # a folder without one fails before weights are read
    # the head that predicts must come from the folder: a fine-tuned or bare encoder has none, and a
    # freshly initialised one would print a different random guess each run
    family = family_of(args.model)
    load = FAMILIES[family].pretraining.load_heads if FAMILIES[family].pretraining else None
    if load is None:
        raise SpanBertError(
            f"{args.model}: found a {family} model, which has no masked-LM head; expected a BERT or ModernBERT "
            "pre-training folder (spanbert pretrain's output)"
        )
    model = load(args.model, (args.head,), f"spanbert fill --head {args.head}")
    result = fill(model, tok, text, head=args.head, top_k=args.top_k)
    if args.json:
        print0(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print0(result["text"])
        for pred in result["predictions"]:
            cands = ", ".join(f"{t} {pr:.2f}" for t, pr in pred["candidates"])
            print0(f"  position {pred['position']}: {cands}")
    note = expectation(args.model, args.head) if Path(args.model).is_dir() else None
    if note:
        sys.stdout.flush()
        eprint0(note)  # after the predictions, on stderr: --json's output stays JSON
    return 0


