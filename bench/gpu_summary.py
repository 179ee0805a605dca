"""The Markdown summary of a `bench/gpu.sh` run: OUT/summary.md, one section to paste into docs/gpu.md
(card, versions, the CUDA tests, compilation, the profile of a step) and one into docs/benchmarks.md
(every benchmark setting: tokens/s, MFU, share of the measured matmul, ratios to transformers, the
issue's goals met or not; the study's table when it ran).

    python bench/gpu_summary.py OUT [--failed PART ...]     # bench/gpu.sh runs it last
    python bench/gpu_summary.py --smoke                     # a summary of made-up figures (tests/test_bench.py)

It reads what the parts left (env.txt, tests.xml or tests.log, bench_*.json, modernbert_step.json,
study/summary/table.md); a missing or partial part is said so, never silently left out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

GOALS = {"bert_mfu": 0.40, "bert_ratio": 2.0, "modernbert_ratio": 2.5, "modernbert_mfu": 0.35}
"""The issue's goals: BERT-base at sequence 512 >= 40% MFU and >= 2x transformers at its best;
ModernBERT-base at 2,048 >= 2.5x transformers (sparse prediction) and >= 35% MFU."""
OURS, OURS_COMPILED = "spanbert (MLM+SBO)", "spanbert (MLM+SBO) compiled"
SHORT = {
    "spanbert (MLM+SBO)": "spanbert eager",
    "spanbert (MLM+SBO) compiled": "spanbert compiled",
    "spanbert (MLM only)": "spanbert eager, MLM only",
    "transformers BertForPreTraining (MLM+NSP)": "transformers eager",
    "transformers BertForPreTraining compiled": "transformers compiled",
}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _env(out: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    try:
        lines = (out / "env.txt").read_text().splitlines()
    except OSError:
        return env
    for line in lines:
        if line.startswith(("date:", "commit:", "mode:", "parts:")):
            k, _, v = line.partition(":")
            env[k] = v.strip()
        elif line.startswith(("python ", "torch ", "transformers ", "device ")):
            k, _, v = line.partition(" ")
            env[k] = v.strip()
    return env


def tests_line(out: Path) -> str:
    """One line on the CUDA tests: counts from the JUnit XML (or the log's last line), the failures named."""
    xml = out / "tests.xml"
    if xml.is_file():
        try:
            root = ET.parse(xml).getroot()
            suite = root if root.tag == "testsuite" else root.find("testsuite")
            n, fail, err, skip = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
            seconds = float(suite.get("time", 0))
            failed = [f"{c.get('name')}" for c in suite.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
            line = f"{n - fail - err - skip} passed, {fail + err} failed, {skip} skipped in {seconds:.0f} s"
            return line + (f"; failed: {', '.join(failed[:12])}{' ...' if len(failed) > 12 else ''}" if failed else "")
        except (ET.ParseError, AttributeError, ValueError):
            pass
    log = out / "tests.log"
    if log.is_file():
        last = [ln for ln in log.read_text().splitlines() if re.search(r"\d+ (passed|failed|skipped)", ln)]
        stopped = "stopped at its limit" in log.read_text()
        return (last[-1].strip("= ") if last else "no result line") + (" (stopped at its time limit)" if stopped else "")
    return "not run"


def _pct(x: float | None) -> str:
    return f"{x * 100:.1f}%" if x is not None else "n/a"


def _num(x: float | None, fmt: str = "{:,.0f}") -> str:
    return fmt.format(x) if x is not None else "n/a"


def bert_rows(bench: dict[str, Any]) -> list[str]:
    """Table rows: one per setting and step, the ratio to transformers' eager and best step."""
    rows = []
    for s in bench.get("settings", []):
        med = s["ms_per_step"]
        hf = [k for k in med if k.startswith("transformers")]
        best_hf = min(hf, key=med.get) if hf else None
        for k, ms in med.items():
            ratio_eager = med["transformers BertForPreTraining (MLM+NSP)"] / ms if "transformers BertForPreTraining (MLM+NSP)" in med else None
            ratio_best = med[best_hf] / ms if best_hf else None
            mfu = (s.get("mfu_vs_peak") or {}).get(k)
            mem = (s.get("peak_memory_gib") or {}).get(k)
            rows.append(
                f"| {bench.get('model', '?')} | {s['seq']} | {s['batch']} | {SHORT.get(k, k)} | {s['tokens_per_s'][k]:,.0f} | "
                f"{ms:.1f} | {s['achieved_flops'][k] / 1e12:.3g} | {_pct(mfu)} | {_pct(s['share_of_matmul'][k])} | "
                f"{_num(ratio_eager, '{:.2f}x')} | {_num(ratio_best, '{:.2f}x')} | {_num(mem, '{:.1f}')} |"
            )
        for k, e in (s.get("errors") or {}).items():
            rows.append(f"| {bench.get('model', '?')} | {s['seq']} | {s['batch']} | {SHORT.get(k, k)} | failed: {e} | | | | | | | |")
    return rows


def bert_goals(bench: dict[str, Any]) -> list[str]:
    """The issue's BERT goals at sequence 512 (and 128 against 512), on the best spanbert step."""
    lines = []
    by_seq: dict[int, tuple[float | None, float | None, str]] = {}
    for s in bench.get("settings", []):
        ours = [k for k in (OURS, OURS_COMPILED) if k in s["ms_per_step"]]
        if not ours:
            continue
        best = min(ours, key=s["ms_per_step"].get)
        mfu = (s.get("mfu_vs_peak") or {}).get(best)
        ratio = (s.get("best") or {}).get("ratio")
        score = mfu if mfu is not None else s["share_of_matmul"][best]
        if s["seq"] not in by_seq or (score or 0) > (by_seq[s["seq"]][0] or 0):
            by_seq[s["seq"]] = (score, ratio, f"batch {s['batch']}, {SHORT.get(best, best)}")
    peak_known = any(s.get("mfu_vs_peak") for s in bench.get("settings", []))
    what = "MFU" if peak_known else "share of the measured matmul (no known peak)"
    for seq, (score, ratio, where) in sorted(by_seq.items(), reverse=True):
        mark = ""
        if seq == 512 and peak_known and bench.get("model") == "base":
            ok = score is not None and score >= GOALS["bert_mfu"] and ratio is not None and ratio >= GOALS["bert_ratio"]
            mark = f" -- goal >= {GOALS['bert_mfu']:.0%} MFU and >= {GOALS['bert_ratio']:g}x: {'met' if ok else 'not met'}"
        lines.append(f"- {bench.get('model', '?')}, sequence {seq}: best {what} {_pct(score)} ({where}), "
                     f"{_num(ratio, '{:.2f}x')} transformers at its best{mark}")  # fmt: skip
    if 512 in by_seq and 128 in by_seq and by_seq[128][0] is not None and by_seq[512][0] is not None:
        ok = by_seq[128][0] >= by_seq[512][0]
        lines.append(f"- sequence 128 {'not worse' if ok else 'worse'} than 512 in {what} "
                     f"({_pct(by_seq[128][0])} against {_pct(by_seq[512][0])})")  # fmt: skip
    return lines


def modernbert_section(m: dict[str, Any]) -> list[str]:
    lines = [f"ModernBERT-{m.get('model', '?')}, sequence {m.get('seq', '?')} x {m.get('batch', '?')}, "
             f"{m.get('padding', '?')} padding ({m.get('real_tokens', 0):,} real tokens a step):", "",
             "| step | real tokens/s | ms a step | share of its GEMMs' rate | MFU | vs transformers (sparse prediction) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    med = m.get("ms_per_step", {})
    sparse = med.get("transformers, sparse_prediction")
    for k, ms in med.items():
        share = (m.get("share_of_matmul_rate") or {}).get(k)
        mfu = (m.get("mfu_vs_peak") or {}).get(k)
        lines.append(f"| {k} | {m['real_tokens_per_s'][k]:,.0f} | {ms:.1f} | {_pct(share)} | {_pct(mfu)} | "
                     f"{_num(sparse / ms if sparse else None, '{:.2f}x')} |")  # fmt: skip
    for k, e in (m.get("errors") or {}).items():
        lines.append(f"| {k} | failed: {e} | | | | |")
    best = (m.get("best") or {}).get("spanbert")
    ratio = (m.get("best") or {}).get("ratio")
    mfu = (m.get("mfu_vs_peak") or {}).get(best) if best else None
    lines.append("")
    if m.get("compile_seconds") is not None:
        lines.append(f"- compilation {m['compile_seconds']:.1f} s; compiled vs eager {_num(m.get('compiled_vs_eager'), '{:.2f}x')}")
    goal = ""
    if m.get("model") == "base" and m.get("dense_peak_flops"):
        ok = ratio is not None and ratio >= GOALS["modernbert_ratio"] and mfu is not None and mfu >= GOALS["modernbert_mfu"]
        goal = (f" -- goal >= {GOALS['modernbert_ratio']:g}x and >= {GOALS['modernbert_mfu']:.0%} MFU: "
                f"{'met' if ok else 'not met'}")  # fmt: skip
    lines.append(f"- best spanbert step ({best}): {_num(ratio, '{:.2f}x')} transformers at its best, MFU {_pct(mfu)}{goal}")
    return lines


def profile_line(bench: dict[str, Any]) -> str | None:
    prof = bench.get("profile")
    if not prof:
        return None
    if "error" in prof:
        return f"- profile of {prof['variant']}: failed ({prof['error']})"
    ms = dict(prof["ms"])
    step = ms.pop("step (profiled)", None)
    total = step or sum(ms.values()) or 1.0
    parts = ", ".join(f"{k} {v:.2f} ms ({v / total:.0%})" for k, v in sorted(ms.items(), key=lambda kv: -kv[1]))
    return (f"- profile of {prof['variant']} ({bench.get('model')}, sequence {prof['seq']} x {prof['batch']}), a step of "
            f"{_num(step, '{:.2f}')} ms: {parts}")  # fmt: skip


def summary(out: Path, failed: list[str]) -> str:
    env = _env(out)
    dry = "dry-run" in env.get("mode", "")
    card = env.get("device", "?")
    lines = [f"# `bench/gpu.sh` on {card}, {env.get('date', '?')}", ""]
    if dry:
        lines += ["**A dry run on the CPU (tiny sizes, synthetic data, `aot_eager`): it shows the script works, "
                  "not anything about speed.**", ""]  # fmt: skip
    lines += [f"torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, Python {env.get('python', '?')}, "
              f"commit {env.get('commit', '?')}; parts: {env.get('parts', '?')}.", ""]  # fmt: skip
    if failed:
        lines += [f"Failed or stopped: {', '.join(failed)} (their logs are under the output folder).", ""]

    benches = {name: b for name in ("base", "small") if (b := _read_json(out / f"bench_{name}.json")) is not None}
    modern = _read_json(out / "modernbert_step.json")

    lines += ["## For docs/gpu.md", ""]
    lines.append(f"- CUDA tests (`pytest -m cuda`): {tests_line(out)}")
    for name, b in benches.items():
        comp = b.get("compile_seconds") or {}
        if comp:
            lines.append(f"- compilation, BERT {name} (`--compile`, {b.get('backend')}): "
                         + ", ".join(f"{SHORT.get(k, k)} {v:.1f} s" for k, v in comp.items()) + " (the first step, once a process)")  # fmt: skip
        if not b.get("complete", True):
            lines.append(f"- BERT {name}: only {len(b.get('settings', []))} setting(s) measured before the time limit")
    for b in benches.values():
        line = profile_line(b)
        if line:
            lines.append(line)
    lines.append("")

    lines += ["## For docs/benchmarks.md", ""]
    if benches:
        first = next(iter(benches.values()))
        lines += [f"BERT pre-training steps (MLM+SBO; transformers' `BertForPreTraining` with SDPA, MLM+NSP), "
                  f"{first.get('dtype')}, {first.get('device')}; measured matmul {first.get('matmul_flops', 0) / 1e12:.3g} "
                  f"TFLOP/s, dense peak {_num((first.get('dense_peak_flops') or 0) / 1e12 or None, '{:.0f}')} TFLOP/s "
                  "(`bench/pretrain_step.py --compile --profile`):", "",
                  "| model | seq | batch | step | tokens/s | ms a step | TFLOP/s | MFU | share of matmul | vs transformers eager | "
                  "vs transformers best | peak GiB |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for b in benches.values():
            lines += bert_rows(b)
        lines.append("")
        for b in benches.values():
            lines += bert_goals(b)
        lines.append("")
    else:
        lines += ["BERT benchmark: not run or no figures.", ""]
    if modern is not None:
        lines += modernbert_section(modern) + [""]
    else:
        lines += ["ModernBERT benchmark: not run or no figures.", ""]
    table = out / "study" / "summary" / "table.md"
    if table.is_file():
        # the study's own headings one level under this section's
        study = [("##" + ln if ln.startswith("#") else ln) for ln in table.read_text().strip().splitlines()]
        lines += ["### Study (SpanBERT vs BERT-1seq, small, equal tokens, SQuAD 1.1)", "", *study, ""]
    return "\n".join(lines) + "\n"


def smoke_figures(out: Path) -> None:
    """Made-up figures in the layout of a GPU run (a known peak, compiled and eager, a failed variant)."""
    (out / "env.txt").write_text("date: 2026-12-01T00:00:00Z\ncommit: abc\nmode: GPU\nparts: tests,bench\npython 3.12.3\n"
                                 "torch 2.11.0+cu130 cuda 13.0\ntransformers 5.17.0\ndevice NVIDIA H100 80GB HBM3\n")  # fmt: skip
    ms = {OURS: 48.7, OURS_COMPILED: 30.0, "spanbert (MLM only)": 45.2, "transformers BertForPreTraining (MLM+NSP)": 62.5}
    tokens = 16384
    fpt = 608.6e6
    setting = {"seq": 512, "batch": 32, "tokens": tokens, "flops_per_token": fpt,
               "ms_per_step": ms, "tokens_per_s": {k: tokens / v * 1000 for k, v in ms.items()},
               "achieved_flops": {k: fpt * tokens / v * 1000 for k, v in ms.items()},
               "mfu_vs_peak": {k: fpt * tokens / v * 1000 / 989e12 for k, v in ms.items()},
               "share_of_matmul": {k: fpt * tokens / v * 1000 / 758e12 for k, v in ms.items()},
               "peak_memory_gib": {k: 20.0 for k in ms}, "errors": {"transformers BertForPreTraining compiled": "OutOfMemoryError: x"},
               "best": {"spanbert": OURS_COMPILED, "transformers": "transformers BertForPreTraining (MLM+NSP)", "ratio": 62.5 / 30.0}}  # fmt: skip
    bench = {"model": "base", "dtype": "torch.bfloat16", "device": "NVIDIA H100 80GB HBM3", "matmul_flops": 758e12,
             "dense_peak_flops": 989e12, "compile_seconds": {OURS_COMPILED: 31.0}, "backend": "inductor", "complete": True,
             "settings": [setting, {**setting, "seq": 128, "batch": 128}],
             "profile": {"variant": OURS_COMPILED, "seq": 512, "batch": 32,
                         "ms": {"matmul": 14.0, "attention": 4.0, "fused (compiled)": 6.0, "optimizer": 2.0, "other": 1.0,
                                "step (profiled)": 30.5, "idle": 3.5}}}  # fmt: skip
    (out / "bench_base.json").write_text(json.dumps(bench))
    (out / "tests.log").write_text("....\n103 passed in 95.1s\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", help="the output folder of bench/gpu.sh")
    p.add_argument("--failed", nargs="*", default=[], help="the parts bench/gpu.sh saw fail")
    p.add_argument("--smoke", action="store_true", help="summarise made-up figures (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        out = Path(tempfile.mkdtemp())
        smoke_figures(out)
    elif a.out:
        out = Path(a.out)
    else:
        print("error: bench/gpu_summary.py: found no output folder, expected OUT (or --smoke)", file=sys.stderr)
        sys.exit(2)
    text = summary(out, a.failed)
    (out / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
