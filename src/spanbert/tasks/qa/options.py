"""The options of ``spanbert finetune|predict|evaluate squad|mrqa``, one dataclass an action, and the
windowing and decoding settings a fine-tuned model keeps (`QAConfig`). No torch: ``--help`` is built
from these alone (`spanbert.tasks.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spanbert.tasks.options import Finetune, Inference, finetune_defaults, nested, option
from spanbert.training_args import TrainingArguments


@dataclass
class QAConfig:
    """Windowing and decoding settings of extractive QA (saved in the fine-tuned model's config.json)."""

    max_seq_length: int | None = None
    """Tokens per input window, [CLS] question [SEP] passage [SEP] (Appendix B: 512). Unset: it follows
    the encoder (`window_settings`): 512 for BERT's 512 positions, and for an encoder of a longer
    context (ModernBERT: 8,192) that context up to 1,024, which holds nearly every SQuAD and MRQA
    passage in one window. The value chosen is printed and saved with the model."""
    doc_stride: int | None = None
    """The step: distance in tokens between the starts of consecutive passage windows, as Google's and
    SpanBERT's run_squad.py (Appendix B: 128). Not the overlap that transformers' run_qa.py --doc_stride
    means: its --doc_stride D is spanbert's --doc_stride max_seq_length - question tokens - 3 - D
    (run_qa's 384 and 128, for a 13-token question: --doc_stride 240). Unset: 128 for windows of up
    to 512 tokens, a quarter of a longer window (BERT's proportion)."""
    max_query_length: int = 64
    """Questions are cut to this many tokens (BERT run_squad.py: 64)."""
    n_best_size: int = 20
    """Start and end candidates per window considered when decoding (BERT: 20)."""
    max_answer_length: int = 30
    """Longest answer in tokens (BERT: 30)."""
    version_2_with_negative: bool = False
    """SQuAD 2.0: questions may have no answer; predict "" when the [CLS] null score wins by more than the threshold."""
    null_score_diff_threshold: float = 0.0
    """SQuAD 2.0: answer "" when null score - best span score > this. Fine-tuning with a dev file
    chooses it on dev (official best-F1 search) and saves it with the model."""
    bilstm: bool = False
    """BERT Table 5 "+ BiLSTM": a randomly initialised biLSTM between the encoder and the span head (meant for the left-to-right baseline, `spanbert pretrain --system ltr`)."""


# Appendix B: 4 epochs; lr and batch size from the grid. 2e-5 x 32 (in the grid) is what the released
# SpanBERT commands use for SQuAD 1.1/2.0 and MRQA (README, code/run_squad.py, run_mrqa.py). With a dev
# file the model of the best dev F1 of 10 evaluations an epoch is kept, as those scripts do (SQuAD 2.0:
# F1 at the threshold chosen on dev, their --eval_metric best_f1).
DEFAULTS: dict[str, Any] = finetune_defaults(  # 10 evaluations an epoch, fewer when they would dominate a short run
    "f1", num_train_epochs=4.0, learning_rate=2e-5, per_device_train_batch_size=32, weight_decay=0.01, save_steps=0,
    output_dir="runs/qa",
)

BERT_WINDOW, BERT_STRIDE = 512, 128
"""Appendix B's windows and step: what an encoder of at most 512 positions gets by default."""

FORMATS = {"squad": "SQuAD v1.1/v2.0 JSON (.json or .json.gz)", "mrqa": "MRQA .jsonl or .jsonl.gz"}
"""The data each task reads (`TaskSpec.data`)."""


@dataclass(kw_only=True)
class QAFinetune(Finetune):
    """``spanbert finetune squad|mrqa``."""

    train_file: str = option(path="input")
    """training data (squad: SQuAD v1.1/v2.0 JSON; mrqa: MRQA .jsonl), .gz too"""
    validation_file: str | None = option(None, path="input")
    """dev data scored --evals_per_epoch times an epoch and at the end: the model of the best
    --metric_for_best_model is saved (and the SQuAD 2.0 threshold is chosen there). Never pass the test
    split here: score it afterwards with `spanbert predict` + `spanbert evaluate`"""
    drop_ids: str | None = option(None, path="input")
    """file of question ids to leave out of training (first tab-separated column), e.g.
    ../shared/data/squad/train-v1.1.rebuilt.ambiguous.tsv"""
    train_articles: str | None = None
    """train on these articles only, a slice start:stop (e.g. ':17')"""
    validation_articles: str | None = None
    """evaluate on these articles only (e.g. '17:')"""
    max_train_examples: int | None = None
    """use only the first N training questions"""
    max_eval_examples: int | None = None
    """use only the first N dev questions (after --validation_articles) for the evaluations during training"""
    qa: QAConfig = nested(QAConfig, exclude=("null_score_diff_threshold",), title="QA",
                          shown={"max_seq_length": f"{BERT_WINDOW} for BERT, see above", "doc_stride": BERT_STRIDE})  # fmt: skip
    training: TrainingArguments = nested(TrainingArguments, defaults=DEFAULTS, family=True, title="training")


@dataclass(kw_only=True)
class QAPredict(Inference):
    """``spanbert predict squad|mrqa``: ``--data FILE --output PREDS``, or ``--question Q --context C``."""

    model: str = option(path="input")
    """fine-tuned QA model folder (spanbert finetune, or a HF BertForQuestionAnswering)"""
    data: str | None = option(None, path="input")
    """questions to answer (squad: SQuAD JSON; mrqa: MRQA .jsonl), or --question with --context"""
    output: str | None = option(None, path="output_file")
    """predictions file to write: {question_id: answer text} (with --data)"""
    question: str | None = None
    """one question in raw text, answered from --context or --context_file: prints {answer, score, start,
    end} as JSON (start/end: character offsets in the context)"""
    context: str | None = None
    """the raw text --question is answered from"""
    context_file: str | None = option(None, path="input")
    """a UTF-8 text file holding the context of --question"""
    null_odds: str | None = option(None, path="output_file")
    """SQuAD 2.0: where to write the null-score differences (default: null_odds.json beside --output, when
    that name is free or holds the null odds of this data from an earlier run)"""
    articles: str | None = None
    """only these articles, a slice start:stop"""
    null_score_diff_threshold: float | None = None
    """override the threshold saved with the model"""
    batch_size: int = 64
    """windows per batch"""


@dataclass(kw_only=True)
class QAEvaluate:
    """``spanbert evaluate squad|mrqa --data GOLD --predictions PREDS``."""

    data: str = option(path="input")
    """gold data (squad: SQuAD JSON; mrqa: MRQA .jsonl)"""
    predictions: str = option(path="input")
    """predictions file {question_id: answer text}"""
    na_prob: str | None = option(None, path="input")
    """SQuAD 2.0: no-answer scores {question_id: number} (null_odds.json)"""
    na_prob_thresh: float = 1.0
    """SQuAD 2.0: score as no-answer where the --na_prob value exceeds this (official default: 1.0)"""
    articles: str | None = None
    """only these articles, a slice start:stop"""


ACTIONS = {"finetune": QAFinetune, "predict": QAPredict, "evaluate": QAEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
