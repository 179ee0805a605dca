"""Penn Treebank trees (`spanbert.tasks.trees`): the `.mrg` layout (several trees a file, each over several lines,
an empty outer bracket) and one-tree-a-line files read the same way, the standard cleaning, malformed trees named
by file and line, and raw text tokenized as the treebank is. The chart parser is tested in test_parse.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanbert.errors import DataError
from spanbert.tasks.trees import Tree, clean, read_trees, strip_label, tokenize

# LDC's layout: trailing spaces, a blank first line, each tree in an outer bracket without a label
MRG = "\n".join([
    "",
    "( (S ",
    "    (NP-SBJ-1 (NNP Pierre) (NNP Vinken) )",
    "    (VP (MD will) ",
    "      (VP (VB join) ",
    "        (NP (DT the) (NN board) )",
    "        (PRT (RP up) )",
    "        (NP (-NONE- *-1) )",
    "        (PP-CLR=2 (IN as) ",
    "          (NP (DT a) (-LRB- -LRB-) (NN director) (-RRB- -RRB-) ))))",
    "    (. .) ))",
    "( (S ",
    "    (NP-SBJ (-NONE- *) )",
    "    (VP (VB Go) )",
    "    (. .) ))",
    "",
])  # fmt: skip

CLEAN_1 = ("(TOP (S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) "
           "(PRT (RP up)) (PP (IN as) (NP (DT a) (-LRB- -LRB-) (NN director) (-RRB- -RRB-))))) (. .)))")  # fmt: skip
CLEAN_2 = "(TOP (S (VP (VB Go)) (. .)))"


def test_mrg_multiline_several_trees_empty_outer_bracket_and_cleaning(tmp_path):
    f = tmp_path / "wsj_0001.mrg"
    f.write_text(MRG)
    got = read_trees(f)
    # -NONE- leaves and the constituents they leave empty go, function tags and indices are cut
    # (NP-SBJ-1, PP-CLR=2), -LRB-/-RRB- stay whole, PRT stays PRT (only the metric unifies it with ADVP)
    assert [str(t) for t in got.trees] == [CLEAN_1, CLEAN_2]
    assert got.sources == [(str(f), 2), (str(f), 12)]
    raw = read_trees(f, do_clean=False).trees[1]
    assert str(raw) == "(TOP (S (NP-SBJ (-NONE- *)) (VP (VB Go)) (. .)))"


def test_one_tree_a_line_with_any_wrapper_and_a_folder(tmp_path):
    f = tmp_path / "trees.txt"
    f.write_text("(TOP (S (VP (VB Go)) (. .)))\n(ROOT (S (VP (VB Go)) (. .)))\n(S (VP (VB Go)) (. .))\n"
                 "( (S (VP (VB Go)) (. .)))\n")  # fmt: skip
    assert [str(t) for t in read_trees(f).trees] == [CLEAN_2] * 4
    folder = tmp_path / "ptb"
    (folder / "01").mkdir(parents=True)
    (folder / "01" / "wsj_0102.mrg").write_text(MRG)
    (folder / "wsj_0002.mrg").write_text("( (S (VP (VB Go)) (. .)))\n")
    (folder / "README").write_text("not a tree")
    got = read_trees(folder)
    assert [str(t) for t in got.trees] == [CLEAN_1, CLEAN_2, CLEAN_2]  # 01/wsj_0102 sorts before wsj_0002
    assert [Path(s).name for s, _ in got.sources] == ["wsj_0102.mrg", "wsj_0102.mrg", "wsj_0002.mrg"]


def test_strip_label_rules():
    assert [strip_label(x) for x in ("NP-SBJ-1", "PP-LOC=2", "S-TPC-1", "NP=3", "-LRB-", "-NONE-", "PRP$", "ADVP|PRT")] == [
        "NP", "PP", "S", "NP", "-LRB-", "-NONE-", "PRP$", "ADVP|PRT"]  # fmt: skip
    assert clean(Tree("TOP", [Tree("S", [Tree("-NONE-", word="*")])])) is None


@pytest.mark.parametrize(
    "text, line, contains",
    [
        ("( (S (NP (NN a)) (VP (VB b)) )\n", 1, "never closed"),
        ("( (S (NP (NN a))\n   (VP (VB b) )))\n)\n", 3, "no open bracket"),
        ("( (S (NP (NNP Mary))\n  walks))\n", 2, "'walks' without a tag"),
        ("( (S (NP Mary Jane)))\n", 1, "after '(NP Mary'"),
        ("( (S (NP ( Mary))))\n", 1, "a word without its tag"),
        ("( (S ()))\n", 1, "empty brackets"),
        ("\n\n   \n", None, "no trees (empty file)"),
        ("Pierre (S (NN a))\n", 1, "outside any tree"),
        ("( (S (NP-SBJ (-NONE- *))))\n", 1, "no words once -NONE-"),
    ],
)
def test_malformed_trees_name_file_and_line(tmp_path, text, line, contains):
    f = tmp_path / "bad.mrg"
    f.write_text(text)
    with pytest.raises(DataError) as e:
        read_trees(f)
    where = f"{f}:{line}:" if line else f"{f}:"
    assert str(e.value).startswith(where) and contains in str(e.value), str(e.value)


def test_tokenize_raw_text():
    assert tokenize('The cat (a U.S. one) sat, 3,000 "times".') == [
        "The", "cat", "-LRB-", "a", "U.S", ".", "one", "-RRB-", "sat", ",", "3,000", '"', "times", '"', "."]  # fmt: skip


def test_tokenize_keeps_words_of_any_script_and_pretokenized_text():
    assert tokenize("naïve café Müller") == ["naïve", "café", "Müller"]
    assert tokenize("Zoë’s café sells crème brûlée .") == ["Zoë’s", "café", "sells", "crème", "brûlée", "."]
    # already split by a PTB tokenizer: every token stays as it is
    assert tokenize("John 's café does n't sell Zoë ’s crème_brûlée") == [
        "John", "'s", "café", "does", "n't", "sell", "Zoë", "’s", "crème", "_", "brûlée"]  # fmt: skip
    assert tokenize("'sorry' ... -- ``yes''") == ["'", "sorry", "'", "...", "--", "``", "yes", "''"]
