"""Coreference (`spanbert.tasks.coref`) end to end: a tiny model overfits two LitBank documents through the CLI,
seeds, an existing output folder, one writer under torchrun, the released optimizer and best-on-dev selection:
the tests of spanbert/tasks/coref/finetune.py.

The other modules' tests are in test_coref_<module>.py (data, features, pruning, model, folder, predict,
command); the helpers they share (a stand-in tokenizer, a toy document, a tiny model, a tiny run) are here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from spanbert.config import model_config
from spanbert.tasks.coref import (
    CorefConfig,
    CorefDataset,
    CorefDocument,
    CorefModel,
    featurize,
    read_conll,
    write_conll,
)

LITBANK = Path(__file__).parents[1] / "../shared/data/litbank_coref"
needs_litbank = pytest.mark.skipif(not (LITBANK / "conll").is_dir(), reason=f"LitBank not found at {LITBANK}")

SAMPLE = """\
#begin document (bc/cctv/00/cctv_0001); part 000
bc/cctv/00/cctv_0001 0 0 Alice NNP * - - - Speaker#1 * (0)
bc/cctv/00/cctv_0001 0 1 met VBD * - - - Speaker#1 * -
bc/cctv/00/cctv_0001 0 2 her PRP$ * - - - Speaker#1 * (1|(0)
bc/cctv/00/cctv_0001 0 3 sister NN * - - - Speaker#1 * 1)
bc/cctv/00/cctv_0001 0 4 . . * - - - Speaker#1 * -

bc/cctv/00/cctv_0001 0 0 She PRP * - - - Speaker#2 * (1)
bc/cctv/00/cctv_0001 0 1 smiled VBD * - - - Speaker#2 * -
#end document
"""


# ---------------------------------------------------------------------------------------------
# Shared by the tests of the package's modules: a stand-in tokenizer, a toy document, a tiny model


class CharTokenizer:
    """Stand-in tokenizer: every word is split into 2-character pieces (a word-piece-like map)."""

    pad_id, unk_id, cls_id, sep_id, mask_id = 0, 1, 2, 3, 4
    vocab_size = 200

    def encode_words(self, words):
        ids, word_ids = [], []
        for w, word in enumerate(words):
            for i in range(0, len(word), 2):
                ids.append(5 + sum(map(ord, word[i : i + 2])) % 190)
                word_ids.append(w)

        class E:
            pass

        e = E()
        e.ids, e.word_ids = np.array(ids), np.array(word_ids)
        return e


def toy_doc(n_sentences=6) -> CorefDocument:
    sentences = [["Mary", "saw", "the", "old", "fisherman", "."], ["She", "waved", "to", "him", "."]] * (
        n_sentences // 2
    )
    n = len(sentences[0]) + len(sentences[1])
    clusters = [[(0, 0)] + [(6 + i * n, 6 + i * n) for i in range(n_sentences // 2)]]
    clusters += [[(2, 4)] + [(9 + i * n, 9 + i * n) for i in range(n_sentences // 2)]]
    return CorefDocument("toy", 0, sentences, clusters=clusters)


def tiny_model(**overrides) -> CorefModel:
    torch.manual_seed(0)
    cfg = CorefConfig(
        **{
            "max_seq_length": 12,
            "ffnn_size": 16,
            "feature_size": 4,
            "max_top_antecedents": 5,
            "dropout": 0.0,
            **overrides,
        }
    )
    return CorefModel(
        model_config("tiny", vocab_size=200, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), cfg
    )


def toy_batch(model):
    f = featurize(toy_doc(), CharTokenizer(), model.config.max_seq_length)
    return f, CorefDataset([f], model.config.max_span_width, 0, 2, 3)[0]


# ---------------------------------------------------------------------------------------------
# End to end on LitBank: a tiny model overfits two documents; CLI finetune / predict / evaluate


def cut(doc: CorefDocument, n_words: int) -> CorefDocument:
    sentences, speakers, total = [], [], 0
    for s, sp in zip(doc.sentences, doc.speakers):
        if total + len(s) > n_words:
            break
        sentences.append(s)
        speakers.append(sp)
        total += len(s)
    clusters = [[m for m in c if m[1] < total] for c in doc.clusters]
    return CorefDocument(doc.key, doc.part, sentences, speakers, [c for c in clusters if c])


@needs_litbank
@pytest.mark.realdata
@pytest.mark.slow
def test_tiny_model_overfits_two_litbank_documents_via_cli(tmp_path, capsys):
    from spanbert.cli import main
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is faster, and CI shares the cores
    try:
        files = sorted((LITBANK / "conll").glob("*.conll.gz"))[:2]
        docs = [cut(d, 150) for f in files for d in read_conll(f)]
        data = tmp_path / "two.conll"
        write_conll(data, docs)
        tok = train_tokenizer(None, vocab_size=400, texts=[" ".join(d.words) for d in docs], show_progress=False)
        encoder = Encoder(model_config("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0), add_pooling_layer=False)  # fmt: skip
        encoder.save_pretrained(tmp_path / "enc", tokenizer=tok)
        out_dir = tmp_path / "coref"
        rc = main([
            "finetune", "coref", "--model", str(tmp_path / "enc"), "--train", str(data), "--dev", str(data),
            "--output_dir", str(out_dir), "--max_seq_length", "128", "--ffnn_size", "64", "--feature_size", "8",
            "--dropout", "0", "--max_top_antecedents", "30", "--learning_rate", "2e-3", "--encoder_learning_rate",
            "2e-3", "--max_steps", "120", "--warmup_steps", "0", "--lr_scheduler_type", "constant",
            "--eval_steps", "60",
            "--report_to", "none", "--disable_tqdm", "--save_steps", "0", "--logging_steps", "1000",
        ])  # fmt: skip
        assert rc == 0
        summary = json.loads((out_dir / "dev_results.json").read_text())
        assert summary["conll_f1"] >= 90, summary

        capsys.readouterr()
        pred = tmp_path / "pred.conll"
        assert main(["predict", "coref", "--model", str(out_dir), "--data", str(data), "--output", str(pred)]) == 0
        capsys.readouterr()
        assert main(["evaluate", "coref", "--gold", str(data), "--predictions", str(pred)]) == 0
        scores = json.loads(capsys.readouterr().out)
        assert scores["conll_f1"] == pytest.approx(summary["conll_f1"])
        assert scores["documents"] == 2

        text = " ".join(docs[0].words[:60])
        assert main(["predict", "coref", "--model", str(out_dir), "--text", text]) == 0
        clusters = json.loads(capsys.readouterr().out)["clusters"]
        assert clusters, "the overfit model finds the first document's entities in its raw text"
        for cluster in clusters:
            for m in cluster:
                assert text[m["start"] : m["end"]] == m["text"]
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# Seeds, existing output folders, one writer under torchrun


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny encoder with its tokenizer and a small CoNLL file (three copies of SAMPLE)."""
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("coref_tiny")
    data = root / "train.conll"
    data.write_text("".join(SAMPLE.replace("cctv_0001", f"cctv_000{i}") for i in range(3)))
    docs = read_conll(data)
    tok = train_tokenizer(None, vocab_size=120, texts=[" ".join(d.words) for d in docs] * 20, show_progress=False)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False).save_pretrained(
        root / "enc", tokenizer=tok
    )
    return root


