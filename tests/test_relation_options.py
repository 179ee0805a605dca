"""spanbert/tasks/relation_options.py: the options of tacred and semeval, the same object from flags and keywords
(issue 59)."""

from __future__ import annotations

from spanbert import tasks
from spanbert.tasks import options as O
from spanbert.tasks.relation_options import (
    ACTIONS,
    RelationEvaluate,
    RelationFinetune,
    RelationPredict,
    SemevalFinetune,
)


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "preds.txt")
    cases = [
        (RelationFinetune, ["--model", "m", "--train", "t.json", "--dev", "d.json", "--entity_mode", "mark"],
         dict(model="m", train_file="t.json", dev="d.json", entity_mode="mark")),
        (RelationPredict, ["--model", "m", "--data", "d.json", "--output", out], dict(model="m", data="d.json", output=out)),
        (RelationEvaluate, ["--data", "d.json", "--model", "m"], dict(data="d.json", model="m")),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__


def test_each_task_has_its_own_output_folder_by_default():
    for name, cls in (("tacred", RelationFinetune), ("semeval", SemevalFinetune)):
        opts = O.from_keywords(cls, {"model": "m", "train_file": "t"}, "c", "p")
        assert opts.training.output_dir == f"runs/{name}" and opts.training.num_train_epochs == 10.0
        assert tasks.TASKS.options(name) is ACTIONS[name] and tasks.TASKS[name].options is ACTIONS[name]
