"""Span probes (edge probing: Tenney et al., ICLR 2019, "What do you learn from context?"): how much of a
span's label a frozen encoder's token states hold, for six labelled span tasks (docs/probes.md).

The encoder is frozen and run once per data file (`spanbert.tasks.probe_features`, cached on disk); the
probe, all that is trained, follows the paper's §3.1 and jiant's edge-probing module:

1. a learned scalar mix of the encoder's ``num_layers + 1`` hidden states (ELMo's: softmax weights and a
   scale gamma, `spanbert.tasks.layers.ScalarMix`); ``--layers 0`` restricts it to hidden state 0, the
   embeddings' output, which holds the token and its position but no context (the paper's lexical
   baseline): the gap between the two rows is what context adds;
2. per span a projection to 256 dimensions and self-attentive pooling over the span's sub-words (Lee et
   al. 2017; ``--pooling endpoints``: its first and last sub-word instead); a target of two spans (a
   relation, a coreference arc) has a projection and a pooling of its own for each, concatenated;
3. an MLP (linear 256, tanh, LayerNorm, dropout 0.3, linear) with one sigmoid output per label, trained
   with binary cross-entropy against the gold label set, and scored by micro-averaged F1 over every
   (target, label) decision at threshold 0.5.

`spanbert finetune probe --probe NAME` trains one probe and keeps the epoch of the best dev F1; `spanbert
evaluate probe` scores a labelled file with it; `spanbert probe` runs the whole set (`probe_command`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn

from spanbert import _aliases, distributed
from spanbert.checkpoints import save_checkpoint
from spanbert.distributed import eprint0, is_main, print0, resolve_device
from spanbert.dropout import Dropout
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.resample import STATS_FILE, write_example_stats
from spanbert.microbatch import planned_batch_size
from spanbert.tasks.classification import label_config, labels_from_config
from spanbert.tasks.finetuning import SEQ_LENGTH, finetune_options
from spanbert.tasks.layers import ScalarMix
from spanbert.tasks.ner_features import encoder_fingerprint
from spanbert.tasks.options import one_of
from spanbert.tasks.probe_data import Context, carve_dev, label_list, n_targets, read_probe, subsample
from spanbert.tasks.probe_features import ProbeFeatures, cached_features, default_cache
from spanbert.tasks.probe_options import (
    ACTIONS,
    ProbeConfig,
    ProbeEvaluate,
    ProbeFinetune,
    ProbePredict,
)
from spanbert.tasks.probe_sets import DATA_SEED, NAMES, PROBE_SETS, canonical
from spanbert.tasks.ranks import predict_sharded, seeded_model, start_distributed, write_once
from spanbert.tasks.scores import match_by_id, warn_unseen
from spanbert.tasks.selection import KeepBest, selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, SubTasks, TaskSpec
from spanbert.trainer import EvalSize, predict_batches, train
from spanbert.utils import atomic_write, write_json

MODEL_TYPE = "spanbert-probe"
"""``model_type`` of a saved probe's config.json: a head whose encoder is another folder."""

THRESHOLD = 0.5
"""A label is predicted where its sigmoid exceeds this (the paper's micro F1 is at 0.5)."""


# ---------------------------------------------------------------------------------------------
# The probe


