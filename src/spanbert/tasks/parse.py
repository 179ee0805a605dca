"""Constituency parsing (cloze paper §6.2.2): the chart parser of Kitaev & Klein (2018) on any model
family's word representations, scored with EVALB (COLLINS.prm).

The model (`ChartParser`): the encoder reads ``[cls] word pieces [sep]``; each word is the state of its
first sub-token, the sentence is framed by the ``[cls]`` and ``[sep]`` states (K&K's START/STOP);
a projection, learned positions and ``parser_layers`` transformer layers (2, as §6.2.2) give each
position a vector whose first half is read forwards and second half backwards. A span (i, j) between
fenceposts i < j is ``[f_j - f_i ; b_{i+1} - b_{j+1}]`` (K&K §2.2), and an MLP gives it a score per
label; the empty label scores 0. A tree's score is the sum of its spans' scores, and CKY (`cky`)
finds the best binary tree over all spans at once, one vectorised step per span length; spans that
take the empty label vanish from the output. Unary chains are collapsed into one chart label
(``S+VP``) and restored on output; preterminals are not in the chart.

Training: the margin loss of K&K (2018) §3: ``max(0, max_T [s(T) + Δ(T, T*)] - s(T*))`` with Δ the
Hamming loss on labelled spans, the max found by the same CKY on scores raised by 1 for every label
other than the gold one of that span (loss-augmented decoding). The root span (0, n) always takes a
non-empty label (a tree has a root constituent). POS tags: a linear layer on the parser's word
vectors is trained with cross-entropy beside the parser (joint tagging, Kitaev et al. 2019); on
output a tree keeps the input's tags when the input has them (``--tags input``, the default: the
trees then carry the gold punctuation tags EVALB deletes by, as published PTB parsers' outputs do),
and takes the predicted tags for raw text (``--text``) or with ``--tags predicted``.

Two learning rates: the encoder (``bert.``) at ``--encoder_learning_rate``, the parser at
``--learning_rate``. Defaults by family: the two-tower model 8e-4 and 8e-3 (§6.2.2: "8E-04 for
language model finetuning, 8E-03 for the parsing model parameters"); BERT-family encoders 5e-5 (BERT's
fine-tuning rate) and 8e-4 (K&K 2018's Adam rate for a parser trained from scratch).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import _aliases, families
from spanbert.distributed import eprint0, is_main, print0
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.evalb import EvalbAbort, evalb, summary_text
from spanbert.tasks.classification import FeatureDataset
from spanbert.tasks.finetuning import finetune_options
from spanbert.tasks.options import one_of
from spanbert.tasks.parse_options import ACTIONS, ParseConfig, ParseEvaluate, ParseFinetune, ParsePredict, family_rates
from spanbert.tasks.ranks import (
    predict_sharded,
    print_metrics,
    seeded_model,
    start_distributed,
    write_json_once,
    write_once,
)
from spanbert.tasks.scores import warn_unseen
from spanbert.tasks.selection import KeepBest, selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, TaskSpec
from spanbert.tasks.task_folders import load_encoder, load_task_model, save_finetuned
from spanbert.tasks.trees import Tree, parse_brackets, read_trees, tokenize, write_trees
from spanbert.trainer import predict_batches
from spanbert.trainer import train as run_training
from spanbert.training_args import TrainingArguments

CHAIN = "+"
"""Joins the labels of a collapsed unary chain (outermost first): ``S+VP``. No PTB label has a ``+``."""

EMPTY = ""
"""The empty label (id 0): a span that is not a constituent."""

# Words as the treebank escapes them -> the text a language model saw (K&K's BERT token mapping).
_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]",
             "``": '"', "''": '"', "`": "'"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Trees <-> chart spans


def tree_spans(tree: Tree) -> list[tuple[int, int, str]]:
    """The labelled spans (i, j, label) of a ``TOP`` tree over fenceposts 0..n, unary chains collapsed
    (``(S (VP ...))`` over one span is ``S+VP``); preterminals and ``TOP`` are not spans."""
    out: list[tuple[int, int, str]] = []

    def walk(t: Tree, start: int) -> int:
        if t.is_preterminal:
            return start + 1
        labels, node = [t.label], t
        while len(node.children) == 1 and not node.children[0].is_preterminal:
            node = node.children[0]
            labels.append(node.label)
        end = start
        for c in node.children:
            end = walk(c, end)
        out.append((start, end, CHAIN.join(labels)))
        return end

    pos = 0
    for c in tree.children:
        pos = walk(c, pos)
    return out


def tree_from_spans(words: Sequence[str], tags: Sequence[str], spans: Sequence[tuple[int, int, str]]) -> Tree:
    """The ``TOP`` tree of nested labelled spans (chains restored, every word under its tag)."""
    order = sorted((s for s in spans if s[2] != EMPTY), key=lambda s: (s[0], -s[1]))

    def build(lo: int, hi: int, k: int) -> tuple[list[Tree], int]:
        children: list[Tree] = []
        pos = lo
        while pos < hi:
            if k < len(order) and order[k][0] == pos and order[k][1] <= hi:
                i, j, label = order[k]
                sub, k = build(i, j, k + 1)
                for name in reversed(label.split(CHAIN)):
                    sub = [Tree(name, sub)]
                children += sub
                pos = j
            else:
                children.append(Tree(tags[pos], word=words[pos]))
                pos += 1
        return children, k

    children, _ = build(0, len(words), 0)
    return Tree("TOP", children)


# ---------------------------------------------------------------------------------------------
# CKY


def cky(scores: np.ndarray, lengths: Sequence[int]) -> list[list[tuple[int, int]]]:
    """The spans of the best binary tree of each sentence.

    ``scores`` (B, N+1, N+1): the score of span (i, j) (its best label's), fenceposts 0..N; sentence b
    uses 0..lengths[b]. A tree's score is the sum of its 2n-1 spans' scores. Vectorised over the batch
    and over all spans of one length: N-1 numpy steps whatever B, each taking, for every span (i, j)
    of that length, the best split k of chart[i, k] + chart[k, j]. Returns each sentence's spans,
    outermost first."""
    B, N1, _ = scores.shape
    N = N1 - 1
    chart = np.zeros((B, N1, N1), dtype=np.float64)
    split = np.zeros((B, N1, N1), dtype=np.int64)
    if N >= 1:
        i = np.arange(N)
        chart[:, i, i + 1] = scores[:, i, i + 1]
    for length in range(2, N + 1):
        i = np.arange(0, N - length + 1)  # (S,) span starts
        j = i + length
        k = i[:, None] + np.arange(1, length)[None, :]  # (S, L-1) split points
        cand = chart[:, i[:, None], k] + chart[:, k, j[:, None]]  # (B, S, L-1)
        best = cand.argmax(-1)  # (B, S)
        chart[:, i, j] = np.take_along_axis(cand, best[..., None], -1)[..., 0] + scores[:, i, j]
        split[:, i, j] = k[np.arange(len(i))[None, :], best]
    out = []
    for b, n in enumerate(lengths):
        spans = []
        stack = [(0, int(n))] if n > 0 else []
        while stack:
            a, c = stack.pop()
            spans.append((a, c))
            if c - a > 1:
                m = int(split[b, a, c])
                stack += [(m, c), (a, m)]
        out.append(spans)
    return out


# ---------------------------------------------------------------------------------------------
# Model


class ChartParser(nn.Module):
    """Encoder (``bert``) + parser layers + span label MLP + tagger. ``forward`` returns the margin loss
    with gold spans, else each span's best label and score for `cky`."""

    def __init__(
        self, encoder: nn.Module, labels: list[str], tags: list[str], config: ParseConfig,
        init_std: float = 0.02, output_scale: float = 1.0, zero_init_head: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if labels[0] != EMPTY:
            raise ValueError("labels[0] must be the empty label")
        if config.d_model % 2 or config.d_model % config.num_heads:
            raise SpanBertError(f"--d_model: found {config.d_model}; expected an even multiple of --num_heads")
        self.bert = encoder
        self.labels, self.tags, self.config = list(labels), list(tags), config
        self.output_scale = output_scale
        H, D = encoder.hidden_size, config.d_model
        self.project = nn.Linear(H, D, bias=False)
        self.position_embeddings = nn.Embedding(config.max_words + 2, D)
        self.layer_norm = nn.LayerNorm(D)
        self.dropout = nn.Dropout(config.parser_dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, config.num_heads, config.d_ff, config.parser_dropout, batch_first=True)
            for _ in range(config.parser_layers)
        )
        self.label_mlp = nn.Sequential(
            nn.Linear(D, config.label_hidden), nn.LayerNorm(config.label_hidden), nn.ReLU(),
            nn.Linear(config.label_hidden, len(labels) - 1),
        )  # fmt: skip
        self.tag_classifier = nn.Linear(D, max(1, len(tags)))
        for lin in (self.label_mlp[-1], self.tag_classifier):
            # the family's head habit: the two-tower model's zero-initialised output layer
            nn.init.zeros_(lin.weight) if zero_init_head else nn.init.normal_(lin.weight, std=init_std)
            nn.init.zeros_(lin.bias)
        nn.init.normal_(self.position_embeddings.weight, std=init_std)

    def word_vectors(self, input_ids: Tensor, attention_mask: Tensor, word_index: Tensor, lengths: Tensor) -> Tensor:
        """(B, W+2, D): the parser's vector of [cls], each word (its first sub-token) and [sep]."""
        hidden = self.bert(input_ids, attention_mask)  # (B, T, H)
        words = hidden.gather(1, word_index[..., None].expand(-1, -1, hidden.size(-1)))  # (B, W+2, H)
        W2 = words.size(1)
        pos = torch.arange(W2, device=words.device)
        # the family's habit: the two-tower model's output is scaled (x16) before a new layer reads it
        x = self.project(words * self.output_scale) + self.position_embeddings(pos)[None]  # (B, W+2, D)
        x = self.dropout(self.layer_norm(x))
        pad = pos[None, :] >= (lengths[:, None] + 2)  # (B, W+2) True = padding
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        return x

    def label_scores(self, x: Tensor) -> Tensor:
        """(B, N+1, N+1, L) score of every label of every span (i, j) from the word vectors x (B, N+2, D);
        the empty label is 0."""
        half = x.size(-1) // 2
        # fencepost k = [f_k ; -b_{k+1}], so fence_j - fence_i = [f_j - f_i ; b_{i+1} - b_{j+1}] (K&K §2.2)
        fence = torch.cat([x[:, :-1, :half], -x[:, 1:, half:]], -1)  # (B, N+1, D)
        # the MLP's first layer is linear, so W (fence_j - fence_i) + b = W fence_j - W fence_i + b: the
        # (B, N+1, N+1, D) span vectors are never built, only their hidden layer
        first = self.label_mlp[0]
        proj = F.linear(fence, first.weight)  # (B, N+1, hidden)
        hidden = proj[:, None, :, :] - proj[:, :, None, :] + first.bias  # (B, N+1, N+1, hidden); [b, i, j]: span (i, j)
        scores = self.label_mlp[1:](hidden)  # (B, N+1, N+1, L-1)
        return torch.cat([scores.new_zeros(scores.shape[:-1] + (1,)), scores], -1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, word_index: Tensor, lengths: Tensor,
        gold_spans: Tensor | None = None, tag_labels: Tensor | None = None,
    ) -> dict[str, Tensor]:  # fmt: skip
        x = self.word_vectors(input_ids, attention_mask, word_index, lengths)  # (B, N+2, D)
        scores = self.label_scores(x)  # (B, N+1, N+1, L)
        tag_logits = self.tag_classifier(x[:, 1:-1])  # (B, N, tags)
        if gold_spans is None:
            best, label = _best_labels(scores.detach().float(), lengths)
            return {"span_best": best, "span_label": label, "tag_logits": tag_logits}
        B, N1, _, L = scores.shape
        gold = torch.zeros((B, N1, N1), dtype=torch.long, device=scores.device)  # gold label of every span
        real = gold_spans[..., 0] >= 0  # (B, K)
        b_idx = torch.arange(B, device=scores.device)[:, None].expand_as(real)[real]
        gi, gj, gl = gold_spans[..., 0][real], gold_spans[..., 1][real], gold_spans[..., 2][real]
        gold[b_idx, gi, gj] = gl
        # loss-augmented decoding: +1 (Hamming) on every label but the gold one of the span
        augmented = scores.detach().float() + 1.0 - F.one_hot(gold, L).float()
        best, label = _best_labels(augmented, lengths)
        trees = cky(best.cpu().numpy(), lengths.tolist())
        pb = torch.tensor([b for b, spans in enumerate(trees) for _ in spans], device=scores.device)
        pi = torch.tensor([i for spans in trees for i, _ in spans], device=scores.device)
        pj = torch.tensor([j for spans in trees for _, j in spans], device=scores.device)
        pl = label[pb, pi, pj]
        cost = (pl != gold[pb, pi, pj]).float()
        margins = scores.float()  # the loss in fp32: under bf16 autocast the scores are bf16, the cost fp32
        predicted = margins.new_zeros(B).index_add(0, pb, margins[pb, pi, pj, pl] + cost)
        gold_score = margins.new_zeros(B).index_add(0, b_idx, margins[b_idx, gi, gj, gl])
        parse_loss = F.relu(predicted - gold_score).mean()  # K&K (2018) §3, per sentence
        out = {"parse_loss": parse_loss.detach(), "loss": parse_loss}
        if tag_labels is not None:  # (weight 0 still keeps the tagger in the graph: DDP wants every parameter used)
            tag_loss = F.cross_entropy(tag_logits.flatten(0, 1), tag_labels.flatten(), ignore_index=-100)
            out["tag_loss"] = tag_loss.detach()
            out["loss"] = parse_loss + self.config.tag_loss_weight * tag_loss
        return out


def _best_labels(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(B, N+1, N+1) best score and label of every span; the root span (0, n) takes its best non-empty
    label (every tree has a root constituent) when there is one."""
    best, label = scores.max(-1)
    if scores.size(-1) > 1:
        b = torch.arange(scores.size(0), device=scores.device)
        root_best, root_label = scores[b, 0, lengths, 1:].max(-1)
        best[b, 0, lengths] = root_best
        label[b, 0, lengths] = root_label + 1
    return best, label


# ---------------------------------------------------------------------------------------------
# Features


def chart_labels(trees: Sequence[Tree]) -> list[str]:
    """The empty label, then every collapsed chain label of ``trees``, most frequent first (ties by name)."""
    counts = Counter(label for t in trees for _, _, label in tree_spans(t))
    return [EMPTY] + sorted(counts, key=lambda k: (-counts[k], k))


def warn_unseen_labels(
    path: str | Path, trees: Sequence[Tree], labels: Sequence[str], trained_on: str, tags: Sequence[str] | None = None
) -> None:
    """Warn about the gold constituent labels (collapsed chains) of ``trees`` the parser never saw in
    training: it cannot produce them, so EVALB counts them as misses, as TACRED and NER warn. With ``tags``
    (the tagger's vocabulary, when the output trees carry its predicted tags) the gold POS tags too: EVALB's
    tagging accuracy counts an unseen one as a miss."""
    warn_unseen(path, [label for t in trees for _, _, label in tree_spans(t)], labels, "constituent label", trained_on)
    if tags is not None:
        warn_unseen(path, [tag for t in trees for tag in t.tags()], tags, "POS tag", trained_on)


def tag_list(trees: Sequence[Tree]) -> list[str]:
    return sorted({tag for t in trees for tag in t.tags()})


def parse_features(
    sentences: Sequence[Sequence[str]], tokenizer: Any, max_seq_length: int = 512,
    sources: Sequence[tuple[str, int]] | None = None, max_words: int = 300,
) -> list[dict[str, Any]]:  # fmt: skip
    """One feature per sentence: ``input_ids`` ``[cls] pieces [sep]`` and ``word_index`` (W+2,): the
    positions of [cls], each word's first sub-token and [sep]. Escaped treebank words (``-LRB-``,
    ``````) are given to the encoder as the characters they stand for."""
    features = []
    for k, words in enumerate(sentences):
        where = sources[k] if sources else ("input", k + 1)
        if len(words) > max_words:
            raise DataError(where[0], f"found a sentence of {len(words)} words; expected at most --max_words "
                            f"{max_words}", line=where[1])  # fmt: skip
        enc = tokenizer.encode_words([_UNESCAPE.get(w, w) for w in words])
        ids = [tokenizer.cls_id, *enc.ids.tolist(), tokenizer.sep_id]
        if len(ids) > max_seq_length:
            raise DataError(where[0], f"found a sentence of {len(ids)} tokens with [cls]/[sep]; expected at most "
                            f"--max_seq_length {max_seq_length}", line=where[1])  # fmt: skip
        first = np.zeros(len(words), dtype=np.int64)
        seen = np.zeros(len(words), dtype=bool)
        for t, w in enumerate(enc.word_ids.tolist()):
            if 0 <= w < len(words) and not seen[w]:
                first[w], seen[w] = t + 1, True
        features.append({
            "input_ids": np.asarray(ids, dtype=np.int64),
            "word_index": np.concatenate([[0], first, [len(ids) - 1]]).astype(np.int64),
        })  # fmt: skip
    return features


def add_targets(
    features: list[dict[str, Any]], trees: Sequence[Tree], label2id: dict[str, int], tag2id: dict[str, int]
) -> None:
    """The gold spans (K, 3) ``(i, j, label id)`` and tag ids (W,) of each feature (training)."""
    for f, t in zip(features, trees):
        f["gold_spans"] = np.asarray([(i, j, label2id[lab]) for i, j, lab in tree_spans(t)], dtype=np.int64).reshape(
            -1, 3
        )
        f["tag_labels"] = np.asarray([tag2id.get(tag, -100) for tag in t.tags()], dtype=np.int64)


class ParseCollator:
    """Pads features into a batch: input_ids/attention_mask (B, T), word_index (B, W+2), lengths (B,),
    and when present gold_spans (B, K, 3) padded with -1 and tag_labels (B, W) padded with -100."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Tensor]:
        B = len(features)
        T = max(len(f["input_ids"]) for f in features)
        W2 = max(len(f["word_index"]) for f in features)
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.long)
        word_index = torch.zeros((B, W2), dtype=torch.long)
        for b, f in enumerate(features):
            n = len(f["input_ids"])
            input_ids[b, :n] = torch.as_tensor(f["input_ids"])
            mask[b, :n] = 1
            word_index[b, : len(f["word_index"])] = torch.as_tensor(f["word_index"])
        batch = {
            "input_ids": input_ids, "attention_mask": mask, "word_index": word_index,
            "lengths": torch.tensor([len(f["word_index"]) - 2 for f in features], dtype=torch.long),
        }  # fmt: skip
        if "gold_spans" in features[0]:
            K = max(len(f["gold_spans"]) for f in features)
            spans = torch.full((B, max(K, 1), 3), -1, dtype=torch.long)
            tags = torch.full((B, W2 - 2), -100, dtype=torch.long)
            for b, f in enumerate(features):
                spans[b, : len(f["gold_spans"])] = torch.as_tensor(f["gold_spans"])
                tags[b, : len(f["tag_labels"])] = torch.as_tensor(f["tag_labels"])
            batch["gold_spans"], batch["tag_labels"] = spans, tags
        return batch


# ---------------------------------------------------------------------------------------------
# Prediction


@dataclass
class Parsed:
    trees: list[Tree]
    decode_seconds: float
    """Time spent in `cky` and building the trees (the rest is the network)."""


def predict_trees(
    model: ChartParser, sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[str] | None], features: list[dict],
    pad_id: int, batch_size: int = 64, progress: bool = False,
) -> Parsed:  # fmt: skip
    """The trees of ``sentences`` in order. ``tags[k]`` (the input's tags) is kept on the output when
    given, else the tagger's prediction. Under torchrun each rank parses its share (every rank gets all)."""
    device = next(model.parameters()).device
    decode = [0.0]

    def run(indices: Sequence[int]) -> list[Tree]:
        order = sorted(indices, key=lambda i: len(features[i]["input_ids"]))
        out: dict[int, Tree] = {}
        done = 0
        for _, res in predict_batches(
            model, [features[i] for i in order], batch_size, ParseCollator(pad_id), device=device,
            desc="parse", disable_tqdm=not progress or not is_main(),
        ):  # fmt: skip
            best, label = res["span_best"].cpu().numpy(), res["span_label"].cpu().numpy()
            tag_ids = res["tag_logits"].argmax(-1).cpu().numpy()
            ids = order[done : done + len(best)]
            t0 = time.perf_counter()
            charts = cky(best, [len(sentences[i]) for i in ids])
            for b, (i, spans) in enumerate(zip(ids, charts)):
                words = list(sentences[i])
                word_tags = list(tags[i]) if tags[i] is not None else [model.tags[t] for t in tag_ids[b, : len(words)]]
                labelled = [(a, c, model.labels[label[b, a, c]]) for a, c in spans]
                out[i] = tree_from_spans(words, word_tags, labelled)
            decode[0] += time.perf_counter() - t0
            done += len(best)
        return [out[i] for i in indices]

    trees = predict_sharded(len(sentences), run) if sentences else []
    return Parsed(trees, decode[0])


# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, scoring

TASK = "ForConstituencyParsing"
"""The architecture name in config.json: the family's prefix + this (``BertForConstituencyParsing``,
``TwoTowerForConstituencyParsing``)."""

def evalb_scores(gold: Sequence[Tree], predicted_lines: Sequence[str]) -> dict[str, Any]:
    """EVALB (COLLINS.prm) figures of predicted lines against gold trees: the All summary, and the
    len<=40 one with that prefix. F1 etc. on EVALB's 0-100 scale."""
    return evalb([str(t) for t in gold], predicted_lines).metrics()


def _headline(metrics: dict[str, Any]) -> dict[str, float]:
    keys = ("f1", "recall", "precision", "complete_match", "len<=40_f1")
    return {k: float(metrics[k]) for k in keys if k in metrics}


def finetune_parse(
    model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, targs: Any, config: ParseConfig,
    tokenizer_dir: str | Path | None = None, max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train a chart parser on the trees of ``train_path`` and save it in ``targs.output_dir`` with its
    dev predictions and EVALB scores (the model of the best dev F1 when ``metric_for_best_model``)."""
    train = read_trees(train_path)
    dev = read_trees(dev_path) if dev_path else None
    train_trees, train_sources = train.trees[:max_train_examples], train.sources[:max_train_examples]
    dev_trees = dev.trees[:max_eval_examples] if dev else []
    dev_sources = dev.sources[:max_eval_examples] if dev else []
    tokenizer = families.load_framed_tokenizer(model_dir, tokenizer_dir)
    labels, tags = chart_labels(train_trees), tag_list(train_trees)
    if dev_path:
        warn_unseen_labels(dev_path, dev_trees, labels, f"the training trees used ({train_path}, {len(train_trees)} trees)")
    with seeded_model(targs.seed):  # the parser's initialisation is the same on every rank and run
        encoder = load_encoder(model_dir)
        habits = encoder.habits
        model = ChartParser(encoder, labels, tags, config, habits.init_std, habits.output_scale, habits.zero_init_head)
    max_len = min(config.max_seq_length, int(getattr(encoder, "max_positions", config.max_seq_length)))
    train_features = parse_features(
        [t.words() for t in train_trees], tokenizer, max_len, train_sources, config.max_words
    )
    add_targets(train_features, train_trees, {l: i for i, l in enumerate(labels)}, {t: i for i, t in enumerate(tags)})
    dev_words = [t.words() for t in dev_trees]
    dev_features = parse_features(dev_words, tokenizer, max_len, dev_sources, config.max_words)
    encoder_lr = config.encoder_learning_rate if config.encoder_learning_rate >= 0 else family_rates(model_dir)[0]

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], list[Tree]]:
        parsed = predict_trees(m, dev_words, [t.tags() for t in dev_trees], dev_features, tokenizer.pad_id,
                               targs.per_device_eval_batch_size)  # fmt: skip
        return _headline(evalb_scores(dev_trees, [str(t) for t in parsed.trees])), parsed.trees

    keeper = KeepBest(evaluate, targs)
    result = run_training(
        model, FeatureDataset(train_features), targs, collate_fn=ParseCollator(tokenizer.pad_id),
        lr_by_prefix={"bert.": encoder_lr}, eval_fn=keeper if dev_trees else None,
        run_config={"task": "parse", "parse": asdict(config), "encoder_learning_rate": encoder_lr},
    )  # fmt: skip
    metrics: dict[str, Any] = {"encoder_learning_rate": encoder_lr, "parser_learning_rate": targs.learning_rate}
    predicted: list[Tree] = []
    if dev_trees:
        predicted, selected = keeper.chosen(model, targs, result, len(train_features))
        metrics.update(evalb_scores(dev_trees, [str(t) for t in predicted]))
        metrics.update(selection_summary(selected, targs))
    out = Path(targs.output_dir)
    settings = {"task": "parse", "labels": labels, "tags": tags, "parse": asdict(config)}

    def write() -> None:
        save_finetuned(model, out, tokenizer, families.architecture(encoder, TASK), {"spanbert": settings})
        if dev_trees:
            write_trees(out / "dev_predictions.txt", predicted)
            write_json_once(out / RESULTS_FILE, metrics)

    write_once(write)
    return metrics


def load_parser(model_dir: str | Path, device: str = "cpu") -> tuple[ChartParser, Any]:
    """(parser in eval mode on ``device``, its tokenizer) of a folder saved by `finetune_parse`."""
    def build(encoder: nn.Module, config_json: dict[str, Any]) -> nn.Module:
        s = config_json.get("spanbert", {})
        try:
            config = ParseConfig(**s["parse"])
            labels, tags = list(s["labels"]), list(s["tags"])
        except (KeyError, TypeError) as e:
            raise DataError(Path(model_dir) / "config.json", f"found no parser settings ({e}); expected a folder "
                            "saved by spanbert finetune parse") from None  # fmt: skip
        return ChartParser(encoder, labels, tags, config, output_scale=encoder.habits.output_scale)

    model, _, tokenizer = load_task_model(
        model_dir, build, families.architectures(TASK), "a parser saved by spanbert finetune parse", device
    )
    return model, tokenizer  # type: ignore[return-value]


def parse_sentences(
    model: ChartParser, tokenizer: Any, sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[str] | None],
    sources: Sequence[tuple[str, int]] | None = None, batch_size: int = 64, progress: bool = False,
) -> Parsed:  # fmt: skip
    """Trees for ``sentences`` (lists of words) with a loaded parser; ``tags`` as `predict_trees`."""
    c = model.config
    max_len = min(c.max_seq_length, int(getattr(model.bert, "max_positions", c.max_seq_length)))
    features = parse_features(sentences, tokenizer, max_len, sources, c.max_words)
    return predict_trees(model, sentences, tags, features, tokenizer.pad_id, batch_size, progress)


def read_predicted_lines(path: str | Path, expected: int, gold: str | Path) -> list[str]:
    """The lines of a predictions file, one tree a line, checked: as many as the gold trees, each one
    well-formed tree (an empty line is kept: EVALB counts it as a skip sentence). No cleaning: EVALB
    sees the labels, tags and wrappers as the file has them."""
    path = Path(path)
    try:
        lines = decode_utf8(path.read_bytes(), path, "predicted trees in UTF-8, one a line").splitlines()
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected predicted trees, one a line)") from None
    if len(lines) < expected:
        raise DataError(path, f"found {len(lines)} trees; expected {expected}, one a line, as {gold} has (the "
                        f"tree of gold sentence {len(lines) + 1} is missing)", line=len(lines) + 1)  # fmt: skip
    if len(lines) > expected:
        raise DataError(path, f"found {len(lines)} lines; expected {expected} trees, one a line, as {gold} has",
                        line=expected + 1)  # fmt: skip
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                got = list(parse_brackets(line, path))
            except DataError as e:  # read alone, the line is line 1: name its line in the file
                raise DataError(path, str(e)[len(f"{path}:1: ") :], line=n) from None
            if len(got) != 1:
                raise DataError(path, f"found {len(got)} trees on one line; expected one tree a line", line=n)
            # written again in evalb's spacing, labels and words as they are: "(NN a )" scores as "(NN a)"
            # instead of stopping evalb.c's scanner (metrics.evalb's notes)
            lines[n - 1] = str(got[0])
    return lines


def _finetune(task: str, opts: ParseFinetune) -> Results:
    """``spanbert finetune parse ...``."""
    if opts.sweep:
        raise SpanBertError("--sweep: found it for parse, expected none: the Appendix B grid is an encoder grid; "
                            "parse has two rates (--learning_rate for the parser, --encoder_learning_rate)")  # fmt: skip

    def run_one(targs: TrainingArguments) -> dict[str, Any]:  # opts.parser holds the family's encoder rate
        return finetune_parse(opts.model, opts.train_file, opts.validation_file, targs, opts.parser, opts.tokenizer,
                              opts.max_train_examples, opts.max_eval_examples)  # fmt: skip

    return finetune_options(opts, run_one, "f1", f"spanbert finetune {task}")


def _predict(task: str, opts: ParsePredict) -> Path | None:
    """``spanbert predict parse (--data TREES | --text SENTENCE ...) ...``: the file written (None: the
    trees went to stdout)."""
    one_of(opts, "data", "text")
    if opts.data and not opts.output:
        raise SpanBertError("--output: found none with --data, expected the file to write the trees to")
    device = start_distributed(opts.device)
    if opts.data:
        gold = read_trees(opts.data)
        sentences, sources = [t.words() for t in gold.trees], gold.sources
        tags = [t.tags() if opts.tags == "input" else None for t in gold.trees]
    else:
        sentences = [tokenize(t) for t in opts.text]
        for k, words in enumerate(sentences):
            if not words:
                raise SpanBertError(f"--text: found an empty sentence (number {k + 1}); expected words")
        sources, tags = [("--text", k + 1) for k in range(len(sentences))], [None] * len(sentences)
    model, tokenizer = load_parser(opts.model, str(device))
    if opts.data:
        warn_unseen_labels(opts.data, gold.trees, model.labels, f"the training trees of {opts.model}",
                           tags=model.tags if opts.tags == "predicted" else None)  # fmt: skip
    t0 = time.perf_counter()
    parsed = parse_sentences(model, tokenizer, sentences, tags, sources, opts.batch_size, not opts.disable_tqdm)
    seconds = time.perf_counter() - t0
    if opts.output:
        write_once(lambda: write_trees(opts.output, parsed.trees))
        print0(f"wrote {len(parsed.trees)} trees to {opts.output}")
    else:
        for t in parsed.trees:
            print0(str(t))
    eprint0(f"parsed {len(sentences)} sentences in {seconds:.2f}s ({len(sentences) / max(seconds, 1e-9):.1f} "
            f"sentences/s; decoding {parsed.decode_seconds:.2f}s)")  # fmt: skip
    if opts.data:
        print_metrics(evalb_scores(gold.trees, [str(t) for t in parsed.trees]))
    return Path(opts.output) if opts.output else None


def _evaluate(task: str, opts: ParseEvaluate) -> Results:
    """``spanbert evaluate parse --data GOLD (--predictions TREES | --model DIR)``: EVALB."""
    one_of(opts, "predictions", "model")
    gold = read_trees(opts.data)
    if opts.model:
        device = start_distributed(opts.device)
        model, tokenizer = load_parser(opts.model, str(device))
        warn_unseen_labels(opts.data, gold.trees, model.labels, f"the training trees of {opts.model}")
        parsed = parse_sentences(model, tokenizer, [t.words() for t in gold.trees], [t.tags() for t in gold.trees],
                                 gold.sources, opts.batch_size, not opts.disable_tqdm)  # fmt: skip
        lines = [str(t) for t in parsed.trees]
    else:
        lines = read_predicted_lines(opts.predictions, len(gold.trees), opts.data)
    try:
        result = evalb([str(t) for t in gold.trees], lines)
    except EvalbAbort as e:
        raise SpanBertError(f"{opts.predictions or opts.model}: {e}") from None
    errors = [r for r in result.sentences if r.status == 1]
    if errors:  # EVALB reports these on stderr and leaves them out of the scores
        shown = "; ".join(f"line {r.id}: {', '.join(r.reasons)}" for r in errors[:5])
        eprint0(f"note: {len(errors)} error sentence(s) not scored, as EVALB: {shown}")
    if opts.summary:
        eprint0(summary_text(result).rstrip("\n"))
    return Results(result.metrics(), "f1")


SPECS = {
    "parse": TaskSpec(
        "parse", "constituency parsing, Penn Treebank trees, EVALB F1 (cloze paper §6.2.2)",
        _finetune, _predict, _evaluate, options=ACTIONS, metric="f1", scores_test=True,
        data="Penn Treebank trees (.mrg files, a folder of them, or one tree a line)",
    )
}

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
