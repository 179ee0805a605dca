"""Hub model names (issue 23 item 4): ``--model org/name`` that is no local folder is read from the
Hugging Face cache (offline here: a hand-built cache in huggingface_hub's layout), and where that cannot
work the error says why and what to do."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from spanbert import families, hub
from spanbert.config import model_config
from spanbert.model import Encoder
from spanbert.tokenization import load_tokenizer_for, train_tokenizer

pytest.importorskip("huggingface_hub")

REPO = "spanbert-test/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONTEXT = "Alice was born in Paris in 1990. Later Alice moved to Lagos with Bruno."


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> tuple[Path, Encoder]:
    """``HF_HUB_CACHE`` holding REPO as huggingface_hub lays it out: models--ORG--NAME/refs/main names
    the commit, snapshots/<commit>/ holds the files; offline (``HF_HUB_OFFLINE=1``)."""
    tok = train_tokenizer(None, 200, texts=[CONTEXT, "Where was Alice born?"] * 5, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    encoder = Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False)
    root = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
    encoder.save_pretrained(root / "snapshots" / COMMIT, tokenizer=tok)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    hub._snapshot.cache_clear()
    yield root / "snapshots" / COMMIT, encoder
    hub._snapshot.cache_clear()


def test_a_hub_name_loads_from_the_cache_offline(hub_cache):
    snapshot, encoder = hub_cache
    assert hub.resolve_model(REPO) == snapshot
    loaded = families.load_encoder(REPO)
    for (name, a), b in zip(encoder.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert families.read_config(REPO)["hidden_size"] == 64
    assert load_tokenizer_for(REPO).vocab_size == families.load_framed_tokenizer(REPO).vocab_size > 0
    assert hub.resolve_model(str(snapshot)) == snapshot  # a local folder is itself


def test_every_command_takes_a_hub_name(hub_cache, tmp_path):
    """`finetune` reads the hub model through the same loaders as every command."""
    from spanbert.cli import main

    qas = [{"id": "q0", "question": "Where was Alice born?", "answers": [{"text": "Paris", "answer_start": 18}]}]
    data = tmp_path / "train.json"
    data.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}))
    out = tmp_path / "ft"
    assert main(["finetune", "squad", "--model", REPO, "--train_file", str(data), "--output_dir", str(out),
                 "--max_steps", "1", "--per_device_train_batch_size", "1", "--max_seq_length", "32",
                 "--report_to", "none", "--disable_tqdm", "--device", "cpu"]) == 0  # fmt: skip
    assert (out / "model.safetensors").is_file()


def test_offline_and_not_cached_says_so(hub_cache, cli_error):
    err = cli_error(["finetune", "squad", "--model", "spanbert-test/absent", "--train_file", "t.json"],
                    contains="found no such model folder and no copy of hub model spanbert-test/absent in the cache")  # fmt: skip
    assert "HF_HUB_OFFLINE=1" in err and "hf download spanbert-test/absent" in err


def test_without_huggingface_hub_says_how_to_get_it(hub_cache, monkeypatch, cli_error):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it fails
    cli_error(["predict", "squad", "--model", REPO, "--question", "Who?", "--context", "c"],
              contains="huggingface_hub is not installed")  # fmt: skip


def test_a_mistyped_local_path_stays_a_local_error(hub_cache, tmp_path, cli_error):
    (tmp_path / "runs").mkdir()
    assert not hub.looks_like_hub_id("runs/squad11") and hub.looks_like_hub_id("bert-base-cased")
    assert not hub.looks_like_hub_id("../models/x") and not hub.looks_like_hub_id("/abs/model")
    err = cli_error(["predict", "squad", "--model", "runs/squad11", "--question", "Who?", "--context", "c"],
                    contains="model folder not found")  # fmt: skip
    assert "hub" not in err
    shutil.rmtree(tmp_path / "runs")
