"""The span probes by name (docs/probes.md): what each one labels, how many spans a target has, its data
files under a data root (``../shared/data`` in a checkout) and the sizes of its fixed subsamples.

No torch and no reader: `spanbert probe --help` and the task list read this table without loading a model
file; the readers are in `spanbert.tasks.probe_data`, the probe itself in `spanbert.tasks.probe`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeSet:
    """One probe of the set: a labelled span task of edge probing (Tenney et al. 2019, Table 1)."""

    name: str
    description: str
    spans: int
    """Spans per target: 1 (entity, constituent, POS) or 2 (relation, coreference arc)."""
    data: str
    """The files it reads, in words (for ``--help`` and the docs)."""
    files: tuple[str, str, str]
    """(train, dev, test) under a data root; a dev equal to train is carved from it (`probe_data.carve_dev`)."""
    train_examples: int
    """Targets of the training subsample by default (``--max_train_examples``)."""
    eval_examples: int
    """Targets of the dev and test subsamples by default (``--max_eval_examples``)."""


DATA_SEED = 2019
"""The seed of every subsample and of the relations' dev carve: fixed and apart from the training seed, so
every encoder (and every training seed) is probed on the very same targets (``--data_seed``)."""

PROBE_SETS: dict[str, ProbeSet] = {
    p.name: p
    for p in (
        ProbeSet("entities", "entity types of CoNLL-2003's gold entity spans", 1, "CoNLL-2003 IOB files",
                 ("conll2003/train.txt", "conll2003/valid.txt", "conll2003/test.txt"), 2000, 500),
        ProbeSet("constituents", "constituent labels of the PTB sample's non-terminal spans", 1,
                 "Penn Treebank .mrg files or folders",
                 ("ptb_sample/train", "ptb_sample/dev", "ptb_sample/test"), 2000, 500),
        ProbeSet("pos", "part-of-speech tags of single words (PTB sample)", 1, "Penn Treebank .mrg files or folders",
                 ("ptb_sample/train", "ptb_sample/dev", "ptb_sample/test"), 2000, 500),
        ProbeSet("relations", "SemEval-2010 Task 8 relations of the e1/e2 pairs", 2,
                 "SemEval-2010 Task 8 files (or TACRED JSON)",
                 ("semeval2010_task8/SemEval2010_task8_training/TRAIN_FILE.TXT",
                  "semeval2010_task8/SemEval2010_task8_training/TRAIN_FILE.TXT",
                  "semeval2010_task8/SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT"), 2000, 500),
        ProbeSet("gap", "GAP pronoun-name coreference arcs (pronoun with name A, pronoun with name B)", 2,
                 "GAP TSV files", ("gap_coreference/gap-development.tsv", "gap_coreference/gap-validation.tsv",
                                   "gap_coreference/gap-test.tsv"), 1000, 400),
        ProbeSet("litbank", "LitBank mention-pair coreference arcs inside one window of sentences", 2,
                 "LitBank tenfold_splits .ids files, or CoNLL-2012 files or folders",
                 ("litbank_coref/tenfold_splits/0/train.ids", "litbank_coref/tenfold_splits/0/dev.ids",
                  "litbank_coref/tenfold_splits/0/test.ids"), 2000, 500),
    )
}  # fmt: skip
"""Every probe, in the order its table rows are shown."""

NAMES: tuple[str, ...] = tuple(PROBE_SETS)

_SPELLINGS = {"entity": "entities", "constituent": "constituents", "relation": "relations", "tags": "pos"}


def canonical(name: str) -> str | None:
    """A user's spelling of a probe (any case, singular) -> its name, or None when it is none of them."""
    key = name.strip().lower().replace("-", "_")
    if key in PROBE_SETS:
        return key
    return _SPELLINGS.get(key)
