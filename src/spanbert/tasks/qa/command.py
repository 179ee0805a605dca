"""The actions of ``squad`` and ``mrqa`` (fine-tune, predict, evaluate), each a function of its options
(`spanbert.tasks.qa.options`), scoring a predictions file as the official scripts do (`evaluate_files`),
and the two tasks' `TaskSpec`s."""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any

from spanbert.distributed import eprint0, print0
from spanbert.errors import DataError, SpanBertError, decode_utf8, utf8_argument
from spanbert.metrics import squad as squad_metrics
from spanbert.tasks import api
from spanbert.tasks.finetuning import finetune_options
from spanbert.tasks.qa.data import (
    DUPLICATE_ID,
    _expect,
    _load_json_file,
    _looks_like_mrqa,
    _restrict_articles,
    parse_slice,
    read_mrqa,
    read_qa,
)
from spanbert.tasks.qa.finetune import (
    answer_with,
    config_dict,
    finetune_qa,
    load_qa_model,
    run_prediction,
)
from spanbert.tasks.qa.options import ACTIONS, FORMATS, QAConfig, QAEvaluate, QAFinetune, QAPredict
from spanbert.tasks.ranks import start_distributed, write_json_once, write_once
from spanbert.tasks.spec import Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.utils import writes_through


def _read_predictions(path: str | Path, what: str, kind: type) -> dict[str, Any]:
    path = Path(path)
    obj = _load_json_file(path)
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object {{question_id: {what}}}, found {type(obj).__name__}")
    for k, v in obj.items():
        ok = isinstance(v, kind) and not isinstance(v, bool)
        if not ok:
            raise DataError(path, f"value {v!r:.60} is not a {what}", record=str(k))
    return obj


