"""Fine-tuning the two-tower cloze model (§4) through the shared task heads: its encoder protocol
(`TwoTowerEncoder`), its habits in the sentence classifier (x16, zero init, no LM dropout), the CRF,
the biLSTM-CRF tagger in both stacking modes, the cosine schedule, early stopping on dev loss, and
GLUE / NER end to end through the CLI."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from spanbert.cli import main as spanbert_main
from spanbert.cloze import FINETUNE_HABITS, TwoTowerEncoder
from spanbert.tasks import crf_tagger as CT
from spanbert.tasks.classification import SequenceClassifier
from spanbert.tasks.layers import CRF, ScalarMix

POS = ["good", "great", "fine", "happy"]
NEG = ["bad", "awful", "sad", "poor"]
FILL = ["the", "movie", "was", "very", "plot", "film", "and", "quite"]
PEOPLE = [["John", "Smith"], ["Mary"], ["Ann", "Lee"]]
PLACES = [["Paris"], ["New", "York"], ["Berlin"]]
NER_FILL = ["said", "in", "the", "visited", "today", "met", "."]


def synthetic_sst(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = rng.sample(FILL, 4)
        words.insert(rng.randrange(5), rng.choice(POS if i % 2 else NEG))
        rows.append((" ".join(words), str(i % 2)))
    return rows


def synthetic_conll(n: int, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(2, 3)):
            kind = rng.choice(["PER", "LOC", None])
            if kind:
                name = rng.choice(PEOPLE if kind == "PER" else PLACES)
                words += name
                tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(name) - 1)
            words.append(rng.choice(NER_FILL))
            tags.append("O")
        out.append((words, tags))
    return out


def tiny_lm(vocab_size: int = 40, seed: int = 0, **fields):
    from spanbert.cloze import TwoTowerModel
    from spanbert.config import ClozeConfig

    torch.manual_seed(seed)
    cfg = ClozeConfig(vocab_size=vocab_size, d_model=16, num_layers=2, num_heads=2, ffn_dim=32, final_heads=2, **fields)
    return TwoTowerModel(cfg)


@pytest.fixture(scope="module")
def tiny_two_tower(tmp_path_factory) -> Path:
    """A tiny saved two-tower model whose tokenizer covers the GLUE and NER test texts."""
    from spanbert.cloze import build_model, cloze_config, train_cloze_tokenizer

    texts = [s for s, _ in synthetic_sst(64)] + [" ".join(w) for w, _ in synthetic_conll(64)]
    tok = train_cloze_tokenizer(None, 400, texts=texts * 3)  # above the 256 bytes: whole words get merges
    torch.manual_seed(0)
    model = build_model(cloze_config("tiny", d_model=32, num_heads=2, ffn_dim=64, final_heads=2), tok)
    path = tmp_path_factory.mktemp("cloze") / "pretrained"
    model.save_pretrained(path, tokenizer=tok)
    return path


# ---------------------------------------------------------------------------------------------- GLUE head


@pytest.mark.parametrize("pair", [False, True])
def test_glue_head_shapes_zero_init_and_scaled_boundary_outputs(pair):
    lm = tiny_lm()
    cfg = lm.config
    model = SequenceClassifier(TwoTowerEncoder(lm), 3).eval()
    d = cfg.d_model
    # [<s>; </s>; <sep>]: one projection for single texts and pairs (the <sep> part is zero without one)
    assert model.classifier.weight.shape == (3, 3 * d)
    assert not model.classifier.weight.any() and not model.classifier.bias.any()
    # dropout off inside the LM (§4), 0.1 before the projection
    assert all(m.p == 0.0 for m in lm.modules() if hasattr(m, "p")) and model.dropout.p == 0.1
    # row 0: <s> 7 8 <sep> 9 </s>; row 1 shorter, padded
    body = [[7, 8, 9, 10], [11, 12]]
    rows = []
    for b in body:
        mid = [b[0], b[1], cfg.sep_id, *b[2:]] if pair else b
        rows.append([cfg.bos_id, *mid, cfg.eos_id])
    T = max(map(len, rows))
    ids = torch.tensor([r + [cfg.pad_id] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    out = model(ids, attention_mask=mask, labels=torch.tensor([0, 2]))
    assert torch.equal(out["logits"], torch.zeros(2, 3))  # zero weights: uniform start
    assert math.isclose(float(out["loss"].detach()), math.log(3), rel_tol=1e-6)
    h = lm.encode(ids, mask, full_context=True)["hidden"]
    features = model.bert.sentence(model.bert(ids, mask), mask, ids)
    for i, r in enumerate(rows):
        want = [h[i, 0], h[i, len(r) - 1]] + [h[i, r.index(cfg.sep_id)] if pair else torch.zeros(d)]
        assert torch.allclose(features[i], torch.cat(want))
    with torch.no_grad():
        model.classifier.weight.normal_()
        model.classifier.bias.normal_()
    logits = model(ids, attention_mask=mask)["logits"]
    manual = 16.0 * features @ model.classifier.weight.T + model.classifier.bias
    assert torch.allclose(logits, manual, atol=1e-5)


def test_glue_head_zero_init_gives_the_head_gradient_only_at_first():
    lm = tiny_lm()
    model = SequenceClassifier(TwoTowerEncoder(lm), 2)
    cfg = lm.config
    ids = torch.tensor([[cfg.bos_id, 7, 8, cfg.eos_id]])
    model(ids, labels=torch.tensor([1]))["loss"].backward()
    assert model.classifier.weight.grad.abs().sum() > 0
    assert all(p.grad is None or not p.grad.any() for p in lm.parameters())  # W = 0: no signal below yet


def test_glue_features_wrap_in_boundary_markers_and_sep():
    from spanbert.cloze import train_cloze_tokenizer
    from spanbert.tasks.glue import GLUE_TASKS, GlueExample, glue_features

    raw = train_cloze_tokenizer(None, 300, texts=["the movie was good", "a plot"] * 20)
    encoder = TwoTowerEncoder(tiny_lm(raw.vocab_size, pad_id=raw.pad_id, bos_id=raw.token_to_id("<s>"),
                                      eos_id=raw.token_to_id("</s>"), sep_id=raw.token_to_id("<sep>")))  # fmt: skip
    cfg, tok = encoder.config, encoder.frame(raw)
    a = tok.encode("the movie was good").ids.tolist()
    b = tok.encode("a plot").ids.tolist()
    f = glue_features(GLUE_TASKS["RTE"], [GlueExample("0", "the movie was good", "a plot", "entailment")], tok)
    assert f[0]["input_ids"].tolist() == [cfg.bos_id, *a, cfg.sep_id, *b, cfg.eos_id] and f[0]["labels"] == 0
    f = glue_features(GLUE_TASKS["SST-2"], [GlueExample("0", "the movie was good", None, "1")], tok, 4)
    assert f[0]["input_ids"].tolist() == [cfg.bos_id, *a[:2], cfg.eos_id]


# ---------------------------------------------------------------------------------------------- CRF


def brute_force(crf: CRF, emissions: torch.Tensor, n: int) -> tuple[float, list[int], dict[tuple, float]]:
    """log Z, best path and every path's score of one sequence of length n, by enumeration."""
    K = crf.num_tags
    scores = {}
    for path in itertools.product(range(K), repeat=n):
        s = crf.start[path[0]] + crf.end[path[-1]] + sum(emissions[t, path[t]] for t in range(n))
        s = s + sum(crf.transitions[path[t - 1], path[t]] for t in range(1, n))
        scores[path] = float(s.detach())
    log_z = float(torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), 0))
    return log_z, list(max(scores, key=scores.get)), scores


