"""Relation extraction: TACRED reader and SemEval converter, entity markers, overfitting, CLI, HF loading."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from spanbert.cli import main as spanbert_main
from spanbert.errors import DataError
from spanbert.tasks.relation import (
    RelationExample,
    assign_marker_ids,
    marker_vocabulary,
    read_semeval,
    read_tacred,
    relation_features,
    write_tacred_json,
)

DATA = Path(__file__).parents[1] / "../shared/data"
TACRED = DATA / "tacred_sample"
SEMEVAL = DATA / "semeval2010_task8"

NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"]
CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo"]
ORGS = ["Acme", "Globex", "Initech", "Umbrella"]
TEMPLATES = [
    ("per:city_of_birth", "{s} was born in {o} .", "PERSON", "CITY"),
    ("per:employee_of", "{s} works for {o} now .", "PERSON", "ORGANIZATION"),
    ("per:cities_of_residence", "{s} lives in {o} today .", "PERSON", "CITY"),
    ("no_relation", "{s} visited {o} once .", "PERSON", "CITY"),
]


def synthetic_tacred(n: int = 32, seed: int = 0) -> list[dict]:
    """TACRED records whose relation is decided by the words between the two entities."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        relation, template, st, ot = TEMPLATES[i % len(TEMPLATES)]
        s, o = rng.choice(NAMES), rng.choice(ORGS if ot == "ORGANIZATION" else CITIES)
        tokens = template.format(s=s, o=o).split()
        si, oi = tokens.index(s), tokens.index(o)
        records.append(
            dict(id=f"r{i}", relation=relation, token=tokens, subj_start=si, subj_end=si, obj_start=oi, obj_end=oi,
                 subj_type=st, obj_type=ot)
        )  # fmt: skip
    return records


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A randomly initialised tiny encoder + a WordPiece vocabulary trained on the synthetic text."""
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = [" ".join(r["token"]) for r in synthetic_tacred(64)] + ["( ) [ ] { } -LRB- -RRB- mouse cat house"]
    tok = train_tokenizer(None, 150, texts=texts * 3, show_progress=False)
    torch.manual_seed(0)  # the initialisation draws from the global RNG
    # no dropout: the overfitting tests should converge in few steps whatever the initialisation
    encoder = Encoder(
        model_config(
            "tiny",
            vocab_size=tok.vocab_size,
            max_position_embeddings=128,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )
    path = tmp_path_factory.mktemp("tiny_relation") / "pretrained"
    encoder.save_pretrained(path, tokenizer=tok)
    return path


def _tok(path: Path):
    from spanbert.tokenization import Tokenizer

    return Tokenizer.from_dir(path)


# ---------------------------------------------------------------------------------------------- readers


@pytest.mark.realdata
def test_tacred_sample_counts():
    if not TACRED.exists():
        pytest.skip(f"{TACRED} not present (the TACRED-format sample of ../shared/data)")
    for split in ("train", "dev", "test"):
        examples = read_tacred(TACRED / f"{split}.json")
        assert len(examples) == 20  # SOURCE.md: 20/20/20
        assert all(ex.relation for ex in examples)
    assert Counter(ex.relation for ex in read_tacred(TACRED / "train.json"))["no_relation"] > 10


@pytest.mark.realdata
def test_semeval_converter_counts_match_the_release():
    if not SEMEVAL.exists():
        pytest.skip(f"{SEMEVAL} not present (SemEval-2010 Task 8 of ../shared/data)")
    train = read_semeval(SEMEVAL / "SemEval2010_task8_training/TRAIN_FILE.TXT")
    test = read_semeval(SEMEVAL / "SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT")
    clean = read_semeval(SEMEVAL / "SemEval2010_task8_testing_keys/TEST_FILE_CLEAN.TXT", require_labels=False)
    assert (len(train), len(test), len(clean)) == (8000, 2717, 2717)
    assert [ex.id for ex in test] == [str(i) for i in range(8001, 10718)]
    assert Counter(ex.relation for ex in train)["Other"] == 1410
    assert Counter(ex.relation for ex in test)["Other"] == 454
    assert len({ex.relation for ex in train}) == 19
    assert all(ex.relation is None for ex in clean)
    first = train[0]  # "... an arrayed <e1>configuration</e1> of antenna <e2>elements</e2>."
    assert first.tokens[first.subj_start] == "configuration" and first.tokens[first.obj_start] == "elements"
    assert first.relation == "Component-Whole(e2,e1)"


def test_semeval_multiword_entities_and_punctuation(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text('7\t"The <e1>red fox</e1> ran into the <e2>old barn\'s door</e2>."\r\nOther\r\nComment:\r\n\r\n')
    (ex,) = read_semeval(f)
    assert ex.tokens[ex.subj_start : ex.subj_end + 1] == ["red", "fox"]
    assert ex.tokens[ex.obj_start : ex.obj_end + 1] == ["old", "barn", "'", "s", "door"]
    assert ex.tokens[-1] == "." and ex.relation == "Other"


def test_semeval_converts_to_tacred_json_and_back(tmp_path):
    """The converter's output is a TACRED file: reading it back gives the same records."""
    f = tmp_path / "s.txt"
    f.write_text(
        '1\t"The <e1>red fox</e1> ran into the <e2>barn</e2>."\r\nEntity-Destination(e1,e2)\r\nComment:\r\n\r\n'
        '2\t"A <e1>letter</e1> from the <e2>king</e2>."\r\nOther\r\nComment:\r\n\r\n'
    )
    records = read_semeval(f)
    write_tacred_json(records, tmp_path / "semeval.json")
    assert read_tacred(tmp_path / "semeval.json") == records
    assert [r.relation for r in records] == ["Entity-Destination(e1,e2)", "Other"]


