"""Coreference: CoNLL-2012 reader/writer, segments, non-crossing pruning, model, CLI end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spanbert.config import model_config
from spanbert.errors import DataError
from spanbert.tasks.coref import (
    CorefConfig,
    CorefDataset,
    CorefDocument,
    CorefModel,
    candidate_spans,
    coref_column,
    crossing,
    decode_clusters,
    evaluate_files,
    featurize,
    genre_of,
    prune_non_crossing,
    read_conll,
    split_into_segments,
    split_text,
    write_conll,
)

LITBANK = Path(__file__).parents[1] / "../shared/data/litbank_coref"
needs_litbank = pytest.mark.skipif(not (LITBANK / "conll").is_dir(), reason=f"LitBank not found at {LITBANK}")

SAMPLE = """\
#begin document (bc/cctv/00/cctv_0001); part 000
bc/cctv/00/cctv_0001 0 0 Alice NNP * - - - Speaker#1 * (0)
bc/cctv/00/cctv_0001 0 1 met VBD * - - - Speaker#1 * -
bc/cctv/00/cctv_0001 0 2 her PRP$ * - - - Speaker#1 * (1|(0)
bc/cctv/00/cctv_0001 0 3 sister NN * - - - Speaker#1 * 1)
bc/cctv/00/cctv_0001 0 4 . . * - - - Speaker#1 * -

