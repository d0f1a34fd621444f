"""Does the search find what an exhaustive grid finds, for a fraction of the trial time?

Runs every config of a small space (the grid) with the real burst runner, then a search
over the same space limited to ``--fraction`` (default 30%) of the grid's trial time, and
prints both bests, the throughput ratio (target: >= 95%) and the trial-time ratio (target:
<= 30%). Trial time is the summed wall time of the bursts (process start included); the
search's own overhead (sampler, storage) and the winner's verification are shown apart.

Both winners are then measured again, alternately (``--remeasure`` rounds each), because
on a shared machine the grid and the search run minutes apart under different load; the
side-by-side ratio is the fairer one. The load average is printed before and after.

    python benchmarks/search_vs_grid.py                   # gpt-small, seq 128, CPU
    python benchmarks/search_vs_grid.py --knob num_workers=0,1 --fraction 0.2
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile
    from autotune.study import SearchEvent, SearchResult, TrialRecord
    from autotune.study.plan.space import SearchSpace

QUALITY_TARGET = 0.95
TIME_TARGET = 0.30
DEFAULT_KNOBS = [
    "precision=fp32,bf16",
    "activation_checkpointing=false,true",
    "compile=off",
    "num_workers=0",
    "attention=sdpa",
]


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


@dataclass(frozen=True)
class _Bench:
    """The space both sides search, and how every burst here is run."""

    args: argparse.Namespace
    knobs: list[str]
    spec: ModelSpec
    profile: HardwareProfile
    caps: DeviceCaps
    budget: int
    space: SearchSpace

    @property
    def unit(self) -> str:
        return self.spec.throughput_label

    def throughput(self, result: BurstResult) -> float:
        return float(self.spec.pick_throughput(result.tokens_per_s, result.samples_per_s) or 0.0)

    def burst(self, config: TrainConfig) -> BurstResult:
        """One burst of ``config``, measured exactly as the grid and the re-measure do."""
        from autotune.burst.supervisor import run_burst

        return run_burst(
            self.spec,
            config,
            steps=self.args.steps,
            warmup=self.args.warmup,
            budget_bytes=self.budget,
            timeout_s=600,
            device=self.caps.device,
            seed=self.args.seed,
        )


@dataclass(frozen=True)
class _Grid:
    """Every config's burst, the fastest that ran, and the wall time of it all."""

    runs: list[tuple[TrainConfig, BurstResult]]
    best: tuple[TrainConfig, BurstResult] | None
    wall_s: float

    @property
    def trial_s(self) -> float:
        """The summed wall time of the bursts (process start included)."""
        return sum(r.wall_s or 0.0 for _, r in self.runs)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seq-len", default="128")
    parser.add_argument("--budget", default="8GB")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--knob", action="append", default=None, help=f"space restriction (default {DEFAULT_KNOBS})"
    )
    parser.add_argument("--fraction", type=float, default=TIME_TARGET)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--remeasure", type=int, default=2)
    return parser.parse_args(argv)


def _set_up(args: argparse.Namespace) -> _Bench:
    from autotune.core.units import parse_budget
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model
    from autotune.study.plan.space import SearchSpace, parse_knob_args, parse_seq_len

    knobs = args.knob or DEFAULT_KNOBS
    spec = load_model(args.model)
    profile = probe()
    caps = profile.device(args.device)
    budget = parse_budget(args.budget, device_memory_bytes=caps.total_memory_bytes)
    space = SearchSpace.for_model(
        spec,
        caps,
        seq_len=parse_seq_len(args.seq_len, max_seq_len=spec.max_seq_len),
        cpu_count=profile.cpu.logical_cores,
        restrict=parse_knob_args(knobs),
    )
    return _Bench(args, knobs, spec, profile, caps, budget, space)


