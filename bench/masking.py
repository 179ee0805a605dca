"""Masking collators side by side: ours (`PretrainDataset[i]` masking with the span and whole-word schemes,
then `collate_pretrain`) against transformers' `DataCollatorForLanguageModeling`, with and without
`whole_word_mask=True` (transformers 5 merged `DataCollatorForWholeWordMask` into it), on the same
512-token blocks of real text, in one process.

    python bench/masking.py [--batches 8] [--batch-size 32] [--corpus FILE]
    python bench/masking.py --smoke      # tiny sizes, seconds: does it still run (tests/test_bench.py)

Ours is timed on the path training uses: each example is masked by `PretrainDataset.__getitem__`
(its own generator from (seed, epoch, index), the block read from the preprocessed corpus), and the
examples are batched by `collate_pretrain`. A second line times `mask_block` + `collate_pretrain` alone
on in-memory blocks with one shared generator (the masking itself, without the dataset's overhead).
Prints sequences/s of each and the ratios. The text is the Wikipedia chunk of ../shared/data when
present, else the built-in corpus (Python's reference-manual topics).
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import numpy as np

from spanbert.collate import collate_pretrain
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.masking import UnigramSampler, mask_block
from spanbert.preprocess import builtin_corpus, preprocess
from spanbert.tokenization import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
WIKI = ROOT / "../shared/data/pretrain-corpus/enwiki-2015-00.txt.gz"


def load_text(path: Path | None, chars: int) -> str:
    if path is None and WIKI.is_file():
        path = WIKI
    if path is None:
        path = builtin_corpus(Path(tempfile.mkdtemp()) / "corpus.txt")
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read(chars)


def timed(runs, batches, repeat):
    """{name: (best wall seconds, best CPU seconds)} of one pass over ``batches``, over ``repeat`` rounds.

    The collators take turns within each round, so a burst of load from other users of the cores
    hits all of them alike; the best round of each is the least disturbed one. CPU time (of this
    process) is less disturbed than wall time.
    """
    for fn in runs.values():
        fn(batches[0])  # warm-up
    best = {name: (float("inf"), float("inf")) for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            t, c = time.perf_counter(), time.process_time()
            for b in batches:
                fn(b)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the best round of each collator counts")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (2 batches of 4, 1 round): a check that it runs")
    args = ap.parse_args()
    if args.smoke:
        args.batches, args.batch_size, args.repeat = 2, 4, 1

    import torch
    import transformers
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    torch.set_num_threads(1)
    n_blocks = args.batches * args.batch_size
    text = load_text(args.corpus, 200_000 if args.smoke else 2_500_000)
    tmp = Path(tempfile.mkdtemp())
    tok = train_tokenizer(None, 8000, tmp / "tok", texts=text.split("\n"), show_progress=False)
    hf_tok = BertTokenizerFast.from_pretrained(str(tmp / "tok"))

    # The same 512-token blocks for everyone: [CLS] 510 tokens [SEP]. Offsets come from the HF tokenizer
    # (its whole-word collator needs them); our word starts come from our tokenizer; ids are identical.
    # One document (paragraph lines, no blank line), so the dataset's blocks are consecutive 510-token
    # pieces and line up with one HF encoding of the same text: the fixed packing (whole lines packed
    # into blocks, the default since 2026-11-23, would not line up).
    lines = [ln for ln in text[: 4000 * n_blocks].split("\n") if ln.strip()]
    text = "\n".join(lines)
    (tmp / "corpus.txt").write_text(text + "\n", encoding="utf-8")
    corpus = TokenCorpus(preprocess(tmp / "corpus.txt", tmp / "tok", tmp / "corpus", num_workers=1, progress=False))
    datasets = {
        scheme: PretrainDataset(corpus, max_seq_length=512, seed=0, scheme=scheme, block_packing="fixed")
        for scheme in ("span", "whole_word")
    }
    expected = np.arange(n_blocks)[:, None] * 510 + np.array([0, 510])  # (n_blocks, 2) [start, end) of each block
    if len(datasets["span"]) < n_blocks or not np.array_equal(datasets["span"].blocks[:n_blocks], expected):
        raise SystemExit("not enough text for the requested blocks")
    enc = hf_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids_all = np.asarray(enc["input_ids"])
    offs_all = np.asarray(enc["offset_mapping"])
    assert np.array_equal(ids_all[: n_blocks * 510], corpus.tokens(0, n_blocks * 510)[0]), "HF and our ids differ"
    ws_all = tok.word_starts_of(ids_all)
    blocks = []
    for i in range(n_blocks):
        sl = slice(i * 510, (i + 1) * 510)
        ids = np.concatenate([[tok.cls_id], ids_all[sl], [tok.sep_id]])
        offs = np.concatenate([[[0, 0]], offs_all[sl], [[0, 0]]])
        ws = np.concatenate([[True], ws_all[sl], [True]])
        special = np.zeros(512, dtype=np.int64)
        special[[0, -1]] = 1
        blocks.append((ids, ws, offs, special))
    if len(blocks[-1][0]) != 512:
        raise SystemExit("not enough text for the requested blocks")
    batches = [blocks[i : i + args.batch_size] for i in range(0, n_blocks, args.batch_size)]
    first = {id(b): i * args.batch_size for i, b in enumerate(batches)}  # dataset index of each batch's first block

    sampler = UnigramSampler(np.bincount(ids_all, minlength=tok.vocab_size), tok.special_ids())
    specials = tuple(int(i) for i in tok.special_ids())
    rng = np.random.default_rng(0)

    def ours(scheme):
        ds = datasets[scheme]

        def run(batch):  # what a DataLoader worker does for one batch
            i = first[id(batch)]
            return collate_pretrain([ds[j] for j in range(i, i + len(batch))], pad_id=tok.pad_id)

        return run

    def ours_mask_block(scheme):
        def run(batch):
            items = []
            for ids, ws, _, _ in batch:
                r = mask_block(ids, ws, scheme, rng, mask_id=tok.mask_id, special_ids=specials, random_tokens=sampler)
                items.append(
                    {
                        "input_ids": r.input_ids,
                        "labels": r.labels,
                        "token_type_ids": np.zeros(512, np.int64),
                        "sbo_positions": r.sbo_positions,
                        "sbo_left": r.sbo_left,
                        "sbo_right": r.sbo_right,
                        "sbo_rel": r.sbo_rel,
                    }
                )
            return collate_pretrain(items, pad_id=tok.pad_id)

        return run

    def hf(whole_word):
        coll = DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15, whole_word_mask=whole_word, seed=0)

        # features as a HF dataset would hand them over (lists), built outside the timed region
        feats = {
            id(b): [
                {
                    "input_ids": ids.tolist(),
                    "special_tokens_mask": sp.tolist(),
                    **({"offset_mapping": offs.tolist()} if whole_word else {}),
                }
                for ids, _, offs, sp in b
            ]
            for b in batches
        }

        def run(batch):
            return coll(feats[id(batch)])

        return run

    import warnings

    warnings.filterwarnings("ignore")
    runs = {
        "spanbert span: PretrainDataset[i] + collate_pretrain": ours("span"),
        "spanbert whole_word: PretrainDataset[i] + collate_pretrain": ours("whole_word"),
        "  (span: mask_block + collate_pretrain, shared generator)": ours_mask_block("span"),
        "HF DataCollatorForLanguageModeling(whole_word_mask=True)": hf(True),
        "HF DataCollatorForLanguageModeling": hf(False),
    }
    print(
        f"transformers {transformers.__version__}, torch {torch.__version__}, {n_blocks} blocks of 512 tokens, "
        f"batch {args.batch_size}, best of {args.repeat} rounds, 1 thread"
    )
    rate = {}
    print(f"{'':<60} {'seq/s (wall)':>13} {'seq/s (CPU)':>12}")
    for name, (wall, cpu) in timed(runs, batches, args.repeat).items():
        rate[name] = n_blocks / cpu
        print(f"{name:<60} {n_blocks / wall:>13.0f} {rate[name]:>12.0f}")
    print("ratios from CPU time:")
    ours_span = rate["spanbert span: PretrainDataset[i] + collate_pretrain"]
    print(
        f"ratio span / HF whole-word: {ours_span / rate['HF DataCollatorForLanguageModeling(whole_word_mask=True)']:.2f}x"
    )
    print(f"ratio span / HF subword:    {ours_span / rate['HF DataCollatorForLanguageModeling']:.2f}x")
    print(
        f"ratio whole_word / HF whole-word: "
        f"{rate['spanbert whole_word: PretrainDataset[i] + collate_pretrain'] / rate['HF DataCollatorForLanguageModeling(whole_word_mask=True)']:.2f}x"
    )


if __name__ == "__main__":
    main()