bc/cctv/00/cctv_0001 0 0 She PRP * - - - Speaker#2 * (1)
bc/cctv/00/cctv_0001 0 1 smiled VBD * - - - Speaker#2 * -
#end document
"""


def test_reader_parses_columns_and_clusters(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(SAMPLE)
    (doc,) = read_conll(path)
    assert (doc.key, doc.part, doc.genre) == ("bc/cctv/00/cctv_0001", 0, "bc")
    assert doc.sentences == [["Alice", "met", "her", "sister", "."], ["She", "smiled"]]
    assert doc.speakers[1] == ["Speaker#2", "Speaker#2"]
    assert sorted(sorted(c) for c in doc.clusters) == [[(0, 0), (2, 2)], [(2, 3), (5, 5)]]
    assert genre_of("1023_bleak_house_brat") == "other"


@pytest.mark.parametrize(
    "bad, line, message",
    [
        ("x 0 0 Alice NNP * - - - - * (0\n", 2, "never closed"),
        ("x 0 0 Alice NNP * - - - - * 0)\n", 2, "never opened"),
        ("x 0 0 Alice NNP * - - - - * (a)\n", 2, "found coreference entry"),
        ("x 0 0 Alice\n", 2, "columns"),
    ],
)
def test_reader_errors_name_file_and_line(tmp_path, bad, line, message):
    path = tmp_path / "bad.conll"
    path.write_text("#begin document (x); part 0\n" + bad + "#end document\n")
    with pytest.raises(DataError, match=message) as e:
        read_conll(path)
    assert f"bad.conll:{line}" in str(e.value)


def test_reader_errors_outside_document_and_truncated(tmp_path):
    path = tmp_path / "t.conll"
    path.write_text("x 0 0 Alice NNP * - - - - * -\n")
    with pytest.raises(DataError, match=r"t.conll:1: found a word line outside a document"):
        read_conll(path)
    path.write_text("#begin document (x); part 0\nx 0 0 Alice NNP * - - - - * -\n")
    with pytest.raises(DataError, match="end of the file inside document"):
        read_conll(path)


def test_writer_orders_entries_so_adjacent_mentions_round_trip(tmp_path):
    # one entity with mentions (0,1) and (1,2) touching on word 1, nested (1,1), and a one-word mention
    clusters = [[(0, 1), (1, 2), (1, 1)], [(3, 3)]]
    assert coref_column(4, clusters) == ["(0", "0)|(0)|(0", "0)", "(1)"]
    doc = CorefDocument("k", 0, [["a", "b", "c", "d"]], clusters=clusters)
    write_conll(tmp_path / "o.conll", [doc])
    (back,) = read_conll(tmp_path / "o.conll")
    assert sorted(map(sorted, back.clusters)) == sorted(map(sorted, clusters))


@needs_litbank
@pytest.mark.realdata
def test_litbank_round_trip_every_file(tmp_path):
    files = sorted((LITBANK / "conll").glob("*.conll.gz"))
    assert len(files) == 100
    docs = [d for f in files for d in read_conll(f)]
    # SOURCE.md: 100 documents, 210,532 tokens, 29,103 mentions, 7,927 entities
    assert len(docs) == 100
    assert sum(d.num_words for d in docs) == 210_532
    assert sum(len(c) for d in docs for c in d.clusters) == 29_103
    assert sum(len(d.clusters) for d in docs) == 7_927
    out = tmp_path / "all.conll"
    write_conll(out, docs)
    back = read_conll(out)
    assert [d.doc_id for d in back] == [d.doc_id for d in docs]
    for a, b in zip(docs, back):
        assert a.sentences == b.sentences
        assert sorted(map(sorted, a.clusters)) == sorted(map(sorted, b.clusters)), a.key
    # every id of the ten-fold splits names a file
    names = {f.name[: -len(".conll.gz")] for f in files}
    for ids in (LITBANK / "tenfold_splits").glob("*/*.ids"):
        for line in ids.read_text().split():
            assert line[: -len(".tsv")] in names


def test_evaluate_files_matches_documents_and_rejects_mismatches(tmp_path):
    from spanbert.errors import SpanBertError

    gold = tmp_path / "gold.conll"
    gold.write_text(SAMPLE)
    (doc,) = read_conll(gold)
    pred = tmp_path / "pred.conll"
    write_conll(pred, [doc], [[[(0, 0), (2, 2)]]])  # finds one of the two entities
    scores = evaluate_files(gold, pred)
    assert scores["documents"] == 1
    assert scores["muc_r"] == pytest.approx(50.0) and scores["muc_p"] == pytest.approx(100.0)
    other = CorefDocument("other", 0, [["x"]])
    write_conll(pred, [other])
    with pytest.raises(SpanBertError, match="found no prediction for 1 gold document"):
        evaluate_files(gold, pred)


def test_split_text_words_sentences_and_offsets():
    text = "Mr. Darcy didn't come. She waited—then left!  Fine."
    sentences, offsets = split_text(text)
    assert sentences == [
        ["Mr", ".", "Darcy", "didn't", "come", "."],
        ["She", "waited", "—", "then", "left", "!"],
        ["Fine", "."],
    ]
    words = [w for s in sentences for w in s]
    assert [text[a:b] for a, b in offsets] == words


# ---------------------------------------------------------------------------------------------
# Segments and features


def test_segments_end_at_sentence_then_word_ends():
    sentence_end = np.array([0, 0, 1, 0, 0, 0, 0, 1, 0, 1], bool)
    word_end = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 1], bool)
    segs = split_into_segments(10, 4, sentence_end, word_end)
    assert segs == [(0, 3), (3, 6), (6, 10)]  # [3, 7) holds no sentence end: cut after word end 5
    assert split_into_segments(3, 2, np.zeros(3, bool), np.zeros(3, bool)) == [(0, 2), (2, 3)]  # one long word


class CharTokenizer:
    """Stand-in tokenizer: every word is split into 2-character pieces (a word-piece-like map)."""

    pad_id, unk_id, cls_id, sep_id, mask_id = 0, 1, 2, 3, 4
    vocab_size = 200

    def encode_words(self, words):
        ids, word_ids = [], []
        for w, word in enumerate(words):
            for i in range(0, len(word), 2):
                ids.append(5 + sum(map(ord, word[i : i + 2])) % 190)
                word_ids.append(w)

        class E:
            pass

        e = E()
        e.ids, e.word_ids = np.array(ids), np.array(word_ids)
        return e


def toy_doc(n_sentences=6) -> CorefDocument:
    sentences = [["Mary", "saw", "the", "old", "fisherman", "."], ["She", "waved", "to", "him", "."]] * (
        n_sentences // 2
    )
    n = len(sentences[0]) + len(sentences[1])
    clusters = [[(0, 0)] + [(6 + i * n, 6 + i * n) for i in range(n_sentences // 2)]]
    clusters += [[(2, 4)] + [(9 + i * n, 9 + i * n) for i in range(n_sentences // 2)]]
    return CorefDocument("toy", 0, sentences, clusters=clusters)


def test_featurize_segments_and_gold_spans():
    doc = toy_doc()
    f = featurize(doc, CharTokenizer(), max_seq_length=12)
    assert all(len(s) <= 10 for s in f.segments)
    assert sum(len(s) for s in f.segments) == f.num_subtokens == len(f.word_map)
    # gold sub-token spans map back to the gold word spans
    back = sorted(zip(f.word_map[f.gold_starts].tolist(), f.word_map[f.gold_ends].tolist()))
    assert back == sorted(m for c in doc.clusters for m in c)
    starts, ends = candidate_spans(f.sentence_map, f.word_map, 30)
    assert (f.sentence_map[starts] == f.sentence_map[ends]).all()
    assert (ends - starts < 30).all()
    gold = set(zip(f.gold_starts.tolist(), f.gold_ends.tolist()))
    assert gold <= set(zip(starts.tolist(), ends.tolist()))


def test_training_cuts_a_random_run_of_segments():
    f = featurize(toy_doc(12), CharTokenizer(), max_seq_length=12)
    ds = CorefDataset([f], 30, 0, 2, 3, max_training_segments=2, seed=1)
    batches = []
    for epoch in range(6):
        ds.set_epoch(epoch)
        batches.append(ds[0])
    assert all(b["input_ids"].shape[0] == 2 for b in batches)
    assert len({tuple(b["input_ids"][0].tolist()) for b in batches}) > 1  # the run changes with the epoch
    ds.set_epoch(0)
    assert torch.equal(ds[0]["input_ids"], batches[0]["input_ids"])  # and is reproducible
    for b in batches:
        n = b["token_index"].numel()
        assert ((b["gold_starts"] >= 0) & (b["gold_ends"] < n)).all()


# ---------------------------------------------------------------------------------------------
# Non-crossing pruning


def greedy_reference(scores, starts, ends, k):
    """The reference C++ op as a plain loop: best first, skip spans crossing a chosen one, stop at k."""
    chosen = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if len(chosen) == k:
            break
        if not any(crossing(starts[i], ends[i], starts[j], ends[j]) for j in chosen):
            chosen.append(i)
    return sorted(chosen, key=lambda i: (starts[i], ends[i]))


@st.composite
def span_sets(draw):
    spans = draw(
        st.lists(st.tuples(st.integers(0, 25), st.integers(0, 8)), min_size=1, max_size=60, unique_by=lambda t: t)
    )
    spans = sorted({(s, s + w) for s, w in spans})
    scores = draw(
        st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=len(spans), max_size=len(spans), unique=True)
    )
    k = draw(st.integers(1, len(spans)))
    chunk = draw(st.sampled_from([None, 1, 3, 8]))
    return spans, scores, k, chunk


@settings(max_examples=150, deadline=None)
@given(span_sets())
def test_pruning_keeps_no_crossing_pair_and_is_the_greedy_choice(case):
    spans, scores, k, chunk = case
    starts = torch.tensor([s for s, _ in spans])
    ends = torch.tensor([e for _, e in spans])
    kept = prune_non_crossing(torch.tensor(scores), starts, ends, k, chunk=chunk).tolist()
    for a in kept:
        for b in kept:
            assert not crossing(spans[a][0], spans[a][1], spans[b][0], spans[b][1])
    assert kept == greedy_reference(scores, starts.tolist(), ends.tolist(), k)
    assert len(kept) <= k
    assert [spans[i] for i in kept] == sorted(spans[i] for i in kept)


# ---------------------------------------------------------------------------------------------
# Model


def tiny_model(**overrides) -> CorefModel:
    torch.manual_seed(0)
    cfg = CorefConfig(
        **{
            "max_seq_length": 12,
            "ffnn_size": 16,
            "feature_size": 4,
            "max_top_antecedents": 5,
            "dropout": 0.0,
            **overrides,
        }
    )
    return CorefModel(
        model_config("tiny", vocab_size=200, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), cfg
    )


def toy_batch(model):
    f = featurize(toy_doc(), CharTokenizer(), model.config.max_seq_length)
    return f, CorefDataset([f], model.config.max_span_width, 0, 2, 3)[0]


def test_head_attention_prefix_sums_match_explicit_softmax():
    model = tiny_model()
    x = torch.randn(20, 64)
    starts = torch.tensor([0, 3, 5, 19, 7])
    ends = torch.tensor([0, 9, 5, 19, 18])
    g = model.span_embeddings(x, starts, ends)
    alpha = model.head_attention(x).squeeze(-1)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        w = alpha[s : e + 1].softmax(0)
        assert torch.allclose(g[i, 128:192], (w[:, None] * x[s : e + 1]).sum(0), atol=1e-5)
        assert torch.equal(g[i, :64], x[s]) and torch.equal(g[i, 64:128], x[e])


@pytest.mark.parametrize("gap", [0.0, 30.0, 40.0, 100.0, 1000.0])
def test_head_attention_is_exact_at_any_logit_gap(gap):
    """Prefix sums of exp(α - max α) lost 0.1 % at a 30-logit gap and returned inf at 40: compare with
    a direct per-span softmax where a few tokens sit ``gap`` logits above (or below) the rest."""
    model = tiny_model()
    with torch.no_grad():  # α_t = x_t[0]: the gap is set through the first feature
        model.head_attention.weight.zero_()
        model.head_attention.weight[0, 0] = 1.0
        model.head_attention.bias.zero_()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 64, generator=gen, dtype=torch.float64)
    x[:, 0] = torch.randn(40, generator=gen, dtype=torch.float64)
    x[[2, 17, 30], 0] += gap  # high tokens before, inside and after the spans below
    x[[25, 26], 0] -= gap  # and a low run
    x = x.float().requires_grad_(True)
    spans = [(0, 0), (3, 9), (3, 16), (15, 20), (18, 29), (25, 26), (24, 27), (31, 39), (30, 39), (2, 2)]
    starts = torch.tensor([s for s, _ in spans])
    ends = torch.tensor([e for _, e in spans])
    g = model.span_embeddings(x, starts, ends)
    alpha = x.double()[:, 0]  # the head-attention logits, exactly
    for i, (s, e) in enumerate(spans):
        ref = (alpha[s : e + 1].softmax(0)[:, None] * x.double()[s : e + 1]).sum(0)
        assert torch.allclose(g[i, 128:192].double(), ref, rtol=1e-5, atol=1e-6), (gap, s, e)
    table = model.span_width_embeddings.weight
    fast = model.mention_scores(x, starts, ends, table)
    direct = model.mention_scorer(model.span_embeddings(x, starts, ends, table)).squeeze(-1)
    assert torch.allclose(fast, direct, atol=1e-5)
    fast.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(model.head_attention.weight.grad).all()


def test_decomposed_mention_scores_equal_the_ffnn_on_span_embeddings():
    model = tiny_model()
    x = torch.randn(30, 64)
    starts = torch.tensor([0, 3, 5, 29, 7, 10])
    ends = torch.tensor([0, 9, 5, 29, 18, 28])
    table = model.span_width_embeddings.weight
    direct = model.mention_scorer(model.span_embeddings(x, starts, ends, table)).squeeze(-1)
    assert torch.allclose(model.mention_scores(x, starts, ends, table), direct, atol=1e-5)


def test_forward_shapes_loss_and_gradients():
    model = tiny_model(singletons="true")
    f, batch = toy_batch(model)
    out = model(**batch)
    k, K1 = out["antecedent_scores"].shape
    assert out["antecedents"].shape == (k, K1 - 1) and out["top_starts"].shape == (k,)
    assert k == int(f.num_subtokens * 0.4)
    assert (out["antecedent_scores"][:, 0] == 0).all()  # dummy antecedent
    assert torch.isfinite(out["loss"]) and out["loss"] > 0
    out["loss"].backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.pair_scorer[0].weight.grad.abs().sum() > 0
    assert model.refine_gate.weight.grad.abs().sum() > 0  # the higher-order round is in the graph
    # antecedents always come earlier in the (start, end) order of the kept spans
    ante, valid = out["antecedents"], out["antecedent_scores"][:, 1:] > -1e3
    assert (ante[valid] < torch.arange(k)[:, None].expand_as(ante)[valid]).all()


@pytest.mark.parametrize("depth, singletons", [(1, "false"), (1, "true"), (2, "false"), (2, "true")])
def test_every_parameter_gets_a_gradient(depth, singletons):
    """DDP stops on a parameter outside the graph: with one inference round the refinement gate is
    not built at all, and every other parameter takes part in the loss."""
    model = tiny_model(coref_depth=depth, singletons=singletons)
    assert (model.refine_gate is None) == (depth == 1)
    _, batch = toy_batch(model)
    model(**batch)["loss"].backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


def test_gradient_checkpointing_gives_the_same_loss():
    f, batch = toy_batch(tiny_model())
    plain = tiny_model()(**batch)["loss"]
    ckpt_model = tiny_model(gradient_checkpointing=True)
    ckpt_model.train()
    ckpt = ckpt_model(**batch)["loss"]
    assert torch.allclose(plain, ckpt)
    ckpt.backward()


def test_decode_links_antecedents_into_clusters():
    out = {
        "top_starts": torch.tensor([0, 2, 4, 6]),
        "top_ends": torch.tensor([0, 3, 4, 6]),
        "top_mention_scores": torch.tensor([1.0, 1.0, 1.0, -1.0]),
        "antecedents": torch.tensor([[0, 0], [0, 0], [0, 1], [2, 1]]),
        "antecedent_scores": torch.tensor([[0, -1e4, -1e4], [0, -1.0, -1e4], [0, -2.0, 3.0], [0, -1.0, -1.0]]),
    }
    word_map = np.arange(8) // 2  # two sub-tokens per word
    assert decode_clusters(out, word_map, singletons=False) == [[(1, 1), (2, 2)]]
    assert decode_clusters(out, word_map, singletons=True) == [[(0, 0)], [(1, 1), (2, 2)]]


# ---------------------------------------------------------------------------------------------
# End to end on LitBank: a tiny model overfits two documents; CLI finetune / predict / evaluate


def cut(doc: CorefDocument, n_words: int) -> CorefDocument:
    sentences, speakers, total = [], [], 0
    for s, sp in zip(doc.sentences, doc.speakers):
        if total + len(s) > n_words:
            break
        sentences.append(s)
        speakers.append(sp)
        total += len(s)
    clusters = [[m for m in c if m[1] < total] for c in doc.clusters]
    return CorefDocument(doc.key, doc.part, sentences, speakers, [c for c in clusters if c])


@needs_litbank
@pytest.mark.realdata
@pytest.mark.slow
def test_tiny_model_overfits_two_litbank_documents_via_cli(tmp_path, capsys):
    from spanbert.cli import main
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is faster, and CI shares the cores
    try:
        files = sorted((LITBANK / "conll").glob("*.conll.gz"))[:2]
        docs = [cut(d, 150) for f in files for d in read_conll(f)]
        data = tmp_path / "two.conll"
        write_conll(data, docs)
        tok = train_tokenizer(None, vocab_size=400, texts=[" ".join(d.words) for d in docs], show_progress=False)
        encoder = Encoder(model_config("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0), add_pooling_layer=False)  # fmt: skip
        encoder.save_pretrained(tmp_path / "enc", tokenizer=tok)
        out_dir = tmp_path / "coref"
        rc = main([
            "finetune", "coref", "--model", str(tmp_path / "enc"), "--train", str(data), "--dev", str(data),
            "--output_dir", str(out_dir), "--max_seq_length", "128", "--ffnn_size", "64", "--feature_size", "8",
            "--dropout", "0", "--max_top_antecedents", "30", "--learning_rate", "2e-3", "--encoder_learning_rate",
            "2e-3", "--max_steps", "120", "--warmup_steps", "0", "--lr_scheduler_type", "constant",
            "--eval_steps", "60",
            "--report_to", "none", "--disable_tqdm", "--save_steps", "0", "--logging_steps", "1000",
        ])  # fmt: skip
        assert rc == 0
        summary = json.loads((out_dir / "dev_results.json").read_text())
        assert summary["conll_f1"] >= 90, summary

        capsys.readouterr()
        pred = tmp_path / "pred.conll"
        assert main(["predict", "coref", "--model", str(out_dir), "--data", str(data), "--output", str(pred)]) == 0
        capsys.readouterr()
        assert main(["evaluate", "coref", "--gold", str(data), "--predictions", str(pred)]) == 0
        scores = json.loads(capsys.readouterr().out)
        assert scores["conll_f1"] == pytest.approx(summary["conll_f1"])
        assert scores["documents"] == 2

        text = " ".join(docs[0].words[:60])
        assert main(["predict", "coref", "--model", str(out_dir), "--text", text]) == 0
        clusters = json.loads(capsys.readouterr().out)["clusters"]
        assert clusters, "the overfit model finds the first document's entities in its raw text"
        for cluster in clusters:
            for m in cluster:
                assert text[m["start"] : m["end"]] == m["text"]
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# Seeds, existing output folders, eval mode, one writer under torchrun


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny encoder with its tokenizer and a small CoNLL file (three copies of SAMPLE)."""
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("coref_tiny")
    data = root / "train.conll"
    data.write_text("".join(SAMPLE.replace("cctv_0001", f"cctv_000{i}") for i in range(3)))
    docs = read_conll(data)
    tok = train_tokenizer(None, vocab_size=120, texts=[" ".join(d.words) for d in docs] * 20, show_progress=False)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False).save_pretrained(
        root / "enc", tokenizer=tok
    )
    return root


