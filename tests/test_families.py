"""Every model family through every task (issue 21): the one protocol, the one loader, and each task's
fine-tune -> predict -> evaluate at tiny size (QA, GLUE, NER in three heads, SWAG, relation extraction,
coreference, constituency parsing) for the BERT encoder, its left-to-right variant and the
two-tower cloze model. Scores are not asserted here (one training step of a random tiny model); what is
asserted is that each family runs every path, saves a folder naming its family, loads it back through
the one loader and scores it with the task's metric. The tasks' own tests pin the numbers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from spanbert import cloze, families, modernbert
from spanbert.cli import main
from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.model import Encoder

FAMILY_NAMES = ("bert", "ltr", "two-tower", "modernbert")
WORDS = "the a movie film plot was very good bad great awful Mary John Paris Berlin saw met in at said".split()
PEOPLE, PLACES = ["Mary", "John"], ["Paris", "Berlin"]


def sentences(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(4, 7))] for _ in range(n)]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny saved model of each family, each with a vocabulary that covers the task texts."""
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("families")
    texts = [" ".join(s) for s in sentences(200)] * 3
    tok = train_tokenizer(None, 200, texts=texts, show_progress=False)
    out: dict[str, Path] = {}
    for name, causal in (("bert", False), ("ltr", True)):
        torch.manual_seed(0)
        cfg = model_config("tiny", vocab_size=tok.vocab_size, is_decoder=causal, max_position_embeddings=128)
        Encoder(cfg).save_pretrained(root / name, tokenizer=tok)
        out[name] = root / name
    bpe = cloze.train_cloze_tokenizer(None, 400, texts=texts)
    torch.manual_seed(0)
    lm = cloze.build_model(cloze.cloze_config("tiny", d_model=32, num_heads=2, ffn_dim=64, final_heads=2), bpe)
    lm.save_pretrained(root / "two-tower", tokenizer=bpe)
    out["two-tower"] = root / "two-tower"
    from spanbert.tokenization import train_byte_level_tokenizer

    bbpe = train_byte_level_tokenizer(None, 400, texts=texts)
    torch.manual_seed(0)
    ids = dict(pad_token_id=bbpe.pad_id, cls_token_id=bbpe.cls_id, sep_token_id=bbpe.sep_id)
    # local window 8: the 64-token tasks run local layers (chunked beyond 4 x 4 tokens)
    cfg = modernbert.modernbert_config("tiny", vocab_size=bbpe.vocab_size, local_attention=8, **ids)
    modernbert.Encoder(cfg).save_pretrained(root / "modernbert", tokenizer=bbpe)
    out["modernbert"] = root / "modernbert"
    return out


TRAIN = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--device", "cpu", "--disable_tqdm",
         "--report_to", "none", "--save_steps", "0", "--logging_steps", "1000", "--warmup_steps", "0"]  # fmt: skip


def run(argv: list[str], capsys) -> dict | None:
    """`spanbert ARGV` in-process; the JSON it printed last (evaluate), if any."""
    capsys.readouterr()
    assert main(argv) == 0, argv
    text = capsys.readouterr().out
    start = text.rfind("\n{")
    start = 0 if text.startswith("{") else start
    return json.loads(text[start:]) if start >= 0 and text.strip().endswith("}") else None


def saved_family(folder: Path) -> str:
    return families.family_of(folder)


EXPECTED = {"bert": "bert", "ltr": "bert", "two-tower": cloze.MODEL_TYPE, "modernbert": modernbert.MODEL_TYPE}
PREFIX = {"bert": ("Bert", "SpanBert"), "ltr": ("Bert", "SpanBert"), "two-tower": "TwoTower", "modernbert": "SpanbertModernBert"}


