"""Relation extraction: TACRED (SpanBERT §4.1, Table 4) and SemEval-2010 Task 8 in the same format.

Input: TACRED JSON records (``token``, ``subj_start``/``subj_end``, ``obj_start``/``obj_end``
inclusive, ``subj_type``/``obj_type``, ``relation``). SemEval-2010 Task 8 files are converted to the
same records by `read_semeval` (``<e1>`` = subject, ``<e2>`` = object, the directed 19-way label kept
as the relation).

Entity masking (§4.1, following Zhang et al. 2017): the subject and object tokens are replaced by
one marker each, ``[CLS] [SUBJ-PERSON] was born in [OBJ-CITY] , Michigan ... [SEP]``, and a linear
classifier on the pooled ``[CLS]`` predicts the relation. PTB brackets (``-LRB-`` ...) are restored
first. The markers use TACRED's full NER type names (the paper's ``[SUBJ-PER]`` abbreviates them, the
released code used the full names too).

The marker vocabulary is deterministic (sorted type names, see `marker_vocabulary`) and saved with the
model in ``config.json`` (``spanbert.entity_markers``: marker -> token id). The original code
numbered markers in first-seen order and never saved the mapping, so a model could not be re-used.
Marker ids come from the vocabulary's ``[unusedN]`` entries when it has enough of them (the BERT and
SpanBERT cased vocabularies have 99), else they are appended to the vocabulary (added tokens in the
saved tokenizer) and the word embeddings grow to match.

``--entity_mode mark`` keeps the entity words and wraps them instead:
``[SUBJ-NOMINAL] child [/SUBJ-NOMINAL]``. It is the default for SemEval, whose arguments are common
nouns: replacing them (``mask``) would remove most of what decides the relation.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.distributed import print0
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.classification import NO_RELATION, semeval_official, tacred_prf
from spanbert.tasks import classification as C
from spanbert.tasks.finetuning import SEQ_LENGTH, finetune_options
from spanbert.tasks.options import one_of
from spanbert.tasks.ranks import print_metrics, start_distributed, write_json_once, write_once
from spanbert.tasks.relation_options import (
    ACTIONS,
    ENTITY_MODES,
    RelationEvaluate,
    RelationFinetune,
    RelationPredict,
)
from spanbert.tasks.scores import match_by_id, percent, warn_unseen
from spanbert.tasks.selection import selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.tasks.task_folders import load_tokenizer_for
from spanbert.trainer import eval_size
from spanbert.utils import atomic_write

TACRED_LABEL = re.compile(r"^(no_relation|(per|org):[a-z_/]+)$")
"""A TACRED relation name: ``no_relation`` or ``per:...`` / ``org:...`` (the 42 labels' shape)."""
TACRED_RELATIONS = (
    "no_relation",
    "org:alternate_names", "org:city_of_headquarters", "org:country_of_headquarters", "org:dissolved",
    "org:founded", "org:founded_by", "org:member_of", "org:members", "org:number_of_employees/members",
    "org:parents", "org:political/religious_affiliation", "org:shareholders",
    "org:stateorprovince_of_headquarters", "org:subsidiaries", "org:top_members/employees", "org:website",
    "per:age", "per:alternate_names", "per:cause_of_death", "per:charges", "per:children",
    "per:cities_of_residence", "per:city_of_birth", "per:city_of_death", "per:countries_of_residence",
    "per:country_of_birth", "per:country_of_death", "per:date_of_birth", "per:date_of_death", "per:employee_of",
    "per:origin", "per:other_family", "per:parents", "per:religion", "per:schools_attended", "per:siblings",
    "per:spouse", "per:stateorprovince_of_birth", "per:stateorprovince_of_death",
    "per:statesorprovinces_of_residence", "per:title",
)  # fmt: skip
"""TACRED's 42 relation labels (Zhang et al., 2017, Table 3; the LDC release's label set): a gold or
predicted label outside them is an error, since anything but ``no_relation`` counts as a positive."""
NO_GUESS_NOTE = (
    "no positive prediction: precision is reported as 100 because TACRED's official scorer.py sets "
    "prec_micro = 1.0 when nothing is guessed; recall and F1 are 0"
)

# The NER types of TACRED's subjects and objects (Zhang et al., 2017, Table 2), so that every marker
# has an id even when a small training set does not show all of them.
TACRED_TYPES = (
    "CAUSE_OF_DEATH", "CITY", "COUNTRY", "CRIMINAL_CHARGE", "DATE", "DURATION", "EMAIL", "IDEOLOGY",
    "LOCATION", "MISC", "NATIONALITY", "NUMBER", "ORGANIZATION", "PERSON", "RELIGION",
    "STATE_OR_PROVINCE", "TITLE", "URL",
)  # fmt: skip
SEMEVAL_TYPE = "NOMINAL"
"""Entity type given to both SemEval arguments (the task's arguments are nominals, not named entities)."""

PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}