def finetune_argv(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "finetune", "coref", "--model", str(root / "enc"), "--train", str(root / "train.conll"),
        "--dev", str(root / "train.conll"), "--output_dir", str(out), "--max_seq_length", "16",
        "--ffnn_size", "8", "--feature_size", "4", "--max_top_antecedents", "4", "--max_steps", "3",
        "--learning_rate", "1e-2", "--encoder_learning_rate", "1e-2", "--report_to", "none",
        "--save_steps", "0", "--device", "cpu", "--disable_tqdm", *extra,
    ]  # fmt: skip


def test_seed_fixes_heads_dropout_and_order(tiny_run, tmp_path, capsys):
    """--seed fixes the head initialisation, dropout and the document order: two runs with one seed
    give identical weights, another seed different ones. --disable_tqdm shows no bar."""
    from safetensors.torch import load_file

    from spanbert.cli import main

    weights = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        assert main(finetune_argv(tiny_run, tmp_path / name, "--seed", seed, "--dropout", "0.5")) == 0
        weights[name] = load_file(tmp_path / name / "model.safetensors")
    err = capsys.readouterr().err
    assert "%|" not in err and "doc/s" not in err, err  # no progress bar of any stage
    assert weights["a"].keys() == weights["b"].keys()
    for k in weights["a"]:
        assert torch.equal(weights["a"][k], weights["b"][k]), k
    heads = [k for k in weights["a"] if not k.startswith("bert.")]
    assert any(not torch.equal(weights["a"][k], weights["c"][k]) for k in heads)


