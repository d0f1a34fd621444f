"""The quick start, and each of its choices undone, beside a batch finder's pick.

Under a time limit of two minutes or less a search measures its quick start first
(``autotune.study.plan.playbook.quick_start``: no compile, the whole global batch at once, the
playbook's precision, and on a CPU in bf16 the model knobs' ``quick_cpu`` values). This
script measures that config, the same config with one choice undone at a time, and the
pick of Lightning's, Accelerate's and the HF Trainer's batch finders at the model's global
batch (all of it at once in fp32, the knobs at their defaults: ``benchmarks/vs_peers.py``),
each config in a fresh burst of its own, rotated each round, the medians compared ("vs
base": against the finders' pick).

Usage (from the repository root, with nothing else running)::

    python benchmarks/quick_start.py --rounds 3
    python benchmarks/quick_start.py --models gpt-small --rounds 2
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, hardware_lines, load_average, run_rounds_then_table, utc_now
from model_knobs import Cell, measure, table

from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.core.device_caps import DeviceCaps
from autotune.core.errors import AutotuneError
from autotune.core.units import parse_budget
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.study.plan.playbook import CPU_MICRO_BATCH_SHARE, naive_config, quick_start
from autotune.study.plan.space import SearchSpace
from autotune.study.trials.records import summarize_config

MODELS = ("mu", "gpt-small")


def variants(model: str, caps: DeviceCaps, cpu_count: int) -> dict[str, TrainConfig]:
    """The finders' pick first (the table's base), the quick start, then the quick start
    with one choice undone: each changed model knob back at its default, fp32 (where it
    is not), the micro-batch of the playbook on a CPU (a quarter of the global batch)."""
    spec = load_model(model)
    space = SearchSpace.for_model(spec, caps, cpu_count=cpu_count)
    quick = quick_start(space, spec)
    defaults = {k.name: k.default for k in spec.knobs}
    out = {
        "the finders' pick": finders_pick(spec, space.global_batch, quick.seq_len),
        "quick start": quick,
    }
    for name, value in quick.knobs.items():
        if value != defaults.get(name):
            out[f"{name}={defaults[name]}"] = quick.replace(
                knobs={**quick.knobs, name: defaults[name]}
            )
    if quick.precision != "fp32":
        out["fp32"] = quick.replace(precision="fp32")
    micro = max(1, space.global_batch // CPU_MICRO_BATCH_SHARE)
    if micro != quick.micro_batch:
        out[f"micro-batch {micro}"] = quick.replace(
            micro_batch=micro, grad_accum=space.global_batch // micro
        )
    return out


def finders_pick(spec: ModelSpec, global_batch: int, seq_len: int) -> TrainConfig:
    """The global batch at once as autotune's bench runs a finder's pick (``vs_peers.py``'s
    ``pick_config``): the naive config, fp32 with every knob at its default."""
    base = naive_config(spec, global_batch=global_batch, seq_len=seq_len).config
    assert base is not None  # naive_config always gives one
    return base.replace(micro_batch=global_batch, grad_accum=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed steps per burst")
    p.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    p.add_argument("--budget", default="8GB", help="each burst's memory budget, enforced")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.rounds < 1 or not models or any(m not in MODELS for m in models):
        p.error(f"--models: of {', '.join(MODELS)}; --rounds >= 1")
    profile = probe()
    try:
        caps = profile.device("cpu")
        budget = parse_budget(args.budget, device_memory_bytes=caps.total_memory_bytes)
    except AutotuneError as exc:
        p.error(str(exc))
    configs = {m: variants(m, caps, profile.cpu.logical_cores) for m in models}
    print(f"- date: {utc_now()}\n- command: `{command_line(argv)}`")
    for line in hardware_lines(profile, caps.device):
        print(f"- {line}")
    for model, named in configs.items():
        size_name = load_model(model).size_name
        for label, config in named.items():
            shown = summarize_config(config.to_dict(), size_name)
            print(f"- {model} {label}: {shown}")
    print(f"- load average at start: {load_average()}", flush=True)
    cells: dict[tuple[str, str], list[Cell]] = {
        (m, label): [] for m, named in configs.items() for label in named
    }
    measure_one = functools.partial(measure, steps=args.steps, device=caps.device, budget=budget)

    def rounds() -> None:
        for r in range(args.rounds):
            for i, (model, named) in enumerate(configs.items()):
                labels = list(named)
                shift = (r + i) % len(labels)
                for label in labels[shift:] + labels[:shift]:  # rotated each round
                    cell = measure_one(model, named[label])
                    cells[(model, label)].append(cell)
                    rate = "-" if cell[0] is None else f"{cell[0]:,.0f}"
                    print(f"  round {r + 1} {model} {label}: {rate}", flush=True)

    return run_rounds_then_table(rounds, cells, lambda: table(cells))


if __name__ == "__main__":
    raise SystemExit(main())