class SpanProbe(nn.Module):
    """Scalar mix -> per-span projection and pooling -> MLP -> one logit per label (§3.1, Figure 1).

    Input: per span k, ``states_k`` (B, L_k, M, H) the M hidden states of the span's sub-words (padded to
    the longest span of the batch) and ``mask_k`` (B, L_k) True on real sub-words; ``labels`` (B, C) the
    gold label set as 0/1. Returns ``logits`` (B, C) and, with labels, the mean binary cross-entropy."""

    def __init__(self, num_states: int, hidden_size: int, num_spans: int, num_labels: int, pooling: str = "attention",
                 projection_dim: int = 256, mlp_hidden_size: int = 256, dropout: float = 0.3):  # fmt: skip
        super().__init__()
        self.pooling = pooling
        self.mix = ScalarMix(num_states)
        # jiant's edge probing: span 1 and span 2 each have their own projection and pooling (not symmetric)
        self.projections = nn.ModuleList(nn.Linear(hidden_size, projection_dim) for _ in range(num_spans))
        if pooling == "attention":
            self.attention = nn.ModuleList(nn.Linear(projection_dim, 1) for _ in range(num_spans))
        width = num_spans * projection_dim * (2 if pooling == "endpoints" else 1)
        self.classifier = nn.Sequential(
            nn.Linear(width, mlp_hidden_size), nn.Tanh(), nn.LayerNorm(mlp_hidden_size), Dropout(dropout),
            nn.Linear(mlp_hidden_size, num_labels),
        )  # fmt: skip

    def pool(self, k: int, states: Tensor, mask: Tensor) -> Tensor:
        """Span ``k``'s vector: (B, L, M, H) and (B, L) -> (B, D) (attention) or (B, 2 D) (endpoints)."""
        x = self.projections[k](self.mix(states.unbind(2)))  # (B, L, D)
        if self.pooling == "endpoints":
            last = mask.long().sum(1) - 1  # (B,)
            return torch.cat([x[:, 0], x[torch.arange(len(x), device=x.device), last]], dim=-1)  # (B, 2 D)
        scores = self.attention[k](x).squeeze(-1).masked_fill(~mask, float("-inf"))  # (B, L)
        return (scores.softmax(-1)[..., None] * x).sum(1)  # (B, D)

    def forward(self, states_0: Tensor, mask_0: Tensor, states_1: Tensor | None = None, mask_1: Tensor | None = None,
                labels: Tensor | None = None) -> dict[str, Tensor]:  # fmt: skip
        spans = [(states_0, mask_0)] + ([(states_1, mask_1)] if states_1 is not None else [])
        logits = self.classifier(torch.cat([self.pool(k, s, m) for k, (s, m) in enumerate(spans)], dim=-1))  # (B, C)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return out


class SpanDataset(torch.utils.data.Dataset):
    """The kept targets of a store, each ``{"spans": [(L_k, M, H) per span], "labels": (C,)}``; only the hidden
    states the probe reads (``states``: all of them, or state 0) are loaded."""

    def __init__(self, features: ProbeFeatures, states: Sequence[int], targets: Sequence[int],
                 labels: np.ndarray | None = None):  # fmt: skip
        self.states = torch.from_numpy(np.ascontiguousarray(features.states[:, list(states)]))  # (rows, M, H)
        self.spans, self.targets, self.labels = features.spans, list(targets), labels

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> dict[str, Any]:
        t = self.targets[i]
        item: dict[str, Any] = {"spans": [self.states[a:b] for a, b in self.spans[t].tolist()]}
        if self.labels is not None:
            item["labels"] = self.labels[t]
        return item


def collate(items: list[dict[str, Any]]) -> dict[str, Tensor]:
    """Each span padded to the longest of the batch: ``states_k`` (B, L_k, M, H) float32, ``mask_k`` (B, L_k)."""
    batch: dict[str, Tensor] = {}
    for k in range(len(items[0]["spans"])):
        spans = [x["spans"][k] for x in items]
        L = max(len(s) for s in spans)
        states = torch.zeros((len(items), L, *spans[0].shape[1:]), dtype=torch.float32)  # (B, L, M, H)
        mask = torch.zeros((len(items), L), dtype=torch.bool)
        for j, s in enumerate(spans):
            states[j, : len(s)] = s
            mask[j, : len(s)] = True
        batch[f"states_{k}"], batch[f"mask_{k}"] = states, mask
    if "labels" in items[0]:
        batch["labels"] = torch.from_numpy(np.stack([x["labels"] for x in items]))  # (B, C)
    return batch


def multi_hot(contexts: Sequence[Context], labels: Sequence[str]) -> np.ndarray:
    """(targets, C) 0/1: each target's gold label set (labels the probe has no output for are left out)."""
    index = {l: i for i, l in enumerate(labels)}
    out = np.zeros((n_targets(list(contexts)), len(labels)), dtype=np.float32)
    for t, target in enumerate(t for c in contexts for t in c.targets):
        for label in target.labels:
            if label in index:
                out[t, index[label]] = 1.0
    return out


def state_indices(layers: str, num_layers: int) -> list[int]:
    """The hidden states a probe mixes: all num_layers + 1 (``all``), or the embeddings' output (``0``)."""
    return [0] if layers == "0" else list(range(num_layers + 1))


