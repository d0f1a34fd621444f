"""Does a preset's speedup over its naive config hold? Both measured side by side, now.

A search measures its naive config first and its winner minutes later, under whatever
load the machine had at each moment. This script measures the two configs a preset
records, its own and its baseline (the naive config of the same study), again in one run:
``--rounds`` rounds (default 3) of one fresh burst each, the order alternating between
rounds so a change of load falls on both alike. It prints every burst, then each
config's median and best, and the speedup from the medians and from the bests (interference
only ever slows a step down, so the best is the less disturbed figure), against the
target (default 2x: the target for MU on the 2-core CPU).

    python benchmarks/preset_vs_naive.py --preset best.yaml
    python benchmarks/preset_vs_naive.py --preset presets/cpu/mu-epyc.yaml --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import TYPE_CHECKING

from _common import (
    command_line,
    fmt_float,
    fmt_ratio,
    fmt_seconds,
    hardware_lines,
    load_average,
    render_table,
    utc_now,
)

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile
    from autotune.preset import Preset

TARGET = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, help="a preset file or a shipped name")
    parser.add_argument("--device", default=None, help="default: the kind it was measured on")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per burst")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per burst")
    parser.add_argument("--target", type=float, default=TARGET)
    parser.add_argument(
        "--trust-model", action="store_true", help="run the preset's model code if it is user code"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be >= 1, --warmup >= 0")

    from autotune.machine.hardware import probe
    from autotune.preset import default_device_for, load_preset, resolve_preset
    from autotune.study import summarize_config

    preset = load_preset(resolve_preset(args.preset))
    if preset.baseline is None:
        print(f"preset {args.preset!r} records no baseline config to compare with", file=sys.stderr)
        return 2
    spec = preset.model.load(trust=args.trust_model)
    profile = probe()
    caps = profile.device(args.device or default_device_for(preset, profile))
    configs = {"naive (baseline)": preset.baseline.config, "preset": preset.config}

    _print_header(args, argv, preset=preset, spec=spec, profile=profile, device=caps.device)
    measured = _measure(args, spec=spec, caps=caps, configs=configs, budget=preset.budget_bytes)
    if measured is None:
        return 1
    print()
    summary = []
    for name, config in configs.items():
        values = measured[name]
        summary.append(
            [
                name,
                summarize_config(config.to_dict()),
                fmt_float(statistics.median(values)),
                fmt_float(max(values)),
                f"{(max(values) - min(values)) / max(values):.1%}",
            ]
        )
    print(render_table(["config", "settings", "median", "best", "spread"], summary, align="llrrr"))
    naive, tuned = measured["naive (baseline)"], measured["preset"]
    by_median = statistics.median(tuned) / statistics.median(naive)
    by_best = max(tuned) / max(naive)
    recorded = preset.baseline.speedup
    print()
    print(f"- load average at the end: {load_average()}")
    print(
        f"- speedup side by side: {fmt_ratio(by_median)} from the medians, {fmt_ratio(by_best)} "
        f"from the bests (target {args.target:g}x: "
        f"{'met' if min(by_median, by_best) >= args.target else 'MISSED'}); "
        f"the preset recorded {fmt_ratio(recorded)}"
    )
    return 0


def _print_header(
    args: argparse.Namespace,
    argv: list[str] | None,
    *,
    preset: Preset,
    spec: ModelSpec,
    profile: HardwareProfile,
    device: str,
) -> None:
    print(f"## preset_vs_naive: {preset.name} ({spec.name}) on {device}")
    print()
    print(f"- date: {utc_now()}")
    print(f"- command: `{command_line(argv, script=__file__)}`")
    for line in hardware_lines(profile, device):
        print(f"- {line}")
    print(f"- preset measured on: {preset.fingerprint.describe()}")
    print(
        f"- measurement: {args.rounds} rounds, each one fresh burst per config "
        f"({args.warmup} warm-up + {args.steps} timed optimizer steps, under the preset's "
        "budget), the order alternating between rounds"
    )
    print(f"- load average at start: {load_average()}")
    print()


def _measure(
    args: argparse.Namespace,
    *,
    spec: ModelSpec,
    caps: DeviceCaps,
    configs: dict[str, TrainConfig],
    budget: int,
) -> dict[str, list[float]] | None:
    """Every config's throughput in each round (the order alternating), with a table of
    the bursts printed; None if a burst failed (said on stderr)."""
    from autotune.burst.supervisor import run_burst

    unit = spec.throughput_label
    measured: dict[str, list[float]] = {name: [] for name in configs}
    rows = []
    for round_no in range(args.rounds):
        order = list(configs) if round_no % 2 == 0 else list(reversed(configs))
        for name in order:
            result = run_burst(
                spec,
                configs[name],
                steps=args.steps,
                warmup=args.warmup,
                budget_bytes=budget,
                device=caps.device,
                device_caps=caps,
            )
            if not result.ok or result.throughput is None:
                print(f"{name}: burst {result.status}: {result.reason}", file=sys.stderr)
                return None
            measured[name].append(result.throughput)
            done = f"round {round_no + 1} {name}: {result.throughput:,.0f} {unit}"
            print(f"  {done}", file=sys.stderr)
            rows.append(
                [
                    str(round_no + 1),
                    name,
                    fmt_float(result.throughput),
                    fmt_seconds(result.step_time_median_s),
                    fmt_seconds(result.compile_s),
                    f"{(result.peak_memory_bytes or 0) / 2**20:,.0f} MiB",
                ]
            )
    print(
        render_table(
            ["round", "config", unit, "step (median)", "compile", "peak"],
            rows,
            align="rlrrrr",
        )
    )
    return measured


if __name__ == "__main__":
    raise SystemExit(main())
