"""Files on disk (issue 22): exports swapped in whole, every temporary name known to the cleanup,
ordinary permissions, and a failed command leaves the disk as it found it."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest
from test_pretrain import corpus  # noqa: F401 - the module-scoped tiny corpus fixture

from spanbert import folders, utils
from spanbert.pretrain import pretrain
from spanbert.pretrain_config import PretrainConfig
from spanbert.training_args import TrainingArguments


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _run(corpus, out: Path, steps: int = 2, **kw) -> Path:  # noqa: F811
    _, text, _, _ = corpus
    cfg = PretrainConfig(corpus=str(text), model="tiny", vocab_size=200, max_seq_length=48, num_proc=0, max_eval_blocks=0,
                         tokens_per_update=0)
    base = dict(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
                save_steps=1, save_total_limit=1, logging_steps=1, disable_tqdm=True, report_to="none")  # fmt: skip
    return pretrain(cfg, TrainingArguments(**{**base, **kw})).model_dir


def test_a_failed_reexport_leaves_the_old_final_whole(corpus, tmp_path, monkeypatch):  # noqa: F811
    """Issue 22.4: a re-export that dies after the new weights are written (here: at the tokenizer files)
    leaves `final/` exactly the old export, not new weights beside the old head and config."""
    from spanbert import tokenization

    final = _run(corpus, tmp_path / "run")
    before = _digest(final)
    assert {"model.safetensors", "span_boundary_head.safetensors", "config.json", "train_metrics.json"} <= set(before)

    def killed(self, directory, **options):
        # the new weights are written by now (under a temporary name beside the tokenizer's temporary
        # folder, moved in only when every file is complete), then the run dies
        new = _digest(Path(directory).parent)
        weights = [v for k, v in new.items() if k.startswith(".model.safetensors.")]
        assert weights and weights[0] != before["model.safetensors"]
        raise KeyboardInterrupt

    monkeypatch.setattr(tokenization.Tokenizer, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        _run(corpus, tmp_path / "run", steps=3, resume=True)
    assert _digest(final) == before
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".final")]


def test_exported_weights_get_the_umask_permissions(corpus, tmp_path):  # noqa: F811
    """Issue 22.6: safetensors creates 0600; every exported file gets what the umask gives (as
    transformers' files do), so a model saved for a team can be read by it."""
    mask = os.umask(0o002)
    try:
        final = _run(corpus, tmp_path / "run", steps=1)
    finally:
        os.umask(mask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in final.iterdir()}
    assert modes["model.safetensors"] == modes["span_boundary_head.safetensors"] == 0o664, modes
    assert set(modes.values()) == {0o664}, modes
    assert stat.S_IMODE(final.stat().st_mode) == 0o775


def test_every_temporary_name_is_known_to_the_cleanup(corpus, tmp_path, monkeypatch):  # noqa: F811
    """Issue 22.5: list every name that exists, at any rename or removal, in a run folder while a run
    prepares its data, checkpoints every step, prunes, exports, re-saves a checkpoint and re-exports
    (with and without the atomic swap); each hidden name must match `is_debris`, which is what the
    next run's start removes. A kill lands between two such calls, so these are what it can leave."""
    run = tmp_path / "run"
    seen: set[str] = set()

    def snapshot() -> None:
        if not run.is_dir():
            return
        for folder, dirs, files in os.walk(run):
            for name in dirs + files:
                seen.add(os.path.relpath(os.path.join(folder, name), run))

    def spy(fn):
        def wrapper(*a, **k):
            snapshot()
            out = fn(*a, **k)
            snapshot()
            return out

        return wrapper

    monkeypatch.setattr(os, "replace", spy(os.replace))
    monkeypatch.setattr(os, "rename", spy(os.rename))
    monkeypatch.setattr(os, "unlink", spy(os.unlink))
    monkeypatch.setattr(shutil, "rmtree", spy(shutil.rmtree))
    monkeypatch.setattr(utils, "_exchange", spy(utils._exchange))
    _run(corpus, run, steps=2)
    _run(corpus, run, steps=2, resume=True)  # re-saves checkpoint-2 (the hard-linked copy) and re-exports
    monkeypatch.setattr(utils, "_exchange", spy(lambda a, b: False))  # the two-rename fallback: `.final.old-PID`
    _run(corpus, run, steps=3, resume=True)
    hidden = {part for p in seen for part in Path(p).parts if part.startswith(".")}
    kinds = {name.split(".")[1] for name in hidden}
    assert {"checkpoint-2", "latest", "final", "model", "config"} <= kinds, sorted(hidden)  # the test saw them
    bad = sorted(name for name in hidden if not folders.is_debris(name) and not folders.is_bookkeeping(name))
    assert not bad, f"temporary names the cleanup does not know: {bad}"
    # the run folder keeps its manifest (the list of what spanbert wrote there) and nothing else hidden
    assert [p for p in os.listdir(run) if p.startswith(".")] == [folders.MANIFEST]
    assert not [p for p in os.listdir(run / "final") if p.startswith(".")]


@pytest.mark.parametrize(
    "argv",
    [
        ["pretrain", "--system", "cloze", "--corpus", "{empty}", "--model", "tiny", "--max_steps", "1"],
        ["pretrain", "--system", "cloze", "--corpus", "{binary}", "--model", "tiny", "--max_steps", "1"],
        ["pretrain", "--system", "bilm", "--corpus", "{missing}", "--model", "tiny", "--max_steps", "1"],
        ["pretrain", "--corpus", "{empty}", "--model", "tiny", "--max_steps", "1"],
        ["pretrain", "--corpus", "{binary}", "--model", "tiny", "--max_steps", "1"],
        ["tokenizer", "train", "--corpus", "{empty}", "--vocab_size", "100"],
        ["preprocess", "--corpus", "{binary}", "--tokenizer", "{missing}"],
    ],
    ids=["cloze-empty", "cloze-not-utf8", "bilm-missing", "bert-empty", "bert-not-utf8", "tokenizer", "preprocess"],
)
def test_a_failed_command_leaves_the_disk_as_it_found_it(tmp_path, cli_error, argv):
    """Issue 22.7: a bad corpus (empty, not UTF-8, missing) is refused with nothing left behind: no
    output folder (nor the parents the command would have created), no half-prepared data."""
    files = {"empty": tmp_path / "empty.txt", "binary": tmp_path / "binary.txt", "missing": tmp_path / "nope"}
    files["empty"].write_text("")
    files["binary"].write_bytes(b"\xff\xfe bad\n")
    out = tmp_path / "runs" / "deep"
    cli_error([a.format(**files) for a in argv] + ["--output_dir", out], out=tmp_path)
    assert not (tmp_path / "runs").exists()


def test_folders_created_for_a_failed_write_are_removed(tmp_path):
    """atomic_dir / atomic_write create the missing parents of their target; when the write fails they
    remove those they created (still empty), and never a folder that was there or holds something."""
    with pytest.raises(RuntimeError):
        with utils.atomic_dir(tmp_path / "a" / "b" / "final"):
            raise RuntimeError
    assert os.listdir(tmp_path) == []
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        with utils.atomic_write(tmp_path / "kept" / "new" / "x.json") as f:
            f.write("{")
            raise RuntimeError
    assert os.listdir(tmp_path) == ["kept"] and os.listdir(tmp_path / "kept") == []


def test_a_study_stopped_by_a_bad_corpus_leaves_only_what_its_next_run_accepts(tmp_path, cli_error):
    """Issue 22.7, study: the shared tokenizer step fails on a corpus that is not UTF-8; the study folder
    keeps its plan and the step's log (the error points to it) and the next run goes past it."""
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"\xff\xfe bad\n")
    (tmp_path / "sst").mkdir()
    for name in ("train.tsv", "dev.tsv"):  # the study checks the GLUE folder before any work
        (tmp_path / "sst" / name).write_text("sentence\tlabel\na fine film\t1\n")
    study = tmp_path / "s.yaml"
    study.write_text(
        f"corpus: {text}\nvocab_size: 300\nmodel: tiny\nbudget_tokens: 8192\nmax_seq_length: 64\nbatch_size: 8\n"
        f"seeds: 1\noutput_dir: {tmp_path}/out\nsystems: [spanbert]\n"
        f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {tmp_path}/sst}}\n"
    )
    cli_error(["study", study, "--only", "pretrain"], names="tokenizer.log", contains="not UTF-8")
    left = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    # the lock file stays, unlocked; the manifest lists what the study wrote (the next run finds its own folder)
    assert left == [".lock", folders.MANIFEST, "shared", "shared/tokenizer.log", "study.json"], left
    from test_pretrain import synthetic_docs

    from spanbert.cli import main

    text.write_text("\n\n".join(synthetic_docs()) + "\n")  # fixed: the same study goes on from there
    assert main(["study", str(study), "--only", "pretrain", "--budget_tokens", "1024"]) == 0
    assert (tmp_path / "out" / "pretrain" / "spanbert" / "final" / "config.json").is_file()