# ---------------------------------------------------------------------------------------------- the protocol


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_every_family_has_the_protocol(models, name):
    encoder = families.load_encoder(models[name], add_pooling_layer=True)
    tok = families.load_framed_tokenizer(models[name])
    assert not encoder.training and families.family_of(models[name]) == EXPECTED[name]
    a, b = tok.encode("the movie was good").ids.tolist(), tok.encode("Mary saw John").ids.tolist()
    from spanbert.tasks.classification import pair_input

    ids, _, _ = pair_input(tok.cls_id, tok.sep_id, a, b, 64, tok.mid_id)
    if name == "two-tower":  # §4: <s> a <sep> b </s>
        cfg = encoder.config
        assert (ids[0], ids[len(a) + 1], ids[-1]) == (cfg.bos_id, cfg.sep_id, cfg.eos_id)
    else:  # [CLS] a [SEP] b [SEP]
        assert (ids[0], ids[len(a) + 1], ids[-1]) == (tok.cls_id, tok.sep_id, tok.sep_id)
    x = torch.as_tensor(ids)[None].repeat(2, 1)
    mask = torch.ones_like(x)
    mask[1, -3:] = 0
    hidden = encoder(x, mask)
    assert hidden.shape == (2, x.shape[1], encoder.hidden_size)
    assert torch.all(hidden[1, -3:] == 0)  # padding is zero in every family
    layers = encoder(x, mask, output_hidden_states=True)
    assert len(layers) == encoder.num_layers + 1 and torch.allclose(layers[-1], hidden, atol=1e-6)
    assert encoder.sentence(hidden, mask, x).shape == (2, encoder.sentence_size)
    assert encoder.config_json()["model_type"] == EXPECTED[name]
    habits = encoder.habits
    assert (habits.output_scale, habits.zero_init_head, habits.tagger) == (
        (16.0, True, "bilstm-crf") if name == "two-tower" else (1.0, False, "linear")
    )


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_every_family_checkpoints_its_layers_to_the_same_gradients(models, name):
    # `Family.set_gradient_checkpointing` (coref's --gradient_checkpointing) is the protocol's, in every family
    encoder = families.load_encoder(models[name])
    encoder.train()
    from spanbert.dropout import set_dropout

    set_dropout(encoder, 0.0)
    x = torch.as_tensor(families.load_framed_tokenizer(models[name]).encode("the movie was good").ids)[None]
    grads = []
    for on in (False, True):
        encoder.zero_grad()
        encoder.set_gradient_checkpointing(on)
        encoder(x, torch.ones_like(x)).square().sum().backward()
        grads.append([p.grad.clone() for p in encoder.parameters() if p.grad is not None])
    encoder.set_gradient_checkpointing(False)
    assert grads[0] and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))
    assert encoder.ffn_size > 0


def test_the_one_loader_reads_every_layout(models, tmp_path):
    """HF BERT without model_type, Google's bert_config.json, a fairseq state dict, both families."""
    from spanbert.checkpoints import load_checkpoint

    raw, state = load_checkpoint(models["bert"])
    hf = tmp_path / "hf"
    hf.mkdir()
    cfg = {k: v for k, v in raw.items() if k != "model_type"}
    (hf / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(hf / "model.safetensors"))
    google = tmp_path / "google"
    google.mkdir()
    (google / "bert_config.json").write_text(json.dumps(cfg))
    torch.save({"decoder." + k: v for k, v in state.items()}, google / "pytorch_model.bin")  # fairseq-era names
    for folder in (hf, google):
        assert families.family_of(folder) == "bert"
        enc = families.load_encoder(folder)
        assert torch.equal(enc.embeddings.word_embeddings.weight, state["embeddings.word_embeddings.weight"])
    two = families.load_encoder(models["two-tower"])
    assert isinstance(two, cloze.TwoTowerEncoder)
    pre, _ = cloze.load_two_tower(models["two-tower"])
    assert torch.equal(two.lm.embed_tokens.weight, pre.embed_tokens.weight)
    with pytest.raises(SpanBertError, match="model folder not found"):
        families.load_encoder(tmp_path / "missing")


