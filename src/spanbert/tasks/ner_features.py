"""Feature-based NER (BERT §5.3, Table 7): a frozen encoder's activations feed a biLSTM tagger.

"We apply the feature-based approach by extracting the activations from one or more layers without
fine-tuning any parameters of BERT. These contextual embeddings are used as input to a randomly
initialized two-layer 768-dimensional BiLSTM before the classification layer" (§5.3). The paper's
stated advantage is that "an expensive representation of the training data" is computed once and
many cheaper models are run on top; so here:

1. `cached_features` runs the encoder once per data file (each sentence inside its document context,
   `spanbert.tasks.conll.ner_features`), and writes the activation of **every layer** at the first
   sub-token of every word to ``CACHE/<file>-<key>/layer_NN.npy`` (one memory-mapped ``(words, H)``
   array per layer: the embedding output is layer 0, the last layer L). The key hashes the encoder
   files, the data file and the settings, so a second run with the same ones reads the cache and
   never calls the encoder; anything changed gets a new folder.
2. `FeatureTagger` mixes the layers of one Table 7 choice (`FEATURE_CHOICES`), runs a two-layer
   biLSTM over the words of each sentence and a linear classifier over the tags; it trains with the
   one loop of `spanbert.trainer` and keeps the model of the best dev conlleval F1 (one evaluation
   an epoch: the best epoch on dev).

`spanbert finetune ner --features table7 ...` trains the six heads of Table 7 on one cache and writes
``features_results.json`` (dev F1 of each); ``--features concat_last_four`` trains one. A saved head
predicts with `spanbert predict / evaluate ner --model DIR` (it re-encodes the input with the encoder
it names, in memory; no cache is written when predicting).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from spanbert import _aliases, families, folders, threads
from spanbert.checkpoints import save_checkpoint
from spanbert.distributed import is_main, print0, resolve_device
from spanbert.dropout import Dropout
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX
from spanbert.runs import RUN
from spanbert.tasks.classification import Collator, label_config, labels_from_config, token_outputs
from spanbert.tasks.conll import (
    label_list,
    ner_features,
    read_conll,
    score,
    write_predictions,
)
from spanbert.tasks.ner_options import HeadConfig
from spanbert.tasks.ranks import predict_sharded, seeded_model, write_json_once, write_once
from spanbert.tasks.scores import warn_unseen
from spanbert.tasks.selection import KeepBest, selection_summary
from spanbert.tasks.spec import RESULTS_FILE
from spanbert.tasks.task_folders import load_encoder, load_tokenizer_for
from spanbert.trainer import predict_batches, train
from spanbert.training_args import TrainingArguments
from spanbert.utils import atomic_dir, progress_bar

MODEL_TYPE = "spanbert-ner-features"
"""``model_type`` of a saved feature-based tagger's config.json (how `predict_ner` recognises one)."""

CACHE_VERSION = 1
"""Part of the cache key: bump it when the cached layout or its contents change."""

# Table 7 row -> (how the layers are combined, which layers of an L-layer encoder; 0 = embeddings)
FEATURE_CHOICES: dict[str, tuple[str, Callable[[int], list[int]]]] = {
    "embeddings": ("single", lambda L: [0]),
    "second_to_last_hidden": ("single", lambda L: [L - 1]),
    "last_hidden": ("single", lambda L: [L]),
    "weighted_sum_last_four": ("weighted", lambda L: list(range(L - 3, L + 1))),
    "concat_last_four": ("concat", lambda L: list(range(L - 3, L + 1))),
    "weighted_sum_all": ("weighted", lambda L: list(range(1, L + 1))),  # "All 12 Layers" of BERT-base
}
TABLE7 = tuple(FEATURE_CHOICES)
"""The six feature choices of BERT's Table 7, in its order."""