_TACRED_SET = frozenset(TACRED_RELATIONS)


@dataclass
class RelationExample:
    """One TACRED-format record: a tokenized sentence, two inclusive entity spans, a relation."""

    id: str
    tokens: list[str]
    subj_start: int
    subj_end: int
    obj_start: int
    obj_end: int
    subj_type: str
    obj_type: str
    relation: str | None
    """None when the file has no labels (prediction only)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "relation": self.relation,
            "token": self.tokens,
            "subj_start": self.subj_start,
            "subj_end": self.subj_end,
            "obj_start": self.obj_start,
            "obj_end": self.obj_end,
            "subj_type": self.subj_type,
            "obj_type": self.obj_type,
        }


# ---------------------------------------------------------------------------------------------
# Readers

_REQUIRED = {
    "token": list,
    "subj_start": int,
    "subj_end": int,
    "obj_start": int,
    "obj_end": int,
    "subj_type": str,
    "obj_type": str,
}


def read_tacred(path: str | Path, require_labels: bool = True, task: str | None = None) -> list[RelationExample]:
    """Read a TACRED JSON file (a list of records). Errors name the file and the record. With ``task``
    (tacred, or semeval for SemEval converted by `write_tacred_json`) every relation must be one of
    that task's labels."""
    path = Path(path)
    try:
        data = json.loads(decode_utf8(path.read_bytes(), path, "UTF-8 JSON"))
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a TACRED JSON file)") from None
    except json.JSONDecodeError as e:
        raise DataError(path, f"not valid JSON: {e.msg} (column {e.colno})", line=e.lineno) from None
    if not isinstance(data, list):
        raise DataError(path, f"expected a JSON list of TACRED records, found a {type(data).__name__}")
    examples = []
    for i, rec in enumerate(data):
        where = str(i) if not isinstance(rec, dict) or "id" not in rec else f"{i}, id {rec['id']}"
        if not isinstance(rec, dict):
            raise DataError(path, f"expected an object, found {type(rec).__name__}", record=where)
        for key, kind in _REQUIRED.items():
            if key not in rec:
                raise DataError(path, f"missing field {key!r}; a TACRED record has {sorted(_REQUIRED)}", record=where)
            if not isinstance(rec[key], kind) or (kind is int and isinstance(rec[key], bool)):
                raise DataError(path, f"field {key!r} is {rec[key]!r}; expected a {kind.__name__}", record=where)
        relation = rec.get("relation")
        if relation is None and require_labels:
            raise DataError(path, "missing field 'relation' (the gold label)", record=where)
        if relation is not None and not isinstance(relation, str):
            raise DataError(path, f"field 'relation' is {relation!r}; expected a string", record=where)
        if relation is not None and task is not None:
            check_label(task, relation, path, record=where)
        n = len(rec["token"])
        if not all(isinstance(t, str) for t in rec["token"]):
            raise DataError(path, "field 'token' must be a list of strings", record=where)
        for role in ("subj", "obj"):
            s, e = rec[f"{role}_start"], rec[f"{role}_end"]
            if not 0 <= s <= e < n:
                raise DataError(
                    path,
                    f"{role} span [{s}, {e}] is not inside the sentence's {n} tokens (inclusive, 0-based)",
                    record=where,
                )
        if rec["subj_start"] <= rec["obj_end"] and rec["obj_start"] <= rec["subj_end"]:
            raise DataError(path, "the subject and object spans overlap", record=where)
        examples.append(
            RelationExample(
                id=str(rec.get("id", i)),
                tokens=list(rec["token"]),
                subj_start=rec["subj_start"],
                subj_end=rec["subj_end"],
                obj_start=rec["obj_start"],
                obj_end=rec["obj_end"],
                subj_type=rec["subj_type"],
                obj_type=rec["obj_type"],
                relation=relation,
            )
        )
    return examples


