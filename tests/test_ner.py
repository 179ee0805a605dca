"""NER: CoNLL-2003 reader, first-sub-token features, long sentences, overfitting, CLI, HF loading."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spanbert.cli import main as spanbert_main
from spanbert.errors import DataError
from spanbert.metrics.classification import conll_chunks
from spanbert.tasks.conll import NerSentence, decode, label_list, ner_features, read_conll

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


def test_documents_are_counted_at_docstart_lines(tmp_path):
    f = tmp_path / "docs.txt"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n\nsaid VBD B-VP O\n\n-DOCSTART- -X- -X- O\n\n"
                 "Paris NNP B-NP B-LOC\n")  # fmt: skip
    assert [s.document for s in read_conll(f)] == [0, 0, 1]
    f.write_text("EU NNP B-NP B-ORG\n\nsaid VBD B-VP O\n")  # no -DOCSTART-: one document
    assert [s.document for s in read_conll(f)] == [0, 0]


def _doc(words_per_sentence: list[list[str]], document: int = 0) -> list[NerSentence]:
    return [NerSentence(w, ["O"] * len(w), 1, document) for w in words_per_sentence]


def test_document_context_labels_only_the_sentences_own_words(tiny_model):
    import numpy as np

    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    label2id = {"O": 0, "B-PER": 1}
    doc = _doc([["said", "in", "the", "Paris"], ["John", "Smith", "visited"], ["Berlin", "today", "."]])
    doc[1].tags = ["B-PER", "O", "O"]
    alone = ner_features(doc, tok, label2id, max_seq_length=64)
    ctx = ner_features(doc, tok, label2id, max_seq_length=64, document_context=True)
    stream = [t for s in doc for t in tok.encode_words(s.words).ids.tolist()]
    for a, c in zip(alone, ctx):
        # the same labels, in the same order, on the sentence's own first sub-tokens only
        own = c["labels"] != -100
        assert list(np.flatnonzero(own)) == list(c["first_token"])
        assert list(c["labels"][own]) == list(a["labels"][a["labels"] != -100])
        # [CLS] + a window of the document's tokens + [SEP], the sentence's tokens inside it
        inner = c["input_ids"][1:-1].tolist()
        assert c["input_ids"][0] == tok.cls_id and c["input_ids"][-1] == tok.sep_id
        assert any(stream[i : i + len(inner)] == inner for i in range(len(stream) - len(inner) + 1))
        assert inner[c["first_token"][0] - 1 :][: len(a["input_ids"]) - 2] == a["input_ids"][1:-1].tolist()
    # the whole document fits: every sentence sees all of it (edges: the first has no left context)
    assert all(len(c["input_ids"]) == len(stream) + 2 for c in ctx)
    assert ctx[0]["first_token"][0] == 1 and ctx[-1]["first_token"][-1] < len(stream) + 1
    # a short window is centred: as many tokens before as after (sentence 1 is mid-document)
    (mid,) = ner_features(doc[:3], tok, label2id, max_seq_length=12, document_context=True)[1:2]
    n_own = len(alone[1]["input_ids"]) - 2
    left = int(mid["first_token"][0]) - 1
    right = len(mid["input_ids"]) - 2 - n_own - left
    assert len(mid["input_ids"]) == 12 and abs(left - right) <= 1
    # at a document edge the room goes to the open side
    (first,) = ner_features(doc, tok, label2id, max_seq_length=12, document_context=True)[:1]
    assert first["first_token"][0] == 1 and len(first["input_ids"]) == 12


def test_document_context_stays_inside_the_document(tiny_model):
    from spanbert.tokenization import Tokenizer

    tok = Tokenizer.from_dir(tiny_model)
    one = _doc([["John", "Smith"]], document=0) + _doc([["Berlin", "today"]], document=1)
    feats = ner_features(one, tok, {"O": 0}, max_seq_length=64, document_context=True)
    alone = ner_features(one, tok, {"O": 0}, max_seq_length=64)
    # a document of one sentence has no context: the same input as without the option
    for c, a in zip(feats, alone):
        assert c["input_ids"].tolist() == a["input_ids"].tolist()


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
