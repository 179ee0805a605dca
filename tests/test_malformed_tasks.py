"""Malformed inputs of the fine-tuning task commands (squad, mrqa, tacred, semeval, glue, ner): each
case builds one bad input in tmp_path and asserts the clean-error contract through `cli_error`: exit 2,
an ``error:`` line naming the file (and line where there is one), no traceback, nothing left behind."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

SENTENCES = ["Alice was born in Paris .", "Bruno plays the violin .", "Where was Alice born ?", "EU rejects it ."]

SQUAD = {
    "version": "1.1",
    "data": [{"title": "t", "paragraphs": [{"context": "Alice was born in Paris.", "qas": [
        {"id": "q1", "question": "Where was Alice born?", "answers": [{"text": "Paris", "answer_start": 18}]},
    ]}]}],
}  # fmt: skip
MRQA_HEADER = {"header": {"dataset": "X", "split": "dev"}}
MRQA_LINE = {"context": "Alice was born in Paris.", "qas": [{"qid": "m1", "question": "Where was Alice born?",
             "answers": ["Paris"], "detected_answers": [{"text": "Paris", "char_spans": [[18, 22]]}]}]}  # fmt: skip
TACRED = [{"id": "t1", "relation": "per:city_of_birth", "token": ["Alice", "was", "born", "in", "Paris", "."],
           "subj_start": 0, "subj_end": 0, "obj_start": 4, "obj_end": 4, "subj_type": "PERSON",
           "obj_type": "CITY"}]  # fmt: skip
SEMEVAL = '1\t"The <e1>child</e1> was carried into the <e2>cradle</e2> by the mother."\nEntity-Destination(e1,e2)\nComment:\n\n'
CONLL = "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nAlice NNP B-NP B-PER\n"
SST = "sentence\tlabel\nit is good\t1\nit is bad\t0\n"
STSB_HEAD = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
TRAIN = ["--max_steps", "1", "--report_to", "none", "--disable_tqdm", "--device", "cpu", "--save_steps", "0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny pre-trained encoder and untrained task models saved as `spanbert finetune` saves them."""
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tasks import classification as C
    from spanbert.tasks.qa import SpanBertForQuestionAnswering
    from spanbert.tasks.relation import assign_marker_ids, marker_vocabulary
    from spanbert.tasks.task_folders import save_finetuned
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("malformed_models")
    tok = train_tokenizer(None, 120, texts=SENTENCES * 5, show_progress=False, min_frequency=1)
    torch.manual_seed(0)
    config = model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=128)
    Encoder(config).save_pretrained(root / "enc", tokenizer=tok)
    out = {"enc": root / "enc"}
    C.save_model(C.build_model("sequence", out["enc"], 2, seed=0), root / "sst2", tok, "sequence", ["0", "1"],
                 {"task": "glue", "glue_task": "SST-2", "max_seq_length": 32})  # fmt: skip
    C.save_model(C.build_model("token", out["enc"], 3, seed=0), root / "ner", tok, "token", ["O", "B-PER", "I-PER"],
                 {"task": "ner", "max_seq_length": 32})  # fmt: skip
    tok2, markers = assign_marker_ids(tok, marker_vocabulary({"PERSON", "CITY"}))
    rel = C.build_model("sequence", out["enc"], 2, vocab_size=max(markers.values()) + 1, seed=0)
    C.save_model(rel, root / "tacred", tok2, "sequence", ["no_relation", "per:city_of_birth"],
                 {"task": "tacred", "entity_mode": "mask", "entity_markers": markers, "max_seq_length": 32})  # fmt: skip
    qa = SpanBertForQuestionAnswering(config, Encoder(config, add_pooling_layer=False))
    save_finetuned(
        qa, root / "qa", tok, "BertForQuestionAnswering", {"spanbert": {"task": "squad", "max_seq_length": 48}}
    )
    out.update(sst2=root / "sst2", ner=root / "ner", tacred=root / "tacred", qa=root / "qa")
    return out


