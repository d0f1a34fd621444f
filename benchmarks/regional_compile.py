"""Whole-model vs per-block compilation (``compile_regions``), side by side: how long the
first compile takes and how fast the compiled steps run.

A compiled trial of a CPU search spends most of its time compiling (mu: 41-55 s on an empty
cache). Compiling each repeated block on its own compiles one block's code once and reuses
it for the others, so the compile should shrink with the number of blocks; the parts
outside the blocks (embedding, head, loss) then run eager. Each burst here starts on an
empty compile cache of its own (a search's first compile of a config), with the arguments
of a search trial (1 warm-up, 4 timed steps); whole and per-block alternate in each round.

Usage (from the repository root, with nothing else running)::

    python benchmarks/regional_compile.py --rounds 2
"""

from __future__ import annotations

import argparse
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
from burst_args import CONFIG as MU_CONFIG

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.study import summarize_config

CONFIGS = {  # a compiled config of each model (bf16, eager attention; mu's: burst_args.py's)
    "mu": MU_CONFIG,
    "gpt-small": TrainConfig(
        micro_batch=8,
        grad_accum=4,
        seq_len=256,
        precision="bf16",
        compile="default",
        knobs={"attention": "eager"},
    ),
}
SCOPES = ("whole model", "per block")


def measure(model: str, scope: str, *, steps: int) -> tuple[float | None, float | None]:
    """One fresh burst on an empty compile cache: (compile seconds, throughput), None for
    a burst that did not end ``ok``."""
    config = CONFIGS[model].replace(compile_regions=scope == "per block")
    with empty_compile_cache("autotune-regional-"):
        result = run_burst(
            load_model(model), config, steps=steps, warmup=1, budget_bytes=8 * 10**9, timeout_s=900
        )
    if not result.ok:
        print(f"  {model} {scope}: {result.status}: {result.reason}", flush=True)
        return None, None
    return result.compile_s, result.tokens_per_s


def table(cells: dict[tuple[str, str], list[tuple[float | None, float | None]]]) -> str:
    """One row per model and scope (each burst's compile and throughput, their medians),
    and per model the per-block figures over the whole model's."""
    rows = []
    for model in dict.fromkeys(m for m, _ in cells):
        medians = {}
        for scope in SCOPES:
            runs = cells[(model, scope)]
            compile_med = median_of([c for c, _ in runs])
            rate_med = median_of([t for _, t in runs])
            medians[scope] = (compile_med, rate_med)
            rows.append(
                [
                    model,
                    scope,
                    ", ".join(fmt_seconds(c) for c, _ in runs),
                    fmt_seconds(compile_med),
                    ", ".join("-" if t is None else f"{t:,.0f}" for _, t in runs),
                    "-" if rate_med is None else f"{rate_med:,.0f}",
                ]
            )
        (cw, tw), (cb, tb) = medians["whole model"], medians["per block"]
        rows.append(
            [
                model,
                "per block / whole",
                "",
                fmt_ratio(ratio_of(cb, cw)),
                "",
                fmt_ratio(ratio_of(tb, tw)),
            ]
        )
    return render_table(
        ["model", "compiled", "compile, burst by burst", "median", "tokens/s", "median"],
        rows,
        align="llrrrr",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="timed steps per burst (a trial's)")
    p.add_argument("--models", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.rounds < 1 or not models or any(m not in CONFIGS for m in models):
        p.error(f"--models: of {', '.join(CONFIGS)}; --rounds >= 1")
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(probe(), "cpu"):
        print(f"- {line}")
    for model in models:
        print(f"- {model}: {summarize_config(CONFIGS[model].to_dict())}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[tuple[float | None, float | None]]] = {
        (m, s): [] for m in models for s in SCOPES
    }
    return run_rounds_then_table(
        lambda: run_rounds(cells, models, rounds=args.rounds, steps=args.steps),
        cells,
        lambda: table(cells),
    )


def run_rounds(
    cells: dict[tuple[str, str], list[tuple[float | None, float | None]]],
    models: list[str],
    *,
    rounds: int,
    steps: int,
) -> None:
    """Each model's scopes, alternated each round; each burst's figures into ``cells``."""
    for r in range(rounds):
        for i, model in enumerate(models):
            order = SCOPES if (r + i) % 2 == 0 else SCOPES[::-1]  # alternated each round
            for scope in order:
                compile_s, rate = measure(model, scope, steps=steps)
                cells[(model, scope)].append((compile_s, rate))
                shown = "-" if rate is None else f"{rate:,.0f}"
                print(
                    f"  round {r + 1} {model} {scope}: compile {fmt_seconds(compile_s)}, {shown}",
                    flush=True,
                )


if __name__ == "__main__":
    raise SystemExit(main())