def test_existing_output_dir_is_refused_before_any_work(tiny_run, tmp_path, cli_error):
    from spanbert.folders import claim_manifest, record

    out = tmp_path / "run"
    claim_manifest(out, "run", "spanbert finetune coref")  # an earlier run: its manifest lists its model
    record(out / "config.json")
    (out / "config.json").write_text("{}")
    cli_error(finetune_argv(tiny_run, out), names=str(out), contains="--overwrite_output_dir", out=out)


def test_loaders_return_eval_mode(tiny_run, tmp_path):
    from spanbert.tasks.coref import CorefPredictor, load_coref_model, save_coref_model
    from spanbert.tokenization import Tokenizer

    model = tiny_model(coref_depth=1)
    model.train()
    save_coref_model(model, tmp_path / "m", Tokenizer.from_dir(tiny_run / "enc"))
    loaded, _ = load_coref_model(tmp_path / "m")
    assert not loaded.training and not any(m.training for m in loaded.modules())
    assert loaded.refine_gate is None
    assert not CorefPredictor.from_pretrained(tmp_path / "m", device="cpu").model.training


DDP_SCRIPT = """
import json, os, sys
from spanbert.tasks.coref import CorefConfig, finetune_coref
from spanbert.training_args import TrainingArguments

root, out = sys.argv[1], sys.argv[2]
targs = TrainingArguments(
    output_dir=out + "/model", max_steps=4, learning_rate=1e-2, per_device_train_batch_size=1,
    eval_steps=2, save_steps=0, report_to="none", disable_tqdm=True, device="cpu", seed=3,
    metric_for_best_model="conll_f1",
)
config = CorefConfig(max_seq_length=16, ffnn_size=8, feature_size=4, max_top_antecedents=4,
                     encoder_learning_rate=1e-2, coref_depth=int(sys.argv[3]))
summary = finetune_coref(root + "/enc", root + "/train.conll", root + "/train.conll", targs, config)
with open(f"{out}/rank{os.environ['RANK']}.json", "w") as f:
    json.dump(summary, f)
"""


