"""SQuAD v1.1 / v2.0 and MRQA scoring, identical to the official evaluation scripts (no torch).

Each function reproduces its official counterpart operation by operation, including the order of
the floating-point sums, so the numbers agree to the last digit:

* v1.1: `evaluate-v1.1.py` (`normalize_answer`, `f1_score`, `exact_match_score`,
  `metric_max_over_ground_truths`, `evaluate`) -> ``{"exact_match", "f1"}``.
* v2.0: `evaluate-v2.0.py` (`get_raw_scores`, `apply_no_ans_threshold`, `make_eval_dict`,
  `find_best_thresh`) -> ``{"exact", "f1", "total", "HasAns_*", "NoAns_*", "best_exact", ...}``.
  Differences with v1.1 that matter: gold answers that normalise to "" are dropped (an
  unanswerable question's only gold is ""), and F1 is 1 when both prediction and gold are empty.
* MRQA: `mrqa_official_eval.py` = the v1.1 formulas over ``qid -> answers``; a missing prediction
  counts as 0 (unless ``skip_no_answer``).

The v1.1 and MRQA scripts print a warning per missing prediction and score it 0; we score it 0 too
but warn once (through `warnings`) with the count and the first ids: a predictions file covering a
subset of SQuAD dev would otherwise print ~18,600 lines. The v2.0 script crashes on one (KeyError in its HasAns/NoAns breakdown); we raise a
`SpanBertError` that names the question.
"""

from __future__ import annotations

import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spanbert.errors import SpanBertError

_PUNCT = set(string.punctuation)  # ASCII only, as in the official scripts
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


# ---------------------------------------------------------------------------------------------
# v1.1 (and MRQA)


def f1_score_v1(prediction: str, ground_truth: str) -> float:
    """Token-overlap F1 of `evaluate-v1.1.py` (0 when nothing is shared, also when both are empty)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score_v1(prediction: str, ground_truth: str) -> bool:
    """Exact match after normalisation (`evaluate-v1.1.py`)."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(
    metric_fn: Callable[[str, str], Any], prediction: str, ground_truths: Iterable[str]
) -> Any:
    """Best score of ``prediction`` over every gold answer."""
    return max(metric_fn(prediction, gt) for gt in ground_truths)


def warn_unanswered(missing: list[str], total: int) -> None:
    """One warning for all the questions without a prediction (the official scripts print one each)."""
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        warnings.warn(f"{len(missing)} of {total} questions have no prediction; scored as 0 ({shown})", stacklevel=3)


def evaluate_v1(dataset: list[dict], predictions: Mapping[str, str]) -> dict[str, float]:
    """`evaluate-v1.1.py`'s ``evaluate(dataset_json["data"], predictions)``."""
    questions = (
        (qa["id"], [x["text"] for x in qa["answers"]])
        for article in dataset
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    )
    return _exact_and_f1(questions, predictions)


def evaluate_mrqa(
    answers: Mapping[str, list[str]], predictions: Mapping[str, str], skip_no_answer: bool = False
) -> dict[str, float]:
    """`mrqa_official_eval.py`'s ``evaluate``: ``answers`` maps each qid to its gold texts."""
    return _exact_and_f1(answers.items(), predictions, skip_no_answer)


def _exact_and_f1(
    questions: Iterable[tuple[str, list[str]]], predictions: Mapping[str, str], skip_no_answer: bool = False
) -> dict[str, float]:
    """The loop both official v1.1 scripts share: each (qid, gold texts) scores its prediction's best exact
    match and F1 over the golds; a question without a prediction scores 0 (MRQA's ``skip_no_answer``: is
    left out instead). Every question is counted as it comes, as the scripts do (a repeated qid twice)."""
    f1 = exact_match = total = 0
    missing: list[str] = []
    for qid, ground_truths in questions:
        if qid not in predictions:
            if not skip_no_answer:
                missing.append(str(qid))
                total += 1
            continue
        total += 1
        prediction = predictions[qid]
        exact_match += metric_max_over_ground_truths(exact_match_score_v1, prediction, ground_truths)
        f1 += metric_max_over_ground_truths(f1_score_v1, prediction, ground_truths)
    warn_unanswered(missing, total)
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


# ---------------------------------------------------------------------------------------------
# v2.0


