"""Extractive question answering (SQuAD v1.1 / v2.0, MRQA): reader, features, head, decoding, CLI, a
module each.

§4.1 of the SpanBERT paper: the question and a passage window are encoded together and two linear
classifiers predict the start and end token of the answer; an unanswerable question (SQuAD 2.0) and
a window that does not contain the answer point at ``[CLS]`` for both. Appendix B: max_seq_length
512, sliding window, lr in {5e-6 .. 5e-5} x batch {16, 32}, 4 epochs.

Layout: ``[CLS] question [SEP] passage-window [SEP]``. The paper's text writes the passage first,
but the BERT and SpanBERT reference fine-tuning code (``run_squad.py``, ``run_mrqa.py``) put the
question first, and so do the released fine-tuned models; we follow the code (docs/qa.md).

The pipeline, each step a plain function:
  `read_squad` / `read_mrqa` -> `QAData` (contexts tokenized once, examples with character spans)
  -> `make_features` (windows, max-context flags, start/end labels) -> `SpanBertForQuestionAnswering`
  -> `decode` (n-best, max answer length, null score, threshold) -> `spanbert.metrics.squad`.
Prediction (`run_prediction`, and fine-tuning's evaluations) reduces each batch to one best span per
window at once (`best_spans_in_batch`, the batch form of `best_span_in_window`) and decodes those
(`decode_spans`): it never holds the whole set's logits.

The package, each module using only those above it:

    data       the SQuAD and MRQA readers (`QAData`)
    features   windows, labels, the dataset and collator (`make_features`, `collate_qa`)
    model      the head on any family's encoder (`SpanBertForQuestionAnswering`)
    decoding   logits to answers (`decode`, `best_spans_in_batch`, `choose_threshold`, `score`)
    options    each action's options (`QAFinetune`, `QAPredict`, `QAEvaluate`) and `QAConfig`; no torch
    finetune   prediction (`run_prediction`, `answer`), `finetune_qa`, `load_qa_model`
    command    the command line's actions, `evaluate_files`, the `TaskSpec`s of squad and mrqa

Every name of the single-file module is still importable from here; each is loaded from its module on
first use, so that importing the package (the options, for ``--help``) loads no torch.
"""

from __future__ import annotations

from spanbert import _aliases

# module -> the names it lends the package
_HOMES: dict[str, tuple[str, ...]] = {
    "command": (
        "SPECS",
        "evaluate_files",
    ),
    "data": (
        "QAData",
        "QAExample",
        "parse_slice",
        "read_id_list",
        "read_mrqa",
        "read_qa",
        "read_squad",
    ),
    "decoding": (
        "NO_SPAN",
        "Decoded",
        "best_span_in_window",
        "best_spans_in_batch",
        "choose_threshold",
        "decode",
        "decode_spans",
        "score",
    ),
    "features": (
        "QAFeatureDataset",
        "QAFeatures",
        "TokenizedData",
        "char_span_to_tokens",
        "collate_qa",
        "make_features",
        "tokenize_data",
    ),
    "options": (
        "BERT_STRIDE",
        "BERT_WINDOW",
        "DEFAULTS",
        "QAConfig",
        "QAEvaluate",
        "QAFinetune",
        "QAPredict",
    ),
    "finetune": (
        "LONG_WINDOW_CAP",
        "NEEDS",
        "answer",
        "answer_with",
        "check_model",
        "config_dict",
        "features_for",
        "finetune_qa",
        "load_qa_model",
        "predict_logits",
        "predict_window_spans",
        "run_prediction",
        "window_settings",
    ),
    "model": (
        "SpanBertForQuestionAnswering",
    ),
}
__getattr__, __dir__ = _aliases.package_names(__name__, _HOMES)
