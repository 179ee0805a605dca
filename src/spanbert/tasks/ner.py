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

import dataclasses
from pathlib import Path
from typing import Any

from spanbert import _aliases, families
from spanbert.distributed import print0
from spanbert.errors import DataError, SpanBertError
from spanbert.metrics.classification import conlleval_rows
from spanbert.metrics.resample import write_example_stats
from spanbert.tasks import classification as C
from spanbert.tasks import crf_tagger as CT
from spanbert.tasks import ner_features as NF
from spanbert.tasks.conll import (
    _TAG,
    NerSentence,
    decode,
    label_list,
    ner_features,
    read_conll,
    read_predictions,
    score,
    write_predictions,
)
from spanbert.tasks.finetuning import SEQ_LENGTH, finetune_options
from spanbert.tasks.ner_options import (
    ACTIONS,
    TAGGERS,
    CrfTaggerConfig,
    HeadConfig,
    NerEvaluate,
    NerFinetune,
    NerPredict,
    tagger_of,
)
from spanbert.tasks.options import named, names, one_of
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
from spanbert.training_args import TrainingArguments

# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, CLI

def finetune_ner(model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, args: Any,
                 tokenizer_dir: str | Path | None = None, max_seq_length: int = 128,
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 document_context: bool = True, tagger: str | None = None, crf: Any = None) -> dict[str, Any]:
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


def _finetune(task: str, opts: NerFinetune) -> Results:
    """``spanbert finetune ner ...``: the linear or biLSTM-CRF tagger, or with --features BERT's
    feature-based NER (`ner_features.features_run`)."""
    given = named(opts)
    if opts.features:
        stray = sorted(f"--{n}" for n in given & ({"tagger"} | names(CrfTaggerConfig)))
        if stray:
            raise SpanBertError(f"found {', '.join(stray)} with --features; expected the options of the "
                                "feature-based tagger only (a frozen encoder has no fine-tuned head)")  # fmt: skip
        return finetune_options(opts, NF.features_run(opts), "f1", f"spanbert finetune {task} --features",
                                seq_length=SEQ_LENGTH)  # fmt: skip
    tagger = tagger_of({"tagger": opts.tagger, "model": opts.model})
    crf = opts.crf
    if tagger == "bilstm-crf" and "lstm_hidden_size" in given:  # OLD_FLAGS: the two-tower command's spelling
        crf = dataclasses.replace(crf, tagger_lstm_hidden_size=opts.head.lstm_hidden_size)
        given = given - {"lstm_hidden_size"}
    stray = sorted(f"--{n}" for n in given & names(HeadConfig))
    if stray:
        raise SpanBertError(f"found {', '.join(stray)} without --features; expected them with --features only")
    stray = sorted(f"--{n}" for n in given & names(CrfTaggerConfig))
    if stray and tagger != "bilstm-crf":
        raise SpanBertError(f"found {', '.join(stray)} with the linear tagger; expected them with "
                            "--tagger bilstm-crf only")  # fmt: skip
    if tagger == "bilstm-crf" and opts.sweep:
        raise SpanBertError("--sweep: the biLSTM-CRF tagger has no grid here; the paper tuned (head, encoder) "
                            "rate pairs: run --learning_rate / --encoder_learning_rate once per pair")  # fmt: skip

    def run_one(targs: TrainingArguments) -> dict[str, Any]:
        return finetune_ner(
            opts.model, opts.train_file, opts.validation_file, targs, opts.tokenizer, opts.max_seq_length,
            opts.max_train_examples, opts.max_eval_examples, opts.document_context, tagger, crf,
        )  # fmt: skip

    return finetune_options(opts, run_one, "f1", f"spanbert finetune {task}", seq_length=SEQ_LENGTH)


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
        "ner", "named entity recognition, CoNLL-2003 IOB", _finetune, _predict, _evaluate, options=ACTIONS,
        metric="f1", data="CoNLL-2003 files (word POS chunk TAG)", dev_split=RecordSplit(".txt", "blank-line-blocks"),
        scores_test=True, example_stats=True,
    )
}

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