def predict_labels(model: nn.Module, features: ProbeFeatures, states: Sequence[int], labels: Sequence[str],
                   batch_size: int = 64, progress: bool = False) -> list[tuple[str, ...]]:  # fmt: skip
    """The predicted label set of every target of a store (sigmoid > 0.5; a target the window cut off:
    none), sharded over the ranks under torchrun."""
    kept = np.flatnonzero(~features.cut_off).tolist()
    dataset = SpanDataset(features, states, kept)
    device = next(model.parameters()).device

    def run(indices: Sequence[int]) -> list[tuple[str, ...]]:
        part = torch.utils.data.Subset(dataset, list(indices))
        out: list[tuple[str, ...]] = []
        for _, o in predict_batches(model, part, batch_size, collate, device=device, desc="probe",
                                    disable_tqdm=not progress or not is_main()):  # fmt: skip
            hits = (torch.sigmoid(o["logits"].float()) > THRESHOLD).cpu().numpy()  # (b, C)
            out += [tuple(labels[c] for c in np.flatnonzero(row)) for row in hits]
        return out

    got = predict_sharded(len(dataset), run)
    pred: list[tuple[str, ...]] = [()] * len(features.spans)
    for t, p in zip(kept, got):
        pred[t] = p
    return pred


# ---------------------------------------------------------------------------------------------
# Scores


def example_rows(contexts: Sequence[Context], pred: Sequence[Sequence[str]]) -> np.ndarray:
    """(contexts, 3): [true positives, predicted labels, gold labels] summed over each context's targets,
    the per-example statistics of micro F1 (`spanbert.metrics.resample`, kind ``f1``). The unit is the
    context (a sentence, a GAP row, a LitBank window): its targets share one input, so a resample draws
    them together."""
    rows = np.zeros((len(contexts), 3), dtype=np.int64)
    t = 0
    for c, context in enumerate(contexts):
        for target in context.targets:
            gold, got = set(target.labels), set(pred[t])
            rows[c] += (len(gold & got), len(got), len(gold))
            t += 1
    return rows


