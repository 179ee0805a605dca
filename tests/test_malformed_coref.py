"""Malformed CoNLL-2012 input through `spanbert finetune/predict/evaluate coref`: every case is one
line `error: FILE:LINE: found ..., expected ...`, exit 2, no traceback, nothing written."""

from __future__ import annotations

import pytest
import torch

from spanbert.config import model_config

GOOD = """\
#begin document (x); part 000
x 0 0 Alice NNP * - - - Speaker#1 * (0)
x 0 1 met VBD * - - - Speaker#1 * -
x 0 2 her PRP$ * - - - Speaker#1 * (1|(0)
x 0 3 sister NN * - - - Speaker#1 * 1)

x 0 0 She PRP * - - - Speaker#2 * (1)
x 0 1 smiled VBD * - - - Speaker#2 * -
#end document
"""
BEGIN = "#begin document (x); part 000\n"
ROW = "x 0 0 Alice NNP * - - - - * {}\n"
END = "#end document\n"


def doc(*coref: str) -> str:
    """A one-document file whose word lines carry these coreference columns (lines 2, 3, ...)."""
    return BEGIN + "".join(ROW.format(c) for c in coref) + END


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny encoder with a tokenizer (for finetune) and a tiny coreference model (for predict)."""
    from spanbert.model import Encoder
    from spanbert.tasks.coref import CorefConfig, CorefModel, save_coref_model
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("coref_models")
    tok = train_tokenizer(None, vocab_size=120, texts=["Alice met her sister . She smiled ."] * 20, show_progress=False)
    torch.manual_seed(0)
    bert = model_config("tiny", vocab_size=tok.vocab_size)
    Encoder(bert, add_pooling_layer=False).save_pretrained(root / "enc", tokenizer=tok)
    config = CorefConfig(max_seq_length=32, ffnn_size=8, feature_size=4, max_top_antecedents=4)
    save_coref_model(CorefModel(bert, config), root / "coref", tok)
    return root


# (command, content of the bad file, suffix, line named, text the message contains)
CASES = [
    pytest.param("finetune", "#begin document (x); part one\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="part-not-a-number"),
    pytest.param("finetune", "#begin document (x); chapter 3\n" + ROW.format("-") + END, ".conll", 1,
                 "found '#begin document (x); chapter 3'", id="part-field-unknown"),
    pytest.param("finetune", "#begin document (); part 0\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY)", id="begin-without-key"),
    # issue 22.12: what the loose reader took for another document name or part 0
    pytest.param("finetune", "#begin document (x; part 000\n" + ROW.format("-") + END, ".conll", 1,
                 "found '#begin document (x; part 000'", id="begin-unclosed-parenthesis"),
    pytest.param("finetune", "#begin document x; part 000\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="begin-key-without-parentheses"),
    pytest.param("finetune", "#begin document (x)\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="begin-without-part"),
    pytest.param("finetune", "#begin document (x) part 000\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="begin-without-semicolon"),
    pytest.param("finetune", "#begin documentx; part 0\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="begin-glued-key"),
    pytest.param("finetune", "#begin document ( ); part 0\n" + ROW.format("-") + END, ".conll", 1,
                 "expected '#begin document (KEY); part NNN'", id="begin-blank-key"),
    pytest.param("finetune", BEGIN + ROW.format("-"), ".conll", 2, "expected '#end document'",
                 id="missing-end-document-at-eof"),
    pytest.param("finetune", BEGIN + ROW.format("-") + BEGIN + ROW.format("-") + END, ".conll", 3,
                 "expected '#end document' first", id="missing-end-document-before-next-begin"),
    pytest.param("finetune", GOOD + END, ".conll", 10, "found '#end document' outside a document",
                 id="end-without-begin"),
    pytest.param("finetune", BEGIN + "x 0 0 Alice\n" + END, ".conll", 2, "found 4 columns; expected at least 5",
                 id="too-few-columns"),
    pytest.param("finetune", BEGIN + ROW.format("-") + "x 0 1 met VBD * - - - * -\n" + END, ".conll", 3,
                 "found 11 columns; expected 12", id="column-count-changes"),
    pytest.param("finetune", doc("(0", "-"), ".conll", 2, "never closed", id="bracket-never-closed"),
    pytest.param("finetune", doc("-", "0)"), ".conll", 3, "never opened", id="bracket-never-opened"),
    pytest.param("finetune", doc("(0", "1)"), ".conll", 3, "found '1)' closing a mention of entity 1",
                 id="brackets-of-different-entities"),
    pytest.param("finetune", doc("(a)"), ".conll", 2, "found coreference entry '(a)'", id="cluster-id-not-integer"),
    pytest.param("finetune", doc("(1.5)"), ".conll", 2, "with an integer entity id", id="cluster-id-float"),
    pytest.param("finetune", doc("(-1)"), ".conll", 2, "found coreference entry '(-1)'", id="cluster-id-negative"),
    pytest.param("finetune", doc("0"), ".conll", 2, "found coreference entry '0'", id="entry-without-brackets"),
    pytest.param("finetune", doc("(0)|"), ".conll", 2, "found coreference entry ''", id="empty-entry-after-bar"),
    pytest.param("finetune", BEGIN + "x\t0\t0\t\tNNP\t-\n" + END, ".conll", 2, "found an empty word",
                 id="empty-word"),
    pytest.param("finetune", ROW.format("-") + GOOD, ".conll", 1, "found a word line outside a document",
                 id="word-line-before-begin"),
    pytest.param("finetune", GOOD + GOOD, ".conll", 10, "found document 'x' part 0 a second time",
                 id="duplicate-document"),
    pytest.param("finetune", BEGIN.encode() + b"x 0 0 Al\xffce NNP * - - - - * -\n" + END.encode(), ".conll", 2,
                 "not UTF-8 (invalid start byte at byte 38); expected UTF-8 text", id="not-utf8"),
    pytest.param("finetune", GOOD, ".conll.gz", None, "expected gzip data", id="gz-not-gzip"),
    pytest.param("finetune", "\n\n", ".conll", None, "found no '#begin document' line", id="no-documents"),
    pytest.param("finetune-dev", doc("(0"), ".conll", 2, "never closed", id="dev-bracket-never-closed"),
    pytest.param("predict", doc("-", "(x)"), ".conll", 3, "found coreference entry '(x)'", id="predict-bad-entry"),
    pytest.param("predict", BEGIN + ROW.format("-"), ".conll", 2, "expected '#end document'",
                 id="predict-missing-end"),
    pytest.param("evaluate-gold", doc("(0", "(0)"), ".conll", 2, "never closed", id="evaluate-gold-unbalanced"),
    pytest.param("evaluate-predictions", BEGIN + "x 0 0 Alice NNP - (0)\n" + "x 0 1 met VBD - - - - -\n" + END,
                 ".conll", 3, "found 10 columns; expected 7", id="evaluate-predictions-columns"),
    pytest.param("evaluate-predictions", GOOD.replace("x 0 1 smiled VBD * - - - Speaker#2 * -\n", ""), ".conll", 1,
                 "found 5 words in document 'x_0'; expected 6", id="evaluate-predictions-word-count"),
]  # fmt: skip


@pytest.mark.parametrize("command, content, suffix, line, contains", CASES)
def test_malformed_coref_input_is_one_clean_error(
    tmp_path, cli_error, models, command, content, suffix, line, contains
):
    bad = tmp_path / f"bad{suffix}"
    data = content.encode() if isinstance(content, str) else content
    bad.write_bytes(data)
    good = tmp_path / "good.conll"
    good.write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    if command.startswith("finetune"):
        train, dev = (bad, good) if command == "finetune" else (good, bad)
        argv = ["finetune", "coref", "--model", models / "enc", "--train", train, "--dev", dev,
                "--output_dir", out / "run", "--max_steps", "1", "--device", "cpu", "--report_to", "none",
                "--disable_tqdm", "--max_seq_length", "32", "--ffnn_size", "8"]  # fmt: skip
    elif command == "predict":
        argv = ["predict", "coref", "--model", models / "coref", "--data", bad, "--output", out / "pred.conll",
                "--device", "cpu", "--disable_tqdm"]  # fmt: skip
    elif command == "evaluate-gold":
        argv = ["evaluate", "coref", "--gold", bad, "--predictions", good]
    else:
        argv = ["evaluate", "coref", "--gold", good, "--predictions", bad]
    names = f"{bad}:{line}:" if line is not None else f"{bad}:"
    cli_error(argv, names=names, contains=contains, out=out)


def test_predict_text_not_utf8_names_the_option(tmp_path, cli_error, models):
    """Issue 22.10: bytes of `--text` that are not UTF-8 (kept by Python as lone surrogates) are one
    clean error naming the option and the byte, not a TypeError from the tokenizer."""
    import os

    text = os.fsdecode(b"Alice met her sister. She sm\xe9led.")
    argv = ["predict", "coref", "--model", models / "coref", "--text", text, "--device", "cpu"]
    cli_error(argv, names="--text", contains="not UTF-8 (invalid continuation byte at byte 28")


def test_there_are_enough_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize(
    "option, value, contains",
    [
        pytest.param("--coref_depth", "0", "expected an integer >= 1", id="coref-depth-0"),
        pytest.param("--singletons", "maybe", "expected auto, true or false", id="singletons-maybe"),
        pytest.param("--top_span_ratio", "0", "expected a number in (0, 1]", id="top-span-ratio-0"),
        pytest.param("--dropout", "1.5", "expected a number in [0, 1)", id="dropout-1.5"),
        pytest.param("--max_seq_length", "2", "expected >= 3", id="segments-too-short"),
        pytest.param("--per_device_train_batch_size", "2", "expected 1", id="batch-of-two-documents"),
        pytest.param("--token_dropout", "1", "expected a number in [0, 1)", id="token-dropout-1"),
        pytest.param("--max_top_spans", "0", "expected an integer >= 1", id="no-kept-spans"),
        pytest.param("--task_weight_decay", "-0.1", "expected a number >= 0", id="negative-task-decay"),
    ],
)
def test_bad_coref_options_name_the_option(tmp_path, cli_error, models, option, value, contains):
    good = tmp_path / "good.conll"
    good.write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["finetune", "coref", "--model", models / "enc", "--train", good, "--output_dir", out / "run",
            "--max_steps", "1", "--device", "cpu", "--report_to", "none", "--disable_tqdm", option, value]  # fmt: skip
    cli_error(argv, names=option, contains=contains, out=out)
