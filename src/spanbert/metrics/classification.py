"""Classification metrics as the official scorers compute them (no torch, no numpy needed).

- `tacred_prf`: micro precision / recall / F1 over every relation except ``no_relation``, line for
  line as TACRED's official ``scorer.py`` (Zhang et al., 2017) computes it.
- `semeval_official`: the official SemEval-2010 Task 8 score (``semeval2010_task8_scorer-v1.2.pl``):
  macro-averaged F1 over the 9 relations, "(9+1)-way evaluation with directionality taken into
  account", ``Other`` excluded. See the function for exactly which variant that is.
- `accuracy`, `binary_f1`, `matthews_corrcoef`, `pearson`, `spearman`: the GLUE leaderboard metrics
  (CoLA: Matthews; MRPC/QQP: F1 and accuracy; STS-B: Pearson and Spearman; the rest: accuracy).
- `conll_chunks`, `conlleval`: entity-level precision / recall / F1 as the CoNLL-2000/2003 Perl
  script ``conlleval`` computes it for IOB1/IOB2 tags, including its chunk boundary rules for
  ill-formed tag sequences (an ``I-`` after ``O`` or after a different type starts a new entity).
  IOBES tags are read as the chunks they denote (``S-X`` is a one-word entity, ``E-X`` ends one, ``B-X``
  after ``E-X`` starts a new one); conlleval (2004) has no ``S-`` rule and does not split
  ``E-X B-X``, so on IOBES this is *not* conlleval (seqeval's IOBES reading instead).

Every function returns fractions in [0, 1]; the task commands report them x100.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

NO_RELATION = "no_relation"


def _check_lengths(gold: Sequence, pred: Sequence) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predictions; expected one prediction per example")


# ----------------------------------------------------------------------------------- TACRED


def tacred_prf(gold: Sequence[str], pred: Sequence[str], negative: str = NO_RELATION) -> dict[str, float]:
    """Micro P/R/F1 over all relations except ``negative``, as TACRED's official scorer.

    A prediction counts as guessed when it is not ``negative``, a gold label counts when it is not
    ``negative``, and a hit is a guessed relation equal to the gold one. As in the official script,
    precision is 1.0 when nothing was guessed and recall is 0.0 when there is no gold relation.
    Values are fractions in [0, 1].
    """
    _check_lengths(gold, pred)
    correct = guessed = relevant = 0
    for g, p in zip(gold, pred):
        if p != negative:
            guessed += 1
        if g != negative:
            relevant += 1
            if p == g:
                correct += 1
    precision = correct / guessed if guessed > 0 else 1.0
    recall = correct / relevant if relevant > 0 else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


# ----------------------------------------------------------------------------------- SemEval-2010


def _undirected(label: str) -> str:
    """``Cause-Effect(e2,e1)`` -> ``Cause-Effect``; ``Other`` stays ``Other``."""
    return label.split("(", 1)[0]


def semeval_official(gold: Sequence[str], pred: Sequence[str], other: str = "Other") -> dict[str, float]:
    """The official SemEval-2010 Task 8 score: macro-F1 of the (9+1)-way evaluation with direction.

    Exactly as ``semeval2010_task8_scorer-v1.2.pl`` computes it in the section "(9+1)-WAY EVALUATION
    TAKING DIRECTIONALITY INTO ACCOUNT -- OFFICIAL":

    - the classes are the 9 undirected relations (``Cause-Effect`` ...) plus ``Other``;
    - for a relation R, a prediction is a hit only when it equals the gold label *including the
      direction* (``Cause-Effect(e1,e2)`` vs ``Cause-Effect(e2,e1)``); a prediction of R with the
      wrong direction is not a hit but still counts as a prediction of R (the script's ``xDIRx``
      column is added to the precision denominator) and the gold example still counts for R;
    - P_R = hits_R / #predictions whose undirected label is R, R_R = hits_R / #gold whose undirected
      label is R, F1_R = 2 P R / (P + R) (0 when a denominator is 0);
    - the official score is the unweighted mean of F1_R over the relations present in the gold
      labels, ``Other`` excluded: the 9 relations on the official test set (the script divides by the
      number of distinct non-Other gold labels). It is the mean of per-class F1s, not the F1 of the
      mean P and R.

    Also returns the macro P and R (means of the per-class values), the micro P/R/F1 over the same
    counts (the script's "Micro-averaged result (excluding Other)") and accuracy of the exact
    19-way labels. Predictions of a relation absent from the gold labels lower no score, as in the
    script. Values are fractions in [0, 1]; the script prints percentages.
    """
    _check_lengths(gold, pred)
    hits: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    for g, p in zip(gold, pred):
        ug, up = _undirected(g), _undirected(p)
        n_gold[ug] += 1
        n_pred[up] += 1
        if g == p:
            hits[ug] += 1
    # the script averages over the relations of the answer key (all 9 on the official test set)
    relations = sorted(set(n_gold) - {other})
    per_class = {}
    for r in relations:
        p = hits[r] / n_pred[r] if n_pred[r] else 0.0
        rc = hits[r] / n_gold[r] if n_gold[r] else 0.0
        per_class[r] = (p, rc, 2 * p * rc / (p + rc) if p + rc > 0 else 0.0)
    k = len(relations)
    macro_p = sum(v[0] for v in per_class.values()) / k if k else 0.0
    macro_r = sum(v[1] for v in per_class.values()) / k if k else 0.0
    macro_f1 = sum(v[2] for v in per_class.values()) / k if k else 0.0
    tp = sum(hits[r] for r in relations)
    guessed = sum(n_pred[r] for r in relations)
    relevant = sum(n_gold[r] for r in relations)
    micro_p = tp / guessed if guessed else 0.0
    micro_r = tp / relevant if relevant else 0.0
    micro_f1 = 2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r > 0 else 0.0
    return {
        "macro_f1": macro_f1,
        "macro_precision": macro_p,
        "macro_recall": macro_r,
        "micro_f1": micro_f1,
        "micro_precision": micro_p,
        "micro_recall": micro_r,
        "accuracy": accuracy(gold, pred),
    }


# ----------------------------------------------------------------------------------- GLUE


def accuracy(gold: Sequence, pred: Sequence) -> float:
    """Fraction of predictions equal to the gold label (0.0 for no examples)."""
    _check_lengths(gold, pred)
    return sum(g == p for g, p in zip(gold, pred)) / len(gold) if len(gold) else 0.0


def binary_f1(gold: Sequence, pred: Sequence, positive: object = 1) -> float:
    """F1 of the ``positive`` class (MRPC, QQP: positive = paraphrase/duplicate = 1)."""
    _check_lengths(gold, pred)
    tp = sum(g == positive and p == positive for g, p in zip(gold, pred))
    fp = sum(g != positive and p == positive for g, p in zip(gold, pred))
    fn = sum(g == positive and p != positive for g, p in zip(gold, pred))
    return 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0


def matthews_corrcoef(gold: Sequence, pred: Sequence) -> float:
    """Matthews correlation coefficient (multi-class form; CoLA is binary).

    MCC = (c*s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)) with c correct, s
    examples, p_k / t_k predicted / true counts of class k (Gorodkin 2004; equals
    (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) for two classes). 0.0 when undefined (a
    constant prediction or a constant gold), as scikit-learn returns.
    """
    _check_lengths(gold, pred)
    s = len(gold)
    c = sum(g == p for g, p in zip(gold, pred))
    t, p = Counter(gold), Counter(pred)
    cov_yy = s * s - sum(v * v for v in p.values())
    cov_xx = s * s - sum(v * v for v in t.values())
    cov_xy = c * s - sum(p[k] * t[k] for k in set(t) | set(p))
    if cov_xx == 0 or cov_yy == 0:
        return 0.0
    return cov_xy / math.sqrt(cov_xx * cov_yy)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; 0.0 when either side is constant (undefined)."""
    _check_lengths(x, y)
    n = len(x)
    if n == 0:
        return 0.0
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / math.sqrt(sxx * syy)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span (scipy's ``rankdata``)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mean_rank = (i + j) / 2 + 1  # ranks i+1 .. j+1
        for k in range(i, j + 1):
            ranks[order[k]] = mean_rank
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman correlation: Pearson of the average ranks (ties handled as scipy.stats.spearmanr)."""
    _check_lengths(x, y)
    return pearson(average_ranks(x), average_ranks(y))


# ----------------------------------------------------------------------------------- conlleval


def _split_tag(tag: str) -> tuple[str, str]:
    """``B-PER`` -> (``B``, ``PER``); ``O`` -> (``O``, ``""``), as conlleval's regex ``^([^-]*)-(.*)$``."""
    if "-" in tag:
        prefix, kind = tag.split("-", 1)
        return prefix, kind
    return tag, ""


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's ``endOfChunk``: does a chunk end between the previous token and this one?"""
    return (
        prev_tag in ("E", "S")
        or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
        or (prev_tag not in ("O", ".") and prev_type != kind)
        or prev_tag in ("]", "[")  # bracketed chunks have length 1
    )


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's ``startOfChunk``: does a chunk start at this token?"""
    return (
        tag in ("B", "S", "[", "]")
        or (prev_tag in ("E", "S", "O") and tag in ("E", "I"))  # an I- after O starts an entity
        or (tag not in ("O", ".") and prev_type != kind)  # so does a change of type
    )


def conll_chunks(tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """Entities of one sentence: ``(start, end_inclusive, type)``.

    IOB1 and IOB2 tags are read exactly with conlleval's rules: an ``I-X`` after ``O`` or after a
    different type starts a new entity, and a type change ends the current one. IOBES tags are read
    as the chunks they denote, which is not what conlleval (2004) does: ``S-X`` is an entity of one
    word and ``E-X`` ends an entity, so ``E-X B-X`` is two entities and ``S-X S-X`` is two (conlleval
    has no ``S-`` rule and would merge both pairs).
    """
    chunks = []
    prev_tag, prev_type, start = "O", "", None
    for i, t in enumerate(list(tags) + ["O"]):  # a sentence ends as if followed by O (conlleval)
        tag, kind = _split_tag(t)
        if start is not None and _end_of_chunk(prev_tag, tag, prev_type, kind):
            chunks.append((start, i - 1, prev_type))
            start = None
        if _start_of_chunk(prev_tag, tag, prev_type, kind) and i < len(tags):
            start = i
        prev_tag, prev_type = tag, kind
    return chunks


def conlleval_rows(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> list[list[int]]:
    """Per sentence ``[correct entities, predicted entities, gold entities]``: summed, `conlleval`'s
    micro F1 (a ``f1`` row of `spanbert.metrics.resample`, to resample the sentences)."""
    _check_lengths(gold, pred)
    rows = []
    for g, p in zip(gold, pred):
        gc, pc = set(conll_chunks(g)), set(conll_chunks(p))
        rows.append([len(gc & pc), len(pc), len(gc)])
    return rows


def conlleval(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, object]:
    """Entity-level P/R/F1 over sentences of tags, as ``conlleval`` (fractions, not percentages).

    An entity counts as correct when a predicted chunk has the same start, end and type as a gold
    one. Returns overall ``precision``, ``recall``, ``f1``, token ``accuracy`` and ``per_type``
    P/R/F1 with gold and predicted counts.
    """
    _check_lengths(gold, pred)
    n_correct: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    tokens = tokens_ok = 0
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted tags")
        gc, pc = set(conll_chunks(g)), set(conll_chunks(p))
        for c in gc:
            n_gold[c[2]] += 1
        for c in pc:
            n_pred[c[2]] += 1
        for c in gc & pc:
            n_correct[c[2]] += 1
        tokens += len(g)
        tokens_ok += sum(a == b for a, b in zip(g, p))

    def prf(c: int, guessed: int, relevant: int) -> dict[str, float]:
        precision = c / guessed if guessed else 0.0
        recall = c / relevant if relevant else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    overall = prf(sum(n_correct.values()), sum(n_pred.values()), sum(n_gold.values()))
    per_type = {
        k: {**prf(n_correct[k], n_pred[k], n_gold[k]), "gold": n_gold[k], "predicted": n_pred[k]}
        for k in sorted(set(n_gold) | set(n_pred))
    }
    return {
        **overall,
        "accuracy": tokens_ok / tokens if tokens else 0.0,
        "gold_entities": sum(n_gold.values()),
        "predicted_entities": sum(n_pred.values()),
        "per_type": per_type,
    }