def test_crf_matches_brute_force_enumeration():
    g = torch.Generator().manual_seed(0)
    K, lengths = 3, [4, 1, 3, 2]
    crf = CRF(K).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    emissions = torch.randn(len(lengths), max(lengths), K, generator=g, dtype=torch.float64)
    mask = torch.tensor([[t < n for t in range(max(lengths))] for n in lengths])
    tags = torch.randint(0, K, mask.shape, generator=g).masked_fill(~mask, -100)
    with torch.no_grad():
        log_z = crf.log_partition(emissions, mask)
        best = crf.decode(emissions, mask)
        ll = crf.log_likelihood(emissions, tags, mask)
    for i, n in enumerate(lengths):
        z, path, scores = brute_force(crf, emissions[i], n)
        assert math.isclose(float(log_z[i]), z, rel_tol=1e-9)
        assert best[i, :n].tolist() == path and (best[i, n:] == -1).all()
        gold = tuple(tags[i, :n].tolist())
        assert math.isclose(float(ll[i]), scores[gold] - z, rel_tol=1e-9, abs_tol=1e-9)
    # probabilities of all paths sum to one
    _, _, scores = brute_force(crf, emissions[0], 4)
    total = sum(math.exp(s - float(log_z[0])) for s in scores.values())
    assert math.isclose(total, 1.0, rel_tol=1e-9)


