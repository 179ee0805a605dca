"""Span probes (`spanbert.tasks.probe`, edge probing): the probe learns a separable made-up task, micro F1 and its
per-example statistics agree with a reference, the encoder's features are computed once and reused by every
run (rates, rows, test scoring), the layer-0 row depends on the embeddings only, finetune -> predict ->
evaluate through the CLI and the Python API, a study with a probe task, clean errors, and two processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spanbert import tasks
from spanbert.cli import main
from spanbert.metrics.resample import read_example_stats
from spanbert.tasks import probe as P
from spanbert.tasks import probe_features as PF
from spanbert.tasks.probe_data import Context, Target

# ---------------------------------------------------------------------------------------------
# A made-up entity task whose type is the word's (a random encoder's token states separate it)

PEOPLE, PLACES, ORGS = ["Mary", "John", "Anna", "Peter"], ["Paris", "Berlin", "Rome", "Oslo"], ["Acme", "Globex"]
FILLER = ["met", "saw", "in", "at", "the", "near", "with", "and"]


def toy_conll(n: int, seed: int) -> str:
    """CoNLL-2003 sentences ``PERSON verb PLACE ... ORG``: each entity's type is its word's."""
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(n):
        words = [(rng.choice(PEOPLE), "B-PER"), (rng.choice(FILLER), "O"), (rng.choice(PLACES), "B-LOC")]
        words += [(rng.choice(FILLER), "O"), (rng.choice(ORGS), "B-ORG"), (".", "O")]
        lines += [f"{w} NNP O {t}" for w, t in words] + [""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def probe_files(tmp_path_factory) -> dict[str, Path]:
    """train/dev/test toy files, a tiny encoder, and its twin whose layers differ but whose embeddings are its."""
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("probe")
    files = {split: root / f"{split}.txt" for split in ("train", "dev", "test")}
    for k, (split, path) in enumerate(files.items()):
        path.write_text(toy_conll(40 if split == "train" else 12, seed=k))
    tok = train_tokenizer(None, 120, texts=[toy_conll(40, 9)] * 2, show_progress=False)
    cfg = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=64, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(0)
    enc = Encoder(cfg)
    enc.save_pretrained(root / "encoder", tokenizer=tok)
    torch.manual_seed(1)
    twin = Encoder(cfg)
    twin.embeddings.load_state_dict(enc.embeddings.state_dict())  # the same embeddings, other layers
    twin.save_pretrained(root / "twin", tokenizer=tok)
    return {**files, "encoder": root / "encoder", "twin": root / "twin"}


TRAIN = ["--num_train_epochs", "6", "--learning_rate", "5e-3", "--per_device_train_batch_size", "8", "--device", "cpu",
         "--disable_tqdm", "--report_to", "none", "--logging_steps", "1000", "--head_dropout", "0"]  # fmt: skip


def finetune_argv(f: dict[str, Path], out: Path, cache: Path, *extra: str, model: str = "encoder") -> list[str]:
    return ["finetune", "probe", "--probe", "entities", "--model", str(f[model]), "--train_file", str(f["train"]),
            "--validation_file", str(f["dev"]), "--output_dir", str(out), "--features_cache", str(cache), *TRAIN,
            *extra]  # fmt: skip


def last_json(text: str) -> dict:
    return json.loads(text[text.rindex("\n{") + 1 :] if not text.startswith("{") else text)


@pytest.fixture
def count_extractions(monkeypatch) -> list[int]:
    """Counts the encoder runs over a data file (`probe_features.extract` calls) while the test runs."""
    calls = [0]
    real = PF.extract

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(PF, "extract", counted)
    return calls


# ---------------------------------------------------------------------------------------------
# The probe and its score


def test_the_probe_learns_a_separable_made_up_task(tmp_path):
    """Two spans, four states: the label is which of two directions span 2's mean state points along, plus
    a second label set by span 1 (multi-label targets, as a unary chain of constituents has)."""
    from spanbert.trainer import train
    from spanbert.training_args import TrainingArguments

    rng = np.random.default_rng(0)
    n, H = 400, 16
    lengths = rng.integers(1, 4, size=(n, 2))
    rows = np.cumsum([0] + lengths.reshape(-1).tolist())
    states = rng.normal(size=(rows[-1], 4, H)).astype(np.float32)
    labels = np.zeros((n, 2), dtype=np.float32)
    for t in range(n):
        a, b = rows[2 * t + 1], rows[2 * t + 2]  # span 2
        labels[t, 0] = float(t % 2)
        states[a:b, 2, 0] += 3.0 if t % 2 else -3.0
        labels[t, 1] = float(t % 3 == 0)
        states[rows[2 * t] : rows[2 * t + 1], 3, 1] += 3.0 if t % 3 == 0 else -3.0
    spans = np.stack([rows[:-1:2], rows[1::2], rows[1::2], rows[2::2]], 1).reshape(n, 2, 2)
    features = PF.ProbeFeatures(states, spans, np.arange(n), {})
    data = P.SpanDataset(features, range(4), range(300), labels)
    torch.manual_seed(0)
    model = P.SpanProbe(4, H, 2, 2, dropout=0.0)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), learning_rate=1e-2, num_train_epochs=8,
                             per_device_train_batch_size=16, save_steps=0, report_to="none", disable_tqdm=True,
                             device="cpu", logging_steps=1000)  # fmt: skip
    train(model, data, args, collate_fn=P.collate)
    held = P.SpanDataset(features, range(4), range(300, 400))
    with torch.no_grad():
        logits = model(**P.collate([held[i] for i in range(len(held))]))["logits"]
    assert ((logits > 0).numpy() == labels[300:].astype(bool)).mean() > 0.95


def test_micro_f1_and_its_example_statistics_agree_with_a_reference(tmp_path):
    contexts = [Context("a", ["x"] * 3, [Target(((0, 0),), ("NP",)), Target(((1, 2),), ("S", "VP"))]),
                Context("b", ["x"] * 2, [Target(((0, 1),), ("NP",))])]  # fmt: skip
    pred = [("NP",), ("VP", "PP"), ()]
    # decisions: tp = NP + VP = 2, predicted 3, gold 4 -> P 2/3, R 2/4, F1 2*2/7
    got = P.score(contexts, pred)
    assert got == pytest.approx({"f1": 400 / 7, "precision": 200 / 3, "recall": 50.0})
    rows = P.example_rows(contexts, pred)
    assert rows.tolist() == [[2, 3, 3], [0, 0, 1]]  # one row a context: its targets are resampled together
    from spanbert.metrics.resample import write_example_stats

    write_example_stats(tmp_path / "s.json", "f1", rows)
    assert read_example_stats(tmp_path / "s.json").score() == pytest.approx(got["f1"])


def test_a_probe_config_refuses_what_it_cannot_run():
    for kwargs, message in [({"layers": "3"}, "--layers: found '3'"), ({"pooling": "max"}, "--pooling: found 'max'"),
                            ({"max_train_examples": -1}, "--max_train_examples: found -1"),
                            ({"head_dropout": 1.0}, "--head_dropout: found 1.0")]:  # fmt: skip
        with pytest.raises(Exception, match=message):
            P.ProbeConfig(**kwargs)


# ---------------------------------------------------------------------------------------------
# Through the command line


def test_finetune_then_evaluate_and_predict_through_the_cli(probe_files, tmp_path, capsys, count_extractions):
    f, cache, out = probe_files, tmp_path / "cache", tmp_path / "run"
    assert main(finetune_argv(f, out, cache)) == 0
    dev = last_json(capsys.readouterr().out)
    results = json.loads((out / "dev_results.json").read_text())
    assert dev["f1"] == results["f1"] > 90 and results["selected_by"] == "f1" and 1 <= results["selected_epoch"] <= 6
    assert results["targets"] == 36 and results["train_targets"] == 120 and results["cut_off"] == 0
    assert len(results["scalar_mix"]["weights"]) == 3  # a tiny encoder's 2 layers + the embeddings
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == P.MODEL_TYPE and config["spanbert"]["encoder"] == str(f["encoder"].resolve())
    assert sorted(config["label2id"]) == ["LOC", "ORG", "PER"]
    assert read_example_stats(out / "example_stats.json").score() == pytest.approx(results["f1"])
    assert len((out / "dev_predictions.jsonl").read_text().splitlines()) == 36
    assert count_extractions[0] == 2  # train and dev

    stats = tmp_path / "test_stats.json"
    assert main(["evaluate", "probe", "--probe", "entities", "--model", str(out), "--data", str(f["test"]),
                 "--example_stats", str(stats), "--disable_tqdm"]) == 0  # fmt: skip
    test = last_json(capsys.readouterr().out)
    assert test["f1"] > 90 and test["targets"] == 36 and test["contexts"] == 12
    assert read_example_stats(stats).score() == pytest.approx(test["f1"]) and len(read_example_stats(stats).rows) == 12
    pred = tmp_path / "p.jsonl"
    assert main(["predict", "probe", "--model", str(out), "--data", str(f["test"]), "--output", str(pred),
                 "--disable_tqdm"]) == 0  # fmt: skip
    lines = pred.read_text().splitlines()
    json.loads(lines[0])["predicted"]  # noqa: B018 - one JSON object a target
    (pred.parent / "shuffled.jsonl").write_text("\n".join(reversed(lines)) + "\n")  # matched by id, in any order
    capsys.readouterr()
    assert main(["evaluate", "probe", "--probe", "entities", "--predictions", str(pred.parent / "shuffled.jsonl"),
                 "--data", str(f["test"])]) == 0  # fmt: skip
    assert last_json(capsys.readouterr().out)["f1"] == pytest.approx(test["f1"])
    assert count_extractions[0] == 3  # + test, once: predict read the cached store


def test_the_features_are_computed_once_for_every_rate_and_row(probe_files, tmp_path, count_extractions):
    f, cache = probe_files, tmp_path / "cache"
    for k, extra in enumerate([[], ["--learning_rate", "1e-3"], ["--layers", "0"], ["--pooling", "endpoints"]]):
        assert main(finetune_argv(f, tmp_path / f"run{k}", cache, *extra)) == 0
        assert main(["evaluate", "probe", "--model", str(tmp_path / f"run{k}"), "--data", str(f["test"]),
                     "--disable_tqdm"]) == 0  # fmt: skip
    assert count_extractions[0] == 3  # train, dev and test, each once
    assert len(list(cache.iterdir())) == 3


def test_the_layer_0_row_depends_on_the_embeddings_only(probe_files, tmp_path, capsys):
    """The twin encoder shares the embeddings and nothing else: its layer-0 probe is the same probe, its
    all-layer probe is not."""
    f, cache = probe_files, tmp_path / "cache"
    scores = {}
    for model in ("encoder", "twin"):
        for layers in ("0", "all"):
            out = tmp_path / f"{model}-{layers}"
            assert main(finetune_argv(f, out, cache, "--layers", layers, model=model)) == 0
            capsys.readouterr()
            scores[model, layers] = (
                (out / "dev_predictions.jsonl").read_text(),
                json.loads((out / "dev_results.json").read_text()),
            )
    assert scores["encoder", "0"][0] == scores["twin", "0"][0]
    assert scores["encoder", "0"][1]["f1"] == scores["twin", "0"][1]["f1"]
    stores = {json.loads((p / "meta.json").read_text())["encoder"]: PF.open_store(p) for p in cache.iterdir()
              if p.name.startswith("entities-train.txt")}  # fmt: skip
    a, b = stores.values()
    assert np.array_equal(a.states[:, 0], b.states[:, 0]) and not np.allclose(a.states[:, 1:], b.states[:, 1:])
    assert json.loads((tmp_path / "encoder-0" / "config.json").read_text())["spanbert"]["states"] == [0]


def test_the_python_api_runs_a_probe_like_every_task(probe_files, tmp_path):
    f = probe_files
    run = tasks.finetune("probe", probe="entities", model=f["encoder"], train=f["train"], dev=f["dev"],
                         output_dir=tmp_path / "run", features_cache=str(tmp_path / "cache"), num_train_epochs=6,
                         learning_rate=5e-3, per_device_train_batch_size=8, disable_tqdm=True, report_to="none",
                         head_dropout=0.0)  # fmt: skip
    assert run.score > 90 and run.output_dir == tmp_path / "run" and run.best_step == run.scores["selected_step"]
    test = tasks.score("probe", run.output_dir, f["test"], probe="entities")
    assert (
        test.metric == "f1" and test.score > 90 and tasks.TASKS["probe"].read_results(run.output_dir).score == run.score
    )


def test_a_study_runs_a_probe_task(probe_files, tmp_path, capsys):
    f = probe_files
    study = tmp_path / "study.yaml"
    study.write_text(
        f"systems: [{{name: enc, checkpoint: {f['encoder']}}}]\nseeds: 1\noutput_dir: {tmp_path / 'out'}\n"
        f"tasks:\n  - {{task: probe, probe: entities, train: {f['train']}, dev: {f['dev']}, test: {f['test']}, "
        f"learning_rates: [5e-3], options: {{features_cache: {tmp_path / 'cache'}, num_train_epochs: 4, "
        "per_device_train_batch_size: 8}}\n"
    )
    assert main(["study", str(study)]) == 0
    (result,) = (tmp_path / "out").glob("finetune/*/*/*/result.json")
    info = json.loads(result.read_text())
    assert info["task"] == "entities" and info["dev"] > 50 and info["heldout_source"] == "test" and info["heldout"] > 50
    assert "entities" in (tmp_path / "out" / "summary" / "table.md").read_text()


# ---------------------------------------------------------------------------------------------
# Clean errors (tests/conftest.py `cli_error`)


def test_bad_options_and_data_are_clean_errors(probe_files, tmp_path, cli_error):
    f, out = probe_files, tmp_path / "run"
    argv = finetune_argv(f, out, tmp_path / "cache")
    cli_error([*argv[:3], "enitites", *argv[4:]], contains="--probe: found 'enitites', expected one of: entities")
    cli_error([*argv, "--layers", "2"], contains="--layers: found '2'", out=tmp_path)
    cli_error([*argv, "--sweep"], contains="--sweep: a probe has no grid", out=tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_text("Mary NNP O B-PER\nmet VBD O X-PER\n")
    cli_error([*argv[:7], str(bad), *argv[8:]], names=f"{bad}:2", contains="found tag 'X-PER'", out=tmp_path / "run")
    cli_error(["evaluate", "probe", "--model", str(f["encoder"]), "--data", str(f["test"])], names=f["encoder"],
              contains="expected a probe (spanbert finetune probe)")  # fmt: skip


def test_a_probe_whose_encoder_changed_is_refused(probe_files, tmp_path, cli_error):
    import shutil

    f = probe_files
    encoder = tmp_path / "encoder"
    shutil.copytree(f["encoder"], encoder)
    assert main(finetune_argv({**f, "encoder": encoder}, tmp_path / "run", tmp_path / "cache")) == 0
    cli_error(["evaluate", "probe", "--probe", "pos", "--model", str(tmp_path / "run"), "--data", str(f["test"])],
              contains="holds the entities probe")  # fmt: skip
    (encoder / "config.json").write_text((encoder / "config.json").read_text().replace("}", ', "note": 1}', 1))
    cli_error(["evaluate", "probe", "--model", str(tmp_path / "run"), "--data", str(f["test"])],
              contains="changed since this probe was trained on it")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Two processes


@pytest.mark.slow
def test_two_processes_write_one_probe_and_score_as_one(probe_files, tmp_path):
    """torchrun --nproc_per_node 2 (gloo): one process extracts and caches the features (the other waits),
    rank 0 alone writes the probe, and with the global batch of one process the run selects the same
    epoch with the same dev score and the same predictions."""
    f = probe_files
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outs = {}
    for nproc, batch in ((1, "4"), (2, "4")):
        out = tmp_path / f"n{nproc}"
        argv = [*finetune_argv(f, out, tmp_path / f"cache{nproc}"), "--per_device_train_batch_size", batch]
        if nproc == 1:
            argv += ["--gradient_accumulation_steps", "2"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m",
               "spanbert", *argv]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert proc.stdout.count("encoded") == 2, proc.stdout  # train and dev, once each
        outs[nproc] = out
        names = sorted(p.name for p in out.iterdir())
        assert names.count("config.json") == 1 and not [n for n in names if ".tmp" in n], names
        assert len(list((tmp_path / f"cache{nproc}").iterdir())) == 2
    one, two = (json.loads((outs[n] / "dev_results.json").read_text()) for n in (1, 2))
    assert one["selected_step"] == two["selected_step"] and one["f1"] == pytest.approx(two["f1"])
    assert (outs[1] / "dev_predictions.jsonl").read_text() == (outs[2] / "dev_predictions.jsonl").read_text()
