"""Per-example statistics (`spanbert.metrics.resample`): each kind's score from its rows equals the task's own
metric, a resample's score equals the score of the drawn examples, and damaged files are one clean error."""

import numpy as np
import pytest

from spanbert.errors import SpanBertError
from spanbert.metrics.resample import ExampleStats, read_example_stats, resample_counts, write_example_stats


def test_each_kind_scores_its_rows_as_the_metric_does():
    assert ExampleStats("accuracy", np.array([[1.0], [0.0], [1.0], [1.0]])).score() == pytest.approx(75.0)
    # micro F1 over examples: tp 3 of 4 predicted and 5 gold -> P 0.75, R 0.6, F1 2/3
    rows = np.array([[2.0, 2.0, 3.0], [1.0, 2.0, 2.0]])
    assert ExampleStats("f1", rows).score() == pytest.approx(100 * 2 * 0.75 * 0.6 / 1.35)
    # CoNLL F1: the mean of three F1s, each from numerators and denominators summed over documents
    doc = [1, 2, 1, 4] * 3  # each metric: P 1/2, R 1/4 -> F1 1/3
    assert ExampleStats("conll", np.array([doc, doc], dtype=float)).score() == pytest.approx(100 / 3)


def test_a_resample_scores_the_examples_it_drew():
    rng = np.random.default_rng(0)
    rows = np.c_[rng.integers(0, 3, 50), rng.integers(0, 4, 50), rng.integers(0, 4, 50)].astype(float)
    rows[:, 1:] = np.maximum(rows[:, 1:], rows[:, :1])  # tp <= predicted, gold
    stats = ExampleStats("f1", rows)
    counts = resample_counts(50, 5, rng)
    assert counts.shape == (5, 50) and (counts.sum(axis=1) == 50).all()
    for r, got in enumerate(stats.resampled(counts)):
        drawn = np.repeat(rows, counts[r], axis=0)
        assert got == pytest.approx(ExampleStats("f1", drawn).score())


def test_written_statistics_read_back_and_damage_is_one_error(tmp_path):
    path = tmp_path / "stats.json"
    write_example_stats(path, "accuracy", [[1], [0]])
    assert read_example_stats(path).score() == 50.0
    path.write_text('{"kind": "f1", "rows": [[1, 2]]}')
    with pytest.raises(SpanBertError, match="expected \\(examples, 3\\)"):
        read_example_stats(path)
    path.write_text("{")
    with pytest.raises(SpanBertError, match="cannot read"):
        read_example_stats(path)
    with pytest.raises(SpanBertError, match="kind 'x'"):
        write_example_stats(tmp_path / "other.json", "x", [[1]])


def test_the_rows_of_conlleval_and_of_the_coreference_scorer_give_their_scores():
    from spanbert.metrics.classification import conlleval, conlleval_rows
    from spanbert.metrics.coref import document_rows, evaluate_documents

    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"], ["B-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG"], ["O"]]
    assert ExampleStats("f1", np.array(conlleval_rows(gold, pred), float)).score() == pytest.approx(
        100 * conlleval(gold, pred)["f1"])
    keys = [[[(0, 0), (3, 4)], [(6, 6), (8, 8), (10, 11)]], [[(1, 1), (5, 5)]]]
    responses = [[[(0, 0), (3, 4), (6, 6)], [(8, 8), (10, 11)]], [[(1, 1), (2, 2)]]]
    rows = np.array(document_rows(keys, responses), float)
    assert rows.shape == (2, 12)
    assert ExampleStats("conll", rows).score() == pytest.approx(evaluate_documents(keys, responses)["conll_f1"])
