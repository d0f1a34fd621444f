"""The search's printed outcome (autotune/cli/search_view.py): its figures say where they
come from."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from autotune.burst.result import BurstResult
from autotune.cli.search_view import _print_best_and_speedup, grouped_reasons
from autotune.study.race.race_records import Entrant, RaceResult
from autotune.study.trials.records import TrialRecord


def _best_line(winner: Entrant) -> str:
    race = RaceResult(
        rounds=1, unit="tokens/s", entrants=(winner,), winner=winner, runner_up=None,
        naive=None, speedup=None, margin=None,
    )  # fmt: skip
    result = SimpleNamespace(
        best=winner.record, race=race, unit="tokens/s", budget_bytes=8 * 10**9, naive=None,
        verified=None,
    )  # fmt: skip
    console = Console(record=True, width=300)
    _print_best_and_speedup(result, console)  # type: ignore[arg-type]
    return console.export_text()


def test_a_winner_the_race_left_no_figure_shows_its_trials_not_a_race_median() -> None:
    record = TrialRecord(number=0, state="COMPLETE", status="ok", throughput=1625.3)
    winner = Entrant(record=record, roles=["naive"], throughputs=[None])
    assert "race median - tokens/s" in _best_line(winner)
    winner.stand_in = BurstResult(status="ok", tokens_per_s=1625.3, peak_memory_bytes=10**8)
    line = _best_line(winner)
    assert "not raced, its trial's 1,625 tokens/s" in line and "race median" not in line
    raced = Entrant(record=record, roles=["finalist"], throughputs=[2000.0, 2100.0])
    assert "race median 2,050 tokens/s" in _best_line(raced)


def test_reasons_that_differ_only_in_seconds_are_told_once_with_their_range() -> None:
    left = (
        "skipped: the time left for trials ({} s) is less than this compiled trial takes "
        "here (72 s: the slowest first compile so far)"
    )
    skipped = {
        left.format(66): 2,
        left.format(59.5): 2,
        "pruned: clearly slower than the best so far": 3,
        left.format(49): 1,
        "timeout: no result after 120 s, during warm-up": 1,
        "timeout: no result after 90 s, during warm-up": 1,
        "oom: peak 9 GiB passed the budget of 8 GiB": 1,
    }
    assert grouped_reasons(skipped) == [
        (left.replace("({} s)", "(49-66 s)"), 5),
        ("pruned: clearly slower than the best so far", 3),
        ("timeout: no result after 90-120 s, during warm-up", 2),
        ("oom: peak 9 GiB passed the budget of 8 GiB", 1),
    ]
    assert grouped_reasons({left.format(66): 1}) == [(left.format(66), 1)]
