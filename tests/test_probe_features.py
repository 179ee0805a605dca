"""The probes' encoder features (`spanbert.tasks.probe_features`): word spans become sub-word rows, a long text is
cut to a window around its targets and the spans it cuts are counted, the store holds every hidden state of
the span sub-words for every family, and a store with the same key is read back without loading the encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_families import FAMILY_NAMES, WORDS, models  # noqa: F401 - models is a fixture

from spanbert import families
from spanbert.tasks import probe_features as PF
from spanbert.tasks.probe_data import Context, Target


def toy_contexts(n: int = 12) -> list[Context]:
    """Sentences of the families' vocabulary, each with a one-word and a two-word target."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        words = [str(w) for w in rng.choice(WORDS, int(rng.integers(5, 9)))]
        out.append(Context(str(i), words, [Target(((1, 1),), ("a",)), Target(((2, 3),), ("b",))]))
    return out


def test_word_spans_become_the_rows_of_their_sub_words(models):  # noqa: F811
    tok = families.load_framed_tokenizer(models["bert"])
    c = Context(
        "0", ["Mary", "saw", "Berlin", "unseenword"], [Target(((0, 0), (3, 3)), ("x",)), Target(((2, 3),), ("y",))]
    )
    w = PF.window(c, tok, 64)
    pieces = [len(tok.encode_words([x]).ids) for x in c.words]
    assert pieces[3] > 1  # a word of several sub-words
    assert w.input_ids[0] == tok.cls_id and w.input_ids[-1] == tok.sep_id and len(w.input_ids) == sum(pieces) + 2
    start = 1 + np.cumsum([0] + pieces)  # each word's first position in the framed input
    assert w.positions.tolist() == sorted({int(start[0]), *range(int(start[2]), int(start[4]))})
    (a, b), (c3, d3) = w.spans[0]
    assert w.positions[a:b].tolist() == [int(start[0])] and w.positions[c3:d3].tolist() == list(
        range(start[3], start[4])
    )
    assert not w.cut


def test_a_long_text_is_cut_to_a_window_around_its_targets_and_what_is_cut_is_counted(models):  # noqa: F811
    tok = families.load_framed_tokenizer(models["bert"])
    words = ["the"] * 100 + ["Mary", "saw", "John"] + ["the"] * 100
    c = Context("0", words, [Target(((100, 100), (102, 102)), ("x",)), Target(((0, 0),), ("y",))])
    w = PF.window(c, tok, 32)
    assert w.cut and len(w.input_ids) == 32 and w.spans[1] is None  # the far target is cut off
    wanted = [*tok.encode_words(["Mary"]).ids.tolist(), *tok.encode_words(["John"]).ids.tolist()]
    assert w.input_ids[w.positions].tolist() == wanted  # the kept rows are the targets' sub-words
    row0, spans, context = PF._layout([w, w], num_spans=2)
    assert spans.shape == (4, 2, 2) and (spans[1] == -1).all() and context.tolist() == [0, 0, 1, 1]
    assert spans[2, 0, 0] == row0[1]  # the second window's rows follow the first's


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_the_store_holds_every_hidden_state_of_the_span_sub_words(models, name, tmp_path):  # noqa: F811
    contexts = toy_contexts()
    store = PF.cached_features(models[name], contexts, "toy", tmp_path / "cache", 1, max_seq_length=64,
                               dtype="float32", batch_size=5, progress=False)  # fmt: skip
    encoder, tok = families.load_encoder(models[name]), families.load_framed_tokenizer(models[name])
    assert store.states.shape[1:] == (encoder.num_layers + 1, encoder.hidden_size)
    assert store.spans.shape == (24, 1, 2) and not store.cut_off.any() and store.context.tolist()[:4] == [0, 0, 1, 1]
    for i in (0, 5, 11):  # each text alone, unpadded: the same states the batched, padded extraction stored
        w = PF.window(contexts[i], tok, 64)
        with torch.no_grad():
            states = torch.stack(encoder(torch.from_numpy(w.input_ids)[None], output_hidden_states=True), 2)[
                0
            ]  # (T, L+1, H)
        for t in (2 * i, 2 * i + 1):
            a, b = store.spans[t, 0]
            local = w.spans[t - 2 * i][0]
            np.testing.assert_allclose(store.states[a:b], states[w.positions[local[0] : local[1]]].numpy(), atol=1e-4)


def test_a_store_with_the_same_key_is_read_back_without_the_encoder(models, tmp_path, monkeypatch):  # noqa: F811
    contexts = toy_contexts()
    first = PF.cached_features(models["bert"], contexts, "toy", tmp_path, 1, max_seq_length=64, progress=False)
    assert first.states.dtype == np.float16 and first.meta["contexts"] == 12

    def no_encoder(*a, **k):
        raise AssertionError("the encoder was loaded for a cached store")

    monkeypatch.setattr(PF, "load_encoder", no_encoder)
    again = PF.cached_features(models["bert"], contexts, "toy", tmp_path, 1, max_seq_length=64, progress=False)
    assert again.folder == first.folder and np.array_equal(again.states, first.states)
    # another length, other data or another encoder: another store
    with pytest.raises(AssertionError, match="the encoder was loaded"):
        PF.cached_features(models["bert"], contexts, "toy", tmp_path, 1, max_seq_length=32, progress=False)
    with pytest.raises(AssertionError, match="the encoder was loaded"):
        PF.cached_features(models["bert"], contexts[:5], "toy", tmp_path, 1, max_seq_length=64, progress=False)
    with pytest.raises(AssertionError, match="the encoder was loaded"):
        PF.cached_features(models["ltr"], contexts, "toy", tmp_path, 1, max_seq_length=64, progress=False)
    assert sorted(p.name for p in first.folder.iterdir()) == ["context.npy", "meta.json", "spans.npy", "states.npy"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing half-written beside it


def test_the_default_cache_is_the_users(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert PF.default_cache() == tmp_path / "spanbert" / "probe_features"