@pytest.mark.slow
@pytest.mark.parametrize("depth", [1, 2])
def test_two_processes_write_one_model_and_agree_on_dev(tiny_run, tmp_path, depth):
    """torchrun --nproc_per_node 2 (gloo): coref_depth 1 must not trip DDP's unused-parameter check,
    rank 0 alone writes the model, and the dev documents, split across the ranks and gathered,
    give the same scores on both ranks (also at the mid-training evaluation) and select the same step."""
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           str(tiny_run), str(tmp_path), str(depth)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    scores = [{k: v for k, v in s.items() if k.endswith(("_f1", "_p", "_r"))} for s in ranks]
    assert scores[0] and scores[0] == scores[1]
    assert ranks[0]["selected_step"] == ranks[1]["selected_step"] in (2, 4)  # chosen alike on both ranks
    files = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert "model.safetensors" in files and "dev_predictions.conll" in files and "dev_results.json" in files
    assert not [f for f in files if "tmp" in f], files  # no temporary left by a second writer
    assert proc.stdout.count("singletons:") == 1, proc.stdout  # messages once


# ---------------------------------------------------------------------------------------------
# Issue 11.7: the released settings as presets, the segment-distance feature, best-on-dev selection

# Transcribed from mandarjoshi90/coref @ bd04f2e: experiments.conf (`best`, `spanbert_base`,
# `spanbert_large`), independent.py (k <= 3900, segment distance), optimization.py (eps, decay, clipping),
# train.py (eval_frequency, model.max.ckpt).
RELEASED = {
    "spanbert_base": dict(max_seq_length=384, encoder_learning_rate=2e-5, learning_rate=1e-4),
    "spanbert_large": dict(max_seq_length=512, encoder_learning_rate=1e-5, learning_rate=3e-4),
}
RELEASED_SHARED = dict(
    adam_epsilon=1e-6, weight_decay=0.01, task_weight_decay=0.0, separate_clipping=True, max_grad_norm=1.0,
    warmup_ratio=0.1, lr_scheduler_type="linear", num_train_epochs=20.0, per_device_train_batch_size=1,
    max_top_spans=3900, max_span_width=30, top_span_ratio=0.4, max_top_antecedents=50, ffnn_size=3000,
    ffnn_depth=1, feature_size=20, dropout=0.3, token_dropout=0.0, coref_depth=2, max_training_segments=3,
    use_segment_distance=True, eval_steps=1000, metric_for_best_model="conll_f1",
)  # fmt: skip


