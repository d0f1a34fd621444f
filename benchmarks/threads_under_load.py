"""torch's CPU threads on a shared machine: two configs, quiet and with one busy core, on
all cores' threads and on the cores left, in interleaved rounds.

Why: a search that measures while another process holds a core must not let that load
bend its comparisons. torch splits each CPU operation over its threads and waits for the
slowest, so a thread that shares its core arrives a scheduler slice late at every op; a
config of many small ops (micro-batch 1) suffers far more than one of few large ops. The
search therefore gives a burst that starts under load the cores other processes leave
(``MachineWatch.burst_threads``). This script shows the effect and what the fix keeps:
the ratio between the two configs, quiet and loaded.

Usage (from the repository root, with nothing else running)::

    python benchmarks/threads_under_load.py --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from _common import command_line, load_average, render_table, utc_now

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

BURNER = "while True:\n    pass\n"
# mu's search baseline (the smallest micro-batch) and a config the search picks over it
CONFIGS = {
    "naive: mb 1x32 fp32": TrainConfig(micro_batch=1, grad_accum=32, seq_len=128),
    "mb 8x4 bf16": TrainConfig(micro_batch=8, grad_accum=4, seq_len=128, precision="bf16"),
}


def measure(spec_name: str, config: TrainConfig, threads: int | None, steps: int) -> float:
    spec = load_model(spec_name)
    result = run_burst(
        spec, config, steps=steps, warmup=1, device="cpu", timeout_s=900, threads=threads
    )
    if not result.ok:
        raise SystemExit(f"burst failed: {result.status}: {result.reason}")
    return float(result.tokens_per_s or 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mu")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    print(f"- date: {utc_now()}")
    print(f"- command: `{command_line(argv)}`")
    print(f"- load average at start: {load_average()}; cores: {cores}")
    settings = [
        ("quiet", f"{cores} (all)", None, False),
        ("one busy core", f"{cores} (all)", None, True),
        ("one busy core", f"{cores - 1} (left)", max(1, cores - 1), True),
    ]
    figures: dict[tuple[str, str, str], list[float]] = {}
    for r in range(args.rounds):
        for machine, shown, threads, loaded in settings:
            burner = subprocess.Popen([sys.executable, "-c", BURNER]) if loaded else None
            try:
                for name, config in CONFIGS.items():
                    tps = measure(args.model, config, threads, args.steps)
                    figures.setdefault((machine, shown, name), []).append(tps)
                    print(f"round {r + 1}, {machine}, {shown} threads, {name}: {tps:,.0f}")
            finally:
                if burner is not None:
                    burner.kill()
                    burner.wait()
    print(f"- load average at the end: {load_average()}")
    rows = []
    names = list(CONFIGS)
    for machine, shown, _, _ in settings:
        medians = [statistics.median(figures[(machine, shown, n)]) for n in names]
        rows.append(
            [machine, shown, *(f"{m:,.0f}" for m in medians), f"{medians[1] / medians[0]:.2f}x"]
        )
    header = ["machine", "threads", *(f"{n} tokens/s" for n in names), "ratio"]
    print()
    print(render_table(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
