"""Held-out scores (`spanbert.study.heldout`): dev split by record in each task's format (or a task's test split,
or a fold's test file, used instead), a dev restriction applied before the split, and a tiny study that scores
every cell on the half that selection did not see. The cut itself is tested in test_tasks_splits.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_glue import synthetic_sst
from test_qa import synthetic_squad
from test_study import _sst_folder

from spanbert import study as S
from spanbert.cli import main
from spanbert.study import heldout


def _split(tmp_path: Path, task: S.StudyTask) -> tuple[S.HeldOut, Path]:
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], tasks=[task], output_dir=str(tmp_path / "out"))
    h = S.heldout_plan(study, task)
    S.split_dev(study, task)
    return h, S.heldout_dir(study, task)


def test_dev_is_split_by_record_in_each_format(tmp_path):
    # SQuAD: by article, the top-level keys kept
    squad = synthetic_squad(6, seed=2)
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    h, d = _split(tmp_path, S.StudyTask("squad", train="x", dev=str(tmp_path / "dev.json")))
    assert h.source == "dev half" and Path(h.select).parent == d
    a, b = (json.loads(Path(p).read_text()) for p in (h.select, h.heldout))
    titles = [x["title"] for x in squad["data"]]
    assert sorted(x["title"] for x in a["data"] + b["data"]) == sorted(titles) and len(b["data"]) == len(titles) // 2
    assert a["version"] == squad["version"]
    # blank-line blocks with CRLF and no blank line at the end (SemEval's files)
    recs = [f'{i}\t"s {i}"\r\nOther\r\nComment:\r\n' for i in range(5)]
    (tmp_path / "sem.txt").write_bytes("\r\n".join(recs).encode())
    h, _ = _split(tmp_path, S.StudyTask("semeval", train="x", dev=str(tmp_path / "sem.txt")))
    got = [Path(p).read_bytes().decode().split("\r\n\r\n") for p in (h.select, h.heldout)]
    blocks = sorted(b.strip() for part in got for b in part if b.strip())
    assert blocks == sorted(r.strip() for r in recs) and len([b for b in got[1] if b.strip()]) == 2
    # CoNLL-2012 documents
    docs = "".join(f"#begin document (d{i}); part 000\nd{i} 0 0 w{i} _ _ _ _ _ _ -\n\n#end document\n" for i in range(4))
    (tmp_path / "dev.conll").write_text(docs)
    h, _ = _split(tmp_path, S.StudyTask("coref", name="c", train="x", dev=str(tmp_path / "dev.conll")))
    from spanbert.tasks.coref import read_conll

    names = sorted(doc.key for p in (h.select, h.heldout) for doc in read_conll(p))
    assert names == sorted(doc.key for doc in read_conll(tmp_path / "dev.conll")) and len(read_conll(h.heldout)) == 2
    # GLUE: a folder per half, the training file linked, the header kept
    sst = _sst_folder(tmp_path / "SST-2", n=10)
    h, _ = _split(tmp_path, S.StudyTask("glue", subtask="SST-2", train=str(sst)))
    rows = [Path(p, "dev.tsv").read_text().splitlines() for p in (h.select, h.heldout)]
    assert all(r[0] == "sentence\tlabel" for r in rows) and len(rows[0]) == 6 and len(rows[1]) == 6
    assert sorted(rows[0][1:] + rows[1][1:]) == sorted((sst / "dev.tsv").read_text().splitlines()[1:])
    assert Path(h.select, "train.tsv").read_text() == (sst / "train.tsv").read_text()
    # a test file, when the study names one, is the held-out data: dev is not split
    assert S.heldout_plan(S.Study([], [], output_dir=str(tmp_path)), S.StudyTask("ner", train="a", dev="b", test="c")) == \
        S.HeldOut("test", "b", "c")  # fmt: skip


def test_a_task_on_litbanks_folds_splits_no_dev_set(tmp_path):
    """Its cells are scored on their fold's test file: there is no dev file to halve."""
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], seeds=1, output_dir=str(tmp_path / "out"),
                    tasks=[S.StudyTask("coref", name="LitBank", train=str(tmp_path), folds=[0])])  # fmt: skip
    S.split_dev(study, study.tasks[0])
    assert not (tmp_path / "out").exists()


