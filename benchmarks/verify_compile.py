"""What the race's first round adds to a compiled config's burst: its eval step and
checkpoint save, with the eval's forward-only graph compiled for the first time or found
in the compile cache.

A trial compiles the training step; the race's first round runs an eval step (no grad,
a batch twice the micro-batch). Until 2026-11-28 torch.compile compiled it as a graph of
its own; it now runs the uncompiled model, as the trainer evaluates, and the third burst
shows what is left of that graph's cost (nothing, for a model compiled whole). Four
bursts of one config, in order, on one compile cache emptied at the start: training only
(a first compile), training only again (from the cache), with the eval and checkpoint
(the eval's graph new), and the same again (both from the cache).

Usage (from the repository root, with nothing else running)::

    python benchmarks/verify_compile.py
    python benchmarks/verify_compile.py --model gpt-small
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
    empty_compile_cache,
    fmt_seconds,
    hardware_lines,
    load_average,
    render_table,
    utc_now,
)
from regional_compile import CONFIGS

from autotune.burst.supervisor import run_burst
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.study import summarize_config

BURSTS = (  # (what it shows, verify)
    ("training only: a first compile", False),
    ("training only: from the cache", False),
    ("with eval and checkpoint: the eval's graph new", True),
    ("with eval and checkpoint: both from the cache", True),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mu", choices=sorted(CONFIGS))
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument(
        "--precision", default=None, help="the config's precision instead of its own (bf16): "
        "fp32 where the CPU emulates bf16 (AVX2: a first bf16 compile of mu took over 11 min)",
    )  # fmt: skip
    args = p.parse_args(argv)
    base = CONFIGS[args.model]
    if args.micro_batch < 1 or base.global_batch % args.micro_batch:
        p.error(f"--micro-batch: a divisor of the global batch {base.global_batch}")
    config = base.replace(
        micro_batch=args.micro_batch,
        grad_accum=base.global_batch // args.micro_batch,
        precision=args.precision or base.precision,
    )
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(probe(), "cpu"):
        print(f"- {line}")
    print(f"- {args.model}: {summarize_config(config.to_dict())}")
    print(f"- load average at start: {load_average()}", flush=True)
    rows = []
    with empty_compile_cache("autotune-verify-"):
        for what, verify in BURSTS:
            started = time.monotonic()
            result = run_burst(
                load_model(args.model), config, steps=4, warmup=1, budget_bytes=8 * 10**9,
                timeout_s=900, verify=verify,
            )  # fmt: skip
            wall = time.monotonic() - started
            rate = "-" if not result.ok else f"{result.tokens_per_s or 0:,.0f}"
            shown = [fmt_seconds(wall), fmt_seconds(result.compile_s), rate]
            rows.append([what, result.status, *shown])
            print(f"  {what}: {result.status}, {wall:.1f} s", flush=True)
    print(f"- load average at the end: {load_average()}\n")
    print(render_table(["burst", "status", "wall", "compile", "tokens/s"], rows, align="llrrr"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
