"""torch's CPU threads on a shared machine: two configs, quiet and with one busy core, on
all cores' threads and on the cores left, in interleaved rounds.

Why: a search that measures while another process holds a core must not let that load
bend its comparisons. torch splits each CPU operation over its threads and waits for the
slowest, so a thread that shares its core arrives a scheduler slice late at every op; a
config of many small ops (micro-batch 1) suffers far more than one of few large ops. The
search therefore gives a burst that starts under load the cores other processes leave
(``MachineWatch.burst_threads``). This script shows the effect and what the fix keeps:
the ratio between the two configs, quiet and loaded. A busy loop at nice 19 (a background
job started with ``nice``) is a fourth condition: by the scheduler's weights it yields its
core (15 against 1024), yet on every thread naive ran 17 times slower beside it on the
AVX2 EPYC, as beside a busy loop at nice 0, so the search treats it as any outside load.

Usage (from the repository root, with nothing else running)::

    python benchmarks/threads_under_load.py --rounds 2

(``--precision fp32`` on a CPU without bf16 units, an AVX2 one, where bf16 is emulated:
mu's mb 8x4 in bf16 ran at 44 tokens/s there.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from _common import (
    command_line,
    load_average,
    median_of,
    render_table,
    run_rounds_then_table,
    utc_now,
)

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
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument(
        "--conditions",
        default="quiet,busy-all,busy-left,nice19-all",
        help="comma-separated, of: quiet, busy-all (one busy core, every thread), "
        "busy-left (one busy core, the cores left), nice19-all (a nice-19 busy core, "
        "every thread); busy-all's naive runs ~95 s a step on 2 cores",
    )
    args = p.parse_args(argv)
    configs = {
        name.replace("bf16", args.precision): config.replace(precision=args.precision)
        if config.precision == "bf16"
        else config
        for name, config in CONFIGS.items()
    }
    cores = len(os.sched_getaffinity(0))
    print(f"- date: {utc_now()}")
    print(f"- command: `{command_line(argv)}`")
    print(f"- load average at start: {load_average()}; cores: {cores}")
    # (machine, threads shown, threads, the busy loop's nice value: None for no loop)
    known = {
        "quiet": ("quiet", f"{cores} (all)", None, None),
        "busy-all": ("one busy core", f"{cores} (all)", None, 0),
        "busy-left": ("one busy core", f"{cores - 1} (left)", max(1, cores - 1), 0),
        "nice19-all": ("one nice-19 busy core", f"{cores} (all)", None, 19),
    }
    chosen = [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in known]
    if unknown or not chosen:
        p.error(f"unknown --conditions {unknown}; choose from {', '.join(known)}")
    settings = [known[c] for c in chosen]
    figures: dict[tuple[str, str, str], list[float]] = {}
    names = list(configs)

    def run() -> None:
        for r in range(args.rounds):
            for machine, shown, threads, nice in settings:
                burner = None
                if nice is not None:
                    burner = subprocess.Popen(
                        [sys.executable, "-c", BURNER], preexec_fn=lambda n=nice: os.nice(n)
                    )
                try:  # the busy loop ends with the condition, Ctrl-C or SIGTERM included
                    for name, config in configs.items():
                        tps = measure(args.model, config, threads, args.steps)
                        figures.setdefault((machine, shown, name), []).append(tps)
                        print(f"round {r + 1}, {machine}, {shown} threads, {name}: {tps:,.0f}")
                finally:
                    if burner is not None:
                        burner.kill()
                        burner.wait()

    def table() -> str:
        rows = []
        for machine, shown, _, _ in settings:
            medians = [median_of(figures.get((machine, shown, n), [])) for n in names]
            ratio = medians[1] / medians[0] if medians[0] and medians[1] else None
            cells = ["-" if m is None else f"{m:,.0f}" for m in medians]
            rows.append([machine, shown, *cells, "-" if ratio is None else f"{ratio:.2f}x"])
        header = ["machine", "threads", *(f"{n} tokens/s" for n in names), "ratio"]
        return render_table(header, rows)

    return run_rounds_then_table(run, figures, table)


if __name__ == "__main__":
    raise SystemExit(main())
