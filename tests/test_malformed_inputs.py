"""Malformed configs, overrides, checkpoints and tokenizer files, through the commands a user types
(`spanbert pretrain`, `spanbert fill`, `spanbert finetune glue`). Each case builds one bad input in
tmp_path and asserts the clean-error contract through `cli_error`: exit 2, an ``error:`` line naming
the file, no traceback, nothing left behind."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

TEXTS = ["Alice was born in Paris .", "Bruno plays the violin in Rome .", "it is good", "it is bad"] * 5
SST = "sentence\tlabel\nit is good\t1\nit is bad\t0\n"
QUIET = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny SpanBERT pre-training checkpoint with its tokenizer, as `spanbert pretrain` saves it."""
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("malformed_inputs")
    tok = train_tokenizer(None, 80, texts=TEXTS, min_frequency=1)
    torch.manual_seed(0)
    model = SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=64), sbo=True, nsp=False)
    model.save_pretrained(root / "model", tokenizer=tok)
    return root / "model"


def _w(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _copy(model_dir: Path, tmp: Path) -> Path:
    dst = tmp / "ckpt"
    shutil.copytree(model_dir, dst)
    return dst


def _edit_config(model_dir: Path, tmp: Path, edit: Callable[[dict], None]) -> Path:
    dst = _copy(model_dir, tmp)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    _w(dst / "config.json", json.dumps(config))
    return dst


def _pretrain(tmp: Path, *extra: object) -> list:
    corpus = _w(tmp / "corpus.txt", "\n".join(TEXTS) + "\n")
    return ["pretrain", "--corpus", corpus, "--output_dir", tmp / "run", "--model", "tiny", *QUIET, *extra]


def _fill(model: Path) -> list:
    return ["fill", "--model", model, "--text", "Alice was [MASK] in Paris ."]


def _glue(tmp: Path, model: Path, *extra: object) -> list:
    data = tmp / "SST-2"
    _w(data / "train.tsv", SST)
    _w(data / "dev.tsv", SST)
    return ["finetune", "glue", "--task", "SST-2", "--data_dir", data, "--model", model,
            "--output_dir", tmp / "out", *QUIET, *extra]  # fmt: skip


Case = Callable[[Path, Path], tuple[list, "str | Path | None", str]]


# ---- YAML config files (every command: an unknown key is an error naming the file and the key)
def _yaml(tmp: Path, text: str | bytes) -> Path:
    return _w(tmp / "config.yaml", text)


def _case_yaml_unknown_key(tmp, model):
    y = _yaml(tmp, "learnig_rate: 1.0e-4\n")
    return _pretrain(tmp, "--config", y), y, "'learnig_rate' (did you mean 'learning_rate'?)"


def _case_yaml_unknown_key_in_section(tmp, model):
    y = _yaml(tmp, "MaskingConfig:\n  learning_rate: 1.0e-4\n")
    return _pretrain(tmp, "--config", y), y, "in section MaskingConfig"


def _case_yaml_unknown_section(tmp, model):
    y = _yaml(tmp, "QAConfig:\n  doc_stride: 64\n")
    return _pretrain(tmp, "--config", y), y, "'QAConfig'"


def _case_yaml_section_scalar(tmp, model):
    y = _yaml(tmp, "TrainingArguments: 5\n")
    return _pretrain(tmp, "--config", y), f"{y}:1", "section TrainingArguments: found 5, expected a mapping"


def _case_yaml_section_list(tmp, model):
    y = _yaml(tmp, "PretrainConfig:\n  - model\n  - tiny\n")
    return _pretrain(tmp, "--config", y), y, "expected a mapping"


def _case_yaml_list_for_number(tmp, model):
    y = _yaml(tmp, "seed: 1\nlearning_rate: [1, 2]\n")
    return _pretrain(tmp, "--config", y), f"{y}:2", "option learning_rate: found a list [1, 2], expected a number"


def _case_yaml_mapping_for_number(tmp, model):
    y = _yaml(tmp, "TrainingArguments:\n  max_steps: {a: 1}\n")
    return _pretrain(tmp, "--config", y), f"{y}:2", "option max_steps: found a mapping"


def _case_yaml_bool_for_int(tmp, model):
    y = _yaml(tmp, "max_steps: true\n")
    return _pretrain(tmp, "--config", y), y, "found true (a boolean), expected an integer"


def _case_yaml_string_for_bool(tmp, model):
    y = _yaml(tmp, "disable_tqdm: maybe\n")
    return _pretrain(tmp, "--config", y), y, "option disable_tqdm: found 'maybe', expected a boolean"


def _case_yaml_nan(tmp, model):
    y = _yaml(tmp, "learning_rate: .nan\n")
    return _pretrain(tmp, "--config", y), y, "found NaN"


def _case_yaml_not_yaml(tmp, model):
    y = _yaml(tmp, "seed: 1\nlearning_rate: [1, 2\n")
    return _pretrain(tmp, "--config", y), y, "not valid YAML"


def _case_yaml_top_level_list(tmp, model):
    y = _yaml(tmp, "- learning_rate\n- 1\n")
    return _pretrain(tmp, "--config", y), y, "found a list ['learning_rate', 1], expected a mapping"


def _case_yaml_not_utf8(tmp, model):
    y = _yaml(tmp, b"seed: 1\nmodel: caf\xe9\n")
    return _pretrain(tmp, "--config", y), f"{y}:2", "not UTF-8"


def _case_yaml_missing(tmp, model):
    y = tmp / "nowhere.yaml"
    return _pretrain(tmp, "--config", y), y, "not found"


def _case_yaml_twice(tmp, model):
    y = _yaml(tmp, "seed: 3\nTrainingArguments:\n  seed: 4\n")
    return _pretrain(tmp, "--config", y), f"{y}:3", "a second time"


def _case_glue_yaml_unknown_key(tmp, model):
    y = _yaml(tmp, "learnig_rate: 3.0e-5\n")
    return _glue(tmp, model, "--config", y), y, "learnig_rate"


def _case_glue_yaml_list_for_number(tmp, model):
    y = _yaml(tmp, "learning_rate: [1, 2]\n")
    return _glue(tmp, model, "--config", y), y, "learning_rate"


def _case_coref_yaml_unknown_key(tmp, model):
    y = _yaml(tmp, "TrainingArguments:\n  learning_rate: 2.0e-4\nfnn_size: 64\n")
    conll = _w(tmp / "train.conll", "#begin document (d); part 000\nd 0 0 Hi - - - - - - - (0)\n\n#end document\n")
    argv = ["finetune", "coref", "--model", model, "--train", conll, "--output_dir", tmp / "out", "--config", y]
    return argv, y, "fnn_size"


def _case_coref_yaml_bad_value(tmp, model):
    y = _yaml(tmp, "ffnn_size: [64]\n")
    conll = _w(tmp / "train.conll", "#begin document (d); part 000\nd 0 0 Hi - - - - - - - (0)\n\n#end document\n")
    argv = ["finetune", "coref", "--model", model, "--train", conll, "--output_dir", tmp / "out", "--config", y]
    return argv, y, "ffnn_size"


# ---- key=value overrides
def _case_override_unknown(tmp, model):
    return _pretrain(tmp, "learnig_rate=1e-4"), None, "'learnig_rate'"


def _case_override_bad_type(tmp, model):
    return _pretrain(tmp, "max_steps=ten"), None, "option max_steps: found 'ten', expected an integer"


# ---- config.json of a checkpoint
def _case_config_list(tmp, model):
    m = _copy(model, tmp)
    _w(m / "config.json", "[1, 2]")
    return _fill(m), m / "config.json", "found a JSON array, expected a JSON object"


def _case_config_string_number(tmp, model):
    m = _edit_config(model, tmp, lambda c: c.update(hidden_size="64"))
    return _fill(m), m / "config.json", '"hidden_size": "64" (a string), expected an integer'


def _case_config_missing_size(tmp, model):
    m = _edit_config(model, tmp, lambda c: c.pop("num_hidden_layers"))
    return _fill(m), m / "config.json", "found no num_hidden_layers"


def _case_config_not_utf8(tmp, model):
    m = _copy(model, tmp)
    _w(m / "config.json", b'{"hidden_size": "\xff"}')
    return _fill(m), m / "config.json", "not UTF-8"


def _case_config_not_json(tmp, model):
    m = _copy(model, tmp)
    _w(m / "config.json", '{"hidden_size": 64,\n')
    return _fill(m), m / "config.json", "invalid JSON"


def _case_config_heads_indivisible(tmp, model):
    m = _edit_config(model, tmp, lambda c: c.update(num_attention_heads=3))
    return _fill(m), m / "config.json", "divisible"


def _case_config_absent(tmp, model):
    m = _copy(model, tmp)
    (m / "config.json").unlink()
    return _fill(m), m, "no config.json"


def _case_init_from_config_string_number(tmp, model):
    m = _edit_config(model, tmp, lambda c: c.update(vocab_size="80"))
    return _pretrain(tmp, "--init-from", m), m / "config.json", "expected an integer"


def _case_glue_config_not_json(tmp, model):
    m = _copy(model, tmp)
    _w(m / "config.json", "not json")
    return _glue(tmp, m), m / "config.json", "invalid JSON"


# ---- weights
def _case_no_weights(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").unlink()
    return _fill(m), m, "no weights"


def _case_safetensors_truncated(tmp, model):
    m = _copy(model, tmp)
    data = (m / "model.safetensors").read_bytes()
    _w(m / "model.safetensors", data[: len(data) // 2])
    return _fill(m), m / "model.safetensors", "expected a safetensors weights file"


def _case_safetensors_garbage_header(tmp, model):
    m = _copy(model, tmp)
    _w(m / "model.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
    return _fill(m), m / "model.safetensors", "expected a safetensors weights file"


def _case_pickle_non_tensors(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").unlink()
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(2), "args": argparse.Namespace(lr=1)},
               m / "pytorch_model.bin")  # fmt: skip
    return _fill(m), m / "pytorch_model.bin", "refused to load"


def _case_pickle_string_values(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").unlink()
    torch.save({"bert.embeddings.word_embeddings.weight": "zeros"}, m / "pytorch_model.bin")
    return _fill(m), m / "pytorch_model.bin", "expected a state dict of tensors"


def _case_bin_not_a_pickle(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").unlink()
    _w(m / "pytorch_model.bin", "just text\n")
    return _fill(m), m / "pytorch_model.bin", "expected a PyTorch checkpoint"


def _case_sharded_index_bad(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").rename(m / "model-00001-of-00001.safetensors")
    _w(m / "model.safetensors.index.json", '{"metadata": {}}')
    return _fill(m), m / "model.safetensors.index.json", "weight_map"


def _case_init_from_no_weights(tmp, model):
    m = _copy(model, tmp)
    (m / "model.safetensors").unlink()
    return _pretrain(tmp, "--init-from", m), m, "no weights"


def _case_glue_safetensors_truncated(tmp, model):
    m = _copy(model, tmp)
    data = (m / "model.safetensors").read_bytes()
    _w(m / "model.safetensors", data[:100])
    return _glue(tmp, m), m / "model.safetensors", "safetensors"


# ---- tokenizer files
def _case_vocab_not_utf8(tmp, model):
    m = _copy(model, tmp)
    (m / "tokenizer.json").unlink()
    _w(m / "vocab.txt", (m / "vocab.txt").read_bytes() + b"caf\xe9\n")
    return _fill(m), m / "vocab.txt", "not UTF-8"


def _case_tokenizer_config_not_utf8(tmp, model):
    m = _copy(model, tmp)
    _w(m / "tokenizer_config.json", b'{"do_lower_case": "\xff"}')
    return _fill(m), m / "tokenizer_config.json", "not UTF-8"


def _case_tokenizer_config_not_json(tmp, model):
    m = _copy(model, tmp)
    _w(m / "tokenizer_config.json", '{"do_lower_case": false,,}')
    return _fill(m), m / "tokenizer_config.json", "invalid JSON"


def _case_tokenizer_config_list(tmp, model):
    m = _copy(model, tmp)
    _w(m / "tokenizer_config.json", "[]")
    return _fill(m), m / "tokenizer_config.json", "expected a JSON object"


def _case_tokenizer_json_malformed(tmp, model):
    m = _copy(model, tmp)
    _w(m / "tokenizer.json", '{"version": "1.0", "model": 3}')
    return _fill(m), m / "tokenizer.json", "expected a HF tokenizers file"


def _case_init_from_vocab_not_utf8(tmp, model):
    m = _copy(model, tmp)
    (m / "tokenizer.json").unlink()
    _w(m / "vocab.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\n")
    return _pretrain(tmp, "--init-from", m, "--max_seq_length", "32"), f"{m / 'vocab.txt'}:6", "not UTF-8"


def _case_glue_vocab_not_utf8(tmp, model):
    m = _copy(model, tmp)
    (m / "tokenizer.json").unlink()
    _w(m / "vocab.txt", b"[PAD]\n\xff\xfe\n")
    return _glue(tmp, m), f"{m / 'vocab.txt'}:2", "not UTF-8"



# ---- issue 22: weights a folder does not hold (item 2), text that is not UTF-8 (item 10)
def _encoder_only(tmp: Path, model: Path) -> Path:
    from spanbert.model import Encoder

    Encoder.from_pretrained(model).save_pretrained(tmp / "encoder")
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (model / name).exists():
            shutil.copy(model / name, tmp / "encoder" / name)
    return tmp / "encoder"


def _finetuned_sst2(tmp: Path, model: Path) -> Path:
    from spanbert.tasks import classification as C
    from spanbert.tasks.task_folders import load_tokenizer_for

    C.save_model(C.build_model("sequence", model, 2, seed=0), tmp / "sst2", load_tokenizer_for(model), "sequence",
                 ["0", "1"], {"task": "glue", "glue_task": "SST-2", "max_seq_length": 32})  # fmt: skip
    return tmp / "sst2"


def _case_fill_mlm_on_finetuned_glue(tmp, model):
    m = _finetuned_sst2(tmp, model)
    return _fill(m) + ["--head", "mlm"], m, (
        "holds BertForSequenceClassification (fine-tuned: glue SST-2): the encoder + classifier.*; "
        "spanbert fill --head mlm needs the masked-LM head (cls.predictions.*), which it does not hold"
    )


def _case_fill_sbo_on_finetuned_glue(tmp, model):
    m = _finetuned_sst2(tmp, model)
    return _fill(m) + ["--head", "sbo"], m, "needs the span boundary head (cls.span_predictions.*)"


def _case_fill_mlm_on_bare_encoder(tmp, model):
    m = _encoder_only(tmp, model)
    return _fill(m), m, "holds BertModel: the encoder; spanbert fill --head mlm needs the masked-LM head"


def _case_fill_sbo_on_mlm_only(tmp, model):
    from spanbert.model import SpanBertForPreTraining

    m = tmp / "mlm_only"
    SpanBertForPreTraining.from_pretrained(model, sbo=False).save_pretrained(m)
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(model / name, m / name)
    return _fill(m) + ["--head", "sbo"], m, "holds BertForMaskedLM: the encoder + cls.predictions.*"


def _case_fill_text_not_utf8(tmp, model):
    import os

    text = os.fsdecode(b"Alice was \xff [MASK] in Paris .")  # what Python makes of such bytes in argv
    return ["fill", "--model", model, "--text", text], "--text", "not UTF-8 (invalid start byte at byte 10: b'\\xff')"


def _case_fill_text_without_mask(tmp, model):
    return ["fill", "--model", tmp / "nowhere", "--text", "Alice was born ."], "--text", "found no [MASK]"


def _case_fill_top_k_zero(tmp, model):
    return _fill(model) + ["--top_k", "0"], "--top_k", "expected an integer >= 1"


def _case_vocab_without_mask(tmp, model):
    m = _copy(model, tmp)
    (m / "tokenizer.json").unlink()
    _w(m / "vocab.txt", (m / "vocab.txt").read_text().replace("[MASK]\n", ""))
    return _fill(m), m / "vocab.txt", "[MASK]"

CASES = [
    pytest.param(_case_yaml_unknown_key, id="pretrain-yaml-unknown-key"),
    pytest.param(_case_yaml_unknown_key_in_section, id="pretrain-yaml-unknown-key-in-section"),
    pytest.param(_case_yaml_unknown_section, id="pretrain-yaml-unknown-section"),
    pytest.param(_case_yaml_section_scalar, id="pretrain-yaml-section-scalar"),
    pytest.param(_case_yaml_section_list, id="pretrain-yaml-section-list"),
    pytest.param(_case_yaml_list_for_number, id="pretrain-yaml-list-for-number"),
    pytest.param(_case_yaml_mapping_for_number, id="pretrain-yaml-mapping-for-number"),
    pytest.param(_case_yaml_bool_for_int, id="pretrain-yaml-bool-for-int"),
    pytest.param(_case_yaml_string_for_bool, id="pretrain-yaml-string-for-bool"),
    pytest.param(_case_yaml_nan, id="pretrain-yaml-nan"),
    pytest.param(_case_yaml_not_yaml, id="pretrain-yaml-not-yaml"),
    pytest.param(_case_yaml_top_level_list, id="pretrain-yaml-top-level-list"),
    pytest.param(_case_yaml_not_utf8, id="pretrain-yaml-not-utf8"),
    pytest.param(_case_yaml_missing, id="pretrain-yaml-missing"),
    pytest.param(_case_yaml_twice, id="pretrain-yaml-option-twice"),
    pytest.param(_case_glue_yaml_unknown_key, id="glue-yaml-unknown-key"),
    pytest.param(_case_glue_yaml_list_for_number, id="glue-yaml-list-for-number"),
    pytest.param(_case_coref_yaml_unknown_key, id="coref-yaml-unknown-key"),
    pytest.param(_case_coref_yaml_bad_value, id="coref-yaml-bad-value"),
    pytest.param(_case_override_unknown, id="pretrain-override-unknown"),
    pytest.param(_case_override_bad_type, id="pretrain-override-bad-type"),
    pytest.param(_case_config_list, id="fill-config-list"),
    pytest.param(_case_config_string_number, id="fill-config-string-number"),
    pytest.param(_case_config_missing_size, id="fill-config-missing-size"),
    pytest.param(_case_config_not_utf8, id="fill-config-not-utf8"),
    pytest.param(_case_config_not_json, id="fill-config-not-json"),
    pytest.param(_case_config_heads_indivisible, id="fill-config-heads-indivisible"),
    pytest.param(_case_config_absent, id="fill-config-absent"),
    pytest.param(_case_init_from_config_string_number, id="pretrain-init-from-config-string-number"),
    pytest.param(_case_glue_config_not_json, id="glue-config-not-json"),
    pytest.param(_case_no_weights, id="fill-no-weights"),
    pytest.param(_case_safetensors_truncated, id="fill-safetensors-truncated"),
    pytest.param(_case_safetensors_garbage_header, id="fill-safetensors-garbage-header"),
    pytest.param(_case_pickle_non_tensors, id="fill-pickle-non-tensors"),
    pytest.param(_case_pickle_string_values, id="fill-pickle-string-values"),
    pytest.param(_case_bin_not_a_pickle, id="fill-bin-not-a-pickle"),
    pytest.param(_case_sharded_index_bad, id="fill-sharded-index-without-weight-map"),
    pytest.param(_case_init_from_no_weights, id="pretrain-init-from-no-weights"),
    pytest.param(_case_glue_safetensors_truncated, id="glue-safetensors-truncated"),
    pytest.param(_case_vocab_not_utf8, id="fill-vocab-not-utf8"),
    pytest.param(_case_tokenizer_config_not_utf8, id="fill-tokenizer-config-not-utf8"),
    pytest.param(_case_tokenizer_config_not_json, id="fill-tokenizer-config-not-json"),
    pytest.param(_case_tokenizer_config_list, id="fill-tokenizer-config-list"),
    pytest.param(_case_tokenizer_json_malformed, id="fill-tokenizer-json-malformed"),
    pytest.param(_case_init_from_vocab_not_utf8, id="pretrain-init-from-vocab-not-utf8"),
    pytest.param(_case_glue_vocab_not_utf8, id="glue-vocab-not-utf8"),
    pytest.param(_case_fill_mlm_on_finetuned_glue, id="fill-mlm-on-finetuned-glue"),
    pytest.param(_case_fill_sbo_on_finetuned_glue, id="fill-sbo-on-finetuned-glue"),
    pytest.param(_case_fill_mlm_on_bare_encoder, id="fill-mlm-on-bare-encoder"),
    pytest.param(_case_fill_sbo_on_mlm_only, id="fill-sbo-on-mlm-only-checkpoint"),
    pytest.param(_case_fill_text_not_utf8, id="fill-text-not-utf8"),
    pytest.param(_case_fill_text_without_mask, id="fill-text-without-mask"),
    pytest.param(_case_fill_top_k_zero, id="fill-top-k-zero"),
    pytest.param(_case_vocab_without_mask, id="fill-vocab-without-mask"),
]


@pytest.mark.parametrize("case", CASES)
def test_malformed_input(case: Case, model_dir, tmp_path, cli_error):
    argv, names, contains = case(tmp_path, model_dir)
    cli_error([str(a) for a in argv], names=names, contains=contains, out=tmp_path)


def test_heads_a_checkpoint_lacks_are_said_on_stderr_or_refused_when_needed(model_dir, tmp_path, capsys):
    """Issue 22.2: a head initialised at random is never used silently. Starting pre-training from a bare
    encoder (`--init-from`) may initialise the heads, and says so; a command that predicts with a head
    (`require`) refuses a folder without it."""
    from spanbert.errors import SpanBertError
    from spanbert.model import SpanBertForPreTraining

    bare = _encoder_only(tmp_path, model_dir)
    capsys.readouterr()
    model = SpanBertForPreTraining.from_pretrained(bare, sbo=True)
    err = capsys.readouterr().err
    assert f"note: {bare} has no weights for the masked-LM head (cls.predictions.*: 5 of 5 tensors), the span " \
           "boundary head (cls.span_predictions.*: 10 of 10 tensors): freshly initialised" in err
    assert model.cls.span_predictions is not None
    # a full checkpoint loads without that note, and satisfies every head it has
    SpanBertForPreTraining.from_pretrained(model_dir, require=("mlm", "sbo"))
    assert "freshly initialised" not in capsys.readouterr().err
    with pytest.raises(SpanBertError, match=r"holds BertModel: the encoder; predicting needs the masked-LM head"):
        SpanBertForPreTraining.from_pretrained(bare, require=("mlm",), needed_by="predicting")
    with pytest.raises(SpanBertError, match=r"needs the next-sentence head \(cls.seq_relationship.\*\)"):
        SpanBertForPreTraining.from_pretrained(model_dir, require=("nsp",))
