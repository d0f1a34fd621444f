"""How repeatable is a burst? The same config measured N times (default 5) on this machine.

Prints one row per burst (tokens/s, its deviation from the median, the fixed overhead of
the burst: process start, imports, model build, data set-up; and the timed seconds), then
the spread against the +/-10% target and the overhead against the timed time. The load
average is printed before and after: other work on the machine shows up as noise.

    python benchmarks/burst_noise.py                      # gpt-small, batch 4 x 128, CPU
    python benchmarks/burst_noise.py --model mu --runs 5 --steps 10
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys

TARGET = 0.10  # tokens/s within +/-10% of the median


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-small")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    import torch

    from autotune.burst.supervisor import run_burst
    from autotune.config.checks import check_config
    from autotune.config.train_config import TrainConfig
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model

    spec = load_model(args.model)
    profile = probe()
    caps = profile.device(args.device)
    config = TrainConfig(
        micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        precision=args.precision,
        num_workers=args.workers,
    )
    check_config(config, spec=spec, device=caps)
    cpu = profile.cpu
    gpu = f"{caps.name} ({caps.device}); " if caps.kind == "cuda" else ""
    print(
        f"hardware: {gpu}CPU {cpu.model_name}, {cpu.logical_cores} logical cores; "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
    print(
        f"config: {spec.name}, micro-batch {config.micro_batch}, seq {config.seq_len}, "
        f"{config.precision}, workers {config.num_workers}; {args.warmup} warm-up + "
        f"{args.steps} timed steps per burst, {args.runs} bursts"
    )
    print(f"load average before: {_load()}")

    results = []
    for _ in range(args.runs):
        result = run_burst(
            spec,
            config,
            steps=args.steps,
            warmup=args.warmup,
            device=caps.device,
            device_caps=caps,
        )
        if not result.ok or result.throughput is None:
            print(f"burst {result.status}: {result.reason}", file=sys.stderr)
            return 1
        results.append(result)
    print(f"load average after:  {_load()}")

    unit = spec.throughput_label
    values = [r.throughput for r in results if r.throughput is not None]
    median = statistics.median(values)
    print()
    print(
        f"{'run':>3}  {unit:>10}  {'dev':>7}  {'step med':>9}  {'step p90':>9}  "
        f"{'overhead_s':>10}  {'timed_s':>7}  {'warmup_s':>8}  {'wall_s':>6}  {'peak MiB':>8}"
    )
    for i, r in enumerate(results, 1):
        value = r.throughput or 0.0
        print(
            f"{i:>3}  {value:>10,.0f}  {(value / median - 1):>+7.1%}  "
            f"{(r.step_time_median_s or 0) * 1e3:>6.1f} ms  "
            f"{(r.step_time_p90_s or 0) * 1e3:>6.1f} ms  "
            f"{r.overhead_s or 0:>10.2f}  {sum(r.step_times_s):>7.2f}  "
            f"{r.warmup_s or 0:>8.2f}  {r.wall_s or 0:>6.2f}  "
            f"{(r.peak_memory_bytes or 0) / 2**20:>8.0f}"
        )
    spread = max(abs(v / median - 1) for v in values)
    verdict = "within" if spread <= TARGET else "OUTSIDE"
    overhead = statistics.median(r.overhead_s or 0.0 for r in results)
    timed = statistics.median(sum(r.step_times_s) for r in results)
    wall = statistics.median(r.wall_s or 0.0 for r in results)
    print()
    print(f"median {unit}: {median:,.0f}")
    print(f"spread: max |deviation| {spread:.1%}, {verdict} the +/-{TARGET:.0%} target")
    print(
        f"fixed overhead per burst: {overhead:.2f} s (median) against {timed:.2f} s of timed "
        f"steps; {overhead / wall:.0%} of a burst's {wall:.2f} s wall time"
    )
    return 0


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} CPUs)"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
