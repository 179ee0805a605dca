"""Google BERT's static masking: `spanbert preprocess --dupe_factor N` stores N masked copies of the
examples in the corpus; `spanbert pretrain` reads copy e mod N in epoch e (docs/data.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from spanbert import cli, folders
from spanbert import preprocess as preprocess_module
from spanbert.corpus import TokenCorpus, is_preprocessed
from spanbert.dataset import PretrainDataset, example_generator
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX, MaskingConfig, UnigramSampler, mask_block
from spanbert.preprocess import preprocess
from spanbert.pretrain import pretrain
from spanbert.pretrain_config import PretrainConfig
from spanbert.pretrain_data import build_datasets
from spanbert.static_masks import StaticMaskingConfig, static_mask_sets
from spanbert.tokenization import train_tokenizer
from spanbert.training_args import TrainingArguments

WORDS = (
    "the river flows past old stone bridges while merchants sell bread and fish to travellers who "
    "arrive by boat each morning before the bells of the cathedral ring across the quiet valley résumé"
).split()
SEED = 12345


def write_corpus(path: Path, n_docs: int = 16, n_paras: int = 6, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        paras = [" ".join(rng.choice(WORDS, int(rng.integers(8, 30)))).capitalize() + "." for _ in range(n_paras)]
        docs.append("\n".join(paras))
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    text = write_corpus(root / "corpus.txt")
    train_tokenizer([text], vocab_size=150, output_dir=root / "tok", show_progress=False)
    return root


def google(dupe_factor: int = 3, lengths=(48,), **kw) -> StaticMaskingConfig:
    kw.setdefault("eval_fraction", 0.1)
    return StaticMaskingConfig(dupe_factor=dupe_factor, max_seq_length=tuple(lengths), **kw)


@pytest.fixture(scope="module")
def static_corpus(root):
    """google-bert's settings (NSP, 10% short, subword 15% 80/10/10), 3 copies at 24 and 48 tokens."""
    return preprocess(root / "corpus.txt", root / "tok", root / "static", num_workers=1, progress=False,
                      static=google(3, (24, 48)))  # fmt: skip


def read_stored(corpus: Path, length: int, d: int, i: int):
    """Example i of duplicate d as stored: (positions, input ids there, sbo (M, 4)), straight from the files."""
    meta = json.loads((corpus / "meta.json").read_text())
    entry = next(e for e in meta["static_masks"] if e["settings"]["max_seq_length"] == length)
    base = corpus / entry["dir"] / f"dup-{d:03d}"
    offsets = np.fromfile(f"{base}.offsets", dtype=np.int64).reshape(-1, 2)
    mlm = np.fromfile(f"{base}.mlm", dtype=entry["dtype"]).reshape(-1, 2).astype(np.int64)
    sbo = np.fromfile(f"{base}.sbo", dtype=entry["dtype"]).reshape(-1, 4).astype(np.int64)
    (m0, s0), (m1, s1) = offsets[i], offsets[i + 1]
    return mlm[m0:m1, 0], mlm[m0:m1, 1], sbo[s0:s1], entry


