"""CoNLL-2003 named-entity data (`spanbert.tasks.conll`): the reader (the published counts, malformed lines named,
documents counted at -DOCSTART-), word-level features (labels on first sub-tokens only, long sentences cut at
word boundaries, a sentence inside its document's context) and decoding back to one tag a word. Fine-tuning and
the commands are tested in test_ner.py."""

from __future__ import annotations

import pytest
from test_ner import CONLL, _doc, tiny_model  # noqa: F401 - tiny_model is a fixture

from spanbert.errors import DataError
from spanbert.metrics.classification import conll_chunks
from spanbert.tasks.conll import NerSentence, decode, label_list, ner_features, read_conll


@pytest.mark.realdata
@pytest.mark.parametrize(
    "split, sentences, entities", [("train", 14041, 23499), ("valid", 3250, 5942), ("test", 3453, 5648)]
)
def test_conll2003_counts_match_the_published_statistics(split, sentences, entities):
    path = CONLL / f"{split}.txt"
    if not path.exists():
        pytest.skip(f"{path} not present (CoNLL-2003 of ../shared/data)")
    data = read_conll(path)
    assert len(data) == sentences
    assert sum(len(conll_chunks(s.tags)) for s in data) == entities
    assert label_list(data) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]


def test_malformed_conll_names_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP X-PER\n")
    with pytest.raises(DataError, match=r"bad\.txt:4: found tag 'X-PER' .*; expected O or B-/I-/E-/S-TYPE"):
        read_conll(f)
    f.write_text("EU NNP B-NP B-ORG\nrejects\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: found 'rejects': one column"):
        read_conll(f)
    # words without tags are fine for prediction input, but not mixed with tagged ones
    f.write_text("EU\nrejects\n\nGerman\n")
    assert [s.words for s in read_conll(f, require_tags=False)] == [["EU", "rejects"], ["German"]]


def test_documents_are_counted_at_docstart_lines(tmp_path):
    f = tmp_path / "docs.txt"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n\nsaid VBD B-VP O\n\n-DOCSTART- -X- -X- O\n\n"
                 "Paris NNP B-NP B-LOC\n")  # fmt: skip
    assert [s.document for s in read_conll(f)] == [0, 0, 1]
    f.write_text("EU NNP B-NP B-ORG\n\nsaid VBD B-VP O\n")  # no -DOCSTART-: one document
    assert [s.document for s in read_conll(f)] == [0, 0]


def test_only_first_sub_tokens_carry_labels_and_long_sentences_are_split(tiny_model):  # noqa: F811
    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    s = NerSentence(["Blackburnsmith", "visited", "Paris"], ["B-PER", "O", "B-LOC"], 1)
    label2id = {"O": 0, "B-PER": 1, "B-LOC": 2}
    (f,) = ner_features([s], tok, label2id)
    pieces = len(tok.encode_words(["Blackburnsmith"]).ids)
    assert pieces > 1
    assert f["labels"][0] == -100 and f["labels"][-1] == -100  # [CLS], [SEP]
    assert f["labels"][1] == 1 and list(f["labels"][2 : 1 + pieces]) == [-100] * (pieces - 1)
    assert list(f["first_token"]) == [1, 1 + pieces, 2 + pieces]
    # a sentence longer than max_seq_length is cut at word boundaries; every word gets a prediction
    long = NerSentence(["Paris"] * 40, ["B-LOC"] * 40, 1)
    feats = ner_features([long], tok, label2id, max_seq_length=16)
    assert all(len(x["input_ids"]) <= 16 for x in feats) and sum(len(x["first_token"]) for x in feats) == 40
    import numpy as np

    logits = [np.eye(3)[np.full(len(x["input_ids"]), 2)] for x in feats]  # every token says B-LOC
    assert decode([long], feats, logits, ["O", "B-PER", "B-LOC"]) == [["B-LOC"] * 40]


def test_document_context_labels_only_the_sentences_own_words(tiny_model):  # noqa: F811
    import numpy as np

    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    label2id = {"O": 0, "B-PER": 1}
    doc = _doc([["said", "in", "the", "Paris"], ["John", "Smith", "visited"], ["Berlin", "today", "."]])
    doc[1].tags = ["B-PER", "O", "O"]
    alone = ner_features(doc, tok, label2id, max_seq_length=64)
    ctx = ner_features(doc, tok, label2id, max_seq_length=64, document_context=True)
    stream = [t for s in doc for t in tok.encode_words(s.words).ids.tolist()]
    for a, c in zip(alone, ctx):
        # the same labels, in the same order, on the sentence's own first sub-tokens only
        own = c["labels"] != -100
        assert list(np.flatnonzero(own)) == list(c["first_token"])
        assert list(c["labels"][own]) == list(a["labels"][a["labels"] != -100])
        # [CLS] + a window of the document's tokens + [SEP], the sentence's tokens inside it
        inner = c["input_ids"][1:-1].tolist()
        assert c["input_ids"][0] == tok.cls_id and c["input_ids"][-1] == tok.sep_id
        assert any(stream[i : i + len(inner)] == inner for i in range(len(stream) - len(inner) + 1))
        assert inner[c["first_token"][0] - 1 :][: len(a["input_ids"]) - 2] == a["input_ids"][1:-1].tolist()
    # the whole document fits: every sentence sees all of it (edges: the first has no left context)
    assert all(len(c["input_ids"]) == len(stream) + 2 for c in ctx)
    assert ctx[0]["first_token"][0] == 1 and ctx[-1]["first_token"][-1] < len(stream) + 1
    # a short window is centred: as many tokens before as after (sentence 1 is mid-document)
    (mid,) = ner_features(doc[:3], tok, label2id, max_seq_length=12, document_context=True)[1:2]
    n_own = len(alone[1]["input_ids"]) - 2
    left = int(mid["first_token"][0]) - 1
    right = len(mid["input_ids"]) - 2 - n_own - left
    assert len(mid["input_ids"]) == 12 and abs(left - right) <= 1
    # at a document edge the room goes to the open side
    (first,) = ner_features(doc, tok, label2id, max_seq_length=12, document_context=True)[:1]
    assert first["first_token"][0] == 1 and len(first["input_ids"]) == 12


def test_document_context_stays_inside_the_document(tiny_model):  # noqa: F811
    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    one = _doc([["John", "Smith"]], document=0) + _doc([["Berlin", "today"]], document=1)
    feats = ner_features(one, tok, {"O": 0}, max_seq_length=64, document_context=True)
    alone = ner_features(one, tok, {"O": 0}, max_seq_length=64)
    # a document of one sentence has no context: the same input as without the option
    for c, a in zip(feats, alone):
        assert c["input_ids"].tolist() == a["input_ids"].tolist()
