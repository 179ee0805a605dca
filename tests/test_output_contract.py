"""Every command that writes keeps the output contract (issue 30, audit items 1-3): an output path that
is a file where a folder is needed (or the reverse), that lies under a file, a folder of someone else's
files where the command owns its folder, or a location that cannot be written is one ``error:`` line
naming the path, exit 2, before any work (no model read, no data featurized, no vocabulary trained), and
the disk is left exactly as it was.

The checks themselves are `spanbert.utils.check_output` (unit tests: test_output.py); this file runs each
command through the CLI against each case. The inputs are the tiny models of test_malformed_tasks.py;
no case gets as far as reading them (`_no_work` makes sure), so the whole file runs in seconds."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from test_malformed_tasks import CONLL, SQUAD, SST, TACRED, models  # noqa: F401 - models is the fixture

# What a command writes: "owned" a folder it owns as a whole (a run, a corpus, a vocabulary, a study),
# "file" one file, "collect" a folder it adds files of its own names to (GLUE submission TSVs).
Build = Callable[[Path, dict, Path], list]

FT = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu"]


def _inputs(t: Path) -> dict[str, Path]:
    """Small input files; no case reads them (the output is refused first), but each command gets the
    inputs it would need, so that only the output is wrong."""
    import json

    t.mkdir(parents=True, exist_ok=True)
    files = {
        "text": "corpus.txt", "squad": "squad.json", "mrqa": "mrqa.jsonl", "tacred": "tacred.json",
        "semeval": "semeval.txt", "conll": "ner.conll", "coref": "coref.conll", "swag": "swag.csv", "trees": "trees.mrg",
    }  # fmt: skip
    paths = {k: t / v for k, v in files.items()}
    paths["text"].write_text("Alice was born in Paris .\n\nBruno plays the violin .\n" * 3)
    paths["squad"].write_text(json.dumps(SQUAD))
    paths["mrqa"].write_text('{"header": {"dataset": "X", "split": "dev"}}\n')
    paths["tacred"].write_text(json.dumps(TACRED))
    paths["semeval"].write_text('1\t"The <e1>child</e1> was carried into the <e2>cradle</e2>."\nOther\nComment:\n\n')
    paths["conll"].write_text(CONLL)
    paths["coref"].write_text("#begin document (d); part 000\nd 0 0 Alice NNP - - - - - (0)\n\n#end document\n")
    paths["swag"].write_text("video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n")
    paths["trees"].write_text("(TOP (S (NP (NNP Alice)) (VP (VBD slept)) (. .)))\n")
    sst = t / "SST-2"
    sst.mkdir(exist_ok=True)
    (sst / "train.tsv").write_text(SST)
    (sst / "dev.tsv").write_text(SST)
    (sst / "test.tsv").write_text("index\tsentence\n0\tit is good\n")
    paths["sst"] = sst
    return paths


def _study_file(t: Path, m: dict) -> Path:
    _inputs(t)
    f = t / "study.yaml"
    f.write_text(
        f"systems: [{{name: enc, checkpoint: {m['enc']}}}]\nseeds: 1\n"
        f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {t / 'SST-2'}, learning_rates: [1e-4]}}\n"
    )
    return f


def _finetune(task: str, *args) -> Build:
    return lambda t, m, out: ["finetune", task, "--model", m["enc"], *args, "--output_dir", out, *FT]


def _f(t: Path, key: str) -> Path:
    return _inputs(t)[key]


# name -> (what it writes, argv given the tmp folder, the models and the output path)
COMMANDS: dict[str, tuple[str, Build]] = {
    "tokenizer train": ("owned", lambda t, m, out: ["tokenizer", "train", "--corpus", _f(t, "text"), "--vocab_size", "120",
                                                    "--output_dir", out]),
    "preprocess": ("owned", lambda t, m, out: ["preprocess", "--corpus", _f(t, "text"), "--tokenizer", m["enc"],
                                               "--output_dir", out, "--quiet"]),
    "pretrain": ("owned", lambda t, m, out: ["pretrain", "--corpus", _f(t, "text"), "--output_dir", out, *FT]),
    "pretrain cloze": ("owned", lambda t, m, out: ["pretrain", "--system", "cloze", "--model", "tiny", "--corpus", _f(t, "text"),
                                                   "--output_dir", out, *FT]),
    "finetune squad": ("owned", lambda t, m, out: _finetune("squad", "--train_file", _f(t, "squad"))(t, m, out)),
    "finetune mrqa": ("owned", lambda t, m, out: _finetune("mrqa", "--train_file", _f(t, "mrqa"))(t, m, out)),
    "finetune tacred": ("owned", lambda t, m, out: _finetune("tacred", "--train", _f(t, "tacred"))(t, m, out)),
    "finetune semeval": ("owned", lambda t, m, out: _finetune("semeval", "--train", _f(t, "semeval"))(t, m, out)),
    "finetune glue": ("owned", lambda t, m, out: _finetune("glue", "--task", "SST-2", "--data_dir", _f(t, "sst"))(t, m, out)),
    "finetune ner": ("owned", lambda t, m, out: _finetune("ner", "--train", _f(t, "conll"))(t, m, out)),
    "finetune ner --features": ("owned", lambda t, m, out: _finetune("ner", "--train", _f(t, "conll"),
                                                                     "--features", "last_hidden")(t, m, out)),
    "finetune coref": ("owned", lambda t, m, out: _finetune("coref", "--train", _f(t, "coref"))(t, m, out)),
    "finetune swag": ("owned", lambda t, m, out: _finetune("swag", "--train", _f(t, "swag"))(t, m, out)),
    "finetune parse": ("owned", lambda t, m, out: _finetune("parse", "--train", _f(t, "trees"))(t, m, out)),
    "study": ("owned", lambda t, m, out: ["study", _study_file(t, m), "--output_dir", out]),
    "study --dry-run": ("owned", lambda t, m, out: ["study", _study_file(t, m), "--dry-run",
                                                    "--probe_steps", "0", "--output_dir", out]),
    "curve": ("owned", lambda t, m, out: ["curve", t / "run", "--task", "glue", "--glue_task", "SST-2",
                                          "--train", _f(t, "sst"), "--output_dir", out]),
    "study --write_config": ("file", lambda t, m, out: ["study", "--preset", "table1", "--write_config", out]),
    "predict squad": ("file", lambda t, m, out: ["predict", "squad", "--model", m["qa"], "--data", _f(t, "squad"),
                                                 "--output", out, "--device", "cpu"]),
    "predict squad --null_odds": ("file", lambda t, m, out: ["predict", "squad", "--model", m["qa"], "--data",
                                                             _f(t, "squad"), "--null_odds", out, "--output",
                                                             t / "p.json", "--device", "cpu"]),
    "predict mrqa": ("file", lambda t, m, out: ["predict", "mrqa", "--model", m["qa"], "--data", _f(t, "mrqa"),
                                                "--output", out, "--device", "cpu"]),
    "predict tacred": ("file", lambda t, m, out: ["predict", "tacred", "--model", m["tacred"], "--data",
                                                  _f(t, "tacred"), "--output", out, "--device", "cpu"]),
    "predict semeval": ("file", lambda t, m, out: ["predict", "semeval", "--model", m["tacred"], "--data",
                                                   _f(t, "semeval"), "--output", out, "--device", "cpu"]),
    "predict ner": ("file", lambda t, m, out: ["predict", "ner", "--model", m["ner"], "--data", _f(t, "conll"),
                                               "--output", out, "--device", "cpu"]),
    "predict coref": ("file", lambda t, m, out: ["predict", "coref", "--model", m["enc"], "--data", _f(t, "coref"),
                                                 "--output", out, "--device", "cpu"]),
    "predict swag": ("file", lambda t, m, out: ["predict", "swag", "--model", m["enc"], "--data", _f(t, "swag"),
                                                "--output", out, "--device", "cpu"]),
    "predict parse": ("file", lambda t, m, out: ["predict", "parse", "--model", m["enc"], "--data", _f(t, "trees"),
                                                 "--output", out, "--device", "cpu"]),
    "predict glue": ("collect", lambda t, m, out: ["predict", "glue", "--task", "SST-2", "--data_dir", _f(t, "sst"),
                                                   "--model", m["sst2"], "--output_dir", out, "--device", "cpu"]),
}  # fmt: skip

# case -> (the kinds it applies to, what the message says)
CASES = {
    "a file": (("owned", "collect"), "found a file, expected a folder for the output"),
    "a folder": (("file",), "found a folder, expected a file name for the output"),
    "under a file": (("owned", "collect", "file"), "found a file at"),
    "a folder of other files": (("owned",), "found a folder holding other files (notes.txt)"),
    "unwritable": (("owned", "collect", "file"), "not writable (Permission denied); expected a writable location"),
}

PARAMS = [
    pytest.param(name, case, id=f"{name}-{case}".replace(" ", "_"))
    for name, (kind, _) in COMMANDS.items()
    for case, (kinds, _) in CASES.items()
    if kind in kinds
]


@pytest.fixture
def _no_work(monkeypatch):
    """Reading a model, training or training a vocabulary is a failure of this test: every case must be
    refused before any of them."""

    def work(*a, **k):
        raise AssertionError("the command began its work before checking its output")

    from spanbert import families, pretrain, tokenization, trainer

    for module, name in [(families, "load_encoder"), (families, "load_checkpoint"), (trainer, "train"),
                         (pretrain, "train"), (pretrain, "prepare_data"), (tokenization, "count_words")]:  # fmt: skip
        monkeypatch.setattr(module, name, work)


@pytest.mark.parametrize("name, case", PARAMS)
def test_every_command_refuses_a_bad_output_before_any_work(tmp_path, models, cli_error, monkeypatch, _no_work, name, case):  # noqa: F811
    kind, build = COMMANDS[name]
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("keep me too\n")
    (tmp_path / "adir").mkdir()
    out = {"a file": afile, "a folder": tmp_path / "adir", "under a file": afile / "x",
           "a folder of other files": notes, "unwritable": tmp_path / "ro" / "out"}[case]  # fmt: skip
    (tmp_path / "ro").mkdir()
    argv = build(tmp_path / "in", models, out)
    if case == "unwritable":
        # tests run as root, who may write anywhere but a read-only mount: the refusal is simulated where
        # the check asks the system, creating a file there (as test_output.py does)
        def refuse(*a, **k):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    err = cli_error(argv, names=f"{out}: ", contains=CASES[case][1], out=tmp_path)
    assert len(err.strip().splitlines()) == 1, err  # one line, nothing else
    assert afile.read_text() == "keep me\n" and (notes / "notes.txt").read_text() == "keep me too\n"
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"] and not any((tmp_path / "ro").iterdir())


def test_every_command_that_writes_is_covered():
    """A command or a task added to the CLI must be added here: every task's finetune and every task's predict
    that writes a file."""
    from spanbert.cli import COMMANDS as CLI_COMMANDS
    from spanbert.cli import TASKS

    covered = {name.split(" --")[0] for name in COMMANDS}
    assert {f"finetune {t}" for t in TASKS} <= covered
    assert {f"predict {t}" for t in TASKS} <= covered
    writers = {"tokenizer": "tokenizer train", "preprocess": "preprocess", "pretrain": "pretrain", "study": "study",
               "curve": "curve"}  # fmt: skip
    readers = {"fill", "finetune", "predict", "evaluate"}  # evaluate prints its scores; fill prints its guesses
    assert set(CLI_COMMANDS) == set(writers) | readers
    assert set(writers.values()) <= covered


def test_a_run_folder_with_the_users_notes_beside_it_is_still_that_run(tmp_path):
    """The training folder's rule ("ours"): any file a run writes makes it a run folder, so an earlier run
    with the user's notes beside it is refused as an earlier run (pass --resume / --overwrite_output_dir),
    and a run killed before its first checkpoint (only its log) may start again; the notes stay."""
    from spanbert.errors import SpanBertError
    from spanbert.trainer import TrainingArguments, check_output_dir

    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine\n")
    (run / "log.jsonl").write_text("")
    check_output_dir(TrainingArguments(output_dir=str(run)))  # a killed run's log: accepted
    (run / "latest").write_text("checkpoint-1\n")
    with pytest.raises(SpanBertError, match="found a latest pointer of an earlier run"):
        check_output_dir(TrainingArguments(output_dir=str(run)))
    check_output_dir(TrainingArguments(output_dir=str(run), resume=True))
    check_output_dir(TrainingArguments(output_dir=str(run), overwrite_output_dir=True))
    # a folder of only other files is refused whatever the flags: there is no run to resume or start over
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    for flags in ({}, {"resume": True}, {"overwrite_output_dir": True}):
        with pytest.raises(SpanBertError, match=r"found a folder holding other files \(notes.txt\)"):
            check_output_dir(TrainingArguments(output_dir=str(tmp_path / "mine"), **flags))


def test_predict_glue_adds_its_files_beside_others(tmp_path):
    """A folder that collects a command's files (GLUE submission TSVs) may hold other files: only a file
    in the way and an unwritable place are refused there."""
    from spanbert.errors import SpanBertError
    from spanbert.utils import output_folder

    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "notes.txt").write_text("x")
    assert output_folder(str(tmp_path / "subs")) == str(tmp_path / "subs")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SpanBertError, match="found a file, expected a folder"):
        output_folder(str(tmp_path / "afile"))
