"""One config, many fresh bursts: how much does OpenMP's wait policy move the figure?

One config measured 3,839 tokens/s in a study and 2,904 in compare.py.
torch runs CPU operations on OpenMP threads; between operations an idle thread spins for a
while, then sleeps, and which of the two a process mostly does under the default policy
differs from one process to the next. This script runs each config under each policy
(OpenMP's default: the variable unset; ``PASSIVE``: sleep at once; ``ACTIVE``: spin, what
``omp_spin`` sets) in interleaved rounds of fresh bursts (``run_burst``, as a search runs
them), and prints each cell's bursts, median and spread (max / min).

Usage (from the repository root, with nothing else running)::

    python benchmarks/omp_policy.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, fmt_ratio, hardware_lines, load_average, render_table, utc_now
from burst_args import CONFIG as GAP_CONFIG

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.machine.hardware import probe
from autotune.machine.omp import OMP_WAIT_VAR
from autotune.models.registry import load_model
from autotune.study import summarize_config

CONFIGS = {  # mu: the search's naive, the guide's hand-tuned, and the config of the gap
    "naive": TrainConfig(micro_batch=1, grad_accum=32, seq_len=128),
    "hand-tuned": TrainConfig(micro_batch=8, grad_accum=4, seq_len=128),
    "the gap's": GAP_CONFIG,
}
POLICIES = ("default", "PASSIVE", "ACTIVE")


def _burst(spec: ModelSpec, config: TrainConfig, policy: str, steps: int) -> float:
    """One fresh burst of ``config`` under ``policy``: ACTIVE through the config's own
    switch (the burst's child gets it), PASSIVE from this process's environment (a config
    that does not spin keeps the user's), default with the variable unset."""
    os.environ.pop(OMP_WAIT_VAR, None)
    if policy == "PASSIVE":
        os.environ[OMP_WAIT_VAR] = "PASSIVE"
    run = config.replace(omp_spin=policy == "ACTIVE")
    result = run_burst(spec, run, steps=steps, warmup=1, budget_bytes=8 * 10**9, timeout_s=900)
    os.environ.pop(OMP_WAIT_VAR, None)
    return float(result.tokens_per_s or 0.0) if result.ok else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed steps per burst (a trial's)")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or args.rounds < 1:
        p.error(f"--configs: one of {', '.join(CONFIGS)} (got {unknown}); --rounds >= 1")
    spec = load_model("mu")
    profile = probe()
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(profile, "cpu"):
        print(f"- {line}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[float]] = {(n, pol): [] for n in names for pol in POLICIES}
    for r in range(args.rounds):
        for i, name in enumerate(names):
            order = POLICIES[(r + i) % 3 :] + POLICIES[: (r + i) % 3]  # rotated each round
            for policy in order:
                figure = _burst(spec, CONFIGS[name], policy, args.steps)
                cells[(name, policy)].append(figure)
                print(f"  round {r + 1} {name:<10} {policy:<8} {figure:,.0f} tokens/s", flush=True)
    print(f"- load average at the end: {load_average()}\n")
    rows = []
    for name in names:
        for policy in POLICIES:
            values = cells[(name, policy)]
            ok = [v for v in values if v > 0]
            rows.append(
                [
                    f"{name}: {summarize_config(CONFIGS[name].to_dict())}",
                    policy,
                    ", ".join(f"{v:,.0f}" for v in values),
                    f"{statistics.median(ok):,.0f}" if ok else "-",
                    fmt_ratio(max(ok) / min(ok)) if ok else "-",
                ]
            )
    print(
        render_table(
            ["config", "OMP_WAIT_POLICY", "tokens/s, burst by burst", "median", "max / min"],
            rows,
            align="llrrr",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
