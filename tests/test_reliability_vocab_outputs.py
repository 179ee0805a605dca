"""Issue 58: a model's ids and its vocabulary always agree, outputs never replace what is not a file of ours,
paths read one way, and the debris and dead ends of the audit (docs/reliability.md, "Vocabularies, outputs
that are not files, paths (issue 58)"). Each test reproduces the audit's case as a user meets it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, synthetic_docs, write_txt
from test_malformed_tasks import CONLL, SQUAD, models  # noqa: F401 - the module-scoped tiny models

from spanbert import vocab_match
from spanbert.cli import main
from spanbert.errors import DataError
from spanbert.preprocess import preprocess
from spanbert.tokenization import load_tokenizer, train_tokenizer

PRETRAIN = ["--model", "tiny", "--max_steps", "1", "--max_seq_length", "32", "--per_device_train_batch_size", "4",
            "--report_to", "none", "--disable_tqdm", "--device", "cpu"]  # fmt: skip
FT = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu", "--save_steps", "0"]
OTHER_WORDS = "zebra yak xylophone walrus violin umbrella tiger sofa rabbit quilt penguin orange nest mango".split()


@pytest.fixture(scope="module")
def vocabs(tmp_path_factory) -> dict[str, Path]:
    """A corpus prepared with vocabulary A, and B: another vocabulary of the same size (other ids)."""
    t = tmp_path_factory.mktemp("vocabs")
    text = write_txt(t / "a.txt", synthetic_docs(40))
    rng = np.random.default_rng(1)
    other = t / "b.txt"
    other.write_text(text.read_text() + "\n\n".join(" ".join(rng.choice(OTHER_WORDS, 30)) for _ in range(40)) + "\n")
    train_tokenizer([text], 200, t / "A", show_progress=False)
    train_tokenizer([other], 200, t / "B", show_progress=False)
    assert load_tokenizer(t / "A").vocab_size == load_tokenizer(t / "B").vocab_size  # only the ids differ
    preprocess(text, t / "A", t / "P", num_workers=1, progress=False)
    return {"text": text, "A": t / "A", "B": t / "B", "P": t / "P", "root": t}


# ---------------------------------------------------------------------------------------------
# 58.1: a vocabulary other than the one behind the ids


def test_pretrain_refuses_a_tokenizer_other_than_the_corpus_ids(vocabs, tmp_path, cli_error):
    """`pretrain --corpus P --tokenizer OTHER` trained on P's ids and exported OTHER's vocab.txt."""
    err = cli_error(["pretrain", "--corpus", vocabs["P"], "--tokenizer", vocabs["B"], "--output_dir", tmp_path / "r",
                     *PRETRAIN], names=vocabs["B"], contains="--tokenizer: found", out=tmp_path)  # fmt: skip
    assert "ids name other tokens" in err and str(vocabs["P"]) in err
    assert not (tmp_path / "r").exists()


def test_the_corpus_records_its_vocabulary_and_an_old_corpus_is_compared_by_content(vocabs, tmp_path, cli_error):
    meta = json.loads((vocabs["P"] / "meta.json").read_text())
    assert meta["vocab_fingerprint"] == vocab_match.tokenizer_fingerprint(load_tokenizer(vocabs["A"]))
    assert all(s["max_id"] < meta["vocab_size"] for s in meta["shards"])
    old = tmp_path / "old"
    shutil.copytree(vocabs["P"], old)  # a corpus prepared before the fingerprint: its tokenizer/ decides
    meta.pop("vocab_fingerprint")
    (old / "meta.json").write_text(json.dumps(meta))
    cli_error(["pretrain", "--corpus", old, "--tokenizer", vocabs["B"], "--output_dir", tmp_path / "r", *PRETRAIN],
              names=vocabs["B"], contains="ids name other tokens", out=tmp_path / "r")  # fmt: skip
    # the same vocabulary in another folder is fine: the fingerprint (or the content) matches
    same = tmp_path / "same"
    shutil.copytree(vocabs["A"], same)
    assert main(["pretrain", "--corpus", str(vocabs["P"]), "--tokenizer", str(same), "--output_dir",
                 str(tmp_path / "ok"), *PRETRAIN]) == 0  # fmt: skip


def test_a_vocab_size_the_corpus_does_not_have_is_refused_not_ignored(vocabs, tmp_path, cli_error):
    """`pretrain --corpus P --vocab_size 500` exported P's 200 tokens and ignored the option."""
    cli_error(["pretrain", "--corpus", vocabs["P"], "--vocab_size", "500", "--output_dir", tmp_path / "r", *PRETRAIN],
              names=vocabs["P"], contains="--vocab_size: found 500", out=tmp_path)  # fmt: skip
    cli_error(["pretrain", "--corpus", vocabs["text"], "--tokenizer", vocabs["A"], "--vocab_size", "500",
               "--output_dir", tmp_path / "r", *PRETRAIN], names=vocabs["A"], contains="--vocab_size", out=tmp_path)  # fmt: skip