_SEMEVAL_LINE = re.compile(r'^(\d+)\t"(.*)"$')
_SEMEVAL_LABEL = re.compile(
    r"^(Other|(Cause-Effect|Component-Whole|Content-Container|Entity-Destination|Entity-Origin|"
    r"Instrument-Agency|Member-Collection|Message-Topic|Product-Producer)\((e1,e2|e2,e1)\))$"
)
_WORD = re.compile(r"\w+|[^\w\s]")


def semeval_sentence(text: str) -> tuple[list[str], tuple[int, int], tuple[int, int]] | None:
    """Split a SemEval sentence with ``<e1>..</e1>``/``<e2>..</e2>`` into words and inclusive spans.

    Words are runs of letters/digits or single punctuation marks, which is how BERT's pre-tokenizer
    splits text anyway. Returns None when the tags are not exactly one well-formed pair each.
    """
    tokens: list[str] = []
    spans: dict[str, list[int]] = {}
    open_tag = None
    for piece in re.split(r"(</?e[12]>)", text):
        m = re.fullmatch(r"<(/?)(e[12])>", piece)
        if m:
            closing, name = m.group(1) == "/", m.group(2)
            if not closing and (open_tag is not None or name in spans):
                return None
            if closing and open_tag != name:
                return None
            if closing:
                spans[name].append(len(tokens) - 1)
                open_tag = None
            else:
                spans[name] = [len(tokens)]
                open_tag = name
            continue
        tokens += _WORD.findall(piece)
    if open_tag is not None or set(spans) != {"e1", "e2"} or any(s[1] < s[0] for s in spans.values()):
        return None
    return tokens, (spans["e1"][0], spans["e1"][1]), (spans["e2"][0], spans["e2"][1])


def read_semeval(path: str | Path, require_labels: bool = True) -> list[RelationExample]:
    """Convert a SemEval-2010 Task 8 file to TACRED-format records.

    Reads ``TRAIN_FILE.TXT`` / ``TEST_FILE_FULL.TXT`` (blocks: ``id<TAB>"sentence"``, label,
    ``Comment:``, blank line) and ``TEST_FILE_CLEAN.TXT`` (sentence lines only, no labels). Subject =
    ``<e1>``, object = ``<e2>``, both typed ``NOMINAL``; the relation keeps its direction
    (``Cause-Effect(e2,e1)``), so the 19 labels of the task are the classes.
    """
    path = Path(path)
    try:
        lines = decode_utf8(path.read_bytes(), path).splitlines()
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a SemEval-2010 Task 8 file)") from None
    examples = []
    i = 0
    while i < len(lines):
        line = lines[i].strip("\r")
        if not line.strip():
            i += 1
            continue
        m = _SEMEVAL_LINE.match(line)
        if not m:
            raise DataError(path, f"expected 'ID<TAB>\"sentence\"', found {line[:80]!r}", line=i + 1)
        sid, text = m.groups()
        parsed = semeval_sentence(text)
        if parsed is None:
            raise DataError(path, "expected exactly one <e1>...</e1> and one <e2>...</e2> in the sentence", line=i + 1)
        tokens, e1, e2 = parsed
        relation = None
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if nxt and not _SEMEVAL_LINE.match(nxt):
            if not _SEMEVAL_LABEL.match(nxt):
                raise DataError(
                    path, f"found relation label {nxt!r}; expected Other or one of the 9 relations with (e1,e2)/(e2,e1)",
                    line=i + 2,
                )  # fmt: skip
            relation = nxt
            i += 2
            if i < len(lines) and lines[i].startswith("Comment"):
                i += 1
        else:
            i += 1
        if relation is None and require_labels:
            raise DataError(path, f"sentence {sid} has no relation label line after it", line=i)
        examples.append(RelationExample(sid, tokens, *e1, *e2, SEMEVAL_TYPE, SEMEVAL_TYPE, relation))
    if not examples:
        raise DataError(path, "no sentences found; expected SemEval-2010 Task 8 blocks")
    return examples


