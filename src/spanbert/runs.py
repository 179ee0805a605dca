"""A training run's folder on disk: the training state's checkpoints and the `latest` pointer, what a
resume may change, the output contract of a run folder, its log, and the best weights.

`spanbert.trainer` runs the loop; this module owns what the loop leaves behind, so that the rules of
one folder (what a run writes, when an earlier run may be continued or replaced, how a killed run's
debris is cleaned) are read in one place.

Checkpoints are atomic (`checkpoint-N` complete or absent, `latest` replaced in one rename), so a
run killed at any instant resumes from its last complete checkpoint (docs/robustness.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert import folders
from spanbert.distributed import distributed_env, on_main, print0
from spanbert.errors import NoSpaceError, SpanBertError, out_of_space
from spanbert.utils import atomic_dir, atomic_write, check_output, no_space_as_error, remove_debris

TrainingArguments = Any
"""`spanbert.training_args.TrainingArguments`, for the annotations here."""


def steps_per_epoch(n: int, global_batch: int, world: int = 1) -> int:
    """Optimizer steps in one epoch: every example once, the last step possibly short, with one process
    or several (``world`` is accepted for callers of the earlier rule, under which several dropped it)."""
    return math.ceil(n / global_batch)


# ---------------------------------------------------------------------------------------------
# Checkpoints


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


STATE_KEYS = ("model", "optimizer", "scheduler", "step")
"""Keys every `state.pt` must hold (`scaler`, `rng` are optional)."""

# Settings a --resume may change: they do not change the numbers the run computes.
SAFE_TO_CHANGE = {
    "output_dir": "where the run is (a moved folder)",
    "logging_steps": "how often losses are logged",
    "save_steps": "how often checkpoints are written",
    "save_total_limit": "how many checkpoints are kept",
    "eval_steps": "how often the evaluation runs",
    "max_eval_share": "how often the evaluation runs",
    "allow_long_run": "",
    "per_device_eval_batch_size": "the evaluation batch (not the training)",
    "disable_tqdm": "the progress bar",
    "report_to": "where logs go",
    "dataloader_num_workers": "how batches are loaded (the order does not depend on it)",
    "stop_at_step": "where this job stops",
    "resume": "",
    "overwrite_output_dir": "",
    "nan_policy": "what happens at a non-finite loss from now on",
    "device": "the device (results may differ in the last bits)",
    "threads": "how many CPU threads compute (results may differ in the last bits)",
    "compile": "how the step is computed (results may differ in the last bits)",
    # training longer (or shorter) is allowed: the schedule is recomputed for the new total from the
    # saved step on, so the run no longer equals a straight run of the new length
    "max_steps": "the total steps and so the learning-rate schedule from the saved step on",
    "num_train_epochs": "the total steps and so the learning-rate schedule from the saved step on",
}
# The split of the global batch G = per_device x accumulation x world: safe while G (and so the step
# count of an epoch) is unchanged, because `micro_batches` takes step s from perm[s*G:(s+1)*G] whatever
# the split and the loss weights (count_targets) make the gradient that of the whole global batch.
BATCH_SPLIT = ("per_device_train_batch_size", "gradient_accumulation_steps", "world_size")


def _ckpt_step(p: Path) -> int | None:
    tail = p.name.rsplit("-", 1)[-1]
    return int(tail) if p.name.startswith("checkpoint-") and tail.isdigit() else None


def _point_latest(output_dir: Path, name: str) -> None:
    with atomic_write(output_dir / "latest") as f:
        f.write(name + "\n")


def save_training_state(
    output_dir: Path,
    step: int,
    model: nn.Module,
    optimizer,
    scheduler,
    scaler,
    args: TrainingArguments,
    extra: dict,
    rng_states: list[dict] | None = None,
) -> Path:
    """Write `checkpoint-{step}` atomically (temporary folder, fsync, rename), then point `latest` at it.

    ``rng_states``: every rank's RNG state in rank order (default: this process's only). `latest`
    names a complete checkpoint at every instant, also when `checkpoint-{step}` already exists (a
    re-save): `latest` first moves to a hard-linked copy of the new checkpoint, then the old folder is
    renamed aside, the new one renamed in, `latest` moved back, and the copies removed. Old
    checkpoints are renamed aside before they are deleted, so a `checkpoint-N` folder is always whole.
    """
    folders.make_folders(output_dir)
    final = output_dir / f"checkpoint-{step}"
    folders.record(final)  # in the run's manifest before it exists: a kill leaves nothing unlisted
    pid = os.getpid()
    tmp = output_dir / f".checkpoint-{step}.tmp-{pid}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with no_space_as_error(final):
            _write_state(tmp, step, model, optimizer, scheduler, scaler, args, extra, rng_states)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # the checkpoints and `latest` stay as they were
        raise
    if final.exists():
        alt = output_dir / f".checkpoint-{step}.tmp-{pid}-alt"
        shutil.rmtree(alt, ignore_errors=True)
        shutil.copytree(tmp, alt, copy_function=os.link)  # same files, second name: no copy of the data
        folders.fsync_dir(alt)
        folders.fsync_dir(output_dir)
        _point_latest(output_dir, alt.name)
        aside = output_dir / f".checkpoint-{step}.old-{pid}"
        os.replace(final, aside)
        os.replace(tmp, final)
        folders.fsync_dir(output_dir)
        _point_latest(output_dir, final.name)
        shutil.rmtree(alt, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, final)
        folders.fsync_dir(output_dir)
        _point_latest(output_dir, final.name)
    # Keep the newest `save_total_limit` checkpoints; the one `latest` names is never deleted.
    ckpts = sorted((p for p in output_dir.glob("checkpoint-*") if _ckpt_step(p) is not None), key=_ckpt_step)
    for old in ckpts[: max(0, len(ckpts) - max(1, args.save_total_limit))]:
        if old != final and folders.owned(output_dir, old.name):
            aside = output_dir / f".{old.name}.old-{pid}"
            os.replace(old, aside)
            shutil.rmtree(aside, ignore_errors=True)
    return final


def _write_state(
    tmp: Path, step: int, model: nn.Module, optimizer, scheduler, scaler, args: TrainingArguments, extra: dict,
    rng_states: list[dict] | None,
) -> None:  # fmt: skip
    """`save_training_state`'s files, written into the temporary folder ``tmp``."""
    state = {
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": rng_states if rng_states is not None else [_rng_state()],
        "step": step,
    }
    with open(tmp / "state.pt", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    info = {"global_step": step, "args": asdict(args), **extra}
    info.setdefault("world_size", len(state["rng"]))
    with open(tmp / "trainer_state.json", "w") as f:
        json.dump(info, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    folders.fsync_dir(tmp)


def _rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _complete(path: Path) -> str | None:
    """Why ``path`` is not a complete checkpoint, or None when it is."""
    if not path.is_dir():
        return "it does not exist"
    for name in ("state.pt", "trainer_state.json"):
        if not (path / name).is_file():
            return f"it has no {name}"
    size = (path / "state.pt").stat().st_size
    if size == 0:  # issue 58.8: said, and the checkpoint before it used (torch's own message was empty)
        return "its state.pt is empty (0 bytes: its write was cut short)"
    if not zipfile.is_zipfile(path / "state.pt"):  # torch.save writes a zip: a cut one has no directory at its end
        return f"its state.pt is cut short or damaged ({size:,} bytes, not a whole torch file)"
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError) as e:
        return f"trainer_state.json is unreadable ({e})"
    return None


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint that `output_dir/latest` names, or None when there is none (or it is incomplete)."""
    pointer = Path(output_dir) / "latest"
    if not pointer.is_file():
        return None
    path = Path(output_dir) / pointer.read_text().strip()
    return path if _complete(path) is None else None


def find_resume_checkpoint(output_dir: str | Path) -> tuple[Path, str | None]:
    """The checkpoint to resume from and a note when it is not the one `latest` names.

    `latest` wins when it names a complete checkpoint; otherwise the newest complete `checkpoint-N`.
    Raises SpanBertError naming what is wrong when none is usable.
    """
    output_dir = Path(output_dir)
    pointer = output_dir / "latest"
    problems = []
    if pointer.is_file():
        name = pointer.read_text().strip()
        why = _complete(output_dir / name) if name and "/" not in name else "it is not a folder name"
        if why is None:
            return output_dir / name, None
        problem = f"{pointer}: names {name!r} but {why}"
    else:
        problem = f"{pointer} is missing"
    problems.append(problem)
    ckpts = sorted((p for p in output_dir.glob("checkpoint-*") if _ckpt_step(p) is not None), key=_ckpt_step)
    for p in reversed(ckpts):
        why = _complete(p)
        if why is None:
            return p, f"{problem}; resuming from the newest complete checkpoint, {p.name}"
        problems.append(f"{p}: {why}")
    if not ckpts:  # stopped before its first checkpoint: nothing to resume, all to redo
        problems.append(f"no checkpoint-N folder in {output_dir} (the run stopped before its first checkpoint: "
                        "run the same command without --resume to start it again)")  # fmt: skip
    raise SpanBertError("--resume: no usable checkpoint: " + "; ".join(problems))


def resume_state(output_dir: str | Path) -> dict[str, Any]:
    """The `trainer_state.json` of the checkpoint a --resume of ``output_dir`` starts from
    (`find_resume_checkpoint`): what the killed run kept beside its weights (its settings, ``best``, a time
    budget's decision, ``train_seconds``)."""
    ckpt, _ = find_resume_checkpoint(output_dir)
    return json.loads((ckpt / "trainer_state.json").read_text())


def compare_settings(saved: dict, now: dict) -> tuple[list[str], list[str]]:
    """(refused, accepted) differences between a checkpoint's settings and this run's, each as
    'name: saved -> now'. ``saved``/``now`` hold "args" (TrainingArguments), "run_config" and
    "world_size"; a run_config key is compared flattened (e.g. ``masking.mask_ratio``)."""
    refused, accepted = [], []
    old_args, new_args = dict(saved.get("args") or {}), dict(now["args"])
    old_args["world_size"], new_args["world_size"] = saved.get("world_size", now["world_size"]), now["world_size"]
    split_changed = []
    for k in sorted(set(old_args) | set(new_args)):
        if k not in old_args:  # a setting newer than the checkpoint: nothing to compare
            continue
        a, b = old_args.get(k), new_args.get(k)
        if a == b or (isinstance(a, list) and tuple(a) == b):
            continue
        line = f"{k}: {a!r} -> {b!r}"
        if k in SAFE_TO_CHANGE:
            accepted.append(line + (f" (changes {SAFE_TO_CHANGE[k]})" if SAFE_TO_CHANGE[k] else ""))
        elif k in BATCH_SPLIT:
            split_changed.append(line)
        else:
            refused.append(line)
    if split_changed:
        split, n = BATCH_SPLIT, now.get("train_examples")
        if new_args.get("max_tokens_per_batch"):
            # token budget: a step is world x accumulation micro-batches of the same budget, whatever
            # the sequence count per micro-batch (a changed budget is refused above)
            split, n = BATCH_SPLIT[1:], now.get("train_micro_batches")
            unused = [x for x in split_changed if x.startswith(BATCH_SPLIT[0] + ":")]
            accepted += [f"{x} (not used with --max_tokens_per_batch)" for x in unused]
            split_changed = [x for x in split_changed if x not in unused]
    if split_changed:
        g_old = math.prod(int(old_args.get(k) or 1) for k in split)
        g_new = math.prod(int(new_args.get(k) or 1) for k in split)
        same_epoch = n is None or steps_per_epoch(n, g_old, old_args["world_size"]) == steps_per_epoch(
            n, g_new, new_args["world_size"]
        )
        if g_old == g_new and same_epoch:
            accepted += [f"{x} (same global batch {g_new}: same data order, other dropout streams)" for x in split_changed]
        else:
            why = f"global batch {g_old} -> {g_new}" if g_old != g_new else "steps per epoch change"
            refused += [f"{x} ({why})" for x in split_changed]
    flat_old, flat_new = _flatten(saved.get("run_config") or {}), _flatten(now.get("run_config") or {})
    if "run_config" in saved or flat_new:
        for k in sorted(set(flat_old) | set(flat_new)):
            a, b = flat_old.get(k, "<absent>"), flat_new.get(k, "<absent>")
            if a != b:
                refused.append(f"{k}: {a!r} -> {b!r}")
    return refused, accepted


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """JSON view of a nested dict, keys joined by dots (tuples and lists compare as lists)."""
    d = json.loads(json.dumps(d, default=str))
    out: dict[str, Any] = {}

    def walk(v: Any, key: str) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{key}.{k}" if key else str(k))
        else:
            out[key] = v

    walk(d, prefix)
    return out


def load_training_state(path: Path, model: nn.Module, optimizer, scheduler, scaler) -> int:
    """Restore model, optimizer, schedule, scaler and this rank's RNG from ``path``; returns its step."""
    where = f"{path}/state.pt"
    try:
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise SpanBertError(f"{where}: cannot read the training checkpoint: {e or type(e).__name__}") from None
    if not isinstance(state, dict):
        raise SpanBertError(f"{where}: found a {type(state).__name__}, expected a dict of training state")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise SpanBertError(
            f"{where}: found no {', '.join(missing)}, expected the keys {', '.join(STATE_KEYS)} "
            f"(an incomplete or foreign checkpoint; start over with --overwrite_output_dir)"
        )
    try:
        _unwrap(model).load_state_dict(state["model"])
    except RuntimeError as e:
        lines = [x.strip() for x in str(e).splitlines()[1:] if x.strip()][:4]
        raise SpanBertError(
            f"{where}: found model weights that do not fit this model, expected the same architecture "
            f"and size ({'; '.join(lines)})"
        ) from None
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (ValueError, KeyError, RuntimeError) as e:
        raise SpanBertError(f"{where}: found an optimizer state that does not fit this model: {e}") from None
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    rngs = state.get("rng")
    if rngs is None and "torch_rng" in state:  # checkpoints written before per-rank RNG states
        rngs = [{"torch": state["torch_rng"], "cuda": state.get("cuda_rng")}]
    if rngs:
        rank, world, _ = distributed_env()
        # each rank restores its own stream; with another world size the streams cannot continue
        # exactly (the resume rule accepts that only for an unchanged global batch)
        mine = rngs[rank] if len(rngs) == world else rngs[rank % len(rngs)]
        torch.set_rng_state(mine["torch"])
        if mine.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(mine["cuda"])
    return int(state["step"])


RUN_NAMES = frozenset({"latest", "log.jsonl", "tensorboard", "best", "config.json", "final", "data", "sweep.json",
                       "sweep", "feature_cache", "log.txt"})  # fmt: skip
"""The fixed names a spanbert run writes at the top of its output_dir, at any stage: the loop's checkpoints
pointer, log, TensorBoard events and best weights; a saved model (config.json) or a pre-training export
(final/); pre-training's prepared corpus (data/); a sweep's summary and runs; feature-based NER's cache;
and the log the study writes into a cell's folder before the cell's command starts (log.txt). Besides
these, `checkpoint-N`, moved-aside logs (log.jsonl.K, tensorboard.K) and a saved model's files. A claimed
run folder that holds one of these names unlisted in its manifest is refused before any work
(`check_output_dir`): the run would replace the user's file of that name."""

RUN = "run"
"""The kind of output (`spanbert.folders.KINDS`) of every command that trains: pretrain and finetune."""


def holds_a_run(folder: Path) -> bool:
    """Whether ``folder`` is the output_dir of an earlier spanbert run: its manifest
    (`spanbert.folders`), written when a run claims the folder, says so. Nothing else counts (a folder of
    the user's named `data/`, `config.json` or `best/` is the user's): the output contract's test of
    "an earlier output of this command" for a training folder."""
    manifest = folders.read_manifest(folder)
    return manifest is not None and manifest["kind"] == RUN


def check_output_dir(args: TrainingArguments, inputs: Iterable[tuple[str, str]] = ()) -> None:
    """The output contract of a training run (`spanbert.utils.check_output`), checked by every command that
    trains before any work, and again by `train`. Refused, each with one error naming the folder:

    - output_dir is one of ``inputs`` ((option, path) pairs: the corpus, the data, the model read), lies
      inside one or holds one;
    - output_dir is a file, lies under a file, or cannot be written;
    - output_dir holds anything without the manifest of a spanbert run (`holds_a_run`: a folder of the
      user's notes, data or another program's output), whatever the flags: nothing there is ever deleted
      or mixed in; or it has one but holds, under a name a run writes (`RUN_NAMES`), something the
      manifest does not list;
    - output_dir holds an earlier run (a `latest` pointer, a `checkpoint-*` folder or a saved model's
      config.json, each written by spanbert) and neither --resume nor --overwrite_output_dir is given
      (contract 3). A run killed before its first checkpoint (only its log.jsonl) may start again.

    The user's own files beside a run stay, whatever the flags. An empty or missing folder is fine;
    checking creates nothing. A folder a command holds (`claim_run_dir`, taken after this check) is not
    checked again: the task function and the loop inside a command check its folder once. Every rank of a
    torchrun group knows the folder held (rank 0 has its lock), so every rank skips the check alike."""
    if os.path.realpath(args.output_dir) in _COMMAND_FOLDERS:
        return
    out = check_output(args.output_dir, folder=True, inputs=inputs, owner=RUN, writes=RUN_NAMES)
    if args.resume or args.overwrite_output_dir or not out.is_dir():
        return
    manifest = folders.read_manifest(out)
    listed = set(manifest["files"]) if manifest else set()
    found = None
    if "latest" in listed and (out / "latest").exists():
        found = "a latest pointer"
    elif any(p.is_dir() and _ckpt_step(p) is not None and p.name in listed for p in out.glob("checkpoint-*")):
        found = "checkpoint folders"
    elif ("config.json" in listed and (out / "config.json").is_file()) or (
        "final" in listed and (out / "final" / "config.json").is_file()
    ):
        found = "a saved model (config.json)"
    if found:
        raise SpanBertError(
            f"{out}: found {found} of an earlier run, expected an empty or new output_dir; "
            f"pass --resume to continue it or --overwrite_output_dir to start over"
        )


@contextlib.contextmanager
def claim_run_dir(output_dir: str | Path, command: str) -> Iterator[None]:
    """Hold ``output_dir`` for a training command while the block runs (`spanbert.folders.Claim`): its
    lock (a second command writing there is refused with this one's pid) and its manifest (the names
    the run writes, so that a later --overwrite_output_dir removes those only). Rank 0 of a torchrun
    group holds it and a refusal reaches every rank; a crash or kill drops the lock (the kernel's). A
    claim inside one this process holds (the loop inside its command, a sweep's runs) takes no second
    lock. Call it after `check_output_dir`, so that a refused folder is left as it was."""
    claim = folders.Claim(output_dir, RUN, command)
    on_main(claim.acquire)
    key = os.path.realpath(output_dir)
    _COMMAND_FOLDERS[key] = _COMMAND_FOLDERS.get(key, 0) + 1
    try:
        yield
    finally:
        _COMMAND_FOLDERS[key] -= 1
        if not _COMMAND_FOLDERS[key]:
            del _COMMAND_FOLDERS[key]
        claim.release()  # a no-op on the ranks that did not acquire


_COMMAND_FOLDERS: dict[str, int] = {}
"""realpath of an output folder a command holds (`claim_run_dir`) -> how many claims, on every rank (only
rank 0 takes the folder's lock): `check_output_dir` has checked it before the claim."""


def _start_run_dir(output_dir: Path, args: TrainingArguments) -> list[str]:
    """Rank 0, before a run: remove what a killed run left (temporary checkpoint folders, `latest`
    temporaries, atomic_dir leftovers beside and inside `final/`), finishing an interrupted re-save;
    with --overwrite_output_dir remove the old checkpoints, `latest` and `best/`, those the run's manifest
    lists only. Returns what was removed. A folder no command claimed (`train` called from Python) gets
    its manifest here (`spanbert.folders.claim_manifest`)."""
    folders.claim_manifest(output_dir, RUN, "spanbert (Python)")
    keep = set()
    pointer = output_dir / "latest"
    if pointer.is_file():
        name = pointer.read_text().strip()
        if name.startswith(".checkpoint-") and _complete(output_dir / name) is None:
            # killed during a re-save while `latest` named the hard-linked copy: finish the move
            step = name[len(".checkpoint-") :].split(".", 1)[0]
            final = output_dir / f"checkpoint-{step}"
            if _complete(final) is None:
                _point_latest(output_dir, final.name)
            else:
                shutil.rmtree(final, ignore_errors=True)
                tmp = output_dir / f".checkpoint-{step}.tmp-{os.getpid()}-restore"
                shutil.copytree(output_dir / name, tmp, copy_function=os.link)
                folders.fsync_dir(tmp)
                os.replace(tmp, final)
                folders.fsync_dir(output_dir)
                _point_latest(output_dir, final.name)
    removed = []
    for p in output_dir.glob(".checkpoint-*.old-*"):  # checkpoints being deleted: never restore them
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p.name)
    removed += remove_debris(output_dir, keep=keep)
    if (output_dir / "final").is_dir():
        removed += [f"final/{x}" for x in remove_debris(output_dir / "final")]
    if args.overwrite_output_dir and not args.resume:
        for p in output_dir.glob("checkpoint-*"):
            if p.is_dir() and _ckpt_step(p) is not None:
                folders.remove(p)
        folders.remove(pointer)
        folders.remove(output_dir / BEST_DIR)
    return removed


# ---------------------------------------------------------------------------------------------
# Logging


LOG_FILE = "log.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _start_log(output_dir: Path, resume_step: int | None) -> str | None:
    """Rank 0, before the logger opens ``log.jsonl`` (in append mode): make it hold this run's rows only.

    A fresh start (``resume_step`` None) into a folder where an earlier run logged (one killed before
    its first checkpoint passes `check_output_dir`) moves the old log and TensorBoard folder aside as
    ``log.jsonl.K`` / ``tensorboard.K``, K the first free number: a single rename each, nothing
    overwritten or lost, and the two runs' step-10 rows never share a file. A resume from step S keeps
    the rows of steps <= S (the killed run may have logged past its last checkpoint, and the resumed
    run logs those steps again), rewritten atomically; a half-written last line is dropped too.
    Returns the note that says what was done, or None.
    """
    log = output_dir / LOG_FILE
    if resume_step is None:
        if not log.is_file():
            return None
        if log.stat().st_size == 0:
            log.unlink()
            return None
        k = 1
        while (output_dir / f"{LOG_FILE}.{k}").exists() or (output_dir / f"{TENSORBOARD_DIR}.{k}").exists():
            k += 1
        folders.record(output_dir / f"{LOG_FILE}.{k}")
        os.replace(log, output_dir / f"{LOG_FILE}.{k}")
        moved = f"{LOG_FILE}.{k}"
        if (output_dir / TENSORBOARD_DIR).is_dir():
            folders.record(output_dir / f"{TENSORBOARD_DIR}.{k}")
            os.replace(output_dir / TENSORBOARD_DIR, output_dir / f"{TENSORBOARD_DIR}.{k}")
            moved += f" (and its TensorBoard events to {TENSORBOARD_DIR}.{k})"
        return f"{log} is an earlier run's log; moved it to {moved}: this run's log starts afresh"
    if not log.is_file():
        return None
    kept, dropped = [], 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            row_step = None  # a line cut by the kill
        if isinstance(row_step, int) and row_step <= resume_step:
            kept.append(line)
        else:
            dropped += 1
    if not dropped:
        return None
    with atomic_write(log, encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in kept))
    return (
        f"{log}: dropped {dropped} row(s) after step {resume_step}, logged by the interrupted run past its last "
        f"checkpoint (TensorBoard hides its events from step {resume_step + 1} on: purge_step)"
    )