@pytest.mark.parametrize("sentence", ["the man sat", "Mary saw John in Paris .", "don't stop-gap 3.5 U.S."])
def test_byte_level_words_are_encoded_as_in_running_text(sentence):
    """Issue 21.5: CoNLL words through a byte-level BPE vocabulary get the leading-space marker they have
    in running text (`the Ġman Ġsat`), so word-level tasks see the ids pre-training saw."""
    tok = cloze.train_cloze_tokenizer(None, 320, texts=[sentence, "the man sat on the mat"] * 20)
    words = sentence.split()
    by_words = tok.encode_words(words)
    assert by_words.ids.tolist() == tok.encode(sentence).ids.tolist()
    assert sorted(set(by_words.word_ids.tolist())) == list(range(len(words)))
    for k, w in enumerate(words):  # offsets stay positions inside each word
        pieces = by_words.offsets[by_words.word_ids == k]
        assert pieces[0][0] == 0 and pieces[-1][1] == len(w)


# ---------------------------------------------------------------------------------------------- every task


def _write_glue(folder: Path, pair: bool) -> list[str]:
    folder.mkdir()
    rows = sentences(24)
    if pair:
        head, test_head = "index\tsentence1\tsentence2\tlabel\n", "index\tsentence1\tsentence2\n"
        lab = ("entailment", "not_entailment")
        body = "".join(f"{i}\t{' '.join(s)}\t{' '.join(s[:3])}\t{lab[i % 2]}\n" for i, s in enumerate(rows))
        test = "".join(f"{i}\t{' '.join(s)}\t{' '.join(s[:3])}\n" for i, s in enumerate(rows))
        task = "RTE"
    else:
        head, test_head = "sentence\tlabel\n", "index\tsentence\n"
        body = "".join(f"{' '.join(s)}\t{i % 2}\n" for i, s in enumerate(rows))
        test = "".join(f"{i}\t{' '.join(s)}\n" for i, s in enumerate(rows))
        task = "SST-2"
    (folder / "train.tsv").write_text(head + body)
    (folder / "dev.tsv").write_text(head + body)
    (folder / "test.tsv").write_text(test_head + test)
    return ["glue", "--task", task, "--data_dir", str(folder)]


def _write_conll(path: Path) -> None:
    rng = random.Random(1)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(16):
        for _ in range(rng.randint(2, 3)):
            if rng.random() < 0.5:
                w, t = rng.choice(PEOPLE + PLACES), None
                t = "B-PER" if w in PEOPLE else "B-LOC"
                lines.append(f"{w} NNP B-NP {t}")
            lines.append(f"{rng.choice(WORDS[:10])} DT B-NP O")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def _write_squad(path: Path) -> None:
    rng = random.Random(2)
    data = []
    for a in range(4):
        context = " ".join(" ".join(s) for s in sentences(3, a)) + " Mary was in Paris ."
        start = context.index("Paris")
        qas = [{"id": f"q{a}-{k}", "question": "where was Mary ?",
                "answers": [{"text": "Paris", "answer_start": start}]} for k in range(2)]  # fmt: skip
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    rng.shuffle(data)
    path.write_text(json.dumps({"version": "1.1", "data": data}))


def _write_swag(path: Path) -> None:
    header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
    rows = [header]
    for i, s in enumerate(sentences(12, 3)):
        ends = [" ".join(sentences(1, 10 * i + k)[0][:3]) for k in range(4)]
        rows.append(f"v{i},{i},{' '.join(s)} Mary,{' '.join(s)},Mary,gold,{','.join(ends)},{i % 4}")
    path.write_text("\n".join(rows) + "\n")


def _write_semeval(path: Path) -> None:
    rels = ["Cause-Effect(e1,e2)", "Other"]
    blocks = []
    for i, s in enumerate(sentences(16, 4)):
        text = f"<e1>{s[0]}</e1> {' '.join(s[1:-1])} <e2>{s[-1]}</e2> ."
        blocks.append(f'{i + 1}\t"{text}"\n{rels[i % 2]}\nComment:\n')
    path.write_text("\n".join(blocks) + "\n")