def _print_header(bench: _Bench) -> None:
    import torch

    caps, cpu, space, args = bench.caps, bench.profile.cpu, bench.space, bench.args
    print(
        f"hardware: {caps.name} ({caps.device}); CPU {cpu.model_name}, "
        f"{cpu.logical_cores} logical cores (shared with other work: see the load); "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
    print(
        f"space: {bench.spec.name}, global batch {space.global_batch}, seq {list(space.seq_len)}, "
        f"{space.size()} configs ({', '.join(bench.knobs)}); {args.warmup} warm-up + {args.steps} "
        f"timed steps per burst; budget {args.budget}"
    )
    print(f"load average before: {_load()}")


def _run_grid(bench: _Bench) -> _Grid:
    """Every config of the space, one burst each."""
    from autotune.study import summarize_config

    runs: list[tuple[TrainConfig, BurstResult]] = []
    t0 = time.monotonic()
    for i, config in enumerate(bench.space.grid()):
        result = bench.burst(config)
        runs.append((config, result))
        print(
            f"  grid {i + 1:>3}/{bench.space.size()}: {result.status:<7} "
            f"{bench.throughput(result):>10,.0f} {bench.unit}  {result.wall_s or 0:6.1f} s  "
            f"{summarize_config(config.to_dict())}",
            flush=True,
        )
    wall_s = time.monotonic() - t0
    ok = [(c, r) for c, r in runs if r.ok]
    best = max(ok, key=lambda cr: bench.throughput(cr[1])) if ok else None
    return _Grid(runs, best, wall_s)


def _run_search(bench: _Bench, limit_s: float) -> tuple[SearchResult, float]:
    """The search over the same space, limited to ``limit_s`` of trial time; its result and
    its wall time."""
    from autotune.study import search, search_options

    def show(e: SearchEvent) -> None:
        if e.kind == "trial" and e.trial is not None:
            print(
                f"  search #{e.trial.number:>2}: {e.trial.status:<9} "
                f"{e.trial.throughput or 0:>10,.0f} {bench.unit}  {e.trial.wall_s or 0:6.1f} s  "
                f"{e.trial.summary()}",
                flush=True,
            )

    args = bench.args
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        found = search(
            bench.spec,
            budget=bench.budget,
            **search_options(
                device=bench.caps.device,
                seq_len=list(bench.space.seq_len),
                knobs=bench.knobs,
                trials=None,
                timeout=limit_s,
                steps=args.steps,
                warmup=args.warmup,
                seed=args.seed,
                hardware=bench.profile,
                storage=f"sqlite:///{tmp}/study.db",
                output=None,
                progress=show,
            ),
        )
        return found, time.monotonic() - t0


def _remeasure(bench: _Bench, configs: dict[str, TrainConfig]) -> dict[str, list[float]]:
    """Each winner again, alternately, ``--remeasure`` rounds."""
    again: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(bench.args.remeasure):
        for name, config in configs.items():
            again[name].append(bench.throughput(bench.burst(config)))
    return again


def _report(
    bench: _Bench,
    grid: _Grid,
    grid_winner: tuple[TrainConfig, BurstResult],
    found: SearchResult,
    search_winner: TrialRecord,
    search_wall: float,
    again: dict[str, list[float]],
) -> None:
    """Both bests side by side, the ratios against their targets, and the details."""
    from autotune.study import summarize_config

    unit = bench.unit
    grid_cfg, grid_best = grid_winner
    search_cfg = search_winner.train_config()
    search_tp = search_winner.throughput or 0.0
    race_time = 0.0
    if found.race is not None:  # the race is part of what the search costs
        race_time = sum(b.wall_s or 0.0 for e in found.race.entrants for b in e.bursts)
    search_time = sum(t.wall_s or 0.0 for t in found.trials if t.ran) + race_time
    counts = found.counts()
    quality = search_tp / bench.throughput(grid_best)
    # The grid measured every config under the same conditions, the searched one included:
    # its own figure for the search's choice is free of the drift between the two runs.
    in_grid = next((bench.throughput(r) for c, r in grid.runs if c == search_cfg), None)
    time_ratio = search_time / grid.trial_s
    print()
    print(f"{'':<22}{'best ' + unit:>16}  {'trials':>7}  {'trial time':>11}  config")
    print(
        f"{'grid (exhaustive)':<22}{bench.throughput(grid_best):>16,.0f}  {len(grid.runs):>7}  "
        f"{grid.trial_s:>10.0f}s  {summarize_config(grid_cfg.to_dict())}"
    )
    print(
        f"{'search (TPE)':<22}{search_tp:>16,.0f}  {counts['measured']:>7}  "
        f"{search_time:>10.0f}s  {summarize_config(search_cfg.to_dict())}"
    )
    print(
        f"search / grid: throughput {quality:.1%} (target >= {QUALITY_TARGET:.0%}), trial time "
        f"{time_ratio:.1%} (target <= {TIME_TARGET:.0%})"
    )
    print(
        f"search detail: {counts['ran']} bursts ({counts['pruned']} pruned, "
        f"{counts['infeasible']} infeasible, {counts['failed']} failed, "
        f"{counts['duplicates']} repeats not re-run); wall {search_wall:.0f}s including the "
        f"sampler and storage; trial time includes the {race_time:.0f}s finalist race; grid wall "
        f"{grid.wall_s:.0f}s; search stopped: {found.stopped}"
    )
    if in_grid is not None:
        print(
            f"the grid's own measurement of the searched config: {in_grid:,.0f} {unit} -> "
            f"{in_grid / bench.throughput(grid_best):.1%} of the grid best (the choice, without "
            "the drift between the runs)"
        )
    if bench.args.remeasure:
        g, s = statistics.median(again["grid"]), statistics.median(again["search"])
        same = search_cfg == grid_cfg
        print(
            f"re-measured side by side ({bench.args.remeasure} alternating bursts each, median): "
            f"grid best {g:,.0f}, search best {s:,.0f} {unit} -> {s / g:.1%}"
            + (" (the same config)" if same else "")
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    bench = _set_up(args)
    _print_header(bench)
    grid = _run_grid(bench)
    if grid.best is None:
        print("no grid config ran successfully", file=sys.stderr)
        return 1
    found, search_wall = _run_search(bench, args.fraction * grid.trial_s)
    if found.best is None:
        print("the search found nothing", file=sys.stderr)
        return 1
    print(f"load average after the runs: {_load()}")
    winners = {"grid": grid.best[0], "search": found.best.train_config()}
    again = _remeasure(bench, winners)
    _report(bench, grid, grid.best, found, found.best, search_wall, again)
    print(f"load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
