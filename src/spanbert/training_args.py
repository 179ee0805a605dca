"""`TrainingArguments`: the options of the training loop, for pre-training and fine-tuning alike.

A module of its own, beside the loop (`spanbert.trainer`), so that a command's parser (and its
``--help``) is built without loading torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from spanbert.distributed import resolve_device
from spanbert.errors import SpanBertError
from spanbert.utils import user_path

COMPILE_CHOICES = ("auto", "true", "false")
"""``--compile``'s values; the option holds ``"auto"`` or a boolean (`spanbert.compile`)."""


def compile_setting(value: bool | str) -> bool | str:
    """``--compile``'s value as the option holds it: ``"auto"``, True or False (from a bool or its word)."""
    if isinstance(value, bool) or value == "auto":
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SpanBertError(f"--compile: found {value!r}, expected one of: {', '.join(COMPILE_CHOICES)}")


@dataclass
class TrainingArguments:
    """Options of the training loop. Names follow HF `TrainingArguments` where one exists."""

    output_dir: str = "runs/spanbert"
    """Folder for checkpoints, logs (log.jsonl, TensorBoard) and the final model."""
    max_steps: int = -1
    """Total optimizer steps; -1 = run num_train_epochs epochs."""
    num_train_epochs: float = 1.0
    """Epochs over the training set when max_steps is -1."""
    learning_rate: float = 1e-4
    """Peak learning rate, reached after warmup."""
    per_device_train_batch_size: int | Literal["auto"] = 32
    """Sequences per micro-batch on each process (not used when max_tokens_per_batch is set). auto = the
    largest that fits this GPU's memory, found by a short probe before the first step (spanbert.microbatch;
    32 off CUDA), with gradient_accumulation_steps as given; --resume keeps the size the run found."""
    max_tokens_per_batch: int = 0
    """Token budget of one micro-batch on each process: examples of similar length are batched while
    count x longest <= this (fairseq's max-tokens batching; the released SpanBERT run: 4096). Tokens per update
    <= this x processes x gradient_accumulation_steps. 0 = per_device_train_batch_size sequences."""
    per_device_eval_batch_size: int = 64
    """Sequences per batch at evaluation and prediction time."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; global batch = per_device x processes x this."""
    warmup_steps: int = 0
    """Linear warmup steps (overrides warmup_ratio when > 0)."""
    warmup_ratio: float = 0.0
    """Fraction of the total steps used for linear warmup when warmup_steps is 0."""
    lr_scheduler_type: Literal["linear", "constant", "polynomial", "cosine"] = "linear"
    """After warmup: linear decay to zero at the last step, constant, polynomial: fairseq's
    polynomial_decay (power 1) of the released SpanBERT run, peak x (1 - step/total) after warmup, or
    cosine: one cosine cycle from the peak down to min_lr (the cloze two-tower model's schedule)."""
    warmup_init_lr: float = 0.0
    """Cosine schedule: the warmup rises linearly from this rate to the peak (Baevski et al.: 1e-7)."""
    min_lr: float = 0.0
    """Cosine schedule: the rate at the last step (Baevski et al.: 1e-4 pre-training, 1e-6 fine-tuning)."""
    optim: Literal["adamw", "nesterov"] = "adamw"
    """Optimizer: adamw (BERT, SpanBERT) or nesterov: SGD with Nesterov momentum (the cloze two-tower
    model's pre-training, with --momentum 0.99 and --max_grad_norm 0.1)."""
    momentum: float = 0.99
    """Momentum of --optim nesterov."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay, not applied to biases and LayerNorm weights (unless decay_all_parameters)."""
    decay_all_parameters: bool = False
    """Apply weight decay to biases and LayerNorm weights too (the released SpanBERT pre-training: fairseq's
    Adam decays every parameter)."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    adam_epsilon: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    logging_steps: int = 50
    """Log averaged losses and accuracies every this many steps."""
    save_steps: int = 500
    """Write a resumable checkpoint every this many steps (0 = only at the end)."""
    save_total_limit: int = 2
    """Keep at most this many checkpoints (the oldest are deleted)."""
    eval_steps: int = 0
    """Run the evaluation every this many steps (0 = only at the end, unless evals_per_epoch is set)."""
    evals_per_epoch: int = 0
    """Evaluate this many times per epoch, evenly spaced (sets the evaluation interval when eval_steps is
    0; the released SpanBERT fine-tuning scripts evaluate about 10 times per epoch)."""
    max_eval_share: float = 0.0
    """Lower evals_per_epoch (to at least 1) until the estimated evaluation time is at most this share of the
    estimated training time (cost.py's estimate; 0 = never lower). The fine-tuning tasks set 0.5 unless
    --evals_per_epoch or --eval_steps is named, so a short run does not spend most of its time evaluating."""
    allow_long_run: bool = False
    """Start a plan estimated at more than a week on this device anyway (without it such a plan is refused
    before any work, with the estimate)."""
    metric_for_best_model: str = ""
    """Key of the evaluation result that selects the model (e.g. f1): the weights of the best evaluation
    are kept in OUTPUT_DIR/best/ and are the model at the end of training. Empty = the last model."""
    greater_is_better: bool = True
    """With metric_for_best_model: a larger value is better (false for a loss)."""
    seed: int = 42
    """Seed of the sample order, dropout and initialisation."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast dtype: auto = bf16 on GPUs that support it, else fp16 on GPU; on CPU bf16 where
    the CPU has native bf16 matrix units (AMX-BF16, AVX512-BF16), else fp32. Weights and checkpoints stay fp32."""
    device: str = "auto"
    """auto (cuda when available), cpu, cuda, cuda:N or mps."""
    dataloader_num_workers: int = 0
    """Worker processes that load and collate batches."""
    threads: int = 0
    """CPU threads for torch; 0 = the cores other processes leave free when the run starts, kept to its end and on --resume (its weights depend on the count; OMP_NUM_THREADS also fixes it)."""
    stop_at_step: int = -1
    """Stop after this step with a checkpoint, keeping the schedule of max_steps (for jobs split across
    time limits; continue with --resume). -1 = run to the end."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (model, optimizer, schedule, RNG, data position)."""
    overwrite_output_dir: bool = False
    """Start over in an output_dir that already holds a run (its checkpoints are removed); as the
    transformers flag. Without it (or --resume) such a folder is refused."""
    nan_policy: Literal["stop", "skip"] = "stop"
    """On a NaN/inf loss or gradient: stop with an error naming the step, or skip that step. With fused
    AdamW (fp32/bf16) the check runs on the device: a bad step is never applied, and "stop" stops at the
    next logging step (or checkpoint), naming the first bad step."""
    report_to: Literal["tensorboard", "none"] = "tensorboard"
    """Also write TensorBoard event files (when the tensorboard package is installed)."""
    disable_tqdm: bool = False
    """Hide the progress bar."""
    compile: bool | Literal["auto"] = "auto"
    """torch.compile the model's blocks (embeddings, encoder layers, pre-training heads; spanbert.compile):
    auto = on CUDA, off on the CPU (measured slower there). The first step then takes the compilation
    (the log says how long)."""

    def __post_init__(self) -> None:
        # Checked at construction so a command fails before any work (contract 4).
        def bad(name: str, value: Any, expected: str) -> SpanBertError:
            return SpanBertError(f"--{name}: found {value!r}, expected {expected}")

        # the same path rule as the command line and a YAML file: ~ expanded, None and "" refused (issue 58.5)
        if self.output_dir is None:
            raise bad("output_dir", None, "a folder to write the run into")
        self.output_dir = user_path(self.output_dir, "--output_dir")

        def finite(name: str, lo: float = 0.0, lo_open: bool = False, hi: float | None = None, hi_open=True):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v):
                raise bad(name, v, "a finite number")
            if v < lo or (lo_open and v == lo) or (hi is not None and (v > hi or (hi_open and v == hi))):
                left = "(" if lo_open else "["
                right = "" if hi is None else (f"{hi})" if hi_open else f"{hi}]")
                raise bad(name, v, f"a number in {left}{lo}, {right or 'inf)'}")

        finite("learning_rate")
        finite("adam_beta1", hi=1.0)
        finite("adam_beta2", hi=1.0)
        finite("adam_epsilon", lo_open=True)
        finite("weight_decay")
        finite("max_grad_norm")
        finite("warmup_init_lr")
        finite("min_lr")
        finite("momentum", hi=1.0)
        finite("warmup_ratio", hi=1.0, hi_open=False)
        finite("max_eval_share")
        if not math.isfinite(self.num_train_epochs) or self.num_train_epochs <= 0:
            raise bad("num_train_epochs", self.num_train_epochs, "a number > 0")
        at_least = {
            "per_device_train_batch_size": 1,
            "per_device_eval_batch_size": 1,
            "max_tokens_per_batch": 0,
            "gradient_accumulation_steps": 1,
            "logging_steps": 1,
            "save_total_limit": 1,
            "seed": 0,
            "warmup_steps": 0,
            "save_steps": 0,
            "eval_steps": 0,
            "evals_per_epoch": 0,
            "dataloader_num_workers": 0,
            "threads": 0,
        }
        self.compile = compile_setting(self.compile)
        for name, lo in at_least.items():
            v = getattr(self, name)
            if name == "per_device_train_batch_size" and v == "auto":  # the trainer's probe decides
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise bad(name, v, f"an integer >= {lo}")
        for name in ("max_steps", "stop_at_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1):
                raise bad(name, v, "a positive integer or -1")
        choices = {
            "lr_scheduler_type": ("linear", "constant", "polynomial", "cosine"),
            "optim": ("adamw", "nesterov"),
            "precision": ("auto", "fp32", "bf16", "fp16"),
            "nan_policy": ("stop", "skip"),
            "report_to": ("tensorboard", "none"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, getattr(self, name), "one of " + ", ".join(allowed))
        if self.device != "auto":
            resolve_device(self.device)  # a clean error for an unknown name (cpux, gpu, cuda:x)
        if self.resume and self.overwrite_output_dir:
            raise SpanBertError("--resume and --overwrite_output_dir: found both, expected at most one")
