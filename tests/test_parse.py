"""Constituency parsing (`spanbert.tasks.parse`): chart spans, CKY against brute force, the chart parser (a
training step, prediction), the commands and their clean errors. The PTB reader and its cleaning are tested in
test_trees.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spanbert.folders import MANIFEST
from spanbert.tasks.parse import cky, tree_from_spans, tree_spans
from spanbert.tasks.trees import Tree, clean, read_trees

PTB = Path(__file__).parents[1] / "../shared/data/ptb_sample"


# ---------------------------------------------------------------------------------------------- chart


def test_unary_chains_collapse_and_come_back():
    t = read_trees_text("(TOP (S (VP (VB Go)) (. .)))")
    assert tree_spans(t) == [(0, 1, "VP"), (0, 2, "S")]
    t = read_trees_text("(TOP (S (VP (VB Go))))")  # S over VP over one word: one chart span S+VP
    assert tree_spans(t) == [(0, 1, "S+VP")]
    t = read_trees_text("(TOP (S (NP (NP (DT the) (NN cat)) (PP (IN on) (NP (NN mat)))) (VP (VB sat))))")
    spans = tree_spans(t)
    assert sorted(spans) == sorted([(0, 2, "NP"), (3, 4, "NP"), (2, 4, "PP"), (0, 4, "NP"), (4, 5, "VP"), (0, 5, "S")])
    assert str(tree_from_spans(t.words(), t.tags(), spans)) == str(t)


def read_trees_text(text: str) -> Tree:
    from spanbert.tasks.trees import parse_brackets

    return clean(next(parse_brackets(text, "test")))


@pytest.mark.realdata
def test_every_dev_tree_survives_the_chart():
    if not PTB.is_dir():
        pytest.skip(f"{PTB} not present (the PTB sample of ../shared/data)")
    for t in read_trees(PTB / "dev").trees:
        assert str(tree_from_spans(t.words(), t.tags(), tree_spans(t))) == str(t)


def _binary_trees(i: int, j: int):
    if j - i == 1:
        yield [(i, j)]
        return
    for k in range(i + 1, j):
        for left in _binary_trees(i, k):
            for right in _binary_trees(k, j):
                yield [(i, j), *left, *right]


def test_cky_finds_the_best_tree_as_brute_force_does():
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 4, 5, 6, 6, 3]
    N = max(lengths)
    scores = rng.normal(size=(len(lengths), N + 1, N + 1))
    got = cky(scores, lengths)
    for b, n in enumerate(lengths):
        best = max(_binary_trees(0, n), key=lambda spans: sum(scores[b, i, j] for i, j in spans))
        assert sorted(got[b]) == sorted(best)
        assert len(got[b]) == 2 * n - 1 and got[b][0] == (0, n)


# ---------------------------------------------------------------------------------------------- model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tasks.trees import write_trees
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("parse")
    trees = [read_trees_text(x) for x in (
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))",
        "(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .)))",
        "(TOP (S (VP (VB Go)) (. .)))",
        "(TOP (NP (NP (DT a) (NN dog)) (PP (IN with) (NP (DT a) (NN hat)))))",
        "(TOP (S (NP (NNP Mary)) (VP (VBZ likes) (NP (NNS cats))) (. .)))",
    )]  # fmt: skip
    write_trees(root / "train.txt", trees * 4)
    write_trees(root / "dev.txt", trees)
    tok = train_tokenizer(None, 120, texts=[" ".join(t.words()) for t in trees] * 20, show_progress=False)
    torch.manual_seed(0)
    config = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=64, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)  # fmt: skip
    Encoder(config).save_pretrained(root / "pretrained", tokenizer=tok)
    return {"root": root, "model": root / "pretrained", "train": root / "train.txt", "dev": root / "dev.txt"}


SMALL = ["--d_model", "32", "--num_heads", "2", "--d_ff", "64", "--label_hidden", "16", "--disable_tqdm", "true"]


def test_one_training_step_moves_encoder_and_parser_and_the_margin_loss_is_not_negative(tiny):
    import torch

    from spanbert import families
    from spanbert.tasks import parse as P

    trees = read_trees(tiny["dev"]).trees
    encoder = families.load_encoder(tiny["model"])
    tok = families.load_framed_tokenizer(tiny["model"])
    labels, tags = P.chart_labels(trees), P.tag_list(trees)
    torch.manual_seed(0)
    model = P.ChartParser(encoder, labels, tags, P.ParseConfig(d_model=32, num_heads=2, d_ff=64, label_hidden=16))
    model.train()
    feats = P.parse_features([t.words() for t in trees], tok)
    P.add_targets(feats, trees, {l: i for i, l in enumerate(labels)}, {t: i for i, t in enumerate(tags)})
    batch = P.ParseCollator(tok.pad_id)(feats)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = model(**batch)
    assert out["parse_loss"] >= 0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    moved = {n.split(".")[0] for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert {"bert", "project", "layers", "label_mlp", "tag_classifier"} <= moved
    model.eval()
    parsed = P.predict_trees(model, [t.words() for t in trees], [t.tags() for t in trees],
                             P.parse_features([t.words() for t in trees], tok), tok.pad_id, batch_size=2)  # fmt: skip
    for t, p in zip(trees, parsed.trees):
        assert p.words() == t.words() and p.tags() == t.tags() and p.label == "TOP"
        assert len(p.children) == 1 and not p.children[0].is_preterminal  # the root span is a constituent


def test_finetune_predict_evaluate_commands(tiny, tmp_path, capsys):
    from spanbert.cli import main

    out = tmp_path / "out"
    rc = main(["finetune", "parse", "--model", str(tiny["model"]), "--train", str(tiny["train"]), "--dev",
               str(tiny["dev"]), "--output_dir", str(out), "--num_train_epochs", "2", "--per_device_train_batch_size",
               "4", "--learning_rate", "3e-3", "--encoder_learning_rate", "1e-4", *SMALL])  # fmt: skip
    assert rc == 0
    results = json.loads((out / "dev_results.json").read_text())
    assert results["selected_by"] == "f1" and 0 <= results["f1"] <= 100 and results["sentences"] == 5
    assert (results["encoder_learning_rate"], results["parser_learning_rate"]) == (1e-4, 3e-3)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForConstituencyParsing"] and config["spanbert"]["labels"][0] == ""
    assert len((out / "dev_predictions.txt").read_text().splitlines()) == 5
    pred = tmp_path / "pred.txt"
    capsys.readouterr()
    assert main(["predict", "parse", "--model", str(out), "--data", str(tiny["dev"]), "--output", str(pred),
                 "--disable_tqdm"]) == 0  # fmt: skip
    lines = pred.read_text().splitlines()
    assert len(lines) == 5 and all(line.startswith("(TOP ") for line in lines)
    predicted_f1 = json.loads(capsys.readouterr().out.split("\n", 1)[1])["f1"]
    assert predicted_f1 == pytest.approx(results["f1"])  # the saved model is the selected one
    assert main(["evaluate", "parse", "--data", str(tiny["dev"]), "--predictions", str(pred)]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(predicted_f1)
    assert main(["evaluate", "parse", "--data", str(tiny["dev"]), "--model", str(out), "--disable_tqdm"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(predicted_f1)
    tagged = tmp_path / "tagged.txt"
    assert main(["predict", "parse", "--model", str(out), "--data", str(tiny["dev"]), "--output", str(tagged),
                 "--tags", "predicted", "--disable_tqdm"]) == 0  # fmt: skip
    vocabulary = set(json.loads((out / "config.json").read_text())["spanbert"]["tags"])
    assert {t for line in tagged.read_text().splitlines() for t in read_trees_text(line).tags()} <= vocabulary
    capsys.readouterr()
    assert main(["predict", "parse", "--model", str(out), "--text", "The cat sat.", "--disable_tqdm"]) == 0
    tree = capsys.readouterr().out.strip()
    assert tree.startswith("(TOP ") and read_trees_text(tree).words() == ["The", "cat", "sat", "."]
    # a gold label the parser never saw in training: scored (as a miss), with a warning, as TACRED and NER
    unseen = tmp_path / "unseen.txt"
    unseen.write_text("(TOP (FOOBAR (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))\n")
    for action in (["evaluate", "parse", "--data", str(unseen), "--model", str(out)],
                   ["predict", "parse", "--data", str(unseen), "--model", str(out), "--output", str(tmp_path / "u")]):
        assert main([*action, "--disable_tqdm"]) == 0
        err = capsys.readouterr().err
        assert f"warning: {unseen}: 1 gold constituent label(s) ['FOOBAR'] never occur" in err, err


def test_family_learning_rates(tmp_path):
    from spanbert.tasks.parse import family_rates

    two_tower = tmp_path / "tt"
    two_tower.mkdir()
    (two_tower / "config.json").write_text(json.dumps({"model_type": "cloze-two-tower"}))
    assert family_rates(two_tower) == (8e-4, 8e-3)  # §6.2.2
    assert family_rates(tmp_path / "missing") == (5e-5, 8e-4)


def test_clean_errors(tiny, tmp_path, cli_error):
    bad = tmp_path / "bad.mrg"
    bad.write_text("( (S (NP (NN a))\n  (VP (VB b)) )\n")
    out = tmp_path / "out"
    base = ["finetune", "parse", "--model", tiny["model"], "--output_dir", out, *SMALL]
    cli_error([*base, "--train", bad], names=f"{bad}:1", contains="never closed", out=tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cli_error([*base, "--train", empty], names=empty, contains="empty file", out=tmp_path)
    cli_error([*base, "--train", tiny["train"], "--dev", empty], names=empty, out=tmp_path)
    pred = tmp_path / "pred.txt"
    pred.write_text("(TOP (S (NN a)))\n(TOP (S (NN b)))\n")
    cli_error(["evaluate", "parse", "--data", tiny["dev"], "--predictions", pred], names=f"{pred}:3",
              contains="found 2 trees; expected 5")  # fmt: skip
    pred.write_text("(TOP (S (NN a)))\n(TOP (S (NN b))\n" + "(TOP (S (NN c)))\n" * 3)
    cli_error(["evaluate", "parse", "--data", tiny["dev"], "--predictions", pred], names=f"{pred}:2",
              contains="never closed")  # fmt: skip
    cli_error(["evaluate", "parse", "--data", bad, "--predictions", pred], names=f"{bad}:1")
    latin1 = tmp_path / "latin1.mrg"
    latin1.write_bytes("(TOP (S (NP (NNP Zoë)) (VP (VBZ sells))))\n(TOP (S (NP (NN café))))\n".encode("latin-1"))
    cli_error(["evaluate", "parse", "--data", latin1, "--predictions", pred], names=f"{latin1}:1",
              contains="found bytes that are not UTF-8 (invalid continuation byte at byte 19)")  # fmt: skip
    cli_error(["evaluate", "parse", "--data", tiny["dev"], "--predictions", latin1], names=f"{latin1}:1",
              contains="found bytes that are not UTF-8")  # fmt: skip
    cli_error(["predict", "parse", "--model", tiny["model"], "--text", "a b", "--disable_tqdm"], names=tiny["model"],
              contains="expected a parser")  # fmt: skip


def test_evaluate_scores_error_sentences_as_evalb(tiny, tmp_path, capsys):
    from spanbert.cli import main

    gold = read_trees(tiny["dev"]).trees
    lines = [str(t) for t in gold]
    lines[1] = "(TOP (S (NN wrong) (NN words)))"  # Length unmatch: an error sentence, not scored
    lines[2] = ""  # no words: a skip sentence
    lines[3] = lines[3].replace("(NN dog)", "(NN dog )")  # evalb.c would stop; written again it scores
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(lines) + "\n")
    assert main(["evaluate", "parse", "--data", str(tiny["dev"]), "--predictions", str(pred), "--summary"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert "Number of Error sentence  =      1" in captured.err and "Number of Skip  sentence  =      1" in captured.err
    assert (res["error_sentences"], res["skip_sentences"], res["valid_sentences"]) == (1, 1, 3)
    assert res["f1"] == 100.0 and "Length unmatch" in captured.err


def test_a_two_tower_model_parses_with_its_family_defaults(tiny, tmp_path, capsys):
    """Every family through the one protocol: the two-tower model gets §6.2.2's rates (8e-4 language
    model, 8e-3 parser) and its own habits (x16 output scale, zero-initialised output layers)."""
    import torch

    from spanbert.cli import main
    from spanbert.cloze import build_model, cloze_config, train_cloze_tokenizer

    trees = read_trees(tiny["dev"]).trees
    tok = train_cloze_tokenizer(None, 200, texts=[" ".join(t.words()) for t in trees] * 20)
    torch.manual_seed(0)
    model = build_model(cloze_config("tiny", d_model=32, num_heads=2, ffn_dim=64, final_heads=2), tok)
    model.save_pretrained(tmp_path / "tt", tokenizer=tok)
    out = tmp_path / "out"
    assert main(["finetune", "parse", "--model", str(tmp_path / "tt"), "--train", str(tiny["train"]), "--dev",
                 str(tiny["dev"]), "--output_dir", str(out), "--num_train_epochs", "1", *SMALL]) == 0  # fmt: skip
    results = json.loads((out / "dev_results.json").read_text())
    assert (results["encoder_learning_rate"], results["parser_learning_rate"]) == (8e-4, 8e-3)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "cloze-two-tower" and config["architectures"] == ["TwoTowerForConstituencyParsing"]
    capsys.readouterr()
    assert main(["predict", "parse", "--model", str(out), "--text", "Mary likes cats.", "--disable_tqdm"]) == 0
    assert read_trees_text(capsys.readouterr().out.strip()).words() == ["Mary", "likes", "cats", "."]


def test_family_habits_reach_the_new_layers():
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tasks.parse import ChartParser, ParseConfig

    enc = Encoder(model_config("tiny", vocab_size=50, max_position_embeddings=32))
    small = ParseConfig(d_model=16, num_heads=2, d_ff=32, label_hidden=8)
    zero = ChartParser(enc, ["", "S"], ["NN"], small, zero_init_head=True, output_scale=16.0)
    assert not zero.label_mlp[-1].weight.any() and not zero.tag_classifier.weight.any()
    drawn = ChartParser(enc, ["", "S"], ["NN"], small, init_std=0.5)
    assert drawn.label_mlp[-1].weight.std().item() == pytest.approx(0.5, rel=0.5)
    ids = torch.tensor([[1, 5, 6, 2]])
    x16 = zero.word_vectors(ids, torch.ones_like(ids), torch.tensor([[0, 1, 2, 3]]), torch.tensor([2]))
    zero.output_scale = 1.0
    x1 = zero.word_vectors(ids, torch.ones_like(ids), torch.tensor([[0, 1, 2, 3]]), torch.tensor([2]))
    assert not torch.allclose(x16, x1)  # the encoder output is scaled before the projection


def test_span_scores_are_the_mlp_of_fencepost_differences():
    """K&K §2.2: span (i, j) = [f_j - f_i ; b_{i+1} - b_{j+1}], scored by the label MLP (computed without
    building the span vectors: compared here with building them)."""
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tasks.parse import ChartParser, ParseConfig

    torch.manual_seed(0)
    enc = Encoder(model_config("tiny", vocab_size=50, max_position_embeddings=32))
    m = ChartParser(enc, ["", "S", "NP"], ["NN"], ParseConfig(d_model=8, num_heads=2, d_ff=16, label_hidden=6))
    x = torch.randn(2, 6, 8)  # (B, N+2, D): N = 4 words
    got = m.label_scores(x)
    assert got.shape == (2, 5, 5, 3) and not got[..., 0].any()
    for b, i, j in [(0, 0, 4), (1, 1, 3), (0, 2, 3)]:
        span = torch.cat([x[b, j, :4] - x[b, i, :4], x[b, i + 1, 4:] - x[b, j + 1, 4:]])
        assert torch.allclose(got[b, i, j, 1:], m.label_mlp(span), atol=1e-5)


def test_study_runs_parse_with_a_test_split(tiny, tmp_path, capsys):
    """`spanbert study` accepts parse: a cell fine-tunes with the study's (parser) rate, its dev F1 is read
    from dev_results.json and the selected model scores the test split."""
    import yaml

    from spanbert.cli import main

    study = {
        "systems": [{"name": "tiny", "checkpoint": str(tiny["model"])}],
        "tasks": [{"task": "parse", "train": str(tiny["train"]), "dev": str(tiny["dev"]), "test": str(tiny["dev"]),
                   "learning_rates": [3e-3], "options": {"num_train_epochs": 1, "d_model": 32, "num_heads": 2,
                                                         "d_ff": 64, "label_hidden": 16}}],
        "seeds": 1, "output_dir": str(tmp_path / "study"),
    }  # fmt: skip
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["study", str(path)]) == 0
    cell = json.loads(next((tmp_path / "study").rglob("result.json")).read_text())
    assert cell["task"] == "parse" and 0 <= cell["dev"] <= 100
    test = json.loads(next((tmp_path / "study").rglob("test.json")).read_text())
    assert test["f1"] == pytest.approx(cell["dev"])  # the test file is the dev file here


@pytest.mark.slow
def test_two_processes_train_and_parse_as_one_with_accumulation(tiny, tmp_path):
    """torchrun --nproc_per_node 2 (gloo) equals one process with accumulation 2: one saved model, the
    same weights, the same dev trees (no dropout in the encoder or the parser; 16 trees, so that no
    step is partial: one process would keep it, two drop it)."""
    import os
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    def run(nproc: int, out: Path, accumulation: int) -> None:
        argv = ["finetune", "parse", "--model", str(tiny["model"]), "--train", str(tiny["train"]), "--dev",
                str(tiny["dev"]), "--output_dir", str(out), "--num_train_epochs", "2", "--max_tokens_per_batch", "0",
                "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", str(accumulation),
                "--parser_dropout", "0", "--device", "cpu", "--max_train_examples", "16", *SMALL]  # fmt: skip
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "spanbert", *argv]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

    run(1, tmp_path / "one", 2)
    run(2, tmp_path / "two", 1)
    one, two = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    assert one.keys() == two.keys()
    for k in one:
        assert torch.allclose(one[k], two[k], atol=1e-5), k
    assert (tmp_path / "one" / "dev_predictions.txt").read_text() == (
        tmp_path / "two" / "dev_predictions.txt"
    ).read_text()
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.name.startswith(".")) == [MANIFEST]
