"""SWAG (BERT §4.4): reader, head parity with HF BertForMultipleChoice, CLI overfit, predict/evaluate,
malformed inputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from spanbert.cli import main
from spanbert.config import model_config
from spanbert.errors import DataError
from spanbert.model import Encoder
from spanbert.tasks.swag import (
    ChoiceCollator,
    MultipleChoice,
    read_predictions,
    read_swag,
    swag_features,
    write_predictions,
)

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]  # fmt: skip
WORDS = "a man woman dog child walks runs sits into the park house street then slowly quickly".split()
METALS = ("gold", "lead", "iron", "tin")


def rows(n: int, seed: int = 0, label: bool = True) -> list[list[str]]:
    """n examples in the released layout: the right ending says "gold", the others a base metal."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        pick = lambda k: " ".join(WORDS[j] for j in torch.randint(len(WORDS), (k,), generator=g).tolist())  # noqa: E731
        sent1, sent2 = pick(6).capitalize() + ".", pick(2).capitalize()
        right = int(torch.randint(4, (1,), generator=g))
        wrong = iter(METALS[1:])
        endings = [f"{pick(2)} {'gold' if k == right else next(wrong)} ." for k in range(4)]
        row = [str(i), f"lsmdc{i // 3}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
        out.append(row + [str(right)] if label else row)
    return out


def write_csv(path: Path, body: list[list[str]], header: list[str] = HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(body)
    return path


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from spanbert.tokenization import train_tokenizer

    texts = [" ".join(r[4:11]) for r in rows(64)] * 4
    return train_tokenizer(None, vocab_size=120, texts=texts, show_progress=False)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, tok):
    """A tiny random encoder saved in the Google / SpanBERT release layout (bert_config.json)."""
    d = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False).save_pretrained(d, tokenizer=tok)
    (d / "config.json").rename(d / "bert_config.json")
    return d


# ---------------------------------------------------------------------------------------------
# reader and features


def test_reader_reads_the_released_layout(tmp_path):
    body = rows(3)
    body[1][7] = 'says "hello, there"\nand leaves'  # quotes, a comma and a line break inside a field
    path = write_csv(tmp_path / "val.csv", body)
    ex = read_swag(path)
    assert [e.label for e in ex] == [int(r[-1]) for r in body]
    assert ex[1].endings[0] == 'says "hello, there"\nand leaves' and ex[1].context == body[1][4]
    assert ex[1].start == body[1][5] and ex[2].video_id == body[2][1] and ex[2].fold_ind == "2"
    assert [e.line for e in ex] == [2, 3, 5]  # the record after a two-line field starts on line 5
    # the test file: no label column, columns found by name (no leading index column here)
    test = write_csv(tmp_path / "test.csv", [r[1:] for r in rows(2, label=False)], HEADER[1:-1])
    assert [e.label for e in read_swag(test)] == [None, None]
    with pytest.raises(DataError, match=r"test.csv:1: found no label column"):
        read_swag(test, labelled=True)


@pytest.mark.parametrize(
    "edit, line, message",
    [
        (lambda b, h: (b, h[:8] + h[9:]), 1, r"missing \['ending1'\]"),
        (lambda b, h: (b[:1] + [b[1][:-1]] + b[2:], h), 3, "found 11 fields, expected 12"),
        (lambda b, h: (b[:1] + [b[1][:-1] + ["4"]], h), 3, "found label '4', expected 0, 1, 2 or 3"),
        (lambda b, h: (b[:1] + [b[1][:-1] + [""]], h), 3, "found label '', expected 0, 1, 2 or 3"),
        (lambda b, h: ([b[0][:9] + [" "] + b[0][10:]] + b[1:], h), 2, "found an empty ending2, expected text"),
    ],
)
def test_reader_bad_rows(tmp_path, edit, line, message):
    body, header = edit(rows(2), list(HEADER))
    path = write_csv(tmp_path / "train.csv", body, header)
    with pytest.raises(DataError, match=rf"train.csv:{line}: .*{message}"):
        read_swag(path, labelled=True)


