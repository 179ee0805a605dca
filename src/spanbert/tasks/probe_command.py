"""`spanbert probe`: every span probe on one encoder, with all its layers and with layer 0 only, in one table.

Each (probe, row) is one `spanbert finetune probe` run in ``OUTPUT_DIR/<probe>/<row>/`` (through the task API,
`spanbert.tasks.finetune`), then scored on the probe's test file (`spanbert.tasks.score`, with per-example
statistics for resampled intervals); the encoder's features are computed once per data file and shared by
both rows (`spanbert.tasks.probe_features`). The table and ``results.json`` go in ``OUTPUT_DIR``. A run
whose test score is already there is kept (``--overwrite_output_dir`` redoes it), so a killed command
started again goes on where it stopped.

No torch here: ``spanbert probe --help`` answers at once; the probe's module is loaded when it runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from spanbert import _aliases, distributed, folders
from spanbert.errors import SpanBertError
from spanbert.tasks import api
from spanbert.tasks.probe_options import ProbeRun
from spanbert.tasks.probe_sets import NAMES, PROBE_SETS, canonical
from spanbert.utils import atomic_write, check_output, write_json

ROWS = {"all": "all layers", "0": "layer 0"}
"""The rows of the table: ``--layers`` of each run, and what the table calls it."""

TEST_RESULTS = "test_results.json"
"""A finished (probe, row) run's test scores, beside its dev_results.json."""

TEST_STATS = "test_example_stats.json"
"""Its per-example statistics on the test subsample (`spanbert.metrics.resample`)."""


def _names(text: str, what: str, known: tuple[str, ...], spell: Any) -> list[str]:
    names = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name = spell(item)
        if name is None:
            raise SpanBertError(f"--{what}: found {item!r}, expected a comma list of: {', '.join(known)}")
        names.append(name)
    if not names:
        raise SpanBertError(f"--{what}: found {text!r}, expected a comma list of: {', '.join(known)}")
    return list(dict.fromkeys(names))


def default_output(model: str) -> Path:
    """``runs/probe-NAME``: NAME the model folder's, or its run's when it is a pre-training export (final/)."""
    folder = Path(model).resolve()
    name = folder.parent.name if folder.name in ("final", "best") and folder.parent.name else folder.name
    return Path("runs") / f"probe-{name}"


def data_files(root: Path, names: list[str]) -> dict[str, tuple[Path, Path, Path]]:
    """(train, dev, test) of each probe under ``root``, all there (else one error listing what is missing)."""
    files = {n: tuple(root / f for f in PROBE_SETS[n].files) for n in names}
    missing = sorted({str(p) for paths in files.values() for p in paths if not p.exists()})
    if missing:
        raise SpanBertError(f"--data_root: found no {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}; "
                            f"expected the probes' data under {root} (pass --data_root, or --probes to run fewer)")  # fmt: skip
    return files  # type: ignore[return-value]


def _options(opts: ProbeRun) -> dict[str, Any]:
    """The options every run of the set shares, as `spanbert finetune probe` names them (unset: its default)."""
    keys = ("learning_rate", "num_train_epochs", "seed", "data_seed", "max_train_examples", "max_eval_examples",
            "max_seq_length", "features_cache")  # fmt: skip
    return {"device": opts.device, "disable_tqdm": opts.disable_tqdm,
            **{k: getattr(opts, k) for k in keys if getattr(opts, k) is not None}}  # fmt: skip


