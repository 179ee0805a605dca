"""Checkpoint folders (`spanbert.checkpoints`) and the structure around them (their structure and the fences around the families).

- every folder save is atomic and replaces an earlier model whole (audit item 4): an SBO head of an
  earlier save never survives beside a model without one; a save killed midway leaves the earlier folder
  intact and loadable; the two-tower export swaps `final/` in whole, as the BERT export does;
- a folder save refuses a file or a folder of other files, changing nothing;
- no task imports a model file; no module compares with a family's or a task's name outside its own
  module and the registries (families.py dispatches on its `FamilySpec` rows); the modules below the
  families do not import them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from spanbert import checkpoint_files, checkpoints, cloze, families
from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.model import Encoder, SpanBertForPreTraining

SRC = Path(__file__).resolve().parents[1] / "src" / "spanbert"
V = 100


def tiny(**kw):
    return model_config("tiny", vocab_size=V, max_position_embeddings=64, **kw)


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return checkpoints.read_safetensors(folder / "model.safetensors")


# ---------------------------------------------------------------------------------------------
# what a folder save replaces


def test_a_save_without_sbo_over_one_with_it_leaves_only_the_new_model(tmp_path):
    folder = tmp_path / "m"
    torch.manual_seed(0)
    SpanBertForPreTraining(tiny(), sbo=True).save_pretrained(folder, extra={"system": "spanbert"})
    (folder / "train_metrics.json").write_text("{}\n")  # as the pre-training export leaves it
    assert checkpoint_files.SBO_FILE in names(folder)
    torch.manual_seed(1)
    mlm_only = SpanBertForPreTraining(tiny(), sbo=False)
    mlm_only.save_pretrained(folder)
    assert names(folder) == {"config.json", "model.safetensors"}  # no SBO head, no old metrics
    assert json.loads((folder / "config.json").read_text())["spanbert"]["sbo"] is False
    loaded = SpanBertForPreTraining.from_pretrained(folder)
    assert loaded.cls.span_predictions is None
    for k, v in mlm_only.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    # `spanbert fill --head sbo` on it is refused, not run on a head of the earlier model
    with pytest.raises(SpanBertError, match="span boundary head"):
        SpanBertForPreTraining.from_pretrained(folder, require=("sbo",), needed_by="spanbert fill --head sbo")
    # an encoder saved over a pre-training folder: the heads go too
    Encoder(tiny()).save_pretrained(folder)
    assert names(folder) == {"config.json", "model.safetensors"}
    assert not any(k.startswith("cls.") for k in weights(folder))


@pytest.mark.parametrize("family", ["bert", "pretraining", "two-tower"])
def test_a_save_killed_midway_leaves_the_earlier_folder(tmp_path, monkeypatch, family):
    folder = tmp_path / "m"
    torch.manual_seed(0)
    if family == "two-tower":
        texts = ["the cat sat on the mat", "a dog ran in the park"] * 20
        tok = cloze.train_cloze_tokenizer(None, 120, texts=texts)
        cfg = cloze.cloze_config("tiny", d_model=16, num_heads=2, ffn_dim=32, final_heads=2)
        make = lambda: cloze.build_model(cfg, tok)  # noqa: E731
        save = lambda m: m.save_pretrained(folder, tokenizer=tok)  # noqa: E731
    else:
        make = (lambda: Encoder(tiny())) if family == "bert" else (lambda: SpanBertForPreTraining(tiny(), sbo=True))  # noqa: E731
        save = lambda m: m.save_pretrained(folder)  # noqa: E731
    first = make()
    save(first)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = checkpoints.save_file
    calls = []

    def dies_on_the_second_file(tensors, filename, metadata=None):
        calls.append(filename)
        real(tensors, filename, metadata=metadata)
        if len(calls) == 1 and family == "pretraining":
            return  # the main weights are written, the SBO head's write dies
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(checkpoints, "save_file", dies_on_the_second_file)
    torch.manual_seed(1)
    with pytest.raises(KeyboardInterrupt):
        save(make())
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # byte for byte
    assert names(tmp_path) == {"m"}  # no temporary folder left beside it
    _, state = families.load_checkpoint(folder)
    for k, v in first.state_dict().items():
        if k in state:
            assert torch.equal(state[k], v), k


def test_the_two_tower_export_is_atomic(tmp_path, monkeypatch):
    from spanbert import pretrain

    texts = ["the cat sat on the mat", "a dog ran in the park"] * 20
    tok = cloze.train_cloze_tokenizer(None, 120, texts=texts)
    cfg = cloze.cloze_config("tiny", d_model=16, num_heads=2, ffn_dim=32, final_heads=2)
    final = tmp_path / "run" / "final"
    torch.manual_seed(0)
    pretrain.export(cloze.build_model(cfg, tok), tok, final, {"system": "cloze"}, {"eval_loss": 1.0})
    before = {p.name: p.read_bytes() for p in final.iterdir()}
    assert {"config.json", "model.safetensors", "train_metrics.json", "tokenizer.json"} <= set(before)

    def killed(*a, **k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(checkpoints, "save_file", killed)
    torch.manual_seed(1)
    with pytest.raises(KeyboardInterrupt):
        pretrain.export(cloze.build_model(cfg, tok), tok, final, {"system": "cloze"}, {"eval_loss": 0.5})
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in final.iterdir()} == before
    assert names(final.parent) == {"final"}
    model, _ = cloze.load_two_tower(final)
    assert model.config.d_model == 16


def test_a_folder_save_refuses_other_files_and_files(tmp_path):
    notes = tmp_path / "mine"
    notes.mkdir()
    (notes / "notes.txt").write_text("keep me\n")
    with pytest.raises(SpanBertError, match="holding other files"):
        Encoder(tiny()).save_pretrained(notes)
    assert names(notes) == {"notes.txt"} and names(tmp_path) == {"mine"}
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(SpanBertError, match="found a file"):
        Encoder(tiny()).save_pretrained(afile)
    assert afile.read_text() == "x"
    with pytest.raises(SpanBertError, match="found a file"):
        Encoder(tiny()).save_pretrained(afile / "m")
    assert names(tmp_path) == {"mine", "afile"}


def test_an_in_place_save_drops_an_earlier_models_weight_files(tmp_path):
    """`save_checkpoint` into a run folder keeps the run's files and drops the earlier model's weights
    that the new save does not write (an SBO head, a pytorch_model.bin)."""
    SpanBertForPreTraining(tiny(), sbo=True).save_pretrained(tmp_path / "m")
    run = tmp_path / "m"
    (run / "log.jsonl").write_text("{}\n")
    (run / "pytorch_model.bin").write_bytes(b"old")
    checkpoints.save_checkpoint(run, Encoder(tiny()).state_dict(), tiny().to_hf_dict())
    assert names(run) == {"config.json", "model.safetensors", "log.jsonl"}


# ---------------------------------------------------------------------------------------------
# the structure


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, inside functions too (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
            found.append((node.lineno, base))
    return found


MODEL_FILES_ = ("spanbert.model", "spanbert.cloze")


def test_no_task_imports_a_model_file():
    bad = [
        f"{path.relative_to(SRC.parent)}:{line}: imports {name}"
        for path in sorted((SRC / "tasks").rglob("*.py"))
        for line, name in _imports(path)
        if name in MODEL_FILES_ or name.startswith(tuple(m + "." for m in MODEL_FILES_))
    ]
    assert not bad, "tasks reach a family only through spanbert.families:\n" + "\n".join(bad)


# Where a family's or a task's name may be compared with: its own module(s) and the registries (the
# light mirror of the families in pretrain_config.py). Everywhere else a question about a family goes through the
# protocol or its row, and one about a task through its `TaskSpec`.
FAMILY_HOMES = {
    "bert": {"model.py"},
    cloze.MODEL_TYPE: {"cloze.py"},
    "modernbert": {"modernbert.py"},
}
REGISTRIES = {"families.py", "pretrain_config.py", "tasks/registry.py"}
# the constants that spell a family's name, by the name they are imported or defined under (the registry's
# DEFAULT_FAMILY is a role, what a folder or system that names no family is on, and may be compared with)
FAMILY_CONSTANTS = {"CLOZE_MODEL_TYPE": cloze.MODEL_TYPE, "MODERNBERT_MODEL_TYPE": "modernbert"}


def _compared_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every comparison in the file with a family's or a task's name: a string constant
    (alone or in a tuple, list or set), or a family's name constant (``cloze.MODEL_TYPE`` where the
    module's own ``MODEL_TYPE`` is not meant)."""
    from spanbert.tasks.registry import _MODULES

    names = set(families.FAMILIES) | set(_MODULES)
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def spelled(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value in names else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [x for e in node.elts for x in spelled(e)]
        if isinstance(node, ast.Name) and node.id in FAMILY_CONSTANTS:
            return [FAMILY_CONSTANTS[node.id]]
        if isinstance(node, ast.Attribute) and node.attr == "MODEL_TYPE" and isinstance(node.value, ast.Name):
            module = {"cloze": cloze.MODEL_TYPE, "modernbert": "modernbert"}.get(node.value.id)
            return [module] if module else []
        return []

    return [(node.lineno, name) for node in ast.walk(tree) if isinstance(node, ast.Compare)
            for side in [node.left, *node.comparators] for name in spelled(side)]  # fmt: skip


def test_no_module_compares_with_a_family_or_task_name_outside_its_home():
    from spanbert.tasks.registry import _MODULES

    # a task's home: its module, or every file of its package (tasks/qa/)
    task_homes = {name: module.removeprefix("spanbert.").replace(".", "/") for name, module in _MODULES.items()}

    def at_home(where: str, name: str) -> bool:
        if name in FAMILY_HOMES:
            return where in FAMILY_HOMES[name]
        return where == f"{task_homes[name]}.py" or where.startswith(f"{task_homes[name]}/")

    bad = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where in REGISTRIES:
            continue
        bad += [f"{where}:{line}: compares with {name!r}" for line, name in _compared_names(path)
                if not at_home(where, name)]  # fmt: skip
    assert not bad, "ask the family's protocol or row, or the task's TaskSpec, instead:\n" + "\n".join(bad)


def test_the_fence_sees_a_comparison():
    # the check above finds what it looks for (a constant, a tuple, a family constant, a module's MODEL_TYPE)
    import tempfile

    code = 'if f == "bert" or t in ("squad", "x") or f == CLOZE_MODEL_TYPE or f != modernbert.MODEL_TYPE: pass\n'
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe.py"
        path.write_text(code)
        assert sorted(n for _, n in _compared_names(path)) == sorted(["bert", "squad", cloze.MODEL_TYPE, "modernbert"])


def test_the_light_family_table_names_the_families_that_pre_train():
    # `spanbert pretrain --family` is checked without torch (config.PRETRAINING_FAMILIES): the same families
    from spanbert.pretrain_config import DEFAULT_FAMILY, PRETRAINING_FAMILIES

    assert list(PRETRAINING_FAMILIES) == [n for n, row in families.FAMILIES.items() if row.pretraining is not None]
    assert DEFAULT_FAMILY in families.FAMILIES and FAMILY_HOMES.keys() == families.FAMILIES.keys()


@pytest.mark.parametrize("module", ["checkpoints", "dropout"])
def test_the_shared_layers_sit_below_the_families(module):
    above = ("spanbert.model", "spanbert.cloze", "spanbert.families", "spanbert.tasks", "spanbert.pretrain")
    bad = [name for _, name in _imports(SRC / f"{module}.py") if name.startswith(above)]
    assert not bad, f"spanbert.{module} imports {bad}"


def test_a_json_file_is_read_once_per_version(tmp_path, monkeypatch):
    # a command reads a model's config.json from its habits, the loader and the tokenizer: once is enough
    import os
    from pathlib import Path

    from spanbert import checkpoints

    f = tmp_path / "config.json"
    f.write_text('{"a": [1]}')
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or real(self))
    first = checkpoints.read_json(f, "settings")
    first["a"].append(2)  # a caller's change stays its own
    assert checkpoints.read_json(f, "settings") == {"a": [1]} and reads == ["config.json"]
    f.write_text('{"a": [1, 2, 3]}')
    os.utime(f, ns=(1, 1))  # another version of the file: read again
    assert checkpoints.read_json(f, "settings") == {"a": [1, 2, 3]} and len(reads) == 2


def test_a_weights_file_given_for_its_folder_says_to_pass_the_folder(tmp_path):
    """The re-audit of issue 58: `Encoder.from_pretrained('.../model.safetensors')` said "checkpoint folder
    not found" of a path that exists."""
    Encoder(tiny()).save_pretrained(tmp_path / "m")
    with pytest.raises(SpanBertError, match=r"model\.safetensors: found a file, expected the model's folder .*: pass .*/m$"):
        Encoder.from_pretrained(tmp_path / "m" / "model.safetensors")