def read_relation_file(path: str | Path, require_labels: bool = True, task: str | None = None) -> list[RelationExample]:
    """TACRED JSON (``.json``) or a SemEval-2010 text file (anything else), by extension; with ``task``
    the relations are checked against its label set."""
    if Path(path).suffix.lower() == ".json":
        return read_tacred(path, require_labels, task)
    return read_semeval(path, require_labels)


def write_tacred_json(examples: list[RelationExample], path: str | Path) -> None:
    """Write records as a TACRED JSON file (e.g. SemEval converted once, to inspect or share)."""
    with atomic_write(path, encoding="utf-8") as f:
        json.dump([e.to_json() for e in examples], f)


# ---------------------------------------------------------------------------------------------
# Entity markers and features


def marker_vocabulary(types: set[str] | list[str], mode: str = "mask") -> list[str]:
    """All markers for these entity types, in a fixed order (roles, then sorted types, then open/close)."""
    if mode not in ENTITY_MODES:
        raise SpanBertError(f"entity_mode {mode!r}; choose from {', '.join(ENTITY_MODES)}")
    markers = []
    for role in ("SUBJ", "OBJ"):
        for t in sorted(set(types)):
            markers.append(f"[{role}-{t}]")
            if mode == "mark":
                markers.append(f"[/{role}-{t}]")
    return markers


def assign_marker_ids(tokenizer: Any, markers: list[str]) -> tuple[Any, dict[str, int]]:
    """Token ids for the markers: ``[unusedN]`` slots if the vocabulary has enough, else new tokens.

    Returns the (possibly extended) tokenizer and marker -> id. New tokens are added as special tokens
    (to a copy: the caller's tokenizer is unchanged), so the tokenizer saved with the model keeps each
    marker whole.
    """
    present = {m: tokenizer.token_to_id(m) for m in markers}
    if all(i is not None for i in present.values()):
        return tokenizer, {m: int(i) for m, i in present.items()}
    unused = sorted(i for t, i in tokenizer.get_vocab().items() if re.fullmatch(r"\[unused\d+\]", t))
    if len(unused) >= len(markers):
        return tokenizer, {m: unused[k] for k, m in enumerate(markers)}
    extended = tokenizer.with_added_tokens(markers)
    return extended, {m: int(extended.token_to_id(m)) for m in markers}


def _word(token: str) -> str:
    return PTB_BRACKETS.get(token, token)


def relation_features(
    examples: list[RelationExample],
    tokenizer: Any,
    markers: dict[str, int],
    mode: str,
    label2id: dict[str, int] | None,
    max_seq_length: int = 128,
    source: str = "data",
) -> tuple[list[dict[str, Any]], int]:
    """``[CLS] ... [SUBJ-T] ... [OBJ-T] ... [SEP]`` token ids (and labels) per example.

    Returns the features and how many examples were cut at ``max_seq_length`` (the original code
    cuts too; a marker beyond the cut is lost, which the count makes visible).
    """
    features, truncated = [], 0
    for i, ex in enumerate(examples):
        # (role, first word, last word, opening marker, closing marker or None)
        entities = [
            (role, s, e, f"[{role}-{t}]", f"[/{role}-{t}]" if mode == "mark" else None)
            for role, s, e, t in (
                ("SUBJ", ex.subj_start, ex.subj_end, ex.subj_type),
                ("OBJ", ex.obj_start, ex.obj_end, ex.obj_type),
            )
        ]
        for _, _, _, opening, closing in entities:
            for m in (opening, closing):
                if m is not None and m not in markers:
                    known = sorted({k.split("-", 1)[1].rstrip("]") for k in markers})
                    raise DataError(
                        source,
                        f"entity type of {m} has no marker in this model; known types: {known}",
                        record=f"{i}, id {ex.id}",
                    )
        units: list[int | str] = []  # word index, or a marker string
        for w in range(len(ex.tokens)):
            units += [opening for _, s, _, opening, _ in entities if w == s]
            in_entity = any(s <= w <= e for _, s, e, _, _ in entities)
            if mode == "mark" or not in_entity:  # §4.1 masking: the entity's words are replaced
                units.append(w)
            units += [closing for _, _, e, _, closing in entities if w == e and closing is not None]
        words = [_word(ex.tokens[u]) for u in units if isinstance(u, int)]
        enc = tokenizer.encode_words(words)
        pieces: list[list[int]] = [[] for _ in words]
        for tid, wid in zip(enc.ids.tolist(), enc.word_ids.tolist()):
            pieces[wid].append(tid)
        ids: list[int] = []
        k = 0
        for u in units:
            if isinstance(u, str):
                ids.append(markers[u])
            else:
                ids += pieces[k]
                k += 1
        budget = max_seq_length - 2
        if len(ids) > budget:
            truncated += 1
            ids = ids[:budget]
        feature: dict[str, Any] = {
            "input_ids": np.asarray([tokenizer.cls_id, *ids, tokenizer.sep_id], dtype=np.int64),
        }
        if label2id is not None:
            if ex.relation not in label2id:
                raise DataError(
                    source,
                    f"relation {ex.relation!r} is not a label of this model ({len(label2id)} labels)",
                    record=f"{i}, id {ex.id}",
                )
            feature["labels"] = np.int64(label2id[ex.relation])
        features.append(feature)
    return features, truncated