def test_a_vocabulary_of_special_tokens_only_or_mostly_unk_is_refused(vocabs, tmp_path, cli_error):
    """A vocab.txt of the 5 special tokens: every word [UNK], it trained, exit 0."""
    specials = tmp_path / "specials"
    specials.mkdir()
    (specials / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    cli_error(["pretrain", "--corpus", vocabs["text"], "--tokenizer", specials, "--output_dir", tmp_path / "r", *PRETRAIN],
              names=specials / "vocab.txt", contains="only the 5 special tokens", out=tmp_path)  # fmt: skip
    few = tmp_path / "few"  # a vocabulary that covers almost nothing of the text
    few.mkdir()
    (few / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzebra\n")
    cli_error(["preprocess", "--corpus", vocabs["text"], "--tokenizer", few, "--output_dir", tmp_path / "c", "--quiet"],
              names=few, contains="are [UNK]", out=tmp_path)  # fmt: skip


def test_finetune_refuses_a_tokenizer_other_than_the_models(models, tmp_path, cli_error):  # noqa: F811
    """`finetune ner --model M --tokenizer OTHER` fine-tuned M through OTHER and saved OTHER as its tokenizer."""
    other = tmp_path / "other"
    train_tokenizer(None, 120, other, texts=[" ".join(OTHER_WORDS)] * 20, show_progress=False, min_frequency=1)
    conll = tmp_path / "train.conll"
    conll.write_text(CONLL)
    cli_error(["finetune", "ner", "--model", models["enc"], "--tokenizer", other, "--train", conll, "--output_dir",
               tmp_path / "run", *FT], names=other, contains="--tokenizer: found", out=tmp_path)  # fmt: skip
    cli_error(["fill", "--model", models["enc"], "--tokenizer", other, "--text", "Alice [MASK] here ."], names=other,
              contains="ids name other tokens", out=tmp_path)  # fmt: skip


def test_a_tokenizer_whose_casing_disagrees_with_the_model_is_said(models, tmp_path, capsys):  # noqa: F811
    """A transformers-saved tokenizer with do_lower_case=True on a cased model: no note."""
    lower = tmp_path / "lower"
    lower.mkdir()
    shutil.copy(models["enc"] / "vocab.txt", lower / "vocab.txt")
    (lower / "tokenizer_config.json").write_text('{"do_lower_case": true, "tokenizer_class": "BertTokenizer"}')
    conll = tmp_path / "train.conll"
    conll.write_text(CONLL)
    capsys.readouterr()
    assert main(["finetune", "ner", "--model", str(models["enc"]), "--tokenizer", str(lower), "--train", str(conll),
                 "--output_dir", str(tmp_path / "run"), *FT]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert f"warning: {lower} (--tokenizer) lower-cases its input" in err and "keeps the case" in err, err


def test_a_tokenizer_with_more_ids_than_the_embedding_rows_is_refused(models, tmp_path, cli_error):  # noqa: F811
    model = tmp_path / "m"
    shutil.copytree(models["enc"], model)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)  # as the official SpanBERT release: no vocabulary of its own
    big = tmp_path / "big"
    train_tokenizer(None, 400, big, texts=[" ".join(OTHER_WORDS + list("abcdefghij"))] * 50, show_progress=False,
                    min_frequency=1)  # fmt: skip
    rows = json.loads((model / "config.json").read_text())["vocab_size"]
    if load_tokenizer(big).vocab_size <= rows:
        pytest.skip("the trained vocabulary is not larger than the tiny model's rows")
    conll = tmp_path / "train.conll"
    conll.write_text(CONLL)
    cli_error(["finetune", "ner", "--model", model, "--tokenizer", big, "--train", conll, "--output_dir",
               tmp_path / "run", *FT], names=big, contains="embedding rows", out=tmp_path)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# 58.6: ids beyond the vocabulary in a shard


def _damaged(vocabs, tmp_path: Path, keep_record: bool) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(vocabs["P"], bad)
    ids = np.memmap(bad / "shard-00000.ids", dtype=np.uint16, mode="r+")
    ids[7] = 60000
    ids.flush()
    meta = json.loads((bad / "meta.json").read_text())
    for s in meta["shards"]:
        if keep_record:
            s["max_id"] = 60000
        else:
            s.pop("max_id")  # a corpus prepared before the record: checked when the shard is first read
    (bad / "meta.json").write_text(json.dumps(meta))
    return bad


@pytest.mark.parametrize("record", [True, False], ids=["recorded-max-id", "old-corpus"])
def test_ids_beyond_the_vocabulary_are_one_error_naming_the_shard(vocabs, tmp_path, cli_error, record):
    """They passed the corpus checks and crashed at step 1 with `IndexError: index out of range in self`."""
    bad = _damaged(vocabs, tmp_path, record)
    cli_error(["pretrain", "--corpus", bad, "--output_dir", tmp_path / "r", *PRETRAIN],
              names=bad / "shard-00000.ids", contains="found token id 60000", out=tmp_path / "r")  # fmt: skip
    assert not (tmp_path / "r").exists()


def test_ids_past_the_vocabulary_that_the_record_does_not_know_are_the_same_error(vocabs, tmp_path):
    """A shard damaged after meta.json recorded its largest id (the audit's D23): an IndexError deep in
    training, naming no file; the ids read are checked too."""
    from spanbert.corpus import TokenCorpus

    bad = _damaged(vocabs, tmp_path, keep_record=True)
    meta = json.loads((bad / "meta.json").read_text())
    meta["shards"][0]["max_id"] = 199  # the record says all is well
    (bad / "meta.json").write_text(json.dumps(meta))
    corpus = TokenCorpus(bad)
    assert corpus.tokens(0, 7)[0].max() < 200  # the block before the damage reads
    with pytest.raises(DataError, match=r"bad/shard-00000\.ids: found token id 60000 at position 7, expected ids below "
                                        r"the 200 .*max_id 199"):  # fmt: skip
        corpus.tokens(4, 12)


def test_an_old_corpus_is_not_read_whole_at_the_start(vocabs, tmp_path):
    """The record replaces a scan; without it a shard is read only when its tokens are first read."""
    from spanbert.corpus import TokenCorpus

    bad = _damaged(vocabs, tmp_path, keep_record=False)
    corpus = TokenCorpus(bad)  # opens: no token read, no error yet
    assert corpus._ids_checked == [False]
    with pytest.raises(Exception, match="found token id 60000"):
        corpus.tokens(0, 4)


@pytest.mark.slow
def test_ids_beyond_the_vocabulary_under_torchrun_are_the_same_error(vocabs, tmp_path):
    bad = _damaged(vocabs, tmp_path, keep_record=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "spanbert", "pretrain", "--corpus", str(bad), "--output_dir", str(tmp_path / "r"), *PRETRAIN]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0
    # the ranks' own output: what comes before the launcher reports the failed child (its ChildFailedError
    # traceback is torchrun's, printed for any rank that exits non-zero)
    ranks = out.stderr.split("failed (exitcode", 1)[0]
    assert "Traceback" not in ranks and "IndexError" not in out.stderr, out.stderr[-2000:]
    assert f"{bad / 'shard-00000.ids'}: found token id 60000" in out.stderr
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------------------------
# 58.2: outputs that are not regular files are written through


def _ner_predict(models, tmp_path: Path, output) -> list[str]:  # noqa: F811
    conll = tmp_path / "data.conll"
    conll.write_text(CONLL)
    return ["predict", "ner", "--model", str(models["ner"]), "--data", str(conll), "--output", str(output),
            "--device", "cpu", "--disable_tqdm"]  # fmt: skip


def test_a_named_pipe_output_is_written_through_to_its_reader(models, tmp_path):  # noqa: F811
    """The reader of a named pipe got 0 bytes and the pipe was replaced by a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(_ner_predict(models, tmp_path, fifo)) == 0
    reader.join(30)
    assert fifo.is_fifo() and got and got[0].count(b"\n") >= 4, got


def test_a_character_device_and_a_link_to_stdout_are_written_through(models, tmp_path, capfd):  # noqa: F811
    dev_null = tmp_path / "null"
    os.mknod(dev_null, 0o666 | 0o020000, os.makedev(1, 3))  # a copy of /dev/null, as the audit made it
    assert main(_ner_predict(models, tmp_path, dev_null)) == 0
    assert dev_null.is_char_device()
    assert main(_ner_predict(models, tmp_path, tmp_path / "plain.txt")) == 0
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    capfd.readouterr()
    assert main(_ner_predict(models, tmp_path, link)) == 0
    said = capfd.readouterr()
    # stdout holds the predictions alone: the "wrote ..." line and the scores after them go to stderr
    assert link.is_symlink() and said.out == (tmp_path / "plain.txt").read_text(), said.out[-300:]
    assert "wrote tags for" in said.err
    assert main(_ner_predict(models, tmp_path, "/dev/stdout")) == 0
    said = capfd.readouterr()
    assert said.out == (tmp_path / "plain.txt").read_text() and "wrote tags for" in said.err
    print("after")  # the command's end put stdout back
    assert capfd.readouterr().out == "after\n"


def test_a_link_to_a_file_keeps_the_link_and_a_socket_is_refused(models, tmp_path, cli_error):  # noqa: F811
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert main(_ner_predict(models, tmp_path, link)) == 0
    assert link.is_symlink() and target.read_text() != "old\n"
    import socket

    sock_path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    try:
        cli_error(_ner_predict(models, tmp_path, sock_path), names=sock_path, contains="found a socket")
    finally:
        s.close()


def test_an_error_while_the_text_is_made_writes_nothing_through(tmp_path):
    from spanbert import utils

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a waiting reader
    try:
        with pytest.raises(RuntimeError), utils.atomic_write(fifo) as f:
            f.write("half")
            raise RuntimeError
        assert os.read(fd, 100) == b""
        with utils.atomic_write(fifo) as f:
            f.write("whole\n")
        assert os.read(fd, 100) == b"whole\n"
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# 58.3: SQuAD 2.0 null odds only where named, or over an earlier run's


def _squad2(models, tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    model = tmp_path / "qa2"
    shutil.copytree(models["qa"], model)
    config = json.loads((model / "config.json").read_text())
    config["spanbert"]["version_2_with_negative"] = True
    (model / "config.json").write_text(json.dumps(config))
    data = tmp_path / "dev.json"
    data.write_text(json.dumps(SQUAD))
    return model, data


def test_squad2_null_odds_never_replace_a_users_file(models, tmp_path, cli_error, capsys):  # noqa: F811
    model, data = _squad2(models, tmp_path)
    out = tmp_path / "d"
    out.mkdir()
    mine = out / "null_odds.json"
    mine.write_text('{"my": "notes"}\n')
    base = ["predict", "squad", "--model", model, "--data", data, "--device", "cpu", "--disable_tqdm"]
    cli_error([*base, "--output", out / "p.json"], names=mine, contains="--null_odds: found", out=out)
    assert mine.read_text() == '{"my": "notes"}\n'
    cli_error([*base, "--output", mine], names=mine, contains="--output: found", out=out)
    cli_error([*base, "--output", out / "p.json", "--null_odds", out / "p.json"], names=out / "p.json",
              contains="--null_odds", out=out)  # fmt: skip
    # named, it is written there; the default name over an earlier run's null odds of these questions is fine
    assert main([str(a) for a in [*base, "--output", out / "p.json", "--null_odds", out / "odds.json"]]) == 0
    mine.unlink()
    for _ in range(2):
        assert main([str(a) for a in [*base, "--output", out / "p.json"]]) == 0
    assert set(json.loads(mine.read_text())) == set(json.loads((out / "p.json").read_text()))


# ---------------------------------------------------------------------------------------------
# 58.5: paths read one way from the command line, a YAML file and Python


def test_paths_are_expanded_or_refused_the_same_way_everywhere(models, tmp_path, cli_error, monkeypatch):  # noqa: F811
    from spanbert import tasks
    from spanbert.errors import SpanBertError

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    conll = tmp_path / "train.conll"
    conll.write_text(CONLL)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("output_dir: ~/run\n")
    assert main(["finetune", "ner", "--model", str(models["enc"]), "--train", str(conll), "--config", str(cfg), *FT]) == 0
    assert (tmp_path / "home" / "run" / "config.json").is_file() and not (tmp_path / "~").exists()
    cli_error(["finetune", "ner", "--model", models["enc"], "--train", conll, "--output_dir", "", *FT],
              contains="--output_dir: found an empty path", out=tmp_path)  # fmt: skip
    with pytest.raises(SpanBertError, match="output_dir: found None"):
        tasks.finetune("ner", model=models["enc"], train=conll, output_dir=None, max_steps=1)
    assert not (tmp_path / "None").exists()
    from spanbert.training_args import TrainingArguments

    assert TrainingArguments(output_dir="~/x").output_dir == str(tmp_path / "home" / "x")
    with pytest.raises(SpanBertError, match="--output_dir"):
        TrainingArguments(output_dir="")


# ---------------------------------------------------------------------------------------------
# 58.7: a dev file with a repeated question id


def test_evaluate_squad_refuses_a_repeated_question_id_naming_the_dev_file(tmp_path, cli_error):
    dev = json.loads(json.dumps(SQUAD))
    qas = dev["data"][0]["paragraphs"][0]["qas"]
    qas.append(dict(qas[0]))
    gold = tmp_path / "dev.json"
    gold.write_text(json.dumps(dev))
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({qa["id"]: "x" for qa in qas}))
    err = cli_error(["evaluate", "squad", "--data", gold, "--predictions", preds], names=gold,
                    contains="duplicate question id")  # fmt: skip
    assert str(preds) not in err


# ---------------------------------------------------------------------------------------------
# 58.8: debris and dead ends


def test_a_cut_or_empty_state_pt_names_its_reason_and_the_checkpoint_before_is_used(tmp_path):
    from spanbert.runs import find_resume_checkpoint

    run = tmp_path / "run"
    for step in (1, 2):
        c = run / f"checkpoint-{step}"
        c.mkdir(parents=True)
        import torch

        torch.save({"step": step}, c / "state.pt")
        (c / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (run / "latest").write_text("checkpoint-2")
    whole = (run / "checkpoint-2" / "state.pt").read_bytes()
    for damaged, reason in ((whole[: len(whole) // 2], "cut short"), (b"", "empty (0 bytes")):
        (run / "checkpoint-2" / "state.pt").write_bytes(damaged)
        ckpt, note = find_resume_checkpoint(run)
        assert ckpt.name == "checkpoint-1" and reason in note and "checkpoint-1" in note, note


def test_a_run_copied_without_its_hidden_files_says_how_to_resume(models, tmp_path, cli_error):  # noqa: F811
    conll = tmp_path / "train.conll"
    conll.write_text(CONLL)
    argv = ["finetune", "ner", "--model", str(models["enc"]), "--train", str(conll), *FT[:-2], "--save_steps", "1"]
    assert main([*argv, "--output_dir", str(tmp_path / "run")]) == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in (tmp_path / "run").iterdir():  # cp -r run/* copy/
        if not p.name.startswith("."):
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, copy / p.name)
    err = cli_error([*argv, "--output_dir", copy, "--resume"], names=copy, contains="without its", out=copy)
    fix = err.split("echo '", 1)[1].split("' >", 1)[0]
    (copy / ".spanbert-manifest.json").write_text(fix)  # what the message says to do
    assert main([*argv, "--output_dir", str(copy), "--resume", "--max_steps", "2"]) == 0


def test_help_from_python_prints_the_usage_and_never_exits(capsys):
    from spanbert import tasks

    assert tasks.finetune("ner", model="m", train="t", output_dir="o", help=True) is None
    assert "--train" in capsys.readouterr().out


def test_a_second_ctrl_c_ends_quietly(vocabs, tmp_path):
    """A second Ctrl-C 20 ms after the first printed a KeyboardInterrupt traceback from an exit hook."""
    cmd = [sys.executable, "-m", "spanbert", "pretrain", "--corpus", str(vocabs["P"]), "--output_dir",
           str(tmp_path / "r"), *PRETRAIN[:2], "--max_steps", "100000", *PRETRAIN[4:]]  # fmt: skip
    # The command as a terminal starts it: Ctrl-C not ignored. A process started with SIGINT ignored keeps
    # it ignored (POSIX, as a shell's `cmd &` is), and the test process may have been left so by an earlier
    # test in the same pytest worker (this test hung twice in a 2-worker suite, never alone).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, inherited)
    deadline = time.monotonic() + 120
    while not (tmp_path / "r" / "checkpoint-1").exists() and not (tmp_path / "r" / "log.jsonl").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # seen once beside a load of 6 on 2 cores: keep what it said, to look at
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running 120 s after two Ctrl-C (SIGINT here was {inherited!r}):\n{out[-2000:]}\n{err[-4000:]}")
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_a_study_rerun_removes_the_temporary_corpus_a_kill_left(tmp_path):
    """A study killed in its shared preprocessing kept `shared/.corpus.tmp-*` after the rerun finished."""
    from spanbert import folders, utils

    shared = tmp_path / "shared"
    shared.mkdir()
    left = shared / ".corpus.tmp-abc123"  # what the kill left (atomic_dir's temporary of shared/corpus)
    (left / "shard-00000.ids").parent.mkdir()
    (left / "shard-00000.ids").write_bytes(b"\0" * 1000)
    other = shared / ".tokenizer.tmp-x"  # another target's: not this writer's to remove
    other.mkdir()
    with folders.Claim(shared / "corpus", "corpus", "spanbert preprocess"):
        with utils.atomic_dir(shared / "corpus") as tmp:
            (tmp / "meta.json").write_text("{}")
    assert not left.exists() and other.exists()
    unheld = shared / ".unheld.tmp-q"
    unheld.mkdir()
    with utils.atomic_dir(shared / "unheld"):  # a target this process does not hold: its temporaries are left
        pass
    assert unheld.exists()
