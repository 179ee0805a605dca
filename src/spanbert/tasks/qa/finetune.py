"""Fine-tuning and prediction: window settings (of a `QAConfig`, `spanbert.tasks.qa.options`), prediction
over windows (`run_prediction`, `answer`), `finetune_qa`, loading a fine-tuned folder."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from torch import nn

from spanbert import families
from spanbert.config import replace_checked
from spanbert.distributed import is_main, print0, resolve_device
from spanbert.errors import DataError, SpanBertError
from spanbert.tasks.batching import cpu_batch_tokens, length_batches
from spanbert.tasks.finetuning import check_output_dir
from spanbert.tasks.qa.data import QAData, QAExample, read_id_list, read_qa
from spanbert.tasks.qa.decoding import (
    Decoded,
    best_span_in_window,
    best_spans_in_batch,
    choose_threshold,
    decode_spans,
    score,
)
from spanbert.tasks.qa.features import QAFeatureDataset, QAFeatures, collate_qa, make_features, tokenize_data
from spanbert.tasks.qa.model import SpanBertForQuestionAnswering
from spanbert.tasks.qa.options import BERT_STRIDE, BERT_WINDOW, QAConfig
from spanbert.tasks.ranks import predict_sharded, seeded_model, start_distributed, write_json_once, write_once
from spanbert.tasks.selection import KeepBest, selection_summary
from spanbert.tasks.spec import RESULTS_FILE
from spanbert.tasks.task_folders import (
    check_task_settings,
    load_encoder,
    load_finetuned,
    load_tokenizer_for,
    save_finetuned,
)
from spanbert.trainer import eval_size, predict_batches, train

# ---------------------------------------------------------------------------------------------
# Fine-tuning and prediction


LONG_WINDOW_CAP = 1024
"""The longest window chosen by default for a long-context encoder. SQuAD passages are a paragraph
(nearly all under 512 tokens; the longest about 850) and MRQA's are cut near 800 tokens, so longer
windows would add nothing but memory: a batch of 32 windows stays within twice the tokens of BERT's."""


def window_settings(cfg: QAConfig, max_positions: int) -> tuple[QAConfig, str]:
    """``cfg`` with its window length and step chosen where the options left them unset, and the line
    that says what they are: ``windows: 1,024 tokens, stride 256 (the encoder's 8,192 positions, capped
    at 1,024; stride a quarter of the window)``. See `QAConfig.max_seq_length` and ``doc_stride``."""
    length, why = cfg.max_seq_length, "--max_seq_length"
    if length is None:
        if max_positions <= BERT_WINDOW:
            length, why = max_positions, f"the encoder's {max_positions:,} positions"
        elif max_positions <= LONG_WINDOW_CAP:
            length, why = max_positions, "the encoder's context"
        else:
            length, why = LONG_WINDOW_CAP, f"the encoder's {max_positions:,} positions, capped at {LONG_WINDOW_CAP:,}"
    stride, stride_why = cfg.doc_stride, "--doc_stride"
    if stride is None:
        if length <= BERT_WINDOW:
            stride, stride_why = BERT_STRIDE, "Appendix B's"
        else:
            stride, stride_why = length // 4, "a quarter of the window"
    line = f"windows: {length:,} tokens, stride {stride:,} ({why}; stride {stride_why})"
    return QAConfig(**{**asdict(cfg), "max_seq_length": length, "doc_stride": stride}), line


def config_dict(cfg: QAConfig) -> dict[str, Any]:
    """A `QAConfig` as the plain dict a model folder records and a changed copy is built from."""
    return asdict(cfg)


def features_for(data: QAData, tokenizer, cfg: QAConfig, training: bool, progress: bool = True):
    """(tokenized data, windows) of ``data`` under ``cfg``'s window settings: training windows carry the
    answer's start and end labels."""
    tok = tokenize_data(data, tokenizer, cfg.max_query_length, progress=progress)
    feats = make_features(
        data, tok, tokenizer.cls_id, tokenizer.sep_id, cfg.max_seq_length, cfg.doc_stride, training, tokenizer.mid_id
    )
    return tok, feats


T = TypeVar("T")


