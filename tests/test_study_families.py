"""`spanbert study` takes the model family as a study value (issue 31 item 5): a system entry names its
`spanbert pretrain --system` and `--family`, or a top-level `families:` crosses the systems with families,
so one file compares SpanBERT's objectives with MLM on both architectures at equal tokens. A study
without families plans the commands it always did."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from test_glue import synthetic_sst
from test_pretrain import synthetic_docs

from spanbert import study as S
from spanbert.cli import main
from spanbert.families import family_of


def _sst(folder: Path, n: int = 32) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{s}\t{lab}\n" for s, lab in synthetic_sst(n))
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("sentence\tlabel\n" + body)
    return folder


def _study_file(tmp_path: Path, systems: str, extra: str = "", budget: int = 100_000) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    with gzip.open(corpus / "wiki.txt.gz", "wt") as f:
        f.write("\n\n".join(synthetic_docs(n_docs=24)) + "\n")
    sst = _sst(tmp_path / "SST-2")
    f = tmp_path / "s.yaml"
    f.write_text(
        f"corpus: {corpus}\nvocab_size: 300\nmodel: tiny\nbudget_tokens: {budget}\nmax_seq_length: 64\nbatch_size: 4\n"
        f"seeds: 1\noutput_dir: {tmp_path / 'out'}\n{extra}systems:\n{systems}tasks:\n"
        f"  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-3], options: "
        f"{{num_train_epochs: 1, per_device_train_batch_size: 16}}}}\n"
    )
    return f


def _pretrain_argv(study: S.Study) -> dict[str, list[str]]:
    return {c.system: c.argv for c in S.plan(study) if c.kind == "pretrain"}


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_families_cross_the_systems(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    f = _study_file(tmp_path, f"  - spanbert\n  - bert-1seq\n  - {{name: mine, checkpoint: {mine}}}\n",
                    extra="families: [bert, modernbert]\n")  # fmt: skip
    study = S.load_study(f)
    assert [(s.name, s.pretrain_system, s.family) for s in study.systems] == [
        ("spanbert", "spanbert", ""),
        ("spanbert-modernbert", "spanbert", "modernbert"),
        ("bert-1seq", "bert-1seq", ""),
        ("bert-1seq-modernbert", "bert-1seq", "modernbert"),
        ("mine", "mine", ""),  # a checkpoint is fine-tuned as it is, once
    ]
    argv = _pretrain_argv(study)
    assert set(argv) == {"spanbert", "spanbert-modernbert", "bert-1seq", "bert-1seq-modernbert"}
    assert [(_flag(a, "--system"), _flag(a, "--family")) for a in argv.values()] == [
        ("spanbert", None), ("spanbert", "modernbert"), ("bert-1seq", None), ("bert-1seq", "modernbert")]  # fmt: skip
    # equal tokens: every row the same corpus, model size, block length, steps and batch
    for key in ("--corpus", "--model", "--max_seq_length", "--max_steps", "--per_device_train_batch_size"):
        assert len({_flag(a, key) for a in argv.values()}) == 1, key
    cells = [c for c in S.plan(study) if c.kind == "finetune"]
    assert {c.system for c in cells} == {s.name for s in study.systems}
    assert all(_flag(c.argv, "--model").endswith(f"pretrain/{c.system}/final") for c in cells if c.system != "mine")


def test_a_system_entry_names_its_system_and_family(tmp_path):
    f = _study_file(tmp_path, "  - spanbert\n  - {name: spanbert-mb, system: spanbert, family: modernbert}\n"
                              "  - {name: mlm30-bert, system: modernbert-mlm, family: bert}\n")  # fmt: skip
    argv = _pretrain_argv(S.load_study(f))
    assert [(_flag(a, "--system"), _flag(a, "--family")) for a in argv.values()] == [
        ("spanbert", None), ("spanbert", "modernbert"), ("modernbert-mlm", "bert")]  # fmt: skip
    assert list(argv) == ["spanbert", "spanbert-mb", "mlm30-bert"]


def test_a_study_without_families_plans_the_commands_it_always_did(tmp_path):
    f = _study_file(tmp_path, "  - spanbert\n  - {name: bert, options: {masking: whole_word}}\n")
    study = S.load_study(f)
    assert study.families == [] and all(s.system == "" and s.family == "" for s in study.systems)
    out = tmp_path / "out"
    assert _pretrain_argv(study)["spanbert"] == [
        "pretrain", "--system", "spanbert", "--corpus", str(out / "shared" / "corpus"), "--model", "tiny",
        "--max_seq_length", "64", "--max_steps", "391", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--disable_tqdm", "true"]  # fmt: skip
    assert _flag(_pretrain_argv(study)["bert"], "--masking") == "whole_word"


@pytest.mark.parametrize(
    "systems, extra, line, contains",
    [
        pytest.param("  - spanbert\n  - {name: b, system: bert, family: modernbert}\n", "", 11,
                     "systems: b: found system bert (nsp blocks) on family modernbert, expected a system that family "
                     "pre-trains: spanbert, bert-1seq", id="family-does-not-pretrain-the-system"),
        pytest.param("  - {name: b, system: spanbert, family: gpt}\n", "", 10,
                     "found family 'gpt', expected one of: bert, cloze-two-tower, modernbert", id="unknown-family"),
        pytest.param("  - {name: b, system: spanbrt}\n", "", 10, "found 'spanbrt', expected a `spanbert pretrain "
                     "--system`", id="unknown-system"),
        pytest.param("  - {name: b, checkpoint: /, family: modernbert}\n", "", 10,
                     "found checkpoint with family, expected one of them", id="checkpoint-and-family"),
        pytest.param("  - bert\n", "families: [bert, modernbert]\n", 9,
                     "bert-modernbert: found system bert (nsp blocks) on family modernbert", id="crossed-nsp-system"),
        pytest.param("  - spanbert\n", "families: [modernbert, modernbert]\n", 9,
                     "families: found ['modernbert', 'modernbert'], expected distinct names", id="family-twice"),
        pytest.param("  - spanbert\n  - spanbert-modernbert\n", "families: [bert, modernbert]\n", 12,
                     "found 'spanbert-modernbert', expected a `spanbert pretrain --system`",
                     id="crossed-name-as-a-system"),  # the entries are checked as written, before crossing
        pytest.param("  - spanbert\n  - {name: spanbert-modernbert, system: bert-1seq}\n", "families: [bert, modernbert]\n",
                     9, "families: found a row name twice", id="crossed-row-name-twice"),
    ],
)  # fmt: skip
def test_family_errors_name_the_file_and_line_before_any_work(tmp_path, cli_error, systems, extra, line, contains):
    f = _study_file(tmp_path, systems, extra)
    err = cli_error(["study", f], names=f"{f}:{line}:", contains=contains)
    assert not (tmp_path / "out").exists(), err


def test_a_tiny_study_pretrains_and_finetunes_a_system_on_modernbert(tmp_path, capsys):
    f = _study_file(tmp_path, "  - spanbert\n", extra="families: [modernbert]\n", budget=2048)
    assert main(["study", str(f)]) == 0
    out = tmp_path / "out"
    final = out / "pretrain" / "spanbert-modernbert" / "final"
    assert family_of(final) == "modernbert"
    cell = json.loads((out / "pretrain" / "spanbert-modernbert" / "cell.json").read_text())
    assert _flag(cell["argv"], "--family") == "modernbert" and _flag(cell["argv"], "--system") == "spanbert"
    # the study's one vocabulary: the ModernBERT row reads the same tokens as a BERT row would
    assert (final / "vocab.txt").read_text() == (out / "shared" / "tokenizer" / "vocab.txt").read_text()
    result = json.loads((out / "finetune" / "spanbert-modernbert" / "SST-2" / "lr0.001_seed0" / "result.json").read_text())
    assert 0 <= result["dev"] <= 100
    assert "| spanbert-modernbert |" in (out / "summary" / "table.md").read_text()
