"""NER (`spanbert.tasks.ner`): a tiny model overfits through the CLI, seeds, unseen dev tags, predictions with and
without document context, HF loading. The CoNLL-2003 reader and features are tested in test_conll.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spanbert.cli import main as spanbert_main
from spanbert.tasks.conll import NerSentence, ner_features

CONLL = Path(__file__).parents[1] / "../shared/data/conll2003"

PEOPLE = [["John", "Smith"], ["Mary"], ["Ann", "Lee"], ["Peter", "Blackburn"]]
PLACES = [["Paris"], ["New", "York"], ["Berlin"], ["Tokyo"]]
ORGS = [["Acme", "Corp"], ["Reuters"], ["EU"]]
FILL = ["said", "in", "the", "on", "visited", "today", "met", "with", "."]


def synthetic_conll(n: int = 32, seed: int = 0) -> list[NerSentence]:
    """Sentences of filler words and entities from fixed lists, tagged in IOB2."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(2, 4)):
            kind = rng.choice(["PER", "LOC", "ORG", None, None])
            if kind is None:
                words.append(rng.choice(FILL))
                tags.append("O")
                continue
            name = rng.choice({"PER": PEOPLE, "LOC": PLACES, "ORG": ORGS}[kind])
            words += name
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(name) - 1)
            words.append(rng.choice(FILL))
            tags.append("O")
        sentences.append(NerSentence(words, tags, 0))
    return sentences


def write_conll(path: Path, sentences: list[NerSentence]) -> None:
    lines = ["-DOCSTART- -X- -X- O", ""]
    for s in sentences:
        lines += [f"{w} NNP B-NP {t}" for w, t in zip(s.words, s.tags)] + [""]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = [" ".join(s.words) for s in synthetic_conll(64)]
    tok = train_tokenizer(None, 120, texts=texts * 3, show_progress=False)
    torch.manual_seed(0)  # the initialisation draws from the global RNG
    # no dropout: the overfitting test should converge in few steps whatever the initialisation
    config = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=128, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)  # fmt: skip
    path = tmp_path_factory.mktemp("tiny_ner") / "pretrained"
    Encoder(config).save_pretrained(path, tokenizer=tok)
    return path


# ---------------------------------------------------------------------------------------------- training