def _map_windows(
    model: nn.Module,
    features: QAFeatures,
    pad_id: int,
    reduce: Callable[[list[int], np.ndarray, np.ndarray], list[T]],
    batch_size: int,
    device: str,
    precision: str,
    disable_tqdm: bool,
) -> list[T]:
    """``reduce(windows, start_logits, end_logits)`` of every batch of windows (their (B, T) logits, one
    output per window), in feature order; each batch's logits are dropped once reduced. Windows run
    sorted by length; on CPU a batch holds windows of one length (no padding: the encoder runs no mask
    and no unpadding) and at most `cpu_batch_tokens` tokens (its activations reuse heap memory), on a
    GPU up to ``batch_size`` windows padded to their longest. Under torchrun each rank reduces its
    share and every rank returns all of them (contract 7)."""
    on_cpu = resolve_device(device).type == "cpu"
    lengths = [len(ids) for ids in features.input_ids]

    def collate(items):
        return collate_qa(items, pad_id)

    def predict(indices) -> list[T]:
        max_tokens = cpu_batch_tokens(model.bert) if on_cpu else 0
        batches = length_batches(indices, lengths, batch_size, same_length=on_cpu, max_tokens=max_tokens)
        ds = QAFeatureDataset(features, with_labels=False)
        got: dict[int, T] = {}
        quiet = disable_tqdm or not is_main()  # one bar under torchrun
        runs = predict_batches(model, ds, batch_size, collate, device, precision, "predict", quiet, batches=batches)
        for k, (_, out) in enumerate(runs):  # the generator runs to its end: the model's mode is restored
            windows = batches[k]
            sl = out["start_logits"].float().cpu().numpy()  # (B, T)
            el = out["end_logits"].float().cpu().numpy()  # (B, T)
            got.update(zip(windows, reduce(windows, sl, el)))
            del out, sl, el
        return [got[i] for i in indices]

    return predict_sharded(len(features), predict)