class _Logger:
    def __init__(self, output_dir: Path, enabled: bool, tensorboard: bool, resume_step: int | None = None):
        self.enabled = enabled
        self.writer = None
        self.jsonl = None
        if not enabled:
            return
        folders.make_folders(output_dir)
        self.path = output_dir / LOG_FILE
        folders.record(self.path)
        self.jsonl = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            folders.record(output_dir / TENSORBOARD_DIR)
            try:
                from torch.utils.tensorboard import SummaryWriter

                # on resume TensorBoard discards the old event files' points from the next step on, as
                # `_start_log` drops the rows of log.jsonl past the checkpoint
                purge = resume_step + 1 if resume_step is not None else None
                self.writer = SummaryWriter(str(output_dir / TENSORBOARD_DIR), purge_step=purge)
            except ImportError:
                print0("note: tensorboard is not installed; logging to log.jsonl only (pip install tensorboard)")

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        size = self.jsonl.tell()
        try:
            self.jsonl.write(json.dumps({"step": step, **values}) + "\n")
            self.jsonl.flush()
        except OSError as e:
            reason = out_of_space(e)
            if reason is None:
                raise
            with contextlib.suppress(OSError):  # the unwritten row must not be flushed again at close
                self.jsonl.close()
            self.jsonl = None
            with contextlib.suppress(OSError):  # the log as it was: no half row
                os.truncate(self.path, size)
            raise NoSpaceError(self.path, reason) from None
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        if self.jsonl:
            self.jsonl.close()
        if self.writer is not None:
            self.writer.close()


BEST_DIR = "best"


def save_best_weights(output_dir: Path, model: nn.Module, info: dict[str, Any]) -> None:
    """``output_dir/best/``: the weights (state.pt) and ``best.json`` (step, score, metrics), atomically."""
    with atomic_dir(output_dir / BEST_DIR) as tmp:
        with open(tmp / "state.pt", "wb") as f:  # a Python file: a full disk surfaces as its OSError (ENOSPC)
            torch.save(_unwrap(model).state_dict(), f)
        (tmp / "best.json").write_text(json.dumps(info, indent=2) + "\n")


def load_best_weights(output_dir: Path, model: nn.Module) -> dict[str, Any]:
    """Load ``output_dir/best/state.pt`` into ``model``; returns ``best.json``."""
    where = output_dir / BEST_DIR
    try:
        state = torch.load(where / "state.pt", map_location="cpu", weights_only=True)
        info = json.loads((where / "best.json").read_text())
    except (OSError, ValueError, RuntimeError) as e:
        raise SpanBertError(f"{where}: cannot read the best model's weights ({e}); re-run the training") from None
    device = next(model.parameters()).device
    _unwrap(model).load_state_dict({k: v.to(device) for k, v in state.items()})
    return info