def _parsed(monkeypatch, argv):
    """(TrainingArguments, CorefConfig) that `spanbert finetune coref ARGV` would train with."""
    from spanbert.cli import main
    from spanbert.tasks import coref

    seen = {}

    def fake(model_dir, train_path, dev_path, targs, config, tokenizer_dir=None, max_eval_examples=None):
        seen.update(targs=targs, config=config)
        return {}

    monkeypatch.setattr(coref.command, "finetune_coref", fake)  # where the command calls it
    assert main(["finetune", "coref", "--model", "m", "--train", "t.conll", "--output_dir", "o", *argv]) == 0
    return seen["targs"], seen["config"]


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_presets_are_the_released_settings(monkeypatch, name, tmp_path):
    targs, config = _parsed(monkeypatch, ["--preset", name])
    for key, value in {**RELEASED_SHARED, **RELEASED[name]}.items():
        got = getattr(targs, key) if hasattr(targs, key) else getattr(config, key)
        assert got == value, (key, got, value)
    # options given on the command line or in --config win over the preset
    yaml = tmp_path / "c.yaml"
    yaml.write_text("ffnn_size: 150\nadam_epsilon: 1.0e-8\n")
    targs, config = _parsed(monkeypatch, ["--preset", name, "--config", str(yaml), "--learning_rate", "5e-5"])
    assert (targs.learning_rate, targs.adam_epsilon, config.ffnn_size) == (5e-5, 1e-8, 150)
    assert config.max_seq_length == RELEASED[name]["max_seq_length"]


