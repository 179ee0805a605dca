"""Every command that writes keeps the output contract (docs/reliability.md, "Nothing the user owns is
lost"): an output path that is a file where a folder is needed (or the reverse), that lies under a file, a
folder of someone else's files where the command owns its folder (with or without --overwrite_output_dir),
another command's output, a location that cannot be written, an output that is one of the command's
inputs, lies inside one or holds one, or a folder another command is writing now, is one ``error:`` line
naming the path, exit 2, before any work (no model read, no data featurized, no vocabulary trained), and
the disk is left exactly as it was. A full disk at the command's first write is one ``error:`` line naming
the output, and the disk is as it was.

The checks themselves are `spanbert.utils.check_output` and `spanbert.folders` (unit tests: test_utils.py, test_folders.py);
this file runs each command through the CLI against each case, and reads a model folder of every family
with a damaged config.json. The inputs are the tiny models of test_malformed_tasks.py (and one fine-tuning
step each of the tasks whose predict needs its own model); no refused case gets as far as reading them
(`_no_work` makes sure). The file runs in about two minutes on two cores, most of it the other processes
that hold a folder's lock."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_malformed_tasks import CONLL, MRQA_HEADER, MRQA_LINE, SEMEVAL, SQUAD, SST, TACRED, models  # noqa: F401

from spanbert import folders, utils
from spanbert.folders import MANIFEST, claim_manifest, record

# What each command writes: "owned" a folder it owns as a whole (a run, a corpus, a vocabulary, a study),
# "file" one file, "collect" a folder it adds files of its own names to (GLUE submission TSVs).
TASKS = ("squad", "mrqa", "tacred", "semeval", "glue", "ner", "coref", "swag", "parse", "probe")
KINDS = {
    "tokenizer train": "owned", "preprocess": "owned", "pretrain": "owned", "pretrain cloze": "owned",
    **{f"finetune {t}": "owned" for t in TASKS},
    "finetune ner --features": "owned", "study": "owned", "study --dry-run": "owned", "curve": "owned", "probe": "owned",
    "study --write_config": "file", "predict squad --null_odds": "file",
    **{f"predict {t}": "file" for t in TASKS if t != "glue"},
    "predict glue": "collect",
}  # fmt: skip
TRAINS = {"pretrain", "pretrain cloze", "finetune ner --features", *(f"finetune {t}" for t in TASKS)}
"""The commands that train: a run folder, --overwrite_output_dir, a manifest of kind run."""
OWNER = {"tokenizer train": "tokenizer", "preprocess": "corpus", "study": "study", "study --dry-run": "study",
         "curve": "study", "probe": "run", **{name: "run" for name in TRAINS}}  # fmt: skip
"""The kind of output (`spanbert.folders.KINDS`) of each command that owns its folder."""
READS_NOTHING = {"study --write_config"}  # writes a preset as YAML: no input to collide with
WRITES_NOTHING = {"study --dry-run"}  # plans into its folder, writes nothing there: no lock, no full disk
NO_FULL_DISK = {"predict squad --null_odds"}  # written for SQuAD 2.0 only, by the writer of --output (predict squad's)

FT = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu"]
ENDINGS = ",".join(f"ending{k}" for k in range(4))


def _inputs(t: Path) -> dict[str, Path]:
    """Small valid inputs of every command (the corpus as a folder, so that an output can lie inside it).
    A refused case reads none of them; a full disk lets the command work up to its first write."""
    t.mkdir(parents=True, exist_ok=True)
    files = {
        "squad": "squad.json", "mrqa": "mrqa.jsonl", "tacred": "tacred.json", "semeval": "semeval.txt",
        "conll": "ner.conll", "coref": "coref.conll", "swag": "swag.csv", "trees": "trees.mrg",
    }  # fmt: skip
    paths = {k: t / v for k, v in files.items()}
    paths["texts"] = t / "texts"
    paths["texts"].mkdir(exist_ok=True)
    (paths["texts"] / "corpus.txt").write_text("Alice was born in Paris .\n\nBruno plays the violin .\n" * 3)
    paths["squad"].write_text(json.dumps(SQUAD))
    paths["mrqa"].write_text(json.dumps(MRQA_HEADER) + "\n" + json.dumps(MRQA_LINE) + "\n")
    paths["tacred"].write_text(json.dumps(TACRED))
    paths["semeval"].write_text(SEMEVAL)
    paths["conll"].write_text(CONLL)
    paths["coref"].write_text("#begin document (d); part 000\nd 0 0 Alice NNP - - - - - (0)\nd 0 1 slept VBD - - - - - -\n"
                              "\nd 0 0 She PRP - - - - - (0)\nd 0 1 sang VBD - - - - - -\n\n#end document\n")  # fmt: skip
    paths["swag"].write_text(f",video-id,fold-ind,startphrase,sent1,sent2,gold-source,{ENDINGS},label\n"
                             "0,v,1,Alice was born,Alice,was born,gold,in Paris.,in a car.,on a boat.,at home.,0\n")  # fmt: skip
    paths["trees"].write_text("(TOP (S (NP (NNP Alice)) (VP (VBD slept)) (. .)))\n")
    paths["probe_root"] = t / "probe-data"  # what `spanbert probe --probes entities` reads under its --data_root
    (paths["probe_root"] / "conll2003").mkdir(parents=True, exist_ok=True)
    for name in ("train", "valid", "test"):
        (paths["probe_root"] / "conll2003" / f"{name}.txt").write_text(CONLL)
    sst = t / "SST-2"
    sst.mkdir(exist_ok=True)
    (sst / "train.tsv").write_text(SST)
    (sst / "dev.tsv").write_text(SST)
    (sst / "test.tsv").write_text("index\tsentence\n0\tit is good\n")
    paths["sst"] = sst
    return paths


def _pretraining_run(t: Path, m: dict) -> Path:
    """What `spanbert curve` reads: a finished pre-training run (final/ and a complete checkpoint)."""
    run = t / "run"
    if not run.exists():
        shutil.copytree(m["enc"], run / "final")
        (run / "checkpoint-1").mkdir()
        torch.save({"model": {}}, run / "checkpoint-1" / "state.pt")
        (run / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1}')
    return run


def _study_file(t: Path, m: dict) -> Path:
    f = t / "study.yaml"
    f.write_text(
        f"systems: [{{name: enc, checkpoint: {m['enc']}}}]\nseeds: 1\n"
        f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {t / 'SST-2'}, learning_rates: [1e-4]}}\n"
    )
    return f


# predict <task>: the model it reads (`task_models`) and the data option's input
PREDICT = {"squad": ("qa", "squad"), "mrqa": ("qa", "mrqa"), "tacred": ("tacred", "tacred"), "semeval": ("semeval", "semeval"),
           "ner": ("ner", "conll"), "coref": ("coref", "coref"), "swag": ("swag", "swag"), "parse": ("parse", "trees"),
           "probe": ("probe", "conll")}  # fmt: skip


def _argv(name: str, t: Path, m: dict, out: Path) -> list:
    """The command line of ``name`` writing to ``out``, its inputs under ``t``, its models ``m``."""
    i = _inputs(t)

    def finetune(task: str, *args) -> list:
        return ["finetune", task, "--model", m["enc"], *args, "--output_dir", out, *FT]

    def predict(task: str, *args) -> list:
        model, data = PREDICT[task]
        # the dict below is built whole: a command line of a model ``m`` lacks is never the one returned
        return ["predict", task, "--model", m.get(model, m["enc"]), "--data", i[data], *args, "--device", "cpu",
                "--disable_tqdm"]  # fmt: skip

    study = _study_file(t, m)
    return {
        "tokenizer train": ["tokenizer", "train", "--corpus", i["texts"], "--vocab_size", "120", "--output_dir", out],
        "preprocess": ["preprocess", "--corpus", i["texts"], "--tokenizer", m["enc"], "--output_dir", out, "--quiet"],
        "pretrain": ["pretrain", "--corpus", i["texts"], "--output_dir", out, *FT],
        "pretrain cloze": ["pretrain", "--system", "cloze", "--model", "tiny", "--corpus", i["texts"], "--output_dir",
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
        "finetune probe": finetune("probe", "--probe", "entities", "--train", i["conll"], "--dev", i["conll"],
                                   "--features_cache", t / "probe-cache"),
        "probe": ["probe", "--model", m["enc"], "--data_root", i["probe_root"], "--output_dir", out, "--probes", "entities",
                  "--layers", "0", "--features_cache", t / "probe-cache", "--max_train_examples", "2",
                  "--num_train_epochs", "1", "--device", "cpu", "--disable_tqdm"],
        "study": ["study", study, "--output_dir", out],
        "study --dry-run": ["study", study, "--dry-run", "--probe_steps", "0", "--output_dir", out],
        "curve": ["curve", _pretraining_run(t, m), "--task", "glue", "--glue_task", "SST-2", "--train", i["sst"],
                  "--output_dir", out],
        "study --write_config": ["study", "--preset", "table1", "--write_config", out],
        # --null_odds first: argparse checks the options in the order given
        "predict squad --null_odds": predict("squad", "--null_odds", out, "--output", t / "p.json"),
        **{f"predict {task}": predict(task, "--output", out) for task in PREDICT},
        "predict glue": ["predict", "glue", "--task", "SST-2", "--data_dir", i["sst"], "--model", m["sst2"],
                         "--output_dir", out, "--device", "cpu", "--disable_tqdm"],
    }[name]  # fmt: skip


def _reads(name: str, t: Path, m: dict) -> tuple[Path, Path, Path, str]:
    """What ``name`` reads, for the cases against its inputs: (a folder it reads, the input an output of its
    kind can equal, an output inside an input, what the refusal of that one says). A folder read whole (a
    corpus, a GLUE folder) takes nothing inside it; a model folder, read by name, takes a predictions file
    beside its files but nothing named like one of them."""
    i = _inputs(t)
    whole, model = "found the output inside the input folder", "found the output over a file of the model folder"
    if name.startswith("predict ") and name != "predict glue":
        model_dir, data = PREDICT[name.split()[1]]
        return Path(m[model_dir]), i[data], Path(m[model_dir]) / "config.json", model
    if name in ("tokenizer train", "preprocess", "pretrain", "pretrain cloze"):
        return i["texts"], i["texts"], i["texts"] / "sub", whole
    if name == "finetune glue":
        return i["sst"], i["sst"], i["sst"] / "sub", whole
    if name == "probe":  # its --data_root, read whole
        return i["probe_root"], i["probe_root"], i["probe_root"] / "sub", whole
    if name.startswith("finetune "):
        return Path(m["enc"]), Path(m["enc"]), Path(m["enc"]) / "config.json", model
    return i["sst"], i["sst"], i["sst"] / "sub", whole  # the GLUE folder of the study, the curve and predict glue


@pytest.fixture(scope="module")
def task_models(models, tmp_path_factory) -> dict[str, Path]:  # noqa: F811 - models is the imported fixture
    """The tiny models of test_malformed_tasks.py and a coreference, SWAG, parsing and SemEval model (one
    fine-tuning step each): a model every `predict` reads, so that a full disk lets each predict to the end."""
    from spanbert.cli import main

    root = tmp_path_factory.mktemp("task_models")
    i = _inputs(root / "in")
    out = dict(models)
    for task, data in (("coref", "coref"), ("swag", "swag"), ("parse", "trees"), ("semeval", "semeval")):
        out[task] = root / task
        assert main(["finetune", task, "--model", str(models["enc"]), "--train", str(i[data]), "--output_dir",
                     str(out[task]), *FT, "--save_steps", "0"]) == 0  # fmt: skip
    out["probe"] = root / "probe"
    assert main(["finetune", "probe", "--probe", "entities", "--model", str(models["enc"]), "--train", str(i["conll"]),
                 "--dev", str(i["conll"]), "--features_cache", str(root / "probe-cache"), "--output_dir",
                 str(out["probe"]), *FT]) == 0  # fmt: skip
    return out


# case -> (the kinds it applies to, what the message says)
CASES = {
    "a file": (("owned", "collect"), "found a file, expected a folder for the output"),
    "a folder": (("file",), "found a folder, expected a file name for the output"),
    "under a file": (("owned", "collect", "file"), "found a file at"),
    "a folder of other files": (("owned",), "found a folder holding other files (notes.txt)"),
    "unwritable": (("owned", "collect", "file"), "not writable (no permission, or a read-only file system); expected a writable location"),
    "the input itself": (("owned", "collect", "file"), "found the output is the input"),
    "inside an input": (("owned", "collect", "file"), "found the output "),  # `_reads` says the rest
    "around an input": (("owned", "collect"), "inside the output folder, expected an output folder that holds no input"),
    "another command's folder": (("owned",), ", the output of `spanbert "),
    "another writer": (("owned",), "pid "),
    "the user's files, --overwrite_output_dir": (("trains",), "found a folder holding other files (config.json, notes.txt)"),
    "a run with the user's config.json": (("trains",), "found config.json that spanbert did not write"),
}
INPUT_CASES = ("the input itself", "inside an input", "around an input")


def applies(name: str, case: str) -> bool:
    """Whether ``case`` is a case of the command ``name``."""
    kinds = CASES[case][0]
    if case in INPUT_CASES and name in READS_NOTHING:
        return False
    if case == "another writer" and name in WRITES_NOTHING:
        return False
    if kinds == ("trains",):
        return name in TRAINS
    return KINDS[name] in kinds


PARAMS = [
    pytest.param(name, case, id=f"{name}-{case}".replace(" ", "_"))
    for name in KINDS
    for case in CASES
    if applies(name, case)
]


@pytest.fixture
def _no_work(monkeypatch):
    """Reading a model, training or training a vocabulary is a failure of this test: every case must be
    refused before any of them."""

    def work(*a, **k):
        raise AssertionError("the command began its work before checking its output")

    import spanbert.study  # noqa: F401
    import spanbert.tasks.ner_features  # noqa: F401
    from spanbert import families, pretrain, pretrain_data, tokenization, trainer
    from spanbert.tasks import TASKS

    # every command's module imported before the patch: one that binds `train` by name on import (`from
    # spanbert.trainer import train`) must keep the real one for the tests after this one
    for task in TASKS:
        TASKS[task].finetune  # noqa: B018 - loads the task's module

    for module, name in [(families, "load_encoder"), (families, "load_checkpoint"), (trainer, "train"),
                         (pretrain, "train"), (pretrain_data, "prepare_data"), (tokenization, "count_words")]:  # fmt: skip
        monkeypatch.setattr(module, name, work)


def _other_kind(name: str) -> str:
    return "corpus" if OWNER[name] != "corpus" else "run"


HOLDER = """
import sys, time
from spanbert import folders
from spanbert.study.cells import study_lock
folder, kind = sys.argv[1], sys.argv[2]
with (study_lock(folder) if kind == "study" else folders.Claim(folder, kind, "spanbert holder")):
    print("holding", flush=True)
    time.sleep(120)
