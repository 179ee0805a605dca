"""Every command that writes keeps the output contract (issue 30, audit items 1-3): an output path that
is a file where a folder is needed (or the reverse), that lies under a file, a folder of someone else's
files where the command owns its folder, or a location that cannot be written is one ``error:`` line
naming the path, exit 2, before any work (no model read, no data featurized, no vocabulary trained), and
the disk is left exactly as it was.

The checks themselves are `spanbert.utils.check_output` (unit tests: test_output.py); this file runs each
command through the CLI against each case. The inputs are the tiny models of test_malformed_tasks.py;
no case gets as far as reading them (`_no_work` makes sure), so the whole file runs in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_malformed_tasks import CONLL, SQUAD, SST, TACRED, models  # noqa: F401 - models is the fixture

from spanbert import utils

# What each command writes: "owned" a folder it owns as a whole (a run, a corpus, a vocabulary, a study),
# "file" one file, "collect" a folder it adds files of its own names to (GLUE submission TSVs).
TASKS = ("squad", "mrqa", "tacred", "semeval", "glue", "ner", "coref", "swag", "parse")
KINDS = {
    "tokenizer train": "owned", "preprocess": "owned", "pretrain": "owned", "pretrain cloze": "owned",
    **{f"finetune {t}": "owned" for t in TASKS},
    "finetune ner --features": "owned", "study": "owned", "study --dry-run": "owned", "curve": "owned",
    "study --write_config": "file", "predict squad --null_odds": "file",
    **{f"predict {t}": "file" for t in TASKS if t != "glue"},
    "predict glue": "collect",
}  # fmt: skip

FT = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu"]


def _inputs(t: Path) -> dict[str, Path]:
    """Small input files; no case reads them (the output is refused first), but each command gets the
    inputs it would need, so that only the output is wrong."""
    import json

    t.mkdir(parents=True, exist_ok=True)
    files = {
        "text": "corpus.txt", "squad": "squad.json", "mrqa": "mrqa.jsonl", "tacred": "tacred.json",
        "semeval": "semeval.txt", "conll": "ner.conll", "coref": "coref.conll", "swag": "swag.csv",
        "trees": "trees.mrg",
    }  # fmt: skip
    paths = {k: t / v for k, v in files.items()}
    paths["text"].write_text("Alice was born in Paris .\n\nBruno plays the violin .\n" * 3)
    paths["squad"].write_text(json.dumps(SQUAD))
    paths["mrqa"].write_text('{"header": {"dataset": "X", "split": "dev"}}\n')
    paths["tacred"].write_text(json.dumps(TACRED))
    paths["semeval"].write_text('1\t"The <e1>child</e1> was carried into the <e2>cradle</e2>."\nOther\nComment:\n\n')
    paths["conll"].write_text(CONLL)
    paths["coref"].write_text("#begin document (d); part 000\nd 0 0 Alice NNP - - - - - (0)\n\n#end document\n")
    endings = ",".join(f"ending{k}" for k in range(4))
    paths["swag"].write_text(f"video-id,fold-ind,startphrase,sent1,sent2,gold-source,{endings},label\n")
    paths["trees"].write_text("(TOP (S (NP (NNP Alice)) (VP (VBD slept)) (. .)))\n")
    sst = t / "SST-2"
    sst.mkdir(exist_ok=True)
    (sst / "train.tsv").write_text(SST)
    (sst / "dev.tsv").write_text(SST)
    (sst / "test.tsv").write_text("index\tsentence\n0\tit is good\n")
    paths["sst"] = sst
    return paths


def _study_file(t: Path, m: dict) -> Path:
    f = t / "study.yaml"
    f.write_text(
        f"systems: [{{name: enc, checkpoint: {m['enc']}}}]\nseeds: 1\n"
        f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {t / 'SST-2'}, learning_rates: [1e-4]}}\n"
    )
    return f


def _argv(name: str, t: Path, m: dict, out: Path) -> list:
    """The command line of ``name`` writing to ``out``, its inputs under ``t``, its models ``m``."""
    i = _inputs(t)

    def finetune(task: str, *args) -> list:
        return ["finetune", task, "--model", m["enc"], *args, "--output_dir", out, *FT]

    def predict(task: str, model: str, data: str, *args) -> list:
        return ["predict", task, "--model", m[model], "--data", i[data], *args, "--device", "cpu"]

    study = _study_file(t, m)
    return {
        "tokenizer train": ["tokenizer", "train", "--corpus", i["text"], "--vocab_size", "120", "--output_dir", out],
        "preprocess": ["preprocess", "--corpus", i["text"], "--tokenizer", m["enc"], "--output_dir", out, "--quiet"],
        "pretrain": ["pretrain", "--corpus", i["text"], "--output_dir", out, *FT],
        "pretrain cloze": ["pretrain", "--system", "cloze", "--model", "tiny", "--corpus", i["text"], "--output_dir",
                           out, *FT],
        "finetune squad": finetune("squad", "--train_file", i["squad"]),
        "finetune mrqa": finetune("mrqa", "--train_file", i["mrqa"]),
        "finetune tacred": finetune("tacred", "--train", i["tacred"]),
        "finetune semeval": finetune("semeval", "--train", i["semeval"]),
        "finetune glue": finetune("glue", "--task", "SST-2", "--data_dir", i["sst"]),
        "finetune ner": finetune("ner", "--train", i["conll"]),
        "finetune ner --features": finetune("ner", "--train", i["conll"], "--features", "last_hidden"),
        "finetune coref": finetune("coref", "--train", i["coref"]),
        "finetune swag": finetune("swag", "--train", i["swag"]),
        "finetune parse": finetune("parse", "--train", i["trees"]),
        "study": ["study", study, "--output_dir", out],
        "study --dry-run": ["study", study, "--dry-run", "--probe_steps", "0", "--output_dir", out],
        "curve": ["curve", t / "run", "--task", "glue", "--glue_task", "SST-2", "--train", i["sst"],
                  "--output_dir", out],
        "study --write_config": ["study", "--preset", "table1", "--write_config", out],
        "predict squad": predict("squad", "qa", "squad", "--output", out),
        # --null_odds first: argparse checks the options in the order given
        "predict squad --null_odds": predict("squad", "qa", "squad", "--null_odds", out, "--output", t / "p.json"),
        "predict mrqa": predict("mrqa", "qa", "mrqa", "--output", out),
        "predict tacred": predict("tacred", "tacred", "tacred", "--output", out),
        "predict semeval": predict("semeval", "tacred", "semeval", "--output", out),
        "predict ner": predict("ner", "ner", "conll", "--output", out),
        "predict coref": predict("coref", "enc", "coref", "--output", out),
        "predict swag": predict("swag", "enc", "swag", "--output", out),
        "predict parse": predict("parse", "enc", "trees", "--output", out),
        "predict glue": ["predict", "glue", "--task", "SST-2", "--data_dir", i["sst"], "--model", m["sst2"],
                         "--output_dir", out, "--device", "cpu"],
    }[name]  # fmt: skip


# case -> (the kinds it applies to, what the message says)
CASES = {
    "a file": (("owned", "collect"), "found a file, expected a folder for the output"),
    "a folder": (("file",), "found a folder, expected a file name for the output"),
    "under a file": (("owned", "collect", "file"), "found a file at"),
    "a folder of other files": (("owned",), "found a folder holding other files (notes.txt)"),
    "unwritable": (("owned", "collect", "file"), "not writable (no permission, or a read-only file system); expected a writable location"),
}

PARAMS = [
    pytest.param(name, case, id=f"{name}-{case}".replace(" ", "_"))
    for name, kind in KINDS.items()
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
def test_every_command_refuses_a_bad_output_before_any_work(
    tmp_path, models, cli_error, monkeypatch, _no_work, name, case  # noqa: F811 - models is the imported fixture
):
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("keep me too\n")
    (tmp_path / "adir").mkdir()
    out = {"a file": afile, "a folder": tmp_path / "adir", "under a file": afile / "x",
           "a folder of other files": notes, "unwritable": tmp_path / "ro" / "out"}[case]  # fmt: skip
    (tmp_path / "ro").mkdir()
    argv = _argv(name, tmp_path / "in", models, out)
    if case == "unwritable":
        # tests run as root, who may write anywhere but a read-only mount: the refusal is simulated where
        # the check asks the system (as test_output.py does)
        monkeypatch.setattr(utils, "writable", lambda folder: False)
    err = cli_error(argv, names=f"{out}: ", contains=CASES[case][1], out=tmp_path)
    assert len(err.strip().splitlines()) == 1, err  # one line, nothing else
    assert afile.read_text() == "keep me\n" and (notes / "notes.txt").read_text() == "keep me too\n"
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"] and not any((tmp_path / "ro").iterdir())


def test_every_command_that_writes_is_covered():
    """A command or a task added to the CLI must be added here: every task's finetune and every task's predict
    that writes a file."""
    from spanbert.cli import COMMANDS as CLI_COMMANDS
    from spanbert.cli import TASKS

    covered = {name.split(" --")[0] for name in KINDS}
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
