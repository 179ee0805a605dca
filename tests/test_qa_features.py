"""From QA examples to model inputs (`spanbert.tasks.qa.features`): character spans to tokens and back (a
mid-word answer maps to the piece that holds it), sliding windows with their stride, max-context flags and
labels, and every gold answer of the real dev sets recovered from its offsets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_qa import SHARED, _write, synthetic_squad, tok  # noqa: F401 - tok is a fixture

from spanbert.metrics.squad import normalize_answer
from spanbert.tasks import qa
from spanbert.tokenization import train_tokenizer


@pytest.mark.parametrize(
    "context, answer",
    [
        ("Café  naïve résumé — Zürich’s été", "résumé"),  # accents, double space, non-ASCII punctuation
        ("Café  naïve résumé — Zürich’s e\u0301te\u0301 1990s", "e\u0301te\u0301"),  # combining accents
        ("Tokens   with    many     spaces", "with    many"),
        ("Knoxville, Tennessee", "Tennessee"),
        ("scores 24–10 in the 1990s", "24–10"),
    ],
)
def test_char_span_round_trip(tok, context: str, answer: str) -> None:  # noqa: F811
    enc = tok.encode(context)
    s = context.index(answer)
    ts, te = qa.char_span_to_tokens(enc.offsets, s, s + len(answer))
    assert context[enc.offsets[ts, 0] : enc.offsets[te, 1]] == answer


def test_mid_word_answer_maps_to_the_containing_piece(tok) -> None:  # noqa: F811
    context = "Knoxville, Tennessee"
    enc = tok.encode(context)
    ts, te = qa.char_span_to_tokens(enc.offsets, 4, 9)  # "ville" inside "Knoxville"
    got = context[enc.offsets[ts, 0] : enc.offsets[te, 1]]
    assert "ville" in got and got in "Knoxville"
    assert qa.char_span_to_tokens(enc.offsets, 10, 11) is None  # a lone space covers no token


def test_windows_stride_max_context_and_labels(tok, tmp_path: Path) -> None:  # noqa: F811
    words = " ".join(f"w{i}" for i in range(60))
    ctx = f"{words} Paris is the answer here. {words}"
    d = {"data": [{"paragraphs": [{"context": ctx, "qas": [
        {"id": "a", "question": "Which city? " * 30, "answers": [{"text": "Paris", "answer_start": ctx.index("Paris")}]},
        {"id": "b", "question": "none", "answers": [], "is_impossible": True},
    ]}]}]}  # fmt: skip
    data = qa.read_squad(_write(tmp_path / "w.json", d))
    td = qa.tokenize_data(data, tok, max_query_length=8, progress=False)
    assert len(td.question_ids[0]) == 8  # query cut at max_query_length
    n = len(td.context_ids[0])
    feats = qa.make_features(data, td, tok.cls_id, tok.sep_id, max_seq_length=40, doc_stride=10, training=True)
    for ei in (0, 1):
        idx = [i for i, e in enumerate(feats.example_index) if e == ei]
        assert len(idx) > 3
        starts = [feats.doc_start[i] for i in idx]
        assert all(b - a == 10 for a, b in zip(starts, starts[1:]))  # stride between window starts
        covered = np.zeros(n, dtype=int)
        for i in idx:
            ids = feats.input_ids[i]
            q = feats.query_len[i]
            assert len(ids) <= 40 and ids[0] == tok.cls_id and ids[q + 1] == tok.sep_id and ids[-1] == tok.sep_id
            w = len(feats.max_context[i])
            assert np.array_equal(
                ids[q + 2 : q + 2 + w], td.context_ids[0][feats.doc_start[i] : feats.doc_start[i] + w]
            )
            covered[feats.doc_start[i] : feats.doc_start[i] + w] += feats.max_context[i]
        assert (covered == 1).all()  # every passage token is scored in exactly one window
    answer_tokens = tok.encode("Paris").ids
    for i in range(len(feats)):
        sp, ep = feats.start_positions[i], feats.end_positions[i]
        if feats.example_index[i] == 1:
            assert sp == ep == 0  # unanswerable -> [CLS]
        elif sp:
            assert list(feats.input_ids[i][sp : ep + 1]) == list(answer_tokens)
    labelled = [i for i in range(len(feats)) if feats.example_index[i] == 0 and feats.start_positions[i]]
    unlabelled = [i for i in range(len(feats)) if feats.example_index[i] == 0 and not feats.start_positions[i]]
    assert labelled and unlabelled  # windows without the answer point at [CLS]
    batch = qa.collate_qa([qa.QAFeatureDataset(feats)[i] for i in range(3)], tok.pad_id)
    q = feats.query_len[0]
    assert batch["token_type_ids"][0, : q + 2].sum() == 0 and batch["token_type_ids"][0, q + 2 :].eq(1).all()


# ---------------------------------------------------------------------------------------------
# real data: offsets of every gold answer


def _answer_round_trip(path: Path, tok) -> tuple[int, list[tuple[str, str, str]], list]:  # noqa: F811
    data = qa.read_mrqa(path) if path.suffix == ".gz" else qa.read_squad(path)
    td = qa.tokenize_data(data, tok, progress=False)
    spans: list[tuple[str, int, int, int]] = []  # (qid, context index, start, end)
    if data.raw is not None:
        ci = 0
        for article in data.raw["data"]:
            for p in article["paragraphs"]:
                for q in p["qas"]:
                    for a in q["answers"]:
                        spans.append((q["id"], ci, a["answer_start"], a["answer_start"] + len(a["text"])))
                ci += 1
    else:
        spans = [(e.qid, e.context_index, e.answer_start, e.answer_end) for e in data.examples]
    failures, inexact = [], []
    for qid, ci, s, e in spans:
        context, off = data.contexts[ci], td.context_offsets[ci]
        span = qa.char_span_to_tokens(off, s, e)
        assert span is not None, (qid, context[s:e])
        got = context[off[span[0], 0] : off[span[1], 1]]
        # exact offsets: the span is precisely the tokens that overlap the gold characters [s, e)
        overlap = np.flatnonzero((off[:, 0] < e) & (off[:, 1] > s))
        if list(overlap) != list(range(span[0], span[1] + 1)):
            inexact.append((qid, context[s:e], got))
        if normalize_answer(got) != normalize_answer(context[s:e]):
            failures.append((qid, context[s:e], got))
    return len(spans), failures, inexact


@pytest.fixture(scope="module")
def dev_tok():
    path = SHARED / "squad/dev-v1.1.json"
    if not path.is_file():
        pytest.skip(f"SQuAD data not found at {path}")
    v1 = qa.read_squad(path)
    # an 8k cased WordPiece trained on the dev contexts (no pre-trained vocabulary is shipped)
    return train_tokenizer(None, 8000, texts=v1.contexts + [e.question for e in v1.examples], show_progress=False)


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["squad/dev-v1.1.json", "squad/dev-v2.0.rebuilt.json", "mrqa/dev/SQuAD.jsonl.gz"])
def test_offsets_round_trip_every_dev_answer(name: str, dev_tok) -> None:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"data not found at {path}")
    n, failures, inexact = _answer_round_trip(path, dev_tok)
    assert not inexact, inexact[:10]
    # Every failure is an answer whose boundary lies strictly inside a WordPiece (e.g. "Japan" in the
    # single token "Japanese"): no token span can give it back. Listed here; share asserted below.
    for qid, gold, got in failures:
        print(f"{qid}\t{gold!r}\t{got!r}")
    rate = 1 - len(failures) / n
    print(f"{name}: {n} answers, {len(failures)} not recovered, {100 * rate:.3f}% recovered")
    assert rate >= 0.998, failures
