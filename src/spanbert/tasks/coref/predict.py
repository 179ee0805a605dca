"""Resolving raw text or documents with a fine-tuned model: a light sentence splitter and tokenizer,
`CorefPredictor`, `resolve_text`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from spanbert import threads
from spanbert.distributed import is_main, resolve_device
from spanbert.tasks.coref.data import CorefDocument, Span
from spanbert.tasks.coref.features import CorefFeatures, featurize, make_batch
from spanbert.tasks.coref.folder import load_coref_model
from spanbert.tasks.coref.model import CorefModel, decode_clusters
from spanbert.utils import progress_bar

# =============================================================================================
# Prediction


_WORD = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")
_SENTENCE_END = {".", "!", "?"}
_ABBREVIATIONS = {"Mr", "Mrs", "Ms", "Dr", "St", "Prof", "Sr", "Jr", "Mt", "Capt", "Col", "Gen", "Lt", "Rev", "vs"}


def split_text(text: str) -> tuple[list[list[str]], list[tuple[int, int]]]:
    """Raw text -> sentences of words and each word's character [start, end): words are runs of
    letters/digits (with inner hyphens and apostrophes) or single punctuation marks; a sentence ends
    after '.', '!' or '?' (not the '.' of a title such as "Mr.")."""
    sentences: list[list[str]] = [[]]
    offsets = []
    for m in _WORD.finditer(text):
        previous = sentences[-1][-1] if sentences[-1] else ""
        sentences[-1].append(m.group())
        offsets.append((m.start(), m.end()))
        if m.group() in _SENTENCE_END and not (m.group() == "." and previous in _ABBREVIATIONS):
            sentences.append([])
    return [s for s in sentences if s], offsets


class CorefPredictor:
    """A fine-tuned coreference model ready to resolve documents or raw text.

    >>> predictor = CorefPredictor.from_pretrained("runs/coref")          # doctest: +SKIP
    >>> predictor.predict_text("Alice said she would come.")               # doctest: +SKIP
    [[{'start': 0, 'end': 5, 'text': 'Alice'}, {'start': 11, 'end': 14, 'text': 'she'}]]
    """

    def __init__(self, model: CorefModel, tokenizer: Any, device: str | torch.device = "auto"):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.model.to(self.device).eval()

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str = "auto") -> CorefPredictor:
        model, tokenizer = load_coref_model(model_dir)
        return cls(model, tokenizer, device)

    def predict_features(self, f: CorefFeatures) -> list[list[Span]]:
        """Clusters (word spans) of one featurized document; all its segments are used at once."""
        threads.tick()  # a document is the unit of work: the thread count follows the load between them
        tok = self.tokenizer
        if f.num_subtokens == 0:
            return []
        batch = make_batch(f, 0, len(f.segments), self.model.config.max_span_width, tok.pad_id, tok.cls_id, tok.sep_id)
        batch = {k: v.to(self.device) for k, v in batch.items() if not k.startswith("gold_")}
        with torch.no_grad():
            out = self.model(**batch)
        return decode_clusters(out, f.word_map, self.model.predicts_singletons)

    def predict_documents(self, docs: Sequence[CorefDocument], progress: bool = True) -> list[list[list[Span]]]:
        out = []
        for doc in progress_bar(docs, desc="predict", unit="doc", disable=not progress or not is_main(), leave=False):
            out.append(self.predict_features(featurize(doc, self.tokenizer, self.model.config.max_seq_length)))
        return out

    def predict_text(self, text: str) -> list[list[dict[str, Any]]]:
        """Clusters of mentions in raw text, each mention ``{"start", "end", "text"}`` with character
        offsets into ``text`` (end exclusive)."""
        sentences, offsets = split_text(text)
        if not sentences:
            return []
        doc = CorefDocument(key="text", part=0, sentences=sentences)
        clusters = self.predict_documents([doc], progress=False)[0]
        out = []
        for cluster in clusters:
            mentions = []
            for s, e in cluster:
                a, b = offsets[s][0], offsets[e][1]
                mentions.append({"start": a, "end": b, "text": text[a:b]})
            out.append(mentions)
        return out


def resolve_text(text: str, model_dir: str | Path) -> list[list[dict[str, Any]]]:
    """Raw text in, clusters with character offsets out (loads the model each call; keep a
    `CorefPredictor` for repeated use)."""
    return CorefPredictor.from_pretrained(model_dir).predict_text(text)