def test_malformed_tacred_names_file_and_line(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('[\n {"id": "a",\n  "token": ["x"]\n  "relation": "no_relation"}\n]')
    with pytest.raises(DataError, match=r"bad\.json:4: not valid JSON"):
        read_tacred(f)
    rec = synthetic_tacred(2)
    del rec[1]["subj_type"]
    f.write_text(json.dumps(rec))
    with pytest.raises(DataError, match=r"bad\.json \(record 1, id r1\): missing field 'subj_type'"):
        read_tacred(f)
    rec = synthetic_tacred(1)
    rec[0]["obj_end"] = 99
    f.write_text(json.dumps(rec))
    with pytest.raises(DataError, match=r"obj span \[\d+, 99\] is not inside"):
        read_tacred(f)


def test_malformed_semeval_names_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text('1\t"A <e1>cat</e1> in a <e2>hat</e2>."\nContent-Container(e1,e3)\nComment:\n\n')
    with pytest.raises(DataError, match=r"bad\.txt:2: found relation label 'Content-Container\(e1,e3\)'"):
        read_semeval(f)
    f.write_text('1\t"A <e1>cat</e1> in a hat."\nOther\nComment:\n\n')
    with pytest.raises(DataError, match=r"bad\.txt:1: expected exactly one <e1>"):
        read_semeval(f)
    f.write_text("1 A cat in a hat\nOther\n")
    with pytest.raises(DataError, match=r"bad\.txt:1: expected 'ID<TAB>\"sentence\"'"):
        read_semeval(f)


# ---------------------------------------------------------------------------------------------- features


def _example(**kw) -> RelationExample:
    base = dict(id="x", tokens="-LRB- Bob Smith -RRB- was born in Paris .".split(), subj_start=1, subj_end=2,
                obj_start=7, obj_end=7, subj_type="PERSON", obj_type="CITY", relation="per:city_of_birth")  # fmt: skip
    return RelationExample(**{**base, **kw})


def test_entity_masking_replaces_each_entity_by_one_marker(tiny_model):
    tok, markers = assign_marker_ids(_tok(tiny_model), marker_vocabulary({"PERSON", "CITY"}, "mask"))
    (f,), cut = relation_features([_example()], tok, markers, "mask", None)
    tokens = tok.convert_ids_to_tokens(f["input_ids"])
    assert cut == 0
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert tokens[1:4] == ["(", "[SUBJ-PERSON]", ")"]  # PTB brackets restored, two words -> one marker
    assert "[OBJ-CITY]" in tokens and "Paris" not in tokens and "Bob" not in tokens


def test_entity_marking_keeps_words_between_markers(tiny_model):
    tok, markers = assign_marker_ids(_tok(tiny_model), marker_vocabulary({"PERSON", "CITY"}, "mark"))
    (f,), _ = relation_features([_example()], tok, markers, "mark", None)
    text = " ".join(tok.convert_ids_to_tokens(f["input_ids"]))
    assert "[SUBJ-PERSON] Bob" in text and "[/SUBJ-PERSON] )" in text
    assert "[OBJ-CITY] Paris [/OBJ-CITY]" in text


def test_marker_vocabulary_is_deterministic_and_prefers_unused_slots(tiny_model):
    markers = marker_vocabulary(["PERSON", "CITY"], "mask")
    assert markers == marker_vocabulary({"CITY", "PERSON"}, "mask")
    assert markers == ["[SUBJ-CITY]", "[SUBJ-PERSON]", "[OBJ-CITY]", "[OBJ-PERSON]"]
    tok = _tok(tiny_model)
    extended, ids = assign_marker_ids(tok, markers)
    assert sorted(ids.values()) == list(range(tok.vocab_size, tok.vocab_size + 4))
    assert tok.token_to_id("[SUBJ-CITY]") is None  # the caller's tokenizer is left alone
    assert extended.encode("[SUBJ-CITY] x").ids[0] == ids["[SUBJ-CITY]"]
    # a BERT-style vocabulary with [unusedN] entries: markers take those slots, the vocabulary stays
    from spanbert.tokenization import Tokenizer

    vocab = tmp_vocab = tiny_model.parent / "bert_vocab.txt"
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 6)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    tmp_vocab.write_text("\n".join(words) + "\n")
    bert = Tokenizer.from_dir(vocab)
    same, ids = assign_marker_ids(bert, markers)
    assert same.vocab_size == bert.vocab_size and list(ids.values()) == [1, 2, 3, 4]


