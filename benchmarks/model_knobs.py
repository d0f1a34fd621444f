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

**Against a preset.** With ``--preset`` the base is a preset's config (a search's winner,
on its model and at its budget), and each ``--variant`` is that config with some knobs
changed: ``name=value`` pairs joined by commas, each name a config field
(``fused_optimizer``, ``compile``, ``micro_batch``: the accumulation then keeps the global
batch) or one of the model's knobs (``sdpa_backend``, ``loss``, ``checkpoint_every``)::

    python benchmarks/model_knobs.py --device cuda --preset best.yaml --rounds 3 \\
        --variant sdpa_backend=cudnn --variant fused_optimizer=false \\
        --variant micro_batch=64,loss=chunked,activation_checkpointing=true,checkpoint_every=2

A variant this device refuses, or one that is the preset's own config, is named and left
out. ``--within 5m`` ends the rounds in time: a burst starts only while the time left is at
least the shortest burst so far, and its own limit is the time left; the table then holds
the bursts that ran (a variant with none shows ``-``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
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

from autotune.burst.supervisor import run_burst
from autotune.config.checks import check_config
from autotune.config.overrides import parse_value
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.core.errors import AutotuneError, ConfigError, UsageError
from autotune.core.units import format_bytes, parse_budget, parse_duration
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
WINNER = "winner"  # the base's label against a preset
BURST_TIMEOUT_S = 900.0
Cell = tuple[float | None, int | None]  # (tokens/s, peak bytes); None for a failed burst
Labelled = list[tuple[str, TrainConfig]]  # a model's configs, the base first


def config_for(model: str, variant: str, precision: str) -> TrainConfig:
    base, knobs = BASES[model]
    _, change, extra = next(v for v in VARIANTS if v[0] == variant)
    return base.replace(precision=precision, knobs={**knobs, **extra}, **change)


def apply_changes(config: TrainConfig, text: str, spec: ModelSpec) -> TrainConfig:
    """``config`` with the changes of one ``--variant`` (``name=value,name=value``): a
    config field, or one of ``spec``'s knobs; a new micro-batch without a new accumulation
    keeps the global batch. A change that cannot be read is a ``UsageError``."""
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    fields = [f for f in fields if f not in ("knobs", "parallel")]
    knob_defaults = {k.name: k.default for k in spec.knobs}
    top: dict[str, Any] = {}
    knobs = dict(config.knobs)
    for item in text.split(","):
        name, sep, raw = (part.strip() for part in item.partition("="))
        if not sep or not name or not raw:
            raise UsageError(f"--variant {text!r}: expected name=value[,name=value], got {item!r}")
        value = parse_value(raw)
        if name in fields:
            current = getattr(config, name)
        elif name in knob_defaults:
            current = knobs.get(name, knob_defaults[name])
        else:
            raise UsageError(
                f"--variant {text!r}: {name!r} is neither a config field ({', '.join(fields)}) "
                f"nor a knob of model {spec.name!r} ({', '.join(knob_defaults) or 'none'})"
            )
        if isinstance(value, bool) and isinstance(current, str):  # compile=off: YAML's False
            value = raw
        (top if name in fields else knobs)[name] = value
    if "micro_batch" in top and "grad_accum" not in top:
        micro, batch = top["micro_batch"], config.global_batch
        if not isinstance(micro, int) or micro < 1 or batch % micro:
            raise UsageError(
                f"--variant {text!r}: micro_batch {micro!r} does not divide the global batch "
                f"{batch}; give grad_accum too to change the global batch"
            )
        top["grad_accum"] = batch // micro
    try:
        return config.replace(**top, knobs=knobs)
    except ConfigError as exc:
        raise UsageError(f"--variant {text!r}: {exc}") from None


def measure(
    model: str | ModelSpec,
    config: TrainConfig,
    *,
    steps: int,
    device: str = "cpu",
    budget: int = 16 * 10**9,
    warmup: int = 2,
    timeout_s: float = BURST_TIMEOUT_S,
) -> Cell:
    """One fresh burst of ``model`` (a built-in's name, or its spec with a preset's
    arguments): (tokens/s, peak memory), Nones where it did not end ``ok``."""
    spec = load_model(model) if isinstance(model, str) else model
    result = run_burst(
        spec,
        config,
        steps=steps,
        warmup=warmup,
        budget_bytes=budget,
        timeout_s=timeout_s,
        device=device,
    )
    if not result.ok:
        print(f"  {spec.name} {config.knobs}: {result.status}: {result.reason}", flush=True)
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
                    runs or "not run",
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


@dataclasses.dataclass(kw_only=True)
class TimeLimit:
    """``--within``: a burst starts only while the time left is at least the shortest
    burst so far (nothing shorter can end in time), and its own limit is the time left."""

    limit_s: float | None
    clock: Callable[[], float] = time.monotonic
    started: float = dataclasses.field(default=0.0)
    shortest_s: float = 0.0
    skipped: int = 0

    def __post_init__(self) -> None:
        self.started = self.clock()

    def left(self) -> float | None:
        return None if self.limit_s is None else self.limit_s - (self.clock() - self.started)

    def burst_timeout(self) -> float | None:
        """The next burst's limit, or None where it should not start."""
        left = self.left()
        if left is None:
            return BURST_TIMEOUT_S
        if left <= 0 or left < self.shortest_s:
            self.skipped += 1
            return None
        return min(BURST_TIMEOUT_S, left)

    def ran(self, wall_s: float) -> None:
        self.shortest_s = wall_s if not self.shortest_s else min(self.shortest_s, wall_s)


def run_rounds(
    cells: dict[tuple[str, str], list[Cell]],
    plans: dict[str, Labelled],
    rounds: int,
    measure_one: Callable[..., Cell],
    limit: TimeLimit | None = None,
) -> None:
    """Each model's configs, rotated each round; each burst's figures into ``cells``.
    ``measure_one(model, config, timeout_s=...)``; with ``limit``, bursts that cannot end
    in time are not started."""
    limit = limit or TimeLimit(limit_s=None)
    for r in range(rounds):
        for i, (model, labelled) in enumerate(plans.items()):
            shift = (r + i) % len(labelled)
            for label, config in labelled[shift:] + labelled[:shift]:  # rotated each round
                timeout_s = limit.burst_timeout()
                if timeout_s is None:
                    continue
                started = limit.clock()
                cell = measure_one(model, config, timeout_s=timeout_s)
                limit.ran(limit.clock() - started)
                cells[(model, label)].append(cell)
                rate = "-" if cell[0] is None else f"{cell[0]:,.0f}"
                print(f"  round {r + 1} {model} {label}: {rate}", flush=True)
    if limit.skipped:
        print(
            f"- the time limit ({fmt_seconds(limit.limit_s)}) left {limit.skipped} burst(s) "
            "not run",
            flush=True,
        )


def named_plans(models: list[str], labels: list[str], precision: str) -> dict[str, Labelled]:
    """The built-in bases and their named variants (``--models``, ``--variants``)."""
    return {m: [(v, config_for(m, v, precision)) for v in labels] for m in models}


def preset_plan(
    path: str, changes: Sequence[str], device: Any
) -> tuple[ModelSpec, Labelled, int | None, list[str]]:
    """``--preset`` and its ``--variant``s: (its model, with the preset's arguments; the
    winner then each runnable variant; the preset's budget; a line per variant left out
    and why). Bad input: ``UsageError``."""
    from autotune.preset.io import load_preset

    preset = load_preset(path)
    name = preset.model.name
    if ":" in name.removeprefix("hf:"):
        raise UsageError(
            f"preset {path!r} names user code ({name!r}): this script runs built-in models only"
        )
    spec = load_model(name, preset.model.args or None)
    base = preset.config
    try:
        check_config(base, spec=spec, device=device)
    except ConfigError as exc:
        raise UsageError(f"preset {path!r}: {exc}") from None
    labelled: Labelled = [(WINNER, base)]
    notes = []
    for text in changes:
        config = apply_changes(base, text, spec)
        if config == base:
            notes.append(f"`{text}`: the preset's own config")
            continue
        try:
            check_config(config, spec=spec, device=device)
        except ConfigError as exc:
            notes.append(f"`{text}`: {exc}")
            continue
        labelled.append((text, config))
    return spec, labelled, preset.budget_bytes, notes


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed steps per burst")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (2; 3 on CUDA)")
    p.add_argument("--models", default=None, help=f"of {', '.join(BASES)} (mu,gpt-small)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument(
        "--budget", default=None, help="each burst's memory budget, enforced (16GB; a preset's)"
    )
    p.add_argument("--variants", default=None, help="of the labels above (all)")
    p.add_argument("--preset", default=None, help="a preset whose config is the base")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="with --preset: knob changes, name=value[,name=value] (repeatable)",
    )
    p.add_argument("--within", default=None, help="a time limit for the rounds: 5m, 300s")
    args = p.parse_args(argv)
    args.error = p.error
    if args.rounds < 1 or (args.warmup is not None and args.warmup < 0):
        p.error("--rounds >= 1, --warmup >= 0")
    if args.preset is None and args.variant:
        p.error("--variant needs --preset (without it, --variants names built-in variants)")
    if args.preset is not None and (args.models or args.variants):
        p.error("--preset takes its model and base from the preset: no --models or --variants")
    if args.preset is not None and not args.variant:
        p.error("--preset needs at least one --variant")
    try:
        within = args.within
        args.within_s = None if within is None else parse_duration(within, what="--within")
    except AutotuneError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    profile = probe()
    notes: list[str] = []
    specs: dict[str, ModelSpec] = {}
    try:
        caps = profile.device(args.device)
        if args.preset is not None:
            spec, labelled, preset_budget, notes = preset_plan(args.preset, args.variant, caps)
            model, specs = spec.name, {spec.name: spec}
            plans = {model: labelled}
            budget_text = args.budget
        else:
            plans = _named(args, caps)
            preset_budget, budget_text = None, args.budget or "16GB"
        budget = (
            parse_budget(budget_text, device_memory_bytes=caps.total_memory_bytes)
            if budget_text
            else preset_budget or caps.total_memory_bytes or 16 * 10**9
        )
    except AutotuneError as exc:
        args.error(str(exc))
    if args.preset is not None and len(plans[model]) < 2:
        args.error("no variant left to measure: " + "; ".join(notes))
    warmup = args.warmup if args.warmup is not None else (3 if caps.kind == "cuda" else 2)
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(profile, caps.device):
        print(f"- {line}")
    for model, labelled in plans.items():
        base = labelled[0][1]
        shown = f"mb {base.micro_batch}x{base.grad_accum} seq {base.seq_len} {base.precision}"
        extra = f", compile {base.compile}" if base.compile != "off" else ""
        knobs = base.knobs or "at their defaults"
        print(f"- {model} {labelled[0][0]}: {shown}{extra}, knobs {knobs}")
    print(f"- budget {format_bytes(budget)}, {args.steps} timed steps after {warmup} warm-up")
    for note in notes:
        print(f"- not run: {note}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[Cell]] = {
        (m, label): [] for m, labelled in plans.items() for label, _ in labelled
    }
    measured = functools.partial(
        measure, steps=args.steps, device=caps.device, budget=budget, warmup=warmup
    )

    def measure_one(model: str, config: TrainConfig, *, timeout_s: float) -> Cell:
        return measured(specs.get(model, model), config, timeout_s=timeout_s)

    limit = TimeLimit(limit_s=args.within_s)
    return run_rounds_then_table(
        lambda: run_rounds(cells, plans, args.rounds, measure_one, limit),
        cells,
        lambda: table(cells),
    )


def _named(args: argparse.Namespace, caps: Any) -> dict[str, Labelled]:
    models = [m.strip() for m in (args.models or "mu,gpt-small").split(",") if m.strip()]
    labels = [v.strip() for v in (args.variants or ",".join(v for v, _, _ in VARIANTS)).split(",")]
    labels = [v for v in labels if v]
    known = {v for v, _, _ in VARIANTS}
    if not models or any(m not in BASES for m in models):
        args.error(f"--models: of {', '.join(BASES)}")
    if not labels or any(v not in known for v in labels) or labels[0] != "base":
        args.error(f"--variants: 'base' first, then of {', '.join(sorted(known - {'base'}))}")
    precision = "bf16" if caps.kind == "cuda" or caps.bf16_native else "fp32"
    return named_plans(models, labels, precision)


if __name__ == "__main__":
    raise SystemExit(main())