def test_crf_rejects_an_empty_sequence():
    from spanbert.errors import SpanBertError

    with pytest.raises(SpanBertError, match="at least one"):
        CRF(2).log_partition(torch.zeros(1, 2, 2), torch.tensor([[False, False]]))


# ---------------------------------------------------------------------------------------------- NER head


def _ner_batch(cfg):
    feats = [
        {"input_ids": [cfg.bos_id, 7, 8, 9, cfg.eos_id], "first_token": [1, 3], "labels": [-100, 1, -100, 2, -100]},
        {"input_ids": [cfg.bos_id, 10, cfg.eos_id], "first_token": [1], "labels": [-100, 0, -100]},
    ]
    import numpy as np

    feats = [{k: np.asarray(v) for k, v in f.items()} for f in feats]
    return CT.WordCollator(cfg.pad_id)(feats)


def test_ner_collator_takes_word_labels_from_first_sub_tokens():
    cfg = tiny_lm().config
    batch = _ner_batch(cfg)
    assert batch["labels"].tolist() == [[1, 2], [0, -100]]
    assert batch["word_mask"].tolist() == [[1, 1], [1, 0]] and batch["first_token"].tolist() == [[1, 3], [1, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0]]


def test_ner_frozen_mode_trains_only_the_mix_and_head():
    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, stacking="frozen", projection_dim=8, lstm_hidden_size=6).train()
    assert not lm.training and all(not p.requires_grad for p in lm.parameters())
    assert model.scalar_mix.weights.numel() == lm.config.num_layers + 2  # embeddings, blocks, output
    out = model(**_ner_batch(lm.config))
    out["loss"].backward()
    assert all(p.grad is None for p in lm.parameters())
    assert model.scalar_mix.weights.grad.abs().sum() > 0 and model.scalar_mix.gamma.grad is not None
    # the mix is softmax(w)-weighted times gamma: equal weights at the start
    layers = [torch.full((1, 2, 3), float(i)) for i in range(4)]
    assert torch.allclose(ScalarMix(4)(layers), torch.full((1, 2, 3), 1.5))


def test_ner_finetune_mode_trains_the_lm_at_its_own_rate():
    from spanbert.optim import param_groups

    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, stacking="finetune", projection_dim=8, lstm_hidden_size=6).train()
    assert not hasattr(model, "scalar_mix") and lm.training
    assert {m.p for m in lm.modules() if hasattr(m, "p")} == {0.3}  # §4: 0.3 within the LM too
    model(**_ner_batch(lm.config))["loss"].backward()
    assert sum(float(p.grad.abs().sum()) for p in lm.parameters() if p.grad is not None) > 0
    groups = param_groups(model, 1e-3, 0.0, {"bert.": 1e-5})
    lm_ids = {id(p) for p in lm.parameters()}
    for g in groups:
        assert all((id(p) in lm_ids) == (g["lr"] == 1e-5) for p in g["params"])


