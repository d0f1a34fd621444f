"""The loss and checkpointing model knobs side by side: tokens/s and peak memory.

``loss=chunked`` computes the output projection and the cross-entropy a chunk of tokens at
a time, so the (tokens x vocab) logits are never whole; ``checkpoint_every=k`` checkpoints
the first of every k layers instead of all of them. What each costs or saves is measured
here against its model's base config (bf16 on a GPU or where the CPU runs it natively,
fp32 elsewhere), each config in a fresh burst of its own (the search's isolation), the configs
of a model in a rotated order each round, the medians over rounds compared.

Usage (from the repository root, with nothing else running)::

    python benchmarks/model_knobs.py --rounds 3
    python benchmarks/model_knobs.py --models gpt-large --rounds 2
    python benchmarks/model_knobs.py --device cuda --models gpt2-124m --budget 24GB
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
    fmt_ratio,
    hardware_lines,
    load_average,
    median_of,
    ratio_of,
    render_table,
    run_rounds_then_table,
    utc_now,
)

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.core.errors import AutotuneError
from autotune.core.units import format_bytes, parse_budget
from autotune.machine.hardware import probe
from autotune.models.registry import load_model

# Each model's base (its attention at what its search picks on a CPU) and micro-batch.
BASES = {
    "mu": (TrainConfig(micro_batch=8, grad_accum=4, seq_len=128), {"attention": "eager"}),
    "gpt-small": (TrainConfig(micro_batch=8, grad_accum=4, seq_len=256), {"attention": "eager"}),
    "gpt-large": (TrainConfig(micro_batch=4, grad_accum=8, seq_len=512), {}),
    "gpt2-124m": (TrainConfig(micro_batch=8, grad_accum=8, seq_len=1024), {}),  # for a GPU
}
# (label, the config's change from the base, the model knobs set); the first is the base.
VARIANTS: tuple[tuple[str, dict[str, object], dict[str, object]], ...] = (
    ("base", {}, {}),
    ("loss=chunked", {}, {"loss": "chunked"}),
    ("compile", {"compile": "default"}, {}),
    ("compile+loss=chunked", {"compile": "default"}, {"loss": "chunked"}),
    ("checkpointing", {"activation_checkpointing": True}, {}),
    ("checkpointing+every=2", {"activation_checkpointing": True}, {"checkpoint_every": 2}),
)
Cell = tuple[float | None, int | None]  # (tokens/s, peak bytes); None for a failed burst


def config_for(model: str, variant: str, precision: str) -> TrainConfig:
    base, knobs = BASES[model]
    _, change, extra = next(v for v in VARIANTS if v[0] == variant)
    return base.replace(precision=precision, knobs={**knobs, **extra}, **change)


def measure(
    model: str, config: TrainConfig, *, steps: int, device: str = "cpu", budget: int = 16 * 10**9
) -> Cell:
    """One fresh burst: (tokens/s, peak memory), Nones where it did not end ``ok``."""
    result = run_burst(
        load_model(model),
        config,
        steps=steps,
        warmup=2,
        budget_bytes=budget,
        timeout_s=900,
        device=device,
    )
    if not result.ok:
        print(f"  {model} {config.knobs}: {result.status}: {result.reason}", flush=True)
        return None, None
    return result.tokens_per_s, result.peak_memory_bytes


def table(cells: dict[tuple[str, str], list[Cell]]) -> str:
    """One row per model and variant: the median tokens/s and peak, and both against the
    model's base (the first variant measured)."""
    rows = []
    for model in dict.fromkeys(m for m, _ in cells):
        variants = [v for m, v in cells if m == model]
        medians = {
            v: (
                median_of([t for t, _ in cells[(model, v)]]),
                median_of([p for _, p in cells[(model, v)]]),
            )
            for v in variants
        }
        base_rate, base_peak = medians[variants[0]]
        for v in variants:
            rate, peak = medians[v]
            runs = ", ".join("-" if t is None else f"{t:,.0f}" for t, _ in cells[(model, v)])
            rows.append(
                [
                    model,
                    v,
                    runs,
                    "-" if rate is None else f"{rate:,.0f}",
                    fmt_ratio(ratio_of(rate, base_rate)),
                    "-" if peak is None else format_bytes(int(peak)),
                    fmt_ratio(ratio_of(peak, base_peak)),
                ]
            )
    return render_table(
        ["model", "config", "tokens/s, round by round", "median", "vs base", "peak", "vs base"],
        rows,
        align="llrrrrr",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed steps per burst")
    p.add_argument("--models", default="mu,gpt-small", help=f"of {', '.join(BASES)}")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--budget", default="16GB", help="each burst's memory budget, enforced")
    p.add_argument(
        "--variants", default=",".join(v for v, _, _ in VARIANTS), help="of the labels above"
    )
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    labels = [v.strip() for v in args.variants.split(",") if v.strip()]
    known = {v for v, _, _ in VARIANTS}
    if args.rounds < 1 or not models or any(m not in BASES for m in models):
        p.error(f"--models: of {', '.join(BASES)}; --rounds >= 1")
    if not labels or any(v not in known for v in labels) or labels[0] != "base":
        p.error(f"--variants: 'base' first, then of {', '.join(sorted(known - {'base'}))}")
    profile = probe()
    try:
        caps = profile.device(args.device)
        budget = parse_budget(args.budget, device_memory_bytes=caps.total_memory_bytes)
    except AutotuneError as exc:
        p.error(str(exc))
    precision = "bf16" if caps.kind == "cuda" or caps.bf16_native else "fp32"
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(profile, caps.device):
        print(f"- {line}")
    for model in models:
        base, knobs = BASES[model]
        shown = f"mb {base.micro_batch}x{base.grad_accum} seq {base.seq_len} {precision}"
        print(f"- {model} base: {shown}, knobs {knobs or 'at their defaults'}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[Cell]] = {(m, v): [] for m in models for v in labels}
    measure_one = functools.partial(measure, steps=args.steps, device=caps.device, budget=budget)
    return run_rounds_then_table(
        lambda: run_rounds(cells, models, labels, precision, args.rounds, measure_one),
        cells,
        lambda: table(cells),
    )


def run_rounds(
    cells: dict[tuple[str, str], list[Cell]],
    models: list[str],
    labels: list[str],
    precision: str,
    rounds: int,
    measure_one: Callable[[str, TrainConfig], Cell],
) -> None:
    """Each model's variants, rotated each round; each burst's figures into ``cells``."""
    for r in range(rounds):
        for i, model in enumerate(models):
            shift = (r + i) % len(labels)
            for variant in labels[shift:] + labels[:shift]:  # rotated each round
                cell = measure_one(model, config_for(model, variant, precision))
                cells[(model, variant)].append(cell)
                rate = "-" if cell[0] is None else f"{cell[0]:,.0f}"
                print(f"  round {r + 1} {model} {variant}: {rate}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
