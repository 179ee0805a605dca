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

from spanbert import utils
from spanbert.pretrain import PretrainConfig, pretrain
from spanbert.trainer import TrainingArguments


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _run(corpus, out: Path, steps: int = 2, **kw) -> Path:  # noqa: F811
    _, text, _, _ = corpus
    cfg = PretrainConfig(corpus=str(text), model="tiny", vocab_size=200, max_seq_length=48, num_proc=0, max_eval_blocks=0,
                         tokens_per_update=0)
    base = dict(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
                save_steps=1, save_total_limit=1, logging_steps=1, disable_tqdm=True, report_to="none")  # fmt: skip
    return pretrain(cfg, TrainingArguments(**{**base, **kw}))


def test_a_failed_reexport_leaves_the_old_final_whole(corpus, tmp_path, monkeypatch):  # noqa: F811
    """Issue 22.4: a re-export that dies after the new weights are written (here: at the tokenizer files)
    leaves `final/` exactly the old export, not new weights beside the old head and config."""
    from spanbert import tokenization

    final = _run(corpus, tmp_path / "run")
    before = _digest(final)
    assert {"model.safetensors", "span_boundary_head.safetensors", "config.json", "train_metrics.json"} <= set(before)

    def killed(self, directory):
        new = _digest(Path(directory))  # the new weights are written by now, then the run dies
        assert new["model.safetensors"] != before["model.safetensors"]
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
    bad = sorted(name for name in hidden if not utils.is_debris(name))
    assert not bad, f"temporary names the cleanup does not know: {bad}"
    assert not [p for p in os.listdir(run) if p.startswith(".")]
    assert not [p for p in os.listdir(run / "final") if p.startswith(".")]
