"""What a study's folder holds and where (`spanbert.study.layout`): the folders of the models, the cells, a task's
folds and its held-out halves under the study's output_dir, a cell's label, and which folder is an earlier study
(its manifest says so, nothing else does). A whole study's folder is tested in test_study.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanbert import folders
from spanbert import study as S
from spanbert.study.layout import Cell, finetune_cell_dir, fold_dir, heldout_dir, holds_a_study, model_dir, shared_dir


def test_every_folder_of_a_study_is_under_its_output_dir(tmp_path):
    study = S.Study(systems=[S.SystemSpec("spanbert"), S.SystemSpec("hf", checkpoint="models/bert")],
                    tasks=[S.StudyTask("coref", name="LitBank", train="litbank", folds=[0, 1]), S.StudyTask("squad")],
                    output_dir=str(tmp_path))  # fmt: skip
    assert shared_dir(study) == tmp_path / "shared"
    assert model_dir(study, study.systems[0]) == tmp_path / "pretrain" / "spanbert" / "final"
    assert model_dir(study, study.systems[1]) == Path("models/bert")  # a given checkpoint is used where it is
    assert finetune_cell_dir(study, "spanbert", "squad", 3e-5, 2) == tmp_path / "finetune" / "spanbert" / "squad" / "lr3e-05_seed2"
    assert finetune_cell_dir(study, "hf", "LitBank", 1e-4, 0, fold=1).name == "lr0.0001_seed0_fold1"
    assert fold_dir(study, study.tasks[0], 3).parent.parent == tmp_path / "shared"
    assert fold_dir(study, study.tasks[0], 3).name == "fold3"
    assert heldout_dir(study, study.tasks[1]) == tmp_path / "shared" / "heldout" / "squad"
    with pytest.raises(ValueError, match="task squad has no folds"):
        fold_dir(study, study.tasks[1], 0)


def test_a_cell_says_what_it_runs():
    assert Cell("pretrain", "spanbert", Path("p"), []).label == "pretrain spanbert"
    cell = Cell("finetune", "bert", Path("f"), [], task="LitBank", lr=2e-5, seed=1, fold=3)
    assert cell.label == "finetune bert / LitBank / lr 2e-05 / seed 1 / fold 3"


def test_only_a_study_manifest_makes_a_folder_an_earlier_study(tmp_path):
    assert not holds_a_study(tmp_path / "none")
    (tmp_path / "looks" / "finetune").mkdir(parents=True)  # a study's names, but no manifest
    assert not holds_a_study(tmp_path / "looks")
    folders.claim_manifest(tmp_path / "run", "run", "spanbert pretrain")
    assert not holds_a_study(tmp_path / "run")
    folders.claim_manifest(tmp_path / "study", "study", "spanbert study")
    assert holds_a_study(tmp_path / "study")