# ---------------------------------------------------------------------------------------------
# Scoring and prediction files


def score(task: str, gold: list[str], pred: list[str]) -> dict[str, Any]:
    """TACRED: micro P/R/F1 without no_relation. SemEval: the official macro-F1 (key ``f1``), plus the
    micro scores with ``Other`` as the negative class, plus accuracy. All x100 (0-100).

    TACRED with no positive prediction keeps the official scorer's precision of 100 and says so in
    a ``note``."""
    if task == "semeval":
        official = semeval_official(gold, pred)
        return percent({"f1": official["macro_f1"], **official})
    out: dict[str, Any] = percent(tacred_prf(gold, pred))
    if all(p == NO_RELATION for p in pred):
        out["note"] = NO_GUESS_NOTE
    return out


def check_label(task: str, label: str, path: str | Path, line: int | None = None, record: str | None = None) -> None:
    """A relation label of the task's label set (SemEval's 19, TACRED's 42), else a DataError."""
    if task == "semeval":
        if not _SEMEVAL_LABEL.match(label):
            raise DataError(
                path, f"found label {label!r}; expected Other or one of the 9 relations with (e1,e2)/(e2,e1)",
                line=line, record=record,
            )  # fmt: skip
    elif label not in _TACRED_SET:
        near = difflib.get_close_matches(label, TACRED_RELATIONS, n=1)
        raise DataError(
            path, f"found label {label!r}; expected one of TACRED's 42 relations (no_relation, per:..., org:...)"
            + (f"; did you mean {near[0]!r}?" if near else ""),
            line=line, record=record,
        )  # fmt: skip


def write_predictions(task: str, examples: list[RelationExample], labels: list[str], path: str | Path) -> None:
    """TACRED: one label per line (the official scorer's input). SemEval: ``id<TAB>label`` lines
    (the official Perl scorer's input)."""
    with atomic_write(path, encoding="utf-8") as f:
        for ex, label in zip(examples, labels):
            f.write(f"{ex.id}\t{label}\n" if task == "semeval" else f"{label}\n")


def read_predictions(task: str, path: str | Path, examples: list[RelationExample]) -> list[str]:
    """Predictions in the order of ``examples``.

    SemEval (``id<TAB>label``, the official Perl scorer's input) and TACRED files of ``id<TAB>label``
    lines are matched to the examples by id: ids missing, extra or repeated are an error naming the
    first few. A TACRED file of bare labels (the official scorer.py's input, which has no ids) is
    matched by line, as scorer.py does: its count must equal the examples'."""
    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), path)
    except FileNotFoundError:
        raise SpanBertError(f"{path}: predictions file not found") from None
    lines = [(n, l.rstrip("\r")) for n, l in enumerate(text.splitlines(), 1) if l.strip()]
    with_ids = task == "semeval" or any("\t" in l for _, l in lines)
    if not with_ids:
        if len(lines) != len(examples):
            raise DataError(
                path, f"found {len(lines)} predicted labels; expected one per example ({len(examples)}), in the "
                "data file's order (or 'id<TAB>label' lines, matched by id)",
            )  # fmt: skip
        for n, l in lines:
            check_label(task, l.strip(), path, line=n)
        return [l.strip() for _, l in lines]
    by_id: dict[str, str] = {}
    for n, line in lines:
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(path, f"expected 'ID<TAB>label', found {line[:80]!r}", line=n)
        sid, label = parts[0].strip(), parts[1].strip()
        check_label(task, label, path, line=n)
        if sid in by_id:
            raise DataError(path, f"found id {sid!r} a second time; expected one prediction per example", line=n)
        by_id[sid] = label
    return match_by_id(path, by_id, [ex.id for ex in examples], "the data file")


# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, CLI




def finetune_relation(
    task: str,
    model_dir: str | Path,
    train_path: str | Path,
    dev_path: str | Path | None,
    args: Any,
    tokenizer_dir: str | Path | None = None,
    entity_mode: str | None = None,
    max_seq_length: int = 128,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
) -> dict[str, float]:
    """Fine-tune a relation classifier and save it (HF layout) in ``args.output_dir``.

    Returns the dev metrics (empty without a dev file); writes ``dev_predictions.txt`` and
    ``dev_results.json`` beside the model. A dev relation that the training examples never show is a
    warning (the model cannot predict it; the official scorer counts those examples as misses).
    """
    mode = entity_mode or ("mark" if task == "semeval" else "mask")
    train = read_relation_file(train_path, task=task)[:max_train_examples]
    dev = read_relation_file(dev_path, task=task)[:max_eval_examples] if dev_path else []
    labels = sorted({ex.relation for ex in train})
    if task == "tacred" and NO_RELATION in labels:  # class 0 = no_relation, as in TACRED's label map
        labels = [NO_RELATION] + [l for l in labels if l != NO_RELATION]
    label2id = {l: i for i, l in enumerate(labels)}
    warn_unseen(dev_path, [ex.relation for ex in dev], labels, "relation",
                f"the training examples used ({train_path}, {len(train)} examples)")  # fmt: skip
    types = {ex.subj_type for ex in train} | {ex.obj_type for ex in train}
    if task == "tacred":
        types |= set(TACRED_TYPES)
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    tokenizer, markers = assign_marker_ids(tokenizer, marker_vocabulary(types, mode))
    train_features, cut = relation_features(train, tokenizer, markers, mode, label2id, max_seq_length, str(train_path))
    if cut:
        print0(f"note: {cut} of {len(train)} training sentences were cut at max_seq_length={max_seq_length}")
    dev_features, _ = relation_features(dev, tokenizer, markers, mode, None, max_seq_length, str(dev_path))
    model = C.build_model("sequence", model_dir, len(labels), vocab_size=max(markers.values()) + 1, seed=args.seed)

    def predict(m: Any) -> list[str]:
        logits = C.predict_logits(m, dev_features, tokenizer.pad_id, args.per_device_eval_batch_size)
        return [labels[int(np.argmax(l))] for l in logits]

    gold = [ex.relation for ex in dev]
    done = C.finetune_selected(
        model, train_features, args, tokenizer.pad_id, predict if dev else None, lambda p: score(task, gold, p),
        eval_size(len(dev), dev_features),
    )
    pred = done.predictions
    out = Path(args.output_dir)
    meta = {"task": task, "entity_mode": mode, "entity_markers": markers, "max_seq_length": max_seq_length}
    metrics: dict[str, Any] = {**score(task, gold, pred), **selection_summary(done.selected_step, args)} if dev else {}

    def write() -> None:
        C.save_model(model, out, tokenizer, "sequence", labels, meta)
        if dev:
            write_predictions(task, dev, pred, out / "dev_predictions.txt")
            write_json_once(out / RESULTS_FILE, metrics)

    write_once(write)
    return metrics


