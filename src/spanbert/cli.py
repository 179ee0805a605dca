"""`spanbert <command>`: a plain table from command names to the functions that run them.

Modules are imported only when their command runs, so `spanbert --help` answers at once. A command
whose module loads torch names, in `HELP_PARSERS`, a function that builds its parser without it: its
``--help`` is printed from that parser (the one the command itself parses with), and answers at once too.
Every command function has the signature ``main(argv: list[str], prog: str) -> int``; the task
commands (`finetune`, `predict`, `evaluate`) take the task name as their first argument and run the
task's `TaskSpec` from the registry `spanbert.tasks.TASKS` and print what it returns
(`spanbert.tasks.options.main`): the command line is a thin layer over the Python API.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from spanbert.environment import check_omp_environment
from spanbert.errors import SpanBertError
from spanbert.tasks import TASKS as _TASKS
from spanbert.tasks import options as task_options
from spanbert.utils import messages_leave_a_taken_stdout

# the task registry (name -> TaskSpec, each loaded when its task runs): `spanbert.tasks.TASKS`
TASKS = _TASKS

# command -> (module, function, one-line description)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "tokenizer": ("spanbert.tokenization", "main", "train a cased WordPiece vocabulary (tokenizer train)"),
    "preprocess": ("spanbert.preprocess", "main", "tokenize a text corpus into memory-mapped token arrays"),
    "pretrain": ("spanbert.pretrain_command", "main", "pre-train SpanBERT or a BERT baseline (no arguments: quick start)"),
    "fill": ("spanbert.fill", "fill_main", "predict a masked span with the MLM or the SBO head"),
    # the task list comes from TASKS, so that a new task cannot be left out of `spanbert --help`
    "finetune": ("", "", f"fine-tune on a task: {', '.join(TASKS)}"),
    "predict": ("", "", "write predictions of a fine-tuned model in the task's official format"),
    "evaluate": ("", "", "score predictions with the task's official metrics (prints JSON)"),
    "study": ("spanbert.study", "main", "rerun the paper's comparisons (Tables 1, 6, 7): pre-train, fine-tune, tabulate"),
    "curve": ("spanbert.study", "curve_main", "fine-tune from every checkpoint of a pre-training run: score vs step"),
    "probe": ("spanbert.tasks.probe_command", "run_probes", "span probes of a frozen encoder (all layers and layer 0): one table"),
}

# command -> (module, class) of its options, for a command whose function takes one options object (and its
# name): the command line is parsed here, from that torch-free class (`spanbert.tasks.options.parse`), whose
# ``HELP`` is its help's opening sentence and closing examples
TYPED_COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("spanbert.tasks.probe_options", "ProbeRun"),
}

# command -> (module, function) building the command's parser without loading torch: its `--help`. The
# command's own `main` parses with the same function, so the two helps cannot differ.
HELP_PARSERS: dict[str, tuple[str, str]] = {
    "pretrain": ("spanbert.pretrain_config", "pretrain_parser"),
    "fill": ("spanbert.pretrain_config", "fill_parser"),
    "study": ("spanbert.study.options", "study_parser"),
    "curve": ("spanbert.study.options", "curve_parser"),
}

TASK_ACTIONS = ("finetune", "predict", "evaluate")
# commands that run a model: they get the CPU thread policy (`spanbert.threads`)
COMPUTE = ("pretrain", "finetune", "predict", "evaluate", "study", "curve", "probe")


def _threads_option(argv: list[str]) -> int:
    """The value of ``--threads N`` (or ``--threads=N``) in a command's arguments, 0 if absent or not
    a number. Read here, before the command parses its options, so that everything the command does
    (vocabulary, features, training, prediction) runs under it; the command's own parser still
    declares and checks the option."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--threads="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return int(value) if value.isdigit() else 0
    return 0


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: spanbert <command> [options]   (spanbert <command> --help for its options)",
        "",
        "Pre-train and fine-tune span-aware BERT encoders (SpanBERT, Joshi et al., TACL 2020).",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, _, desc) in COMMANDS.items()]
    lines += ["", "quick start:  spanbert pretrain     (tiny model, bundled corpus, CPU)"]
    return "\n".join(lines)