def score(contexts: Sequence[Context], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged precision, recall and F1 (0-100) over every (target, label) decision."""
    tp, predicted, gold = (int(x) for x in example_rows(contexts, pred).sum(0))
    return {
        "f1": 200.0 * tp / (predicted + gold) if predicted + gold else 0.0,
        "precision": 100.0 * tp / predicted if predicted else 0.0,
        "recall": 100.0 * tp / gold if gold else 0.0,
    }


# ---------------------------------------------------------------------------------------------
# Data of a run


def _same_file(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def load_split(name: str, path: str | Path, max_targets: int | None, seed: int, part: str | None = None,
               training: bool = False) -> list[Context]:  # fmt: skip
    """The fixed subsample of a probe's file: at most ``max_targets`` targets (None: the probe's default for
    training or for dev and test; 0: all). ``part``: "train" or "dev" of a file carved in two (`carve_dev`)."""
    contexts = read_probe(name, path, seed)
    if part is not None:
        contexts = carve_dev(contexts)[part == "dev"]
    default = PROBE_SETS[name].train_examples if training else PROBE_SETS[name].eval_examples
    return subsample(contexts, default if max_targets is None else max_targets, seed)


def _report_cut(what: str, features: ProbeFeatures, max_seq_length: int, fate: str) -> int:
    cut = int(features.cut_off.sum())
    if cut:
        eprint0(f"warning: {what}: {cut} of {len(features.spans)} targets lie (partly) outside the {max_seq_length}-token "
                f"window of their text ({features.meta.get('windowed', '?')} texts were longer); they {fate}")  # fmt: skip
    return cut


# ---------------------------------------------------------------------------------------------
# Training, saving, loading


def finetune_probe(model_dir: str | Path, name: str, train_path: str | Path, dev_path: str | Path, args: Any,
                   config: ProbeConfig, tokenizer_dir: str | Path | None = None, max_seq_length: int = 128
                   ) -> dict[str, Any]:  # fmt: skip
    """Train probe ``name`` on the frozen encoder of ``model_dir`` and save it in ``args.output_dir`` (the
    head of the best dev epoch, its settings, dev_results.json, dev predictions and per-example
    statistics); returns the dev metrics. A dev file that is the training file is carved from it."""
    carved = _same_file(train_path, dev_path)
    train_set = load_split(
        name, train_path, config.max_train_examples, config.data_seed, "train" if carved else None, training=True
    )
    dev_set = load_split(name, dev_path, config.max_eval_examples, config.data_seed, "dev" if carved else None)
    labels = label_list(train_set)
    gold = [label for c in dev_set for t in c.targets for label in t.labels]
    warn_unseen(dev_path, gold, labels, "label", f"the {n_targets(train_set)} training targets of {train_path}")
    spans = PROBE_SETS[name].spans
    cache = Path(config.features_cache) if config.features_cache else default_cache()
    common = dict(tokenizer_dir=tokenizer_dir, max_seq_length=max_seq_length, dtype=config.feature_dtype,
                  batch_size=config.extract_batch_size, device=args.device, progress=not args.disable_tqdm)  # fmt: skip
    tag = lambda path, part: f"{name}-{Path(path).name}" + (f"-{part}" if carved else "")  # noqa: E731
    train_features = cached_features(model_dir, train_set, tag(train_path, "train"), cache, spans, **common)
    dev_features = cached_features(model_dir, dev_set, tag(dev_path, "dev"), cache, spans, **common)
    train_cut = _report_cut(f"{train_path} (training)", train_features, max_seq_length, "are left out of training")
    dev_cut = _report_cut(f"{dev_path} (dev)", dev_features, max_seq_length, "count as misses")
    states = state_indices(config.layers, train_features.num_layers)
    kept = np.flatnonzero(~train_features.cut_off).tolist()
    if not kept:
        raise SpanBertError(f"{train_path}: every training target lies outside the {max_seq_length}-token window")
    data = SpanDataset(train_features, states, kept, multi_hot(train_set, labels))
    hidden = train_features.states.shape[2]
    with seeded_model(args.seed):
        model = SpanProbe(len(states), hidden, spans, len(labels), config.pooling, config.projection_dim,
                          config.mlp_hidden_size, config.head_dropout)  # fmt: skip

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], Any]:
        pred = predict_labels(m, dev_features, states, labels, args.per_device_eval_batch_size)
        return score(dev_set, pred), pred

    keeper = KeepBest(evaluate, args)
    settings = {
        "task": "probe", "probe": name, "encoder": str(Path(model_dir).resolve()),
        "encoder_fingerprint": train_features.meta["encoder"],
        "tokenizer": str(Path(tokenizer_dir).resolve()) if tokenizer_dir else None,
        "num_layers": train_features.num_layers, "hidden_size": hidden, "states": states, "spans": spans,
        "max_seq_length": max_seq_length, **dataclasses.asdict(config),
    }  # fmt: skip
    result = train(model, data, args, collate_fn=collate, eval_fn=keeper,
                   run_config={k: v for k, v in settings.items() if k != "features_cache"},
                   eval_size=EvalSize(len(dev_features.spans), len(dev_features.spans)))  # fmt: skip
    pred, selected = keeper.chosen(model, args, result, len(data))
    G = (
        planned_batch_size(args.per_device_train_batch_size)
        * args.gradient_accumulation_steps
        * distributed.world_size()
    )
    epoch_steps = math.ceil(len(data) / G)
    metrics = {
        **score(dev_set, pred), **selection_summary(selected, args),
        "layers": config.layers, "targets": len(dev_features.spans), "contexts": len(dev_set), "cut_off": dev_cut,
        "train_targets": len(train_features.spans), "train_cut_off": train_cut, "labels": len(labels),
        "scalar_mix": scalar_mix(model),
    }  # fmt: skip
    if selected is not None:
        metrics["selected_epoch"] = math.ceil(selected / epoch_steps)
    out = Path(args.output_dir)

    def write() -> None:
        save_probe(model, out, labels, settings)
        write_predictions(out / "dev_predictions.jsonl", dev_set, pred)
        write_example_stats(out / STATS_FILE, "f1", example_rows(dev_set, pred))
        write_json(out / RESULTS_FILE, metrics, sort_keys=True, ensure_ascii=False)

    write_once(write)
    print0(f"{name} ({'all layers' if config.layers == 'all' else 'layer 0'}): dev micro F1 {metrics['f1']:.2f} "
           f"on {metrics['targets']} targets (epoch {metrics.get('selected_epoch', '?')})")  # fmt: skip
    return metrics


def scalar_mix(model: SpanProbe) -> dict[str, Any]:
    """The learned mix: gamma and the softmax weight of each hidden state (which layers the probe reads)."""
    weights = torch.softmax(model.mix.weights.detach().float(), 0).tolist()
    return {"gamma": float(model.mix.gamma.detach()), "weights": [round(w, 4) for w in weights]}


def save_probe(model: SpanProbe, out: Path, labels: list[str], settings: dict[str, Any]) -> None:
    """config.json (``model_type`` `MODEL_TYPE`, id2label, the encoder it reads and every setting) and
    model.safetensors (the probe's weights only: the encoder stays where ``settings["encoder"]`` says)."""
    config = {"model_type": MODEL_TYPE, "architectures": ["SpanProbe"], **label_config(labels), "spanbert": settings}
    save_checkpoint(out, model.state_dict(), config)


NEEDS = "a probe (spanbert finetune probe)"


def load_probe(run_dir: str | Path, device: str = "cpu") -> tuple[SpanProbe, list[str], dict[str, Any]]:
    """(probe on ``device`` in eval mode, its labels, its settings) of a folder `finetune_probe` saved; the
    encoder it names must be there, unchanged since (its fingerprint)."""
    config_file = Path(run_dir) / "config.json"
    try:
        config = json.loads(decode_utf8(config_file.read_bytes(), config_file, "a JSON config"))
        state = load_file(str(Path(run_dir) / "model.safetensors"))
    except (OSError, ValueError) as e:  # not there, not JSON, not safetensors
        raise SpanBertError(f"{run_dir}: cannot read a saved probe ({e}); expected {NEEDS}") from None
    s = config.get("spanbert", {}) if isinstance(config, dict) else {}
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE or s.get("task") != "probe":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise SpanBertError(f"{run_dir}: found a {found} folder, expected {NEEDS}")
    labels = labels_from_config(config, str(config_file))
    need = ("probe", "encoder", "encoder_fingerprint", "states", "hidden_size", "spans", "max_seq_length", "pooling")
    if not labels or any(k not in s for k in need):
        raise DataError(config_file, f"found settings {sorted(s)}; expected a probe's {list(need)}")
    if not Path(s["encoder"]).is_dir():
        raise SpanBertError(f"{config_file}: the encoder {s['encoder']} this probe reads is not there (moved?)")
    if encoder_fingerprint(s["encoder"]) != s["encoder_fingerprint"]:
        raise SpanBertError(f"{config_file}: the encoder {s['encoder']} changed since this probe was trained on it")
    model = SpanProbe(len(s["states"]), s["hidden_size"], s["spans"], len(labels), s["pooling"],
                      s.get("projection_dim", 256), s.get("mlp_hidden_size", 256), 0.0)  # fmt: skip
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{run_dir}: weights do not match a SpanProbe; missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.to(resolve_device(device)).eval(), labels, s


def probe_data(run_dir: str | Path, data: str | Path, probe: str | None, max_examples: int | None,
               features_cache: str | None, settings: dict[str, Any], batch_size: int, device: str,
               progress: bool) -> tuple[list[Context], ProbeFeatures]:  # fmt: skip
    """(the contexts of ``data`` a saved probe scores, their features): the subsample the probe's run used
    for dev by default (its --max_eval_examples and --data_seed), features cached as in training."""
    name = settings["probe"]
    if probe is not None and canonical(probe) != name:
        raise SpanBertError(f"--probe: found {probe!r}, but {run_dir} holds the {name} probe; pass --probe {name} "
                            "or leave it out")  # fmt: skip
    seed = settings.get("data_seed", DATA_SEED)
    limit = settings.get("max_eval_examples") if max_examples is None else max_examples
    contexts = load_split(name, data, limit, seed)
    cache = Path(features_cache or settings.get("features_cache") or default_cache())
    features = cached_features(settings["encoder"], contexts, f"{name}-{Path(data).name}", cache, settings["spans"],
                               settings.get("tokenizer"), settings["max_seq_length"], settings.get("feature_dtype", "float16"),
                               settings.get("extract_batch_size", 32), device, progress)  # fmt: skip
    _report_cut(str(data), features, settings["max_seq_length"], "count as misses")
    return contexts, features


# ---------------------------------------------------------------------------------------------
# Prediction files: one JSON line per target


def write_predictions(path: str | Path, contexts: Sequence[Context], pred: Sequence[Sequence[str]]) -> None:
    """One line per target, in the data's order: its text's id, its index there, its spans (inclusive word
    indices), the gold and the predicted label sets."""
    with atomic_write(path, encoding="utf-8") as f:
        t = 0
        for c in contexts:
            for k, target in enumerate(c.targets):
                row = {"id": c.id, "target": k, "spans": [list(s) for s in target.spans],
                       "gold": list(target.labels), "predicted": list(pred[t])}  # fmt: skip
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                t += 1


def read_predictions(path: str | Path, contexts: Sequence[Context]) -> list[tuple[str, ...]]:
    """The predicted label sets of a file `write_predictions` wrote, matched to ``contexts``' targets by
    (id, target index), in any order."""
    path = Path(path)
    by_id: dict[str, tuple[str, ...]] = {}
    try:
        lines = decode_utf8(path.read_bytes(), path, "UTF-8 JSON lines").splitlines()
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected the predictions of spanbert predict probe)") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key, got = f"{row['id']}#{int(row['target'])}", row["predicted"]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(path, f"found {line[:60]!r} ({e}); expected a JSON object with id, target and predicted",
                            line=n) from None  # fmt: skip
        if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
            raise DataError(path, f"found predicted {got!r}; expected a list of labels", line=n)
        by_id[key] = tuple(got)
    wanted = [f"{c.id}#{k}" for c in contexts for k in range(len(c.targets))]
    return match_by_id(path, by_id, wanted, "the data", " (each line: id and target)")


