"""The span probes' data (`spanbert.tasks.probe_data`, `spanbert.tasks.probe_sets`): each reader's contexts and
targets on tiny files, its errors naming the file and line, the fixed subsamples and the relations' dev carve,
and each reader's counts on the real data (realdata)."""

from __future__ import annotations

import gzip

import pytest
from conftest import REPO

from spanbert.errors import DataError, SpanBertError
from spanbert.tasks import probe_data as D
from spanbert.tasks.probe_sets import DATA_SEED, PROBE_SETS

DATA = REPO.parent / "shared" / "data"

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
to TO B-VP O
boycott VB I-VP O
British JJ B-NP B-MISC
lamb NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

Nothing NN B-NP O
"""

TREE = "( (S (NP-SBJ (NNP Alice)) (VP (VBD saw) (NP (PRP him) (-LRB- -LRB-) (NNP Bob) (-RRB- -RRB-))) (. .)) )\n"

SEMEVAL = ('1\t"The <e1>author</e1> of a keygen uses a <e2>disassembler</e2> to look at the code."\r\n'
           "Instrument-Agency(e2,e1)\r\nComment:\r\n\r\n")  # fmt: skip

GAP_HEADER = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"
GAP_ROW = "g-1\tAlice met Bob Smith. She liked him.\tShe\t21\tAlice\t0\tTRUE\tBob Smith\t10\tFALSE\thttp://x\n"


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_entities_are_the_gold_chunks_with_their_types(tmp_path):
    got = D.read_probe("entities", _write(tmp_path / "ner.txt", CONLL))
    assert [c.words[:2] for c in got] == [["EU", "rejects"], ["Peter", "Blackburn"]]  # no entity: no context
    assert [t for c in got for t in c.targets] == [
        D.Target(((0, 0),), ("ORG",)), D.Target(((2, 2),), ("MISC",)), D.Target(((6, 6),), ("MISC",)),
        D.Target(((0, 1),), ("PER",)),
    ]  # fmt: skip
    assert got[0].id == "ner.txt:3"


def test_constituents_keep_every_label_of_a_unary_chain_and_pos_every_word(tmp_path):
    f = _write(tmp_path / "t.mrg", TREE)
    (c,) = D.read_probe("constituents", f)
    assert c.words == ["Alice", "saw", "him", "(", "Bob", ")", "."]  # brackets as a vocabulary spells them
    spans = {t.spans[0]: t.labels for t in c.targets}
    assert spans == {(0, 6): ("S",), (0, 0): ("NP",), (1, 5): ("VP",), (2, 5): ("NP",)}  # no TOP, no preterminal
    (c,) = D.read_probe("constituents", _write(tmp_path / "u.mrg", "(TOP (S (VP (VB Go) (ADVP (RB away)))))\n"))
    assert {t.spans[0]: t.labels for t in c.targets} == {(0, 1): ("S", "VP"), (1, 1): ("ADVP",)}
    (c,) = D.read_probe("pos", f)
    assert [t.labels[0] for t in c.targets] == ["NNP", "VBD", "PRP", "-LRB-", "NNP", "-RRB-", "."]
    assert [t.spans for t in c.targets][:2] == [((0, 0),), ((1, 1),)]


def test_relations_are_two_spans_with_the_directed_label(tmp_path):
    (c,) = D.read_probe("relations", _write(tmp_path / "s.txt", SEMEVAL))
    (t,) = c.targets
    assert c.words[t.spans[0][0]] == "author" and c.words[t.spans[1][0]] == "disassembler"
    assert t.labels == ("Instrument-Agency(e2,e1)",) and c.id == "1"


def test_gap_offsets_become_word_spans(tmp_path):
    (c,) = D.read_probe("gap", _write(tmp_path / "g.tsv", GAP_HEADER + GAP_ROW))
    assert c.words == ["Alice", "met", "Bob", "Smith", ".", "She", "liked", "him", "."] and c.id == "g-1"
    assert c.targets == [D.Target(((5, 5), (0, 0)), (D.COREFERENT,)), D.Target(((5, 5), (2, 3)), (D.DISTINCT,))]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("ID\tText\n", 1, "expected the GAP columns"),
        (
            GAP_HEADER + GAP_ROW.replace("\t21\t", "\t22\t"),
            2,
            "found 'he ' at offset 22 of the text, expected the mention 'She'",
        ),
        (GAP_HEADER + GAP_ROW.replace("\t10\t", "\tten\t"), 2, "found offset 'ten' of 'Bob Smith'"),
        (GAP_HEADER + GAP_ROW.replace("TRUE", "yes"), 2, "found A-coref 'yes'; expected TRUE or FALSE"),
        (GAP_HEADER + "\n" + "g-2\tonly three\tcolumns\n", 3, "found 3 tab-separated columns; expected 11"),
    ],
)
def test_malformed_gap_names_file_and_line(tmp_path, text, line, message):
    f = _write(tmp_path / "bad.tsv", text)
    with pytest.raises(DataError, match=rf"bad\.tsv:{line}: .*{message}"):
        D.read_probe("gap", f)


def _litbank(root, docs):
    """A LitBank-shaped folder: conll/NAME.conll.gz and tenfold_splits/0/train.ids naming them."""
    (root / "conll").mkdir(parents=True, exist_ok=True)
    (root / "tenfold_splits" / "0").mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        with gzip.open(root / "conll" / f"{name}.conll.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    ids = root / "tenfold_splits" / "0" / "train.ids"
    ids.write_text("".join(f"{n}.tsv\n" for n in docs))
    return ids


def _coref_doc(key, sentences):
    """A CoNLL-2012 document of (word, coreference column) sentences."""
    rows = [f"#begin document ({key}); part 0"]
    for sentence in sentences:
        rows += [f"{key}\t0\t{i}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\t{c}" for i, (w, c) in enumerate(sentence)] + [""]
    return "\n".join(rows + ["#end document", ""])


def test_litbank_arcs_are_balanced_pairs_inside_a_window(tmp_path):
    s1 = [("Alice", "(0)"), ("met", "-"), ("Bob", "(1)"), (".", "-")]
    s2 = [("She", "(0)"), ("liked", "-"), ("him", "(1)"), ("and", "-"), ("the", "(2"), ("dog", "2)"), (".", "-")]
    ids = _litbank(tmp_path / "litbank", {"d1": _coref_doc("d1", [s1, s2])})
    (c,) = D.read_probe("litbank", ids)
    assert c.words[:3] == ["Alice", "met", "Bob"] and c.id == "d1_0:0"
    arcs = {t.spans: t.labels[0] for t in c.targets}
    positives = {s for s, label in arcs.items() if label == D.COREFERENT}
    assert positives == {((0, 0), (4, 4)), ((2, 2), (6, 6))}  # Alice-She, Bob-him; earlier mention first
    assert sum(label == D.DISTINCT for label in arcs.values()) == 2  # as many distinct pairs, drawn by the seed
    assert c.targets == D.read_probe("litbank", ids)[0].targets  # the draw is fixed
    # windows are whole sentences up to WINDOW_WORDS: two sentences of 50 words are two windows, no arc across
    long = [[(f"w{i}", "(0)" if i == 0 else "-") for i in range(50)]] * 2
    ids2 = _litbank(tmp_path / "long", {"d2": _coref_doc("d2", long)})
    with pytest.raises(DataError, match="found no window with two mentions of one entity"):
        D.read_probe("litbank", ids2)


def test_a_litbank_ids_file_naming_a_missing_document_is_an_error(tmp_path):
    ids = _litbank(tmp_path / "litbank", {"d1": _coref_doc("d1", [[("a", "(0)"), ("a", "(0)")]])})
    ids.write_text("d1.tsv\nnowhere.tsv\n")
    with pytest.raises(DataError, match=r"train\.ids:2: found 'nowhere\.tsv', but .*nowhere\.conll\.gz is not there"):
        D.read_probe("litbank", ids)


def test_a_missing_file_is_one_error_naming_the_format(tmp_path):
    with pytest.raises(SpanBertError, match=r"nowhere\.txt: no such file or folder \(expected CoNLL-2003 IOB files\)"):
        D.read_probe("entities", tmp_path / "nowhere.txt")


def _contexts(n, per):
    return [D.Context(str(i), ["w"] * per, [D.Target(((k, k),), ("x",)) for k in range(per)]) for i in range(n)]


def test_a_subsample_is_fixed_by_its_seed_exact_and_in_file_order():
    contexts = _contexts(50, 3)
    a = D.subsample(contexts, 40, DATA_SEED)
    assert D.n_targets(a) == 40 and a == D.subsample(contexts, 40, DATA_SEED)
    assert [int(c.id) for c in a] == sorted(int(c.id) for c in a)
    assert sum(len(c.targets) < 3 for c in a) == 1  # whole contexts but the last, which keeps its first targets
    assert [c.id for c in D.subsample(contexts, 40, DATA_SEED + 1)] != [c.id for c in a]
    assert D.subsample(contexts, 0, DATA_SEED) is contexts and D.subsample(contexts, 10_000, DATA_SEED) is contexts


def test_the_dev_carve_is_fixed_and_disjoint():
    contexts = _contexts(100, 1)
    train, dev = D.carve_dev(contexts)
    assert len(dev) == 10 and len(train) == 90 and not {c.id for c in train} & {c.id for c in dev}
    assert [c.id for c in D.carve_dev(contexts)[1]] == [c.id for c in dev]


# ---------------------------------------------------------------------------------------------
# The real data (../shared/data): each reader's contexts and targets, and the default subsamples


COUNTS = {  # (probe, file): (contexts, targets, labels)
    ("entities", "conll2003/train.txt"): (11132, 23499, 4),  # SOURCE.md: 23,499 entities
    ("entities", "conll2003/valid.txt"): (2605, 5942, 4),
    ("entities", "conll2003/test.txt"): (2756, 5648, 4),
    ("constituents", "ptb_sample/train"): (3068, 54741, 26),
    ("constituents", "ptb_sample/test"): (413, 7052, 22),
    ("pos", "ptb_sample/train"): (3068, 73842, 45),
    ("pos", "ptb_sample/dev"): (433, 10627, 40),
    ("relations", "semeval2010_task8/SemEval2010_task8_training/TRAIN_FILE.TXT"): (8000, 8000, 19),
    ("relations", "semeval2010_task8/SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT"): (2717, 2717, 19),
    ("gap", "gap_coreference/gap-development.tsv"): (2000, 4000, 2),  # SOURCE.md: 2,000 rows, 4,000 pairs
    ("gap", "gap_coreference/gap-validation.tsv"): (454, 908, 2),
    ("litbank", "litbank_coref/tenfold_splits/0/train.ids"): (2350, 53995, 2),
    ("litbank", "litbank_coref/tenfold_splits/0/test.ids"): (284, 6251, 2),
}


@pytest.mark.realdata
@pytest.mark.parametrize("probe, file", list(COUNTS), ids=[f"{p}:{f.split('/')[-1]}" for p, f in COUNTS])
def test_each_reader_counts_the_real_data(probe, file):
    path = DATA / file
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/data)")
    contexts = D.read_probe(probe, path)
    assert (len(contexts), D.n_targets(contexts), len(D.label_list(contexts))) == COUNTS[probe, file]
    if probe in ("gap", "litbank"):  # both labels; LitBank's nearly balanced (a window has as many distinct arcs
        # as coreferent ones, or all it has when fewer)
        n = [sum(t.labels == (label,) for c in contexts for t in c.targets) for label in (D.COREFERENT, D.DISTINCT)]
        assert min(n) > 0 and (probe == "gap" or n[1] <= n[0] < 1.1 * n[1])


@pytest.mark.realdata
def test_the_relations_dev_carve_and_the_default_subsamples_on_the_real_data():
    path = DATA / PROBE_SETS["relations"].files[0]
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/data)")
    train, dev = D.carve_dev(D.read_probe("relations", path))
    assert (len(train), len(dev)) == (7200, 800)
    assert dev[0].id == D.carve_dev(D.read_probe("relations", path))[1][0].id
    sub = D.subsample(train, PROBE_SETS["relations"].train_examples, DATA_SEED)
    assert D.n_targets(sub) == 2000 and not {c.id for c in sub} & {c.id for c in dev}
