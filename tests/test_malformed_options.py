"""Malformed training options (TrainingArguments, contract 4) through the CLI: each is a clean error
(exit 2, `error: ` naming the option, no traceback) raised before any work, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanbert.folders import claim_manifest, record


def _pretrain(out: Path, *flags: str) -> list[str]:
    return ["pretrain", "--output_dir", str(out), "--max_steps", "1", *flags]


def _glue(out: Path, *flags: str) -> list[str]:
    missing = out.parent / "missing"
    return ["finetune", "glue", "--task", "sst2", "--data_dir", str(missing), "--model", str(missing),
            "--output_dir", str(out), *flags]


def _squad(out: Path, *flags: str) -> list[str]:
    missing = out.parent / "missing"
    return ["finetune", "squad", "--train_file", str(missing / "train.json"), "--model", str(missing),
            "--output_dir", str(out), *flags]


def _coref(out: Path, *flags: str) -> list[str]:
    missing = out.parent / "missing"
    return ["finetune", "coref", "--train", str(missing), "--model", str(missing), "--output_dir", str(out), *flags]


def _existing_run(out: Path) -> None:
    """What an earlier run leaves: its manifest listing what it wrote, a checkpoint and `latest`."""
    claim_manifest(out, "run", "spanbert pretrain")
    for name in ("latest", "checkpoint-5"):
        record(out / name)
    (out / "latest").write_text("checkpoint-5\n")
    (out / "checkpoint-5").mkdir()


CASES = [
    pytest.param(_pretrain, ("--learning_rate", "-1"), "--learning_rate", "expected a number in [0.0", id="pretrain-negative-lr"),
    pytest.param(_pretrain, ("--learning_rate", "nan"), "learning_rate", "expected a number", id="pretrain-nan-lr"),
    pytest.param(_pretrain, ("--learning_rate", "inf"), "--learning_rate", "finite", id="pretrain-inf-lr"),
    pytest.param(_pretrain, ("--adam_beta2", "1.0"), "--adam_beta2", "[0.0, 1.0)", id="pretrain-beta2-one"),
    pytest.param(_pretrain, ("--adam_beta1", "-0.1"), "--adam_beta1", "[0.0, 1.0)", id="pretrain-beta1-negative"),
    pytest.param(_pretrain, ("--adam_epsilon", "0"), "--adam_epsilon", "(0.0", id="pretrain-epsilon-zero"),
    pytest.param(_pretrain, ("--seed", "-3"), "--seed", ">= 0", id="pretrain-negative-seed"),
    pytest.param(_pretrain, ("--warmup_steps", "-5"), "--warmup_steps", ">= 0", id="pretrain-negative-warmup"),
    pytest.param(_pretrain, ("--warmup_ratio", "1.5"), "--warmup_ratio", "1.0]", id="pretrain-warmup-ratio"),
    pytest.param(_pretrain, ("--weight_decay", "-0.01"), "--weight_decay", "[0.0", id="pretrain-negative-decay"),
    pytest.param(_pretrain, ("--max_grad_norm", "-1"), "--max_grad_norm", "[0.0", id="pretrain-negative-clip"),
    pytest.param(_pretrain, ("--dataloader_num_workers", "-2"), "--dataloader_num_workers", ">= 0", id="pretrain-negative-workers"),
    pytest.param(_pretrain, ("--per_device_train_batch_size", "0"), "--per_device_train_batch_size", ">= 1", id="pretrain-batch-zero"),
    pytest.param(_pretrain, ("--gradient_accumulation_steps", "0"), "--gradient_accumulation_steps", ">= 1", id="pretrain-accum-zero"),
    pytest.param(_pretrain, ("--logging_steps", "0"), "--logging_steps", ">= 1", id="pretrain-logging-zero"),
    pytest.param(_pretrain, ("--device", "tpu"), "tpu", "expected auto, cpu", id="pretrain-device-tpu"),
    pytest.param(_pretrain, ("--device", "cpux"), "cpux", "expected auto, cpu", id="pretrain-device-cpux"),
    pytest.param(_pretrain, ("--device", "gpu"), "gpu", "expected auto, cpu", id="pretrain-device-gpu"),
    pytest.param(_pretrain, ("--device", "cuda:x"), "cuda:x", "expected auto, cpu", id="pretrain-device-cuda-x"),
    pytest.param(_pretrain, ("--resume", "--overwrite_output_dir"), "--overwrite_output_dir", "at most one", id="pretrain-resume-and-overwrite"),
    pytest.param(_glue, ("--adam_beta1", "1.5"), "--adam_beta1", "[0.0, 1.0)", id="glue-beta1"),
    pytest.param(_glue, ("--learning_rate=-1e-5",), "--learning_rate", "[0.0", id="glue-negative-lr"),
    pytest.param(_glue, ("--per_device_eval_batch_size", "0"), "--per_device_eval_batch_size", ">= 1", id="glue-eval-batch-zero"),
    pytest.param(_squad, ("--seed", "-3"), "--seed", ">= 0", id="squad-negative-seed"),
    pytest.param(_squad, ("--num_train_epochs", "0"), "--num_train_epochs", "> 0", id="squad-zero-epochs"),
    pytest.param(_coref, ("--warmup_steps", "-1"), "--warmup_steps", ">= 0", id="coref-negative-warmup"),
    pytest.param(_coref, ("--save_total_limit", "0"), "--save_total_limit", ">= 1", id="coref-keep-no-checkpoint"),
]


@pytest.mark.parametrize("command, flags, names, contains", CASES)
def test_malformed_training_option(cli_error, tmp_path, command, flags, names, contains):
    out = tmp_path / "out"
    cli_error(command(out, *flags), names=names, contains=contains, out=tmp_path)
    assert not out.exists()


def test_output_dir_holding_a_run_is_refused_before_any_work(cli_error, tmp_path):
    out = tmp_path / "out"
    _existing_run(out)
    cli_error(_pretrain(out), names=str(out), contains="--overwrite_output_dir", out=tmp_path)