# ---------------------------------------------------------------------------------------------
# Command lines


def _canonical_probe(value: str) -> str:
    name = canonical(value)
    if name is None:
        raise SpanBertError(f"--probe: found {value!r}, expected one of: {', '.join(NAMES)}")
    return name


def _finetune(task: str, opts: ProbeFinetune) -> Results:
    """``spanbert finetune probe --probe NAME ...``."""
    opts.probe = _canonical_probe(opts.probe)  # before any output is checked or data read
    if opts.sweep:
        raise SpanBertError("--sweep: a probe has no grid of its own here; pass --learning_rate once per run "
                            "(a study's learning_rates: grid)")  # fmt: skip

    def run_one(targs: Any) -> dict[str, Any]:
        return finetune_probe(opts.model, opts.probe, opts.train_file, opts.validation_file, targs, opts.probe_config,
                              opts.tokenizer, opts.max_seq_length)  # fmt: skip

    return finetune_options(opts, run_one, "f1", f"spanbert finetune {task}", seq_length=SEQ_LENGTH)


def _predict(task: str, opts: ProbePredict) -> Path:
    """``spanbert predict probe --model RUN --data FILE --output PRED.jsonl``."""
    model, labels, settings = load_probe(opts.model, "cpu")
    start_distributed(opts.device)
    contexts, features = probe_data(opts.model, opts.data, opts.probe, opts.max_examples, opts.features_cache, settings,
                                    opts.batch_size, opts.device, not opts.disable_tqdm)  # fmt: skip
    model.to(resolve_device(opts.device))
    pred = predict_labels(model, features, settings["states"], labels, opts.batch_size, not opts.disable_tqdm)
    write_once(lambda: write_predictions(opts.output, contexts, pred))
    print0(f"wrote the predicted labels of {len(pred)} targets to {opts.output}")
    return Path(opts.output)


