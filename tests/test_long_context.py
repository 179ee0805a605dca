"""Long context where it pays (issue 31 item 4): coreference segments and QA windows follow the encoder's
context when the options leave them unset, say what they chose in one line, and save it with the model;
BERT keeps its defaults (384-token coreference segments, 512-token QA windows with stride 128)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from spanbert import modernbert
from spanbert.cli import main
from spanbert.config import model_config
from spanbert.model import Encoder
from spanbert.tasks import coref, qa
from spanbert.tasks.coref import CorefConfig, CorefDocument, CorefModel, CorefPredictor, featurize, read_conll
from spanbert.tasks.qa import QAConfig, load_qa_model, window_settings
from spanbert.tokenization import train_byte_level_tokenizer, train_tokenizer

SENTENCES = [["Mary", "saw", "the", "old", "man", "."], ["She", "waved", "to", "him", "."]]
REPEATS = 60  # 660 words: more than 512 sub-tokens with either vocabulary


def long_document() -> CorefDocument:
    sents = SENTENCES * REPEATS
    mary, man = [], []
    for r in range(REPEATS):
        at = 11 * r
        mary += [(at, at), (at + 6, at + 6)]  # Mary ... She
        man += [(at + 2, at + 4), (at + 9, at + 9)]  # the old man ... him
    return CorefDocument("long", 0, sents, clusters=[mary, man])


def squad_file(path: Path) -> Path:
    """Two questions on one passage of about 700 words, the answer at its end."""
    words = " ".join(" ".join(s) for s in SENTENCES * 64)
    context = f"{words} Mary was in Paris ."
    start = context.index("Paris")
    qas = [{"id": f"q{k}", "question": "where was Mary ?", "answers": [{"text": "Paris", "answer_start": start}]}
           for k in range(2)]  # fmt: skip
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT (512 positions) and a tiny ModernBERT (8,192), each with its own vocabulary."""
    root = tmp_path_factory.mktemp("long")
    texts = [" ".join(s) for s in SENTENCES] * 50 + ["Mary was in Paris . where was Mary ?"] * 50
    tok = train_tokenizer(None, 200, texts=texts, show_progress=False)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=512)).save_pretrained(
        root / "bert", tokenizer=tok
    )
    bpe = train_byte_level_tokenizer(None, 400, texts=texts)
    ids = dict(pad_token_id=bpe.pad_id, cls_token_id=bpe.cls_id, sep_token_id=bpe.sep_id)
    cfg = modernbert.modernbert_config("tiny", vocab_size=bpe.vocab_size, **ids)
    assert cfg.max_position_embeddings == 8192
    torch.manual_seed(0)
    modernbert.Encoder(cfg).save_pretrained(root / "modernbert", tokenizer=bpe)
    return {"bert": root / "bert", "modernbert": root / "modernbert"}


