"""spanbert/tasks/qa/options.py: the options of squad and mrqa, the same object from the command line and
from `spanbert.tasks` keywords (issue 59)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.qa.options import ACTIONS, DEFAULTS, QAConfig, QAEvaluate, QAFinetune, QAPredict


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "preds.json")
    cases = [
        (QAFinetune, ["--model", "m", "--train_file", "t.json", "--validation_file", "d.json", "--doc_stride", "64",
                      "--version_2_with_negative", "--learning_rate", "3e-5", "--train_articles", ":17"],
         dict(model="m", train_file="t.json", validation_file="d.json", doc_stride=64, version_2_with_negative=True,
              learning_rate=3e-5, train_articles=":17")),
        (QAPredict, ["--model", "m", "--data", "d.json", "--output", out, "--batch_size", "8", "--disable_tqdm"],
         dict(model="m", data="d.json", output=out, batch_size=8, disable_tqdm=True)),
        (QAEvaluate, ["--data", "d.json", "--predictions", "p.json", "--na-prob", "n.json", "--na-prob-thresh", "0.5"],
         dict(data="d.json", predictions="p.json", na_prob="n.json", na_prob_thresh=0.5)),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__


def test_finetune_starts_from_appendix_b_and_keeps_the_threshold_for_dev():
    opts = O.from_keywords(QAFinetune, {"model": "m", "train_file": "t.json"}, "c", "p")
    assert opts.qa == QAConfig()
    assert {k: getattr(opts.training, k) for k in DEFAULTS} == DEFAULTS
    assert "null_score_diff_threshold" not in O.names(QAFinetune)  # chosen on dev, not an option of finetune
    assert "null_score_diff_threshold" in O.names(QAPredict)  # predict may override the saved one


def test_the_registry_names_the_options_the_specs_hold():
    for name in ("squad", "mrqa"):
        assert tasks.TASKS.options(name) is ACTIONS
        assert tasks.TASKS[name].options is ACTIONS


def test_a_python_mistake_names_the_keyword():
    with pytest.raises(SpanBertError, match=r"tasks.predict\('squad'\): found unknown option 'batch_siz' \(did you mean "
                                            r"'batch_size'\?\); expected an option of `spanbert predict squad`"):  # fmt: skip
        tasks.predict("squad", "m", "d.json", batch_siz=3)
    with pytest.raises(SpanBertError, match=r"found no data or output, expected data FILE output FILE, or question"):
        tasks.predict("squad", model="m")


def test_finetune_squad_reads_its_yaml_and_the_models_config_and_checks_its_output_once(tmp_path, monkeypatch):
    """Issue 59: one `finetune squad` read its --config YAML up to 8 times, the model's config.json 6, and checked
    its output folder 3 times."""
    import builtins
    import io
    import json

    import torch
    import yaml

    from spanbert.cli import main
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    texts = ["Alice met Bob in Paris.", "Who met Bob?", "Where did Alice meet Bob?"] * 20
    tok = train_tokenizer(None, 120, texts=texts, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    enc = tmp_path / "enc"
    Encoder(model_config("tiny", vocab_size=tok.vocab_size), add_pooling_layer=False).save_pretrained(enc, tokenizer=tok)
    qas = [{"id": f"q{i}", "question": "Who met Bob?", "answers": [{"text": "Alice", "answer_start": 0}]}
           for i in range(8)]  # fmt: skip
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": texts[0], "qas": qas}]}]}
    (tmp_path / "train.json").write_text(json.dumps(data))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"max_steps": 2, "learning_rate": 1e-3, "max_seq_length": 32, "doc_stride": 8}))
    reads: dict[str, int] = {}
    real = io.open

    def counting_open(file, mode="r", *args, **kwargs):
        if "r" in mode and isinstance(file, (str, Path)) and Path(file).name in ("run.yaml", "config.json"):
            key = str(Path(file).resolve())
            reads[key] = reads.get(key, 0) + 1
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    out = tmp_path / "ft"
    from spanbert import runs

    checks: list[str] = []  # the output folder was checked 3 times: the command, `finetune_qa`, `train`
    real_check = runs.check_output
    monkeypatch.setattr(runs, "check_output", lambda path, **kw: checks.append(str(path)) or real_check(path, **kw))
    assert main(["finetune", "squad", "--model", str(enc), "--train_file", str(tmp_path / "train.json"), "--config",
                 str(cfg), "--output_dir", str(out), "--report_to", "none", "--disable_tqdm", "--device", "cpu",
                 "--per_device_train_batch_size", "4"]) == 0  # fmt: skip
    assert reads.get(str(cfg.resolve())) == 1, reads
    assert reads.get(str((enc / "config.json").resolve())) == 1, reads
    assert checks == [str(out)], checks
