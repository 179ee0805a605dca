"""A study with several pre-training seeds (`Study.pretrain_seeds`) end to end: every system pre-trained once per
seed into its own folder, the learning-rate grid on the first seed only (`Study.grid_on_first_seed`) and the later
seeds at the rate it chose, held-out per-example statistics written by every cell, and the comparisons made over
pre-training seeds with test sampling, or named as comparisons of checkpoints when a row has one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ner import synthetic_conll, write_conll
from test_study import _raw_study

from spanbert import study as S
from spanbert.cli import main
from spanbert.study.layout import HELDOUT_STATS
from spanbert.study.stats import NOT_SYSTEMS


def _study(tmp_path: Path, out: Path, seeds: int) -> Path:
    train, dev, test = (tmp_path / f"{n}.txt" for n in ("train", "dev", "test"))
    for path, seed in ((train, 0), (dev, 1), (test, 2)):
        write_conll(path, synthetic_conll(24, seed))
    task = (f"  - {{task: ner, train: {train}, dev: {dev}, test: {test}, learning_rates: [0.001, 0.003], "
            f"options: {{max_steps: 3, max_seq_length: 32, per_device_train_batch_size: 8}}}}\n")  # fmt: skip
    f = _raw_study(tmp_path, out, task)
    text = f.read_text().replace("systems: [spanbert]", "systems: [spanbert, {name: random-init, system: spanbert, "
                                 "options: {random_init: true}}]")  # fmt: skip
    f.write_text(text + f"pretrain_seeds: {seeds}\ngrid_on_first_seed: true\nbudget_tokens: 512\n")
    return f


@pytest.mark.slow
def test_pretraining_seeds_the_grid_on_the_first_and_intervals_over_seeds(tmp_path):
    out = tmp_path / "out"
    f = _study(tmp_path, out, 2)
    assert main(["study", str(f)]) == 0
    study = S.load_study(f)
    for system in ("spanbert", "random-init"):
        for k in (0, 1):
            cfg = json.loads((out / "pretrain" / system / f"seed{k}" / "final" / "config.json").read_text())
            assert cfg["spanbert"].get("random_init", False) == (system == "random-init")
    # seed 0 ran both rates, seed 1 only the one seed 0 chose
    for system in ("spanbert", "random-init"):
        first = sorted(p.name for p in (out / "finetune" / system / "pretrain-seed0" / "ner").iterdir())
        later = sorted(p.name for p in (out / "finetune" / system / "pretrain-seed1" / "ner").iterdir())
        assert first == ["lr0.001_seed0", "lr0.003_seed0"] and len(later) == 1
        chosen = S.collect(study)[system]["ner"]["lr"]
        assert later == [f"lr{chosen:g}_seed0"]
        assert (out / "finetune" / system / "pretrain-seed1" / "ner" / later[0] / HELDOUT_STATS).is_file()
    rows = (out / "summary" / "comparisons.csv").read_text().splitlines()
    assert len(rows) == 2 and "Welch t over pre-training seeds + bootstrap of test examples" in rows[1]
    assert "2 pre-training seeds" in (out / "summary" / "table.md").read_text()


@pytest.mark.slow
def test_one_pre_training_run_each_is_no_comparison_of_the_systems(tmp_path):
    out = tmp_path / "out"
    f = _study(tmp_path, out, 1)
    f.write_text(f.read_text().replace("\nseeds: 1\n", "\nseeds: 2\n"))
    assert main(["study", str(f)]) == 0
    assert (out / "pretrain" / "spanbert" / "final").is_dir()  # one run: the folders of before
    rows = (out / "summary" / "comparisons.csv").read_text().splitlines()
    assert NOT_SYSTEMS in rows[1]
    assert "fine-tuning seeds of one pre-training run" in (out / "summary" / "table.md").read_text()