def run(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0, argv
    return capsys.readouterr().out


TRAIN = ["--max_steps", "1", "--device", "cpu", "--disable_tqdm", "--report_to", "none", "--save_steps", "0",
         "--logging_steps", "1000", "--warmup_steps", "0"]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the rules


@pytest.mark.parametrize(
    "given, positions, expected",
    [
        (None, 512, (384, "SpanBERT-base's setting for an encoder of 512 positions")),  # BERT: as before
        (None, 128, (128, "the encoder's 128 positions")),
        (None, 8192, (8192, "the encoder's context")),  # ModernBERT: a whole LitBank document
        (None, 32768, (8192, "the encoder's 32,768 positions, capped at 8,192")),
        (256, 8192, (256, "--max_seq_length")),  # the user's value wins
        (512, 512, (512, "--max_seq_length")),
    ],
)
def test_coref_segment_length_follows_the_encoder(given, positions, expected):
    assert coref.segment_length(given, positions) == expected


@pytest.mark.parametrize(
    "given, positions, expected",
    [
        ((None, None), 512, (512, 128, "windows: 512 tokens, stride 128 (the encoder's 512 positions; stride Appendix B's)")),
        ((None, None), 8192, (1024, 256, "windows: 1,024 tokens, stride 256 (the encoder's 8,192 positions, capped at "
                                         "1,024; stride a quarter of the window)")),
        ((None, None), 768, (768, 192, "windows: 768 tokens, stride 192 (the encoder's context; stride a quarter of the window)")),
        ((384, None), 8192, (384, 128, "windows: 384 tokens, stride 128 (--max_seq_length; stride Appendix B's)")),
        ((None, 64), 8192, (1024, 64, "windows: 1,024 tokens, stride 64 (the encoder's 8,192 positions, capped at "
                                      "1,024; stride --doc_stride)")),
    ],
)  # fmt: skip
def test_qa_windows_follow_the_encoder(given, positions, expected):
    cfg, line = window_settings(QAConfig(max_seq_length=given[0], doc_stride=given[1], n_best_size=7), positions)
    assert (cfg.max_seq_length, cfg.doc_stride, line) == expected
    assert cfg.n_best_size == 7  # the other settings are kept


def test_coref_model_fixes_the_segment_length_from_its_encoder():
    """A model built with the length unset holds the chosen one: predictions and the saved config use it."""
    torch.manual_seed(0)
    bert = Encoder(model_config("tiny", vocab_size=50, max_position_embeddings=512))
    long = modernbert.Encoder(modernbert.modernbert_config("tiny", vocab_size=50, pad_token_id=0))
    small = dict(ffnn_size=8, feature_size=4)
    assert CorefModel(None, CorefConfig(**small), encoder=bert).config.max_seq_length == 384
    assert CorefModel(None, CorefConfig(**small), encoder=long).config.max_seq_length == 8192
    assert CorefModel(None, CorefConfig(max_seq_length=64, **small), encoder=long).config.max_seq_length == 64


# ---------------------------------------------------------------------------------------------
# coreference: one segment a document with a long-context encoder, several with BERT


@pytest.mark.parametrize(
    "family, length, line",
    [
        ("bert", 384, "segments: up to 384 sub-tokens (SpanBERT-base's setting for an encoder of 512 positions): "),
        ("modernbert", 8192, "segments: up to 8,192 sub-tokens (the encoder's context): 1 segment a document"),
    ],
)
def test_coref_reads_a_long_document_as_one_segment_when_the_encoder_allows(models, tmp_path, capsys, family, length, line):
    data = tmp_path / "long.conll"
    coref.write_conll(data, [long_document()])
    out = tmp_path / "ft"
    text = run(["finetune", "coref", "--train", str(data), "--model", str(models[family]), "--output_dir", str(out),
                "--ffnn_size", "16", "--feature_size", "4", "--max_span_width", "4", *TRAIN], capsys)  # fmt: skip
    printed = [x for x in text.splitlines() if x.startswith("segments:")]
    assert len(printed) == 1 and printed[0].startswith(line), printed
    saved = json.loads((out / "config.json").read_text())["spanbert"]["coref"]
    assert saved["max_seq_length"] == length  # the choice is saved: predict cuts documents the same way
    predictor = CorefPredictor.from_pretrained(out, device="cpu")
    assert predictor.model.config.max_seq_length == length
    f = featurize(read_conll(data)[0], predictor.tokenizer, predictor.model.config.max_seq_length)
    assert f.num_subtokens > 512
    if family == "modernbert":
        assert len(f.segments) == 1  # the whole document, encoded at once (local layers in chunks)
    else:
        assert len(f.segments) >= 2 and f"{len(f.segments)} segments a document" in printed[0]
        assert max(len(s) for s in f.segments) <= 384 - 2
    clusters = predictor.predict_documents(read_conll(data), progress=False)
    assert isinstance(clusters[0], list)


def test_coref_keeps_a_given_segment_length_on_a_long_context_encoder(models, tmp_path, capsys):
    data = tmp_path / "long.conll"
    coref.write_conll(data, [long_document()])
    text = run(["finetune", "coref", "--train", str(data), "--model", str(models["modernbert"]), "--output_dir",
                str(tmp_path / "ft"), "--max_seq_length", "256", "--ffnn_size", "16", "--feature_size", "4",
                "--max_span_width", "4", *TRAIN], capsys)  # fmt: skip
    line = next(x for x in text.splitlines() if x.startswith("segments:"))
    assert line.startswith("segments: up to 256 sub-tokens (--max_seq_length): ") and "segments a document" in line


# ---------------------------------------------------------------------------------------------
# QA: the windows follow the encoder's context


@pytest.mark.parametrize(
    "family, windows, line",
    [
        ("bert", (512, 128), "windows: 512 tokens, stride 128 (the encoder's 512 positions; stride Appendix B's)"),
        ("modernbert", (1024, 256), "windows: 1,024 tokens, stride 256 (the encoder's 8,192 positions, capped at 1,024; "
                                    "stride a quarter of the window)"),
    ],
)  # fmt: skip
def test_qa_windows_follow_the_encoder_and_are_saved(models, tmp_path, capsys, family, windows, line):
    data = squad_file(tmp_path / "squad.json")
    out = tmp_path / "ft"
    text = run(["finetune", "squad", "--train_file", str(data), "--model", str(models[family]), "--output_dir",
                str(out), "--per_device_train_batch_size", "2", *TRAIN], capsys)  # fmt: skip
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("windows:")] == [line]
    # a ~720-token passage: one window with the long-context encoder, several with BERT's 512
    counts = next(x for x in lines if "training questions ->" in x)
    assert counts == ("2 training questions -> 2 windows" if family == "modernbert" else "2 training questions -> 6 windows")
    saved = json.loads((out / "config.json").read_text())["spanbert"]
    assert (saved["max_seq_length"], saved["doc_stride"]) == windows
    _, _, cfg = load_qa_model(out)
    assert (cfg.max_seq_length, cfg.doc_stride) == windows
    run(["predict", "squad", "--model", str(out), "--data", str(data), "--output", str(tmp_path / "p.json"),
         "--disable_tqdm"], capsys)  # fmt: skip
    assert set(json.loads((tmp_path / "p.json").read_text())) == {"q0", "q1"}


def test_qa_help_shows_berts_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "squad", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 512 for BERT, see above)" in text and "a quarter of a longer window" in text
    assert qa.BERT_WINDOW == 512 and qa.BERT_STRIDE == 128