def get_tokens(s: str) -> list[str]:
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold: str, a_pred: str) -> int:
    """Exact match of `evaluate-v2.0.py` (an int)."""
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """F1 of `evaluate-v2.0.py`: if either side is no-answer, 1 when both are, else 0."""
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    common = Counter(gold_toks) & Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def make_qid_to_has_ans(dataset: list[dict]) -> dict[str, bool]:
    return {qa["id"]: bool(qa["answers"]) for article in dataset for p in article["paragraphs"] for qa in p["qas"]}


def get_raw_scores(dataset: list[dict], preds: Mapping[str, str]) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question EM and F1 before any no-answer threshold (max over gold answers)."""
    exact_scores: dict[str, int] = {}
    f1_scores: dict[str, float] = {}
    missing: list[str] = []
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
                if not gold_answers:
                    # for unanswerable questions the only correct answer is the empty string
                    gold_answers = [""]
                if qid not in preds:
                    missing.append(str(qid))
                    continue
                a_pred = preds[qid]
                exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    warn_unanswered(missing, len(missing) + len(exact_scores))
    return exact_scores, f1_scores


def apply_no_ans_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
    na_prob_thresh: float,
) -> dict[str, float]:
    """Questions whose no-answer probability exceeds the threshold are scored as no-answer."""
    new_scores = {}
    for qid, s in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        new_scores[qid] = float(not qid_to_has_ans[qid]) if pred_na else s
    return new_scores


def make_eval_dict(
    exact_scores: Mapping[str, float], f1_scores: Mapping[str, float], qid_list: list[str] | None = None
) -> dict[str, float]:
    if not qid_list:
        total = len(exact_scores)
        return {
            "exact": 100.0 * sum(exact_scores.values()) / total,
            "f1": 100.0 * sum(f1_scores.values()) / total,
            "total": total,
        }
    total = len(qid_list)
    return {
        "exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total,
        "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total,
        "total": total,
    }


def find_best_thresh(
    preds: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The official search: walk the questions by increasing no-answer probability, answering each.

    Starts from "answer nothing" (every NoAns question right); a threshold equal to a question's
    probability answers it (the rule is ``na_prob > thresh`` -> no answer). Returns
    ``(100 * best score / len(scores), best threshold)``; ties keep the lower threshold.
    """
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(
    dataset: list[dict],
    preds: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """`evaluate-v2.0.py`'s ``main`` (without the plots): the dict it prints, keys in its order.

    ``na_probs`` is the ``--na-prob-file`` content; without it every probability is 0 and the
    ``best_*`` keys are absent, as in the official script.
    """
    has_na_file = na_probs is not None
    if na_probs is None:
        na_probs = {k: 0.0 for k in preds}
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    unanswered = [q for q in qid_to_has_ans if q not in preds]
    if unanswered:
        # the official script stops with a KeyError in its HasAns/NoAns breakdown; say why instead
        raise SpanBertError(
            f"the predictions have no answer for {len(unanswered)} of {len(qid_to_has_ans)} questions "
            f'(e.g. {unanswered[0]!r}); SQuAD 2.0 scoring needs one for every question ("" = no answer)'
        )
    exact_raw, f1_raw = get_raw_scores(dataset, preds)
    missing = [q for q in exact_raw if q not in na_probs]
    if missing:
        raise SpanBertError(
            f"the no-answer probability file has no entry for {len(missing)} predicted question(s), e.g. {missing[0]!r}"
        )
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    if has_ans_qids:
        for k, v in make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans_qids).items():
            out_eval[f"HasAns_{k}"] = v
    if no_ans_qids:
        for k, v in make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans_qids).items():
            out_eval[f"NoAns_{k}"] = v
    if has_na_file:
        best_exact, exact_thresh_value = find_best_thresh(preds, exact_raw, na_probs, qid_to_has_ans)
        best_f1, f1_thresh_value = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
        out_eval["best_exact"] = best_exact
        out_eval["best_exact_thresh"] = exact_thresh_value
        out_eval["best_f1"] = best_f1
        out_eval["best_f1_thresh"] = f1_thresh_value
    return out_eval


def is_v2_dataset(dataset_json: Mapping[str, Any]) -> bool:
    """A SQuAD JSON is scored with the v2.0 script if it says version 2 or marks unanswerable questions."""
    if str(dataset_json.get("version", "")).lstrip("v").startswith("2"):
        return True
    return any(
        "is_impossible" in qa
        for article in dataset_json.get("data", [])
        for p in article["paragraphs"]
        for qa in p["qas"]
    )