def predict_logits(model: nn.Module, features: QAFeatures, pad_id: int, batch_size: int = 64, device: str = "auto",
                   precision: str = "auto", disable_tqdm: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every window, in feature order. Call it on every rank under torchrun."""

    def keep(windows: list[int], start: np.ndarray, end: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(start[b, : lengths[i]].copy(), end[b, : lengths[i]].copy()) for b, i in enumerate(windows)]

    lengths = [len(ids) for ids in features.input_ids]
    both = _map_windows(model, features, pad_id, keep, batch_size, device, precision, disable_tqdm)
    return [x[0] for x in both], [x[1] for x in both]


def predict_window_spans(model: nn.Module, features: QAFeatures, pad_id: int, batch_size: int = 64,
                         device: str = "auto", precision: str = "auto", disable_tqdm: bool = False,
                         n_best_size: int = 20, max_answer_length: int = 30) -> list[tuple[float, int, int, float]]:
    """`best_span_in_window` of every window, in feature order: the same windows and batches as
    `predict_logits`, but each batch's logits are reduced to four numbers per window at once
    (`best_spans_in_batch`), so memory holds the answers, not the (windows x T) logits of the whole
    set. Call it on every rank."""

    def best(windows: list[int], start: np.ndarray, end: np.ndarray) -> list[tuple[float, int, int, float]]:
        return best_spans_in_batch(start, end, [features.query_len[i] for i in windows],
                                   [features.max_context[i] for i in windows], n_best_size, max_answer_length)  # fmt: skip

    return _map_windows(model, features, pad_id, best, batch_size, device, precision, disable_tqdm)


def run_prediction(
    model: nn.Module,
    data: QAData,
    tokenizer,
    cfg: QAConfig,
    batch_size: int = 64,
    device: str = "auto",
    precision: str = "auto",
    progress: bool = True,
) -> Decoded:
    """Answers to every question of ``data``: windows, `predict_window_spans`, `decode_spans`
    (the same predictions as `predict_logits` + `decode`, without holding every window's logits)."""
    cfg = window_settings(cfg, model.bert.max_positions)[0]  # a no-op for a loaded model's settings
    tok, feats = features_for(data, tokenizer, cfg, training=False, progress=progress)
    spans = predict_window_spans(
        model, feats, tokenizer.pad_id, batch_size, device, precision, not progress, cfg.n_best_size,
        cfg.max_answer_length,
    )  # fmt: skip
    return decode_spans(data, tok, feats, spans, cfg.version_2_with_negative, cfg.null_score_diff_threshold)


def answer(
    model_dir: str | Path, question: str, context: str, device: str = "auto", precision: str = "auto"
) -> dict[str, Any]:
    """The answer to one question about one raw-text context, as transformers' question-answering
    pipeline gives it: ``{"answer": text, "score": probability, "start": char, "end": char}`` with
    ``context[start:end] == answer``. Loads the fine-tuned model in ``model_dir`` (see `answer_with`
    to ask several questions of one loaded model)."""
    model, tokenizer, cfg = load_qa_model(model_dir)
    return answer_with(model, tokenizer, cfg, question, context, device, precision)


def answer_with(
    model: nn.Module,
    tokenizer: Any,
    cfg: QAConfig,
    question: str,
    context: str,
    device: str = "auto",
    precision: str = "auto",
) -> dict[str, Any]:
    """`answer` with a model already loaded (`load_qa_model`). The prediction path of `spanbert
    predict` (windows, max-context rule, n-best decoding, the SQuAD 2.0 threshold saved with the
    model); ``score`` is the pipeline's: the winning window's softmax probability of the start times
    that of the end, each over the window's passage tokens and ``[CLS]`` (a SQuAD 2.0 model's "" answer
    gets the ``[CLS]`` probability, start = end = 0)."""
    if not question.strip():
        raise SpanBertError("question: found an empty question, expected text")
    if not context.strip():
        raise SpanBertError("context: found an empty context, expected the text to answer from")
    data = QAData(
        path="<text>", format="squad", version_2=cfg.version_2_with_negative, contexts=[context],
        examples=[QAExample(qid="question", question=question, context_index=0, answers=[])], num_articles=1,
    )  # fmt: skip
    cfg = window_settings(cfg, model.bert.max_positions)[0]  # a no-op for a loaded model's settings
    tok, feats = features_for(data, tokenizer, cfg, training=False, progress=False)
    starts, ends = predict_logits(model, feats, tokenizer.pad_id, 64, device, precision, disable_tqdm=True)
    spans = [
        best_span_in_window(starts[i], ends[i], feats.query_len[i], feats.max_context[i], cfg.n_best_size,
                            cfg.max_answer_length)  # fmt: skip
        for i in range(len(feats))
    ]
    decoded = decode_spans(data, tok, feats, spans, cfg.version_2_with_negative, cfg.null_score_diff_threshold)
    text = decoded.predictions["question"]
    v2 = cfg.version_2_with_negative

    def probability(i: int, s: int, e: int) -> float:
        # softmax over [CLS] and the window's passage positions, start and end apart (the pipeline's
        # normalisation: it masks the question and separators, not [CLS], before its softmax)
        p0, width = feats.query_len[i] + 2, len(feats.max_context[i])
        keep = [0, *range(p0, p0 + width)]
        sl, el = np.asarray(starts[i], np.float64)[keep], np.asarray(ends[i], np.float64)[keep]
        ls, le = np.logaddexp.reduce(sl), np.logaddexp.reduce(el)
        return float(np.exp(starts[i][s] - ls + ends[i][e] - le))

    if text == "" and not any(sp[1] >= 0 for sp in spans) and not v2:
        return {"answer": "", "score": 0.0, "start": 0, "end": 0}
    if text == "" and v2:  # the null answer: its best window is the one with the smallest null score
        i = min(range(len(spans)), key=lambda k: spans[k][3])
        return {"answer": "", "score": probability(i, 0, 0), "start": 0, "end": 0}
    # the window `decode_spans` took: the best span score, the earliest window on ties
    i = max(range(len(spans)), key=lambda k: (spans[k][0], -k))
    _, s, e, _ = spans[i]
    p0, first = feats.query_len[i] + 2, feats.doc_start[i]
    offsets = tok.context_offsets[0]
    start, end = int(offsets[s + first, 0]), int(offsets[e + first, 1])
    assert context[start:end] == text, "the decoded span and its offsets disagree"
    return {"answer": text, "score": probability(i, s + p0, e + p0), "start": start, "end": end}


def finetune_qa(
    task: str,
    model_dir: str | Path,
    train_file: str | Path,
    validation_file: str | Path | None,
    targs,
    cfg: QAConfig,
    tokenizer_dir: str | Path | None = None,
    drop_ids_file: str | Path | None = None,
    train_articles: str | None = None,
    validation_articles: str | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
) -> dict[str, float]:
    """Fine-tune a QA model from any BERT checkpoint; save it (HF layout) in ``targs.output_dir``.

    ``max_eval_examples`` keeps the first N dev questions (after ``validation_articles``) for the
    evaluations during training, as GLUE and NER's option does.

    With a validation file the model is scored there ``targs.evals_per_epoch`` times an epoch and at
    the end (official metrics); with ``targs.metric_for_best_model`` (default ``f1``) the model saved
    is that of the best evaluation, and ``selected_step`` in the results names its step. For SQuAD 2.0
    the no-answer threshold is chosen on dev at each evaluation; the selected one is saved in
    config.json. Returns the dev metrics (``"f1"`` is the score the sweep compares).
    """
    check_output_dir(targs)  # before any reading or featurizing
    start_distributed(targs.device)
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    data = read_qa(train_file, task).select_articles(train_articles)
    if data.version_2 and not cfg.version_2_with_negative:
        print0(f"{train_file}: has unanswerable questions; training as SQuAD 2.0 (--version_2_with_negative)")
        cfg = QAConfig(**{**config_dict(cfg), "version_2_with_negative": True})
    if drop_ids_file:
        data, dropped = data.drop_ids(read_id_list(drop_ids_file))
        print0(f"dropped {dropped} questions listed in {drop_ids_file}")
    if max_train_examples:
        data = data.head(max_train_examples)
    if not data.examples:
        raise SpanBertError(f"{train_file}: no training questions left after the article selection / id filter")

    with seeded_model(targs.seed):  # the head's initialisation: the same in every run and on every rank
        encoder = load_encoder(model_dir, add_pooling_layer=False)
        model = SpanBertForQuestionAnswering(encoder=encoder, bilstm=cfg.bilstm)
    if encoder.vocab_size < tokenizer.vocab_size:
        raise SpanBertError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {encoder.vocab_size}"
        )
    # the windows follow the encoder's context where the options leave them unset (saved with the model)
    cfg, windows = window_settings(cfg, encoder.max_positions)
    print0(windows)
    _, feats = features_for(data, tokenizer, cfg, training=True, progress=not targs.disable_tqdm)
    if feats.skipped:
        print0(
            f"skipped {len(feats.skipped)} training questions whose answer covers no token (e.g. {feats.skipped[0]})"
        )
    print0(f"{len(data.examples)} training questions -> {len(feats)} windows")

    dev = None
    results: dict[str, Any] = {}
    if validation_file:
        dev = read_qa(validation_file, task).select_articles(validation_articles).head(max_eval_examples)
        if cfg.version_2_with_negative and dev.raw is None:
            raise SpanBertError(
                f"{validation_file}: MRQA has no unanswerable questions; drop --version_2_with_negative"
            )
        dev_tok, dev_feats = features_for(dev, tokenizer, cfg, training=False, progress=not targs.disable_tqdm)

    def eval_fn(m: nn.Module, step: int) -> dict[str, float]:
        assert dev is not None
        nonlocal cfg
        # what `spanbert predict` does (`run_prediction`) on the features built once before training
        spans = predict_window_spans(
            m, dev_feats, tokenizer.pad_id, targs.per_device_eval_batch_size, targs.device, targs.precision,
            targs.disable_tqdm, cfg.n_best_size, cfg.max_answer_length,
        )  # fmt: skip
        decoded = decode_spans(dev, dev_tok, dev_feats, spans, cfg.version_2_with_negative)
        metrics: dict[str, Any] = {}
        if cfg.version_2_with_negative:
            # every rank holds the same gathered predictions; the threshold is still chosen once
            # (rank 0) and broadcast, so the value saved is the value every rank used
            thresh, best = write_once(lambda: choose_threshold(dev, decoded))
            cfg = QAConfig(**{**config_dict(cfg), "null_score_diff_threshold": thresh})
            decoded = Decoded(
                {q: "" if decoded.null_odds[q] > thresh else t for q, t in decoded.best_non_null.items()},
                decoded.null_odds,
                decoded.best_non_null,
            )
            metrics.update(best, null_score_diff_threshold=thresh)
        # scores of the predictions themselves (at the chosen threshold, f1 = best_f1)
        metrics = {**score(dev, decoded.predictions), **metrics}
        results.clear()
        results.update(metrics, predictions=decoded.predictions, null_odds=decoded.null_odds)
        print0(f"step {step}: dev " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float)))
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], Any]:
        scores = eval_fn(m, step)
        return scores, (dict(results), cfg)  # the predictions and the threshold of this evaluation

    keeper = KeepBest(evaluate, targs)
    result = train(
        model,
        QAFeatureDataset(feats),
        targs,
        collate_fn=functools.partial(collate_qa, pad_id=tokenizer.pad_id),
        eval_fn=keeper if dev is not None else None,
        eval_size=eval_size(len(dev.examples), QAFeatureDataset(dev_feats, False)) if dev is not None else None,
    )
    selected = None
    if dev is not None:
        # the model holds the weights of the best dev evaluation: save its predictions and threshold
        (kept, cfg), selected = keeper.chosen(model, targs, result, len(feats))
        results.clear()
        results.update(kept)
    out = Path(targs.output_dir)
    metrics = {k: v for k, v in results.items() if k not in ("predictions", "null_odds")}
    metrics.update(selection_summary(selected, targs))

    def write() -> None:
        extra = {"spanbert": {"task": task, **config_dict(cfg)}}
        save_finetuned(model, out, tokenizer, families.architecture(model.bert, "ForQuestionAnswering"), extra)
        if results:
            write_json_once(out / "dev_predictions.json", results["predictions"], sort_keys=False)
            if cfg.version_2_with_negative:
                write_json_once(out / "dev_null_odds.json", results["null_odds"], sort_keys=False)
            write_json_once(out / RESULTS_FILE, metrics, sort_keys=False)

    write_once(write)  # the command says where it saved (`spanbert.tasks.finetuning.finetune_options`), as for every task
    return metrics