def test_ner_eval_outputs_viterbi_tags_and_per_sequence_loss():
    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, projection_dim=8, lstm_hidden_size=6).eval()
    batch = _ner_batch(lm.config)
    out = model(**batch)
    assert out["tags"][1, 1] == -1 and (out["tags"][0] >= 0).all()  # -1 at the padded word
    assert out["nll"].shape == (2,) and torch.isclose(out["nll"].mean(), out["loss"])
    assert torch.equal(out["tags"], model.crf.decode(out["logits"], batch["word_mask"].bool()))


# ---------------------------------------------------------------------------------------------- schedule


def test_cosine_schedule_warms_up_from_1e7_and_anneals_to_1e6():
    from spanbert.optim import cosine_lambda

    total, warmup, peak = 100, 10, 5e-5
    d = FINETUNE_HABITS.training_defaults()
    f = cosine_lambda(total, warmup, peak, d["warmup_init_lr"], d["min_lr"])
    lrs = [f(s) * peak for s in range(total + 1)]
    assert math.isclose(lrs[0], 1e-7) and math.isclose(lrs[warmup], peak) and math.isclose(lrs[total], 1e-6)
    assert all(a < b for a, b in zip(lrs[:warmup], lrs[1 : warmup + 1]))
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1 :]))
    assert math.isclose(lrs[55], 1e-6 + 0.5 * (peak - 1e-6))  # halfway down the cosine
    assert d["lr_scheduler_type"] == "cosine" and d["warmup_ratio"] == 0.1
    assert d["max_grad_norm"] == 0.0  # the paper states no clipping for fine-tuning (docs/fidelity.md)


# ---------------------------------------------------------------------------------------------- early stopping


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x, labels):
        return {"loss": ((self.w * x - labels) ** 2).mean()}


def test_early_stopping_keeps_the_epoch_before_the_dev_loss_rose(tmp_path):
    from spanbert.training_args import TrainingArguments

    data = [{"x": torch.tensor(1.0), "labels": torch.tensor(1.0)} for _ in range(4)]
    dev_losses = iter([3.0, 2.0, 2.5, 1.0])  # epoch 3 is worse than 2: stop there, keep epoch 2
    weights = {}

    def eval_fn(m, step):
        weights[step] = float(m.w)
        return {"loss": next(dev_losses)}

    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, num_train_epochs=4, learning_rate=0.1,
        device="cpu", report_to="none", disable_tqdm=True, save_steps=0,
    )  # fmt: skip
    model = _Toy()
    result = CT.train_with_early_stopping(model, data, args, lambda b: {k: torch.stack([x[k] for x in b]) for k in b[0]},
                                         eval_fn)  # fmt: skip
    assert sorted(weights) == [2, 4, 6] and result.global_step == 6 and result.best_step == 4
    assert float(model.w) == weights[4] != weights[6]


# ---------------------------------------------------------------------------------------------- end to end


def _train_args(out: Path, epochs: int = 3, lr: str = "1e-3") -> list[str]:
    return ["--output_dir", str(out), "--num_train_epochs", str(epochs), "--learning_rate", lr, "--device", "cpu",
            "--logging_steps", "1000", "--save_steps", "0", "--disable_tqdm", "--report_to", "none"]  # fmt: skip


