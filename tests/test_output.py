"""The output contract (`spanbert.utils.check_output`, `spanbert.folders`): a file where a folder is
expected, a folder of someone else's files, a location that cannot be written, an output that is, holds or
lies inside an input, or a folder another process is writing is refused with one error naming the path,
before any work, and nothing on disk changes; a full disk during any write leaves its destination as it
was, with one error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanbert import utils
from spanbert.errors import SpanBertError
from spanbert.utils import check_output


def test_new_and_own_outputs_pass(tmp_path):
    assert check_output(tmp_path / "new" / "deeper", folder=True) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checking creates nothing
    own = tmp_path / "own"
    own.mkdir()
    (own / "meta.json").write_text("{}")
    check_output(own, folder=True, ours=lambda d: (d / "meta.json").is_file())
    check_output(tmp_path / "empty", folder=True, ours=lambda d: False)
    (tmp_path / "out.json").write_text("old")
    check_output(tmp_path / "out.json", folder=False)  # a file output replaces its old version


@pytest.mark.parametrize(
    "make, folder, contains",
    [
        (lambda t: (t / "f").write_text("x") and t / "f", True, "found a file, expected a folder"),
        (lambda t: (t / "f").write_text("x") and t / "f" / "sub" / "out", True, "found a file at"),
        (lambda t: (t / "f").write_text("x") and t / "f" / "preds.json", False, "found a file at"),
        (lambda t: (t / "d").mkdir() or t / "d", False, "found a folder, expected a file name"),
        (lambda t: ((t / "d").mkdir(), (t / "d" / "notes.txt").write_text("x")) and t / "d", True,
         "found a folder holding other files (notes.txt)"),
    ],
)
def test_refused_outputs(tmp_path, make, folder, contains):
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SpanBertError) as e:
        check_output(path, folder=folder, ours=lambda d: False)
    assert str(e.value).startswith(f"{path}: ") and contains in str(e.value), str(e.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_an_unwritable_location_is_refused(tmp_path, monkeypatch):
    # root may write anywhere but a read-only mount, so the refusal is simulated where the check asks
    # the system (access(2))
    monkeypatch.setattr(utils, "writable", lambda folder: False)
    with pytest.raises(SpanBertError, match=r"not writable \(no permission, or a read-only file system\); expected"):
        check_output(tmp_path / "ro" / "preds.json", folder=False)
    assert not (tmp_path / "ro").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounts a read-only tmpfs: needs root")
def test_a_read_only_mount_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(ro)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not let the test mount a file system")
    try:
        with pytest.raises(SpanBertError, match="not writable"):
            check_output(ro / "out", folder=True)
    finally:
        subprocess.run(["umount", str(ro)], check=True)


# ---------------------------------------------------------------------------------------------
# An output apart from its inputs (`check_apart`)


@pytest.mark.parametrize(
    "output, says",
    [
        ("data/train.json", "found the output is the input"),
        ("data/sub", "found the output inside the input folder"),
        (".", "inside the output folder"),
        ("link.json", "found the output is the input"),  # a symbolic link to an input is that input
        ("hard.json", "found the output is the input"),  # so is a second name (hard link) of it
    ],
)
def test_an_output_is_refused_when_it_is_holds_or_lies_in_an_input(tmp_path, monkeypatch, output, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.json").write_text("{}")
    os.symlink(tmp_path / "data" / "train.json", tmp_path / "link.json")
    os.link(tmp_path / "data" / "train.json", tmp_path / "hard.json")
    inputs = [("--train", "data/train.json"), ("--data_dir", "data")] if output != "hard.json" else [("--train", "data/train.json")]
    with pytest.raises(SpanBertError) as e:
        check_output(output, folder=output in (".", "data/sub"), inputs=inputs)
    assert str(e.value).startswith(f"{output}: ") and says in str(e.value), str(e.value)
    check_output("preds.json", folder=False, inputs=inputs)  # beside the inputs: fine
    assert not (tmp_path / "data" / "sub").exists()


def test_a_model_folder_takes_a_predictions_file_but_nothing_named_like_its_files(tmp_path):
    """A model (or tokenizer) folder is read by name: `predict --model runs/ner --output runs/ner/test_pred.txt`
    (the documented habit, and the study's held-out scoring) is fine; an output named like one of the model's
    files (config.json, a shard, vocab.txt) would replace what the command reads."""
    model = tmp_path / "runs" / "ner"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    check_output(model / "test_pred.txt", folder=False, inputs=[("--model", str(model))])
    check_output(model / "sub" / "config.json", folder=False, inputs=[("--model", str(model))])
    for name in ("config.json", "vocab.txt", "model-00001-of-00002.safetensors", "span_boundary_head.safetensors"):
        with pytest.raises(SpanBertError, match="found the output over a file of the model folder"):
            check_output(model / name, folder=False, inputs=[("--model", str(model))])
    with pytest.raises(SpanBertError, match="found the output inside the input folder"):  # a data folder: nothing inside
        check_output(model / "test_pred.txt", folder=False, inputs=[("--data_dir", str(model))])


# ---------------------------------------------------------------------------------------------
# The manifest and the lock (`spanbert.folders`)


def test_a_claimed_folder_lists_what_spanbert_writes_and_nothing_else(tmp_path):
    from spanbert import folders

    out = tmp_path / "run"
    with folders.Claim(out, "run", "spanbert test"):
        assert (out / folders.LOCK).read_text().startswith(f"spanbert test, pid {os.getpid()}")
        with utils.atomic_write(out / "config.json") as f:
            f.write("{}")
        with utils.atomic_dir(out / "final") as tmp:
            (tmp / "weights").write_text("w")
        utils.make_folders(out / "sweep" / "a")
        (out / "notes.txt").write_text("the user's")  # written by someone else: not listed
    assert folders.read_manifest(out) == {"kind": "run", "command": "spanbert test", "files": ["config.json", "final", "sweep"]}
    assert not (out / folders.LOCK).exists()  # released
    assert folders.foreign(out) == ["notes.txt"]
    assert not folders.remove(out / "notes.txt") and (out / "notes.txt").exists()  # never the user's
    assert folders.remove(out / "config.json") and not (out / "config.json").exists()
    # a name in the way that the manifest does not list stops the write, and it is kept
    (out / "latest").write_text("the user's")
    with pytest.raises(SpanBertError, match="latest: found a file that spanbert did not write"):
        with utils.atomic_write(out / "latest") as f:
            f.write("checkpoint-1\n")
    assert (out / "latest").read_text() == "the user's"


def test_a_claim_that_wrote_nothing_leaves_nothing(tmp_path):
    from spanbert import folders

    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(ValueError):
        with folders.Claim(out, "run", "spanbert test"):
            raise ValueError("stopped before its first file")
    assert not (tmp_path / "a").exists()
    with folders.Claim(out, "run", "spanbert test"):  # a write recorded but never made (it failed) counts as none
        folders.record(out / "data")
    assert not (tmp_path / "a").exists()


def test_the_lock_refuses_a_second_writer_with_its_pid_and_a_crash_releases_it(tmp_path):
    from spanbert import folders

    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom spanbert import folders\n"
         "with folders.Claim(sys.argv[1], 'run', 'spanbert other'):\n    print('held', flush=True)\n    time.sleep(60)\n",
         str(out)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(folders.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SpanBertError, match=rf"found another command writing this folder \(spanbert other, pid {holder.pid}\)"):
            folders.Claim(out, "run", "spanbert test").acquire()
    finally:
        holder.kill()  # a crash: no release runs, the kernel drops the flock
        holder.wait()
    with folders.Claim(out, "run", "spanbert test"):
        with folders.Claim(out, "run", "spanbert test"):  # the loop inside its command: no second lock
            with folders.Claim(out / "sweep" / "lr1", "run", "spanbert test"):  # a sweep's run inside it
                assert folders.holds(out / "sweep" / "lr1")
    assert not folders.holds(out)


def test_a_folder_replaced_whole_keeps_its_lock_and_manifest(tmp_path):
    """`spanbert preprocess` swaps its corpus folder in whole: the claim (the flock held, the manifest) goes with it."""
    from spanbert import folders

    out = tmp_path / "corpus"
    with folders.Claim(out, "corpus", "spanbert preprocess"):
        lock_inode = (out / folders.LOCK).stat().st_ino
        with utils.atomic_dir(out) as tmp:
            (tmp / "meta.json").write_text("{}")
        assert (out / folders.LOCK).stat().st_ino == lock_inode
        assert folders.read_manifest(out)["files"] == ["meta.json"]
    (out / "notes.txt").write_text("the user's")
    with pytest.raises(SpanBertError, match="notes.txt that spanbert did not write, in a folder this command replaces whole"):
        check_output(out, folder=True, owner="corpus", whole=True)


def test_a_damaged_manifest_is_named(tmp_path):
    from spanbert import folders

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / folders.MANIFEST).write_text("{not json")
    (tmp_path / "run" / "log.jsonl").write_text("")
    with pytest.raises(SpanBertError, match=rf"{folders.MANIFEST}: found text that is not JSON"):
        check_output(tmp_path / "run", folder=True, owner="run")


# ---------------------------------------------------------------------------------------------
# A full disk: every writer leaves its destination as it was and says so in one line


def test_out_of_space_is_told_by_each_writer():
    from spanbert.errors import out_of_space

    assert out_of_space(OSError(28, "No space left on device")) == "no space left on the device"
    assert out_of_space(OSError(122, "Disk quota exceeded")) == "the disk quota used up"
    assert out_of_space(Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    torch_error.__context__ = OSError(28, "No space left on device")  # torch.save into a Python file
    assert out_of_space(torch_error) == "no space left on the device"
    assert out_of_space(OSError(13, "Permission denied")) is None and out_of_space(ValueError("x")) is None


def _full_after(monkeypatch, nbytes: int) -> None:
    """Writes of Python files fail with ENOSPC once ``nbytes`` have been written (a disk filling up)."""
    import builtins
    import io

    left = {"n": nbytes}
    real_open = builtins.open

    class Full(io.BufferedWriter):
        def write(self, b):
            if left["n"] - len(b) < 0:
                raise OSError(28, "No space left on device")
            left["n"] -= len(b)
            return super().write(b)

    def fake_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        if "w" in mode and "b" in mode and isinstance(f, io.BufferedWriter):
            raw = f.detach()
            return Full(raw)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)


def test_a_full_disk_leaves_every_file_of_a_multi_file_save_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "tok"
    with utils.atomic_files(out) as open_file:
        for name in ("vocab.txt", "tokenizer.json"):
            with open_file(name, "wb") as f:
                f.write(b"old " + name.encode())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _full_after(monkeypatch, 10)
    with pytest.raises(utils.NoSpaceError, match=rf"{out}: found no space left on the device"):
        with utils.atomic_files(out) as open_file:
            for name in ("vocab.txt", "tokenizer.json"):
                with open_file(name, "wb") as f:
                    f.write(b"a new, longer " + name.encode())
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the first file was not replaced either


def test_a_full_disk_during_a_checkpoint_or_a_log_row(tmp_path, monkeypatch):
    import torch

    from spanbert.runs import _Logger, latest_checkpoint, save_training_state
    from spanbert.training_args import TrainingArguments

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    args = TrainingArguments(output_dir=str(tmp_path))
    save_training_state(tmp_path, 1, model, opt, sched, None, args, {})
    log = _Logger(tmp_path, True, False)
    log.log(1, {"loss": 1.0})
    kept = (tmp_path / "log.jsonl").read_bytes()
    _full_after(monkeypatch, 64)
    with pytest.raises(utils.NoSpaceError, match=rf"{tmp_path / 'checkpoint-2'}: found no space"):
        save_training_state(tmp_path, 2, model, opt, sched, None, args, {})
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-1" and not (tmp_path / "checkpoint-2").exists()
    assert not [p for p in tmp_path.iterdir() if utils.is_debris(p.name)]
    monkeypatch.undo()
    # the log: a row that does not fit is not left half-written
    class FullLog:
        def __init__(self, f):
            self.f = f

        def tell(self):
            return self.f.tell()

        def write(self, text):
            self.f.write(text[:5])
            self.f.flush()
            raise OSError(28, "No space left on device")

        def flush(self):
            self.f.flush()

        def close(self):
            self.f.close()

    log.jsonl.close()
    log.jsonl = FullLog(open(tmp_path / "log.jsonl", "a"))
    with pytest.raises(utils.NoSpaceError, match="log.jsonl: found no space"):
        log.log(2, {"loss": 0.5})
    assert (tmp_path / "log.jsonl").read_bytes() == kept


def test_a_file_the_user_names_is_replaced_even_in_a_claimed_folder(tmp_path):
    """`predict ner --model runs/ner --output runs/ner/test_pred.txt` over a file the run's manifest does not
    list: the user named it, so it is replaced (and listed); a name the user did not give is refused."""
    from spanbert import folders

    run = tmp_path / "run"
    folders.claim_manifest(run, "run", "spanbert finetune ner")
    (run / "test_pred.txt").write_text("old predictions, made before the manifest")
    (run / "other.txt").write_text("the user's")
    utils.output_file(str(run / "test_pred.txt"))
    with utils.atomic_write(run / "test_pred.txt") as f:
        f.write("new")
    assert (run / "test_pred.txt").read_text() == "new" and "test_pred.txt" in folders.read_manifest(run)["files"]
    with pytest.raises(SpanBertError, match="other.txt: found a file that spanbert did not write"):
        with utils.atomic_write(run / "other.txt") as f:
            f.write("x")
