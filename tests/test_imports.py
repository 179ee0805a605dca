"""The import structure, read from the source with `ast` (nothing is imported):

- an import sits inside a function only for an optional dependency (transformers, spaCy, matplotlib,
  tensorboard, huggingface_hub, scipy), or in the few modules that load lazily on purpose; every
  other import is at module level, where the graph shows it;
- the spanbert modules' module-level imports have no cycle (a module uses those below it only).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "spanbert"

OPTIONAL = ("transformers", "spacy", "matplotlib", "tensorboard", "torch.utils.tensorboard", "huggingface_hub",
            "scipy")  # fmt: skip
"""Optional dependencies (pyproject's extras): imported where used, so the core installs without them."""

LAZY_MODULES = (
    "spanbert/__init__.py",  # `spanbert.Encoder` & co. on first use: `import spanbert` imports no torch
    "spanbert/cli.py",  # `spanbert --help` imports no task and no torch; commands load their module on use
    "spanbert/study/__init__.py",  # each name from its module on first use: `spanbert study --help` loads no task
    # torch where it is used: rank/print0, the thread option and the token dataset serve commands and
    # parsers that load no torch (`spanbert tokenizer`, `spanbert preprocess`, every `--help`)
    "spanbert/distributed.py",
    "spanbert/threads.py",
    "spanbert/dataset.py",
    "spanbert/model_inputs.py",  # `spanbert tokenizer` loads no torch: tensors only for tok(..., return_tensors="pt")
    # torch.nn.attention.varlen loads torch._dynamo (about 2 s): imported by the first CUDA batch that uses it
    "spanbert/modernbert.py",
    # a task command's options: the encoder family's defaults (torch, via spanbert.families) only when --model
    # names one, so `spanbert finetune squad --help` loads no torch
    "spanbert/tasks/options.py",
)
"""Modules allowed imports inside functions, each for the reason given."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules an import statement names (``from a import b`` names ``a.b`` when that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports(path: Path) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(module-level imports, imports inside a function or lambda) of one file."""
    top: list[ast.stmt] = []
    inner: list[ast.stmt] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top).append(child)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text(encoding="utf-8")), False)
    return top, inner


def _is_optional(name: str) -> bool:
    return any(name == o or name.startswith(o + ".") for o in OPTIONAL)


def test_imports_inside_functions_are_only_optional_dependencies():
    bad = []
    for module, path in MODULES.items():
        where = path.relative_to(SRC.parent).as_posix()
        if where.startswith(LAZY_MODULES):
            continue
        _, inner = _imports(path)
        for node in inner:
            names = _targets(node, module, path.name == "__init__.py")
            if not all(_is_optional(n) for n in names):
                bad.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "move these imports to module level (only optional dependencies stay inside):\n" + "\n".join(bad)