def choice_layers(choice: str, num_layers: int) -> tuple[str, list[int]]:
    """(mode, layers) of a Table 7 choice for an encoder of ``num_layers`` Transformer layers."""
    if choice not in FEATURE_CHOICES:
        raise SpanBertError(f"--features: found {choice!r}, expected table7 or some of {', '.join(TABLE7)}")
    mode, layers = FEATURE_CHOICES[choice]
    picked = layers(num_layers)
    if min(picked) < 0 or (choice != "embeddings" and min(picked) < 1):
        raise SpanBertError(f"--features {choice}: the encoder has {num_layers} layers; this choice needs at least 4")
    return mode, picked


def feature_dim(choice: str, num_layers: int, hidden_size: int) -> int:
    """Width of the biLSTM's input for a choice: 4 H for the concatenation, H otherwise."""
    mode, layers = choice_layers(choice, num_layers)
    return hidden_size * (len(layers) if mode == "concat" else 1)


def parse_choices(text: str) -> list[str]:
    """``table7`` (all six) or a comma-separated list of choices, checked."""
    names = list(TABLE7) if text.strip() == "table7" else [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in FEATURE_CHOICES]
    if bad or not names:
        raise SpanBertError(
            f"--features: found {bad or text!r}, expected table7 or a comma list of {', '.join(TABLE7)}"
        )
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# Extraction and the on-disk cache


