"""How a measured speedup is printed with its evidence: the one rule for the search's
output, ``presets show``/``list``, the report and ``--json`` readers (a figure the race
could not back is "not measured", with the reason; one round has no interval)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CONFIDENCE", "qualified", "race_speedup", "speedup_clause"]

CONFIDENCE = 0.95  # the race's bootstrap interval


def qualified(
    speedup: float | None, *, interval: Sequence[float] | None = None, reason: str = ""
) -> str:
    """``speedup`` with its evidence: ``2.31x (95% interval 2.20-2.40)``, ``2.31x (no
    interval: 1 round)``, ``2.31x (from the quiet trials ...)`` or ``not measured (no
    quiet round)``."""
    if speedup is None:
        return f"not measured ({reason})" if reason else "not measured"
    if interval is not None and len(interval) == 2:
        low, high = interval
        return f"{speedup:.2f}x ({CONFIDENCE:.0%} interval {low:.2f}-{high:.2f})"
    return f"{speedup:.2f}x (no interval: {reason})" if reason else f"{speedup:.2f}x"


def race_speedup(race: Any, baseline_speedup: float | None = None) -> str:
    """The qualified speedup of a preset's ``race`` section (a ``Race`` or its plain
    mapping), else of its baseline's figure (presets from before the race had one):
    what ``presets show``/``list`` and the report print."""
    if race is None:
        return qualified(baseline_speedup)

    def get(name: str) -> Any:
        return race.get(name) if isinstance(race, Mapping) else getattr(race, name, None)

    speedup = get("speedup")
    interval = get("speedup_interval")
    reason = str(get("speedup_reason") or get("interval_reason") or "")
    if get("rounds") == 1:  # an older preset wrote one round's figure as its interval
        interval, reason = None, reason or "1 round"
    if not isinstance(speedup, (int, float)):
        speedup = None
    return qualified(speedup, interval=interval if _pair(interval) else None, reason=reason)


def speedup_clause(text: str) -> str:
    """What follows a headline's figure, from a ``qualified`` speedup: ``, 2.31x the naive
    config (95% interval 2.20-2.40)``, or ``; speedup: not measured (no quiet round)``."""
    if text.startswith("not measured"):
        return f"; speedup: {text}"
    value, _, evidence = text.partition(" ")
    return f", {value} the naive config" + (f" {evidence}" if evidence else "")


def _pair(interval: Any) -> bool:
    return (
        isinstance(interval, (list, tuple))
        and len(interval) == 2
        and all(isinstance(x, (int, float)) for x in interval)
    )
