"""Old spellings of moved names (`spanbert._aliases`): each resolves to the object in its home with a
DeprecationWarning, and nothing in the project goes through one (read from the source with `ast`)."""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

from spanbert._aliases import OLD_SPELLINGS

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "spanbert"
ALIASES = [(module, name, *home) for module, names in OLD_SPELLINGS.items() for name, home in sorted(names.items())]


@pytest.mark.parametrize(("module", "name", "home", "new"), ALIASES, ids=[f"{m}.{n}" for m, n, *_ in ALIASES])
def test_an_old_spelling_is_the_object_in_its_home_and_warns(module, name, home, new):
    old = importlib.import_module(module)
    assert name not in vars(old), f"{module} binds {name} itself: the old spelling would not warn"
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{name} moved to {home}.{new}")) as seen:
        value = getattr(old, name)
    assert value is getattr(importlib.import_module(home), new)
    assert seen[0].filename == __file__  # the warning names the line that used the old spelling


def _defines(module: str, name: str) -> bool:
    """Whether ``module``'s source binds ``name`` at its top level other than by importing it."""
    path = SRC.parent.joinpath(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


@pytest.mark.parametrize(("module", "name", "home", "new"), ALIASES, ids=[f"{m}.{n}" for m, n, *_ in ALIASES])
def test_an_old_spelling_points_at_the_module_that_defines_the_name(module, name, home, new):
    assert _defines(home, new), f"{module}.{name} -> {home}.{new}, which {home} imports from elsewhere"


def test_the_import_statement_spellings_warn_too():
    with pytest.warns(
        DeprecationWarning, match=r"spanbert\.data\.preprocess moved to spanbert\.preprocess\.preprocess"
    ):
        from spanbert.data import preprocess
    from spanbert import preprocess as home

    assert preprocess is home.preprocess
    with pytest.warns(DeprecationWarning, match=r"spanbert\.tasks\.common\.write_json moved to .*write_json_once"):
        from spanbert.tasks.common import write_json  # noqa: F401
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the module itself loads without a warning, and so does its map
        data = importlib.reload(importlib.import_module("spanbert.data"))
        assert "spanbert.corpus" in data.__doc__ and "TokenCorpus" in data.__all__


@pytest.mark.parametrize("module", sorted(OLD_SPELLINGS))
def test_a_name_that_is_no_old_spelling_is_an_attribute_error(module):
    old = importlib.import_module(module)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        old.no_such_name  # noqa: B018
    assert not hasattr(old, "__no_such_dunder__")


# ---------------------------------------------------------------------------------------------
# Nothing in the project uses an old spelling


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, spelling) of every old spelling ``tree`` uses: ``from OLD import name``, ``OLD.name`` through a
    module bound by an import (``import spanbert.model as m``, ``from spanbert import model``) or spelled out
    (``spanbert.model.name``), and any import of `spanbert.data`, which holds nothing but old spellings."""
    bound: dict[str, str] = {}  # local name -> the module of old spellings it is
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if a.name in OLD_SPELLINGS.get(node.module, {}):
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
                if f"{node.module}.{a.name}" in OLD_SPELLINGS:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
                if f"{node.module}.{a.name}" == "spanbert.data":
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in OLD_SPELLINGS:
                    bound[a.asname or a.name] = a.name
                if a.name == "spanbert.data":
                    found.append((node.lineno, f"import {a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else ast.unparse(node.value)
            module = bound.get(base, base)
            if node.attr in OLD_SPELLINGS.get(module, {}):
                found.append((node.lineno, f"{module}.{node.attr}"))
    return sorted(set(found))


def _source(module: str) -> str:
    return SRC.parent.joinpath(*module.split(".")).with_suffix(".py").read_text(encoding="utf-8")


def _python_files() -> list[Path]:
    files = [*SRC.rglob("*.py"), *(REPO / "tests").glob("*.py"), *(REPO / "bench").glob("*.py"),
             *(REPO / "scripts").glob("*.py")]  # fmt: skip
    return [p for p in files if p != Path(__file__) and p.name not in ("_aliases.py",)]


_FENCE = re.compile(r"^```python\s*$(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_HEREDOC = re.compile(r"^python3? - <<'?(\w+)'?\s*$(.*?)^\1\s*$", re.MULTILINE | re.DOTALL)


def _doc_snippets() -> list[tuple[str, str]]:
    """(where, code) of every Python snippet of the README and docs/*.md that parses."""
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for m in [*_FENCE.finditer(text), *_HEREDOC.finditer(text)]:
            code = m.group(m.lastindex)
            line = text.count("\n", 0, m.start()) + 1
            try:
                ast.parse(code)
            except SyntaxError:
                continue  # a sketch with `...` in an argument list
            out.append((f"{doc.relative_to(REPO)}:{line}", code))
    return out


def test_no_module_test_benchmark_or_document_uses_an_old_spelling():
    bad = []
    for path in _python_files():
        where = path.relative_to(REPO).as_posix()
        if where == "src/spanbert/data.py":
            continue
        bad += [f"{where}:{line}: {what}" for line, what in _uses(ast.parse(path.read_text(encoding="utf-8")))]
    for where, code in _doc_snippets():
        bad += [f"{where} (+{line}): {what}" for line, what in _uses(ast.parse(code))]
    assert not bad, "import these from their home (spanbert._aliases names it):\n" + "\n".join(bad)


def test_the_scan_sees_each_kind_of_use():
    code = (
        "import spanbert.data as D\n"
        "from spanbert import model, pretrain\n"
        "from spanbert.pretrain import SYSTEMS, pretrain as run\n"
        "import spanbert.model\n"
        "D.TokenCorpus, model.SBO_FILE, model.Encoder, pretrain.cloze_collate, spanbert.model.save_checkpoint\n"
    )
    found = {what for _, what in _uses(ast.parse(code))}
    assert {
        "import spanbert.data",
        "from spanbert.pretrain import SYSTEMS",
        "spanbert.data.TokenCorpus",
        "spanbert.model.SBO_FILE",
        "spanbert.pretrain.cloze_collate",
        "spanbert.model.save_checkpoint",
    } <= found
    assert not any("Encoder" in w or w.endswith(" pretrain") for w in found), found
    assert len(_doc_snippets()) > 10  # the snippets are read


def test_no_package_lends_a_private_name():
    # a package's __init__ re-exports its modules' public names only (issue 59: one facade style); a name
    # one module of a package takes from another is public in the module that defines it
    lent = []
    for init in sorted(SRC.rglob("__init__.py")):
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spanbert"):
                lent += [f"{init.relative_to(SRC)}: {a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_aliases"]
    assert lent == []


def test_a_package_lends_its_submodules_names_on_first_use_and_no_others():
    import subprocess
    import sys

    code = ("import sys, spanbert.tasks.qa as qa\n"
            "assert 'spanbert.tasks.qa.finetune' not in sys.modules\n"
            "assert qa.QAConfig.__module__ == 'spanbert.tasks.qa.options' and 'QAConfig' in dir(qa)\n"
            "assert 'spanbert.tasks.qa.finetune' not in sys.modules and 'torch' not in sys.modules\n"
            "try:\n    qa.nothing_of_the_kind\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
