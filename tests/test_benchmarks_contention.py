"""benchmarks/contention.py: the table's row from a search's --json result, and the record
``--keep`` leaves of each search (its race round by round, for reading later)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_modules import load_benchmark

contention = load_benchmark("contention")


def _result() -> dict:
    return {
        "race": {"speedup": 2.2, "speedup_interval": [2.0, 2.4], "winner": "#3",
                 "busy_rounds": [True, False]},
        "trials": [{"number": 0, "disturbed": ""}, {"number": 3, "disturbed": "busy"}],
        "counts": {"ran": 2, "measured": 2},
        "notes": ["race round 1 ran while the machine was busy"],
        "_wall_s": 300.0,
        "_stderr": "warning: trial #3 was measured while the machine was busy\n",
    }  # fmt: skip


def test_a_row_compares_the_speedup_with_the_quiet_runs() -> None:
    row = contention.row("loaded", _result(), quiet_speedup=2.0)
    assert row["race speedup"] == "2.20x" and row["vs quiet"] == "1.10x"
    assert row["interval"] == "2.00-2.40" and row["warned"] == "yes"
    assert row["disturbed trials"] == "#3"


def test_keep_leaves_each_searchs_result_output_and_preset(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "best.yaml").write_text("name: x\n")
    contention.keep(_result(), folder, tmp_path / "kept" / "loaded")
    kept = tmp_path / "kept" / "loaded"
    record = json.loads((kept / "result.json").read_text())
    assert record["race"]["busy_rounds"] == [True, False] and "_stderr" not in record
    assert (kept / "output.txt").read_text().startswith("warning: trial #3")
    assert (kept / "best.yaml").read_text() == "name: x\n"
    contention.keep(_result(), tmp_path / "no-preset", tmp_path / "kept" / "quiet")
    assert not (tmp_path / "kept" / "quiet" / "best.yaml").exists()


def test_the_races_note_about_a_busy_round_counts_as_a_warning() -> None:
    # load that arrives after the trials touches only the race: its note tells the user
    assert contention.said_load("  race round 1 ran while the machine was busy (another")
    assert contention.said_load("warning: trial #3 was measured while the machine was busy")
    assert not contention.said_load("race round 1: #3 4,003, #0 (naive) 1,270 tokens/s\n")