def _graph() -> dict[str, set[str]]:
    """spanbert module -> the spanbert modules its module-level imports load (a submodule loads its
    packages too)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        top, _ = _imports(path)
        for node in top:
            for name in _targets(node, module, path.name == "__init__.py"):
                while name and name not in MODULES:  # `from spanbert.x import name`: the module spanbert.x
                    name = name.rpartition(".")[0]
                while name:
                    if name != module and not module.startswith(name + "."):  # a module's own package is loaded first
                        graph[module].add(name)
                    name = name.rpartition(".")[0] if name.rpartition(".")[0] in MODULES else ""
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u: str) -> None:
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == "open":
                found.append(stack[stack.index(v) :] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in sorted(graph):
        if u not in state:
            visit(u)
    return found


def test_the_module_level_import_graph_has_no_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_what_they_check():
    # the graph reads real edges (a broken parser would pass both tests above vacuously)
    graph = _graph()
    assert "spanbert.tasks.selection" in graph["spanbert.tasks.qa.finetune"]
    assert "spanbert.trainer" in graph["spanbert.tasks.qa.finetune"]
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    # and an import inside a function is found, with its line
    _, inner = _imports(SRC / "hub.py")
    assert inner and all(_is_optional(n) for node in inner for n in _targets(node, "spanbert.hub", False))


# every command's --help: `spanbert COMMAND --help`, the task list of each task action, and one task's help
_HELPS = [
    ["tokenizer", "--help"], ["tokenizer", "train", "--help"], ["preprocess", "--help"], ["pretrain", "--help"],
    ["fill", "--help"], ["study", "--help"], ["curve", "--help"],
    ["finetune", "--help"], ["predict", "--help"], ["evaluate", "--help"],
]  # fmt: skip


LIGHT_TASK_MODULES = {"spanbert.tasks.spec", "spanbert.tasks.registry", "spanbert.tasks.api", "spanbert.tasks.options"}
"""What the task registry and the Python API are made of: no torch and no task (a task file is loaded on use)."""


def _modules_after(argv: list[str]) -> dict[str, object]:
    """What `spanbert ARGV` leaves in sys.modules, run in a fresh interpreter: the exit code, whether
    torch and torch._dynamo were imported, and which task modules."""
    code = (
        "import sys, contextlib, io, json\n"
        f"LIGHT = {sorted(LIGHT_TASK_MODULES)!r}\n"
        "import spanbert.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        f"        code = spanbert.cli.main({argv!r})\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        "tasks = sorted(m for m in sys.modules if m.startswith('spanbert.tasks.') and m not in LIGHT)\n"
        "print(json.dumps({'code': code, 'torch': 'torch' in sys.modules, 'dynamo': 'torch._dynamo' in sys.modules,\n"
        "                  'tasks': tasks, 'help': out.getvalue()[:200]}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("argv", _HELPS, ids=" ".join)
def test_every_commands_help_imports_no_torch_and_no_task(argv):
    seen = _modules_after(argv)
    assert seen["code"] == 0 and seen["help"].startswith("usage:"), seen
    assert not seen["dynamo"] and not seen["torch"] and seen["tasks"] == [], seen


@pytest.mark.parametrize("task", ["squad", "tacred", "glue", "ner", "coref", "swag", "parse", "probe"])
def test_a_tasks_help_loads_no_dynamo_and_no_other_task(task):
    # a task whose options are classes (the registry's _OPTIONS) loads only their module, and no torch; a task
    # that still parses its own argv loads its module, which loads torch; never torch._dynamo, nor another task
    from spanbert.tasks.registry import _MODULES, _OPTIONS, TASKS

    seen = _modules_after(["finetune", task, "--help"])
    assert seen["code"] == 0 and seen["help"].startswith(f"usage: spanbert finetune {task}"), seen
    own = _OPTIONS[task] if "finetune" in TASKS.options(task) else _MODULES[task]
    mine = {_MODULES[task], _OPTIONS.get(task, _MODULES[task])}
    others = {m for m in {*_MODULES.values(), *_OPTIONS.values()} if not any(x.startswith(m) for x in mine)} - mine
    assert not seen["dynamo"] and own in seen["tasks"] and not others & set(seen["tasks"]), seen
    if "finetune" in TASKS.options(task):
        assert not seen["torch"], seen


def test_help_and_the_registry_import_no_task_and_no_torch():
    # the registry names each task's module and imports it when the task is first used
    code = (
        "import sys, contextlib, io\n"
        f"LIGHT = {sorted(LIGHT_TASK_MODULES)!r}\n"
        "import spanbert.cli, spanbert.tasks\n"
        "names = list(spanbert.tasks.TASKS)\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = spanbert.cli.main(['--help'])\n"
        "tasks = sorted(m for m in sys.modules if m.startswith('spanbert.tasks.') and m not in LIGHT)\n"
        "print(code, tasks, 'torch' in sys.modules, names)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    code_, rest = out.split(" ", 1)
    assert code_ == "0" and rest.startswith("[] False ['squad'"), out