def _write_tacred(path: Path) -> None:
    records = []
    for i, s in enumerate(sentences(16, 5)):
        tokens = ["Mary", *s, "Paris"]
        rel = "per:cities_of_residence" if i % 2 else "no_relation"
        records.append(dict(id=f"r{i}", relation=rel, token=tokens, subj_start=0, subj_end=0,
                            obj_start=len(tokens) - 1, obj_end=len(tokens) - 1, subj_type="PERSON", obj_type="CITY"))  # fmt: skip
    path.write_text(json.dumps(records))


def _write_coref(path: Path) -> None:
    from spanbert.tasks.coref import CorefDocument, write_conll

    sents = [["Mary", "saw", "the", "old", "man", "."], ["She", "waved", "to", "him", "."]] * 2
    clusters = [[(0, 0), (6, 6), (11, 11), (17, 17)], [(2, 4), (9, 9), (13, 15), (20, 20)]]
    docs = [CorefDocument(f"doc{i}", 0, sents, clusters=clusters) for i in range(2)]
    write_conll(path, docs)


def _write_trees(path: Path) -> None:
    rng = random.Random(6)
    trees = []
    for _ in range(12):
        subj, verb, obj = rng.choice(PEOPLE), rng.choice(["saw", "met"]), rng.choice(PLACES + PEOPLE)
        trees.append(f"(TOP (S (NP (NNP {subj})) (VP (VBD {verb}) (NP (NNP {obj}))) (. .)))")
    path.write_text("\n".join(trees) + "\n")


