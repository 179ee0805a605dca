"""Scores and predictions against the data: every score on one scale (0-100), a predictions file
matched to the data's examples by id, and the gold labels a model never saw in training said once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanbert import distributed
from spanbert.errors import DataError, SpanBertError


def percent(metrics: dict[str, Any], keep: Sequence[str] = ()) -> dict[str, Any]:
    """Every float score x100 (0-100, as SQuAD, coref and the GLUE leaderboard report them); ints
    (counts) and the keys in ``keep`` unchanged; nested dicts (per-type scores) too."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out[k] = percent(v, keep)
        elif isinstance(v, float) and k not in keep:
            out[k] = 100.0 * v
        else:
            out[k] = v
    return out


def match_by_id(path: str | Path, by_id: dict[str, Any], wanted: Sequence[str], data: str, how: str = "") -> list[Any]:
    """The predictions ``by_id`` (read from ``path``) in the order of the data's ids ``wanted``: a file in any
    order scores the same. Ids the data repeats, ids without a prediction and predictions of no
    id of the data are errors naming the first few; ``data`` names the data (e.g. "the dev data") and
    ``how`` says how the file's ids are read."""
    if len(set(wanted)) != len(wanted):
        twice = sorted(x for x, c in Counter(wanted).items() if c > 1)
        raise SpanBertError(f"{data} repeats the id(s) {twice[:5]}: predictions cannot be matched to examples by id")
    known = set(wanted)
    missing = [x for x in wanted if x not in by_id]
    extra = [x for x in by_id if x not in known]
    if missing or extra:
        first = lambda ids: "[" + ", ".join(map(repr, ids[:5])) + (", ...]" if len(ids) > 5 else "]")  # noqa: E731
        found = []
        if missing:
            found.append(f"no prediction for {len(missing)} example id(s) {first(missing)}")
        if extra:
            found.append(f"{len(extra)} id(s) that are not in {data} {first(extra)}")
        raise DataError(path, f"found {' and '.join(found)}; expected one prediction per example ({len(wanted)}){how}")
    return [by_id[x] for x in wanted]


def warn_unseen(path: str | Path, found: Sequence[str], known: Sequence[str], what: str, trained_on: str) -> list[str]:
    """Warn once (rank 0) about the gold labels of a dev or test file that the model never saw in training
    (it cannot predict them): the official scorers count those items as misses, which is
    what a user expects; refusing the file would stop every run on a training subset. Returns them."""
    unseen = sorted(set(found) - set(known))
    if unseen:
        n = sum(label in unseen for label in found)
        distributed.eprint0(
            f"warning: {path}: {n} gold {what}(s) {unseen[:5]}{' ...' if len(unseen) > 5 else ''} never occur in "
            f"{trained_on}; the model cannot predict them, so they count as misses"
        )
    return unseen