def _sha256_files(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def encoder_fingerprint(model_dir: str | Path) -> str:
    """SHA-256 of the files of a checkpoint folder (top level, not hidden): weights, config, vocab."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise SpanBertError(f"{model_dir}: model folder not found")
    return _sha256_files(sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")))


def word_offsets(sentences: Sequence[Any]) -> np.ndarray:
    """(S + 1,) where each sentence's words start in the flat word arrays of the cache."""
    return np.cumsum([0] + [len(s.words) for s in sentences]).astype(np.int64)


def extract(
    encoder: nn.Module,
    tokenizer: Any,
    sentences: Sequence[Any],
    outputs: Sequence[np.ndarray],
    layers: Sequence[int],
    max_seq_length: int = 128,
    document_context: bool = True,
    batch_size: int = 32,
    progress: bool = True,
    only: set[int] | None = None,
) -> None:
    """Write ``encoder``'s activation of each layer in ``layers`` at the first sub-token of every word
    into ``outputs[k][word]`` (arrays of shape (words, H), flat over the sentences in order: see
    `word_offsets`). ``only``: encode just these sentences (their neighbours still give context)."""
    feats = ner_features(list(sentences), tokenizer, None, max_seq_length, document_context=document_context)
    if only is not None:
        feats = [f for f in feats if f["sentence"] in only]
    starts = word_offsets(sentences)
    order = sorted(range(len(feats)), key=lambda i: len(feats[i]["input_ids"]))  # little padding
    device = next(encoder.parameters()).device
    collate = Collator(tokenizer.pad_id)
    encoder.eval()
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with torch.no_grad():
        for batch_ids in progress_bar(batches, desc="features", disable=not progress, leave=False, dynamic_ncols=True):
            threads.tick()
            batch = collate([{"input_ids": feats[i]["input_ids"]} for i in batch_ids])
            mask = batch.get("attention_mask")
            states = encoder(
                batch["input_ids"].to(device), attention_mask=None if mask is None else mask.to(device),
                output_hidden_states=True,
            )  # L + 1 x (B, T, H)
            picked = torch.stack([states[l] for l in layers], 0).float().cpu().numpy()  # (k, B, T, H)
            for j, i in enumerate(batch_ids):
                f = feats[i]
                w0 = int(starts[f["sentence"]] + f["first_word"])
                rows = picked[:, j, f["first_token"]]  # (k, W, H)
                for k, out in enumerate(outputs):
                    out[w0 : w0 + rows.shape[1]] = rows[k]


@dataclasses.dataclass
class FeatureStore:
    """A cache folder opened read-only: one memory-mapped (words, H) array per layer."""

    folder: Path
    meta: dict[str, Any]
    offsets: np.ndarray
    """(S + 1,) word offsets of the sentences."""
    layers: list[np.ndarray]
    """Index l: the (words, H) memmap of layer l (0 = embeddings)."""

    @property
    def num_layers(self) -> int:
        """Transformer layers L of the encoder (the store holds L + 1 arrays)."""
        return len(self.layers) - 1


def open_store(folder: str | Path) -> FeatureStore:
    """Open a cache folder written by `cached_features`."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    layers = [np.load(folder / f"layer_{l:02d}.npy", mmap_mode="r") for l in range(meta["num_layers"] + 1)]
    return FeatureStore(folder, meta, np.load(folder / "word_offsets.npy"), layers)


def cached_features(
    model_dir: str | Path,
    data_path: str | Path,
    sentences: Sequence[Any],
    cache_dir: str | Path,
    tokenizer_dir: str | Path | None = None,
    max_seq_length: int = 128,
    document_context: bool = True,
    dtype: str = "float32",
    batch_size: int = 32,
    device: str = "cpu",
    progress: bool = True,
) -> FeatureStore:
    """The features of ``sentences`` (read from ``data_path``) under ``model_dir``: read from
    ``cache_dir`` when a folder with the same key is there, else extracted once (rank 0 under
    torchrun, the others wait) and written atomically (a killed run leaves no half cache)."""
    key_fields = {
        "version": CACHE_VERSION,
        "encoder": encoder_fingerprint(model_dir),
        "tokenizer": encoder_fingerprint(tokenizer_dir) if tokenizer_dir and Path(tokenizer_dir).is_dir() else None,
        "data": _sha256_files([Path(data_path)]),
        "sentences": len(sentences),
        "max_seq_length": max_seq_length,
        "document_context": document_context,
        "dtype": dtype,
    }
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cache_dir) / f"{Path(data_path).name}-{key}"

    def build() -> None:
        if (folder / "meta.json").is_file():
            print0(f"read the cached features of {data_path} from {folder} (the encoder is not run)")
            return
        tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
        encoder = load_encoder(model_dir).to(resolve_device(device))
        L, H = encoder.num_layers, encoder.hidden_size
        offsets = word_offsets(sentences)
        with atomic_dir(folder) as tmp:
            outs = [
                np.lib.format.open_memmap(
                    tmp / f"layer_{l:02d}.npy", mode="w+", dtype=dtype, shape=(int(offsets[-1]), H)
                )  # (words, H)
                for l in range(L + 1)
            ]  # fmt: skip
            extract(encoder, tokenizer, sentences, outs, list(range(L + 1)), max_seq_length, document_context,
                    batch_size, progress)  # fmt: skip
            for o in outs:
                o.flush()
            del outs
            np.save(tmp / "word_offsets.npy", offsets)
            meta = {**key_fields, "model_dir": str(Path(model_dir).resolve()), "data_path": str(data_path),
                    "num_layers": L, "hidden_size": H, "words": int(offsets[-1])}  # fmt: skip
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print0(f"cached the features of {len(sentences)} sentences of {data_path} in {folder}")

    write_once(build)
    return open_store(folder)


# ---------------------------------------------------------------------------------------------
# The head


class FeatureTagger(nn.Module):
    """Layer mixing + two-layer biLSTM + linear classifier over the words of a sentence (§5.3).

    ``mode``: ``single`` (one layer), ``concat`` (the k layers side by side, k H wide) or
    ``weighted`` (ELMo's scalar mix: softmax-normalised learned weights, zero-initialised so the mix
    starts as the mean, times a learned scale). Input ``features`` (B, W, k, H), ``lengths`` (B,)
    words per sentence, ``labels`` (B, W) with -100 on padding.
    """

    def __init__(
        self, mode: str, num_inputs: int, hidden_size: int, num_labels: int, lstm_hidden_size: int = 768,
        lstm_layers: int = 2, dropout: float = 0.1,
    ):  # fmt: skip
        super().__init__()
        self.mode = mode
        if mode == "weighted":
            self.layer_weights = nn.Parameter(torch.zeros(num_inputs))
            self.gamma = nn.Parameter(torch.ones(()))
        in_dim = hidden_size * (num_inputs if mode == "concat" else 1)
        self.dropout = Dropout(dropout)
        self.lstm = nn.LSTM(
            in_dim, lstm_hidden_size, num_layers=lstm_layers, bidirectional=True, batch_first=True,
            dropout=dropout if lstm_layers > 1 else 0.0,
        )  # fmt: skip
        self.classifier = nn.Linear(2 * lstm_hidden_size, num_labels)

    def mix(self, features: Tensor) -> Tensor:
        """(B, W, k, H) -> (B, W, D): the chosen combination of the layers."""
        if self.mode == "concat":
            return features.flatten(2)  # (B, W, k H)
        if self.mode == "weighted":
            w = self.layer_weights.softmax(0)  # (k,)
            return self.gamma * (features * w[:, None]).sum(2)  # (B, W, H)
        return features[:, :, 0]  # (B, W, H)

    def forward(self, features: Tensor, lengths: Tensor, labels: Tensor | None = None) -> dict[str, Tensor]:
        x = self.dropout(self.mix(features))  # (B, W, D)
        W = x.shape[1]
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=W)  # (B, W, 2 Hl)
        return token_outputs(self.classifier(self.dropout(h)), labels)  # logits (B, W, num_labels)


class SentenceFeatures(torch.utils.data.Dataset):
    """Sentences of a `FeatureStore` (or in-memory arrays), each ``{"features": (W, k, H), "labels": (W,)}``;
    only the layers of one choice are read from the memmaps."""

    def __init__(self, layers: Sequence[np.ndarray], offsets: np.ndarray, labels: list[np.ndarray] | None = None,
                 indices: Sequence[int] | None = None):  # fmt: skip
        self.layers, self.offsets, self.labels = list(layers), offsets, labels
        self.indices = list(indices) if indices is not None else list(range(len(offsets) - 1))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, Any]:
        s = self.indices[i]
        a, b = int(self.offsets[s]), int(self.offsets[s + 1])
        item: dict[str, Any] = {"features": np.stack([np.asarray(l[a:b], dtype=np.float32) for l in self.layers], 1)}
        if self.labels is not None:
            item["labels"] = self.labels[s]
        return item


def collate(items: list[dict[str, Any]]) -> dict[str, Tensor]:
    """Pad sentences to the longest: ``features`` (B, W, k, H), ``lengths`` (B,), ``labels`` (B, W)."""
    lengths = [len(x["features"]) for x in items]
    k, H = items[0]["features"].shape[1:]
    feats = torch.zeros((len(items), max(lengths), k, H), dtype=torch.float32)  # (B, W, k, H)
    for i, x in enumerate(items):
        feats[i, : lengths[i]] = torch.from_numpy(x["features"])
    batch = {"features": feats, "lengths": torch.tensor(lengths, dtype=torch.long)}
    if "labels" in items[0]:
        labels = torch.full((len(items), max(lengths)), IGNORE_INDEX, dtype=torch.long)  # (B, W)
        for i, x in enumerate(items):
            labels[i, : lengths[i]] = torch.as_tensor(x["labels"])
        batch["labels"] = labels
    return batch


def predict_tags(model: nn.Module, dataset: SentenceFeatures, labels: list[str], batch_size: int = 64,
                 progress: bool = False) -> list[list[str]]:  # fmt: skip
    """The tag of every word of the dataset's sentences (argmax, no CRF as §5.3); sharded under torchrun."""
    device = next(model.parameters()).device

    def run(indices: Sequence[int]) -> list[list[str]]:
        part = SentenceFeatures(dataset.layers, dataset.offsets, None, [dataset.indices[i] for i in indices])
        out: list[list[str]] = []
        for batch, o in predict_batches(model, part, batch_size, collate, device=device,
                                        disable_tqdm=not progress or not is_main()):  # fmt: skip
            best = o["logits"].argmax(-1).cpu().numpy()  # (b, W)
            out += [[labels[t] for t in best[j, :n]] for j, n in enumerate(batch["lengths"].tolist())]
        return out

    return predict_sharded(len(dataset), run)


# ---------------------------------------------------------------------------------------------
# Training, saving, prediction


def _labels_of(sentences: Sequence[Any], label2id: dict[str, int]) -> list[np.ndarray]:
    """Tag ids of every training sentence (``label2id`` is built from their tags: every tag has one)."""
    return [np.asarray([label2id[t] for t in s.tags], dtype=np.int64) for s in sentences]


def train_head(
    choice: str,
    train_store: FeatureStore,
    train_labels: list[np.ndarray],
    dev_store: FeatureStore | None,
    dev_sentences: Sequence[Any],
    labels: list[str],
    args: Any,
    head: HeadConfig,
) -> tuple[FeatureTagger, dict[str, Any], list[list[str]] | None]:
    """Train one randomly initialised tagger on one feature choice; returns (model holding the
    selected weights, dev metrics with the selected step, dev predictions of that model)."""
    mode, layers = choice_layers(choice, train_store.num_layers)
    with seeded_model(args.seed):
        model = FeatureTagger(mode, len(layers), train_store.meta["hidden_size"], len(labels), head.lstm_hidden_size,
                              head.lstm_layers, head.head_dropout)  # fmt: skip
    train_set = SentenceFeatures([train_store.layers[l] for l in layers], train_store.offsets, train_labels)
    dev_set = (
        SentenceFeatures([dev_store.layers[l] for l in layers], dev_store.offsets) if dev_store is not None else None
    )

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], Any]:
        pred = predict_tags(m, dev_set, labels, args.per_device_eval_batch_size)
        metrics = score(list(dev_sentences), pred)
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}, pred

    keeper = KeepBest(evaluate, args)
    run_config = {"features": choice, "layers": layers, **dataclasses.asdict(head)}
    result = train(model, train_set, args, collate_fn=collate, eval_fn=keeper if dev_set else None,
                   run_config=run_config)  # fmt: skip
    if dev_set is None:
        return model, {}, None
    pred, selected = keeper.chosen(model, args, result, len(train_set))
    metrics = {**score(list(dev_sentences), pred), **selection_summary(selected, args)}
    return model, metrics, pred


