"""The README's numbers are today's: it states no count that drifts (the tests of the suite), its model
shapes and schedule are the presets', its data figures are the data's, and every timing it gives is a
measurement recorded in docs/benchmarks.md with its date and what else shared the cores (issue 60:
"the 59 longest tests" had become 74, "2,041 tests, 109 skipped" 2,389 and 108, "about half an hour" 9
minutes, and a compressed size stood beside an uncompressed one)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
FLAT = " ".join(README.split())
"""The README with its line breaks as spaces: what a sentence says, wherever its lines break."""
BENCHMARKS = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
DATA = REPO.parent / "shared" / "data"


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def test_the_readme_states_no_count_of_tests():
    # a count of tests is out of date with the next test; `pytest --collect-only -q` counts them
    assert not re.search(r"\b\d[\d,]*\s+(?:longest\s+|slow\s+)?tests\b", README), "a count of tests in README.md"
    assert not re.search(r"\b\d[\d,]*\s+skipped\b", README)


def test_the_model_shapes_and_the_paper_schedule_are_the_presets():
    from spanbert.config import MODEL_PRESETS
    from spanbert.modernbert import MODERNBERT_PRESETS
    from spanbert.pretrain_config import PRETRAIN_DEFAULTS, PretrainConfig

    tiny, small = MODEL_PRESETS["tiny"], MODEL_PRESETS["small"]
    assert f"tiny SpanBERT ({tiny['num_hidden_layers']} layers × {tiny['hidden_size']}," in FLAT
    assert (f"`small` SpanBERT ({small['num_hidden_layers']} layers × {small['hidden_size']}, "
            f"{small['num_attention_heads']} heads)") in FLAT  # fmt: skip
    mb = MODERNBERT_PRESETS["tiny"]
    assert f"tiny ModernBERT ({mb['num_hidden_layers']} layers × {mb['hidden_size']})" in FLAT
    steps, tokens = PRETRAIN_DEFAULTS["max_steps"], PretrainConfig().tokens_per_update
    assert f"base model, {steps / 1e6:g} M steps of ~{round(tokens / 1000)}k tokens each" in FLAT


def test_the_recorded_run_adds_up():
    # "1,492 steps (12.2 M block positions)" of 64 blocks of 128 tokens (the command's batch)
    steps, positions = re.search(r"([\d,]+) steps \(([\d.]+) M block positions\)", README).groups()
    command = _section("From text to a fine-tuned model: a small SpanBERT in 40 minutes, against random init")
    batch = int(re.search(r"--per_device_train_batch_size (\d+)", command).group(1))
    length = int(re.search(r"--max_seq_length (\d+)", command).group(1))
    assert f"{int(steps.replace(',', '')) * batch * length / 1e6:.1f}" == positions


def _durations(text: str) -> list[str]:
    return re.findall(r"\b\d+ min \d+ s\b|\b\d+ s\b(?! a step)", text)


def test_every_timing_of_today_is_a_recorded_measurement():
    # the quick start's timings, the 10-minute budget's and the test suite's, each as docs/benchmarks.md
    # records it (command, date, what shared the cores)
    quick = _section("Quick start")
    stated = _durations(quick.split('"About 1 minute"', 1)[1].split("What is bit-identical", 1)[0])
    path = _section("From text to a fine-tuned model: a small SpanBERT in 40 minutes, against random init")
    stated += _durations(path.split("`--max_time 10m`", 1)[1].split("docs/benchmarks.md", 1)[0])
    stated += _durations(_section("Tests").split("first command took", 1)[1].split("(", 1)[0])
    assert len(stated) >= 4, stated
    assert "## Time budgets and thread counts under load (issue 60)" in BENCHMARKS
    missing = [d for d in stated if d not in BENCHMARKS]
    assert not missing, f"README timings not in docs/benchmarks.md's record: {missing}"


@pytest.mark.realdata
def test_the_data_figures_are_the_datas():
    from spanbert.preprocess import uncompressed_size

    corpus = DATA / "pretrain-corpus"
    sst2 = DATA / "glue" / "SST-2"
    if not corpus.is_dir() or not sst2.is_dir():
        pytest.skip(f"needs {corpus} and {sst2}")
    files = sorted(p for p in corpus.iterdir() if p.name.endswith((".txt", ".txt.gz")))
    size = sum(uncompressed_size(p) for p in files)
    assert f"all {size / 1e6:.1f} MB of text" in FLAT
    dev = len((sst2 / "dev.tsv").read_text().splitlines()) - 1  # a header line
    train = len((sst2 / "train.tsv").read_text().splitlines()) - 1
    assert f"only half of it ({dev // 2} of the {dev} sentences" in FLAT and f"on the other {dev - dev // 2}" in FLAT
    shown = int(re.search(r"GLUE SST-2: ([\d,]+) training sentences", FLAT).group(1).replace(",", ""))
    assert shown <= train and f"--max_train_examples {shown}" in FLAT


@pytest.mark.realdata
@pytest.mark.slow
def test_the_corpus_has_the_words_the_readme_says():
    from spanbert.utils import open_text

    corpus = DATA / "pretrain-corpus"
    if not corpus.is_dir():
        pytest.skip(f"needs {corpus}")
    words = 0
    for p in sorted(p for p in corpus.iterdir() if p.name.endswith((".txt", ".txt.gz"))):
        with open_text(p) as f:
            words += sum(len(line.split()) for line in f)
    stated = float(re.search(r"Gutenberg books, ([\d.]+) M\s+words", README).group(1))
    assert abs(words / 1e6 - stated) <= 0.5, words