"""


def _hold(folder: Path, kind: str) -> subprocess.Popen:
    """Another process writing ``folder`` (a command of ``kind``), holding its lock until killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(folders.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), kind], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` with the bytes of each file: what a refused command must leave as it was."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("name, case", PARAMS)
def test_every_command_refuses_a_bad_output_before_any_work(
    tmp_path, task_models, cli_error, monkeypatch, _no_work, name, case
):
    m = task_models
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("keep me too\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "ro").mkdir()
    t = tmp_path / "in"
    folder_in, same_in, inside, inside_says = _reads(name, t, m)
    out = {"a file": afile, "a folder": tmp_path / "adir", "under a file": afile / "x",
           "a folder of other files": notes, "unwritable": tmp_path / "ro" / "out", "the input itself": same_in,
           "inside an input": inside, "around an input": folder_in.parent}.get(case, tmp_path / "out")  # fmt: skip
    extra, holder = [], None
    if case == "another command's folder":
        claim_manifest(out, _other_kind(name), f"spanbert {_other_kind(name)}-maker")
        record(out / "meta.json")
        (out / "meta.json").write_text("{}")
    elif case == "another writer":
        holder = _hold(out, OWNER[name])
    elif case == "the user's files, --overwrite_output_dir":
        out.mkdir()
        (out / "config.json").write_text('{"mine": true}')
        (out / "notes.txt").write_text("keep me\n")
        extra = ["--overwrite_output_dir"]
    elif case == "a run with the user's config.json":
        claim_manifest(out, "run", "spanbert finetune ner")
        (out / "config.json").write_text('{"mine": true}')
        (out / "notes.txt").write_text("keep me\n")
        extra = ["--overwrite_output_dir"]
    argv = _argv(name, t, m, out) + extra
    before = _tree(tmp_path)
    model_before = {k: _tree(Path(v)) for k, v in m.items()}
    if case == "unwritable":
        # tests run as root, who may write anywhere but a read-only mount: the refusal is simulated where
        # the check asks the system (as test_utils.py does)
        monkeypatch.setattr(utils, "writable", lambda folder: False)
    says = inside_says if case == "inside an input" else CASES[case][1]
    try:
        err = cli_error(argv, names=f"{out}: ", contains=says, out=tmp_path)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert len(err.strip().splitlines()) == 1, err  # one line, nothing else
    if holder is not None:
        assert f"pid {holder.pid})" in err, err
        before = {k: v for k, v in before.items() if not k.endswith(folders.LOCK)}  # the killed holder's lock
    after = {k: v for k, v in _tree(tmp_path).items() if not k.endswith(folders.LOCK)}
    assert after == before, "the disk changed"
    assert {k: _tree(Path(v)) for k, v in m.items()} == model_before  # the models read are as they were


# ---------------------------------------------------------------------------------------------
# A full disk: the first write of every command fails; one line names the output, the disk is as it was


@pytest.fixture
def full_disk(tmp_path):
    """A tmpfs mounted under tmp_path and filled to the last byte (root only; skipped where the machine does not
    let a test mount a file system)."""
    where = tmp_path / "full"
    where.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounts a tmpfs: needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("this machine does not let the test mount a file system")
    try:
        with open(where / "filler", "wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _enospc_at_fsync(monkeypatch, under: Path) -> None:
    """Every fsync of a file under ``under`` fails as a full disk does (a file system that reports ENOSPC
    when the data is flushed): the same failure without a mount."""
    real = os.fsync

    def fsync(fd: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if path.startswith(str(under)) and not os.path.isdir(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


FULL = [pytest.param(name, how, id=f"{name}-{how}".replace(" ", "_"))
        for name in KINDS if name not in WRITES_NOTHING | NO_FULL_DISK for how in ("tmpfs", "ENOSPC at fsync")]  # fmt: skip


@pytest.mark.parametrize("name, how", FULL)
def test_a_full_disk_is_one_line_naming_the_output_and_the_disk_as_it_was(
    tmp_path, task_models, cli_error, monkeypatch, request, name, how
):
    """Issue item: a full disk during a save was a traceback (safetensors' SafetensorError, torch's zip writer).
    Each command fails at its first write (a command that owns its folder: when it claims it, before any
    work; a file output: after its predictions), with one line naming its output."""
    if how == "tmpfs":
        where = request.getfixturevalue("full_disk")
    else:
        if not Path("/proc/self/fd").is_dir():
            pytest.skip("finds a file's path through /proc")
        where = tmp_path / "disk"
        where.mkdir()
        _enospc_at_fsync(monkeypatch, where)
    out = where / ("out" if KINDS[name] != "file" else "p.json")
    argv = _argv(name, tmp_path / "in", task_models, out)
    before = _tree(where)
    # the output, or the file of its own that a collecting command (predict glue) was writing into it
    named = f"{out}: " if KINDS[name] != "collect" else f"{out / 'SST-2.tsv'}: "
    err = cli_error(argv, names=named, contains="found no space left on the device", out=where)
    assert len(err.strip().splitlines()) == 1, err
    assert f"{named[:-2]} is left as it was before this write" in err
    assert _tree(where) == before


def test_a_full_disk_during_a_save_leaves_the_saved_model_as_it_was(tmp_path, models, monkeypatch, cli_error):  # noqa: F811
    """A re-save into a run folder that holds an earlier model: safetensors fails for want of space after the
    weights' first bytes (its own error, not an OSError); one line names the folder and the earlier model is
    whole (config.json, weights and tokenizer of the earlier save, no temporary left)."""
    from safetensors import SafetensorError

    from spanbert import checkpoints
    from spanbert.cli import main

    out = tmp_path / "out"
    t = tmp_path / "in"
    assert main([str(a) for a in _argv("finetune ner", t, models, out)] + ["--save_steps", "0"]) == 0
    model = {n: (out / n).read_bytes() for n in ("config.json", "model.safetensors", "vocab.txt")}
    real = checkpoints.save_file

    def full(tensors, filename, metadata=None):
        real(tensors, filename, metadata=metadata)  # the bytes were written, then the disk filled up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(checkpoints, "save_file", full)
    err = cli_error([*_argv("finetune ner", t, models, out), "--save_steps", "0", "--overwrite_output_dir"],
                    names=f"{out}: ", contains="found no space left on the device")  # fmt: skip
    assert len(err.strip().splitlines()) == 1, err
    assert {n: (out / n).read_bytes() for n in model} == model
    assert not [p.name for p in out.iterdir() if folders.is_debris(p.name)]


# ---------------------------------------------------------------------------------------------
# One writer per folder under torchrun: rank 0 holds the lock, a refusal reaches every rank


@pytest.mark.slow
def test_torchrun_holds_one_lock_and_a_second_writer_is_refused(tmp_path, models):  # noqa: F811
    """Two processes (gloo, CPU): rank 0 alone claims the folder (one manifest, no second lock, nothing left
    held after the run); a torchrun job on a folder another command is writing stops on every rank with one
    error line naming the holder's pid, and writes nothing."""
    t = tmp_path / "in"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def torchrun(out: Path) -> subprocess.CompletedProcess:
        argv = [str(a) for a in _argv("finetune ner", t, models, out)] + ["--save_steps", "0"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "spanbert", *argv]
        return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    done = torchrun(tmp_path / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "run" / MANIFEST).read_text())
    assert manifest["kind"] == "run" and "config.json" in manifest["files"]
    assert not (tmp_path / "run" / folders.LOCK).exists()  # released

    held = tmp_path / "held"
    holder = _hold(held, "run")
    argv = [str(a) for a in _argv("finetune ner", t, models, held)]
    port = _free_port()
    try:
        before = _tree(held)
        ranks = []  # the two ranks started as torchrun starts them, to read each one's stderr
        for r in range(2):
            renv = {**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
            ranks.append(subprocess.Popen([sys.executable, "-m", "spanbert", *argv], env=renv, cwd=tmp_path,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
        errs = [p.communicate(timeout=240)[1] for p in ranks]
    finally:
        holder.kill()
        holder.wait()
    assert [p.returncode for p in ranks] == [2, 2], errs
    assert all("Traceback" not in e for e in errs), errs
    lines = [x for x in errs[0].splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and f"pid {holder.pid})" in lines[0], errs[0]  # rank 0 says it, once
    assert not [x for x in errs[1].splitlines() if x.startswith("error:")], errs[1]
    assert _tree(held) == before


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Every model folder of every family read strictly: one error naming config.json and the key, before any work


@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, Path]:
    """A tiny saved encoder of each family."""
    from spanbert import cloze, modernbert
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_byte_level_tokenizer, train_tokenizer

    root = tmp_path_factory.mktemp("family_models")
    texts = ["it is good", "it is bad", "a fine film", "a poor film"] * 20
    tok = train_tokenizer(None, 120, texts=texts, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=128)).save_pretrained(
        root / "bert", tokenizer=tok
    )
    bpe = cloze.train_cloze_tokenizer(None, 300, texts=texts)
    lm = cloze.build_model(cloze.cloze_config("tiny", d_model=32, num_heads=2, ffn_dim=64, final_heads=2), bpe)
    lm.save_pretrained(root / "two-tower", tokenizer=bpe)
    bbpe = train_byte_level_tokenizer(None, 300, texts=texts)
    ids = dict(pad_token_id=bbpe.pad_id, cls_token_id=bbpe.cls_id, sep_token_id=bbpe.sep_id)
    cfg = modernbert.modernbert_config("tiny", vocab_size=bbpe.vocab_size, local_attention=8, **ids)
    modernbert.Encoder(cfg).save_pretrained(root / "modernbert", tokenizer=bbpe)
    return {"bert": root / "bert", "two-tower": root / "two-tower", "modernbert": root / "modernbert"}


def _drop(key: str):
    return lambda c: c.pop(key)


def _set(key: str, value):
    return lambda c: c.__setitem__(key, value)


# family -> [(case, edit of config.json, the key the message names, what it says)]
MODEL_FOLDER_CASES = {
    "bert": [
        ("a missing size", _drop("hidden_size"), "hidden_size", "found no hidden_size"),
        ("a size as text", _set("hidden_size", "64"), '"hidden_size": "64"', "expected an integer"),
        ("an epsilon of 0", _set("layer_norm_eps", 0), '"layer_norm_eps": 0', "expected a number > 0"),
        ("relative positions", _set("position_embedding_type", "relative_key"), "position_embedding_type",
         "not implemented"),
    ],
    "modernbert": [
        ("a missing size", _drop("hidden_size"), "hidden_size", "found no hidden_size"),
        ("scaled RoPE", _set("rope_scaling", {"rope_type": "linear", "factor": 4.0}), "rope_scaling", "scaled RoPE"),
        ("a RoPE part as a number", _set("rope_parameters", {"full_attention": 5}), "rope_parameters.full_attention",
         "expected a JSON object"),
        ("a RoPE theta as text", _set("rope_parameters", {"full_attention": {"rope_type": "default", "rope_theta": "big"}}),
         "rope_parameters.full_attention.rope_theta", "expected a number > 0"),
        ("a window of 1", _set("local_attention", 1), '"local_attention": 1', "expected an integer >= 2"),
    ],
    "two-tower": [
        ("a missing size", _drop("d_model"), "d_model", "found no d_model"),
        ("a size as text", _set("d_model", "32"), '"d_model": "32"', "expected an integer"),
        ("an id past the vocabulary", _set("pad_id", 10**6), '"pad_id": 1000000', "expected an id of the vocabulary"),
        ("an unknown query", _set("query", "attention"), "query", "expected sum or concat"),
    ],
}  # fmt: skip
MODEL_PARAMS = [pytest.param(family, *case, id=f"{family}-{case[0]}".replace(" ", "_"))
                for family, cases in MODEL_FOLDER_CASES.items() for case in cases]  # fmt: skip


@pytest.mark.parametrize("family, case, edit, key, says", MODEL_PARAMS)
def test_every_family_reads_its_config_strictly(tmp_path, family_models, cli_error, _no_work, family, case, edit, key, says):
    """A damaged config.json of any family is one error naming the file and the key, from the first command
    that reads the folder, before any data is read or anything written (no default stands in for a missing
    size, no feature transformers would apply is ignored)."""
    model = tmp_path / "model"
    shutil.copytree(family_models[family], model)
    config = json.loads((model / "config.json").read_text())
    edit(config)
    (model / "config.json").write_text(json.dumps(config))
    i = _inputs(tmp_path / "in")
    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", i["sst"], "--model", model, "--output_dir",
            tmp_path / "out", *FT]  # fmt: skip
    err = cli_error(argv, names=f"{model / 'config.json'}: ", contains=says, out=tmp_path)
    assert key in err and len(err.strip().splitlines()) == 1, err


def test_every_family_has_model_folder_cases():
    from spanbert.families import FAMILIES

    names = {"bert": "bert", "cloze-two-tower": "two-tower", "modernbert": "modernbert"}
    assert {names[f] for f in FAMILIES} == set(MODEL_FOLDER_CASES)


# ---------------------------------------------------------------------------------------------
# --init_from: the run's vocabulary must be the checkpoint's


def test_init_from_needs_the_checkpoints_own_vocabulary(tmp_path, family_models, cli_error):
    """A checkpoint without its tokenizer, and a tokenizer that gives its tokens other ids, are refused before
    any data is prepared: the embedding rows would be trained under the wrong tokens."""
    from spanbert.tokenization import train_tokenizer

    i = _inputs(tmp_path / "in")
    bare = tmp_path / "bare"
    shutil.copytree(family_models["bert"], bare)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (bare / name).unlink(missing_ok=True)
    argv = ["pretrain", "--corpus", i["texts"], "--init_from", bare, "--vocab_size", "60", "--max_seq_length", "64",
            "--output_dir", tmp_path / "out", *FT]  # fmt: skip
    cli_error(argv, names="--init_from: ", contains="without a tokenizer", out=tmp_path)
    other = tmp_path / "other"
    train_tokenizer(None, 100, output_dir=other, texts=["zebras graze", "quiet rivers"] * 20, show_progress=False,
                    min_frequency=1)  # fmt: skip
    argv = ["pretrain", "--corpus", i["texts"], "--init_from", family_models["bert"], "--tokenizer", other,
            "--max_seq_length", "64", "--output_dir", tmp_path / "out", *FT]  # fmt: skip
    err = cli_error(argv, names="--init_from: ", contains="own tokenizer gives id", out=tmp_path)
    assert str(other) in err


# ---------------------------------------------------------------------------------------------
# Options checked against what they meet


SEQ_TASKS = ["finetune squad", "finetune mrqa", "finetune tacred", "finetune semeval", "finetune glue", "finetune ner",
             "finetune ner --features", "finetune coref", "finetune swag", "finetune parse", "finetune probe"]  # fmt: skip


@pytest.mark.parametrize("name", SEQ_TASKS)
def test_a_sequence_length_past_the_encoders_positions_is_refused_before_any_data(
    tmp_path, models, cli_error, _no_work, name  # noqa: F811
):
    """Every task's --max_seq_length against the encoder's positions (from its config.json), before any data is
    read or anything written: QA took 4,000 for a 128-position BERT and failed after reading the data."""
    argv = _argv(name, tmp_path / "in", models, tmp_path / "out") + ["--max_seq_length", "4000"]
    err = cli_error(argv, names="--max_seq_length: ", contains="expected at most the 128 positions", out=tmp_path)
    assert len(err.strip().splitlines()) == 1, err


def test_every_task_with_a_sequence_length_is_covered():
    from spanbert.cli import TASKS

    assert {name.split(" --")[0] for name in SEQ_TASKS} == {f"finetune {t}" for t in TASKS}


def test_an_unset_sequence_length_fits_the_encoder(models, tmp_path):  # noqa: F811
    """Unset, a task's --max_seq_length is its default (128) or the encoder's positions when it has fewer."""
    from spanbert.tasks import options as O
    from spanbert.tasks.finetuning import SEQ_LENGTH, resolve_lengths
    from spanbert.tasks.ner_options import NerFinetune

    small = tmp_path / "small"
    shutil.copytree(models["enc"], small)
    config = json.loads((small / "config.json").read_text())
    config["max_position_embeddings"] = 64
    (small / "config.json").write_text(json.dumps(config))
    for model, expected in ((models["enc"], 128), (small, 64)):
        opts = O.parse(NerFinetune, ["--model", str(model), "--train_file", "t.txt"], "p", "d")
        resolve_lengths(opts, SEQ_LENGTH)
        assert opts.max_seq_length == expected


def _spanbert(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spanbert", *argv], env={**os.environ, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_threads_are_capped_at_the_cores_with_a_note(capsys, monkeypatch):
    """--threads 999 on a machine of a few cores ran 22x slower than one thread, silently."""
    from spanbert import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    before = torch.get_num_threads()
    try:
        assert threads.configure(999) == "2 CPU threads, fixed by --threads"
        err = capsys.readouterr().err
        assert "note: --threads 999: found 2 usable core(s)" in err and "using 2" in err
        threads.configure(1)
        assert "note" not in capsys.readouterr().err
    finally:
        threads.reset()
        torch.set_num_threads(before)


def test_garbage_omp_num_threads_is_one_note_not_libgomps_complaint(tmp_path):
    """OMP_NUM_THREADS=garbage made libgomp print its own complaint as torch loaded; the CLI drops it first,
    with one note, and the thread count follows the free cores."""
    done = _spanbert(["fill", "--help"], {"OMP_NUM_THREADS": "garbage"}, tmp_path)
    assert "libgomp" not in done.stderr and "Invalid value" not in done.stderr, done.stderr
    assert done.returncode == 0 and done.stderr.count("note: OMP_NUM_THREADS='garbage'") == 1, done.stderr
    from spanbert.environment import omp_threads_setting

    for value, ok in (("4", True), ("4,2", True), ("0", False), ("-1", False), ("garbage", False), ("", False)):
        os.environ["OMP_NUM_THREADS"] = value
        try:
            assert bool(omp_threads_setting()) == ok, value
        finally:
            del os.environ["OMP_NUM_THREADS"]


def test_emulated_bf16_is_named(monkeypatch):
    """--dtype bf16 on a CPU without native bf16 ran 4x slower than fp32 and said nothing of emulation."""
    from spanbert import precision

    cpu = torch.device("cpu")
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "fpu avx2")
    assert "emulated" in precision.precision_note("bf16", cpu)
    assert precision.precision_note("fp32", cpu) is None and precision.precision_note("auto", cpu) is None
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "fpu avx2 avx512_bf16")
    assert precision.precision_note("bf16", cpu) is None


def test_unseen_dev_labels_are_warned_in_every_task_that_has_labels(tmp_path, models, capsys):  # noqa: F811
    """A dev label the training data never has cannot be predicted: every task with labels says so when it
    fine-tunes (parse: constituent labels), as its evaluation does."""
    from spanbert.cli import main

    i = _inputs(tmp_path / "in")
    dev = {
        "tacred": (tmp_path / "dev.json", json.dumps([{**TACRED[0], "id": "t2", "relation": "per:title"}])),
        "semeval": (tmp_path / "dev.txt", SEMEVAL.replace("Entity-Destination(e1,e2)", "Cause-Effect(e1,e2)")),
        "ner": (tmp_path / "dev.conll", CONLL.replace("B-PER", "B-MISC")),
        "parse": (tmp_path / "dev.mrg", "(TOP (FRAG (INTJ (UH Wow)) (. !)))\n"),
    }
    label = {"tacred": "relation", "semeval": "relation", "ner": "tag", "parse": "constituent label"}
    for task, (path, text) in dev.items():
        path.write_text(text)
        data = {"tacred": i["tacred"], "semeval": i["semeval"], "ner": i["conll"], "parse": i["trees"]}[task]
        capsys.readouterr()
        assert main(["finetune", task, "--model", str(models["enc"]), "--train", str(data), "--dev", str(path),
                     "--output_dir", str(tmp_path / task), *FT, "--save_steps", "0"]) == 0  # fmt: skip
        err = capsys.readouterr().err
        assert f"warning: {path}: " in err and f"gold {label[task]}(s)" in err and "never occur" in err, (task, err)


def test_every_command_that_writes_is_covered():
    """A command or a task added to the CLI must be added here: every task's finetune and every task's predict
    that writes a file, with every case that applies to it (`applies`), and what it reads."""
    from spanbert.cli import COMMANDS as CLI_COMMANDS
    from spanbert.cli import TASKS

    covered = {name.split(" --")[0] for name in KINDS}
    assert {f"finetune {t}" for t in TASKS} <= covered
    assert {f"predict {t}" for t in TASKS} <= covered
    writers = {"tokenizer": "tokenizer train", "preprocess": "preprocess", "pretrain": "pretrain", "study": "study",
               "curve": "curve", "probe": "probe"}  # fmt: skip
    readers = {"fill", "finetune", "predict", "evaluate"}  # evaluate prints its scores; fill prints its guesses
    assert set(CLI_COMMANDS) == set(writers) | readers
    assert set(writers.values()) <= covered
    assert {f"finetune {t}" for t in TASKS} <= TRAINS and set(OWNER) == {n for n, k in KINDS.items() if k == "owned"}
    assert {t for t in TASKS if t != "glue"} == set(PREDICT)
    for name in KINDS:  # every command has its cases: the output alone, against its inputs, a full disk
        cases = {case for case in CASES if applies(name, case)}
        assert {"under a file", "unwritable"} <= cases, name
        assert name in READS_NOTHING or set(INPUT_CASES) & cases, name
        assert name in WRITES_NOTHING | NO_FULL_DISK or name in {p.values[0] for p in FULL}, name
        if KINDS[name] == "owned":
            assert {"a folder of other files", "another command's folder"} <= cases, name
            assert name in WRITES_NOTHING or "another writer" in cases, name


def test_a_run_folder_with_the_users_notes_beside_it_is_still_that_run(tmp_path):
    """The training folder's rule: a folder is an earlier run only by the manifest a run writes, so an earlier
    run with the user's notes beside it is refused as an earlier run (pass --resume / --overwrite_output_dir),
    a run killed before its first checkpoint (only its log) may start again, and the notes stay. A folder
    without a manifest holding anything, even names a run writes (`latest`, `config.json`, `data/`), is the
    user's: refused whatever the flags."""
    from spanbert.errors import SpanBertError
    from spanbert.folders import claim_manifest, record
    from spanbert.runs import check_output_dir
    from spanbert.training_args import TrainingArguments

    run = tmp_path / "run"
    claim_manifest(run, "run", "spanbert finetune ner")
    (run / "notes.txt").write_text("mine\n")
    record(run / "log.jsonl")
    (run / "log.jsonl").write_text("")
    check_output_dir(TrainingArguments(output_dir=str(run)))  # a killed run's log: accepted
    record(run / "latest")
    (run / "latest").write_text("checkpoint-1\n")
    with pytest.raises(SpanBertError, match="found a latest pointer of an earlier run"):
        check_output_dir(TrainingArguments(output_dir=str(run)))
    check_output_dir(TrainingArguments(output_dir=str(run), resume=True))
    check_output_dir(TrainingArguments(output_dir=str(run), overwrite_output_dir=True))
    # a folder without a manifest is refused whatever the flags: there is no run to resume or start over
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("notes.txt", "latest", "config.json"):
        (mine / name).write_text("mine\n")
    (mine / "data").mkdir()
    for flags in ({}, {"resume": True}, {"overwrite_output_dir": True}):
        with pytest.raises(SpanBertError, match=r"found a folder holding other files \(config.json, data, latest, notes.txt\)"):
            check_output_dir(TrainingArguments(output_dir=str(mine), **flags))


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
