"""Trials per minute of one study searched by 1, 2, ... workers, printed as a
table: each row runs ``autotune search --cpu-workers N`` (or ``--devices`` for GPUs) on a
fresh journal study and reads the rate back from the study's own timestamps (measured
trials over the time from the first trial's start to the last one's end; the race is not
counted).

    python benchmarks/shared_study.py --workers 1,2 --trials 8
    python benchmarks/shared_study.py --devices cuda:0 --devices cuda:0,cuda:1 --model mu

On a CPU the model is tiny and the figure is about correctness and overhead, not speed:
the N workers split the cores between them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from autotune.study.storage.optuna_glue import open_storage

TINY = str(Path(__file__).resolve().parents[1] / "examples" / "my_model.py") + ":spec"


def run(folder: Path, name: str, placement: list[str], args: argparse.Namespace) -> str:
    storage = f"journal:{folder / (name + '.log')}"
    command = [
        sys.executable, "-m", "autotune", "search", "--model", args.model,
        "--budget", args.budget, "--trials", str(args.trials), "--steps", "2",
        "--warmup", "0", "--knob", "compile=off", "--storage", storage, "--study", name,
        "--output", str(folder / f"{name}.yaml"), "--finalists", "1", "--race-rounds", "1",
        *placement,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    started = time.monotonic()
    subprocess.run(command, cwd=folder, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    done = [t for t in study.get_trials() if t.state.is_finished()]
    measured = [t for t in done if (t.user_attrs.get("outcome") or {}).get("ran")]
    first = [t for t in measured if t.user_attrs.get("role") != "re-measure"]
    configs = [json.dumps(t.user_attrs.get("config"), sort_keys=True) for t in first]
    twice = len(configs) - len(set(configs))  # a disturbed trial's re-measure is meant
    begin = min(t.datetime_start for t in done if t.datetime_start)
    last = max(t.datetime_complete for t in done if t.datetime_complete)
    minutes = (last - begin).total_seconds() / 60
    return (
        f"| {' '.join(placement)} | {len(measured)} | {minutes:.2f} | "
        f"{len(measured) / minutes:.1f} | {twice} | {wall:.0f} s | {load:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="CPU worker counts, e.g. 1,2")
    parser.add_argument("--devices", action="append", help="a --devices value per row")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--model", default=TINY)
    parser.add_argument("--budget", default="2GB")
    args = parser.parse_args()
    rows = (
        [["--devices", d] for d in args.devices]
        if args.devices
        else [["--cpu-workers", n] for n in args.workers.split(",")]
    )
    print("| workers | measured trials | trial phase (min) | trials/min | configs measured "
          "twice (re-measures aside) | wall, race included | load average before |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, placement in enumerate(rows):
            print(run(Path(tmp), f"rate{i}", placement, args), flush=True)


if __name__ == "__main__":
    main()
