"""A search on a quiet machine against the same search with a CPU-bound job started halfway.

The target: with one CPU-bound process started halfway through a search, the
output warns, and the race's speedup stays within 15% of a quiet run's. This script runs
``autotune search`` (a fresh study each time, the command's defaults otherwise) once on
the quiet machine and once with a busy loop (one core) started after ``--delay`` seconds,
and prints both side by side: wall time, whether the output warned (a trial's warning or
the race's note about a busy round), the trials marked
disturbed, the race's speedup and its interval.

Usage (from the repository root, with nothing else running)::

    python benchmarks/contention.py --model mu --budget 8GB
    python benchmarks/contention.py --model gpt-small --budget 8GB --delay 120
    python benchmarks/contention.py --model mu --budget 8GB --keep runs/contention
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
from typing import Any

from _common import command_line, load_average, render_table, utc_now

QUIET, LOADED = "quiet", "one busy core from halfway"
BURNER = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def run_search(model: str, budget: str, device: str, folder: Path, delay: float | None) -> dict:
    """One ``autotune search --json`` in a subprocess; with ``delay``, a busy loop (not a
    child of the search) starts after that many seconds and ends with the search."""
    cmd = [
        sys.executable, "-m", "autotune", "search", "--model", model, "--budget", budget,
        "--device", device, "--json", "--output", str(folder / "best.yaml"),
    ]  # fmt: skip
    started = time.monotonic()
    search = subprocess.Popen(
        cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    burner = None
    if delay is not None:
        try:
            search.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            code = BURNER.format(seconds=3600)
            burner = subprocess.Popen([sys.executable, "-c", code])
    out, err = search.communicate()
    wall = time.monotonic() - started
    if burner is not None:
        burner.kill()
        burner.wait()
    if search.returncode != 0:
        raise SystemExit(f"search failed ({search.returncode}):\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out)
    result["_wall_s"] = wall
    result["_stderr"] = err
    return result


def keep(result: dict, folder: Path, to: Path) -> None:
    """Keep a search's record: its ``--json`` result, its output and its preset."""
    to.mkdir(parents=True, exist_ok=True)
    record = {k: v for k, v in result.items() if k != "_stderr"}
    (to / "result.json").write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    (to / "output.txt").write_text(result["_stderr"], encoding="utf-8")
    preset = folder / "best.yaml"
    if preset.exists():
        (to / "best.yaml").write_bytes(preset.read_bytes())


def said_load(output: str) -> bool:
    """Whether the search's live output told the user that outside load touched its
    figures: a trial's warning, or the race's note about a round run while busy (load
    that arrives after the trials touches only the race)."""
    return "warning: trial #" in output or "ran while the machine was busy" in output


def row(name: str, result: dict, quiet_speedup: float | None) -> dict[str, str]:
    race = result.get("race") or {}
    speedup = race.get("speedup")
    low, high = race.get("speedup_interval") or (None, None)
    disturbed = [t["number"] for t in result["trials"] if t.get("disturbed")]
    warned = said_load(result["_stderr"])
    vs_quiet = "-"
    if speedup and quiet_speedup:
        vs_quiet = f"{speedup / quiet_speedup:.2f}x"
    return {
        "run": name,
        "wall": f"{result['_wall_s']:.0f} s",
        "trials": str(result["counts"]["ran"]),
        "warned": "yes" if warned else "no",
        "disturbed trials": ", ".join(f"#{n}" for n in disturbed) or "-",
        "winner": race.get("winner") or "-",
        "race speedup": f"{speedup:.2f}x" if speedup else "-",
        "interval": f"{low:.2f}-{high:.2f}" if low else "-",
        "vs quiet": vs_quiet,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mu")
    p.add_argument("--budget", default="8GB")
    p.add_argument("--device", default="cpu")
    p.add_argument("--delay", type=float, default=150.0, help="seconds before the busy loop")
    p.add_argument(
        "--keep", type=Path, default=None,
        help="folder for each search's --json result, output and preset (its race round by round)",
    )  # fmt: skip
    args = p.parse_args(argv)
    print(f"- date: {utc_now()}")
    print(f"- command: `{command_line(argv)}`")
    print(f"- load average at start: {load_average()}; cores: {os.cpu_count()}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="contention-") as tmp:
        for name, delay in ((QUIET, None), (LOADED, args.delay)):
            folder = Path(tmp) / ("quiet" if delay is None else "loaded")
            folder.mkdir()
            print(f"[{name}] autotune search --model {args.model}", file=sys.stderr, flush=True)
            results[name] = run_search(args.model, args.budget, args.device, folder, delay)
            if args.keep is not None:
                keep(results[name], folder, args.keep / folder.name)
    print(f"- load average at the end: {load_average()}")
    quiet = (results[QUIET].get("race") or {}).get("speedup")
    rows = [row(name, result, quiet) for name, result in results.items()]
    print()
    print(render_table(list(rows[0]), [list(r.values()) for r in rows]))
    for name, result in results.items():
        notes = [n for n in result.get("notes", []) if "busy" in n or "disturbed" in n]
        for note in notes:
            print(f"- {name}: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