def task_commands(task: str, model: Path, tmp: Path) -> list[list[str]]:
    """finetune, predict and evaluate command lines of ``task`` on tiny synthetic data."""
    out = tmp / "ft"
    if task in ("sst2", "rte"):
        glue = _write_glue(tmp / "glue", pair=task == "rte")
        return [["finetune", *glue, "--model", str(model), "--output_dir", str(out), *TRAIN],
                ["predict", *glue, "--model", str(out), "--output_dir", str(tmp / "sub"), "--disable_tqdm"],
                ["evaluate", *glue, "--model", str(out), "--disable_tqdm"]]  # fmt: skip
    if task in ("ner", "ner-crf", "ner-features"):
        data = tmp / "ner.txt"
        _write_conll(data)
        tagger = {"ner": ["--tagger", "linear"], "ner-crf": ["--tagger", "bilstm-crf"],
                  "ner-features": ["--features", "last_hidden", "--feature_cache", str(tmp / "cache")]}[task]  # fmt: skip
        return [["finetune", "ner", "--train_file", str(data), "--validation_file", str(data), "--model", str(model),
                 "--output_dir", str(out), *tagger, *TRAIN],
                ["predict", "ner", "--data", str(data), "--model", str(out), "--output", str(tmp / "p.txt"),
                 "--disable_tqdm"],
                ["evaluate", "ner", "--data", str(data), "--predictions", str(tmp / "p.txt")]]  # fmt: skip
    if task == "squad":
        data = tmp / "squad.json"
        _write_squad(data)
        return [["finetune", "squad", "--train_file", str(data), "--validation_file", str(data), "--model", str(model),
                 "--output_dir", str(out), "--max_seq_length", "64", "--doc_stride", "32", *TRAIN],
                ["predict", "squad", "--model", str(out), "--data", str(data), "--output", str(tmp / "p.json"),
                 "--disable_tqdm"],
                ["evaluate", "squad", "--data", str(data), "--predictions", str(tmp / "p.json")]]  # fmt: skip
    if task == "swag":
        data = tmp / "swag.csv"
        _write_swag(data)
        return [["finetune", "swag", "--train_file", str(data), "--validation_file", str(data), "--model", str(model),
                 "--output_dir", str(out), "--max_seq_length", "32", *TRAIN],
                ["predict", "swag", "--data", str(data), "--model", str(out), "--output", str(tmp / "p.csv"),
                 "--disable_tqdm"],
                ["evaluate", "swag", "--data", str(data), "--predictions", str(tmp / "p.csv")]]  # fmt: skip
    if task in ("semeval", "tacred"):
        data = tmp / ("sem.TXT" if task == "semeval" else "tacred.json")
        (_write_semeval if task == "semeval" else _write_tacred)(data)
        return [["finetune", task, "--train_file", str(data), "--validation_file", str(data), "--model", str(model),
                 "--output_dir", str(out), "--max_seq_length", "32", *TRAIN],
                ["predict", task, "--data", str(data), "--model", str(out), "--output", str(tmp / "p.txt"),
                 "--disable_tqdm"],
                ["evaluate", task, "--data", str(data), "--model", str(out), "--disable_tqdm"]]  # fmt: skip
    if task == "parse":
        data = tmp / "trees.txt"
        _write_trees(data)
        return [["finetune", "parse", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--output_dir", str(out), *TRAIN],
                ["predict", "parse", "--model", str(out), "--data", str(data), "--output", str(tmp / "p.txt"),
                 "--disable_tqdm"],
                ["evaluate", "parse", "--data", str(data), "--predictions", str(tmp / "p.txt")]]  # fmt: skip
    assert task == "coref"
    data = tmp / "coref.conll"
    _write_coref(data)
    return [["finetune", "coref", "--train", str(data), "--dev", str(data), "--model", str(model),
             "--output_dir", str(out), "--max_seq_length", "16", "--ffnn_size", "16", "--feature_size", "4",
             "--max_steps", "2", "--device", "cpu", "--disable_tqdm", "--report_to", "none", "--save_steps", "0",
             "--logging_steps", "1000", "--warmup_steps", "0"],
            ["predict", "coref", "--model", str(out), "--data", str(data), "--output", str(tmp / "p.conll")],
            ["evaluate", "coref", "--gold", str(data), "--predictions", str(tmp / "p.conll")]]  # fmt: skip


TASKS = ("sst2", "rte", "ner", "ner-crf", "ner-features", "squad", "swag", "semeval", "tacred", "coref", "parse")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_every_family_through_every_task(models, name, task, tmp_path, capsys):
    finetune, predict, evaluate = task_commands(task, models[name], tmp_path)
    run(finetune, capsys)
    out = tmp_path / "ft"
    config = json.loads((out / "config.json").read_text())
    if task == "ner-features":  # the tagger's own folder names the encoder it reads
        assert families.family_of(config["spanbert"]["encoder"]) == EXPECTED[name]
        run(predict, capsys)
        assert run(evaluate, capsys)
        return
    assert config["model_type"] == EXPECTED[name]
    arch = config["architectures"][0]
    assert arch.startswith(PREFIX[name])
    if name == "ltr":
        assert config["is_decoder"] is True  # §5.1: the left-to-right constraint is kept at fine-tuning
    run(predict, capsys)
    scores = run(evaluate, capsys)
    assert scores, "evaluate prints the task's scores as JSON"


def test_a_model_that_cannot_serve_the_task_is_refused_before_reading_data(models, tmp_path, cli_error):
    """Issue 21.6: a pre-trained-only folder asked to predict, a NER model given to predict glue."""
    missing = tmp_path / "never-read.tsv"
    cli_error(["predict", "ner", "--model", str(models["two-tower"]), "--data", str(missing), "--output",
               str(tmp_path / "o.txt")], names=models["two-tower"], contains="expected a NER model")  # fmt: skip
    ner_cmds = task_commands("ner", models["bert"], tmp_path)
    main(ner_cmds[0])
    glue_dir = tmp_path / "missing-glue"
    cli_error(["predict", "glue", "--task", "SST-2", "--data_dir", str(glue_dir), "--model", str(tmp_path / "ft"),
               "--output_dir", str(tmp_path / "sub")], names=tmp_path / "ft", contains="expected a GLUE model")  # fmt: skip
    cli_error(["predict", "squad", "--model", str(tmp_path / "ft"), "--data", str(missing), "--output",
               str(tmp_path / "p.json")], names=tmp_path / "ft", contains="expected a question-answering model")  # fmt: skip
