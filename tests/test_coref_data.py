"""CoNLL-2012 documents (`spanbert.tasks.coref.data`): the reader (columns, speakers, clusters, genre) and its
errors naming the file and line, the writer whose entries read back as written (adjacent and nested mentions),
and every LitBank file round-tripped."""

from __future__ import annotations

import pytest
from test_coref import LITBANK, SAMPLE, needs_litbank

from spanbert.errors import DataError
from spanbert.tasks.coref.data import CorefDocument, coref_column, genre_of, read_conll, write_conll


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