def evaluate_files(
    task: str,
    data_file: str | Path,
    predictions_file: str | Path,
    na_prob_file: str | Path | None = None,
    articles: str | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Score a predictions file against a data file exactly as the official script does.

    SQuAD files with unanswerable questions use the v2.0 script (``na_prob_file`` = its
    ``--na-prob-file``, ``na_prob_thresh`` its ``--na-prob-thresh``), others the v1.1 script; MRQA
    files the MRQA script.
    """
    preds = _read_predictions(predictions_file, "answer string", str)
    na = _read_predictions(na_prob_file, "number", (int, float)) if na_prob_file else None
    if task == "mrqa":
        whole = read_mrqa(data_file)
        _check_prediction_ids(predictions_file, preds, [e.qid for e in whole.examples], data_file)
        data = whole.select_articles(articles)
        return squad_metrics.evaluate_mrqa(data.gold_answers(), preds)
    path = Path(data_file)
    if _looks_like_mrqa(path):
        raise DataError(
            path, "found MRQA JSON lines; expected SQuAD JSON. Use the mrqa task: spanbert evaluate mrqa ..."
        )
    raw = _load_json_file(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DataError(path, "expected SQuAD JSON {'version': ..., 'data': [articles]}")
    _check_prediction_ids(predictions_file, preds, _squad_gold_ids(raw, path), data_file)
    if articles:
        raw = {**raw, "data": raw["data"][parse_slice(articles)]}
    try:
        if squad_metrics.is_v2_dataset(raw):
            # the files are named here; the metric (no file names) says only what is missing
            asked = [str(qa["id"]) for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]
            for file, values, what in ((predictions_file, preds, "an answer (\"\" = no answer)"),
                                       (na_prob_file, na, "a no-answer probability")):  # fmt: skip
                missing = [q for q in asked if values is not None and q not in values]
                if missing:
                    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
                    raise DataError(
                        file, f"found no entry for {len(missing)} of {len(asked)} questions ({shown}); expected "
                        f"{what} for every question of {data_file}, as SQuAD 2.0 scoring needs",
                    )  # fmt: skip
            return squad_metrics.evaluate_v2(raw["data"], preds, na, na_prob_thresh)
        return squad_metrics.evaluate_v1(raw["data"], preds)
    except (KeyError, TypeError) as e:  # the structure was checked above; kept as the last guard
        raise DataError(path, f"not in SQuAD format: missing or wrong field {e}") from None


def _squad_gold_ids(raw: dict[str, Any], path: Path) -> list[str]:
    """Every question id of a SQuAD JSON, checking the structure the official scripts walk (each
    article's ``paragraphs``, each paragraph's ``qas``, each question's ``id`` and ``answers`` with a
    ``text``): a missing or mistyped field names its place instead of the scripts' KeyError."""
    ids, seen = [], set()
    for a, article in enumerate(raw["data"]):
        for p, paragraph in enumerate(_expect(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            for q, qa in enumerate(_expect(paragraph, "qas", list, path, where)):
                qid = _expect(qa, "id", (str, int), path, f"{where}.qas[{q}]")
                if str(qid) in seen:  # as `read_squad` refuses it for finetune and predict (issue 58.7)
                    raise DataError(path, DUPLICATE_ID, record=f"id {qid}")
                seen.add(str(qid))
                for k, answer in enumerate(_expect(qa, "answers", list, path, f"id {qid}")):
                    _expect(answer, "text", str, path, f"id {qid}, answers[{k}]")
                ids.append(qid)
    return ids


def _check_prediction_ids(
    predictions_file: str | Path, preds: dict[str, Any], gold_ids: list[Any], data_file: str | Path
) -> None:
    """The official scripts match predictions to questions by id, score a missing one 0 (v1.1, MRQA;
    `evaluate` warns) and ignore ids they do not know. Ignoring is kept, but said (a warning naming the
    first few); a file none of whose ids is a question of the data is an error: it is the predictions
    of another data set, and a score of 0 would only hide that."""
    known = {str(x) for x in gold_ids}
    extra = [k for k in preds if k not in known]
    if not extra:
        return
    shown = ", ".join(map(str, extra[:3])) + (", ..." if len(extra) > 3 else "")
    if len(extra) == len(preds):
        raise DataError(
            predictions_file, f"found {len(preds)} predictions and no id among them that is a question of "
            f"{data_file} ({shown}); expected the predictions of that data file",
        )  # fmt: skip
    warnings.warn(
        f"{len(extra)} of {len(preds)} predictions are for question ids not in {data_file}; ignored, as the "
        f"official script does ({shown})", stacklevel=2,
    )  # fmt: skip


def _raw_text_request(args: Any) -> str | None:
    """The context of a ``--question`` (from --context or --context_file), or None for a --data run;
    refuses a mix of the two ways or half of one."""
    raw = [o for o in ("question", "context", "context_file") if getattr(args, o) is not None]
    if not raw:
        missing = [f"--{o}" for o in ("data", "output") if getattr(args, o) is None]
        if missing:
            raise SpanBertError(f"found no {' or '.join(missing)}, expected --data FILE --output FILE, or --question "
                                "with --context or --context_file")  # fmt: skip
        return None
    if args.data is not None or args.output is not None:
        raise SpanBertError("found --data/--output and --question/--context, expected one way of asking")
    if args.question is None:
        raise SpanBertError(f"found --{raw[0]} without --question, expected the question to answer")
    if (args.context is None) == (args.context_file is None):
        raise SpanBertError("--question: found " + ("both --context and --context_file" if args.context is not None
                            else "no context") + ", expected one of --context TEXT or --context_file FILE")  # fmt: skip
    args.question = utf8_argument(args.question, "--question")
    if args.context is not None:
        return utf8_argument(args.context, "--context")
    path = Path(args.context_file)
    if not path.is_file():
        raise SpanBertError(f"{path}: found no such file, expected the text of --context_file")
    return decode_utf8(path.read_bytes(), path)


def _finetune(task: str, opts: QAFinetune) -> Results:
    """``spanbert finetune {squad,mrqa} ...``."""
    if opts.sweep and not opts.validation_file:
        raise SpanBertError("--sweep keeps the best run on dev: pass --validation_file")

    def run_one(targs: Any) -> dict[str, Any]:
        return finetune_qa(
            task, opts.model, opts.train_file, opts.validation_file, targs, opts.qa, opts.tokenizer,
            opts.drop_ids, opts.train_articles, opts.validation_articles, opts.max_train_examples,
            opts.max_eval_examples,
        )  # fmt: skip

    return finetune_options(opts, run_one, "f1", f"spanbert finetune {task}")


def _predict(task: str, opts: QAPredict) -> Path | None:
    """``spanbert predict {squad,mrqa} (--data FILE --output PREDS | --question Q --context C)``: the
    predictions file written (None for a --question, whose answer is printed)."""
    context = _raw_text_request(opts)  # checked before the model loads
    start_distributed(opts.device)
    model, tokenizer, cfg = load_qa_model(opts.model)
    if opts.null_score_diff_threshold is not None:
        cfg = QAConfig(**{**config_dict(cfg), "null_score_diff_threshold": opts.null_score_diff_threshold})
    if context is not None:
        print0(json.dumps(answer_with(model, tokenizer, cfg, opts.question, context, opts.device), ensure_ascii=False))
        return None
    data = read_qa(opts.data, task).select_articles(opts.articles)
    out = Path(opts.output)
    null_path = null_odds_path(opts, {e.qid for e in data.examples}) if cfg.version_2_with_negative else None
    decoded = run_prediction(
        model, data, tokenizer, cfg, opts.batch_size, opts.device, progress=not opts.disable_tqdm
    )

    def write() -> None:
        write_json_once(out, decoded.predictions, sort_keys=False)
        if null_path is not None:
            write_json_once(null_path, decoded.null_odds, sort_keys=False)

    write_once(write)
    print0(
        f"wrote {len(decoded.predictions)} predictions to {out}"
        + (f" and their null odds to {null_path}" if null_path is not None else "")
    )
    return out


NULL_ODDS = "null_odds.json"
"""BERT's run_squad.py name of the null odds, written beside --output when --null_odds names no file."""


def null_odds_path(args: QAPredict, qids: set[str]) -> Path:
    """Where a SQuAD 2.0 ``predict`` writes its null odds (issue 58.3): ``--null_odds``, which must not be
    ``--output``; unnamed, `NULL_ODDS` beside ``--output``, which may not be ``--output`` itself and may only
    replace the null odds of these questions (``qids``) an earlier run wrote there, never a file of the user's.
    Refused before any prediction, one line naming the option and the path."""
    out = Path(args.output)
    if args.null_odds:
        path = Path(args.null_odds)
        if os.path.realpath(path) == os.path.realpath(out):
            raise SpanBertError(f"--null_odds: found {path}, the --output file, expected another file for the null odds")
        return path
    path = out.parent / NULL_ODDS
    if os.path.realpath(path) == os.path.realpath(out):
        raise SpanBertError(
            f"--output: found {out}, the file a SQuAD 2.0 model writes its null odds to, expected another name for the "
            f"predictions (or name the null odds' file with --null_odds)"
        )
    if os.path.lexists(path) and not writes_through(path) and not _null_odds_of(path, qids):
        raise SpanBertError(
            f"--null_odds: found {path}, a file this command did not write (not the null odds of these questions), "
            f"where the SQuAD 2.0 null odds go by default; expected --null_odds naming where to write them (or naming "
            f"that file, to replace it)"
        )
    return path


def _null_odds_of(path: Path, qids: set[str]) -> bool:
    """Whether ``path`` holds null odds (question id -> number) of exactly the questions ``qids``: an earlier
    run's output, replaced by this one."""
    try:
        odds = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(odds, dict)
        and set(odds) == qids
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in odds.values())
    )


def _evaluate(task: str, opts: QAEvaluate) -> Results:
    """``spanbert evaluate {squad,mrqa} --data GOLD --predictions PREDS``: the official scores."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = evaluate_files(task, opts.data, opts.predictions, opts.na_prob, opts.articles, opts.na_prob_thresh)
    for w in caught:  # one summary line (N of M questions have no prediction), not one per question
        eprint0(f"warning: {w.message}")
    return Results(metrics, "f1")


def _score_model(task: str, model: str, data: str, options: dict[str, Any]) -> Results:
    """A fine-tuned model scored on labelled questions: predicted into the model folder, then scored
    with the official script's rules (`evaluate` takes predictions, not a model)."""
    preds = api.predict(task, model=model, data=data, output=Path(model) / "heldout_predictions.json",
                        disable_tqdm=True, **options)  # fmt: skip
    return api.evaluate(task, data=data, predictions=preds)


SPECS = {
    name: TaskSpec(
        name, description, _finetune, _predict, _evaluate, options=ACTIONS, metric="f1", data=FORMATS[name],
        dev_split=split,
        score_model=functools.partial(_score_model, name),
    )
    for name, description, split in (
        ("squad", "extractive QA, SQuAD v1.1/v2.0 JSON",
         RecordSplit(".json", "squad-articles", ("validation_articles",), _restrict_articles)),
        ("mrqa", "extractive QA, MRQA jsonl(.gz)",
         RecordSplit(".jsonl", "jsonl-after-header", ("validation_articles",), _restrict_articles)),
    )
}  # fmt: skip
