"""Where a step's time goes, side by side: the naive config, the playbook's (the expert
start of a search) and, with ``--preset``, a given or searched config of each model.

Each config runs one burst with ``profile=True``: its timed steps as a search measures
them, then three profiled steps (``autotune.explain``) whose breakdown (data wait,
host-to-device copy, forward, backward, optimizer step, the rest; compile apart) and
verdict (input-, overhead-, compute- or memory-bound, with the knobs that address it)
are printed as one Markdown table per model.

    python benchmarks/breakdown.py --model gpt-small --steps 2
    python benchmarks/breakdown.py --global-batch 8 --seq-len 64      # every built-in family
    python benchmarks/breakdown.py --model mu --preset best.yaml --trace-dir traces/
    python benchmarks/breakdown.py --model pointer-gen --only naive   # one column
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from _common import command_line, hardware_lines, load_average, utc_now

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.explain.breakdown import Breakdown
    from autotune.explain.verdict import StepVerdict

# One model of each built-in family, the smallest.
DEFAULT_MODELS = ("mu", "gpt-small", "pointer-gen", "text-regressor")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="a model (repeatable); default: all")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per burst (>= 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per burst")
    parser.add_argument("--global-batch", type=int, default=8, help="default: 8 (quick)")
    parser.add_argument("--seq-len", type=int, default=None, help="default: the model's")
    parser.add_argument("--device", default=None, help="default: the probe's first device")
    parser.add_argument("--preset", default=None, help="also profile this preset's config")
    parser.add_argument("--trace-dir", default=None, help="write each Chrome trace here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per burst")
    parser.add_argument(
        "--only",
        action="append",
        choices=("naive", "playbook", "preset"),
        help="profile only these columns (repeatable); default: every one",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.global_batch < 1:
        parser.error("--steps and --global-batch must be >= 1, --warmup >= 0")

    from autotune.machine.hardware import probe

    profile = probe()
    caps = profile.device(args.device)
    print(f"# Where a step's time goes ({utc_now()})\n")
    print(f"`{command_line(argv, script='benchmarks/breakdown.py')}`\n")
    for line in [*hardware_lines(profile, caps.device), f"load average: {load_average()}"]:
        print(f"- {line}")
    failed = 0
    for model in args.model or DEFAULT_MODELS:
        failed += _one_model(model, args, caps, cpu_count=profile.cpu.physical_cores)
    return 1 if failed else 0


def _configs(
    spec: ModelSpec, caps: DeviceCaps, args: argparse.Namespace, *, cpu_count: int
) -> list[tuple[str, TrainConfig]]:
    """(label, config): the search's naive (micro-batch 1), the playbook's, and the
    ``--preset``'s. One naive everywhere: the study's, not a guide's starting config."""
    from autotune.study.plan.playbook import playbook_config
    from autotune.study.plan.space import SearchSpace

    seq_len = args.seq_len or spec.seq_len
    space = SearchSpace.for_model(
        spec, caps, global_batch=args.global_batch, seq_len=[seq_len], cpu_count=cpu_count
    )
    configs = [("naive", space.naive()), ("playbook", playbook_config(space, spec))]
    if args.preset:
        from autotune.preset import load_preset, resolve_preset

        configs.append(("preset", load_preset(resolve_preset(args.preset)).config))
    return [(label, c) for label, c in configs if not args.only or label in args.only]


def _one_model(model: str, args: argparse.Namespace, caps: DeviceCaps, *, cpu_count: int) -> int:
    """Profile each config of ``model`` and print its table; how many bursts failed."""
    from autotune.burst.supervisor import run_burst
    from autotune.explain.render import explain_result, markdown
    from autotune.models.registry import load_model
    from autotune.study import summarize_config

    spec = load_model(model)
    print(f"\n## {spec.name}\n")
    columns: list[tuple[str, Breakdown, StepVerdict]] = []
    failed = 0
    for label, config in _configs(spec, caps, args, cpu_count=cpu_count):
        trace = None
        if args.trace_dir:
            Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
            trace = str(Path(args.trace_dir, f"{spec.name}-{label}.trace.json").resolve())
        result = run_burst(
            spec,
            config,
            steps=args.steps,
            warmup=args.warmup,
            timeout_s=args.timeout,
            device=caps.device,
            profile=True,
            trace_path=trace,
        )
        explained = explain_result(result)
        summary = summarize_config(config.to_dict(), spec.size_name)
        print(f"- {label}: {summary}: {result.status} {result.reason}".rstrip())
        if explained is None:
            failed += 1
            continue
        columns.append((label, *explained))
    if columns:
        print()
        print(markdown(columns))
    return failed


if __name__ == "__main__":
    sys.exit(main())
