"""NER: CoNLL-2003 reader, first-sub-token features, long sentences, overfitting, CLI, HF loading."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spanbert.cli import main as spanbert_main
from spanbert.errors import DataError
from spanbert.metrics.classification import conll_chunks
from spanbert.tasks.ner import NerSentence, decode, label_list, ner_features, read_conll

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


# ---------------------------------------------------------------------------------------------- reader


@pytest.mark.realdata
@pytest.mark.parametrize(
    "split, sentences, entities", [("train", 14041, 23499), ("valid", 3250, 5942), ("test", 3453, 5648)]
)
def test_conll2003_counts_match_the_published_statistics(split, sentences, entities):
    path = CONLL / f"{split}.txt"
    if not path.exists():
        pytest.skip(f"{path} not present (CoNLL-2003 of ../shared/data)")
    data = read_conll(path)
    assert len(data) == sentences
    assert sum(len(conll_chunks(s.tags)) for s in data) == entities
    assert label_list(data) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]


def test_malformed_conll_names_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP X-PER\n")
    with pytest.raises(DataError, match=r"bad\.txt:4: found tag 'X-PER' .*; expected O or B-/I-/E-/S-TYPE"):
        read_conll(f)
    f.write_text("EU NNP B-NP B-ORG\nrejects\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: found 'rejects': one column"):
        read_conll(f)
    # words without tags are fine for prediction input, but not mixed with tagged ones
    f.write_text("EU\nrejects\n\nGerman\n")
    assert [s.words for s in read_conll(f, require_tags=False)] == [["EU", "rejects"], ["German"]]


# ---------------------------------------------------------------------------------------------- features


def test_only_first_sub_tokens_carry_labels_and_long_sentences_are_split(tiny_model):
    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    s = NerSentence(["Blackburnsmith", "visited", "Paris"], ["B-PER", "O", "B-LOC"], 1)
    label2id = {"O": 0, "B-PER": 1, "B-LOC": 2}
    (f,) = ner_features([s], tok, label2id)
    pieces = len(tok.encode_words(["Blackburnsmith"]).ids)
    assert pieces > 1
    assert f["labels"][0] == -100 and f["labels"][-1] == -100  # [CLS], [SEP]
    assert f["labels"][1] == 1 and list(f["labels"][2 : 1 + pieces]) == [-100] * (pieces - 1)
    assert list(f["first_token"]) == [1, 1 + pieces, 2 + pieces]
    # a sentence longer than max_seq_length is cut at word boundaries; every word gets a prediction
    long = NerSentence(["Paris"] * 40, ["B-LOC"] * 40, 1)
    feats = ner_features([long], tok, label2id, max_seq_length=16)
    assert all(len(x["input_ids"]) <= 16 for x in feats) and sum(len(x["first_token"]) for x in feats) == 40
    import numpy as np

    logits = [np.eye(3)[np.full(len(x["input_ids"]), 2)] for x in feats]  # every token says B-LOC
    assert decode([long], feats, logits, ["O", "B-PER", "B-LOC"]) == [["B-LOC"] * 40]


# ---------------------------------------------------------------------------------------------- training


def test_tiny_model_overfits_32_sentences_via_cli(tiny_model, tmp_path, capsys):
    data, out, pred = tmp_path / "train.txt", tmp_path / "ft", tmp_path / "pred.txt"
    write_conll(data, synthetic_conll(32))
    argv = ["finetune", "ner", "--model", str(tiny_model), "--train", str(data), "--dev", str(data)]
    train = [
        "--output_dir", str(out), "--max_steps", "80", "--learning_rate", "1e-3", "--per_device_train_batch_size", "8",
        "--warmup_ratio", "0.1", "--logging_steps", "1000", "--save_steps", "0", "--report_to", "none",
        "--disable_tqdm", "--device", "cpu",
    ]  # fmt: skip
    assert spanbert_main(argv + train) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"] and config["id2label"]["0"] == "O"
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


def test_seed_fixes_the_head_and_unseen_dev_tags_are_errors(tiny_model, tmp_path, cli_error):
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
    dev = tmp_path / "dev.txt"
    dev.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-MISCX\n")
    cli_error(base + common + ["--dev", str(dev), "--output_dir", str(tmp_path / "d")], names=f"{dev}:2",
              contains="'B-MISCX'", out=tmp_path)  # fmt: skip
