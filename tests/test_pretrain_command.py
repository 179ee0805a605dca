"""`spanbert pretrain`'s command line and `spanbert.pretrain(...)` (`spanbert.pretrain_command`): the options read
once, Python keywords read as the flags are, the same job and weights either way. The presets and first line
are pinned in test_pretrain.py with the job."""

from __future__ import annotations

import pytest
import torch
from test_pretrain import _captured_main

from spanbert.errors import SpanBertError


def test_the_yaml_file_is_read_once(monkeypatch, tmp_path):
    """Issue 59: `pretrain --config` read its YAML up to 8 times (each question of which options were named);
    now once, where the command line is parsed (`named_values`)."""
    from spanbert import config

    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("TrainingArguments:\n  max_steps: 7\n  per_device_train_batch_size: 4\nPretrainConfig:\n"
                         "  max_seq_length: 64\n")  # fmt: skip
    reads = []
    real = config._read_yaml
    monkeypatch.setattr(config, "_read_yaml", lambda path: reads.append(path) or real(path))
    cfg, targs, _ = _captured_main(monkeypatch, ["--config", str(yaml_file), "--warmup_steps", "2"])
    assert (targs.max_steps, targs.per_device_train_batch_size, cfg.max_seq_length, cfg.tokens_per_update) == (7, 4, 64, 0)
    assert len(reads) == 1, reads


def test_pretraining_from_python_equals_the_command_line(corpus_dir, tmp_path):
    """`spanbert.pretrain(**options)` (issue 59): the command's options by name, the same presets, checks and
    job as `spanbert pretrain` (the same weights), a result with the model folder and its metrics."""
    from safetensors.torch import load_file

    import spanbert
    from spanbert.cli import main

    common = ["--corpus", str(corpus_dir), "--model", "tiny", "--max_seq_length", "16", "--per_device_train_batch_size",
              "4", "--disable_tqdm", "--report_to", "none", "--max_steps", "2", "--warmup_steps", "1"]  # fmt: skip
    assert main(["pretrain", *common, "--output_dir", str(tmp_path / "cli")]) == 0
    run = spanbert.pretrain(
        corpus=corpus_dir, model="tiny", max_seq_length=16, per_device_train_batch_size=4, disable_tqdm=True,
        report_to="none", max_steps=2, warmup_steps=1, output_dir=tmp_path / "py",
    )  # fmt: skip
    assert run.model_dir == tmp_path / "py" / "final" and run.output_dir == tmp_path / "py"
    assert "loss" in " ".join(run.metrics)
    a, b = (load_file(str(d / "final" / "model.safetensors")) for d in (tmp_path / "cli", tmp_path / "py"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_pretraining_command_checks_its_output_folder_once_and_keeps_its_config_file_apart(
    corpus_dir, tmp_path, monkeypatch, cli_error
):
    """Issue 59: `spanbert pretrain` checked its output folder in the command, the job and each stage's loop."""
    from spanbert import runs
    from spanbert.cli import main

    checks: list[str] = []
    real = runs.check_output
    monkeypatch.setattr(runs, "check_output", lambda path, **kw: checks.append(str(path)) or real(path, **kw))
    common = ["--corpus", str(corpus_dir), "--model", "tiny", "--max_seq_length", "16", "--per_device_train_batch_size",
              "4", "--disable_tqdm", "--report_to", "none", "--max_steps", "2", "--warmup_steps", "1"]  # fmt: skip
    assert main(["pretrain", *common, "--output_dir", str(tmp_path / "run")]) == 0
    assert checks == [str(tmp_path / "run")], checks
    # the one check still keeps the output apart from the --config file the command read
    yaml_file = tmp_path / "inside" / "c.yaml"
    yaml_file.parent.mkdir()
    yaml_file.write_text("TrainingArguments:\n  max_steps: 2\n")
    err = cli_error(["pretrain", *common, "--config", str(yaml_file), "--output_dir", str(yaml_file.parent)],
                    contains="--config", out=tmp_path)  # fmt: skip
    assert "output" in err and yaml_file.read_text() == "TrainingArguments:\n  max_steps: 2\n"


def test_pretraining_from_python_names_the_keyword_of_a_mistake(tmp_path):
    import spanbert

    with pytest.raises(SpanBertError, match=r"found unknown keyword 'learnig_rate' \(did you mean 'learning_rate'\?\)"):
        spanbert.pretrain(learnig_rate=1e-3, output_dir=tmp_path / "a")
    with pytest.raises(SpanBertError, match="option max_steps: found 'many', expected an integer"):
        spanbert.pretrain(max_steps="many", output_dir=tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert spanbert.pretrain.pretrain is not None  # still the module, as `from spanbert.pretrain import pretrain`


def test_pretraining_from_python_sets_its_threads_as_the_flag_does(monkeypatch, tmp_path):
    # `spanbert.pretrain(threads=N)` is the --threads of the command, as `spanbert.tasks`' threads= is
    import spanbert
    from spanbert import threads

    seen = []
    monkeypatch.setattr(threads, "configure", lambda n=0: seen.append(n) or "")
    with pytest.raises(SpanBertError, match="max_steps"):
        spanbert.pretrain(threads=3, max_steps="many", output_dir=tmp_path / "run")
    assert seen == [3]