def save_head(model: FeatureTagger, out: Path, choice: str, labels: list[str], settings: dict[str, Any]) -> None:
    """config.json (``model_type`` `MODEL_TYPE`, id2label, the encoder and feature settings) and
    model.safetensors (the head's weights only; the encoder stays where ``settings["encoder"]`` says)."""
    mode, layers = choice_layers(choice, settings["num_layers"])
    config = {
        "model_type": MODEL_TYPE,
        "architectures": ["FeatureTagger"],
        **label_config(labels),
        "spanbert": {"task": "ner", "features": choice, "mode": mode, "layers": layers, **settings},
    }
    save_checkpoint(out, model.state_dict(), config)


def is_feature_model(model_dir: str | Path | None) -> bool:
    """True when ``model_dir`` holds a tagger saved by `finetune_features`."""
    if model_dir is None or not Path(model_dir).is_dir():
        return False
    try:
        return families.read_config(model_dir).get("model_type") == MODEL_TYPE
    except SpanBertError:
        return False


def finetune_features(model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, args: Any,
                      head: HeadConfig, tokenizer_dir: str | Path | None = None, max_seq_length: int = 128,
                      max_train_examples: int | None = None, max_eval_examples: int | None = None,
                      document_context: bool = True, device: str = "auto") -> dict[str, Any]:
    """Extract (or reuse) the features of the train and dev files, then train one head per choice in
    ``head.features``. One choice saves into ``args.output_dir``; several into
    ``args.output_dir/<choice>/``, with ``features_results.json`` (dev scores of every choice) on top.
    Returns {choice: dev metrics}."""
    choices = parse_choices(head.features)
    # every choice must fit the encoder's depth: checked from its config.json before any feature is
    # extracted, not after an hour of filling the cache
    num_layers = families.num_layers_of(model_dir)
    for c in choices:
        choice_layers(c, num_layers)
    train = read_conll(train_path)[:max_train_examples]
    dev = read_conll(dev_path)[:max_eval_examples] if dev_path else []
    labels = label_list(train)
    label2id = {l: i for i, l in enumerate(labels)}
    train_labels = _labels_of(train, label2id)
    if dev:
        warn_unseen(dev_path, [t for s in dev for t in s.tags], labels, "tag", f"the training file {train_path}")
    out = Path(args.output_dir)
    # the cache is written before the training loop claims the folder: a call from Python claims it here
    # (the command has already: a no-op then)
    write_once(lambda: folders.claim_manifest(out, RUN, "spanbert (Python)"))
    cache = Path(head.feature_cache) if head.feature_cache else out / "feature_cache"
    common = dict(tokenizer_dir=tokenizer_dir, max_seq_length=max_seq_length, document_context=document_context,
                  dtype=head.feature_dtype, batch_size=head.extract_batch_size, device=device,
                  progress=not args.disable_tqdm)  # fmt: skip
    train_store = cached_features(model_dir, train_path, train, cache, **common)
    dev_store = cached_features(model_dir, dev_path, dev, cache, **common) if dev else None
    for c in choices:
        choice_layers(c, train_store.num_layers)  # every choice fits this encoder, before any training
    settings = {
        "encoder": str(Path(model_dir).resolve()),
        "encoder_fingerprint": train_store.meta["encoder"],
        "tokenizer": str(Path(tokenizer_dir).resolve()) if tokenizer_dir else None,
        "num_layers": train_store.num_layers,
        "hidden_size": train_store.meta["hidden_size"],
        "max_seq_length": max_seq_length,
        "document_context": document_context,
        "lstm_hidden_size": head.lstm_hidden_size,
        "lstm_layers": head.lstm_layers,
        "head_dropout": head.head_dropout,
    }
    results: dict[str, Any] = {}
    for c in choices:
        run_dir = out if len(choices) == 1 else out / c
        targs = dataclasses.replace(args, output_dir=str(run_dir))
        model, metrics, pred = train_head(c, train_store, train_labels, dev_store, dev, labels, targs, head)
        dim = feature_dim(c, train_store.num_layers, train_store.meta["hidden_size"])
        metrics = {**metrics, "feature_dim": dim} if dev else metrics

        def write(model: nn.Module = model, run_dir: Path = run_dir, c: str = c, metrics: dict = metrics,
                  pred: Any = pred) -> None:  # fmt: skip
            save_head(model, run_dir, c, labels, settings)
            if dev:
                write_predictions(run_dir / "dev_predictions.txt", dev, pred)
                write_json_once(run_dir / RESULTS_FILE, metrics)

        write_once(write)
        results[c] = metrics
        if dev:
            print0(f"{c}: dev F1 {metrics['f1']:.2f} (selected step {metrics.get('selected_step')})")
    if len(choices) > 1:
        write_json_once(out / "features_results.json", summary_table(results))
    return results


