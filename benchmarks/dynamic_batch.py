"""A micro-batch change served by the compile cache: compiled code with a dynamic batch
dimension, against code compiled for each micro-batch (static shapes).

A CPU search compiled each compiled micro-batch of a config anew (mu's first compile took
52-57 s of a 340-second default search on the 2-core EPYC, and the compiled code of mb 8
did not serve mb 16); it now marks the batch dimension dynamic on a CPU
(``TrainConfig.any_micro_batch``), and this script measures that choice against static
code. Marked dynamic in its batch dimension
(``torch._dynamo.maybe_mark_dynamic``), one compile serves every micro-batch, at the cost
of code that does not know its batch size. Per mode, on a compile cache emptied first:
a process compiles and times micro-batch A, then a fresh process micro-batch B (the
second compile: a first one for static code, the cache's for dynamic code). The rounds
alternate which mode goes first; the table gives each mode's compile times and tokens/s,
and dynamic / static.

Usage (from the repository root, with nothing else running)::

    python benchmarks/dynamic_batch.py
    python benchmarks/dynamic_batch.py --model gpt-small --micro-batches 4,8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    command_line,
    empty_compile_cache,
    fmt_float,
    fmt_ratio,
    fmt_seconds,
    hardware_lines,
    load_average,
    render_table,
    utc_now,
)

from autotune.machine.hardware import probe

ROOT = Path(__file__).resolve().parent.parent
MODES = ("static", "dynamic")
# The default search's pick on the AVX2 EPYC (BENCHMARKS.md, search_efficiency.py) less
# its micro-batch, and gpt-small's.
KNOBS = {
    "mu": {"block_group": 16, "attention": "sdpa", "loss": "full"},
    "gpt-small": {"attention": "sdpa", "loss": "full"},
}


def child(model: str, micro_batch: int, dynamic: bool, precision: str, steps: int) -> int:
    """One process: build, compile and time ``steps`` steps of ``micro_batch``; prints
    the first step's excess over a timed one (the compile) and tokens/s as JSON."""
    import torch

    from autotune.config.train_config import TrainConfig
    from autotune.engine.step import (
        Stepper,
        apply_backend_flags,
        compile_model,
        make_optimizer,
        prepare_model,
    )
    from autotune.models.registry import load_model

    spec = load_model(model)
    seq = spec.seq_len
    config = TrainConfig(
        micro_batch=micro_batch, grad_accum=spec.global_batch // micro_batch, seq_len=seq,
        precision=precision, compile="default", knobs=KNOBS.get(model, {}),
    )  # fmt: skip
    device = torch.device("cpu")
    torch.manual_seed(0)
    raw = prepare_model(spec, config, device)
    model_c = compile_model(raw, config)
    optimizer = make_optimizer(raw, config)
    apply_backend_flags(config, device)
    stepper = Stepper(model_c, optimizer, config=config, device=device, loss_fn=spec.loss_fn)
    # the step marks the batch dimension dynamic on a CPU (TrainConfig.any_micro_batch);
    # the static mode turns that off, as autotune did before
    stepper.any_micro_batch = dynamic
    generator = torch.Generator().manual_seed(0)

    def micro_batches() -> list[Any]:
        return [
            spec.make_batch(batch_size=micro_batch, seq_len=seq, generator=generator)
            for _ in range(config.grad_accum)
        ]

    times = []
    for _ in range(steps + 1):
        batches = micro_batches()
        started = time.perf_counter()
        stepper.step(batches).loss.item()
        times.append(time.perf_counter() - started)
    step_s = statistics.median(times[1:])
    tokens = spec.global_batch * seq
    print(json.dumps({"compile_s": times[0] - step_s, "tokens_per_s": tokens / step_s}))
    return 0


def measure(model: str, micro_batch: int, dynamic: bool, precision: str, steps: int) -> dict:
    argv = [
        sys.executable, str(Path(__file__).resolve()), "--child", model, str(micro_batch),
        "1" if dynamic else "0", precision, str(steps),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["?"]}
    figures: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in and args_in[0] == "--child":
        m, mb, dyn, precision, steps = args_in[1:6]
        return child(m, int(mb), dyn == "1", precision, int(steps))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mu", choices=sorted(KNOBS))
    p.add_argument("--micro-batches", default="8,16", help="A,B: compiled first, then second")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(args_in)
    first, second = (int(x) for x in args.micro_batches.split(","))
    print(f"# dynamic_batch.py, {utc_now()}\n\n`{command_line(args_in)}`\n")
    print("\n".join(hardware_lines(probe(), "cpu")))
    print(f"\nload average before: {load_average()}")
    cells: dict[str, list[tuple[dict, dict]]] = {mode: [] for mode in MODES}
    for n in range(args.rounds):
        for mode in MODES if n % 2 == 0 else MODES[::-1]:
            with empty_compile_cache(f"dynbatch-{mode}-"):
                a = measure(args.model, first, mode == "dynamic", args.precision, args.steps)
                b = measure(args.model, second, mode == "dynamic", args.precision, args.steps)
            cells[mode].append((a, b))
            print(f"round {n + 1} {mode}: mb {first} {a}, mb {second} {b}", flush=True)
    print(f"load average after: {load_average()}\n")

    def med(mode: str, which: int, key: str) -> float | None:
        values = [pair[which].get(key) for pair in cells[mode]]
        found = [v for v in values if v is not None]
        return statistics.median(found) if found else None

    rows = []
    for mode in MODES:
        rows.append([
            mode, fmt_seconds(med(mode, 0, "compile_s")), fmt_seconds(med(mode, 1, "compile_s")),
            fmt_float(med(mode, 0, "tokens_per_s")), fmt_float(med(mode, 1, "tokens_per_s")),
        ])  # fmt: skip
    ratios = ["dynamic / static", "", ""]
    for which in (0, 1):
        d, s = med("dynamic", which, "tokens_per_s"), med("static", which, "tokens_per_s")
        ratios.append(fmt_ratio(d / s if d and s else None))
    rows.append(ratios)
    headers = [
        f"{args.model} {args.precision}, compile=default", f"compile mb {first} (first)",
        f"compile mb {second} (after mb {first})", f"tokens/s mb {first}",
        f"tokens/s mb {second}",
    ]  # fmt: skip
    print(f"medians of {args.rounds} rounds:\n")
    print(render_table(headers, rows, align="lrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
