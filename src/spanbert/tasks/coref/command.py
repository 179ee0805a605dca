"""``spanbert finetune|predict|evaluate coref``, LitBank's ten-fold split (`LITBANK_FOLDS`) and the task's
`TaskSpec`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from spanbert.config import add_dataclass_arguments, dataclass_from_args, parse_key_values
from spanbert.distributed import eprint0, print0
from spanbert.errors import SpanBertError, utf8_argument
from spanbert.metrics.coref import document_rows
from spanbert.metrics.resample import write_example_stats
from spanbert.runs import claim_run_dir
from spanbert.tasks import api, command_line
from spanbert.tasks.command_line import add_finetune_arguments, parse_task_args, task_parser
from spanbert.tasks.coref.data import read_conll, read_documents, write_conll
from spanbert.tasks.coref.finetune import COREF_PRESETS, DEFAULTS, finetune_coref
from spanbert.tasks.coref.folder import evaluate_clusters
from spanbert.tasks.coref.model import CorefConfig
from spanbert.tasks.coref.options import ACTIONS, CorefEvaluate, CorefPredict
from spanbert.tasks.coref.predict import CorefPredictor
from spanbert.tasks.finetuning import check_output_dir
from spanbert.tasks.options import one_of
from spanbert.tasks.ranks import predict_sharded, print_metrics, start_distributed, write_once
from spanbert.tasks.spec import Folds, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.tasks.task_folders import check_sequence_length
from spanbert.utils import input_paths

# =============================================================================================
# Command line


def _add_coref_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("coreference model")
    add_dataclass_arguments(group, CorefConfig, defaults={"max_seq_length": "unset, following the encoder"})


def _finetune(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert finetune coref ...``: one run (no --sweep), the released presets under the options."""
    parser = task_parser(prog, __doc__)
    parser.add_argument(
        "--train", required=True, help="CoNLL-2012 file or folder of *.conll[.gz] files to train on"
    )
    parser.add_argument(
        "--dev",
        help="CoNLL-2012 file or folder scored during training (every --eval_steps, or --evals_per_epoch times "
        "an epoch) and at the end; the model of the best --metric_for_best_model (conll_f1) is kept",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(COREF_PRESETS),
        help="the released SpanBERT coreference settings (mandarjoshi90/coref experiments.conf): spanbert_base "
        "(segments 384, encoder 2e-5, task 1e-4) or spanbert_large (512, 1e-5, 3e-4), with Adam eps 1e-6, "
        "dev evaluation every 1000 steps, ...; options given on the command line or in --config win",
    )
    parser.add_argument("--max_eval_examples", type=int, help="use only the first N dev documents")
    _add_coref_arguments(parser)
    add_finetune_arguments(parser, DEFAULTS)
    args = parse_task_args(parser, argv, configs=(CorefConfig,))  # --config YAML, strict
    preset = COREF_PRESETS[args.preset] if args.preset else {"training": {}, "coref": {}}
    if args.sweep:
        raise SpanBertError(
            "--sweep runs the Appendix B grid of the classification/QA tasks; for coreference set "
            "--learning_rate (task layers, 1e-4 ... 3e-4) and --encoder_learning_rate (1e-5 / 2e-5) instead"
        )
    overrides = list(args.overrides or [])
    coref_keys = set(CorefConfig.__dataclass_fields__)
    kv = parse_key_values(overrides)
    args.overrides = [o for o, k in zip(overrides, kv) if k not in coref_keys]
    # defaults < preset < --config YAML < --flags < key=value
    targs = command_line.training_arguments(args, {**DEFAULTS, **preset["training"]})
    config = dataclass_from_args(
        CorefConfig, args, defaults=preset["coref"],
        overrides=[o for o, k in zip(overrides, kv) if k in coref_keys],
    )  # fmt: skip
    # the output contract (apart from every input), the segment length against the encoder's positions, then
    # the folder held for the whole command: all before a document is read
    check_output_dir(targs, input_paths(args))
    if config.max_seq_length is not None:
        check_sequence_length(args.model, config.max_seq_length)
    start_distributed(targs.device)
    with claim_run_dir(targs.output_dir, prog):
        summary = finetune_coref(args.model, args.train, args.dev, targs, config, args.tokenizer, args.max_eval_examples)
    step = summary.get("selected_step")
    return Results(summary, "conll_f1", int(step) if step is not None else None, Path(targs.output_dir))


