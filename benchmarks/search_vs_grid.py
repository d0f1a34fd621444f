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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)

    import torch

    from autotune.burst import BurstResult, run_burst
    from autotune.config import TrainConfig
    from autotune.hardware import probe
    from autotune.models.registry import load_model
    from autotune.space import SearchSpace, parse_knob_args, parse_seq_len
    from autotune.study import search, summarize_config
    from autotune.units import parse_budget

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
    unit = "tokens/s" if spec.throughput_unit == "tokens" else "samples/s"
    print(
        f"hardware: {caps.name} ({caps.device}); CPU {profile.cpu.model_name}, "
        f"{profile.cpu.logical_cores} logical cores (shared with other work: see the load); "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
    print(
        f"space: {spec.name}, global batch {space.global_batch}, seq {list(space.seq_len)}, "
        f"{space.size()} configs ({', '.join(knobs)}); {args.warmup} warm-up + {args.steps} "
        f"timed steps per burst; budget {args.budget}"
    )
    print(f"load average before: {_load()}")

    def throughput(result: BurstResult) -> float:
        value = result.tokens_per_s if unit == "tokens/s" else result.samples_per_s
        return float(value or 0.0)

    def burst(config: TrainConfig) -> BurstResult:
        """One burst of ``config``, measured exactly as the grid and the re-measure do."""
        return run_burst(
            spec,
            config,
            steps=args.steps,
            warmup=args.warmup,
            budget_bytes=budget,
            timeout_s=600,
            device=caps.device,
            seed=args.seed,
        )

    # -- the exhaustive grid ------------------------------------------------------------
    grid: list[tuple[TrainConfig, BurstResult]] = []
    t0 = time.monotonic()
    for i, config in enumerate(space.grid()):
        result = burst(config)
        grid.append((config, result))
        print(
            f"  grid {i + 1:>3}/{space.size()}: {result.status:<7} {throughput(result):>10,.0f} "
            f"{unit}  {result.wall_s or 0:6.1f} s  {summarize_config(config.to_dict())}",
            flush=True,
        )
    grid_wall = time.monotonic() - t0
    grid_time = sum(r.wall_s or 0.0 for _, r in grid)
    ok = [(c, r) for c, r in grid if r.ok]
    if not ok:
        print("no grid config ran successfully", file=sys.stderr)
        return 1
    grid_cfg, grid_best = max(ok, key=lambda cr: throughput(cr[1]))

    # -- the search, with a fraction of the grid's trial time ------------------------------
    limit = args.fraction * grid_time
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        found = search(
            spec,
            budget=budget,
            device=caps.device,
            seq_len=list(space.seq_len),
            knobs=knobs,
            trials=None,
            timeout=limit,
            steps=args.steps,
            warmup=args.warmup,
            seed=args.seed,
            hardware=profile,
            storage=f"sqlite:///{tmp}/study.db",
            output=None,
            progress=lambda e: (
                print(
                    f"  search #{e.trial.number:>2}: {e.trial.status:<9} "
                    f"{e.trial.throughput or 0:>10,.0f} {unit}  {e.trial.wall_s or 0:6.1f} s  "
                    f"{e.trial.summary()}",
                    flush=True,
                )
                if e.kind == "trial" and e.trial is not None
                else None
            ),
        )
        search_wall = time.monotonic() - t0
    if found.best is None:
        print("the search found nothing", file=sys.stderr)
        return 1
    search_time = sum(t.wall_s or 0.0 for t in found.trials if t.ran)
    verify_time = found.verified.wall_s if found.verified is not None else None
    search_cfg = found.best.train_config()
    search_tp = found.best.throughput or 0.0
    counts = found.counts()
    print(f"load average after the runs: {_load()}")

    # -- both winners again, side by side ---------------------------------------------------
    again: dict[str, list[float]] = {"grid": [], "search": []}
    for _ in range(args.remeasure):
        for name, config in (("grid", grid_cfg), ("search", search_cfg)):
            result = burst(config)
            again[name].append(throughput(result))

    quality = search_tp / throughput(grid_best)
    # The grid measured every config under the same conditions, the searched one included:
    # its own figure for the search's choice is free of the drift between the two runs.
    in_grid = next((throughput(r) for c, r in grid if c == search_cfg), None)
    time_ratio = search_time / grid_time
    print()
    print(f"{'':<22}{'best ' + unit:>16}  {'trials':>7}  {'trial time':>11}  config")
    print(
        f"{'grid (exhaustive)':<22}{throughput(grid_best):>16,.0f}  {len(grid):>7}  "
        f"{grid_time:>10.0f}s  {summarize_config(grid_cfg.to_dict())}"
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
        f"search detail: {counts['measured']} bursts ({counts['pruned']} pruned, "
        f"{counts['infeasible']} infeasible, {counts['failed']} failed, "
        f"{counts['duplicates']} repeats not re-run); wall {search_wall:.0f}s including the "
        f"sampler and storage and a {verify_time or 0:.0f}s verification burst; grid wall "
        f"{grid_wall:.0f}s; search stopped: {found.stopped}"
    )
    if in_grid is not None:
        print(
            f"the grid's own measurement of the searched config: {in_grid:,.0f} {unit} -> "
            f"{in_grid / throughput(grid_best):.1%} of the grid best (the choice, without the "
            "drift between the runs)"
        )
    if args.remeasure:
        g, s = statistics.median(again["grid"]), statistics.median(again["search"])
        same = search_cfg == grid_cfg
        print(
            f"re-measured side by side ({args.remeasure} alternating bursts each, median): grid "
            f"best {g:,.0f}, search best {s:,.0f} {unit} -> {s / g:.1%}"
            + (" (the same config)" if same else "")
        )
    print(f"load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
