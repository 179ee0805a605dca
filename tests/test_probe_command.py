"""`spanbert probe` (`spanbert.tasks.probe_command`): the set on a data root laid out as ../shared/data (tiny files),
one table of dev and test F1 for both rows, per-example statistics of every test score, a second run keeping
what is finished, clean errors before any work, and a ``--help`` that loads no torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_imports import _modules_after
from test_probe import PEOPLE, PLACES, probe_files, toy_conll  # noqa: F401 - probe_files is a fixture
from test_probe_data import GAP_HEADER, _coref_doc, _litbank

from spanbert.cli import main
from spanbert.metrics.resample import read_example_stats
from spanbert.tasks.probe_sets import PROBE_SETS


def _tree(rng: np.random.Generator) -> str:
    a, b = rng.choice(PEOPLE, 2)
    return (
        f"( (S (NP-SBJ (NNP {a})) (VP (VBD met) (NP (NNP {b})) (PP (IN in) (NP (NNP {rng.choice(PLACES)})))) (. .)) )\n"
    )


def _semeval(n: int, start: int, rng: np.random.Generator) -> str:
    rows = []
    for i in range(start, start + n):
        a, b = rng.choice(PEOPLE), rng.choice(PLACES)
        label = "Entity-Origin(e1,e2)" if i % 2 else "Other"
        rows.append(f'{i}\t"The <e1>{a}</e1> came from <e2>{b}</e2> ."\n{label}\nComment:\n\n')
    return "".join(rows)


def _gap(n: int, rng: np.random.Generator) -> str:
    rows = []
    for i in range(n):
        a, b = rng.choice(PEOPLE, 2, replace=False)
        text = f"{a} met {b} . She smiled ."
        first = bool(i % 2)
        rows.append(f"g-{i}\t{text}\tShe\t{text.index('She')}\t{a}\t0\t{'TRUE' if first else 'FALSE'}\t{b}\t"
                    f"{text.index(b, len(a))}\t{'FALSE' if first else 'TRUE'}\thttp://x\n")  # fmt: skip
    return GAP_HEADER + "".join(rows)


def fake_data_root(root: Path) -> Path:
    """Every probe's files at the paths `spanbert probe` reads under a data root, made small."""
    rng = np.random.default_rng(0)
    paths = {p for probe in PROBE_SETS.values() for p in probe.files}
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(("train", "valid", "test")):
        (root / "conll2003" / f"{name}.txt").write_text(toy_conll(30 if name == "train" else 10, seed=k))
    for name in ("train", "dev", "test"):
        (root / "ptb_sample" / name).mkdir(parents=True, exist_ok=True)
        (root / "ptb_sample" / name / "wsj_0001.mrg").write_text("".join(_tree(rng) for _ in range(12)))
    sem = root / "semeval2010_task8"
    (sem / "SemEval2010_task8_training" / "TRAIN_FILE.TXT").write_text(_semeval(40, 1, rng))
    (sem / "SemEval2010_task8_testing_keys" / "TEST_FILE_FULL.TXT").write_text(_semeval(10, 41, rng))
    for name in ("development", "validation", "test"):
        (root / "gap_coreference" / f"gap-{name}.tsv").write_text(_gap(16 if name == "development" else 6, rng))
    docs = {}
    for d in range(6):
        a, b = (str(x) for x in rng.choice(PEOPLE, 2, replace=False))
        sentences = [
            [(a, "(0)"), ("met", "-"), (b, "(1)"), (".", "-")],
            [("She", "(0)"), ("liked", "-"), ("him", "(1)")],
        ]
        docs[f"d{d}"] = _coref_doc(f"d{d}", sentences)
    ids = _litbank(root / "litbank_coref", docs)
    for split, names in (("train", "d0 d1 d2 d3"), ("dev", "d4"), ("test", "d5")):
        (ids.parent / f"{split}.ids").write_text("".join(f"{n}.tsv\n" for n in names.split()))
    return root


RUN = ["--max_train_examples", "40", "--max_eval_examples", "20", "--num_train_epochs", "2", "--disable_tqdm",
       "--device", "cpu", "--learning_rate", "5e-3"]  # fmt: skip