def run_one(name: str, row: str, files: tuple[Path, Path, Path], opts: ProbeRun, out: Path) -> dict[str, Any]:
    """One (probe, row): fine-tuned and scored on test, or read back when its test score is there."""
    cell = out / name / row
    done = cell / TEST_RESULTS
    if done.is_file() and not opts.overwrite_output_dir:
        distributed.print0(f"{name} ({ROWS[row]}): finished before, kept ({cell}; --overwrite_output_dir redoes it)")
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    train, dev, test = files
    options = _options(opts)
    again = cell.exists()  # a run killed midway starts over
    run = api.finetune("probe", model=opts.model, train=train, dev=dev, output_dir=cell, probe=name, layers=row,
                       **({"overwrite_output_dir": True} if again else {}), **options)  # fmt: skip
    scoring = {k: options[k] for k in ("device", "features_cache") if k in options}
    tested = api.score("probe", cell, test, probe=name, example_stats=str(cell / TEST_STATS), **scoring)
    result = {"probe": name, "layers": row, "dev": run.score, "test": tested.score, "dev_results": run.scores,
              "test_results": tested.scores, "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    distributed.on_main(lambda: write_json(done, result, sort_keys=True))
    return result


def table(model: str, results: list[dict[str, Any]], rows: list[str]) -> str:
    """The set as Markdown: a probe a line, dev / test micro F1 of each row, and what context adds on test."""
    head = ["probe", *(f"{ROWS[r]} (dev / test)" for r in rows)]
    if rows == ["all", "0"]:
        head.append("context (test: all - layer 0)")
    lines = [f"Span probes of {model}: micro F1 (0-100) at threshold 0.5.", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]  # fmt: skip
    by = {(r["probe"], r["layers"]): r for r in results}
    for name in dict.fromkeys(r["probe"] for r in results):
        cells = [name] + [f"{by[name, row]['dev']:.1f} / {by[name, row]['test']:.1f}" for row in rows]
        if rows == ["all", "0"]:
            cells.append(f"{by[name, 'all']['test'] - by[name, '0']['test']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def next_steps(opts: ProbeRun, out: Path) -> list[str]:
    name = next(iter(_names(opts.probes, "probes", NAMES, canonical)))
    train, dev, test = PROBE_SETS[name].files
    root = opts.data_root
    return [
        "",
        "next:",
        f"  per probe: {out}/<probe>/<row>/ (dev_results.json, test_results.json, test_example_stats.json)",
        "  another encoder on the very same targets:  spanbert probe --model OTHER_MODEL",
        f"  one probe at another rate:  spanbert finetune probe --probe {name} --model {opts.model} "
        f"--train_file {root}/{train} --validation_file {root}/{dev} --learning_rate 3e-4 --output_dir runs/{name}-3e-4",
        f"  in a study (docs/study.md):  {{task: probe, probe: {name}, train: {root}/{train}, dev: {root}/{dev}, "
        f"test: {root}/{test}, learning_rates: [1e-3, 3e-4]}}",
        "  what the numbers mean: docs/probes.md",
    ]


def run_probes(opts: ProbeRun, prog: str = "spanbert probe") -> list[dict[str, Any]]:
    """Every (probe, row) of ``opts`` fine-tuned and scored (or read back), the table and results.json
    written in its output folder; returns the results, one a (probe, row)."""
    names = _names(opts.probes, "probes", NAMES, canonical)
    rows = _names(opts.layers, "layers", tuple(ROWS), lambda x: x if x in ROWS else None)
    root = Path(opts.data_root)
    files = data_files(root, names)
    if not Path(opts.model).is_dir():
        raise SpanBertError(
            f"--model: found no folder {opts.model}, expected an encoder folder (config.json and weights)"
        )
    out = Path(opts.output_dir) if opts.output_dir else default_output(opts.model)
    # a folder of runs with their table, as a --sweep's folder is: a run folder (its manifest's kind)
    check_output(out, folder=True, owner="run", inputs=[("--model", opts.model), ("--data_root", str(root))],
                 writes=("results.json", "table.md", *names))  # fmt: skip
    distributed.init_distributed(distributed.resolve_device(opts.device))
    claim = folders.Claim(out, "run", prog)
    distributed.on_main(claim.acquire)
    t0 = time.perf_counter()
    try:
        results = [run_one(name, row, files[name], opts, out) for name in names for row in rows]
        text = table(opts.model, results, rows)

        def write() -> None:
            write_json(
                out / "results.json", {"model": str(Path(opts.model).resolve()), "results": results}, sort_keys=True
            )
            with atomic_write(out / "table.md", encoding="utf-8") as f:
                f.write(text)

        distributed.on_main(write)
    finally:
        claim.release()
    distributed.print0("\n" + text)
    distributed.print0(f"{len(results)} runs in {time.perf_counter() - t0:.0f} s; the table is in {out / 'table.md'}, "
                       f"every number in {out / 'results.json'}")  # fmt: skip
    distributed.print0("\n".join(next_steps(opts, out)))
    return results

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
