"""Every system and family learns from context: on a tiny corpus whose documents each use the five words
of one topic, a short pre-training brings each held-out loss far below the corpus's unigram entropy.

A model that learns only how often each word occurs stays at the unigram entropy (about 4.2 nats here:
40 words and the full stop); one that reads its context knows the topic and needs to choose among five
words (log 5 = 1.6 nats). A defect in shared code
(initialisation, the optimiser or its schedule, the loss and its weighting, masking, padding and
positions, attention, dropout, the held-out set) keeps a run on that plateau, as it kept the runs of
the learning-speed comparison (docs/fidelity.md, "Learning speed") near it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

WORDS = (
    "river stone bridge market bread fish boat morning bell valley garden window candle letter road "
    "winter summer forest mountain harbor lantern castle meadow orchard village tower island desert "
    "thunder silver copper marble feather anchor compass ladder saddle basket kettle mirror"
).split()  # 8 topics of 5 words

# (system, family or None, the held-out losses that must fall): every sampler (single blocks, NSP
# pairs, causal, the two-tower's), every objective (MLM of spans, subwords and whole words, SBO, NSP's
# MLM, the left-to-right LM, cloze, the two directions of the bi-LM) and every family
SYSTEMS = [
    ("spanbert", None, ("mlm_loss", "sbo_loss")),
    ("bert-1seq", None, ("mlm_loss",)),
    ("bert", None, ("mlm_loss",)),
    ("mask-whole-word", None, ("mlm_loss",)),
    ("ltr", None, ("mlm_loss",)),
    ("cloze", None, ("cloze_loss",)),
    ("bilm", None, ("bilm_fwd_loss", "bilm_bwd_loss")),
    ("spanbert", "modernbert", ("mlm_loss", "sbo_loss")),
    ("bert-1seq", "modernbert", ("mlm_loss",)),
]
# transformers' BertForMaskedLM of the same size on the same blocks: 3.73 after 150 steps, about 2.7
# after 400 (docs/fidelity.md, "Learning speed"): the first steps learn the unigram distribution only
STEPS = 400
MARGIN = 1.0  # nats below the unigram entropy


@pytest.fixture(scope="module")
def topic_corpus(tmp_path_factory) -> Path:
    """80 documents of 8 sentences, each of 6-14 words drawn from its document's topic."""
    rng = np.random.default_rng(0)
    docs = []
    for d in range(80):
        topic = WORDS[(d % 8) * 5 : (d % 8) * 5 + 5]
        lines = [" ".join(topic[int(i)] for i in rng.integers(0, 5, int(rng.integers(6, 15)))) + " ." for _ in range(8)]
        docs.append("\n".join(lines))
    path = tmp_path_factory.mktemp("topics") / "topics.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def unigram_entropy(run: Path) -> float:
    counts = np.load(run / "data" / "preprocessed" / "unigram.npy").astype(float)
    from spanbert.tokenization import load_tokenizer

    tok = load_tokenizer(run / "data" / "tokenizer")
    for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "<s>", "</s>", "<sep>"):
        i = tok.token_to_id(t) if hasattr(tok, "token_to_id") else None
        if i is not None and i < len(counts):
            counts[i] = 0  # never a target
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


@pytest.mark.slow
@pytest.mark.parametrize("system,family,losses", SYSTEMS, ids=[f"{s}-{f or 'own'}" for s, f, _ in SYSTEMS])
def test_every_system_leaves_the_unigram_plateau(system, family, losses, topic_corpus, tmp_path):
    from spanbert.pretrain_command import main

    run = tmp_path / "run"
    argv = ["--system", system, "--corpus", str(topic_corpus), "--model", "tiny",
            "--vocab_size", "300" if family == "modernbert" else "120",  # byte-level BPE: 256 bytes first
            "--max_seq_length", "32", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "1",
            "--learning_rate", "2e-3", "--warmup_steps", "30", "--max_steps", str(STEPS), "--eval_steps", str(STEPS),
            "--eval_fraction", "0.1", "--logging_steps", "50", "--save_steps", "0", "--precision", "fp32",
            "--seed", "1", "--disable_tqdm", "--output_dir", str(run)]  # fmt: skip
    if family:
        argv += ["--family", family]
    assert main(argv) == 0
    entropy = unigram_entropy(run)
    assert entropy > 2 * MARGIN, entropy  # the vocabulary's units (words, or the two-tower's BPE pieces) vary
    held = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    last = [r for r in held if any(k.startswith("eval/") for k in r)][-1]
    for name in losses:
        loss = last[f"eval/{name}"]
        assert loss < entropy - MARGIN, f"{system} ({family or 'own family'}): held-out {name} {loss:.3f} after {STEPS} steps, unigram entropy {entropy:.3f}"