def _predict(task: str, opts: CorefPredict) -> Path | None:
    """``spanbert predict coref (--data CONLL --output OUT | --text TEXT)``: the file written (None for a
    --text, whose clusters are printed)."""
    one_of(opts, "data", "text")
    if opts.data is not None and not opts.output:
        raise SpanBertError("spanbert predict coref: --output OUT.conll is required with --data")
    text = utf8_argument(opts.text, "--text") if opts.text is not None else None
    device = start_distributed(opts.device)
    docs = read_documents(opts.data) if opts.data is not None else []  # bad data fails before loading
    predictor = CorefPredictor.from_pretrained(opts.model, device=str(device))
    if text is not None:
        print0(json.dumps({"clusters": predictor.predict_text(text)}, indent=2, ensure_ascii=False))
        return None
    t0 = time.perf_counter()
    # each rank resolves its share of the documents; rank 0 writes them all
    predictions = predict_sharded(
        len(docs), lambda idx: predictor.predict_documents([docs[i] for i in idx], not opts.disable_tqdm)
    )
    seconds = time.perf_counter() - t0
    write_once(lambda: write_conll(opts.output, docs, predictions))
    eprint0(f"wrote {len(docs)} documents to {opts.output} ({len(docs) / seconds:.2f} documents/s)")
    if any(d.clusters for d in docs):
        print_metrics(evaluate_clusters(docs, predictions))
    return Path(opts.output)


def _evaluate(task: str, opts: CorefEvaluate) -> Results:
    """``spanbert evaluate coref --gold KEY --predictions RESPONSE``: MUC, B3, CEAF-e and their mean."""
    return Results(evaluate_files(opts.gold, opts.predictions), "conll_f1")


def _score_model(model: str, data: str, options: dict[str, Any]) -> Results:
    """A fine-tuned model scored on gold documents: resolved into the model folder, then scored; with
    ``example_stats=FILE`` each document's counts are written there too (`document_rows`)."""
    options = dict(options)
    stats = options.pop("example_stats", None)
    predictions = api.predict("coref", model=model, data=data, output=Path(model) / "heldout.conll",
                              disable_tqdm=True, **options)  # fmt: skip
    if stats:
        key_docs = read_documents(data)
        resp = {d.doc_id: d.clusters for d in read_documents(predictions)}
        rows = document_rows([d.clusters for d in key_docs], [resp.get(d.doc_id, []) for d in key_docs])
        write_once(lambda: write_example_stats(stats, "conll", rows))
    return Results(evaluate_files(data, predictions), "conll_f1")


# LitBank's ten-fold split (Bamman et al. 2020): tenfold_splits/K/{train,dev,test}.ids name the documents of
# fold K, each a conll/NAME.conll.gz file


def _is_litbank(source: str) -> bool:
    return Path(source).is_dir()


def _holds_litbank_folds(source: str) -> bool:
    return (Path(source) / "tenfold_splits").is_dir()


def prepare_litbank_fold(source: str, fold: int, folder: Path) -> None:
    """train.conll, dev.conll and test.conll of fold ``fold`` of the LitBank folder ``source``."""
    root = Path(source)
    for split in ("train", "dev", "test"):
        ids = (root / "tenfold_splits" / str(fold) / f"{split}.ids").read_text().split()
        files = [root / "conll" / i.replace(".tsv", ".conll.gz") for i in ids]
        write_conll(folder / f"{split}.conll", [d for f in files for d in read_conll(f)])


LITBANK_FOLDS = Folds(
    name="litbank",
    count=10,
    source="the LitBank folder (with tenfold_splits/)",
    applies=_is_litbank,
    holds_folds=_holds_litbank_folds,
    prepare=prepare_litbank_fold,
    files=lambda folder: (folder / "train.conll", folder / "dev.conll", folder / "test.conll"),
)


def evaluate_files(gold: str | Path, predictions: str | Path) -> dict[str, float]:
    """Score a response file against a key file, matching documents by (key, part); every key
    document must be in the response (extra response documents are an error too)."""
    key_docs = read_documents(gold)
    resp = {d.doc_id: d for d in read_documents(predictions)}
    missing = [d.doc_id for d in key_docs if d.doc_id not in resp]
    if missing:
        raise SpanBertError(
            f"{predictions}: found no prediction for {len(missing)} gold document(s), e.g. {missing[:3]}; expected "
            f"every document of {gold}"
        )
    extra = set(resp) - {d.doc_id for d in key_docs}
    if extra:
        raise SpanBertError(
            f"{predictions}: found {len(extra)} document(s) not in {gold}, e.g. {sorted(extra)[:3]}; expected only "
            f"the gold documents"
        )
    for d in key_docs:
        r = resp[d.doc_id]
        if r.num_words != d.num_words:
            raise SpanBertError(
                f"{r.source}: found {r.num_words} words in document {d.doc_id!r}; expected {d.num_words}, as the "
                f"gold one ({d.source})"
            )
    scores = evaluate_clusters(key_docs, [resp[d.doc_id].clusters for d in key_docs])
    scores["documents"] = len(key_docs)
    return scores


SPECS = {
    "coref": TaskSpec(
        name="coref",
        description="coreference resolution, CoNLL-2012 format",
        finetune=_finetune,
        predict=_predict,
        evaluate=_evaluate,
        metric="conll_f1",
        data="CoNLL-2012 files or folders of *.conll[.gz] (OntoNotes, LitBank)",
        configs=(("spanbert.tasks.coref", "CorefConfig"),),
        dev_split=RecordSplit(".conll", "conll-documents"),
        data_options=lambda train, dev: {"train": train, "dev": dev},
        score_model=_score_model,
        folds=LITBANK_FOLDS,
        example_stats=True,
        options=ACTIONS,
    )
}
