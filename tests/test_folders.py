"""Output folders (`spanbert.folders`): the manifest lists what spanbert wrote and nothing else, a claim that
wrote nothing leaves nothing, the lock refuses a second writer (naming its pid) and a crash releases it, a folder
swapped in whole keeps its claim, a damaged manifest is named, and a file the user names is replaced even in a
claimed folder. Every command's use of them is tested in test_output_contract.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanbert import folders, utils
from spanbert.errors import SpanBertError
from spanbert.utils import check_output


def test_a_claimed_folder_lists_what_spanbert_writes_and_nothing_else(tmp_path):

    out = tmp_path / "run"
    with folders.Claim(out, "run", "spanbert test"):
        assert (out / folders.LOCK).read_text().startswith(f"spanbert test, pid {os.getpid()}")
        with utils.atomic_write(out / "config.json") as f:
            f.write("{}")
        with utils.atomic_dir(out / "final") as tmp:
            (tmp / "weights").write_text("w")
        folders.make_folders(out / "sweep" / "a")
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

    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(ValueError):
        with folders.Claim(out, "run", "spanbert test"):
            raise ValueError("stopped before its first file")
    assert not (tmp_path / "a").exists()
    with folders.Claim(out, "run", "spanbert test"):  # a write recorded but never made (it failed) counts as none
        folders.record(out / "data")
    assert not (tmp_path / "a").exists()


def test_the_lock_refuses_a_second_writer_with_its_pid_and_a_crash_releases_it(tmp_path):

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

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / folders.MANIFEST).write_text("{not json")
    (tmp_path / "run" / "log.jsonl").write_text("")
    with pytest.raises(SpanBertError, match=rf"{folders.MANIFEST}: found text that is not JSON"):
        check_output(tmp_path / "run", folder=True, owner="run")


def test_a_file_the_user_names_is_replaced_even_in_a_claimed_folder(tmp_path):
    """`predict ner --model runs/ner --output runs/ner/test_pred.txt` over a file the run's manifest does not
    list: the user named it, so it is replaced (and listed); a name the user did not give is refused."""

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
