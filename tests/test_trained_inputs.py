"""What pre-training trained of an encoder's inputs (`spanbert.trained_inputs`): the record in the exported
config.json, and the one warning per kind when fine-tuning feeds longer sequences or a token type that
pre-training never trained."""

import json

import torch
from torch import nn

from spanbert import trained_inputs
from spanbert.cli import main
from spanbert.trained_inputs import TrainedInputs


def _model(record: TrainedInputs | None) -> nn.Module:
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].trained_inputs = record
    return model


def _batch(length: int, width: int, token_type: int) -> dict:
    mask = torch.zeros(2, width, dtype=torch.long)
    mask[0, :length] = 1
    return {"input_ids": torch.ones(2, width, dtype=torch.long), "attention_mask": mask,
            "token_type_ids": torch.full((2, width), token_type)}  # fmt: skip


def test_a_record_reads_back_and_a_random_init_or_foreign_folder_has_none():
    raw = {"model_type": "bert", "spanbert": trained_inputs.record(128, 1)}
    assert trained_inputs.of_config(raw) == TrainedInputs(128, 1)
    assert trained_inputs.of_config({"spanbert": {**raw["spanbert"], "random_init": True}}) is None
    assert trained_inputs.of_config({"model_type": "bert"}) is None
    assert trained_inputs.watch(_model(None)) is None


def test_each_kind_warns_once_with_both_numbers(capsys):
    check = trained_inputs.watch(_model(TrainedInputs(8, 1)))
    check([_batch(8, 12, 0)])  # padding past position 8 is not a use of it
    assert capsys.readouterr().err == ""
    check([_batch(10, 12, 0)])
    err = capsys.readouterr().err
    assert "sequences of up to 10 tokens" in err and "positions 0-7 only" in err and "positions 8-9" in err
    check([_batch(11, 12, 1), _batch(12, 12, 1)])
    err = capsys.readouterr().err
    assert "token type 1" in err and "type 0 only" in err and "positions" not in err
    check([_batch(12, 12, 1)])
    assert capsys.readouterr().err == ""
    # a two-segment pre-training trained type 1: no warning for it
    check = trained_inputs.watch(_model(TrainedInputs(16, 2)))
    check([_batch(10, 12, 1)])
    assert capsys.readouterr().err == ""


def test_pretraining_records_its_block_length_and_fine_tuning_past_it_warns(corpus_dir, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["pretrain", "--corpus", str(corpus_dir), "--model", "tiny", "--max_seq_length", "16", "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--warmup_steps", "1", "--output_dir", str(run), "--disable_tqdm",
            "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0
    config = json.loads((run / "final" / "config.json").read_text())["spanbert"]
    assert config[trained_inputs.POSITIONS_KEY] == 16 and config[trained_inputs.TOKEN_TYPES_KEY] == 1
    ner = tmp_path / "ner.txt"
    words = " ".join(["alpha"] * 30)
    ner.write_text("\n".join(f"{w} NN O O" for w in words.split()) + "\n\n")
    capsys.readouterr()
    argv = ["finetune", "ner", "--model", str(run / "final"), "--train_file", str(ner), "--validation_file", str(ner),
            "--max_seq_length", "24", "--document_context", "false", "--max_steps", "1", "--output_dir",
            str(tmp_path / "ner"), "--disable_tqdm", "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "pre-training trained positions 0-15 only" in err, err
