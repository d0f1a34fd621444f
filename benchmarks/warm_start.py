"""A burst forked by a zygote that has torch loaded, against one started in a fresh
interpreter, side by side: each burst's wall time, its compile, its throughput.

A CPU search runs twenty bursts or so, each in its own process; a fresh one imports torch,
Dynamo and (compiled) Inductor before its first step. ``autotune.burst.zygote`` forks
them from a process that has, so the saving is that import, per burst. On a GPU
(``--device cuda``) the forked trial still starts CUDA itself, as a fresh one does; the
import it saves is torch's CUDA build's. The bursts here
are a search's: 1 warm-up and 4 timed steps, the compiled ones from a compile cache one
untimed burst filled first (as every trial but a config's first), the first burst of each
kind untimed too (the zygote's own start is paid once per search). Warm and fresh
alternate in each round.

Usage (from the repository root, with nothing else running)::

    python benchmarks/warm_start.py --rounds 3
    python benchmarks/warm_start.py --rounds 3 --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
    empty_compile_cache,
    fmt_ratio,
    fmt_seconds,
    hardware_lines,
    load_average,
    median_of,
    ratio_of,
    render_table,
    run_rounds_then_table,
    utc_now,
)
from burst_args import CONFIG as MU_COMPILED

from autotune.burst.result import BurstResult
from autotune.burst.supervisor import run_burst
from autotune.burst.zygote import SWITCH_ENV
from autotune.config.train_config import TrainConfig
from autotune.core.errors import HardwareMismatchError
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.study import summarize_config

CASES = {  # (model, config): a search's naive trial and its compiled pick
    "mu naive": ("mu", TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)),
    "mu compiled": ("mu", MU_COMPILED),
}
STARTS = ("fresh", "warm")


def burst(case: str, start: str, *, steps: int, device: str = "cpu") -> BurstResult:
    """One burst of ``case`` on ``device``, its process started ``start``."""
    model, config = CASES[case]
    users = os.environ.pop(SWITCH_ENV, None)
    if start == "fresh":
        os.environ[SWITCH_ENV] = "0"
    try:
        result = run_burst(
            load_model(model),
            config,
            steps=steps,
            warmup=1,
            device=device,
            budget_bytes=8 * 10**9,
            timeout_s=900,
        )
    finally:
        os.environ.pop(SWITCH_ENV, None)
        if users is not None:
            os.environ[SWITCH_ENV] = users
    if not result.ok:
        print(f"  {case} {start}: {result.status}: {result.reason}", flush=True)
    return result


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def table(cells: dict[tuple[str, str], list[BurstResult]]) -> str:
    """One row per case and start (each burst's wall, the medians of wall, compile,
    throughput and peak memory as the budget counts it), and per case warm over fresh."""
    rows = []
    for case in dict.fromkeys(c for c, _ in cells):
        medians = {}
        for start in STARTS:
            runs = cells[(case, start)]
            wall = median_of([r.wall_s for r in runs])
            rate = median_of([r.tokens_per_s for r in runs])
            medians[start] = (wall, rate)
            rows.append(
                [
                    case,
                    start,
                    ", ".join(fmt_seconds(r.wall_s) for r in runs),
                    fmt_seconds(wall),
                    fmt_seconds(median_of([r.compile_s for r in runs])),
                    "-" if rate is None else f"{rate:,.0f}",
                    _mib(median_of([r.peak_memory_bytes for r in runs])),
                ]
            )
        (wf, tf), (ww, tw) = medians["fresh"], medians["warm"]
        rows.append(
            [
                case,
                "warm / fresh",
                "",
                fmt_ratio(ratio_of(ww, wf)),
                "",
                fmt_ratio(ratio_of(tw, tf)),
                "",
            ]
        )
    return render_table(
        ["burst", "process", "wall, burst by burst", "median", "compile", "tokens/s", "peak"],
        rows,
        align="llrrrrr",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed steps per burst (a trial's)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds >= 1")
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    device = "cuda:0" if args.device == "cuda" else args.device
    try:
        lines = hardware_lines(probe(), device)
    except HardwareMismatchError as exc:
        p.error(str(exc))
    for line in lines:
        print(f"- {line}")
    for case, (model, config) in CASES.items():
        print(f"- {case}: {model} {summarize_config(config.to_dict())}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[BurstResult]] = {(c, s): [] for c in CASES for s in STARTS}

    def rounds() -> None:
        with empty_compile_cache("autotune-warm-start-"):
            run_rounds(cells, rounds=args.rounds, steps=args.steps, device=device)

    return run_rounds_then_table(rounds, cells, lambda: table(cells))


def run_rounds(
    cells: dict[tuple[str, str], list[BurstResult]], *, rounds: int, steps: int, device: str = "cpu"
) -> None:
    """An untimed burst of each case and start (the compile cache filled, each zygote
    started), then ``rounds`` of them alternated; each timed burst into ``cells``."""
    for case in CASES:
        for start in STARTS:
            first = burst(case, start, steps=steps, device=device)
            print(f"  untimed {case} {start}: wall {fmt_seconds(first.wall_s)}", flush=True)
    for r in range(rounds):
        for i, case in enumerate(CASES):
            order = STARTS if (r + i) % 2 == 0 else STARTS[::-1]
            for start in order:
                result = burst(case, start, steps=steps, device=device)
                cells[(case, start)].append(result)
                print(
                    f"  round {r + 1} {case} {start}: wall {fmt_seconds(result.wall_s)}, "
                    f"compile {fmt_seconds(result.compile_s)}",
                    flush=True,
                )


if __name__ == "__main__":
    raise SystemExit(main())