def test_features_are_context_then_start_plus_ending(tok):
    ex = read_swag(write_csv(Path(__import__("tempfile").mkdtemp()) / "v.csv", rows(2)))
    f = swag_features(ex, tok, max_seq_length=64)
    ctx = tok.encode(ex[0].context).ids.tolist()
    for k in range(4):
        ending = tok.encode(f"{ex[0].start} {ex[0].endings[k]}").ids.tolist()
        assert f[0]["input_ids"][k].tolist() == [tok.cls_id, *ctx, tok.sep_id, *ending, tok.sep_id]
        assert f[0]["token_type_ids"][k].tolist() == [0] * (len(ctx) + 2) + [1] * (len(ending) + 1)
    assert f[0]["labels"] == ex[0].label
    short = swag_features(ex, tok, max_seq_length=12)
    assert all(len(x) == 12 for x in short[0]["input_ids"])


# ---------------------------------------------------------------------------------------------
# head parity with transformers


def test_head_parity_with_bert_for_multiple_choice(tmp_path, tok):
    transformers = pytest.importorskip("transformers")
    cfg = model_config("tiny", vocab_size=tok.vocab_size)
    torch.manual_seed(0)
    hf = transformers.BertForMultipleChoice(transformers.BertConfig(**cfg.to_hf_dict())).eval()
    ours = MultipleChoice(Encoder(cfg))
    ours.load_state_dict(hf.state_dict(), strict=True)  # the same parameter names, nothing left over
    ours.eval()
    ex = read_swag(write_csv(tmp_path / "v.csv", rows(5)))
    batch = ChoiceCollator(tok.pad_id)(swag_features(ex, tok, 64))
    assert batch["input_ids"].shape[:2] == (5, 4) and "attention_mask" in batch  # choices differ in length
    with torch.no_grad():
        ref = hf(**batch)
        out = ours(**batch)
    assert out["logits"].shape == (5, 4)
    assert (out["logits"] - ref.logits).abs().max() <= 1e-4
    assert abs(float(out["loss"]) - float(ref.loss)) <= 1e-4
    # and a model saved by spanbert loads in transformers with no missing or unexpected weights
    from spanbert.tasks.task_folders import save_finetuned

    save_finetuned(ours, tmp_path / "saved", tok, "BertForMultipleChoice", {"spanbert": {"task": "swag"}})
    back, info = transformers.BertForMultipleChoice.from_pretrained(tmp_path / "saved", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        assert (back.eval()(**batch).logits - out["logits"]).abs().max() <= 1e-4


# ---------------------------------------------------------------------------------------------
# CLI: overfit, predict, evaluate


def test_cli_overfits_32_examples_and_round_trips(tmp_path, base_model, capsys):
    train = write_csv(tmp_path / "train.csv", rows(32, seed=1))
    out = tmp_path / "run"
    rc = main(["finetune", "swag", "--model", str(base_model), "--train_file", str(train),
               "--validation_file", str(train), "--output_dir", str(out), "--learning_rate", "1e-3",
               "--num_train_epochs", "25", "--per_device_train_batch_size", "8", "--evals_per_epoch", "1",
               "--warmup_ratio", "0", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0"])  # fmt: skip
    assert rc == 0
    results = json.loads((out / "dev_results.json").read_text())
    assert results["accuracy"] >= 90.0 and results["examples"] == 32  # chance is 25
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForMultipleChoice"] and config["spanbert"]["task"] == "swag"
    # predict on the test layout (no label), then evaluate the written file and the model
    test = write_csv(tmp_path / "test.csv", [r[:-1] for r in rows(32, seed=1)], HEADER[:-1])
    capsys.readouterr()
    assert main(["predict", "swag", "--model", str(out), "--data", str(test), "--output", str(tmp_path / "p.csv"),
                 "--device", "cpu", "--disable_tqdm"]) == 0  # fmt: skip
    examples = read_swag(train)
    pred = read_predictions(tmp_path / "p.csv", examples)
    dev_pred = read_predictions(out / "dev_predictions.csv", examples)
    assert pred == dev_pred  # the saved model is the one that made the dev predictions
    capsys.readouterr()
    assert main(["evaluate", "swag", "--data", str(train), "--predictions", str(tmp_path / "p.csv")]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "swag", "--data", str(train), "--model", str(out), "--device", "cpu", "--disable_tqdm"]) == 0
    by_model = json.loads(capsys.readouterr().out)
    assert by_file == by_model and by_file["accuracy"] == pytest.approx(results["accuracy"])


def test_predictions_file_round_trip_and_checks(tmp_path):
    ex = read_swag(write_csv(tmp_path / "v.csv", rows(3)))
    write_predictions(tmp_path / "p.csv", ex, [0, 3, 1])
    assert read_predictions(tmp_path / "p.csv", ex) == [0, 3, 1]
    # rows are matched by (video-id, fold-ind): another order gives each example its own label
    assert read_predictions(tmp_path / "p.csv", ex[1:] + ex[:1]) == [3, 1, 0]
    with pytest.raises(DataError, match=r"p.csv:4: found 1 row\(s\) of no example of the data file"):
        read_predictions(tmp_path / "p.csv", ex[:2])
    write_predictions(tmp_path / "q.csv", ex[:2], [0, 3])
    with pytest.raises(DataError, match=r"q.csv: found no row for example .* \(line 4 of the data file\)"):
        read_predictions(tmp_path / "q.csv", ex)


# ---------------------------------------------------------------------------------------------
# malformed inputs: the clean-error contract (exit 2, file:line, nothing written)


def _finetune(model: Path, train: Path, out: Path) -> list:
    return ["finetune", "swag", "--model", model, "--train_file", train, "--output_dir", out, "--max_steps", "1",
            "--disable_tqdm", "true", "--report_to", "none"]  # fmt: skip


@pytest.mark.parametrize(
    "name, make, line, contains",
    [
        ("no-label-column", lambda p: write_csv(p, [r[:-1] for r in rows(2)], HEADER[:-1]), 1, "found no label column"),
        ("missing-column", lambda p: write_csv(p, [r[:5] + r[6:] for r in rows(2)], HEADER[:5] + HEADER[6:]), 1, "missing ['sent2']"),
        ("short-row", lambda p: write_csv(p, [rows(2)[0], rows(2)[1][:10]]), 3, "found 10 fields, expected 12"),
        ("bad-label", lambda p: write_csv(p, [rows(2)[0][:-1] + ["B"]]), 2, "found label 'B'"),
        ("unterminated-quote", lambda p: p.write_text(",".join(HEADER) + '\n0,v,0,s,s,"unterminated,g,a,b,c,d,0\n'), 2, "malformed CSV"),
        ("not-utf8", lambda p: p.write_bytes(",".join(HEADER).encode() + b"\n0,v,0,caf\xe9,s,s,g,a,b,c,d,0\n"), None, "not UTF-8"),
        ("empty", lambda p: p.write_text("\n\n"), None, "found no rows"),
    ],
)  # fmt: skip
def test_malformed_swag_input(tmp_path, base_model, cli_error, name, make, line, contains):
    train = tmp_path / "train.csv"
    make(train)
    out = tmp_path / "out"
    where = f"{train}:{line}" if line else str(train)
    cli_error(_finetune(base_model, train, out), names=where, contains=contains, out=tmp_path)
    assert not out.exists()


def test_malformed_swag_predictions(tmp_path, cli_error):
    data = write_csv(tmp_path / "val.csv", rows(2))
    p = tmp_path / "p.csv"
    p.write_text("video-id,fold-ind,label\nlsmdc0,0,7\nlsmdc0,1,0\n")
    cli_error(["evaluate", "swag", "--data", data, "--predictions", p], names=f"{p}:2", contains="label in 0-3")
    p.write_text("id,label\n")
    cli_error(["evaluate", "swag", "--data", data, "--predictions", p], names=f"{p}:1", contains="expected video-id,fold-ind,label")
    cli_error(["predict", "swag", "--model", tmp_path, "--data", data, "--output", tmp_path / "o.csv"],
              names=tmp_path, out=tmp_path)  # not a model folder  # fmt: skip
