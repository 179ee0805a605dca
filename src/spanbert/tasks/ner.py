"""Named entity recognition on CoNLL-2003 (BERT §5.3): a token classifier, no CRF, conlleval F1.

Any model family (`spanbert.families`). The head is the family's default tagger, or ``--tagger``:
``linear`` (BERT §5.3, below) or ``bilstm-crf`` (the two-tower model's §6.2.1 head,
`spanbert.tasks.crf_tagger`); ``--features`` is BERT's feature-based approach (`ner_features`).

Each word is split into WordPieces; only the first sub-token of a word feeds the classifier ("we use
the representation of the first sub-token as the input to the token-level classifier over the NER
label set", BERT §5.3), the others carry label -100 and are ignored. A sentence longer than
``max_seq_length`` tokens is cut into consecutive pieces at word boundaries, so every word gets a
prediction. The score is entity-level F1 as ``conlleval`` computes it
(`spanbert.metrics.classification.conlleval`), reported x100 (0-100) as conlleval prints it. IOB1 and
IOB2 tags are scored exactly as conlleval; IOBES tags (``S-``/``E-``) are read as the chunks they
denote, which conlleval (2004) does not do (docs/tasks.md).

Document context (BERT §5.3: "we include the maximal document context provided by the data"): with
``document_context`` each sentence (or piece) is encoded inside the WordPieces of its document
(``-DOCSTART-`` to ``-DOCSTART-``), as many neighbouring tokens as fit in ``max_seq_length``, centred
on it; labels and predictions stay on its own words. `spanbert finetune ner` does this by default
(``--document_context false``: each sentence alone) and saves the setting with the model, so a model
predicts as it was trained (models saved before the option: sentences alone).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from spanbert import families
from spanbert.config import add_dataclass_arguments, dataclass_from_args, load_yaml
from spanbert.distributed import print0
from spanbert.errors import DataError, SpanBertError
from spanbert.metrics.classification import conlleval_rows
from spanbert.metrics.resample import write_example_stats
from spanbert.tasks import classification as C
from spanbert.tasks import crf_tagger as CT
from spanbert.tasks import ner_features as NF
from spanbert.tasks.command_line import (
    add_sequence_length_argument,
    family_defaults,
    model_in_argv,
)
from spanbert.tasks.conll import (
    _TAG,
    NerSentence,
    add_document_context_argument,
    decode,
    label_list,
    ner_features,
    read_conll,
    read_predictions,
    score,
    write_predictions,
)
from spanbert.tasks.finetuning import finetune_command
from spanbert.tasks.ner_options import ACTIONS, NerEvaluate, NerPredict
from spanbert.tasks.options import one_of, selection_defaults
from spanbert.tasks.ranks import print_metrics, seeded_model, start_distributed, write_json_once, write_once
from spanbert.tasks.scores import warn_unseen
from spanbert.tasks.selection import selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.tasks.task_folders import (
    check_task_settings,
    load_encoder,
    load_task_model,
    load_tokenizer_for,
    save_finetuned,
)
from spanbert.trainer import eval_size

# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, CLI

DEFAULTS = dict(
    output_dir="runs/ner",
    learning_rate=5e-5,
    per_device_train_batch_size=32,
    num_train_epochs=4.0,
    warmup_ratio=0.1,
    **selection_defaults("f1"),
)
"""BERT's fine-tuning recipe (§A.3: lr in {5e-5, 3e-5, 2e-5}, batch 16/32, 2-4 epochs); the model of the
best dev conlleval F1 of 10 evaluations an epoch is kept, as the SpanBERT scripts select theirs."""


def finetune_ner(
    model_dir: str | Path,
    train_path: str | Path,
    dev_path: str | Path | None,
    args: Any,
    tokenizer_dir: str | Path | None = None,
    max_seq_length: int = 128,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    document_context: bool = True,
    tagger: str | None = None,
    crf: Any = None,
) -> dict[str, Any]:
    """Fine-tune a tagger (``tagger``: linear or bilstm-crf; None = the family's default) and save it in
    ``args.output_dir``; returns dev conlleval scores. ``document_context`` (§5.3, on by default as in the
    paper) is saved in config.json for prediction; ``crf`` is the `CrfTaggerConfig` of the biLSTM-CRF."""
    tagger = tagger or families.habits_of(model_dir).tagger
    if tagger not in TAGGERS:
        raise SpanBertError(f"--tagger: found {tagger!r}, expected one of {', '.join(TAGGERS)}")
    train = read_conll(train_path)[:max_train_examples]
    dev = read_conll(dev_path)[:max_eval_examples] if dev_path else []
    labels = label_list(train)
    label2id = {l: i for i, l in enumerate(labels)}
    unseen = warn_unseen(dev_path, [t for s in dev for t in (s.tags or [])], labels, "tag",
                         f"the training sentences used ({train_path}, {len(train)} sentences)")  # fmt: skip
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    train_features = ner_features(train, tokenizer, label2id, max_seq_length, str(train_path), document_context)
    # the biLSTM-CRF's dev loss decides early stopping (§4), so its dev features carry labels (a tag the
    # model cannot predict counts as O in that loss; the scorer counts it as a miss)
    dev_ids = {**label2id, **{t: label2id["O"] for t in unseen}} if tagger == "bilstm-crf" else None
    dev_features = ner_features(dev, tokenizer, dev_ids, max_seq_length, str(dev_path), document_context)
    out = Path(args.output_dir)
    settings = {"task": "ner", "max_seq_length": max_seq_length, "document_context": document_context}
    if tagger == "bilstm-crf":
        crf = crf or CT.CrfTaggerConfig()
        with seeded_model(args.seed):
            model = CT.CrfTagger(load_encoder(model_dir), len(labels), crf.stacking, crf.tagger_projection_dim,
                                 crf.tagger_lstm_hidden_size, crf.tagger_dropout)  # fmt: skip
        metrics, pred = CT.finetune(model, train_features, dev, dev_features, labels, args, tokenizer.pad_id, crf, score)
        settings.update(CT.settings_of(crf))
        architecture = families.architecture(model.bert, CT.TASK)
        save = lambda: save_tagger(model, out, tokenizer, architecture, labels, settings)  # noqa: E731
    else:
        model = C.build_model("token", model_dir, len(labels), seed=args.seed)

        def predict(m: Any) -> list[list[str]]:
            return decode(
                dev,
                dev_features,
                C.predict_logits(m, dev_features, tokenizer.pad_id, args.per_device_eval_batch_size),
                labels,
            )

        done = C.finetune_selected(
            model, train_features, args, tokenizer.pad_id, predict if dev else None, lambda p: score(dev, p),
            eval_size(len(dev), dev_features),
        )
        pred = done.predictions
        metrics = {**score(dev, pred), **selection_summary(done.selected_step, args)} if dev else {}
        save = lambda: C.save_model(model, out, tokenizer, "token", labels, settings)  # noqa: E731

    def write() -> None:
        save()
        if dev:
            write_predictions(out / "dev_predictions.txt", dev, pred)
            write_json_once(out / RESULTS_FILE, metrics)

    write_once(write)
    return metrics


TAGGERS = ("linear", "bilstm-crf")
NEEDS = "a NER model (spanbert finetune ner)"


def save_tagger(model: Any, out: Path, tokenizer: Any, architecture: str, labels: list[str],
                settings: dict[str, Any]) -> None:  # fmt: skip
    """Save a tagger whose head is not one of `classification`'s (the biLSTM-CRF)."""
    save_finetuned(model, out, tokenizer, architecture, {**C.label_config(labels), "spanbert": settings})


def check_model(model_dir: str | Path) -> dict[str, Any]:
    """config.json of a NER model folder; anything else (a pre-trained-only folder, a GLUE model) is
    refused before any data is read."""
    if NF.is_feature_model(model_dir):
        return {}
    accepted = families.architectures("ForTokenClassification") + families.architectures(CT.TASK)
    raw, _ = check_task_settings(model_dir, accepted, NEEDS, ("ner",))
    return raw


def predict_ner(
    model_dir: str | Path, sentences: list[NerSentence], batch_size: int = 64, device: str = "cpu",
    progress: bool = True, source: str | Path | None = None,
) -> list[list[str]]:  # fmt: skip
    """Tags for every word of ``sentences`` with a model saved by `finetune_ner`. With ``source`` (the
    data file), gold tags the model never saw in training are a warning (they count as misses)."""
    if NF.is_feature_model(model_dir):  # a biLSTM on frozen features (`finetune ner --features`)
        return NF.predict(model_dir, sentences, batch_size, device, progress, source)
    raw = check_model(model_dir)
    config_file = Path(model_dir) / "config.json"
    crf = raw.get("architectures", [None])[0] in families.architectures(CT.TASK)
    if crf:

        def build(encoder: Any, config_json: dict[str, Any]) -> Any:
            labels = C.labels_from_config(config_json, str(config_file)) or []
            return CT.build(encoder, len(labels), config_json.get("spanbert", {}))

        model, config_json, tokenizer = load_task_model(model_dir, build, families.architectures(CT.TASK), NEEDS, device)
    else:
        model, config_json, tokenizer = C.load_model("token", model_dir, device, needs=NEEDS)
    labels = C.labels_from_config(config_json, str(config_file))
    bad = [l for l in labels or [] if not _TAG.match(l)]
    if labels is None or bad:
        raise DataError(config_file, f"found labels {bad or labels}; expected NER tags (O, B-TYPE, I-TYPE, ...)")
    if source is not None:
        warn_unseen(source, [t for s in sentences for t in (s.tags or [])], labels, "tag",
                    f"the training tags of {model_dir}")  # fmt: skip
    settings = config_json.get("spanbert", {})
    # a model saved before the option was trained on sentences alone: it predicts that way
    features = ner_features(
        sentences, tokenizer, None, settings.get("max_seq_length", 128),
        document_context=bool(settings.get("document_context", False)),
    )  # fmt: skip
    if crf:
        tag_ids, _ = CT.predict_tags(model, features, tokenizer.pad_id, batch_size, progress)
        return CT.words_to_tags(sentences, features, tag_ids, labels)
    return decode(
        sentences, features, C.predict_logits(model, features, tokenizer.pad_id, batch_size, progress=progress), labels
    )


def _wants_features(argv: list[str]) -> bool:
    """Whether ``finetune ner`` is asked for the feature-based approach (``--features``, or
    ``features:`` in its ``--config`` YAML)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--features")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.features:
        return True
    if known.config:
        data = load_yaml(known.config)
        return any(k == "features" or (isinstance(v, dict) and "features" in v) for k, v in data.items())
    return False


def _tagger_in_argv(argv: list[str]) -> str:
    """The tagger a ``finetune ner`` command line asks for: ``--tagger`` (or ``tagger:`` in its ``--config``
    YAML), else the ``--model`` family's default (linear when the folder cannot be read yet)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--tagger")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.tagger:
        return known.tagger
    if known.config:
        for k, v in load_yaml(known.config).items():
            if k == "tagger" and isinstance(v, str):
                return v
            if isinstance(v, dict) and isinstance(v.get("tagger"), str):
                return v["tagger"]
    model_dir = model_in_argv(argv)
    try:
        return families.habits_of(model_dir).tagger if model_dir else "linear"
    except SpanBertError:
        return "linear"


def _finetune(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert finetune ner ...``: the linear or biLSTM-CRF tagger, or with --features BERT's
    feature-based NER (its own command line, `ner_features.finetune_cli`)."""
    if _wants_features(argv):
        return NF.finetune_cli(argv, prog)
    tagger = _tagger_in_argv(argv)
    if tagger == "bilstm-crf":
        argv = CT.renamed(argv)
    defaults = family_defaults(argv, DEFAULTS)
    if tagger == "bilstm-crf":  # §4, §6.2.1: its own rates, batch and epochs; one evaluation an epoch
        defaults = {**defaults, **CT.TRAINING_DEFAULTS, "evals_per_epoch": 1, "metric_for_best_model": None}

    def add_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--train_file", "--train", dest="train", required=True, help="CoNLL-2003 training file (word POS chunk TAG)"
        )
        parser.add_argument(
            "--validation_file",
            "--dev",
            dest="dev",
            help="CoNLL-2003 dev file, scored with conlleval during and after training",
        )
        add_sequence_length_argument(parser, "tokens per input piece")
        parser.add_argument("--max_train_examples", type=int, help="use only the first N training sentences")
        parser.add_argument("--max_eval_examples", type=int, help="use only the first N dev sentences")
        add_document_context_argument(parser)
        # listed for --help; they take effect only with --features (a frozen encoder + biLSTM, Table 7)
        add_dataclass_arguments(
            parser.add_argument_group("feature-based NER (BERT §5.3 Table 7; with --features, whose training "
                                      "defaults differ: see docs/tasks.md)"), NF.HeadConfig,
        )  # fmt: skip
        parser.add_argument(
            "--tagger", choices=TAGGERS, default=None,
            help="the head: linear (BERT §5.3: softmax on each word's first sub-token) or bilstm-crf (two-tower "
            "§6.2.1: projection, biLSTM, CRF, early stopping on the dev loss); default: the model family's "
            "(BERT: linear, two-tower: bilstm-crf)",
        )  # fmt: skip
        add_dataclass_arguments(parser.add_argument_group("biLSTM-CRF tagger (with --tagger bilstm-crf)"),
                                CT.CrfTaggerConfig)  # fmt: skip

    crf: dict[str, Any] = {}

    def check(args: argparse.Namespace) -> None:  # before any output is checked or data read
        stray = sorted(f"--{f.name}" for f in dataclasses.fields(NF.HeadConfig) if f.name in vars(args))
        if stray:
            raise SpanBertError(f"found {', '.join(stray)} without --features; expected them with --features only")
        stray = sorted(f"--{f.name}" for f in dataclasses.fields(CT.CrfTaggerConfig) if f.name in vars(args))
        if stray and tagger != "bilstm-crf":
            raise SpanBertError(f"found {', '.join(stray)} with the linear tagger; expected them with "
                                "--tagger bilstm-crf only")  # fmt: skip
        if tagger == "bilstm-crf" and args.sweep:
            raise SpanBertError("--sweep: the biLSTM-CRF tagger has no grid here; the paper tuned (head, encoder) "
                                "rate pairs: run --learning_rate / --encoder_learning_rate once per pair")  # fmt: skip
        crf["config"] = dataclass_from_args(CT.CrfTaggerConfig, args)

    def run_one(args: argparse.Namespace, targs: Any) -> dict[str, Any]:
        return finetune_ner(
            args.model, args.train, args.dev, targs, args.tokenizer, args.max_seq_length,
            args.max_train_examples, args.max_eval_examples, args.document_context, tagger, crf["config"],
        )  # fmt: skip

    return finetune_command(prog, __doc__, argv, add_options, defaults, run_one, metric="f1",
                            configs=[NF.HeadConfig, CT.CrfTaggerConfig], check=check)  # fmt: skip


def _predict(task: str, opts: NerPredict) -> Path:
    """``spanbert predict ner ...``."""
    check_model(opts.model)
    start_distributed(opts.device)
    sentences = read_conll(opts.data, require_tags=False)
    pred = predict_ner(opts.model, sentences, opts.batch_size, opts.device, not opts.disable_tqdm)
    write_once(lambda: write_predictions(opts.output, sentences, pred))
    print0(f"wrote tags for {len(pred)} sentences to {opts.output}")
    if all(s.tags for s in sentences):
        print_metrics(score(sentences, pred))
    return Path(opts.output)


def _evaluate(task: str, opts: NerEvaluate) -> Results:
    """``spanbert evaluate ner ...``."""
    if one_of(opts, "predictions", "model") == "model":
        check_model(opts.model)
        start_distributed(opts.device)
    sentences = read_conll(opts.data)
    pred = (
        predict_ner(opts.model, sentences, opts.batch_size, opts.device, not opts.disable_tqdm, source=opts.data)
        if opts.model
        else read_predictions(opts.predictions, sentences)
    )
    if opts.example_stats:
        rows = conlleval_rows([s.tags for s in sentences], pred)
        write_once(lambda: write_example_stats(opts.example_stats, "f1", rows))
    return Results({**score(sentences, pred), "sentences": len(sentences)}, "f1")


SPECS = {
    "ner": TaskSpec(
        name="ner",
        description="named entity recognition, CoNLL-2003 IOB",
        finetune=_finetune,
        predict=_predict,
        evaluate=_evaluate,
        metric="f1",
        data="CoNLL-2003 files (word POS chunk TAG)",
        configs=(("spanbert.tasks.ner_features", "HeadConfig"), ("spanbert.tasks.crf_tagger", "CrfTaggerConfig")),
        dev_split=RecordSplit(".txt", "blank-line-blocks"),
        scores_test=True,
        example_stats=True,
        options=ACTIONS,
    )
}