NEEDS = "a question-answering model (spanbert finetune squad|mrqa)"


def check_model(model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no QA model (a pre-trained-only folder,
    another task's model). A HF ``BertForQuestionAnswering`` folder is a QA model."""
    check_task_settings(model_dir, families.architectures("ForQuestionAnswering"), NEEDS, ("squad", "mrqa"))


def load_qa_model(model_dir: str | Path) -> tuple[SpanBertForQuestionAnswering, Any, QAConfig]:
    """A fine-tuned QA model (ours, any family, or a HF `BertForQuestionAnswering` folder), its tokenizer
    (framed for its family) and settings."""
    check_model(model_dir)
    config_json, state, tokenizer = load_finetuned(model_dir)
    source = Path(model_dir) / "config.json"
    if "qa_outputs.weight" not in state:
        raise SpanBertError(
            f"{model_dir}: not a question-answering model (no qa_outputs weights); fine-tune one with "
            "`spanbert finetune squad --model PRETRAINED --train_file ...`"
        )
    saved = config_json.get("spanbert", {})
    if not isinstance(saved, dict):
        raise DataError(source, f"found spanbert {saved!r:.60}; expected a mapping of QA settings")
    names = {f for f in QAConfig.__dataclass_fields__}
    cfg = replace_checked(QAConfig(), {k: v for k, v in saved.items() if k in names}, source=str(source))
    encoder = families.encoder_from_config(config_json, add_pooling_layer=False, source=str(source))
    # a folder without spanbert's settings (transformers' BertForQuestionAnswering): the encoder's defaults
    cfg = window_settings(cfg, encoder.max_positions)[0]
    model = SpanBertForQuestionAnswering(encoder=encoder, bilstm=cfg.bilstm)
    families.load_encoder_state(model.bert, state, str(model_dir))
    model.qa_outputs.load_state_dict({"weight": state["qa_outputs.weight"], "bias": state["qa_outputs.bias"]})
    if model.bilstm is not None:
        lstm = {k[len("bilstm.") :]: v for k, v in state.items() if k.startswith("bilstm.")}
        missing = sorted(set(model.bilstm.state_dict()) - set(lstm))
        if missing:
            raise DataError(source, f"found \"bilstm\": true and no bilstm.{missing[0]} weights, expected a model fine-tuned with --bilstm")
        model.bilstm.load_state_dict(lstm)
    model.eval()  # contract 5: loaders return eval mode, as transformers does
    return model, tokenizer, cfg