def finetune_argv(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "finetune", "coref", "--model", str(root / "enc"), "--train", str(root / "train.conll"),
        "--dev", str(root / "train.conll"), "--output_dir", str(out), "--max_seq_length", "16",
        "--ffnn_size", "8", "--feature_size", "4", "--max_top_antecedents", "4", "--max_steps", "3",
        "--learning_rate", "1e-2", "--encoder_learning_rate", "1e-2", "--report_to", "none",
        "--save_steps", "0", "--device", "cpu", "--disable_tqdm", *extra,
    ]  # fmt: skip


def test_seed_fixes_heads_dropout_and_order(tiny_run, tmp_path, capsys):
    """--seed fixes the head initialisation, dropout and the document order: two runs with one seed
    give identical weights, another seed different ones. --disable_tqdm shows no bar."""
    from safetensors.torch import load_file

    from spanbert.cli import main

    weights = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        assert main(finetune_argv(tiny_run, tmp_path / name, "--seed", seed, "--dropout", "0.5")) == 0
        weights[name] = load_file(tmp_path / name / "model.safetensors")
    err = capsys.readouterr().err
    assert "%|" not in err and "doc/s" not in err, err  # no progress bar of any stage
    assert weights["a"].keys() == weights["b"].keys()
    for k in weights["a"]:
        assert torch.equal(weights["a"][k], weights["b"][k]), k
    heads = [k for k in weights["a"] if not k.startswith("bert.")]
    assert any(not torch.equal(weights["a"][k], weights["c"][k]) for k in heads)


def test_existing_output_dir_is_refused_before_any_work(tiny_run, tmp_path, cli_error):
    from spanbert.folders import claim_manifest, record

    out = tmp_path / "run"
    claim_manifest(out, "run", "spanbert finetune coref")  # an earlier run: its manifest lists its model
    record(out / "config.json")
    (out / "config.json").write_text("{}")
    cli_error(finetune_argv(tiny_run, out), names=str(out), contains="--overwrite_output_dir", out=out)


DDP_SCRIPT = """
import json, os, sys
from spanbert.tasks.coref import CorefConfig, finetune_coref
from spanbert.training_args import TrainingArguments

root, out = sys.argv[1], sys.argv[2]
targs = TrainingArguments(
    output_dir=out + "/model", max_steps=4, learning_rate=1e-2, per_device_train_batch_size=1,
    eval_steps=2, save_steps=0, report_to="none", disable_tqdm=True, device="cpu", seed=3,
    metric_for_best_model="conll_f1",
)
config = CorefConfig(max_seq_length=16, ffnn_size=8, feature_size=4, max_top_antecedents=4,
                     encoder_learning_rate=1e-2, coref_depth=int(sys.argv[3]))
summary = finetune_coref(root + "/enc", root + "/train.conll", root + "/train.conll", targs, config)
with open(f"{out}/rank{os.environ['RANK']}.json", "w") as f:
    json.dump(summary, f)
"""


