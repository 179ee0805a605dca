"""Feature-based NER (BERT §5.3, Table 7): extraction equals the encoder's hidden states, the on-disk
cache is reused, each feature choice has its width, and the biLSTM head overfits through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_ner import synthetic_conll, write_conll

from spanbert.cli import main
from spanbert.tasks import ner_features as NF
from spanbert.tasks.conll import ner_features, read_conll


@pytest.fixture(scope="module")
def encoder4(tmp_path_factory) -> Path:
    """A random 4-layer encoder (Table 7's "last four" needs four) with a vocabulary of the synthetic words."""
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = [" ".join(s.words) for s in synthetic_conll(64)]
    tok = train_tokenizer(None, 120, texts=texts * 3, show_progress=False)
    torch.manual_seed(0)
    config = model_config("tiny", vocab_size=tok.vocab_size, num_hidden_layers=4, max_position_embeddings=128,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    path = tmp_path_factory.mktemp("ner_features") / "encoder"
    Encoder(config).save_pretrained(path, tokenizer=tok)
    return path


@pytest.fixture
def count_encoder_calls(monkeypatch) -> list[int]:
    """Counts the calls of `spanbert.model.Encoder.forward` (one per batch) while the test runs."""
    from spanbert.model import Encoder

    calls = [0]
    forward = Encoder.forward

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "forward", counted)
    return calls


def spanbert_main(argv: list) -> int:
    return main([str(a) for a in argv])


TRAIN = ["--max_seq_length", "24", "--lstm_hidden_size", "32", "--per_device_train_batch_size", "8",
         "--logging_steps", "1000", "--save_steps", "0", "--report_to", "none", "--disable_tqdm",
         "--device", "cpu"]  # fmt: skip


def test_extraction_equals_the_encoders_hidden_states(encoder4, tmp_path):
    from spanbert.tasks.task_folders import load_encoder
    from spanbert.tokenization import Tokenizer

    data = tmp_path / "data.txt"
    write_conll(data, synthetic_conll(12, seed=3))
    sentences = read_conll(data)
    store = NF.cached_features(encoder4, data, sentences, tmp_path / "cache", max_seq_length=24, progress=False)
    assert store.num_layers == 4 and len(store.layers) == 5 and store.layers[0].shape == (store.offsets[-1], 64)
    assert isinstance(store.layers[0], np.memmap)  # read from disk, not held in memory
    encoder, tok = load_encoder(encoder4), Tokenizer.from_dir(encoder4)
    # one feature at a time, no padding: the reference the batched, padded extraction must match
    for f in ner_features(sentences, tok, None, 24, document_context=True):
        with torch.no_grad():
            ids = torch.as_tensor(f["input_ids"])[None]
            states = encoder(ids, output_hidden_states=True)
            assert torch.equal(states[-1], encoder(ids))  # the last item is the usual output
        w0 = store.offsets[f["sentence"]] + f["first_word"]
        for l in range(5):
            got = store.layers[l][w0 : w0 + len(f["first_token"])]
            np.testing.assert_allclose(got, states[l][0, f["first_token"]].numpy(), atol=1e-5)


def test_hidden_states_match_transformers(encoder4):
    transformers = pytest.importorskip("transformers")
    from spanbert.tasks.task_folders import load_encoder

    ours = load_encoder(encoder4)
    hf = transformers.BertModel.from_pretrained(encoder4, add_pooling_layer=False).eval()
    ids = torch.randint(5, 100, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, output_hidden_states=True)
        b = hf(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(a) == len(b) == 5
    for x, y in zip(a, b):
        np.testing.assert_allclose(x[mask.bool()].numpy(), y[mask.bool()].numpy(), atol=1e-5)
        assert not x[~mask.bool()].any()  # padding comes back as zeros


@pytest.mark.parametrize(
    "choice, layers, dim",
    [
        ("embeddings", [0], 64),
        ("second_to_last_hidden", [3], 64),
        ("last_hidden", [4], 64),
        ("weighted_sum_last_four", [1, 2, 3, 4], 64),
        ("concat_last_four", [1, 2, 3, 4], 256),
        ("weighted_sum_all", [1, 2, 3, 4], 64),
    ],
)
def test_each_feature_choice_has_its_layers_and_width(choice, layers, dim):
    mode, got = NF.choice_layers(choice, 4)
    assert got == layers and NF.feature_dim(choice, 4, 64) == dim
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((7, 64)).astype(np.float32) for _ in range(5)]
    data = NF.SentenceFeatures([arrays[l] for l in layers], np.array([0, 3, 7]), [np.zeros(3, int), np.zeros(4, int)])
    batch = NF.collate([data[0], data[1]])
    assert batch["features"].shape == (2, 4, len(layers), 64)
    head = NF.FeatureTagger(mode, len(layers), 64, 3, lstm_hidden_size=8)
    assert head.mix(batch["features"]).shape == (2, 4, dim)
    assert head.lstm.input_size == dim and head.lstm.num_layers == 2 and head.lstm.bidirectional
    if mode == "single":  # exactly the chosen layer's activations
        assert torch.equal(head.mix(batch["features"])[0, :3], torch.from_numpy(arrays[layers[0]][:3]))
    # 12 layers: the weighted sum of "all 12" is layers 1..12, the embeddings are not among them
    assert NF.choice_layers("weighted_sum_all", 12)[1] == list(range(1, 13))
    assert NF.choice_layers("second_to_last_hidden", 12)[1] == [11]


def test_the_cache_is_reused_and_the_encoder_runs_once(encoder4, tmp_path, count_encoder_calls, capsys):
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    write_conll(train, synthetic_conll(16, seed=1))
    write_conll(dev, synthetic_conll(8, seed=2))
    cache = tmp_path / "cache"
    base = ["finetune", "ner", "--model", encoder4, "--train", train, "--dev", dev, "--feature_cache", cache,
            "--max_steps", "2", "--extract_batch_size", "4", *TRAIN]  # fmt: skip
    # all six Table 7 heads in one run: the encoder runs once over each file (4 + 2 batches of 4)
    assert spanbert_main(base + ["--features", "table7", "--output_dir", tmp_path / "t7"]) == 0
    assert count_encoder_calls[0] == 6
    table = json.loads((tmp_path / "t7" / "features_results.json").read_text())
    assert sorted(table) == sorted(NF.TABLE7)
    assert table["concat_last_four"]["feature_dim"] == 256 and table["last_hidden"]["feature_dim"] == 64
    assert all(0 <= row["f1"] <= 100 for row in table.values())
    assert all((tmp_path / "t7" / c / "model.safetensors").is_file() for c in NF.TABLE7)
    # a second run (another output folder, another head) reads the cache: no encoder call at all
    assert spanbert_main(base + ["--features", "last_hidden", "--output_dir", tmp_path / "again"]) == 0
    assert count_encoder_calls[0] == 6
    assert len(list(cache.iterdir())) == 2  # train and dev
    # another setting (no document context) is another cache entry, extracted again
    assert spanbert_main(base + ["--features", "last_hidden", "--document_context", "false",
                                 "--output_dir", tmp_path / "noctx"]) == 0  # fmt: skip
    assert count_encoder_calls[0] == 12 and len(list(cache.iterdir())) == 4


def test_head_overfits_a_tiny_set_through_the_cli(encoder4, tmp_path, capsys):
    data, out, pred = tmp_path / "train.txt", tmp_path / "ft", tmp_path / "pred.txt"
    write_conll(data, synthetic_conll(32))
    argv = ["finetune", "ner", "--features", "concat_last_four", "--model", encoder4, "--train", data, "--dev", data,
            "--output_dir", out, "--num_train_epochs", "30", "--learning_rate", "1e-2", "--head_dropout", "0",
            *TRAIN]  # fmt: skip
    assert spanbert_main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == NF.MODEL_TYPE and config["spanbert"]["layers"] == [1, 2, 3, 4]
    results = json.loads((out / "dev_results.json").read_text())
    # one evaluation an epoch; the saved model is that of the best dev epoch
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/f1"] for r in rows if "eval/f1" in r}
    assert len(evals) == 30 and results["selected_by"] == "f1"
    assert results["selected_step"] == min(s for s, v in evals.items() if v == max(evals.values()))
    assert results["f1"] >= 95.0
    # the saved head predicts through `predict ner` (re-encoding with the encoder it names) as it scored
    assert spanbert_main(["predict", "ner", "--model", out, "--data", data, "--output", pred, "--disable_tqdm"]) == 0
    capsys.readouterr()
    assert spanbert_main(["evaluate", "ner", "--data", data, "--predictions", pred]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["f1"])


def test_bad_feature_choices_are_clean_errors(encoder4, tmp_path, cli_error):
    data = tmp_path / "train.txt"
    write_conll(data, synthetic_conll(4))
    base = ["finetune", "ner", "--model", encoder4, "--train", data, "--output_dir", tmp_path / "o"]
    cli_error(base + ["--features", "last_five"], contains="'last_five'", out=tmp_path)
    cli_error(base + ["--features", "last_hidden", "--feature_dtype", "int8"], contains="float16", out=tmp_path)


def test_a_choice_deeper_than_the_encoder_is_refused_before_any_feature_is_extracted(
    tmp_path, cli_error, count_encoder_calls
):
    """Issue 22.13: a 2-layer encoder cannot give "last four": refused from its config.json, before the
    encoder runs once or a feature cache appears."""
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = [" ".join(s.words) for s in synthetic_conll(16)]
    tok = train_tokenizer(None, 100, texts=texts * 3, show_progress=False)
    enc = tmp_path / "enc2"
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, num_hidden_layers=2)).save_pretrained(enc, tokenizer=tok)
    data = tmp_path / "train.txt"
    write_conll(data, synthetic_conll(4))
    argv = ["finetune", "ner", "--model", enc, "--train", data, "--output_dir", tmp_path / "o",
            "--features", "last_hidden,concat_last_four", *TRAIN]  # fmt: skip
    cli_error(argv, names="--features concat_last_four", contains="the encoder has 2 layers", out=tmp_path)
    assert count_encoder_calls == [0]