def test_unknown_entity_type_names_the_record(tiny_model):
    tok, markers = assign_marker_ids(_tok(tiny_model), marker_vocabulary({"PERSON", "CITY"}, "mask"))
    with pytest.raises(DataError, match=r"record 0, id x.*OBJ-RELIGION\] has no marker"):
        relation_features([_example(obj_type="RELIGION")], tok, markers, "mask", None, source="f.json")


# ---------------------------------------------------------------------------------------------- training


def _train_args(out: Path) -> list[str]:
    return [
        "--output_dir", str(out), "--max_steps", "60", "--learning_rate", "1e-3",
        "--per_device_train_batch_size", "8", "--warmup_ratio", "0.1", "--logging_steps", "1000",
        "--save_steps", "0", "--report_to", "none", "--disable_tqdm", "--device", "cpu",
    ]  # fmt: skip


def test_tiny_model_overfits_32_tacred_examples_via_cli(tiny_model, tmp_path, capsys):
    data = tmp_path / "train.json"
    data.write_text(json.dumps(synthetic_tacred(32)))
    out = tmp_path / "ft"
    argv = ["finetune", "tacred", "--model", str(tiny_model), "--train", str(data), "--dev", str(data)]
    assert spanbert_main(argv + _train_args(out)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"]["0"] == "no_relation" and config["num_labels"] == 4
    markers = config["spanbert"]["entity_markers"]
    assert markers["[SUBJ-PERSON]"] != markers["[OBJ-PERSON]"]
    # predict with the saved model, then score the prediction file
    pred = tmp_path / "pred.txt"
    assert spanbert_main(["predict", "tacred", "--model", str(out), "--data", str(data), "--output", str(pred)]) == 0
    labels = pred.read_text().split()
    gold = [r["relation"] for r in synthetic_tacred(32)]
    assert sum(p == g for p, g in zip(labels, gold)) / len(gold) >= 0.95
    capsys.readouterr()
    assert spanbert_main(["evaluate", "tacred", "--data", str(data), "--predictions", str(pred)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["f1"] >= 95.0 and metrics["examples"] == 32

    # the saved folder loads in transformers and gives the same logits
    transformers = pytest.importorskip("transformers")
    import numpy as np
    import torch

    from spanbert.tasks import classification as C

    hf = transformers.BertForSequenceClassification.from_pretrained(out).eval()
    model, cfg, tok = C.load_model("sequence", out)
    features, _ = relation_features(read_tacred(data)[:4], tok, markers, "mask", None)
    ours = np.stack(C.predict_logits(model, features, tok.pad_id))
    with torch.no_grad():
        theirs = np.stack([hf(input_ids=torch.as_tensor(f["input_ids"])[None]).logits[0].numpy() for f in features])
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_semeval_finetune_and_official_score_via_cli(tiny_model, tmp_path, capsys):
    lines = []
    for i, r in enumerate(synthetic_tacred(32)):
        words = list(r["token"])
        words[r["subj_start"]] = f"<e1>{words[r['subj_start']]}</e1>"
        words[r["obj_start"]] = f"<e2>{words[r['obj_start']]}</e2>"
        label = {"no_relation": "Other", "per:city_of_birth": "Entity-Origin(e1,e2)",
                 "per:employee_of": "Member-Collection(e1,e2)", "per:cities_of_residence": "Content-Container(e2,e1)"}[r["relation"]]  # fmt: skip
        lines += [f'{i + 1}\t"{" ".join(words)}"', label, "Comment:", ""]
    data = tmp_path / "TRAIN.TXT"
    data.write_text("\r\n".join(lines) + "\r\n")
    out = tmp_path / "ft"
    argv = ["finetune", "semeval", "--model", str(tiny_model), "--train", str(data), "--dev", str(data)]
    assert spanbert_main(argv + _train_args(out)) == 0
    assert json.loads((out / "config.json").read_text())["spanbert"]["entity_mode"] == "mark"
    pred = (out / "dev_predictions.txt").read_text().splitlines()
    assert pred[0].split("\t")[0] == "1" and len(pred) == 32  # the official scorer's "ID<TAB>label" lines
    capsys.readouterr()
    assert (
        spanbert_main(["evaluate", "semeval", "--data", str(data), "--predictions", str(out / "dev_predictions.txt")])
        == 0
    )
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["accuracy"] >= 95.0 and metrics["macro_f1"] >= 90.0


def test_seed_fixes_the_head_and_unseen_dev_labels_are_a_warning(tiny_model, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    data = tmp_path / "train.json"
    data.write_text(json.dumps(synthetic_tacred(16)))
    base = ["finetune", "tacred", "--model", str(tiny_model), "--train", str(data)]
    weights = []
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        torch.manual_seed(len(name) * 99 + ord(name))  # the global RNG before the run must not matter
        args = _train_args(tmp_path / name)
        args[args.index("--max_steps") + 1] = "1"
        assert spanbert_main(base + args + ["--seed", seed]) == 0
        weights.append(load_file(str(tmp_path / name / "model.safetensors")))
    a, b, c = weights
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])
    # a dev relation the training examples never have is reported (issue 23.1: a warning, not an error: the
    # model cannot predict it and the official scorer counts it as a miss)
    dev = synthetic_tacred(4)
    dev[2]["relation"] = "org:founded_by"
    dev_file = tmp_path / "dev.json"
    dev_file.write_text(json.dumps(dev))
    out = tmp_path / "d"
    capsys.readouterr()
    assert spanbert_main(base + ["--dev", str(dev_file)] + _train_args(out)) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and str(dev_file) in err and "'org:founded_by'" in err and "misses" in err
    assert (out / "dev_results.json").is_file()


def test_tacred_without_positive_predictions_keeps_the_official_precision_and_says_so():
    from spanbert.tasks.relation import score

    m = score("tacred", ["per:title", "no_relation"], ["no_relation", "no_relation"])
    assert m["precision"] == 100.0 and m["recall"] == 0.0 and m["f1"] == 0.0  # scorer.py: prec_micro = 1.0
    assert "prec_micro = 1.0" in m["note"]
    m = score("tacred", ["per:title", "no_relation"], ["per:title", "no_relation"])
    assert m["f1"] == 100.0 and "note" not in m


# ---------------------------------------------------------------------------------------------- model selection


def _dev_evaluations(out: Path, metric: str) -> dict[int, float]:
    """step -> dev ``metric`` of every evaluation the run logged (log.jsonl)."""
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r[f"eval/{metric}"] for r in rows if f"eval/{metric}" in r}


def first_best_step(evals: dict[int, float]) -> int:
    """The step of the highest score, the earliest of equal ones (the released scripts keep a new best
    only when it is strictly better)."""
    return min(s for s, v in evals.items() if v == max(evals.values()))


def test_tacred_keeps_the_model_of_the_best_dev_evaluation(tiny_model, tmp_path, capsys):
    """10 evaluations an epoch by default; the model saved, its dev predictions and dev_results.json
    are those of the best logged evaluation, whose step is reported."""
    import torch
    from safetensors.torch import load_file

    data = tmp_path / "train.json"
    data.write_text(json.dumps(synthetic_tacred(32)))
    out = tmp_path / "ft"
    argv = ["finetune", "tacred", "--model", str(tiny_model), "--train", str(data), "--dev", str(data)]
    argv += ["--evals_per_epoch", "10"]  # the paper's schedule, not lowered for this tiny run (issue 29)
    train = _train_args(out)
    train[train.index("--max_steps") + 1] = "12"  # 4 steps an epoch: evaluations at every step
    train[train.index("--save_steps") + 1] = "5"
    capsys.readouterr()
    assert spanbert_main(argv + train) == 0
    printed = capsys.readouterr().out
    evals = _dev_evaluations(out, "f1")
    assert sorted(evals) == list(range(1, 13))
    best = first_best_step(evals)
    results = json.loads((out / "dev_results.json").read_text())
    assert results["selected_step"] == best and results["selected_by"] == "f1"
    assert results["f1"] == pytest.approx(evals[best])
    assert f"the saved model is that of step {best}" in printed
    # the saved model is the selected one, and the dev predictions written are that model's
    saved = load_file(str(out / "model.safetensors"))
    kept = torch.load(out / "best" / "state.pt", weights_only=True)
    assert all(torch.equal(saved[k], kept[k]) for k in saved)
    pred = tmp_path / "pred.txt"
    assert spanbert_main(["predict", "tacred", "--model", str(out), "--data", str(data), "--output", str(pred)]) == 0
    assert pred.read_text() == (out / "dev_predictions.txt").read_text()
    # bounded disk: the best weights and the newest resumable checkpoint only
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-12"]


def test_without_a_metric_the_last_model_is_kept(tiny_model, tmp_path):
    data = tmp_path / "train.json"
    data.write_text(json.dumps(synthetic_tacred(32)))
    out = tmp_path / "ft"
    argv = ["finetune", "tacred", "--model", str(tiny_model), "--train", str(data), "--dev", str(data),
            "--metric_for_best_model", "", "--evals_per_epoch", "0"]  # fmt: skip
    train = _train_args(out)
    train[train.index("--max_steps") + 1] = "4"
    assert spanbert_main(argv + train) == 0
    assert sorted(_dev_evaluations(out, "f1")) == [4]
    assert "selected_step" not in json.loads((out / "dev_results.json").read_text())
    assert not (out / "best").exists()