def test_tiny_model_overfits_32_sentences_via_cli(tiny_model, tmp_path, capsys):
    data, out, pred = tmp_path / "train.txt", tmp_path / "ft", tmp_path / "pred.txt"
    write_conll(data, synthetic_conll(32))
    argv = ["finetune", "ner", "--model", str(tiny_model), "--train", str(data), "--dev", str(data)]
    argv += ["--evals_per_epoch", "10"]  # the paper's schedule, not lowered for this tiny run (issue 29)
    train = [
        "--output_dir", str(out), "--max_steps", "80", "--learning_rate", "1e-3", "--per_device_train_batch_size", "8",
        "--warmup_ratio", "0.1", "--logging_steps", "1000", "--save_steps", "0", "--report_to", "none",
        "--disable_tqdm", "--device", "cpu",
    ]  # fmt: skip
    assert spanbert_main(argv + train) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"] and config["id2label"]["0"] == "O"
    # the model kept is that of the best dev F1 of the logged evaluations (10 an epoch: here every step)
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/f1"] for r in rows if "eval/f1" in r}
    results = json.loads((out / "dev_results.json").read_text())
    assert len(evals) == 80 and results["selected_by"] == "f1"
    assert results["selected_step"] == min(s for s, v in evals.items() if v == max(evals.values()))
    assert results["f1"] == pytest.approx(evals[results["selected_step"]])
    assert spanbert_main(["predict", "ner", "--model", str(out), "--data", str(data), "--output", str(pred)]) == 0
    first = pred.read_text().splitlines()[0].split()
    assert len(first) == 3  # word gold predicted: conlleval's input
    capsys.readouterr()
    assert spanbert_main(["evaluate", "ner", "--data", str(data), "--predictions", str(pred)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["f1"] >= 95.0 and metrics["accuracy"] >= 95.0

    transformers = pytest.importorskip("transformers")
    import numpy as np
    import torch

    from spanbert.tasks import classification as C

    hf = transformers.BertForTokenClassification.from_pretrained(out).eval()
    model, _, tok = C.load_model("token", out)
    feats = ner_features(synthetic_conll(3), tok, None)
    with torch.no_grad():
        for f, ours in zip(feats, C.predict_logits(model, feats, tok.pad_id)):
            theirs = hf(input_ids=torch.as_tensor(f["input_ids"])[None]).logits[0].numpy()
            np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_seed_fixes_the_head_and_unseen_dev_tags_are_a_warning(tiny_model, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    data = tmp_path / "train.txt"
    write_conll(data, synthetic_conll(16))
    base = ["finetune", "ner", "--model", str(tiny_model), "--train", str(data)]
    common = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--save_steps", "0", "--report_to", "none",
              "--disable_tqdm", "--device", "cpu"]  # fmt: skip
    weights = []
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        torch.manual_seed(ord(name))  # the global RNG before the run must not matter
        assert spanbert_main(base + common + ["--output_dir", str(tmp_path / name), "--seed", seed]) == 0
        weights.append(load_file(str(tmp_path / name / "model.safetensors")))
    a, b, c = weights
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])
    # issue 23.1: a dev tag the training sentences never have is a warning (the model cannot predict it;
    # conlleval counts it as a miss), at fine-tuning and when a saved model scores a file
    dev = tmp_path / "dev.txt"
    dev.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-MISCX\n")
    capsys.readouterr()
    assert spanbert_main(base + common + ["--dev", str(dev), "--output_dir", str(tmp_path / "d")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {dev}:" in err and "'B-MISCX'" in err and "misses" in err
    assert (tmp_path / "d" / "dev_results.json").is_file()
    assert spanbert_main(["evaluate", "ner", "--data", str(dev), "--model", str(tmp_path / "d"), "--disable_tqdm"]) == 0
    assert "'B-MISCX'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- document context


def _doc(words_per_sentence: list[list[str]], document: int = 0) -> list[NerSentence]:
    return [NerSentence(w, ["O"] * len(w), 1, document) for w in words_per_sentence]


def test_predictions_change_with_neighbours_only_with_context(tiny_model, tmp_path):
    import numpy as np
    import torch

    from spanbert.tasks import classification as C
    from spanbert.tasks.ner import predict_ner
    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    labels = ["O", "B-LOC", "B-PER", "I-PER"]
    torch.manual_seed(1)
    model = C.build_model("token", tiny_model, len(labels))
    target = ["John", "Smith", "visited", "Paris"]
    docs = [_doc([["Acme", "Corp", "said"], target, ["Tokyo", "."]]), _doc([["Mary", "met", "EU"], target, ["Berlin"]])]
    logits = {}
    for flag in (True, False):
        out = tmp_path / f"ctx_{flag}"
        C.save_model(model, out, tok, "token", labels, {"task": "ner", "max_seq_length": 32, "document_context": flag})
        for d, doc in enumerate(docs):
            feats = ner_features(doc, tok, None, 32, document_context=flag)
            logits[flag, d] = C.predict_logits(model, feats, tok.pad_id)[1][feats[1]["first_token"]]
            assert predict_ner(out, doc, progress=False) == [
                [labels[i] for i in l[f["first_token"]].argmax(-1)]
                for f, l in zip(feats, C.predict_logits(model, feats, tok.pad_id))
            ]
    assert not np.allclose(logits[True, 0], logits[True, 1], atol=1e-4)
    np.testing.assert_allclose(logits[False, 0], logits[False, 1], atol=1e-6)
    # a model saved before the option (no "document_context" key) predicts sentence by sentence
    old = tmp_path / "old"
    C.save_model(model, old, tok, "token", labels, {"task": "ner", "max_seq_length": 32})
    assert predict_ner(old, docs[0], progress=False) == predict_ner(tmp_path / "ctx_False", docs[0], progress=False)


def test_finetune_saves_the_document_context_setting(tiny_model, tmp_path):
    data = tmp_path / "train.txt"
    write_conll(data, synthetic_conll(8))
    common = ["finetune", "ner", "--model", str(tiny_model), "--train", str(data), "--max_steps", "1",
              "--per_device_train_batch_size", "8", "--save_steps", "0", "--report_to", "none", "--disable_tqdm",
              "--device", "cpu"]  # fmt: skip
    for flag, expected in ((None, True), ("false", False)):
        out = tmp_path / f"run_{flag}"
        extra = [] if flag is None else ["--document_context", flag]
        assert spanbert_main(common + ["--output_dir", str(out)] + extra) == 0
        assert json.loads((out / "config.json").read_text())["spanbert"]["document_context"] is expected