def _task_usage(action: str) -> str:
    width = max(map(len, TASKS))
    lines = [f"usage: spanbert {action} <task> [options]", "", "tasks:"]
    lines += [f"  {name:<{width}}  {TASKS.describe(name)}" for name in TASKS]
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    """Run one command line (without the program name) in this process; its exit code. Errors are raised
    (`main` turns them into one line and an exit status), and a torchrun process group stays joined."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from spanbert import __version__

        print(f"spanbert {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    from spanbert.config import _did_you_mean  # a small module; the commands' own stay unimported

    if command not in COMMANDS:
        raise SpanBertError(
            f"spanbert: found unknown command {command!r}{_did_you_mean(command, list(COMMANDS))}; "
            f"expected one of: {', '.join(COMMANDS)}"
        )
    if command in COMPUTE and not any(a in ("-h", "--help") for a in rest):
        from spanbert import threads

        threads.configure(_threads_option(rest))
    if command in TASK_ACTIONS:
        if not rest or rest[0] in ("-h", "--help"):
            print(_task_usage(command))
            return 0 if rest else 2
        task = rest[0]
        if task not in TASKS:
            raise SpanBertError(
                f"spanbert {command}: found unknown task {task!r}{_did_you_mean(task, list(TASKS))}; "
                f"expected one of: {', '.join(TASKS)}"
            )
        return task_options.main(task, command, rest[1:])
    if command in HELP_PARSERS and any(a in ("-h", "--help") for a in rest):
        module_name, func_name = HELP_PARSERS[command]
        parser = getattr(importlib.import_module(module_name), func_name)(f"spanbert {command}")
        parser.parse_args(rest)  # prints the help and exits, or stops at an error before the --help
    module_name, func_name, _ = COMMANDS[command]
    prog = f"spanbert {command}"
    if command in TYPED_COMMANDS:
        cls = getattr(importlib.import_module(TYPED_COMMANDS[command][0]), TYPED_COMMANDS[command][1])
        opts = task_options.parse(cls, rest, prog, *cls.HELP)  # --help exits here, before the command's module loads
        getattr(importlib.import_module(module_name), func_name)(opts, prog)
        return 0
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest, prog) or 0)


# what the system found at a path and what the command needed there, by its error (the commands check
# their outputs before any work, `utils.check_output`; this is the net under every other open)
_PATH_ERRORS = {
    errno.EACCES: ("no permission", "a location this user may read and write"),
    errno.EPERM: ("no permission", "a location this user may read and write"),
    errno.EROFS: ("a read-only file system", "a writable location"),
    errno.EEXIST: ("a file where a folder is needed", "a folder or a path not yet used"),
    errno.ENOTDIR: ("a file where the path needs a folder", "a folder at every step of the path"),
    errno.EISDIR: ("a folder", "a file name"),
    errno.ENOSPC: ("no space left on the device", "room for the output"),
    errno.EDQUOT: ("the disk quota used up", "room for the output"),
}


def _path_error(e: OSError) -> str | None:
    """One `FILE: found ..., expected ...` line for a file-system error on a named path, or None."""
    if e.filename is None or e.errno not in _PATH_ERRORS:
        return None
    found, expected = _PATH_ERRORS[e.errno]
    return f"{e.filename}: found {found} ({e.strerror}); expected {expected}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `spanbert` console command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    code = None
    note = check_omp_environment()  # before any command loads torch and its OpenMP runtime
    if note and os.environ.get("RANK", "0") == "0":  # once for a torchrun job
        print(note, file=sys.stderr)
    restore = _second_interrupt_ends_at_once()
    try:
        with messages_leave_a_taken_stdout():  # `--output /dev/stdout`: stdout holds the output alone
            code = run(argv)
        return code
    except SpanBertError as e:
        from spanbert.distributed import rank, world_size

        # Under torchrun an error that every rank shares (one broadcast by `on_main`) prints once, on
        # rank 0; an error of one rank alone says which rank it is.
        if not getattr(e, "reported_by_main", False):
            prefix = f"error: (rank {rank()}) " if world_size() > 1 and rank() > 0 else "error: "
            print(f"{prefix}{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `spanbert evaluate ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except OSError as e:
        line = _path_error(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except Exception as e:
        from spanbert.distributed import exit_after_peer_failure, peer_failure

        # under torchrun, a collective broken by a rank that died: one line naming it, not gloo's traceback
        line = peer_failure(e)
        if line is None:
            raise
        exit_after_peer_failure(line)
    finally:
        # only `spanbert.distributed` joins a process group: a command that never imported it (`--help`,
        # a usage error) has none to leave, and importing it here would load torch for nothing
        distributed = sys.modules.get("spanbert.distributed")
        if distributed is not None:
            if code != 0:
                distributed.mark_failed()  # the other ranks may wait for this one in a collective: leave at once
            distributed.shutdown()
        restore()


def _second_interrupt_ends_at_once() -> Callable[[], None]:
    """Ctrl-C stops a command as always (a KeyboardInterrupt: the atomic writers remove their temporaries,
    "interrupted", exit 130); a second one while it stops (20 ms later) ends the process at once, exit 130,
    silently, instead of a KeyboardInterrupt traceback from an exit hook (issue 58.8). What the cut cleanup
    leaves is temporary names the next run's start removes (`spanbert.folders.is_debris`). Returns what puts
    the previous handler back (an in-process caller, a test) unless the first Ctrl-C came."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:  # someone else's handling (a debugger, an embedding program)
        return lambda: None
    interrupted = []

    def first(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    return lambda: None if interrupted else signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    raise SystemExit(main())