def _w(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _ran(path: Path, text: str) -> Path:
    """``path`` written as an earlier run writes it: its folder's manifest lists it."""
    from spanbert.folders import claim_manifest, record

    claim_manifest(path.parent, "run", "spanbert finetune")
    record(path)
    return _w(path, text)


def _copy_model(models: dict[str, Path], name: str, tmp: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of a saved model whose config.json is changed by ``edit``."""
    dst = tmp / f"model-{name}"
    shutil.copytree(models[name], dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _mrqa_text(*lines: dict) -> str:
    return "".join(json.dumps(x) + "\n" for x in lines)


def _glue_dir(tmp: Path, name: str, train: str, dev: str | None = None) -> Path:
    d = tmp / name
    _w(d / "train.tsv", train)
    _w(d / "dev.tsv", dev if dev is not None else train)
    return d


# Each case: (tmp, models) -> (argv, the text that must be named (file or file:line), a text the message has)
Case = Callable[[Path, dict], tuple[list, object, str]]


def _squad_ft(tmp, m, train, *extra):
    return [
        "finetune",
        "squad",
        "--model",
        m["enc"],
        "--train_file",
        train,
        "--output_dir",
        tmp / "out",
        *TRAIN,
        *extra,
    ]


def _mrqa_ft(tmp, m, train):
    return ["finetune", "mrqa", "--model", m["enc"], "--train_file", train, "--output_dir", tmp / "out", *TRAIN]


def _squad_eval(data, preds, *extra):
    return ["evaluate", "squad", "--data", data, "--predictions", preds, *extra]


def _rel_ft(tmp, m, task, train, *extra):
    return ["finetune", task, "--model", m["enc"], "--train", train, "--output_dir", tmp / "out", *TRAIN, *extra]


def _glue_ft(tmp, m, task, data):
    return [
        "finetune",
        "glue",
        "--task",
        task,
        "--data_dir",
        data,
        "--model",
        m["enc"],
        "--output_dir",
        tmp / "out",
        *TRAIN,
    ]


def _ner_ft(tmp, m, train, *extra):
    return ["finetune", "ner", "--model", m["enc"], "--train", train, "--output_dir", tmp / "out", *TRAIN, *extra]


def _case_mrqa_to_squad(t, m):
    f = _w(t / "dev.jsonl", _mrqa_text(MRQA_HEADER, MRQA_LINE))
    return _squad_ft(t, m, f), f, "Use the mrqa task"


def _case_mrqa_to_squad_eval(t, m):
    f = _w(t / "dev.jsonl", _mrqa_text(MRQA_LINE, MRQA_LINE))
    p = _w(t / "p.json", '{"m1": "Paris"}')
    return _squad_eval(f, p), f, "Use the mrqa task"


def _case_squad_to_mrqa(t, m):
    f = _w(t / "train.json", json.dumps(SQUAD))
    return _mrqa_ft(t, m, f), f, "Use the squad task"


def _case_squad_pretty_to_mrqa_eval(t, m):
    f = _w(t / "dev.json", json.dumps(SQUAD, indent=2))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    return ["evaluate", "mrqa", "--data", f, "--predictions", p], f, "Use the squad task"


def _case_drop_ids_not_utf8(t, m):
    train = _w(t / "train.json", json.dumps(SQUAD))
    ids = _w(t / "drop.tsv", b"id\n\xff\xfeq1\n")
    return _squad_ft(t, m, train, "--drop_ids", ids), f"{ids}:2", "at byte 3"


def _case_squad_truncated(t, m):
    f = _w(t / "train.json", json.dumps(SQUAD)[:-20])
    return _squad_ft(t, m, f), f"{f}:1", "not valid JSON"


def _case_squad_bad_offset(t, m):
    bad = json.loads(json.dumps(SQUAD))
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    f = _w(t / "train.json", json.dumps(bad))
    return _squad_ft(t, m, f), f, "answer_start=3"


def _case_squad_duplicate_id(t, m):
    bad = json.loads(json.dumps(SQUAD))
    qas = bad["data"][0]["paragraphs"][0]["qas"]
    qas.append(dict(qas[0]))
    f = _w(t / "train.json", json.dumps(bad))
    return _squad_ft(t, m, f), f, "duplicate question id"


def _case_squad_missing_question(t, m):
    bad = json.loads(json.dumps(SQUAD))
    del bad["data"][0]["paragraphs"][0]["qas"][0]["question"]
    f = _w(t / "train.json", json.dumps(bad))
    return _squad_ft(t, m, f), f, "missing field 'question'"


def _case_squad_preds_list(t, m):
    d = _w(t / "dev.json", json.dumps(SQUAD))
    p = _w(t / "p.json", '["Paris"]')
    return _squad_eval(d, p), p, "expected a JSON object"


def _case_squad_preds_number(t, m):
    d = _w(t / "dev.json", json.dumps(SQUAD))
    p = _w(t / "p.json", '{"q1": 3}')
    return _squad_eval(d, p), p, "answer string"


def _case_squad_na_prob_text(t, m):
    d = _w(t / "dev.json", json.dumps({**SQUAD, "version": "v2.0"}))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    na = _w(t / "na.json", '{"q1": "high"}')
    return _squad_eval(d, p, "--na-prob", na), na, "number"


def _case_qa_config_spanbert_not_mapping(t, m):
    model = _copy_model(m, "qa", t, lambda c: c.update(spanbert=[1, 2]))
    d = _w(t / "dev.json", json.dumps(SQUAD))
    argv = ["predict", "squad", "--model", model, "--data", d, "--output", t / "out" / "p.json", "--device", "cpu"]
    return argv, model / "config.json", "expected a mapping"


def _case_qa_config_bad_value(t, m):
    model = _copy_model(m, "qa", t, lambda c: c["spanbert"].update(max_seq_length="long"))
    d = _w(t / "dev.json", json.dumps(SQUAD))
    argv = ["predict", "squad", "--model", model, "--data", d, "--output", t / "out" / "p.json", "--device", "cpu"]
    return argv, model / "config.json", "max_seq_length"


def _case_qa_not_a_qa_model(t, m):
    d = _w(t / "dev.json", json.dumps(SQUAD))
    argv = ["predict", "squad", "--model", m["enc"], "--data", d, "--output", t / "out" / "p.json", "--device", "cpu"]
    return argv, m["enc"], "expected a question-answering model"


def _case_squad_yaml_typo(t, m):
    f = _w(t / "train.json", json.dumps(SQUAD))
    y = _w(t / "c.yaml", "learning_rat: 3.0e-5\n")
    return _squad_ft(t, m, f, "--config", y), y, "learning_rat"


def _case_squad_yaml_bad_value(t, m):
    f = _w(t / "train.json", json.dumps(SQUAD))
    y = _w(t / "c.yaml", "doc_stride: many\n")
    return _squad_ft(t, m, f, "--config", y), y, "doc_stride"


def _case_mrqa_bad_span(t, m):
    bad = json.loads(json.dumps(MRQA_LINE))
    bad["qas"][0]["detected_answers"][0]["char_spans"] = [[18, 99]]
    f = _w(t / "train.jsonl", _mrqa_text(MRQA_HEADER, bad))
    return _mrqa_ft(t, m, f), f"{f}:2", "outside the context"


def _case_mrqa_bad_json_line(t, m):
    f = _w(t / "train.jsonl", _mrqa_text(MRQA_HEADER, MRQA_LINE) + '{"context": "x", "qas": [\n')
    return _mrqa_ft(t, m, f), f"{f}:3", "not valid JSON"


def _case_tacred_not_list(t, m):
    f = _w(t / "train.json", json.dumps({"data": TACRED}))
    return _rel_ft(t, m, "tacred", f), f, "expected a JSON list"


def _case_tacred_span_outside(t, m):
    bad = [dict(TACRED[0], obj_start=4, obj_end=9)]
    f = _w(t / "train.json", json.dumps(bad))
    return _rel_ft(t, m, "tacred", f), f, "obj span [4, 9]"


def _case_tacred_not_utf8(t, m):
    f = _w(t / "train.json", b'[{"id": "\xff"}]')
    return _rel_ft(t, m, "tacred", f), f"{f}:1", "not UTF-8 (invalid start byte at byte 9)"


def _case_tacred_pred_count(t, m):
    d = _w(t / "dev.json", json.dumps(TACRED))
    p = _w(t / "p.txt", "no_relation\nno_relation\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], p, "found 2 predicted labels"


def _case_tacred_pred_unknown_label(t, m):
    d = _w(t / "dev.json", json.dumps(TACRED))
    p = _w(t / "p.txt", "Cause-Effect(e1,e2)\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], f"{p}:1", "expected one of TACRED's 42 relations"


def _case_tacred_config_no_id2label(t, m):
    model = _copy_model(m, "tacred", t, lambda c: c.pop("id2label"))
    d = _w(t / "dev.json", json.dumps(TACRED))
    argv = ["predict", "tacred", "--model", model, "--data", d, "--output", t / "out" / "p.txt", "--device", "cpu"]
    return argv, model / "config.json", "id2label"


def _case_tacred_config_no_markers(t, m):
    model = _copy_model(m, "tacred", t, lambda c: c["spanbert"].pop("entity_markers"))
    d = _w(t / "dev.json", json.dumps(TACRED))
    argv = ["predict", "tacred", "--model", model, "--data", d, "--output", t / "out" / "p.txt", "--device", "cpu"]
    return argv, model / "config.json", "entity_markers"


def _case_tacred_config_num_labels(t, m):
    model = _copy_model(m, "tacred", t, lambda c: c.update(num_labels=5))
    d = _w(t / "dev.json", json.dumps(TACRED))
    argv = ["evaluate", "tacred", "--model", model, "--data", d, "--device", "cpu"]
    return argv, model / "config.json", "num_labels"


def _case_semeval_bad_label(t, m):
    f = _w(t / "TRAIN.TXT", SEMEVAL.replace("Entity-Destination(e1,e2)", "Entity-Dest(e1,e2)"))
    return _rel_ft(t, m, "semeval", f), f"{f}:2", "Entity-Dest"


def _case_semeval_unbalanced_tags(t, m):
    f = _w(t / "TRAIN.TXT", SEMEVAL.replace("</e1>", ""))
    return _rel_ft(t, m, "semeval", f), f"{f}:1", "<e1>"


def _case_semeval_pred_unknown_label(t, m):
    d = _w(t / "TEST.TXT", SEMEVAL)
    p = _w(t / "p.txt", "1\tper:title\n")
    return ["evaluate", "semeval", "--data", d, "--predictions", p], f"{p}:1", "per:title"


def _case_semeval_pred_no_tab(t, m):
    d = _w(t / "TEST.TXT", SEMEVAL)
    p = _w(t / "p.txt", "1 Other\n")
    return ["evaluate", "semeval", "--data", d, "--predictions", p], f"{p}:1", "ID<TAB>label"


def _case_glue_sst_bad_label(t, m):
    d = _glue_dir(t, "SST-2", SST + "fine\t2\n")
    return _glue_ft(t, m, "SST-2", d), f"{d / 'train.tsv'}:4", "label '2'"


def _case_glue_rte_missing_column(t, m):
    d = _glue_dir(t, "RTE", "index\tsentence1\tlabel\n0\tA.\tentailment\n")
    return _glue_ft(t, m, "RTE", d), f"{d / 'train.tsv'}:1", "sentence2"


def _case_glue_mrpc_columns(t, m):
    head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    d = _glue_dir(t, "MRPC", head + "1\t1\t2\tA.\tB.\n0\t3\tA.\n")
    return _glue_ft(t, m, "MRPC", d), f"{d / 'train.tsv'}:3", "found 3 tab-separated columns"


def _case_glue_stsb_nan(t, m):
    d = _glue_dir(t, "STS-B", STSB_HEAD + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\tnan\n")
    return _glue_ft(t, m, "STS-B", d), f"{d / 'train.tsv'}:2", "score 'nan'"


def _case_glue_stsb_range(t, m):
    d = _glue_dir(t, "STS-B", STSB_HEAD + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\t7.5\n")
    return _glue_ft(t, m, "STS-B", d), f"{d / 'train.tsv'}:2", "expected a number in [0, 5]"


def _case_glue_stsb_pred_text(t, m):
    d = _glue_dir(t, "STS-B", STSB_HEAD + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\t2.5\n")
    p = _w(t / "p.tsv", "index\tprediction\n0\thigh\n")
    return ["evaluate", "glue", "--task", "STS-B", "--data_dir", d, "--predictions", p], f"{p}:2", "'high'"


def _case_glue_sst_pred_unknown(t, m):
    d = _glue_dir(t, "SST-2", SST)
    p = _w(t / "p.tsv", "index\tprediction\n0\t1\n1\tpositive\n")
    return ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p], f"{p}:3", "'positive'"


def _case_glue_pred_header(t, m):
    d = _glue_dir(t, "SST-2", SST)
    p = _w(t / "p.tsv", "id\tlabel\n0\t1\n1\t0\n")
    return (
        ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p],
        f"{p}:1",
        "index<TAB>prediction",
    )


def _case_glue_pred_count(t, m):
    d = _glue_dir(t, "SST-2", SST)
    p = _w(t / "p.tsv", "index\tprediction\n0\t1\n")
    return ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p], p, "no prediction for 1 example id(s) ['1']"


def _case_glue_cola_headerless_label(t, m):
    d = _glue_dir(t, "CoLA", "gj04\t1\t\tThe dog barked.\ngj04\tyes\t*\tDog the barked.\n")
    return _glue_ft(t, m, "CoLA", d), f"{d / 'train.tsv'}:2", "label 'yes'"


def _case_glue_mnli_missing_dev(t, m):
    head = "index\tsentence1\tsentence2\tgold_label\n0\tA.\tB.\tneutral\n"
    d = _glue_dir(t, "MNLI", head)
    (d / "dev.tsv").unlink()
    _w(d / "dev_matched.tsv", head)
    return _glue_ft(t, m, "MNLI", d), d / "dev_mismatched.tsv", "not found"


def _case_glue_config_labels_missing(t, m):
    model = _copy_model(m, "sst2", t, lambda c: (c.pop("id2label"), c.pop("label2id")))
    d = _glue_dir(t, "SST-2", SST)
    argv = ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--model", model, "--device", "cpu"]
    return argv, model / "config.json", "id2label"


def _case_glue_config_other_labels(t, m):
    model = _copy_model(m, "sst2", t, lambda c: c.update(id2label={"0": "yes", "1": "no"}))
    d = _glue_dir(t, "SST-2", SST)
    argv = ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--model", model, "--device", "cpu"]
    return argv, model / "config.json", "expected the SST-2 labels"


def _case_glue_wnli_majority_broken(t, m):
    model = _w(t / "wnli" / "majority.json", '{"task": "WNLI"}').parent
    d = _glue_dir(t, "WNLI", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\t1\n")
    argv = ["evaluate", "glue", "--task", "WNLI", "--data_dir", d, "--model", model, "--device", "cpu"]
    return argv, model / "majority.json", "label"


def _case_ner_bad_tag(t, m):
    f = _w(t / "train.txt", CONLL + "Paris NNP B-NP X-LOC\n")
    return _ner_ft(t, m, f), f"{f}:7", "'X-LOC'"


def _case_ner_chunk_tags(t, m):
    # a file of 'word POS chunk' (no NER column): its chunk tags would become entity types NP, VP, ...
    f = _w(t / "train.txt", CONLL + "Paris NNP I-VP\n")
    return _ner_ft(t, m, f), f"{f}:7", "found tag 'I-VP' in 'Paris NNP I-VP', a phrase-chunk tag"


def _case_ner_one_column(t, m):
    f = _w(t / "train.txt", CONLL + "Paris\n")
    return _ner_ft(t, m, f), f"{f}:7", "one column"


def _case_ner_not_utf8(t, m):
    f = _w(t / "train.txt", CONLL.encode() + b"Z\xfcrich NNP B-NP B-LOC\n")
    return _ner_ft(t, m, f), f"{f}:7", "not UTF-8 (invalid start byte at byte 82)"


def _case_ner_pred_words_differ(t, m):
    d = _w(t / "dev.txt", CONLL)
    p = _w(t / "p.txt", "EU B-ORG B-ORG\nrefuses O O\n\nAlice B-PER B-PER\n")
    return ["evaluate", "ner", "--data", d, "--predictions", p], f"{p}:1", "no predicted sentence with the words of the data file's sentence at line 3"


def _case_ner_pred_bad_tag(t, m):
    d = _w(t / "dev.txt", CONLL)
    p = _w(t / "p.txt", "EU B-ORG B-ORG\nrejects O Q\n\nAlice B-PER B-PER\n")
    return ["evaluate", "ner", "--data", d, "--predictions", p], f"{p}:2", "'Q'"


def _case_ner_config_bad_keys(t, m):
    model = _copy_model(m, "ner", t, lambda c: c.update(id2label={"1": "O", "2": "B-PER", "3": "I-PER"}))
    d = _w(t / "dev.txt", CONLL)
    argv = ["predict", "ner", "--model", model, "--data", d, "--output", t / "out" / "p.txt", "--device", "cpu"]
    return argv, model / "config.json", "id2label keys"


def _case_ner_config_not_tags(t, m):
    model = _copy_model(m, "ner", t, lambda c: c.update(id2label={"0": "O", "1": "PER", "2": "LOC"}))
    d = _w(t / "dev.txt", CONLL)
    argv = ["predict", "ner", "--model", model, "--data", d, "--output", t / "out" / "p.txt", "--device", "cpu"]
    return argv, model / "config.json", "expected NER tags"


def _case_ner_yaml_unknown(t, m):
    f = _w(t / "train.txt", CONLL)
    y = _w(t / "c.yaml", "TrainingArguments:\n  max_steps: 1\ndoc_stride: 8\n")  # a QA option, not NER's
    return _ner_ft(t, m, f, "--config", y), y, "doc_stride"


def _case_glue_config_invalid_json(t, m):
    model = t / "model"
    shutil.copytree(m["sst2"], model)
    (model / "config.json").write_text("{not json")
    d = _glue_dir(t, "SST-2", SST)
    argv = ["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--model", model, "--device", "cpu"]
    return argv, f"{model / 'config.json'}:1", "JSON"


def _case_mrqa_eval_prediction_number(t, m):
    d = _w(t / "dev.jsonl", _mrqa_text(MRQA_HEADER, MRQA_LINE))
    p = _w(t / "p.json", '{"m1": ["Paris"]}')
    return ["evaluate", "mrqa", "--data", d, "--predictions", p], p, "answer string"


def _case_squad_output_dir_taken(t, m):
    _ran(t / "out" / "config.json", "{}")
    f = _w(t / "train.json", "not even JSON")  # the folder is checked before any data is read
    return _squad_ft(t, m, f), t / "out", "--overwrite_output_dir"


def _case_glue_sweep_output_dir_taken(t, m):
    _ran(t / "out" / "latest", "checkpoint-1\n")
    d = _glue_dir(t, "SST-2", "not a GLUE file")
    return _glue_ft(t, m, "SST-2", d) + ["--sweep"], t / "out", "--resume"


def _case_sweep_summary_taken(t, m):
    _ran(t / "out" / "sweep.json", '{"runs": [], "complete": false}')  # an earlier, unfinished sweep
    d = _glue_dir(t, "SST-2", "not a GLUE file")
    return _glue_ft(t, m, "SST-2", d) + ["--sweep"], t / "out", "sweep.json of an earlier sweep"


def _case_sweep_resume_unreadable(t, m):
    s = _ran(t / "out" / "sweep.json", "{not json")
    d = _glue_dir(t, "SST-2", SST)
    return _glue_ft(t, m, "SST-2", d) + ["--sweep", "--resume"], s, "cannot read the sweep to resume"


def _case_sweep_lower_is_better(t, m):
    d = _glue_dir(t, "SST-2", SST)
    argv = _glue_ft(t, m, "SST-2", d) + ["--sweep", "--metric_for_best_model", "accuracy", "--greater_is_better", "false"]
    return argv, "--greater_is_better", "higher is better"



# ---- issue 22: predictions matched to gold by id (item 1), TACRED's label set (12), messages (14)
def _glue_eval(d, p, task="SST-2"):
    return ["evaluate", "glue", "--task", task, "--data_dir", d, "--predictions", p]


def _case_glue_pred_extra_id(t, m):
    d = _glue_dir(t, "SST-2", SST)
    p = _w(t / "p.tsv", "index\tprediction\n0\t1\n1\t0\n7\t1\n")
    return _glue_eval(d, p), p, "1 id(s) that are not in the dev data ['7']"


def _case_glue_pred_other_ids(t, m):
    d = _glue_dir(t, "RTE", "index\tsentence1\tsentence2\tlabel\n10\tA.\tB.\tentailment\n11\tC.\tD.\tnot_entailment\n")
    p = _w(t / "p.tsv", "index\tprediction\n0\tentailment\n1\tentailment\n")  # row numbers, not RTE's index
    return _glue_eval(d, p, "RTE"), p, "no prediction for 2 example id(s) ['10', '11']"


def _case_glue_pred_repeated_id(t, m):
    d = _glue_dir(t, "SST-2", SST)
    p = _w(t / "p.tsv", "index\tprediction\n0\t1\n0\t0\n")
    return _glue_eval(d, p), f"{p}:3", "found index '0' a second time"


def _case_glue_tsv_row_not_utf8(t, m):
    d = _glue_dir(t, "SST-2", SST.encode() + b"caf\xe9 au lait\t1\n")
    return _glue_ft(t, m, "SST-2", d), f"{d / 'train.tsv'}:4", "not UTF-8 (invalid continuation byte at byte 43)"


def _case_tacred_gold_not_a_relation(t, m):
    d = _w(t / "dev.json", json.dumps([dict(TACRED[0], relation="NOT A RELATION!")]))
    p = _w(t / "p.txt", "no_relation\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], d, "found label 'NOT A RELATION!'"


def _case_tacred_gold_typo(t, m):
    d = _w(t / "dev.json", json.dumps([dict(TACRED[0], relation="per:titel")]))
    p = _w(t / "p.txt", "per:titel\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], d, "did you mean 'per:title'?"


def _case_tacred_train_typo(t, m):
    f = _w(t / "train.json", json.dumps([dict(TACRED[0], relation="per:city_of_brith")]))
    return _rel_ft(t, m, "tacred", f), f"{f} (record 0, id t1)", "did you mean 'per:city_of_birth'?"


def _case_tacred_pred_typo(t, m):
    d = _w(t / "dev.json", json.dumps(TACRED))
    p = _w(t / "p.txt", "per:city_of_brith\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], f"{p}:1", "did you mean 'per:city_of_birth'?"


def _case_tacred_pred_ids_missing(t, m):
    d = _w(t / "dev.json", json.dumps([TACRED[0], dict(TACRED[0], id="t2")]))
    p = _w(t / "p.txt", "t2\tno_relation\nt9\tno_relation\n")
    return ["evaluate", "tacred", "--data", d, "--predictions", p], p, "no prediction for 1 example id(s) ['t1']"


def _case_semeval_pred_extra_id(t, m):
    d = _w(t / "TEST.TXT", SEMEVAL)
    p = _w(t / "p.txt", "1\tOther\n2\tOther\n")
    return ["evaluate", "semeval", "--data", d, "--predictions", p], p, "1 id(s) that are not in the data file ['2']"


def _case_semeval_pred_repeated_id(t, m):
    d = _w(t / "TEST.TXT", SEMEVAL)
    p = _w(t / "p.txt", "1\tOther\n1\tEntity-Destination(e1,e2)\n")
    return ["evaluate", "semeval", "--data", d, "--predictions", p], f"{p}:2", "found id '1' a second time"


def _case_ner_pred_extra_sentence(t, m):
    d = _w(t / "dev.txt", CONLL)
    p = _w(t / "p.txt", "EU B-ORG B-ORG\nrejects O O\n\nAlice B-PER B-PER\n\nBob B-PER B-PER\n")
    return ["evaluate", "ner", "--data", d, "--predictions", p], f"{p}:6", "1 predicted sentence(s) that are not in"


def _case_squad_preds_of_other_data(t, m):
    d = _w(t / "dev.json", json.dumps(SQUAD))
    p = _w(t / "p.json", '{"x1": "Paris", "x2": "Rome"}')
    return _squad_eval(d, p), p, "no id among them that is a question of"


def _case_squad_eval_article_without_paragraphs(t, m):
    bad = {"version": "1.1", "data": [SQUAD["data"][0], {"title": "empty"}]}
    d = _w(t / "dev.json", json.dumps(bad))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    return _squad_eval(d, p), f"{d} (record data[1])", "missing field 'paragraphs'"


def _case_squad_eval_answer_without_text(t, m):
    bad = json.loads(json.dumps(SQUAD))
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"] = [{"answer_start": 18}]
    d = _w(t / "dev.json", json.dumps(bad))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    return _squad_eval(d, p), f"{d} (record id q1, answers[0])", "missing field 'text'"


def _case_squad_data_not_utf8(t, m):
    d = _w(t / "dev.json", json.dumps(SQUAD, indent=1).encode().replace(b"Alice", b"Al\xefce"))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    return _squad_eval(d, p), f"{d}:", "not UTF-8"


def _case_squad_v2_prediction_missing(t, m):
    v2 = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "Alice was born in Paris.", "qas": [
        {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 18}], "is_impossible": False},
        {"id": "q2", "question": "When?", "answers": [], "is_impossible": True}]}]}]}  # fmt: skip
    d = _w(t / "dev.json", json.dumps(v2))
    p = _w(t / "p.json", '{"q1": "Paris"}')
    return _squad_eval(d, p), p, "found no entry for 1 of 2 questions (q2)"


def _case_squad_v2_na_prob_missing(t, m):
    v2 = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "Alice was born in Paris.", "qas": [
        {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 18}], "is_impossible": False},
        {"id": "q2", "question": "When?", "answers": [], "is_impossible": True}]}]}]}  # fmt: skip
    d = _w(t / "dev.json", json.dumps(v2))
    p = _w(t / "p.json", '{"q1": "Paris", "q2": ""}')
    na = _w(t / "na.json", '{"q1": 0.1}')
    return _squad_eval(d, p, "--na-prob", na), na, "expected a no-answer probability for every question"



def _case_glue_mnli_one_predictions_file(t, m):
    head = "index\tsentence1\tsentence2\tgold_label\n0\tA.\tB.\tneutral\n"
    d = t / "MNLI"
    _w(d / "dev_matched.tsv", head)
    _w(d / "dev_mismatched.tsv", head)
    p = _w(t / "p.tsv", "index\tprediction\n0\tneutral\n")
    return _glue_eval(d, p, "MNLI"), "--predictions", "found 1 file(s); expected one per MNLI dev split, in this order: matched, mismatched"


CASES = [
    pytest.param(_case_squad_output_dir_taken, id="squad-output-dir-taken"),
    pytest.param(_case_glue_sweep_output_dir_taken, id="glue-sweep-output-dir-taken"),
    pytest.param(_case_sweep_summary_taken, id="sweep-summary-taken"),
    pytest.param(_case_sweep_resume_unreadable, id="sweep-resume-unreadable"),
    pytest.param(_case_sweep_lower_is_better, id="sweep-lower-is-better"),
    pytest.param(_case_mrqa_to_squad, id="squad-finetune-given-mrqa"),
    pytest.param(_case_mrqa_to_squad_eval, id="squad-evaluate-given-mrqa"),
    pytest.param(_case_squad_to_mrqa, id="mrqa-finetune-given-squad"),
    pytest.param(_case_squad_pretty_to_mrqa_eval, id="mrqa-evaluate-given-pretty-squad"),
    pytest.param(_case_drop_ids_not_utf8, id="squad-drop-ids-not-utf8"),
    pytest.param(_case_squad_truncated, id="squad-truncated-json"),
    pytest.param(_case_squad_bad_offset, id="squad-answer-offset"),
    pytest.param(_case_squad_duplicate_id, id="squad-duplicate-id"),
    pytest.param(_case_squad_missing_question, id="squad-missing-question"),
    pytest.param(_case_squad_preds_list, id="squad-predictions-list"),
    pytest.param(_case_squad_preds_number, id="squad-prediction-number"),
    pytest.param(_case_squad_na_prob_text, id="squad-na-prob-text"),
    pytest.param(_case_qa_config_spanbert_not_mapping, id="qa-config-spanbert-list"),
    pytest.param(_case_qa_config_bad_value, id="qa-config-bad-value"),
    pytest.param(_case_qa_not_a_qa_model, id="qa-model-without-head"),
    pytest.param(_case_squad_yaml_typo, id="squad-yaml-typo"),
    pytest.param(_case_squad_yaml_bad_value, id="squad-yaml-bad-value"),
    pytest.param(_case_mrqa_bad_span, id="mrqa-span-outside"),
    pytest.param(_case_mrqa_bad_json_line, id="mrqa-bad-json-line"),
    pytest.param(_case_tacred_not_list, id="tacred-not-a-list"),
    pytest.param(_case_tacred_span_outside, id="tacred-span-outside"),
    pytest.param(_case_tacred_not_utf8, id="tacred-not-utf8"),
    pytest.param(_case_tacred_pred_count, id="tacred-prediction-count"),
    pytest.param(_case_tacred_pred_unknown_label, id="tacred-prediction-unknown-label"),
    pytest.param(_case_tacred_config_no_id2label, id="tacred-config-no-id2label"),
    pytest.param(_case_tacred_config_no_markers, id="tacred-config-no-markers"),
    pytest.param(_case_tacred_config_num_labels, id="tacred-config-num-labels"),
    pytest.param(_case_semeval_bad_label, id="semeval-bad-label"),
    pytest.param(_case_semeval_unbalanced_tags, id="semeval-unbalanced-tags"),
    pytest.param(_case_semeval_pred_unknown_label, id="semeval-prediction-unknown-label"),
    pytest.param(_case_semeval_pred_no_tab, id="semeval-prediction-no-tab"),
    pytest.param(_case_glue_sst_bad_label, id="glue-sst2-bad-label"),
    pytest.param(_case_glue_rte_missing_column, id="glue-rte-missing-column"),
    pytest.param(_case_glue_mrpc_columns, id="glue-mrpc-column-count"),
    pytest.param(_case_glue_stsb_nan, id="glue-stsb-nan"),
    pytest.param(_case_glue_stsb_range, id="glue-stsb-out-of-range"),
    pytest.param(_case_glue_stsb_pred_text, id="glue-stsb-prediction-text"),
    pytest.param(_case_glue_sst_pred_unknown, id="glue-sst2-prediction-unknown"),
    pytest.param(_case_glue_pred_header, id="glue-prediction-header"),
    pytest.param(_case_glue_pred_count, id="glue-prediction-count"),
    pytest.param(_case_glue_cola_headerless_label, id="glue-cola-headerless-label"),
    pytest.param(_case_glue_mnli_missing_dev, id="glue-mnli-missing-dev"),
    pytest.param(_case_glue_config_labels_missing, id="glue-config-labels-missing"),
    pytest.param(_case_glue_config_other_labels, id="glue-config-other-labels"),
    pytest.param(_case_glue_wnli_majority_broken, id="glue-wnli-majority-broken"),
    pytest.param(_case_ner_bad_tag, id="ner-bad-tag"),
    pytest.param(_case_ner_chunk_tags, id="ner-chunk-tags"),
    pytest.param(_case_ner_one_column, id="ner-one-column"),
    pytest.param(_case_ner_not_utf8, id="ner-not-utf8"),
    pytest.param(_case_ner_pred_words_differ, id="ner-prediction-words-differ"),
    pytest.param(_case_ner_pred_bad_tag, id="ner-prediction-bad-tag"),
    pytest.param(_case_ner_config_bad_keys, id="ner-config-id2label-keys"),
    pytest.param(_case_ner_config_not_tags, id="ner-config-not-tags"),
    pytest.param(_case_ner_yaml_unknown, id="ner-yaml-unknown-option"),
    pytest.param(_case_glue_config_invalid_json, id="glue-config-invalid-json"),
    pytest.param(_case_mrqa_eval_prediction_number, id="mrqa-prediction-list"),
    pytest.param(_case_glue_pred_extra_id, id="glue-prediction-extra-id"),
    pytest.param(_case_glue_pred_other_ids, id="glue-prediction-row-numbers-for-index"),
    pytest.param(_case_glue_pred_repeated_id, id="glue-prediction-repeated-id"),
    pytest.param(_case_glue_tsv_row_not_utf8, id="glue-tsv-row-not-utf8"),
    pytest.param(_case_tacred_gold_not_a_relation, id="tacred-gold-not-a-relation"),
    pytest.param(_case_tacred_gold_typo, id="tacred-gold-and-prediction-typo"),
    pytest.param(_case_tacred_train_typo, id="tacred-train-label-typo"),
    pytest.param(_case_tacred_pred_typo, id="tacred-prediction-typo"),
    pytest.param(_case_tacred_pred_ids_missing, id="tacred-prediction-ids-missing"),
    pytest.param(_case_semeval_pred_extra_id, id="semeval-prediction-extra-id"),
    pytest.param(_case_semeval_pred_repeated_id, id="semeval-prediction-repeated-id"),
    pytest.param(_case_ner_pred_extra_sentence, id="ner-prediction-extra-sentence"),
    pytest.param(_case_squad_preds_of_other_data, id="squad-predictions-of-other-data"),
    pytest.param(_case_squad_eval_article_without_paragraphs, id="squad-evaluate-article-without-paragraphs"),
    pytest.param(_case_squad_eval_answer_without_text, id="squad-evaluate-answer-without-text"),
    pytest.param(_case_squad_data_not_utf8, id="squad-evaluate-data-not-utf8"),
    pytest.param(_case_squad_v2_prediction_missing, id="squad-v2-prediction-missing"),
    pytest.param(_case_squad_v2_na_prob_missing, id="squad-v2-na-prob-missing"),
    pytest.param(_case_glue_mnli_one_predictions_file, id="glue-mnli-one-predictions-file"),
]


@pytest.mark.parametrize("case", CASES)
def test_malformed_task_input(case: Case, models, tmp_path, cli_error):
    argv, names, contains = case(tmp_path, models)
    cli_error([str(a) for a in argv], names=names, contains=contains, out=tmp_path)
