"""How much a default search measures in its time limit, and how good its pick is.

Runs ``autotune search --model M --budget 8GB`` as a newcomer would (a fresh folder each
time, so an empty compile cache; the search's own default time limit unless ``--timeout``),
``--runs`` times per model, one after the other, and prints per run: the configs measured,
the trials, the wall time, the pick and its speedup over naive from the race (with its
interval), and the search's ledger (where its time went). With ``--reference LIMIT`` it
also runs one longer search per model and then measures its pick beside every default
pick and naive in ``--rounds`` interleaved rounds of fresh bursts (time to quality: each
pick against the longer search's).

Usage (from the repository root, with nothing else running on the machine)::

    python benchmarks/search_efficiency.py --models mu gpt-small --runs 2
    python benchmarks/search_efficiency.py --models mu --runs 2 --reference 30m --rounds 3
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
    fmt_ratio,
    hardware_lines,
    load_average,
    median_of,
    render_table,
    run_rounds_then_table,
    utc_now,
)
from model_knobs import Cell, measure

from autotune.config.train_config import TrainConfig
from autotune.core.errors import AutotuneError
from autotune.core.units import parse_budget
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.study.trials.ledger import LEDGER_PARTS
from autotune.study.trials.records import summarize_config

MODELS = ("mu", "gpt-small")


@dataclass
class SearchRun:
    """One search as the CLI reported it (``--json``), with the load around it."""

    model: str
    limit: str
    load_before: str
    load_after: str
    exit_code: int
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ledger(self) -> dict[str, Any]:
        return self.data.get("ledger") or {}

    @property
    def pick(self) -> TrainConfig | None:
        best = self.data.get("best")
        return TrainConfig.from_mapping(best["config"]) if best else None

    def row(self) -> list[str]:
        race = self.data.get("race") or {}
        interval = race.get("speedup_interval")
        speedup = fmt_ratio(self.data.get("speedup"))
        if interval:
            speedup += f" ({interval[0]:.2f}-{interval[1]:.2f})"
        pick = self.pick
        shown = summarize_config(pick.to_dict(), "seq") if pick is not None else "-"
        if self.exit_code:
            shown = f"exit {self.exit_code}"
        counts = self.data.get("counts") or {}
        return [
            self.model,
            self.limit,
            str(self.ledger.get("configs", "-")),
            str(counts.get("ran", "-")),
            f"{self.data.get('wall_s', 0):.0f} s",
            speedup,
            shown,
            f"{self.load_before} / {self.load_after}",
        ]

    def ledger_row(self) -> list[str]:
        return [self.model, self.limit] + [
            f"{self.ledger.get(name, 0):.0f}" for name, _ in LEDGER_PARTS
        ]


def run_search(
    model: str, budget: str, timeout: str | None, folder: Path, keep: Path | None = None
) -> SearchRun:
    """``autotune search`` in ``folder`` (a fresh one: an empty compile cache); with
    ``keep``, its ``--json`` output and its progress (stderr) are copied there."""
    command = [sys.executable, "-m", "autotune", "search", "--model", model, "--budget", budget]
    command += ["--json", "--output", str(folder / "best.yaml")]
    if timeout is not None:
        command += ["--timeout", timeout]
    before = load_average()
    print(f"- {' '.join(command[2:])} (load {before})", file=sys.stderr, flush=True)
    with subprocess.Popen(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            stdout, stderr = process.communicate()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM here: the search stops as on Ctrl-C
            process.send_signal(signal.SIGINT)
            process.communicate()
            raise
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    after = load_average()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        name = f"{model.replace(':', '_').replace('/', '_')}-{time.strftime('%H%M%S')}"
        (keep / f"{name}.json").write_text(stdout)
        (keep / f"{name}.log").write_text(stderr)
    try:
        data = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        data = {}
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
    return SearchRun(
        model=model,
        limit=timeout or "default",
        load_before=before,
        load_after=after,
        exit_code=done.returncode,
        data=data,
    )


def side_by_side(model: str, picks: dict[str, TrainConfig], rounds: int, steps: int) -> int:
    """The picks measured in interleaved rounds of fresh bursts (rotated each round): the
    median tokens/s of each and its ratio to the first (the longer search's pick)."""
    cells: dict[str, list[Cell]] = {label: [] for label in picks}
    labels = list(picks)

    def run() -> None:
        for r in range(rounds):
            order = labels[r % len(labels) :] + labels[: r % len(labels)]
            for label in order:
                cells[label].append(measure(model, picks[label], steps=steps))

    def table() -> str:
        base = median_of([t for t, _ in cells[labels[0]]])
        rows = []
        for label in labels:
            median = median_of([t for t, _ in cells[label]])
            ratio = fmt_ratio(median / base) if median and base else "-"
            shown = summarize_config(picks[label].to_dict(), "seq")
            rows.append([model, label, shown, f"{median:,.0f}" if median else "-", ratio])
        return render_table(
            ["model", "pick", "config", "median tokens/s", f"vs {labels[0]}"],
            rows,
            align="lllrr",
        )

    return run_rounds_then_table(run, cells, table)


def main(argv: Sequence[str] | None = None) -> int:
    """The searches and their tables; on Ctrl-C or SIGTERM the running search is stopped
    as Ctrl-C stops it (its trials' processes with it), and the exit code is 130 or 143."""

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(128 + signum)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(argv)
    except KeyboardInterrupt as stop:
        code = int(stop.args[0]) if stop.args else 130
        print(f"- interrupted: the search running then was stopped (exit {code})", file=sys.stderr)
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--runs", type=int, default=2, help="default searches per model")
    parser.add_argument("--budget", default="8GB")
    parser.add_argument("--timeout", default=None, help="the searches' limit (default: theirs)")
    parser.add_argument("--reference", default=None, help="a longer search's limit, e.g. 30m")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds")
    parser.add_argument(
        "--keep", type=Path, default=None, help="a folder for each search's JSON and progress"
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps a side-by-side burst")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.rounds < 1 or args.steps < 1:
        parser.error("--runs, --rounds and --steps must be at least 1")
    if args.keep is not None and args.keep.exists() and not args.keep.is_dir():
        parser.error(f"--keep {args.keep}: not a folder (each search's JSON goes into one)")
    try:
        parse_budget(args.budget, device_memory_bytes=None)
        for model in args.models:
            load_model(model)
    except AutotuneError as exc:
        parser.error(str(exc))

    print(f"# search_efficiency.py, {utc_now()}\n")
    print(f"- command: `{command_line(argv)}`")
    for line in hardware_lines(probe(), "cpu"):
        print(f"- {line}")
    print(f"- load average at the start: {load_average()}\n")

    runs: list[SearchRun] = []
    references: dict[str, SearchRun] = {}
    for model in args.models:
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="autotune-efficiency-") as folder:
                runs.append(
                    run_search(model, args.budget, args.timeout, Path(folder), keep=args.keep)
                )
        if args.reference:
            with tempfile.TemporaryDirectory(prefix="autotune-reference-") as folder:
                references[model] = run_search(
                    model, args.budget, args.reference, Path(folder), keep=args.keep
                )

    every = [*runs, *references.values()]
    print(
        render_table(
            ["model", "limit", "configs", "trials", "wall", "speedup (race)", "pick", "load"],
            [r.row() for r in every],
            align="llrrrlll",
        )
    )
    print("\nWhere the time went (seconds; the search's ledger):\n")
    print(
        render_table(
            ["model", "limit", *(label for _, label in LEDGER_PARTS)],
            [r.ledger_row() for r in every],
            align="ll" + "r" * len(LEDGER_PARTS),
        )
    )
    for model, reference in references.items():
        picks: dict[str, TrainConfig] = {}
        if reference.pick is not None:
            picks[f"{reference.limit} search"] = reference.pick
        for i, r in enumerate(x for x in runs if x.model == model):
            if r.pick is not None:
                picks[f"default #{i + 1}"] = r.pick
        naive = reference.data.get("naive")
        if naive:
            picks["naive"] = TrainConfig.from_mapping(naive["config"])
        if len(picks) > 1:
            print(f"\nSide by side ({args.rounds} rounds of fresh bursts, {model}):\n")
            if side_by_side(model, picks, args.rounds, args.steps):
                return 130
    print(f"\n- load average at the end: {load_average()}")
    return 0 if all(r.exit_code == 0 for r in every) else 1


if __name__ == "__main__":
    sys.exit(main())