def test_a_dev_set_of_one_record_cannot_be_split(tmp_path):
    (tmp_path / "dev.json").write_text(json.dumps([{"id": "1"}]))
    with pytest.raises(S.SpanBertError, match="found 1 record.*expected at least 2"):
        _split(tmp_path, S.StudyTask("tacred", train="x", dev=str(tmp_path / "dev.json")))


def test_a_tiny_study_scores_every_cell_on_the_held_out_half(tmp_path, capsys):
    import torch

    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tokenization import train_tokenizer

    texts = [s for s, _ in synthetic_sst(64)] + [p["context"] for a in synthetic_squad(8)["data"] for p in a["paragraphs"]]
    tok = train_tokenizer(None, vocab_size=300, output_dir=tmp_path / "tok", texts=texts, show_progress=False)
    torch.manual_seed(0)
    SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=True, nsp=False).save_pretrained(
        tmp_path / "model", tokenizer=tok)
    sst = _sst_folder(tmp_path / "SST-2", n=40)
    (tmp_path / "train.json").write_text(json.dumps(synthetic_squad(4, seed=1)))
    (tmp_path / "dev.json").write_text(json.dumps(synthetic_squad(4, seed=2)))
    out = tmp_path / "out"
    f = tmp_path / "s.yaml"
    opts = "{num_train_epochs: 1, per_device_train_batch_size: 16}"
    f.write_text(f"systems:\n  - {{name: mine, checkpoint: {tmp_path / 'model'}}}\nseeds: 2\noutput_dir: {out}\ntasks:\n"
                 f"  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-3], options: {opts}}}\n"
                 f"  - {{task: squad, train: {tmp_path}/train.json, dev: {tmp_path}/dev.json, learning_rates: [1e-3], "
                 f"options: {{num_train_epochs: 1, max_seq_length: 64}}}}\n")  # fmt: skip
    assert main(["study", str(f)]) == 0
    for task, metric in (("SST-2", "score"), ("squad", "f1")):
        for seed in (0, 1):
            cell = out / "finetune" / "mine" / task / f"lr0.001_seed{seed}"
            info = json.loads((cell / "result.json").read_text())
            assert info["heldout_source"] == "dev half" and 0 <= info["heldout"] <= 100
            assert info["heldout"] == info["heldout_results"][metric]
            # the cell selected on the selection half only
            sel = S.heldout_dir(S.load_study(f), next(t for t in S.load_study(f).tasks if t.name == task)) / (
                "select" if task == "SST-2" else "select.json")
            assert str(sel) in info["argv"]
    table = (out / "summary" / "table.md").read_text()
    assert "(dev " in table and "held-out = dev half" in table, table
    # a folder whose cells finished before held-out scoring stays readable: said in the table
    for marker in out.glob("finetune/*/*/*/result.json"):
        info = json.loads(marker.read_text())
        for k in ("heldout", "heldout_source", "heldout_data", "heldout_results"):
            info.pop(k)
        marker.write_text(json.dumps(info))
    heldout._LEGACY.clear()
    assert main(["study", str(f), "--only", "summary"]) == 0
    table = (out / "summary" / "table.md").read_text()
    assert "none: cells finished before held-out scoring" in table and "| mine | – (dev " in table, table


def test_a_dev_restriction_is_applied_before_the_split(tmp_path):
    """The tiny preset's `validation_articles: ":4"`: both halves come from those 4 articles, and the
    cells are not restricted a second time."""
    squad = synthetic_squad(10, seed=2)
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    task = S.StudyTask("squad", train="x", dev=str(tmp_path / "dev.json"), options={"validation_articles": ":4", "num_train_epochs": 1})
    h, _ = _split(tmp_path, task)
    a, b = (json.loads(Path(p).read_text())["data"] for p in (h.select, h.heldout))
    assert sorted(x["title"] for x in a + b) == sorted(x["title"] for x in squad["data"][:4]) and len(b) == 2
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], tasks=[task], seeds=1, output_dir=str(tmp_path / "out"))
    argv = next(c for c in S.plan(study) if c.kind == "finetune").argv
    assert "--validation_articles" not in argv and "--num_train_epochs" in argv and h.select in argv