def _evaluate(task: str, opts: ProbeEvaluate) -> Results:
    """``spanbert evaluate probe --model RUN --data TEST [--example_stats FILE]`` (or ``--predictions``)."""
    if one_of(opts, "model", "predictions") == "model":
        model, labels, settings = load_probe(opts.model, "cpu")
        start_distributed(opts.device)
        contexts, features = probe_data(opts.model, opts.data, opts.probe, opts.max_examples, opts.features_cache,
                                        settings, opts.batch_size, opts.device, not opts.disable_tqdm)  # fmt: skip
        model.to(resolve_device(opts.device))
        pred = predict_labels(model, features, settings["states"], labels, opts.batch_size, not opts.disable_tqdm)
        cut = int(features.cut_off.sum())
        warn_unseen(opts.data, [l for c in contexts for t in c.targets for l in t.labels], labels, "label",
                    f"the training targets of {opts.model}")  # fmt: skip
    else:
        if opts.probe is None:
            raise SpanBertError("--predictions: found no --probe, expected the probe whose predictions these are")
        contexts = load_split(_canonical_probe(opts.probe), opts.data, opts.max_examples, DATA_SEED)
        pred, cut = read_predictions(opts.predictions, contexts), 0
    if opts.example_stats:
        write_once(lambda: write_example_stats(opts.example_stats, "f1", example_rows(contexts, pred)))
    scores = {**score(contexts, pred), "targets": len(pred), "contexts": len(contexts), "cut_off": cut}
    return Results(scores, "f1")


SPECS = {
    "probe": TaskSpec(
        "probe", "span probes of a frozen encoder (edge probing, Tenney et al. 2019; --probe)", _finetune, _predict,
        _evaluate, metric="f1", data="each probe's own files (docs/probes.md)", scores_test=True,
        subtasks=SubTasks(option="probe", key="probe", names=NAMES, canonical=canonical),
        cache_option="features_cache", example_stats=True, options=ACTIONS,
    )
}  # fmt: skip

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
