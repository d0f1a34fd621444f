"""The units every stage prints: a budget failure is worded once."""

from __future__ import annotations

from autotune.core.units import over_budget

GIB = 2**30


def test_over_budget_names_the_peak_and_the_budget_only_when_it_passed() -> None:
    assert over_budget(9 * GIB, 8 * GIB) == "peak 9.00 GiB over the budget of 8.00 GiB"
    assert over_budget(9 * GIB, 8 * GIB, whose="a rank's peak").startswith("a rank's peak 9.00")
    assert over_budget(8 * GIB, 8 * GIB) is None  # at the budget is within it
    assert over_budget(None, 8 * GIB) is None and over_budget(9 * GIB, None) is None