def test_glue_end_to_end_from_a_two_tower_model(tiny_two_tower, tmp_path, capsys):
    data, out, sub = tmp_path / "SST-2", tmp_path / "ft", tmp_path / "sub"
    data.mkdir()
    rows = synthetic_sst(32)
    (data / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
    (data / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
    (data / "test.tsv").write_text("index\tsentence\n" + "".join(f"{9 + i}\t{s}\n" for i, (s, _) in enumerate(rows)))
    glue = ["glue", "--task", "SST-2", "--data_dir", str(data)]
    assert spanbert_main(["finetune", *glue, "--model", str(tiny_two_tower), *_train_args(out, 15, "3e-3")]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "cloze-two-tower" and config["architectures"] == ["TwoTowerForSequenceClassification"]
    dev = json.loads((out / "dev_results.json").read_text())
    assert dev["accuracy"] >= 90.0  # the head learns the polarity words of its training set
    assert spanbert_main(["predict", *glue, "--model", str(out), "--output_dir", str(sub)]) == 0
    lines = (sub / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and lines[1].startswith("9\t") and len(lines) == 33
    capsys.readouterr()
    assert spanbert_main(["evaluate", *glue, "--model", str(out), "--disable_tqdm"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == dev["accuracy"]


def test_glue_pair_regression_end_to_end(tiny_two_tower, tmp_path, capsys):
    data, out = tmp_path / "STS-B", tmp_path / "ft"
    data.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    rows = [(s, t, "4.000" if l == "1" else "1.000") for (s, l), (t, _) in zip(synthetic_sst(16), synthetic_sst(16, 1))]
    body = "".join(f"{i}\tg\tf\ty\t0\tn\tn\t{a}\t{b}\t{s}\n" for i, (a, b, s) in enumerate(rows))
    (data / "train.tsv").write_text(header + body)
    (data / "dev.tsv").write_text(header + body)
    glue = ["glue", "--task", "STS-B", "--data_dir", str(data)]
    assert spanbert_main(["finetune", *glue, "--model", str(tiny_two_tower), *_train_args(out, 1)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "regression"
    capsys.readouterr()
    assert spanbert_main(["evaluate", *glue, "--model", str(out), "--disable_tqdm"]) == 0
    assert set(json.loads(capsys.readouterr().out)) >= {"pearson", "spearman", "score"}


def _write_conll(path: Path, sentences) -> None:
    lines = ["-DOCSTART- -X- -X- O", ""]
    for words, tags in sentences:
        lines += [f"{w} NNP B-NP {t}" for w, t in zip(words, tags)] + [""]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("stacking", ["frozen", "finetune"])
def test_ner_end_to_end_from_a_two_tower_model(tiny_two_tower, tmp_path, capsys, stacking):
    from safetensors.torch import load_file

    train, out, pred = tmp_path / "train.txt", tmp_path / "ft", tmp_path / "pred.txt"
    sentences = synthetic_conll(24)
    _write_conll(train, sentences)
    argv = ["finetune", "ner", "--train_file", str(train), "--validation_file", str(train),
            "--model", str(tiny_two_tower),
            "--stacking", stacking, "--per_device_train_batch_size", "8", *_train_args(out, 8, "3e-3")]  # fmt: skip
    assert spanbert_main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["TwoTowerForCrfTagging"] and config["spanbert"]["stacking"] == stacking
    dev = json.loads((out / "dev_results.json").read_text())
    assert {"f1", "precision", "recall", "loss"} <= set(dev)
    tuned = load_file(str(out / "model.safetensors"))
    pretrained = load_file(str(tiny_two_tower / "model.safetensors"))
    changed = [k for k, v in pretrained.items() if not torch.equal(v, tuned["bert.lm." + k])]
    if stacking == "frozen":
        assert not changed
        # the layer mix includes the token embeddings: names from a short fixed list are easy
        assert dev["f1"] >= 90.0
    else:
        # an untrained combination module gives nearly the same output at every position (it is
        # pre-trained to predict token i without seeing it), so a random tiny LM cannot be asked for
        # a score here; it must have been trained, at its own rate
        assert len(changed) == len(pretrained)
    capsys.readouterr()
    assert spanbert_main(["predict", "ner", "--data", str(train), "--model", str(out), "--output", str(pred),
                          "--disable_tqdm"]) == 0  # fmt: skip
    lines = [l for l in pred.read_text().splitlines() if l]
    assert len(lines) == sum(len(w) for w, _ in sentences)
    capsys.readouterr()
    assert spanbert_main(["evaluate", "ner", "--data", str(train), "--model", str(out), "--disable_tqdm"]) == 0
    assert math.isclose(json.loads(capsys.readouterr().out)["f1"], dev["f1"])