def pair_sequence(tc: TokenCorpus, row) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] A [SEP] B [SEP] of a stored NSP row, built here from the corpus (not by the dataset)."""
    tok = tc.tokenizer
    a0, a1, b0, b1, _ = (int(x) for x in row)
    (a, wa), (b, wb) = tc.tokens(a0, a1), tc.tokens(b0, b1)
    ids = np.concatenate([[tok.cls_id], a, [tok.sep_id], b, [tok.sep_id]]).astype(np.int64)
    ws = np.concatenate([[True], wa, [True], wb, [True]])
    return ids, ws


def test_stored_masks_equal_mask_block_with_the_documented_seed(static_corpus):
    tc = TokenCorpus(static_corpus)
    tok = tc.tokenizer
    special = tuple(int(i) for i in tok.special_ids())
    sampler = UnigramSampler(tc.unigram_counts(), special)
    meta = json.loads((static_corpus / "meta.json").read_text())
    assert [e["settings"]["max_seq_length"] for e in meta["static_masks"]] == [24, 48]
    for length in (24, 48):
        entry = next(e for e in meta["static_masks"] if e["settings"]["max_seq_length"] == length)
        assert entry["dupe_factor"] == 3 and entry["seed"] == SEED and entry["settings"]["short_seq_prob"] == 0.1
        assert entry["settings"]["masking"]["scheme"] == "subword"
        rows = np.load(static_corpus / entry["dir"] / "examples.npy")
        assert rows.shape == (entry["num_examples"], 5) and len(rows) > 20
        assert rows[:, 3].max() <= tc.doc_bounds[entry["settings"]["documents"][1] - 1, 1]  # training documents only
        for d in range(3):
            for i in range(len(rows)):
                ids, ws = pair_sequence(tc, rows[i])
                assert len(ids) <= length
                r = mask_block(ids, ws, "subword", example_generator(SEED, d, i), mask_id=tok.mask_id,
                               special_ids=special, random_tokens=sampler)  # fmt: skip
                pos, toks, sbo, _ = read_stored(static_corpus, length, d, i)
                expected = np.flatnonzero(r.labels != IGNORE_INDEX)
                np.testing.assert_array_equal(pos, expected)
                np.testing.assert_array_equal(toks, r.input_ids[expected])
                np.testing.assert_array_equal(sbo, np.stack([r.sbo_positions, r.sbo_left, r.sbo_right, r.sbo_rel], 1))


def test_epoch_e_reads_duplicate_e_mod_dupe_factor(static_corpus):
    tc = TokenCorpus(static_corpus)
    entry = static_mask_sets(tc)[1]
    ds = PretrainDataset(tc, max_seq_length=48, mode="nsp", short_seq_prob=0.1, scheme="subword",
                         documents=tuple(entry["settings"]["documents"]), static=True, seed=999)  # fmt: skip
    assert len(ds) == entry["num_examples"]
    seen = {}
    for epoch in range(7):
        ds.set_epoch(epoch)
        assert ds.duplicate == epoch % 3
        items = [ds[i] for i in range(len(ds))]
        for i, it in enumerate(items):
            pos, toks, sbo, _ = read_stored(static_corpus, 48, epoch % 3, i)
            np.testing.assert_array_equal(np.flatnonzero(it["labels"] != IGNORE_INDEX), pos)
            np.testing.assert_array_equal(it["input_ids"][pos], toks)
            np.testing.assert_array_equal(it["sbo_positions"], sbo[:, 0])
            unmasked = np.ones(len(it["input_ids"]), bool)
            unmasked[pos] = False
            ids, _ = pair_sequence(tc, ds.pairs[i])
            np.testing.assert_array_equal(it["input_ids"][unmasked], ids[unmasked])  # the rest is the text
            np.testing.assert_array_equal(it["labels"][pos], ids[pos])
        seen[epoch] = np.concatenate([it["input_ids"] for it in items])
    assert np.array_equal(seen[0], seen[3]) and np.array_equal(seen[1], seen[4]) and np.array_equal(seen[2], seen[5])
    assert not np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[1], seen[2])  # copies differ
    # the same masks a dynamic dataset seeded with the preprocess seed gives in epoch e mod 3 (the pairs too)
    dyn = PretrainDataset(tc, max_seq_length=48, mode="nsp", short_seq_prob=0.1, scheme="subword",
                          documents=tuple(entry["settings"]["documents"]), seed=SEED)  # fmt: skip
    np.testing.assert_array_equal(dyn.pairs, ds.pairs)
    dyn.set_epoch(1)
    ds.set_epoch(4)
    for i in range(len(ds)):
        for k, v in ds[i].items():
            np.testing.assert_array_equal(v, dyn[i][k])


def test_stored_mask_statistics(root, tmp_path):
    """15% of the maskable tokens (random rounding per example), 80% [MASK] / 10% random / 10% unchanged."""
    out = preprocess(root / "corpus.txt", root / "tok", tmp_path / "c", num_workers=1, progress=False,
                     static=google(8, (64,), eval_fraction=0.0))  # fmt: skip
    tc = TokenCorpus(out)
    tok = tc.tokenizer
    special = np.array(tok.special_ids())
    ds = PretrainDataset(tc, max_seq_length=64, mode="nsp", short_seq_prob=0.1, scheme="subword", static=True)
    masked = maskable = n_mask = n_same = n_rand = 0
    for epoch in range(8):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            it = ds[i]
            pos = np.flatnonzero(it["labels"] != IGNORE_INDEX)
            n_ok = int((~np.isin(pair_sequence(tc, ds.pairs[i])[0], special)).sum())  # maskable tokens
            assert abs(len(pos) - 0.15 * n_ok) < 1  # floor(0.15 n + u): unbiased rounding
            masked += len(pos)
            maskable += n_ok
            inp, lab = it["input_ids"][pos], it["labels"][pos]
            n_mask += int((inp == tok.mask_id).sum())
            n_same += int((inp == lab).sum())
            n_rand += int(((inp != tok.mask_id) & (inp != lab)).sum())
    assert masked > 2000
    assert abs(masked / maskable - 0.15) < 0.005
    assert abs(n_mask / masked - 0.8) < 0.03
    # a random replacement equal to the original counts as "unchanged" (vocabulary of 150: a small shift)
    assert abs(n_same / masked - 0.1) < 0.03 and abs(n_rand / masked - 0.1) < 0.03
    entry = static_mask_sets(tc)[0]
    assert abs(entry["masked_fraction"] - masked / (ds.lengths().sum() * 8)) < 1e-4


def _run(corpus: Path, path: Path, stop: int = -1, resume: bool = False, **cfg_kw):
    from safetensors.torch import load_file

    kw = dict(corpus=str(corpus), system="google-bert", model="tiny", max_seq_length=48, num_proc=0,
              eval_fraction=0.1, tokens_per_update=0, max_eval_blocks=8)  # fmt: skip
    kw.update(cfg_kw)
    cfg = PretrainConfig(**kw)
    # ~3 steps per epoch: 9 steps cross epochs 0, 1, 2 (copies 0, 1, 2) and the resume lands mid-epoch
    args = TrainingArguments(output_dir=str(path), max_steps=9, per_device_train_batch_size=16, learning_rate=1e-3,
                             warmup_steps=2, save_steps=0, eval_steps=0, logging_steps=1, disable_tqdm=True,
                             report_to="none", stop_at_step=stop, resume=resume, seed=3)  # fmt: skip
    final = pretrain(cfg, args).model_dir
    return load_file(str(final / "model.safetensors")) if final.exists() else None


def test_pretrain_reads_static_masks_and_resumes_exactly(static_corpus, tmp_path, capsys, monkeypatch):
    from spanbert import pretrain as pretrain_module

    tc = TokenCorpus(static_corpus)
    cfg = PretrainConfig(corpus=str(static_corpus), system="google-bert", model="tiny", max_seq_length=48,
                         eval_fraction=0.1)  # fmt: skip
    train_set, held_out = build_datasets(cfg, static_corpus, tc.tokenizer, seed=3)
    assert train_set.static is not None and held_out.dataset.static is None  # held-out: masked as always
    off, _ = build_datasets(PretrainConfig(**{**cfg.__dict__, "static_masks": "off"}), static_corpus, tc.tokenizer, 3)
    assert off.static is None
    n = len(train_set)  # 57 examples, batches of 16: 4 steps an epoch, 9 steps = epochs 0, 1 and part of 2
    copies = []
    for d in range(3):
        train_set.set_epoch(d)
        copies.append(sorted(tuple(train_set[i]["input_ids"].tolist()) for i in range(n)))
    trained: list[tuple[int, ...]] = []
    real_collate = pretrain_module._collate

    def collate(items, **kw):  # records what the trainer is given, in order
        trained.extend(tuple(it["input_ids"].tolist()) for it in items)
        return real_collate(items, **kw)

    monkeypatch.setattr(pretrain_module, "_collate", collate)
    capsys.readouterr()
    straight = _run(static_corpus, tmp_path / "straight")
    monkeypatch.setattr(pretrain_module, "_collate", real_collate)
    assert "static masks: 3 masked copies" in capsys.readouterr().out
    assert sorted(trained[:n]) == copies[0] and sorted(trained[n : 2 * n]) == copies[1]  # epoch e: copy e
    assert set(trained[2 * n : 2 * n + 16]) <= set(copies[2])
    for stop in (6, 8):  # inside epoch 1, and at its end (the resume starts epoch 2, copy 2)
        run = tmp_path / f"stop{stop}"
        assert _run(static_corpus, run, stop=stop) is None
        resumed = _run(static_corpus, run, resume=True)
        for k, v in straight.items():
            assert torch.equal(v, resumed[k]), (stop, k)
    # the stored masks are used: dynamic masking of the same corpus trains other weights
    dynamic = _run(static_corpus, tmp_path / "dynamic", static_masks="off")
    assert any(not torch.equal(v, dynamic[k]) for k, v in straight.items())
    # a resume on a corpus re-made with other copies is refused (the run config records them)
    state = json.loads((tmp_path / "stop8" / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["run_config"]["StaticMasks"] == {"dupe_factor": 3, "seed": SEED}


def test_seq_length_schedule_reads_each_length_s_masks(static_corpus, tmp_path, capsys):
    capsys.readouterr()
    assert _run(static_corpus, tmp_path / "sched", seq_length_schedule="24:0.5,48") is not None
    printed = capsys.readouterr().out
    assert "sequence length 24 for steps 1-4" in printed and "sequence length 48 for steps 5-9" in printed
    assert printed.count("static masks: 3 masked copies") == 1  # printed once, for the run; both stages read theirs


def test_settings_mismatch_is_a_clean_error(static_corpus, root, tmp_path, capsys):
    # a system with other examples: single sequences with span masking
    with pytest.raises(SpanBertError) as e:
        _run(static_corpus, tmp_path / "a", system="spanbert")
    msg = str(e.value)
    assert "mode='nsp'" in msg and "mode='single'" in msg and "masking.scheme='subword'" in msg
    assert "masking.scheme='span'" in msg and "--static_masks off" in msg
    # a masking option: both values named
    with pytest.raises(SpanBertError, match=r"masking.mask_prob=0.15.*masking.mask_prob=0.2"):
        build_datasets(PretrainConfig(corpus=str(static_corpus), system="google-bert", max_seq_length=48,
                                      eval_fraction=0.1), static_corpus, None or TokenCorpus(static_corpus).tokenizer,
                       3, MaskingConfig(mask_prob=0.2))  # fmt: skip
    # another held-out split: other training documents
    with pytest.raises(SpanBertError, match=r"documents"):
        _run(static_corpus, tmp_path / "b", eval_fraction=0.3)
    # a length with no stored set
    with pytest.raises(SpanBertError, match=r"found static masks for max_seq_length 24, 48, expected 32"):
        _run(static_corpus, tmp_path / "c", max_seq_length=32)
    # --static_masks on with a corpus that has none
    plain = preprocess(root / "corpus.txt", root / "tok", tmp_path / "plain", num_workers=1, progress=False)
    with pytest.raises(SpanBertError, match="found no static masks"):
        _run(plain, tmp_path / "d", static_masks="on")
    assert _run(plain, tmp_path / "e") is not None  # auto: dynamic
    with pytest.raises(SpanBertError, match="--static_masks"):
        PretrainConfig(static_masks="sometimes")
    # through the CLI: one line, exit 2, no traceback
    code = cli.main(["pretrain", "--corpus", str(static_corpus), "--system", "spanbert", "--model", "tiny",
                     "--max_seq_length", "48", "--eval_fraction", "0.1", "--max_steps", "1",
                     "--output_dir", str(tmp_path / "f"), "--disable_tqdm", "true"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "found static masks made with" in err and "Traceback" not in err


def test_preprocess_cli_and_bad_options(root, tmp_path, capsys):
    out = tmp_path / "c"
    argv = ["preprocess", "--corpus", str(root / "corpus.txt"), "--tokenizer", str(root / "tok"),
            "--output_dir", str(out), "--num_workers", "1", "--quiet"]  # fmt: skip
    assert cli.main([*argv, "--dupe_factor", "2", "--max_seq_length", "32", "48", "--mask_rates", "80/0/20"]) == 0
    printed = capsys.readouterr().out
    assert "static masks: 2 duplicate(s)" in printed and "<= 32 tokens" in printed and "<= 48 tokens" in printed
    sets = static_mask_sets(TokenCorpus(out))
    assert [s["settings"]["masking"]["replace_probs"] for s in sets] == [[0.8, 0.2, 0.0]] * 2
    for bad, what in ((["--mask_prob", "0.2"], "--mask_prob: found it without --dupe_factor"),
                      (["--dupe_factor", "-1"], "--dupe_factor: found -1"),
                      (["--dupe_factor", "2", "--max_seq_length", "4"], "--max_seq_length: found [4]"),
                      (["--dupe_factor", "2", "--masking", "named_entity"], "no --candidates entity")):  # fmt: skip
        assert cli.main([*argv[:6], str(tmp_path / "bad"), *argv[7:], *bad]) == 2
        assert what in capsys.readouterr().err
        assert not (tmp_path / "bad").exists()


def test_damaged_static_masks_are_a_data_error(static_corpus, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(static_corpus, copy)
    entry = static_mask_sets(TokenCorpus(copy))[1]
    path = copy / entry["dir"] / "dup-001.mlm"
    path.write_bytes(path.read_bytes()[:-4])
    ds = PretrainDataset(copy, max_seq_length=48, mode="nsp", short_seq_prob=0.1, scheme="subword",
                         documents=tuple(entry["settings"]["documents"]), static=True)  # fmt: skip
    ds[0]  # duplicate 0 is intact
    ds.set_epoch(1)
    with pytest.raises(DataError, match="dup-001.mlm"):
        ds[0]
    meta = json.loads((copy / "meta.json").read_text())
    meta["static_masks"][0]["dir"] = "../elsewhere"
    (copy / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="static_masks"):
        TokenCorpus(copy)


def test_interrupted_static_masking_leaves_no_corpus(root, tmp_path, monkeypatch):
    """An error while the masks are written: no output folder, and an earlier corpus there is kept whole."""
    real = preprocess_module.write_static_masks
    calls = []

    def fails_on_the_second_length(*args, **kw):
        calls.append(kw["max_seq_length"])
        if len(calls) == 2:
            real(*args, **kw)  # the second set is complete on disk ...
            raise KeyboardInterrupt  # ... and then the run is interrupted
        return real(*args, **kw)

    # patched where preprocess looks it up
    monkeypatch.setattr(preprocess_module, "write_static_masks", fails_on_the_second_length)
    out = tmp_path / "c"
    with pytest.raises(KeyboardInterrupt):
        preprocess(root / "corpus.txt", root / "tok", out, num_workers=1, progress=False, static=google(2, (24, 48)))
    assert not out.exists() and not list(tmp_path.iterdir())
    preprocess(root / "corpus.txt", root / "tok", out, num_workers=1, progress=False)  # a dynamic corpus
    before = sorted(p.name for p in out.iterdir())
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        preprocess(root / "corpus.txt", root / "tok", out, num_workers=1, progress=False, static=google(2, (24, 48)))
    assert sorted(p.name for p in out.iterdir()) == before and not static_mask_sets(TokenCorpus(out))


def test_preprocess_killed_while_masking_leaves_no_corpus(root, tmp_path):
    """SIGKILL in the middle of the static masks (no Python cleanup runs): nothing looks complete."""
    out = tmp_path / "c"
    cmd = [sys.executable, "-m", "spanbert", "preprocess", "--corpus", str(root / "corpus.txt"), "--tokenizer",
           str(root / "tok"), "--output_dir", str(out), "--num_workers", "1", "--quiet", "--dupe_factor", "5000",
           "--max_seq_length", "24"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list(tmp_path.glob(".c.tmp-*/static-24/dup-001.mlm")):  # masking under way
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the folder the command claimed holds its lock and manifest only (nothing that looks like a corpus), which
    # the next run takes as empty
    assert not is_preprocessed(out)
    assert not out.exists() or {p.name for p in out.iterdir()} <= {folders.LOCK, folders.MANIFEST}
