"""What the finalist race measured: each entrant's rounds, the paired ratios between two
entrants (a geometric mean over the rounds with a bootstrap interval), and the result
(``RaceResult``) that the preset's ``race`` section and ``--json`` are made from."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.preset.figures import CONFIDENCE, qualified

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.study.trials.records import TrialRecord

__all__ = [
    "BOOTSTRAP_SAMPLES",
    "CONFIDENCE",
    "NO_INTERVAL",
    "NO_RATIO",
    "Entrant",
    "Paired",
    "RaceResult",
    "paired_ratio",
]

BOOTSTRAP_SAMPLES = 2000
NO_INTERVAL = "1 round"  # why a ratio from a single paired round has no interval


@dataclass(frozen=True)
class Paired:
    """A ratio of two entrants from paired rounds: the geometric mean of the per-round
    ratios and its bootstrap interval."""

    estimate: float
    low: float
    high: float
    rounds: int

    @property
    def has_interval(self) -> bool:
        """One round gives a figure, not an interval (its low and high are the figure)."""
        return self.rounds >= 2

    def describe(self) -> str:
        if not self.has_interval:
            return f"{self.estimate:.2f}x (no interval: {NO_INTERVAL})"
        return f"{self.estimate:.2f}x ({CONFIDENCE:.0%} interval {self.low:.2f}-{self.high:.2f})"


def paired_ratio(
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    seed: int = 0,
    samples: int = BOOTSTRAP_SAMPLES,
) -> Paired | None:
    """``a`` over ``b``, round by round (rounds where either has no figure are left out):
    the geometric mean of the ratios, with a percentile-bootstrap interval over the
    rounds (deterministic for a ``seed``). None without a single paired round."""
    logs = [math.log(x / y) for x, y in zip(a, b, strict=False) if x and y and x > 0 and y > 0]
    if not logs:
        return None
    estimate = math.exp(statistics.fmean(logs))
    if len(logs) == 1:
        return Paired(estimate, estimate, estimate, 1)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(max(1, samples)))
    tail = (1.0 - CONFIDENCE) / 2
    low = means[int(tail * (len(means) - 1))]
    high = means[int((1.0 - tail) * (len(means) - 1))]
    return Paired(estimate, math.exp(low), math.exp(high), len(logs))


@dataclass(kw_only=True)
class Entrant:
    """One config in the race: the trial it comes from, its roles, and its rounds."""

    record: TrialRecord
    roles: list[str]  # "finalist", "naive", "expert"
    throughputs: list[float | None] = field(default_factory=list)  # per round
    bursts: list[BurstResult] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)  # per burst: its wall time, measured here
    problem: str = ""  # why it cannot win (its eval/checkpoint round failed, ...)
    at_edge: str = ""  # why it fits the budget only narrowly (it wins only if all do)
    dropped: bool = False  # no longer measured
    eliminated: str = ""  # why it left the race early (clearly slower in a fair round)
    counted: list[float | None] | None = None  # the rounds that count (None: all of them)
    stand_in: BurstResult | None = None  # its quiet trial's figures, when no round counts

    def forget_last_burst(self) -> None:
        """Drop the last burst's figure, wall and result (it is run again)."""
        for kept in (self.throughputs, self.walls, self.bursts):
            kept.pop()

    @property
    def figures(self) -> list[float | None]:
        """Per round, the figures that count: a round run under outside load is left out
        when a quiet round exists (load does not slow every config alike)."""
        return self.counted if self.counted is not None else self.throughputs

    @property
    def label(self) -> str:
        extra = [r for r in self.roles if r != "finalist"]
        return f"#{self.record.number}" + (f" ({', '.join(extra)})" if extra else "")

    @property
    def eligible(self) -> bool:
        """Whether it can win: no problem, a figure, still in the race."""
        return not self.problem and not self.eliminated and self.median is not None

    @property
    def median(self) -> float | None:
        values = [t for t in self.figures if t]
        return statistics.median(values) if values else None

    @property
    def spread(self) -> float | None:
        """(best - worst) / median over the rounds that count."""
        values = [t for t in self.figures if t]
        if len(values) < 2 or not self.median:
            return None
        return (max(values) - min(values)) / self.median

    def typical_burst(self) -> BurstResult | None:
        """The burst whose throughput is closest to the median (a real measurement, so
        its figures agree with each other); its trial's, when no race round counts."""
        if self.stand_in is not None:
            return self.stand_in
        pairs = [(t, b) for t, b in zip(self.figures, self.bursts, strict=False) if t]
        if not pairs or self.median is None:
            return None
        return min(pairs, key=lambda p: abs(p[0] - (self.median or 0.0)))[1]

    def verify_burst(self) -> BurstResult | None:
        """The first round's burst (with the eval step and the checkpoint save)."""
        return self.bursts[0] if self.bursts else None