def test_the_set_makes_one_table_and_a_second_run_keeps_it(probe_files, tmp_path, capsys):  # noqa: F811
    data = fake_data_root(tmp_path / "data")
    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = ["probe", "--model", str(probe_files["encoder"]), "--data_root", str(data), "--output_dir", str(out),
            "--features_cache", str(cache), "--probes", "entities,relations", *RUN]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| entities |" in text and "| relations |" in text and "context (test: all - layer 0)" in text
    assert "next:" in text and "spanbert finetune probe --probe entities" in text
    results = json.loads((out / "results.json").read_text())["results"]
    assert [(r["probe"], r["layers"]) for r in results] == [("entities", "all"), ("entities", "0"), ("relations", "all"),
                                                            ("relations", "0")]  # fmt: skip
    for r in results:
        cell = out / r["probe"] / r["layers"]
        assert read_example_stats(cell / "test_example_stats.json").score() == pytest.approx(r["test"])
        assert r["dev"] == json.loads((cell / "dev_results.json").read_text())["f1"]
    assert (out / "table.md").read_text() in text
    assert len(list(cache.iterdir())) == 6  # train, dev (carved for relations) and test of each: shared by the rows
    # a second run keeps the finished runs (nothing is trained again)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("dev_results.json")}
    assert main(argv) == 0
    assert "finished before, kept" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in out.rglob("dev_results.json")}


@pytest.mark.slow
def test_every_probe_of_the_set_runs(probe_files, tmp_path, capsys):  # noqa: F811
    data = fake_data_root(tmp_path / "data")
    assert main(["probe", "--model", str(probe_files["encoder"]), "--data_root", str(data), "--output_dir",
                 str(tmp_path / "out"), "--features_cache", str(tmp_path / "cache"), "--layers", "all", *RUN]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert all(f"| {name} |" in text for name in PROBE_SETS)


def test_missing_data_and_bad_lists_are_refused_before_any_work(probe_files, tmp_path, cli_error):  # noqa: F811
    model = str(probe_files["encoder"])
    out = tmp_path / "out"
    cli_error(["probe", "--model", model, "--data_root", str(tmp_path / "nowhere"), "--output_dir", str(out)],
              contains="--data_root: found no", out=tmp_path)  # fmt: skip
    assert not out.exists()
    data = fake_data_root(tmp_path / "data")
    cli_error(["probe", "--model", model, "--data_root", str(data), "--probes", "entities,ner"],
              contains="--probes: found 'ner', expected a comma list of: entities")  # fmt: skip
    cli_error(
        ["probe", "--model", model, "--data_root", str(data), "--layers", "all,6"], contains="--layers: found '6'"
    )
    cli_error(
        ["probe", "--model", str(tmp_path / "no-model"), "--data_root", str(data)], contains="--model: found no folder"
    )


def test_help_loads_no_torch():
    seen = _modules_after(["probe", "--help"])
    assert seen["code"] == 0 and seen["help"].startswith("usage: spanbert probe"), seen
    light = {"spanbert.tasks.probe_command", "spanbert.tasks.probe_options", "spanbert.tasks.probe_sets"}
    assert not seen["torch"] and set(seen["tasks"]) <= light, seen


def test_the_help_is_built_from_the_options_the_command_runs_with(capsys):
    from spanbert import cli
    from spanbert.tasks.probe_options import ProbeRun

    # one parser: the command line is parsed into ProbeRun once, in the CLI, and run_probes takes the object
    assert cli.TYPED_COMMANDS["probe"] == ("spanbert.tasks.probe_options", "ProbeRun") and "probe" in cli.COMPUTE
    assert cli.COMMANDS["probe"][:2] == ("spanbert.tasks.probe_command", "run_probes") and "probe" not in cli.HELP_PARSERS
    with pytest.raises(SystemExit):
        cli.main(["probe", "--help"])
    text = capsys.readouterr().out
    assert "--data_root" in text and text.rstrip().endswith(ProbeRun.HELP[1].splitlines()[-1].strip())