def test_default_selects_on_dev_conll_f1_and_an_unknown_preset_is_an_error(monkeypatch, tmp_path, capsys):
    from spanbert.cli import main

    targs, config = _parsed(monkeypatch, [])
    assert targs.metric_for_best_model == "conll_f1" and targs.evals_per_epoch == 3
    assert config.use_segment_distance and config.max_top_spans == 3900 and config.task_weight_decay == 0
    yaml = tmp_path / "c.yaml"
    yaml.write_text("preset: spanbert_huge\n")
    argv = ["finetune", "coref", "--model", "m", "--train", "t.conll", "--output_dir", "o", "--config", str(yaml)]
    assert main(argv) == 2
    # the YAML value is checked as the flag is, naming the file and line
    err = capsys.readouterr().err
    assert f"{yaml}:1: option preset: found 'spanbert_huge', expected one of: spanbert_base, spanbert_large" in err


def test_optimizer_groups_and_clipping_follow_the_released_code(tiny_run, tmp_path, monkeypatch):
    """Encoder: --weight_decay on weight matrices, none on biases / LayerNorm; task layers: none;
    encoder and task gradients clipped apart."""
    from spanbert import optim, trainer
    from spanbert.cli import main

    seen = {}

    def spy(model, dataset, args, **kw):
        seen.update(kw, model=model, args=args)
        raise KeyboardInterrupt  # stop before any step

    monkeypatch.setattr(trainer, "train", spy)
    assert main(finetune_argv(tiny_run, tmp_path / "run", "--weight_decay", "0.01")) != 0  # "interrupted"
    assert seen["clip_by_prefix"] == ("bert.",)
    model = seen["model"]
    groups = optim.param_groups(
        model, seen["args"].learning_rate, seen["args"].weight_decay, seen["lr_by_prefix"],
        seen["weight_decay_by_prefix"],
    )
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert len(decay) == len(list(model.parameters()))
    for name, p in model.named_parameters():
        want = 0.01 if name.startswith("bert.") and p.ndim >= 2 and "LayerNorm" not in name else 0.0
        assert decay[id(p)] == want, name
    assert [len(g) for g in optim.clip_groups(model, list(model.parameters()), seen["clip_by_prefix"])] == [
        len(list(model.bert.parameters())),
        len(list(model.parameters())) - len(list(model.bert.parameters())),
    ]


def test_top_spans_are_capped():
    model = tiny_model(max_top_spans=3).eval()
    _, batch = toy_batch(model)
    assert model(**batch)["top_starts"].shape == (3,)


def test_segment_distance_is_the_clipped_difference_of_the_start_segments():
    from spanbert.tasks.coref import segment_distance

    model = tiny_model()
    f, batch = toy_batch(model)
    width = batch["input_ids"].shape[1]
    segment_of = {}  # brute force: walk the (S, T) rows
    position = 0
    for s, seg in enumerate(f.segments):
        for _ in seg:
            segment_of[position] = s
            position += 1
    assert len(f.segments) >= 4  # pairs farther apart than the last bucket exist
    starts = torch.arange(f.num_subtokens)
    antecedents = torch.randint(0, f.num_subtokens, (f.num_subtokens, 7), generator=torch.Generator().manual_seed(0))
    got = segment_distance(batch["token_index"], width, starts, antecedents, 3)
    for i in range(f.num_subtokens):
        for j, a in enumerate(antecedents[i].tolist()):
            assert got[i, j] == min(2, max(0, segment_of[i] - segment_of[a]))