@pytest.mark.slow
@pytest.mark.parametrize("depth", [1, 2])
def test_two_processes_write_one_model_and_agree_on_dev(tiny_run, tmp_path, depth):
    """torchrun --nproc_per_node 2 (gloo): coref_depth 1 must not trip DDP's unused-parameter check,
    rank 0 alone writes the model, and the dev documents, split across the ranks and gathered,
    give the same scores on both ranks (also at the mid-training evaluation) and select the same step."""
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           str(tiny_run), str(tmp_path), str(depth)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    scores = [{k: v for k, v in s.items() if k.endswith(("_f1", "_p", "_r"))} for s in ranks]
    assert scores[0] and scores[0] == scores[1]
    assert ranks[0]["selected_step"] == ranks[1]["selected_step"] in (2, 4)  # chosen alike on both ranks
    files = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert "model.safetensors" in files and "dev_predictions.conll" in files and "dev_results.json" in files
    assert not [f for f in files if "tmp" in f], files  # no temporary left by a second writer
    assert proc.stdout.count("singletons:") == 1, proc.stdout  # messages once


# ---------------------------------------------------------------------------------------------
# Issue 11.7: the released optimizer and best-on-dev selection (the presets: test_coref_command.py; the
# segment-distance feature: test_coref_pruning.py, test_coref_model.py)


def test_optimizer_groups_and_clipping_follow_the_released_code(tiny_run, tmp_path, monkeypatch):
    """Encoder: --weight_decay on weight matrices, none on biases / LayerNorm; task layers: none;
    encoder and task gradients clipped apart."""
    from spanbert import optim, trainer
    from spanbert.cli import main

    seen = {}

    def spy(model, dataset, args, **kw):
        seen.update(kw, model=model, args=args)
        raise KeyboardInterrupt  # stop before any step

    monkeypatch.setattr(trainer, "train", spy)
    assert main(finetune_argv(tiny_run, tmp_path / "run", "--weight_decay", "0.01")) != 0  # "interrupted"
    assert seen["clip_by_prefix"] == ("bert.",)
    model = seen["model"]
    groups = optim.param_groups(
        model, seen["args"].learning_rate, seen["args"].weight_decay, seen["lr_by_prefix"],
        seen["weight_decay_by_prefix"],
    )
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert len(decay) == len(list(model.parameters()))
    for name, p in model.named_parameters():
        want = 0.01 if name.startswith("bert.") and p.ndim >= 2 and "LayerNorm" not in name else 0.0
        assert decay[id(p)] == want, name
    assert [len(g) for g in optim.clip_groups(model, list(model.parameters()), seen["clip_by_prefix"])] == [
        len(list(model.bert.parameters())),
        len(list(model.parameters())) - len(list(model.bert.parameters())),
    ]


def test_the_best_dev_evaluation_is_the_model_saved(tiny_run, tmp_path, monkeypatch, capsys):
    """Dev scored every step; the scorer is made to peak at step 2 of 3: step 2 is selected, reported,
    saved (not the last weights), and its dev predictions are what a separate `predict coref` with the
    saved model writes."""
    from safetensors.torch import load_file

    from spanbert.cli import main
    from spanbert.tasks import coref

    real = coref.evaluate_clusters
    calls = []

    def peaking(docs, predictions):
        scores = real(docs, predictions)
        calls.append(len(calls) + 1)
        return {**scores, "conll_f1": {1: 10.0, 2: 30.0, 3: 20.0}[calls[-1]]}

    monkeypatch.setattr(coref.finetune, "evaluate_clusters", peaking)  # where fine-tuning's evaluation calls it
    out = tmp_path / "run"
    assert main(finetune_argv(tiny_run, out, "--eval_steps", "1", "--save_steps", "1", "--dropout", "0")) == 0
    summary = json.loads((out / "dev_results.json").read_text())
    assert summary["selected_step"] == 2 and summary["selected_by"] == "conll_f1"
    assert summary["conll_f1"] == 30.0 and [h["step"] for h in summary["dev_history"]] == [1, 2, 3]
    assert "selected the model of step 2" in capsys.readouterr().out
    saved = load_file(out / "model.safetensors")
    best = torch.load(out / "best" / "state.pt", weights_only=True)
    last = torch.load(out / "checkpoint-3" / "state.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[k], best[k]) for k in saved)
    assert any(not torch.equal(saved[k], last[k]) for k in saved)
    monkeypatch.setattr(coref.finetune, "evaluate_clusters", real)
    again = tmp_path / "again.conll"
    assert main(["predict", "coref", "--model", str(out), "--data", str(tiny_run / "train.conll"),
                 "--output", str(again), "--device", "cpu", "--disable_tqdm"]) == 0  # fmt: skip
    assert again.read_text() == (out / "dev_predictions.conll").read_text()
