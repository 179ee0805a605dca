"""CPU time, page faults and resident memory of `spanbert pretrain` under one allocator setting: the
mmap threshold that `spanbert.utils.configure_malloc` fixes, how often the trainer trims the heap, and
PyTorch's huge pages (THP_MEM_ALLOC_ENABLE, which `import spanbert` turns on). One setting per process,
since malloc settings are per process; run it once per row of the table in docs/benchmarks.md
("Memory", third pass) and compare the CPU seconds.

    # the small model on 2 x 512-token blocks, 100 steps, the current defaults
    OMP_NUM_THREADS=1 python bench/allocator.py small --corpus /tmp/mem/corpus
    # the same with glibc's dynamic threshold and a trim after every step
    OMP_NUM_THREADS=1 python bench/allocator.py small --corpus /tmp/mem/corpus --threshold glibc --trim_every 0
    # the quick start (tiny model, bundled corpus), 600 steps, 1 MB threshold, no huge pages
    THP_MEM_ALLOC_ENABLE=0 OMP_NUM_THREADS=1 python bench/allocator.py quickstart --threshold 1048576

No transformers line: this compares allocator settings of one training loop, not two implementations
(bench/memory.py has the transformers reference for the memory itself). Extra `spanbert pretrain`
options follow `--` (e.g. `-- --pad_to 512 --max_predictions 80`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import rss_mb  # noqa: E402  (the sibling benchmark's RSS reader)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", nargs="?", choices=["small", "quickstart"], help="small: small model, 2 x 512 tokens; quickstart: `spanbert pretrain`")
    p.add_argument("--corpus", help="small: a `spanbert preprocess` output folder")
    p.add_argument("--steps", type=int, help="optimizer steps (default: 100 small, 600 quickstart)")
    p.add_argument("--threshold", default="8388608", help="mmap threshold in bytes, or 'glibc' for glibc's dynamic one (default: 8 MB, the current setting)")
    p.add_argument("--trim_every", type=float, default=2.0, help="trim the heap at most every N s; 0 = after every step; -1 = never (default: 2)")
    p.add_argument("--every", type=int, default=10, help="sample RSS every N steps (default: 10)")
    p.add_argument("extra", nargs="*", help="extra `spanbert pretrain` options, after --")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:  # the small run on a tiny corpus of the built-in text, a few steps
        from pathlib import Path

        from smoke import tiny_corpus

        a.run, a.corpus, a.steps, a.every = "small", str(tiny_corpus(Path(tempfile.mkdtemp()))[1]), 4, 1
        a.extra = ["--model", "tiny", "--max_seq_length", "64", *a.extra]
    if a.run is None:
        p.error("give the run: small or quickstart (or --smoke)")
    if a.run == "small" and not a.corpus:
        p.error("small needs --corpus (a spanbert preprocess output)")

    from torch.optim.optimizer import register_optimizer_step_post_hook

    from spanbert import loop, pretrain_command, trainer, utils

    trims: list[tuple[float, float]] = []  # (seconds in malloc_trim, MB returned)

    def trim(min_interval: float = 2.0) -> bool:
        if a.trim_every < 0:
            return False
        before, t0 = rss_mb(), time.perf_counter()
        done = utils.trim_heap(min_interval=a.trim_every if min_interval > 0 else 0.0)
        if done:
            trims.append((time.perf_counter() - t0, before - rss_mb()))
        return done

    loop.trim_heap = trim  # where the training steps and evaluations call it
    if a.threshold == "glibc":
        trainer.configure_malloc = lambda *args, **kwargs: False
    else:
        trainer.configure_malloc = lambda *args, **kwargs: utils.configure_malloc(mmap_threshold=int(a.threshold))

    samples: list[int] = []
    count = {"steps": 0}

    def hook(opt, args, kwargs) -> None:
        count["steps"] += 1
        if count["steps"] % a.every == 0:
            samples.append(round(rss_mb()))

    register_optimizer_step_post_hook(hook)
    steps = a.steps or (100 if a.run == "small" else 600)
    with tempfile.TemporaryDirectory() as out:
        if a.run == "small":
            argv = ["--corpus", a.corpus, "--model", "small", "--per_device_train_batch_size", "2",
                    "--gradient_accumulation_steps", "1", "--warmup_steps", "100", "--learning_rate", "1e-4",
                    "--save_steps", "0", "--eval_steps", "0", "--output_dir", f"{out}/run"]  # fmt: skip
        else:
            os.chdir(out)  # the quick start writes runs/ in the working directory
            argv = []
        argv += ["--max_steps", str(steps), "--logging_steps", "1000", "--disable_tqdm", "--device", "cpu", *a.extra]
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        pretrain_command.main(argv)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    print(f"\n{a.run}, {steps} steps, threshold {a.threshold}, trim every {a.trim_every} s, "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}")  # fmt: skip
    print(f"  CPU {user:.1f} user + {sys_:.1f} sys = {user + sys_:.1f} s, wall {time.perf_counter() - t0:.1f} s, "
          f"{(r1.ru_minflt - r0.ru_minflt) / 1e6:.2f} M page faults, peak RSS {r1.ru_maxrss // 1024} MB")  # fmt: skip
    if trims:
        print(f"  {len(trims)} trims: median {1000 * statistics.median(t for t, _ in trims):.1f} ms, "
              f"median {statistics.median(m for _, m in trims):.0f} MB returned")  # fmt: skip
    if samples:
        print(f"  RSS every {a.every} steps (MB): {samples}")


if __name__ == "__main__":
    main()
