"""Fine-tuning under `torchrun --nproc_per_node 2` (gloo, CPU) equals one process with the same global
batch: exactly one saved model, values chosen once (the SQuAD 2.0 threshold) and saved, the same
weights and the same dev predictions.

One process with batch 4 x accumulation 2 sees the micro-batches that 2 processes with batch 4 see
together (the trainer's data order), so with dropout off the two runs are the same computation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_glue import synthetic_sst
from test_qa import synthetic_squad

from spanbert.folders import MANIFEST

pytestmark = pytest.mark.slow


def _texts_of(squad: dict) -> list[str]:
    out = []
    for a in squad["data"]:
        for p in a["paragraphs"]:
            out.append(p["context"])
            out += [q["question"] for q in p["qas"]]
    return out


def _pretrained(path: Path, texts: list[str], pooler: bool) -> Path:
    """A tiny encoder without dropout (so 1 and 2 processes compute the same thing) and its tokenizer."""
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    tok = train_tokenizer(None, 200, texts=texts * 3, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    config = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=128, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)  # fmt: skip
    Encoder(config, add_pooling_layer=pooler).save_pretrained(path, tokenizer=tok)
    return path


def _torchrun(nproc: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "spanbert", *argv]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _one_model_and_nothing_else(out: Path) -> None:
    """One config.json + model.safetensors, no temporary file or folder left by a second writer, and
    the selected weights (best/) are the model saved."""
    from safetensors.torch import load_file

    names = sorted(p.name for p in out.iterdir())
    assert names.count("config.json") == 1 and names.count("model.safetensors") == 1, names
    assert not [n for n in names if (n.startswith(".") and n != MANIFEST) or ".tmp" in n], names  # the manifest stays
    assert sorted(p.name for p in (out / "best").iterdir()) == ["best.json", "state.pt"]
    saved = load_file(str(out / "model.safetensors"))
    best = torch.load(out / "best" / "state.pt", weights_only=True)
    assert all(torch.equal(saved[k], best[k]) for k in saved)


def _selected_step(out: Path, results: str, metric: str) -> int:
    """The step the run reports, checked against its logged dev evaluations (the earliest best)."""
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {r["step"]: r[f"eval/{metric}"] for r in rows if f"eval/{metric}" in r}
    step = json.loads((out / results).read_text())["selected_step"]
    assert step == min(s for s, v in evals.items() if v == max(evals.values())), (step, evals)
    assert json.loads((out / "best" / "best.json").read_text())["step"] == step
    return step


def _weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / "model.safetensors"))


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


COMMON = ["--report_to", "none", "--disable_tqdm", "--device", "cpu", "--logging_steps", "100", "--save_steps", "0",
          "--learning_rate", "1e-3", "--per_device_train_batch_size", "4", "--seed", "3"]  # fmt: skip


def test_squad_v2_two_processes_match_one(tmp_path):
    squad = synthetic_squad(8, unanswerable=True)
    data = tmp_path / "v2.json"
    data.write_text(json.dumps(squad))
    enc = _pretrained(tmp_path / "enc", _texts_of(squad), pooler=False)
    # 6 training articles x 2 paragraphs x 3 questions = 36 windows: 4 global steps of 8 in one epoch
    task = ["finetune", "squad", "--model", str(enc), "--train_file", str(data), "--validation_file", str(data),
            "--train_articles", ":6", "--validation_articles", "6:", "--max_seq_length", "48", "--max_steps", "4"]  # fmt: skip
    outs = {}
    for name, nproc, accum in (("one", 1, 2), ("two", 2, 1)):
        outs[name] = tmp_path / name
        _torchrun(nproc, [*task, "--output_dir", str(outs[name]), "--gradient_accumulation_steps", str(accum), *COMMON],
                  tmp_path)  # fmt: skip
        _one_model_and_nothing_else(outs[name])
    _same_weights(outs["one"], outs["two"])
    for name, out in outs.items():
        saved = json.loads((out / "config.json").read_text())["spanbert"]
        chosen = json.loads((out / "dev_results.json").read_text())["null_score_diff_threshold"]
        assert saved["version_2_with_negative"] is True
        assert saved["null_score_diff_threshold"] == chosen, name  # the value chosen on dev is the one saved
    t1, t2 = (json.loads((outs[n] / "config.json").read_text())["spanbert"]["null_score_diff_threshold"]
              for n in ("one", "two"))  # fmt: skip
    # the model was selected on dev (an evaluation at every one of the 4 steps): the same step in both
    steps = [_selected_step(outs[n], "dev_results.json", "f1") for n in ("one", "two")]
    assert steps[0] == steps[1]
    assert t1 == pytest.approx(t2, abs=1e-4)
    p1, p2 = (json.loads((outs[n] / "dev_predictions.json").read_text()) for n in ("one", "two"))
    assert len(p1) == 12 and p1 == p2

    # predict under torchrun writes once, and with the saved threshold gives the dev predictions
    pred = tmp_path / "pred"
    argv = ["predict", "squad", "--model", str(outs["two"]), "--data", str(data), "--articles", "6:",
            "--output", str(pred / "p.json"), "--device", "cpu", "--disable_tqdm"]  # fmt: skip
    _torchrun(2, argv, tmp_path)
    assert sorted(p.name for p in pred.iterdir()) == ["null_odds.json", "p.json"]
    assert json.loads((pred / "p.json").read_text()) == p2


def _write_sst(folder: Path, n: int = 32) -> None:
    folder.mkdir(parents=True)
    rows = synthetic_sst(n)
    body = "".join(f"{s}\t{l}\n" for s, l in rows)
    (folder / "train.tsv").write_text("sentence\tlabel\n" + body)
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + body)


def test_glue_two_processes_match_one(tmp_path):
    data = tmp_path / "SST-2"
    _write_sst(data)
    enc = _pretrained(tmp_path / "enc", [s for s, _ in synthetic_sst(32)], pooler=True)
    task = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(data), "--model", str(enc), "--max_steps", "4"]
    outs = {}
    for name, nproc, accum in (("one", 1, 2), ("two", 2, 1)):
        outs[name] = tmp_path / name
        _torchrun(nproc, [*task, "--output_dir", str(outs[name]), "--gradient_accumulation_steps", str(accum), *COMMON],
                  tmp_path)  # fmt: skip
        _one_model_and_nothing_else(outs[name])
    _same_weights(outs["one"], outs["two"])
    assert (outs["one"] / "SST-2.dev.tsv").read_text() == (outs["two"] / "SST-2.dev.tsv").read_text()
    r1, r2 = (json.loads((outs[n] / "dev_results.json").read_text()) for n in ("one", "two"))
    assert r1 == r2
    steps = [_selected_step(outs[n], "dev_results.json", "score") for n in ("one", "two")]
    assert steps[0] == steps[1]


@pytest.mark.slow
def test_a_script_that_joins_the_group_exits_cleanly(tmp_path):
    """A user's own script (not the CLI) that joins the group through spanbert ends with exit code 0:
    the group is left at exit (gloo's threads otherwise abort a finished process now and then)."""
    script = tmp_path / "run.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from spanbert import distributed\n"
        "distributed.init_distributed(torch.device('cpu'))\n"
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n"
        "assert t.item() == 2\n"
    )
    for _ in range(5):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
        proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "terminate called" not in proc.stderr
