"""GLUE: tsv readers for every layout, metrics per task, overfitting, submission files, WNLI majority."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spanbert.cli import main as spanbert_main
from spanbert.errors import DataError
from spanbert.tasks.glue import GLUE_TASKS, glue_task, read_glue, read_split, read_submission, score_splits

GLUE = Path(__file__).parents[1] / "../shared/data/glue"

POS = ["good", "great", "fine", "happy"]
NEG = ["bad", "awful", "sad", "poor"]
FILL = ["the", "movie", "was", "very", "plot", "film", "and", "quite"]


def synthetic_sst(n: int = 32, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        words = rng.sample(FILL, 4)
        words.insert(rng.randrange(5), rng.choice(POS if label else NEG))
        rows.append((" ".join(words), str(label)))
    return rows


def synthetic_sts(n: int = 32, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    keys = {"same": "4.500", "similar": "2.500", "different": "0.500"}
    rows = []
    for i in range(n):
        key = list(keys)[i % 3]
        rows.append((" ".join(rng.sample(FILL, 4)), f"{key} " + " ".join(rng.sample(FILL, 3)), keys[key]))
    return rows


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    import torch

    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = [r[0] for r in synthetic_sst(64)] + [" ".join(r[:2]) for r in synthetic_sts(64)]
    tok = train_tokenizer(None, 120, texts=texts * 3, show_progress=False)
    torch.manual_seed(0)  # the initialisation draws from the global RNG
    # no dropout: the overfitting tests should converge in few steps whatever the initialisation
    config = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=128, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)  # fmt: skip
    path = tmp_path_factory.mktemp("tiny_glue") / "pretrained"
    Encoder(config).save_pretrained(path, tokenizer=tok)
    return path


def _train_args(out: Path, steps: int = 60, batch: int = 8) -> list[str]:
    return [
        "--output_dir", str(out), "--max_steps", str(steps), "--learning_rate", "1e-3",
        "--per_device_train_batch_size", str(batch), "--warmup_ratio", "0.1", "--logging_steps", "1000",
        "--save_steps", "0", "--report_to", "none", "--disable_tqdm", "--device", "cpu",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------- readers


@pytest.mark.realdata
@pytest.mark.parametrize(
    "task, train, dev, test",
    [("CoLA", 8551, 1043, None), ("SST-2", 67349, 872, 1821), ("MRPC", 3668, 408, 1725), ("STS-B", 5749, 1500, 1379),
     ("RTE", 2490, 277, 3000)],
)  # fmt: skip
def test_staged_glue_files_have_the_published_sizes(task, train, dev, test):
    folder = GLUE / task
    if not folder.exists():
        pytest.skip(f"{folder} not present (GLUE data of ../shared/data)")
    t = glue_task(task)
    assert len(read_split(t, folder, t.train)) == train
    assert len(read_split(t, folder, t.dev["dev"])) == dev  # CoLA: in-domain 527 + out-of-domain 516
    if test is not None:
        rows = read_split(t, folder, ("test.tsv",), labelled=False)
        assert len(rows) == test and all(r.label is None for r in rows)
        assert [r.guid for r in rows[:2]] == ["0", "1"]  # the index column, used in the submission


def test_every_layout_by_header_name(tmp_path):
    (tmp_path / "qqp.tsv").write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\tWhy?\tHow?\t1\n")
    (ex,) = read_glue(GLUE_TASKS["QQP"], tmp_path / "qqp.tsv")
    assert (ex.guid, ex.text_a, ex.text_b, ex.label) == ("7", "Why?", "How?", "1")
    header = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label"
    (tmp_path / "m.tsv").write_text(header + "\n0\t1\t2\tfic\tx\tx\tx\tx\tA man.\tA person.\tentailment\tentailment\n")
    (ex,) = read_glue(GLUE_TASKS["MNLI"], tmp_path / "m.tsv")
    assert (ex.text_a, ex.text_b, ex.label) == ("A man.", "A person.", "entailment")
    (tmp_path / "q.tsv").write_text("index\tquestion\tsentence\tlabel\n0\tWho?\tHim.\tnot_entailment\n")
    assert read_glue(GLUE_TASKS["QNLI"], tmp_path / "q.tsv")[0].label == "not_entailment"
    # CoLA's raw release has no header: read by position
    (tmp_path / "c.tsv").write_text('gj04\t1\t\tThe "quoted word.\n')
    (ex,) = read_glue(GLUE_TASKS["CoLA"], tmp_path / "c.tsv")
    assert (ex.text_a, ex.label, ex.guid) == ('The "quoted word.', "1", "0")  # quotes are not special


def test_malformed_tsv_names_file_and_line(tmp_path):
    f = tmp_path / "dev.tsv"
    f.write_text("index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA.\tB.\n")
    with pytest.raises(DataError, match=r"dev\.tsv:3: found 3 tab-separated columns, expected 4"):
        read_glue(GLUE_TASKS["RTE"], f)
    f.write_text("index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tmaybe\n")
    with pytest.raises(
        DataError, match=r"dev\.tsv:2: label 'maybe'; expected one of \['entailment', 'not_entailment'\]"
    ):
        read_glue(GLUE_TASKS["RTE"], f)
    f.write_text("index\tgenre\tsentence1\tsentence2\tscore\n0\tx\tA.\tB.\thigh\n")
    with pytest.raises(DataError, match=r"dev\.tsv:2: found score 'high'; expected a number in \[0, 5\]"):
        read_glue(GLUE_TASKS["STS-B"], f)
    f.write_text("index\tsentence\tlabel\n0\tA.\t1\n")
    with pytest.raises(DataError, match=r"dev\.tsv:1: header .* lacks the column\(s\) \['sentence1', 'sentence2'\]"):
        read_glue(GLUE_TASKS["RTE"], f)
    f.write_text("index\tsentence1\tsentence2\tlabel\n")  # a header alone: a dev score of 0 examples was 0.0, exit 0
    with pytest.raises(DataError, match=r"dev\.tsv:1: found a header and no examples; expected at least one RTE example"):
        read_glue(GLUE_TASKS["RTE"], f)


def test_metrics_per_task_and_mnli_splits():
    assert set(score_splits(GLUE_TASKS["CoLA"], {"dev": ["1", "0"]}, {"dev": ["1", "0"]})) == {
        "accuracy",
        "mcc",
        "score",
    }
    m = score_splits(GLUE_TASKS["MRPC"], {"dev": ["1", "1", "0", "0"]}, {"dev": ["1", "0", "0", "1"]})
    assert m["accuracy"] == 50.0 and m["f1"] == 50.0 and m["score"] == 50.0  # x100, as the leaderboard
    m = score_splits(GLUE_TASKS["STS-B"], {"dev": ["1.0", "2.0", "3.0"]}, {"dev": ["1.5", "2.5", "3.5"]})
    assert m["pearson"] == pytest.approx(100.0) and m["spearman"] == pytest.approx(100.0)
    m = score_splits(
        GLUE_TASKS["MNLI"], {"matched": ["neutral", "entailment"], "mismatched": ["neutral"]},
        {"matched": ["neutral", "neutral"], "mismatched": ["neutral"]},
    )  # fmt: skip
    assert m["accuracy_matched"] == 50.0 and m["accuracy_mismatched"] == 100.0 and m["score"] == 50.0


# ---------------------------------------------------------------------------------------------- training


def _write_sst(folder: Path) -> None:
    folder.mkdir(parents=True)
    rows = synthetic_sst(32)
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
    (folder / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{100 + i}\t{s}\n" for i, (s, _) in enumerate(rows))
    )


def test_tiny_model_overfits_32_sst2_examples_and_writes_submission(tiny_model, tmp_path, capsys):
    data, out, sub = tmp_path / "SST-2", tmp_path / "ft", tmp_path / "submission"
    _write_sst(data)
    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(data), "--model", str(tiny_model)]
    argv += ["--evals_per_epoch", "10"]  # the paper's schedule, not lowered for this tiny run (issue 29)
    assert spanbert_main(argv + _train_args(out)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["id2label"] == {"0": "0", "1": "1"}
    results = json.loads((out / "dev_results.json").read_text())
    assert results["accuracy"] >= 95.0
    # the model kept is that of the best dev score (GLUE's number for the task) of the logged evaluations
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/score"] for r in rows if "eval/score" in r}
    assert len(evals) == 60 and results["selected_by"] == "score"
    assert results["selected_step"] == min(s for s, v in evals.items() if v == max(evals.values()))
    glue = ["glue", "--data_dir", str(data)]
    assert spanbert_main(["predict", *glue, "--task", "sst2", "--model", str(out), "--output_dir", str(sub)]) == 0
    lines = (sub / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and lines[1].split("\t")[0] == "100" and len(lines) == 33
    gold = [l for _, l in synthetic_sst(32)]
    assert sum(p == g for p, g in zip(read_submission(sub / "SST-2.tsv", 32), gold)) / 32 >= 0.95
    capsys.readouterr()
    assert spanbert_main(["evaluate", *glue, "--task", "SST-2", "--predictions", str(out / "SST-2.dev.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] >= 95.0


def test_heldout_half_selects_on_one_half_and_scores_the_other(tiny_model, tmp_path, capsys, cli_error):
    """--heldout_half: selection sees the study's selection half of dev, `evaluate --heldout_half` scores the
    other half, which selection never saw."""
    from spanbert.study import split_half

    data, out, full = tmp_path / "SST-2", tmp_path / "ft", tmp_path / "ft-full"
    _write_sst(data)
    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(data), "--model", str(tiny_model), "--evals_per_epoch", "2"]
    assert spanbert_main(argv + ["--heldout_half"] + _train_args(out, steps=8)) == 0
    assert "the other half is held out" in capsys.readouterr().out
    select, held = split_half(32)  # the halves `spanbert study` cuts from the same 32 rows
    results = json.loads((out / "dev_results.json").read_text())
    assert results["dev_half"] == "selection" and results["selected_by"] == "score"
    rows = (out / "SST-2.dev.tsv").read_text().splitlines()[1:]  # the selection half's predictions: index = row
    assert [int(r.split("\t")[0]) for r in rows] == select
    glue = ["glue", "--task", "SST-2", "--data_dir", str(data)]
    assert spanbert_main(["evaluate", *glue, "--model", str(out), "--heldout_half"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["examples"] == len(held) == 16 and scored["dev_half"] == "held-out"
    # the same number as the whole dev set's predictions restricted to the held-out rows
    assert spanbert_main(["predict", *glue, "--model", str(out), "--split", "dev", "--output_dir", str(tmp_path / "p")]) == 0
    pred = read_submission(tmp_path / "p" / "SST-2.dev.tsv", 32)
    gold = [label for _, label in synthetic_sst(32)]
    assert scored["accuracy"] == pytest.approx(100 * sum(pred[i] == gold[i] for i in held) / len(held))
    # the whole dev set of such a model: said to include the half it was selected on
    capsys.readouterr()
    assert spanbert_main(["evaluate", *glue, "--model", str(out)]) == 0
    assert "was selected on half of dev" in capsys.readouterr().err
    # a model selected on the whole dev set has no held-out half
    assert spanbert_main(argv + _train_args(full, steps=2)) == 0
    cli_error(["evaluate", *glue, "--model", full, "--heldout_half"], names=str(full), contains="without --heldout_half")
    cli_error(["evaluate", *glue, "--predictions", out / "SST-2.dev.tsv", "--heldout_half"], contains="expected --model")


def test_tiny_model_fits_sts_b_regression(tiny_model, tmp_path, capsys):
    data, out = tmp_path / "STS-B", tmp_path / "ft"
    data.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    body = "".join(f"{i}\tg\tf\ty\t0\tn\tn\t{a}\t{b}\t{s}\n" for i, (a, b, s) in enumerate(synthetic_sts(32)))
    (data / "train.tsv").write_text(header + body)
    (data / "dev.tsv").write_text(header + body)
    argv = ["finetune", "glue", "--task", "STS-B", "--data_dir", str(data), "--model", str(tiny_model)]
    # regression starts from outputs near 0 with targets around 2.5: it needs more steps than classification
    assert spanbert_main(argv + _train_args(out, steps=200, batch=16)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["num_labels"] == 1
    capsys.readouterr()
    assert spanbert_main(["evaluate", "glue", "--task", "STS-B", "--data_dir", str(data), "--model", str(out)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["pearson"] >= 95.0 and metrics["spearman"] >= 90.0


def test_wnli_is_the_majority_class(tmp_path, capsys):
    data, out, sub = tmp_path / "WNLI", tmp_path / "ft", tmp_path / "sub"
    data.mkdir()
    head = "index\tsentence1\tsentence2\tlabel\n"
    (data / "train.tsv").write_text(head + "".join(f"{i}\tA.\tB.\t{int(i % 3 == 0)}\n" for i in range(9)))
    (data / "dev.tsv").write_text(head + "0\tA.\tB.\t0\n1\tA.\tB.\t1\n")
    (data / "test.tsv").write_text("index\tsentence1\tsentence2\n0\tA.\tB.\n1\tC.\tD.\n")
    glue = ["glue", "--task", "WNLI", "--data_dir", str(data)]
    assert spanbert_main(["finetune", *glue, "--model", "unused", "--output_dir", str(out)]) == 0
    assert json.loads((out / "majority.json").read_text())["label"] == "0"
    assert spanbert_main(["predict", *glue, "--model", str(out), "--output_dir", str(sub)]) == 0
    assert (sub / "WNLI.tsv").read_text() == "index\tprediction\n0\t0\n1\t0\n"


# ---------------------------------------------------------------------------------------------- seeds, YAML


def _finetune_weights(tiny_model: Path, data: Path, out: Path, *extra: str):
    from safetensors.torch import load_file

    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(data), "--model", str(tiny_model)]
    assert spanbert_main(argv + _train_args(out, steps=2) + list(extra)) == 0
    return load_file(str(out / "model.safetensors"))


def test_seed_fixes_head_initialisation_and_data_order(tiny_model, tmp_path):
    import torch

    data = tmp_path / "SST-2"
    _write_sst(data)
    a = _finetune_weights(tiny_model, data, tmp_path / "a", "--seed", "7")
    torch.manual_seed(123)  # the global RNG state before the run must not matter
    b = _finetune_weights(tiny_model, data, tmp_path / "b", "--seed", "7")
    c = _finetune_weights(tiny_model, data, tmp_path / "c", "--seed", "8")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])


def test_yaml_config_keys_are_checked(tiny_model, tmp_path, cli_error):
    import yaml

    data = tmp_path / "SST-2"
    _write_sst(data)
    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(data), "--model", str(tiny_model)]
    good = tmp_path / "good.yaml"
    # a TrainingArguments option and a task option (max_seq_length) are both accepted; the flag wins
    good.write_text(yaml.safe_dump({"learning_rate": 0.5, "max_seq_length": 16, "max_steps": 1}))
    out = tmp_path / "ft"
    assert spanbert_main(argv + ["--config", str(good)] + _train_args(out, steps=1)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["spanbert"]["max_seq_length"] == 16
    # a typo is an error naming the file, and nothing is trained
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rat: 3.0e-5\n")
    out2 = tmp_path / "ft2"
    cli_error(argv + ["--config", str(bad), "--output_dir", str(out2), "--device", "cpu"], names=bad,
              contains="learning_rat", out=tmp_path)  # fmt: skip
    assert not out2.exists()


def _sst_features(tiny_model: Path, tmp_path: Path):
    from spanbert.tasks.glue import glue_features
    from spanbert.tasks.task_folders import load_tokenizer_for

    _write_sst(tmp_path / "SST-2")
    task = glue_task("SST-2")
    return glue_features(task, read_split(task, tmp_path / "SST-2", task.train), load_tokenizer_for(tiny_model), 32)


def test_finetune_keeps_the_best_evaluation_its_weights_and_predictions(tiny_model, tmp_path):
    """A dev score we control: the evaluations (steps 2, 4, 6, 8) score 1, 3, 3, 0; the model left is
    that of step 4 (a tie keeps the earlier step), with the predictions of that evaluation. Resumed
    after its best evaluation, the run evaluates the restored best weights again for their predictions."""
    import torch

    from spanbert.tasks import classification as C
    from spanbert.training_args import TrainingArguments

    features = _sst_features(tiny_model, tmp_path)  # 32 examples, batch 8: 4 steps an epoch

    def run(out: Path, scores: list[float], **kw):
        calls: list[str] = []

        def predict(m):
            calls.append(f"evaluation {len(calls) + 1}")
            return calls[-1]

        def score(p):
            return {"score": scores[len(calls) - 1] if len(calls) <= len(scores) else -1.0}

        model = C.build_model("sequence", tiny_model, 2, seed=0)
        args = TrainingArguments(output_dir=str(out), max_steps=8, per_device_train_batch_size=8, learning_rate=1e-3,
                                 evals_per_epoch=2, metric_for_best_model="score", save_total_limit=1, save_steps=1,
                                 report_to="none", disable_tqdm=True, device="cpu", logging_steps=9, **kw)  # fmt: skip
        return model, C.finetune_selected(model, features, args, 0, predict, score), calls

    model, done, calls = run(tmp_path / "a", [1.0, 3.0, 3.0, 0.0])
    assert len(calls) == 4 and done.selected_step == 4 and done.predictions == "evaluation 2"
    best = torch.load(tmp_path / "a" / "best" / "state.pt", weights_only=True)
    assert all(torch.equal(v, best[k]) for k, v in model.state_dict().items())
    assert sorted(p.name for p in (tmp_path / "a").glob("checkpoint-*")) == ["checkpoint-8"]

    # stopped at step 5 (not the planned end): no selection, the predictions of the model of step 5
    _, done, calls = run(tmp_path / "b", [1.0, 3.0], stop_at_step=5)
    assert done.selected_step is None and len(calls) == 3 and done.predictions == "evaluation 3"
    resumed, done, calls = run(tmp_path / "b", [0.0, 0.0], resume=True)  # steps 6 and 8 score below step 4
    assert done.selected_step == 4 and len(calls) == 3 and done.predictions == "evaluation 3"
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in resumed.state_dict().items())