def predict_relations(
    model: Any, tokenizer: Any, meta: dict[str, Any], labels: list[str], examples: list[RelationExample],
    source: str = "data", batch_size: int = 64, progress: bool = False,
) -> list[str]:  # fmt: skip
    """The predicted relation of every example (argmax of the classifier)."""
    features, _ = relation_features(
        examples, tokenizer, meta["entity_markers"], meta["entity_mode"], None, meta["max_seq_length"], source
    )
    logits = C.predict_logits(model, features, tokenizer.pad_id, batch_size, progress=progress)
    return [labels[int(np.argmax(l))] for l in logits]


def _predict_from_dir(
    task: str, model_dir: str, data: str, batch_size: int, device: str = "cpu", progress: bool = True,
    check_gold: bool = False,
) -> tuple[list[RelationExample], list[str]]:  # fmt: skip
    model, config_json, tokenizer = C.load_model(
        "sequence", model_dir, device, needs=f"a {task} model (spanbert finetune {task})"
    )
    meta = config_json.get("spanbert", {})
    source = Path(model_dir) / "config.json"
    if not isinstance(meta, dict) or not isinstance(meta.get("entity_markers"), dict):
        raise DataError(source, "found no spanbert.entity_markers mapping; expected a relation model's config")
    for key in ("entity_mode", "max_seq_length"):
        if key not in meta:
            raise DataError(source, f"found no spanbert.{key}; expected a relation model's config")
    labels = C.labels_from_config(config_json, str(source))
    if labels is None:
        raise DataError(source, "found a regression head; expected a relation classifier with id2label")
    examples = read_relation_file(data, require_labels=False, task=task)
    if check_gold:
        gold = [ex.relation for ex in examples if ex.relation is not None]
        warn_unseen(data, gold, labels, "relation", f"the training labels of {model_dir}")
    return examples, predict_relations(model, tokenizer, meta, labels, examples, data, batch_size, progress=progress)


def _finetune(task: str, opts: RelationFinetune) -> Results:
    """``spanbert finetune {tacred,semeval} ...``."""

    def run_one(targs: Any) -> dict[str, float]:
        return finetune_relation(
            task, opts.model, opts.train_file, opts.validation_file, targs, opts.tokenizer, opts.entity_mode,
            opts.max_seq_length, opts.max_train_examples, opts.max_eval_examples,
        )  # fmt: skip

    return finetune_options(opts, run_one, "f1", f"spanbert finetune {task}", seq_length=SEQ_LENGTH)


def _predict(task: str, opts: RelationPredict) -> Path:
    """``spanbert predict {tacred,semeval} ...``."""
    start_distributed(opts.device)
    examples, pred = _predict_from_dir(task, opts.model, opts.data, opts.batch_size, opts.device, not opts.disable_tqdm)
    write_once(lambda: write_predictions(task, examples, pred, opts.output))
    print0(f"wrote {len(pred)} predictions to {opts.output}")
    if all(ex.relation is not None for ex in examples):
        print_metrics(score(task, [ex.relation for ex in examples], pred))
    return Path(opts.output)


def _evaluate(task: str, opts: RelationEvaluate) -> Results:
    """``spanbert evaluate {tacred,semeval} ...``."""
    if one_of(opts, "predictions", "model") == "model":
        start_distributed(opts.device)
        examples, pred = _predict_from_dir(
            task, opts.model, opts.data, opts.batch_size, opts.device, not opts.disable_tqdm, check_gold=True
        )
    else:
        examples = read_relation_file(opts.data, task=task)
        pred = read_predictions(task, opts.predictions, examples)
    if any(ex.relation is None for ex in examples):
        raise SpanBertError(f"{opts.data}: found records without a relation label; expected gold labels to score against")
    gold = [ex.relation for ex in examples]
    return Results({**score(task, gold, pred), "examples": len(gold), "label_counts": dict(Counter(gold))}, "f1")


SPECS = {
    name: TaskSpec(
        name, description, _finetune, _predict, _evaluate, options=ACTIONS[name], metric="f1", data=data,
        dev_split=split, scores_test=True,
    )
    for name, description, data, split in (
        ("tacred", "relation extraction, TACRED JSON, entity masking", "TACRED train/dev/test .json",
         RecordSplit(".json", "json-list")),
        ("semeval", "relation classification, SemEval-2010 Task 8", "SemEval-2010 Task 8 .TXT files",
         RecordSplit(".txt", "blank-line-blocks")),
    )
}  # fmt: skip