@dataclass(frozen=True, kw_only=True)
class RaceResult:
    """The race: every entrant's rounds, the winner, and the paired figures."""

    rounds: int
    unit: str
    entrants: tuple[Entrant, ...]
    winner: Entrant
    runner_up: Entrant | None
    naive: Entrant | None
    speedup: Paired | None  # winner over naive (None: no evidence, see speedup_reason)
    margin: Paired | None  # winner over the runner-up
    load: dict[str, Any] | None = None  # what the machine watch saw during the race
    busy_rounds: tuple[bool, ...] = ()  # per round: run under outside load
    notes: tuple[str, ...] = ()
    # why there is no speedup, or what it rests on when not on rounds measured alike
    # ("" when it comes from paired rounds measured alike)
    speedup_reason: str = ""
    paired: bool = True  # some rounds were measured alike: their ratios count

    @property
    def interval_reason(self) -> str:
        """Why the speedup and margin have no interval ("" when they have one)."""
        if self.speedup is None and self.margin is None:
            return self.speedup_reason
        paired = self.speedup or self.margin
        return "" if paired is None or paired.has_interval else NO_INTERVAL

    def qualified_speedup(self) -> str:
        """The speedup as the output prints it, with its evidence: ``2.31x (95% interval
        2.2-2.4)``, ``2.31x (no interval: 1 round)``, or ``not measured (why)``."""
        return qualified(
            None if self.speedup is None else self.speedup.estimate,
            interval=self._interval(self.speedup),
            reason=self.speedup_reason or self.interval_reason,
        )

    def _interval(self, p: Paired | None) -> list[float] | None:
        if p is None or not p.has_interval or self.speedup_reason:
            return None
        return [round(p.low, 4), round(p.high, 4)]

    def ratio_to_naive(self, entrant: Entrant) -> Paired | None:
        """Paired over the rounds that count; None when no round does."""
        if self.naive is None or not self.paired:
            return None
        return paired_ratio(entrant.figures, self.naive.figures)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the preset's ``race`` section and ``--json``."""

        entries = []
        for e in self.entrants:
            ratio = self.ratio_to_naive(e)
            entries.append(
                {
                    "label": e.label,
                    "roles": list(e.roles),
                    "trial": e.record.number,
                    "config": e.record.summary(),
                    "median": _round(e.median),
                    "spread": _round(e.spread),
                    "samples": [_round(t) for t in e.throughputs],
                    "walls_s": [round(w, 1) for w in e.walls],
                    "ratio_to_naive": None if ratio is None else round(ratio.estimate, 4),
                    "problem": e.problem,
                    "at_edge": e.at_edge,
                    "eliminated": e.eliminated,
                }
            )
        return {
            "rounds": self.rounds,
            "unit": self.unit,
            "winner": self.winner.label,
            "runner_up": None if self.runner_up is None else self.runner_up.label,
            "speedup": None if self.speedup is None else round(self.speedup.estimate, 4),
            "speedup_interval": self._interval(self.speedup),
            "margin": None if self.margin is None else round(self.margin.estimate, 4),
            "margin_interval": self._interval(self.margin),
            "speedup_reason": self.speedup_reason or None,
            "interval_reason": self.interval_reason or None,
            "entries": entries,
            "load": self.load,
            "busy_rounds": list(self.busy_rounds),
        }


NO_RATIO = Paired(0.0, 0.0, 0.0, 0)  # sorts last


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