def test_segment_distance_changes_scores_only_through_its_embedding():
    """A model with the feature whose own weights contribute nothing scores exactly as the model
    without it; changing one row of its embedding changes the fine scores of exactly the pairs at
    that segment distance, and nothing before the fine scorer (kept spans, antecedents)."""
    from spanbert.tasks.coref import segment_distance

    without = tiny_model(use_segment_distance=False, coref_depth=1).eval()
    with_ = tiny_model(use_segment_distance=True, coref_depth=1).eval()
    assert without.segment_distance_embeddings is None
    state = without.state_dict()
    w = state["pair_scorer.0.weight"]  # (hidden, 3D + 3F)
    fs = with_.config.feature_size
    state["pair_scorer.0.weight"] = torch.cat([w, torch.zeros(w.shape[0], fs)], 1)  # the 4th feature: no effect
    state["segment_distance_embeddings.weight"] = with_.segment_distance_embeddings.weight.detach()
    with_.load_state_dict(state)
    f, batch = toy_batch(with_)
    with torch.no_grad():
        a, b = without(**batch), with_(**batch)
        assert torch.equal(a["antecedents"], b["antecedents"]) and torch.equal(a["top_starts"], b["top_starts"])
        assert torch.allclose(a["antecedent_scores"], b["antecedent_scores"])
        with_.pair_scorer[0].weight[:, -fs:].normal_(generator=torch.Generator().manual_seed(1))
        before = with_(**batch)
        with_.segment_distance_embeddings.weight[1] += 1.0
        after = with_(**batch)
    assert torch.equal(before["antecedents"], after["antecedents"])
    width = batch["input_ids"].shape[1]
    dist = segment_distance(batch["token_index"], width, before["top_starts"], before["antecedents"], 3)
    changed = ~torch.isclose(before["antecedent_scores"][:, 1:], after["antecedent_scores"][:, 1:])
    real = before["antecedent_scores"][:, 1:] > -1e3  # pairs with a real antecedent
    assert (dist[real] == 1).any() and (dist[real] != 1).any()
    assert torch.equal(changed[real], dist[real] == 1)


def test_models_saved_without_the_newer_settings_still_load(tiny_run, tmp_path):
    from spanbert.tasks.coref import load_coref_model, save_coref_model
    from spanbert.tokenization import Tokenizer

    model = tiny_model(use_segment_distance=False)
    save_coref_model(model, tmp_path / "m", Tokenizer.from_dir(tiny_run / "enc"))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for key in ("use_segment_distance", "token_dropout", "max_top_spans", "task_weight_decay", "separate_clipping"):
        del config["spanbert"]["coref"][key]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    loaded, _ = load_coref_model(tmp_path / "m")
    assert loaded.segment_distance_embeddings is None and loaded.config.token_dropout == loaded.config.dropout


def test_the_best_dev_evaluation_is_the_model_saved(tiny_run, tmp_path, monkeypatch, capsys):
    """Dev scored every step; the scorer is made to peak at step 2 of 3: step 2 is selected, reported,
    saved (not the last weights), and its dev predictions are what a separate `predict coref` with the
    saved model writes."""
    from safetensors.torch import load_file

    from spanbert.cli import main
    from spanbert.tasks import coref

    real = coref.evaluate_clusters
    calls = []

    def peaking(docs, predictions):
        scores = real(docs, predictions)
        calls.append(len(calls) + 1)
        return {**scores, "conll_f1": {1: 10.0, 2: 30.0, 3: 20.0}[calls[-1]]}

    monkeypatch.setattr(coref.finetune, "evaluate_clusters", peaking)  # where fine-tuning's evaluation calls it
    out = tmp_path / "run"
    assert main(finetune_argv(tiny_run, out, "--eval_steps", "1", "--save_steps", "1", "--dropout", "0")) == 0
    summary = json.loads((out / "dev_results.json").read_text())
    assert summary["selected_step"] == 2 and summary["selected_by"] == "conll_f1"
    assert summary["conll_f1"] == 30.0 and [h["step"] for h in summary["dev_history"]] == [1, 2, 3]
    assert "selected the model of step 2" in capsys.readouterr().out
    saved = load_file(out / "model.safetensors")
    best = torch.load(out / "best" / "state.pt", weights_only=True)
    last = torch.load(out / "checkpoint-3" / "state.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[k], best[k]) for k in saved)
    assert any(not torch.equal(saved[k], last[k]) for k in saved)
    monkeypatch.setattr(coref.finetune, "evaluate_clusters", real)
    again = tmp_path / "again.conll"
    assert main(["predict", "coref", "--model", str(out), "--data", str(tiny_run / "train.conll"),
                 "--output", str(again), "--device", "cpu", "--disable_tqdm"]) == 0  # fmt: skip
    assert again.read_text() == (out / "dev_predictions.conll").read_text()
