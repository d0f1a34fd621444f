"""One config, measured with the burst arguments of a search trial, of the old verification
and of compare.py, in interleaved rounds: do the arguments change the figure?

BENCHMARKS.md recorded one config at 3,839 tokens/s in a study and 2,904
in compare.py's table. The calls differ only in their arguments (timed steps, warm-up,
the eval step and checkpoint save, the device capabilities passed in); this script
measures the three side by side.

Usage (from the repository root, with nothing else running)::

    python benchmarks/burst_args.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.machine.hardware import probe
from autotune.models.registry import load_model

CONFIG = TrainConfig(
    micro_batch=8,
    grad_accum=4,
    seq_len=128,
    precision="bf16",
    compile="default",
    knobs={"block_group": 8, "attention": "eager"},
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mu")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    spec = load_model(args.model)
    caps = probe().device("cpu")
    variants = {
        "search trial (4 steps, 1 warm-up)": {"steps": 4, "warmup": 1},
        "old verification (10 steps, eval, checkpoint)": {"steps": 10, "warmup": 1, "verify": True},
        "compare.py (5 steps, 2 warm-up, caps)": {"steps": 5, "warmup": 2, "device_caps": caps},
    }
    figures: dict[str, list[float]] = {name: [] for name in variants}
    print(f"load average at start: {os.getloadavg()}")
    for r in range(args.rounds):
        for name, kw in variants.items():
            res = run_burst(spec, CONFIG, budget_bytes=8 * 10**9, device="cpu", timeout_s=600, **kw)
            figures[name].append(res.tokens_per_s or 0.0)
            print(f"round {r + 1} {name}: {res.status} {res.tokens_per_s or 0:,.0f} tokens/s")
    print(f"load average at the end: {os.getloadavg()}")
    print("\n| arguments | tokens/s per round | median |\n|---|---|---:|")
    for name, values in figures.items():
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {name} | {shown} | {statistics.median(values):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
