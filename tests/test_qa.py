"""Extractive QA (`spanbert.tasks.qa`) end to end: a tiny model learns 32 questions through the CLI (finetune ->
predict -> evaluate), raw text answered from the CLI and from Python as transformers' pipeline answers, the SQuAD
2.0 threshold chosen on dev, the commands' errors, the Appendix B sweep: the tests of
spanbert/tasks/qa/finetune.py and spanbert/tasks/qa/command.py.

The other modules' tests are in test_qa_<module>.py (data, features, decoding, model); the synthetic SQuAD data
and the tokenizer they share are here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from spanbert.cli import main
from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.tasks import qa
from spanbert.tokenization import train_tokenizer

SHARED = Path(__file__).parents[1] / "../shared/data"

NAMES = ["Alice", "Bruno", "Chiara", "Dmitri", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Jun", "Kofi", "Lena"]
CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Quito", "Hanoi", "Accra", "Bern", "Cairo", "Dakar", "Kyiv"]
THINGS = ["violin", "bicycle", "lantern", "teapot", "compass", "kayak", "piano", "telescope"]


def synthetic_squad(n_articles: int = 8, seed: int = 0, unanswerable: bool = False) -> dict:
    """n_articles x 2 paragraphs x 2 questions (+1 unanswerable per paragraph with ``unanswerable``)."""
    rng = random.Random(seed)
    data = []
    for a in range(n_articles):
        paragraphs = []
        for p in range(2):
            x, y, z = rng.sample(NAMES, 3)
            c1, c2 = rng.sample(CITIES, 2)
            thing, year = rng.choice(THINGS), rng.randint(1900, 2020)
            ctx = (
                f"{x} was born in {c1} in {year}. Later {x} moved to {c2} with {y}. "
                f"{y} plays the {thing} every evening, and {z} repairs old clocks in {c1}."
            )
            qas = []
            for k, (question, ans) in enumerate(
                [(f"Where was {x} born?", c1), (f"What does {y} play?", f"the {thing}")]
            ):
                qas.append(
                    {
                        "id": f"q{a}-{p}-{k}",
                        "question": question,
                        "answers": [{"text": ans, "answer_start": ctx.index(ans)}],
                    }
                )
                if unanswerable:
                    qas[-1]["is_impossible"] = False
            if unanswerable:
                qas.append(
                    {"id": f"q{a}-{p}-n", "question": f"What does {z} sell?", "answers": [], "is_impossible": True}
                )
            paragraphs.append({"context": ctx, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    return {"version": "v2.0" if unanswerable else "1.1", "data": data}


def _texts(d: dict) -> list[str]:
    out = []
    for a in d["data"]:
        for p in a["paragraphs"]:
            out.append(p["context"])
            out += [q["question"] for q in p["qas"]]
    return out


@pytest.fixture(scope="module")
def tok():
    extra = ["Café  naïve résumé — Zürich’s e\u0301te\u0301 1990s 24–10 co-operate", "Knoxville, Tennessee"]
    return train_tokenizer(
        None, 300, texts=(_texts(synthetic_squad()) + extra) * 3, show_progress=False, min_frequency=1
    )


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# the whole pipeline learns (CLI: finetune -> predict -> evaluate)


def _pretrained(tok, path: Path) -> Path:
    from spanbert.model import Encoder

    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False).save_pretrained(
        path, tokenizer=tok
    )
    return path


def test_tiny_model_learns_32_questions_cli_round_trip(tok, tmp_path: Path, capsys) -> None:
    train = _write(tmp_path / "train.json", synthetic_squad(8))
    enc = _pretrained(tok, tmp_path / "enc")
    out = tmp_path / "ft"
    common = ["--report_to", "none", "--disable_tqdm", "--device", "cpu"]
    rc = main(["finetune", "squad", "--model", str(enc), "--train_file", str(train), "--output_dir", str(out),
               "--max_seq_length", "32", "--doc_stride", "8", "--max_steps", "250", "--learning_rate", "1e-3",
               "--per_device_train_batch_size", "8", "--warmup_ratio", "0.05", "--logging_steps", "250", *common])  # fmt: skip
    assert rc == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"]
    assert config["spanbert"]["max_seq_length"] == 32 and config["spanbert"]["doc_stride"] == 8
    preds = tmp_path / "p" / "predictions.json"
    assert (
        main(["predict", "squad", "--model", str(out), "--data", str(train), "--output", str(preds), "--device", "cpu"])
        == 0
    )
    assert len(json.loads(preds.read_text())) == 32
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(train), "--predictions", str(preds)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert list(metrics) == ["exact_match", "f1"]
    assert metrics["f1"] >= 90.0, metrics
    # the saved model is a HF BertForQuestionAnswering
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertForQuestionAnswering.from_pretrained(out)
    assert hf.qa_outputs.weight.shape == (2, 64)


@pytest.fixture(scope="module")
def squad_model(tok, tmp_path_factory) -> tuple[Path, dict, Path]:
    """(a tiny QA model fine-tuned on 32 synthetic questions, their SQuAD dict, its file)."""
    tmp = tmp_path_factory.mktemp("squad_model")
    d = synthetic_squad(8)
    train = _write(tmp / "train.json", d)
    out = tmp / "ft"
    assert main(["finetune", "squad", "--model", str(_pretrained(tok, tmp / "enc")), "--train_file", str(train),
                 "--output_dir", str(out), "--max_seq_length", "32", "--doc_stride", "8", "--max_steps", "250",
                 "--learning_rate", "1e-3", "--per_device_train_batch_size", "8", "--warmup_ratio", "0.05",
                 "--report_to", "none", "--disable_tqdm", "--device", "cpu"]) == 0  # fmt: skip
    return out, d, train


def test_raw_text_question_answering_cli_and_python(squad_model, tmp_path: Path, capsys, cli_error) -> None:
    """`spanbert predict squad --question Q --context C` and `qa.answer(model, Q, C)` (issue 23 item 9):
    the answer `spanbert predict --data` gives for the same question, its character offsets, a probability."""
    from spanbert.tasks import qa

    out, d, train = squad_model
    preds = tmp_path / "predictions.json"
    assert main(["predict", "squad", "--model", str(out), "--data", str(train), "--output", str(preds)]) == 0
    predicted = json.loads(preds.read_text())
    paragraphs = [(p["context"], q) for a in d["data"] for p in a["paragraphs"] for q in p["qas"]]
    model, tokenizer, cfg = qa.load_qa_model(out)
    right = 0
    for context, q in paragraphs:  # the contexts are longer than one 32-token window: several windows each
        got = qa.answer_with(model, tokenizer, cfg, q["question"], context)
        assert got["answer"] == predicted[q["id"]] and context[got["start"] : got["end"]] == got["answer"]
        assert 0.0 < got["score"] <= 1.0
        right += got["answer"] == q["answers"][0]["text"]
    assert right >= 0.9 * len(paragraphs)
    context, q = paragraphs[0]
    got = qa.answer(out, q["question"], context)  # one call from a folder
    assert set(got) == {"answer", "score", "start", "end"} and got["answer"] == predicted[q["id"]]
    capsys.readouterr()
    assert main(["predict", "squad", "--model", str(out), "--question", q["question"], "--context", context]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == pytest.approx(got)
    ctx_file = tmp_path / "context.txt"
    ctx_file.write_text(context, encoding="utf-8")
    assert main(["predict", "squad", "--model", str(out), "--question", q["question"], "--context-file", str(ctx_file)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == pytest.approx(got)
    # half a request, or two kinds at once, is refused before the model loads
    base = ["predict", "squad", "--model", str(tmp_path / "absent")]
    cli_error([*base, "--question", "Who?"], contains="expected one of --context TEXT or --context_file FILE")
    cli_error([*base, "--context", "text"], contains="found --context without --question")
    cli_error([*base, "--question", "Who?", "--context", "c", "--data", str(train)], contains="one way of asking")
    cli_error([*base], contains="found no --data or --output")
    cli_error([*base, "--question", "Who?", "--context_file", str(tmp_path / "none.txt")], names=tmp_path / "none.txt")
    with pytest.raises(SpanBertError, match="empty context"):
        qa.answer_with(model, tokenizer, cfg, "Who?", "  ")


def test_raw_text_answer_is_the_transformers_pipeline_answer(squad_model) -> None:
    """The exported SQuAD model in transformers' question-answering pipeline (4.x; 5.x has none) gives
    the answer, offsets and score of `qa.answer_with`, on one window each."""
    import dataclasses

    from spanbert.tasks import qa

    transformers = pytest.importorskip("transformers")
    from transformers.pipelines import SUPPORTED_TASKS

    if "question-answering" not in SUPPORTED_TASKS:
        pytest.skip(f"transformers {transformers.__version__} has no question-answering pipeline")
    out, d, _ = squad_model
    pipe = transformers.pipeline("question-answering", model=str(out), tokenizer=str(out), device=-1)
    model, tokenizer, cfg = qa.load_qa_model(out)
    cfg = dataclasses.replace(cfg, max_seq_length=128)  # one window, as the pipeline's max_seq_len 128
    for a in d["data"][:3]:
        for p in a["paragraphs"]:
            for q in p["qas"]:
                ours = qa.answer_with(model, tokenizer, cfg, q["question"], p["context"])
                theirs = pipe(question=q["question"], context=p["context"], max_seq_len=128)
                assert (ours["answer"], ours["start"], ours["end"]) == (theirs["answer"], theirs["start"], theirs["end"])
                assert ours["score"] == pytest.approx(theirs["score"], rel=1e-5)


def test_v2_threshold_is_chosen_on_dev_saved_and_applied(tok, tmp_path: Path, capsys) -> None:
    d = synthetic_squad(4, unanswerable=True)
    path = _write(tmp_path / "v2.json", d)
    enc = _pretrained(tok, tmp_path / "enc")
    out = tmp_path / "ft"
    rc = main(["finetune", "squad", "--model", str(enc), "--train_file", str(path), "--validation_file", str(path),
               "--train_articles", ":2", "--validation_articles", "2:", "--output_dir", str(out), "--max_seq_length", "48",
               "--max_steps", "10", "--learning_rate", "1e-3", "--per_device_train_batch_size", "8",
               "--evals_per_epoch", "10",  # the paper's schedule, not lowered for this tiny run (issue 29)
               "--report_to", "none", "--disable_tqdm", "--device", "cpu"])  # fmt: skip
    assert rc == 0
    config = json.loads((out / "config.json").read_text())
    saved = config["spanbert"]["null_score_diff_threshold"]
    assert config["spanbert"]["version_2_with_negative"] is True
    results = json.loads((out / "dev_results.json").read_text())
    assert results["null_score_diff_threshold"] == saved
    # 10 dev evaluations an epoch (here every step); the model, its threshold and its dev scores are
    # those of the evaluation with the best F1 (the earliest of equal ones)
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {r["step"]: r for r in rows if "eval/f1" in r}
    assert sorted(evals) == list(range(1, 11))
    best = min(s for s in evals if evals[s]["eval/f1"] == max(r["eval/f1"] for r in evals.values()))
    assert results["selected_step"] == best and results["selected_by"] == "f1"
    assert results["f1"] == pytest.approx(evals[best]["eval/f1"])
    assert saved == pytest.approx(evals[best]["eval/null_score_diff_threshold"])
    preds_path = tmp_path / "predictions.json"
    assert (
        main(
            [
                "predict",
                "squad",
                "--model",
                str(out),
                "--data",
                str(path),
                "--articles",
                "2:",
                "--output",
                str(preds_path),
            ]
        )
        == 0
    )
    preds = json.loads(preds_path.read_text())
    odds = json.loads((tmp_path / "null_odds.json").read_text())
    assert set(preds) == set(odds) and len(preds) == 12
    assert all((preds[q] == "") == (odds[q] > saved) for q in preds if odds[q] > saved or preds[q])
    # raw text: the same answers, "" (at offsets 0, 0) where the threshold says no answer
    from spanbert.tasks import qa

    model, tokenizer, cfg = qa.load_qa_model(out)
    for a in d["data"][2:]:
        for par in a["paragraphs"]:
            for q in par["qas"]:
                got = qa.answer_with(model, tokenizer, cfg, q["question"], par["context"])
                assert got["answer"] == preds[q["id"]] and 0.0 <= got["score"] <= 1.0
                assert par["context"][got["start"] : got["end"]] == got["answer"]
                assert got["answer"] or (got["start"], got["end"]) == (0, 0)
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(path), "--articles", "2:", "--predictions", str(preds_path)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["f1"] == results["f1"] and metrics["total"] == 12
    # at the saved threshold the dev F1 is the official best F1 over all thresholds
    assert results["f1"] == pytest.approx(results["best_f1"])
    assert main(["evaluate", "squad", "--data", str(path), "--articles", "2:", "--predictions", str(preds_path),
                 "--na-prob", str(tmp_path / "null_odds.json")]) == 0  # fmt: skip
    metrics = json.loads(capsys.readouterr().out)
    assert {"HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(metrics)


def test_cli_errors_are_clear(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "preds.json"
    bad.write_text('{"q1": 3}')
    data = _write(tmp_path / "d.json", synthetic_squad(1))
    assert main(["evaluate", "squad", "--data", str(data), "--predictions", str(bad)]) == 2
    assert "record q1): value 3 is not a answer string" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# the Appendix B sweep, evaluating a subset, the loaders' eval mode


def test_sweep_tries_the_appendix_b_grid_and_keeps_the_best(tok, tmp_path: Path) -> None:
    train = _write(tmp_path / "train.json", synthetic_squad(2))
    enc = _pretrained(tok, tmp_path / "enc")
    out = tmp_path / "sweep"
    args = ["finetune", "squad", "--model", str(enc), "--train_file", str(train), "--validation_file", str(train),
            "--output_dir", str(out), "--max_seq_length", "48", "--max_steps", "1", "--sweep",
            "--report_to", "none", "--disable_tqdm", "--device", "cpu"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "sweep.json").read_text())
    grid = {(r["learning_rate"], r["batch_size"]) for r in summary["runs"]}
    assert grid == {(lr, bs) for lr in (5e-6, 1e-5, 2e-5, 3e-5, 5e-5) for bs in (16, 32)}
    assert summary["best"]["dev_score"] == max(r["dev_score"] for r in summary["runs"])
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    # each run reports the step of its selected model; one model on disk, no optimizer state
    assert all(r["selected_step"] == 1 and r["selected_by"] == "f1" for r in summary["runs"])
    assert [p.relative_to(out) for p in out.rglob("model.safetensors")] == [Path("model.safetensors")]
    assert not list(out.rglob("checkpoint-*")) and not list(out.rglob("best"))
    assert json.loads((out / "dev_results.json").read_text())["f1"] == summary["best"]["dev_score"]


def test_evaluate_subset_prints_one_summary_line_and_disable_tqdm_is_quiet(tok, tmp_path: Path, capsys) -> None:
    data = _write(tmp_path / "dev.json", synthetic_squad(2))
    preds = _write(tmp_path / "p.json", {"q0-0-0": "Paris"})  # 1 of 8 questions
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(data), "--predictions", str(preds)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "warning: 7 of 8 questions have no prediction; scored as 0 (q0-0-1, q0-1-0, q0-1-1, ...)"
    ]
    assert json.loads(captured.out)["f1"] <= 100.0 / 8
    # predict with --disable_tqdm prints its one line and no progress bar
    model = tmp_path / "qa"
    enc = _pretrained(tok, tmp_path / "enc")
    from spanbert.tasks.task_folders import load_encoder, save_finetuned

    encoder = load_encoder(enc)
    save_finetuned(qa.SpanBertForQuestionAnswering(encoder.config, encoder), model, tok, "BertForQuestionAnswering",
                   {"spanbert": {"task": "squad", "max_seq_length": 48}})  # fmt: skip
    out = tmp_path / "pred" / "p.json"
    capsys.readouterr()
    argv = ["predict", "squad", "--model", str(model), "--data", str(data), "--output", str(out), "--device", "cpu"]
    assert main(argv + ["--disable_tqdm"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("wrote 8 predictions")


def test_task_model_loaders_return_eval_mode(tok, tmp_path: Path) -> None:
    from spanbert.tasks import classification as C
    from spanbert.tasks.task_folders import load_encoder, save_finetuned

    enc = _pretrained(tok, tmp_path / "enc")
    encoder = load_encoder(enc)
    save_finetuned(qa.SpanBertForQuestionAnswering(encoder.config, encoder), tmp_path / "qa", tok,
                   "BertForQuestionAnswering", {"spanbert": {"task": "squad"}})  # fmt: skip
    model, _, _ = qa.load_qa_model(tmp_path / "qa")
    assert not any(m.training for m in model.modules())
    # classification.load_model (GLUE, relation, NER) too
    from spanbert.model import Encoder

    Encoder(model_config("tiny", vocab_size=tok.vocab_size)).save_pretrained(tmp_path / "enc2", tokenizer=tok)
    C.save_model(C.build_model("token", tmp_path / "enc2", 2, seed=0), tmp_path / "tok", tok, "token", ["O", "B-X"], {})
    model, _, _ = C.load_model("token", tmp_path / "tok", "cpu")
    assert not any(m.training for m in model.modules())