def summary_table(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{choice: dev f1, precision, recall, selected_step, feature_dim}: Table 7's rows of one run."""
    keys = ("f1", "precision", "recall", "selected_step", "feature_dim")
    return {c: {k: m[k] for k in keys if k in m} for c, m in results.items()}


def predict(
    model_dir: str | Path, sentences: list[Any], batch_size: int = 64, device: str = "cpu", progress: bool = True,
    source: str | Path | None = None,
) -> list[list[str]]:  # fmt: skip
    """Tags with a tagger saved by `finetune_features`: the input is encoded with the encoder it names
    (checked against the fingerprint saved at training), only the layers it uses, in memory."""
    config_file, weights = Path(model_dir) / "config.json", Path(model_dir) / "model.safetensors"
    try:
        config, state = json.loads(config_file.read_text(encoding="utf-8")), load_file(str(weights))
    except (OSError, ValueError) as e:  # not there, not JSON, not safetensors
        raise SpanBertError(f"{model_dir}: cannot read the saved tagger ({e})") from None
    labels = labels_from_config(config, str(config_file))
    s = config.get("spanbert", {})
    need = ("encoder", "encoder_fingerprint", "layers", "mode", "hidden_size", "max_seq_length")
    if labels is None or any(k not in s for k in need):
        raise DataError(config_file, f"found settings {sorted(s)}; expected a feature-based NER tagger's {list(need)}")
    if not Path(s["encoder"]).is_dir():
        raise SpanBertError(f"{config_file}: the encoder {s['encoder']} it was trained on is not there (moved?)")
    if encoder_fingerprint(s["encoder"]) != s["encoder_fingerprint"]:
        raise SpanBertError(f"{config_file}: the encoder {s['encoder']} changed since this tagger was trained on it")
    if source is not None:
        warn_unseen(source, [t for sent in sentences for t in (sent.tags or [])], labels, "tag",
                    f"the training tags of {model_dir}")  # fmt: skip
    dev = resolve_device(device)
    encoder = load_encoder(s["encoder"]).to(dev)
    tokenizer = load_tokenizer_for(s["encoder"], s.get("tokenizer"))
    offsets = word_offsets(sentences)
    arrays = [np.zeros((int(offsets[-1]), s["hidden_size"]), dtype=np.float32) for _ in s["layers"]]
    extract(encoder, tokenizer, sentences, arrays, s["layers"], s["max_seq_length"],
            bool(s.get("document_context", True)), batch_size, progress)  # fmt: skip
    del encoder
    model = FeatureTagger(s["mode"], len(s["layers"]), s["hidden_size"], len(labels),
                          s.get("lstm_hidden_size", 768), s.get("lstm_layers", 2), 0.0)  # fmt: skip
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(f"{model_dir}: weights do not match a FeatureTagger; missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")  # fmt: skip
    model.to(dev).eval()
    return predict_tags(model, SentenceFeatures(arrays, offsets), labels, batch_size, progress)


def features_run(opts: Any) -> Callable[[TrainingArguments], dict[str, Any]]:
    """``spanbert finetune ner --features CHOICES ...`` (``opts``: `NerFinetune`, its `HeadConfig` with
    ``opts.features``) as the one run `finetuning.finetune_options` makes: what cannot run is refused
    first; the run's dev scores are Table 7's rows when it trains several choices (`summary_table`)."""
    if opts.sweep:
        raise SpanBertError("--sweep is not available with --features; pass one --learning_rate per run")
    head = dataclasses.replace(opts.head, features=opts.features)
    parse_choices(head.features)  # a bad choice fails before any work
    if head.feature_dtype not in ("float32", "float16"):
        raise SpanBertError(f"--feature_dtype: found {head.feature_dtype!r}, expected float32 or float16")

    def run_one(targs: TrainingArguments) -> dict[str, Any]:
        results = finetune_features(
            opts.model, opts.train_file, opts.validation_file, targs, head, opts.tokenizer, opts.max_seq_length,
            opts.max_train_examples, opts.max_eval_examples, opts.document_context, targs.device,
        )  # fmt: skip
        return summary_table(results) if len(results) > 1 else next(iter(results.values()))

    return run_one


__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
