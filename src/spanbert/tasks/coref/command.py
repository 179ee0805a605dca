"""``spanbert finetune|predict|evaluate coref``, LitBank's ten-fold split (`LITBANK_FOLDS`) and the task's
`TaskSpec`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from spanbert.distributed import eprint0, print0
from spanbert.errors import SpanBertError, utf8_argument
from spanbert.metrics.coref import document_rows
from spanbert.metrics.resample import write_example_stats
from spanbert.tasks import api
from spanbert.tasks.coref.data import read_conll, read_documents, write_conll
from spanbert.tasks.coref.finetune import finetune_coref
from spanbert.tasks.coref.folder import evaluate_clusters
from spanbert.tasks.coref.options import ACTIONS, CorefEvaluate, CorefFinetune, CorefPredict
from spanbert.tasks.coref.predict import CorefPredictor
from spanbert.tasks.finetuning import finetune_options
from spanbert.tasks.options import one_of
from spanbert.tasks.ranks import predict_sharded, print_metrics, start_distributed, write_once
from spanbert.tasks.spec import Folds, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.training_args import TrainingArguments


def _finetune(task: str, opts: CorefFinetune) -> Results:
    """``spanbert finetune coref ...``: one run (no --sweep), the released presets under the options."""
    if opts.sweep:
        raise SpanBertError(
            "--sweep runs the Appendix B grid of the classification/QA tasks; for coreference set "
            "--learning_rate (task layers, 1e-4 ... 3e-4) and --encoder_learning_rate (1e-5 / 2e-5) instead"
        )

    def run_one(targs: TrainingArguments) -> dict[str, Any]:
        return finetune_coref(opts.model, opts.train, opts.dev, targs, opts.coref, opts.tokenizer,
                              opts.max_eval_examples)  # fmt: skip

    # the output contract (apart from every input) and the segment length against the encoder's positions
    # are checked there before a document is read, and the folder is held for the whole command
    return finetune_options(opts, run_one, "conll_f1", f"spanbert finetune {task}")


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
        "coref", "coreference resolution, CoNLL-2012 format", _finetune, _predict, _evaluate, options=ACTIONS,
        metric="conll_f1", data="CoNLL-2012 files or folders of *.conll[.gz] (OntoNotes, LitBank)",
        dev_split=RecordSplit(".conll", "conll-documents"),
        data_options=lambda train, dev: {"train": train, "dev": dev},
        score_model=_score_model,
        folds=LITBANK_FOLDS,
        example_stats=True,
    )
}
