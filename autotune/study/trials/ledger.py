"""Where a search's time went: the ledger printed under the summary, in ``--json`` and in
the report.

A search is worth the configs it measures in the user's time limit, and its time goes
first to what measures nothing: first compiles (tens of seconds each on a CPU), the
race's re-measuring, process starts and warm-ups. The ledger splits the search's wall
time into those parts, from the figures every burst reports (``BurstResult``: its
overhead before the first step, its warm-up steps, the compile inside them, its timed
steps) and from the clock around the race and the preset's writing. A compile is a
first one unless an earlier trial of the search compiled the same code
(``trial_cost.compiled_code_key``): the compile cache then served it. A trial stopped
before its compile ended counts its time after the process start as its compile.

What no part claims is ``other``: the study's bookkeeping, the sampler, the machine
watch's waits for a quiet moment, the naive profile, a burst's teardown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from autotune.study.trials.trial_cost import compiled_code_key

if TYPE_CHECKING:
    from autotune.study.trials.records import TrialRecord

__all__ = ["LEDGER_PARTS", "TimeLedger", "ledger_of"]

# The parts, in the order the line and the report show them, with their labels.
LEDGER_PARTS: tuple[tuple[str, str], ...] = (
    ("first_compiles_s", "first compiles"),
    ("cached_compiles_s", "compiles from the cache"),
    ("process_starts_s", "process starts"),
    ("warm_ups_s", "warm-ups"),
    ("timed_steps_s", "timed steps"),
    ("race_s", "the race"),
    ("writing_s", "writing"),
    ("other_s", "other"),
)


@dataclass(frozen=True, kw_only=True)
class TimeLedger:
    """A search's wall time, part by part, in seconds; ``configs``: the distinct configs
    its trials measured (a figure each), ``trials_s``: the trials' phase as a whole."""

    total_s: float
    trials_s: float
    configs: int
    first_compiles: int
    first_compiles_s: float
    cached_compiles_s: float
    process_starts_s: float
    warm_ups_s: float
    timed_steps_s: float
    race_s: float
    writing_s: float
    other_s: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _rounded(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, raw: Any) -> TimeLedger | None:
        """The ledger ``to_dict`` wrote (a study's ``ledger`` attribute), or None where
        ``raw`` is not one (a study of an older autotune, or a damaged attribute)."""
        if not isinstance(raw, dict):
            return None
        try:
            return cls(**{f.name: raw[f.name] for f in fields(cls)})
        except (KeyError, TypeError):
            return None

    def line(self) -> str:
        """``Time: 340 s for 15 configs; first compiles 73 s (1), ... other 4 s``."""
        parts = []
        for name, label in LEDGER_PARTS:
            seconds = getattr(self, name)
            if name == "first_compiles_s" and self.first_compiles:
                label = f"{label} ({self.first_compiles})"
            parts.append(f"{label} {seconds:.0f} s")
        configs = f"{self.configs} config{'s' if self.configs != 1 else ''} measured"
        return f"Time: {self.total_s:.0f} s, {configs}; " + ", ".join(parts)


def ledger_of(
    records: Iterable[TrialRecord],
    *,
    total_s: float,
    trials_s: float,
    race_s: float,
    writing_s: float,
    device_kind: str,
) -> TimeLedger:
    """The ledger of a search that took ``total_s``, of which its trials' phase took
    ``trials_s``, its race ``race_s`` and writing the preset ``writing_s``, from the
    ``records`` of the trials this search ran (not those a resumed study held before)."""
    seen_code: set[tuple[tuple[str, str], ...]] = set()
    configs: set[str] = set()
    first = cached = starts = warm = timed = 0.0
    first_count = 0
    for record in sorted(records, key=lambda r: r.number):
        if not record.ran:
            continue
        if record.throughput is not None:
            configs.add(json.dumps(record.config, sort_keys=True, default=str))
        compile_s = record.compile_s or _stopped_compiling_s(record)
        if compile_s > 0:
            code = compiled_code_key(record.config, device_kind)
            if code in seen_code:
                cached += compile_s
            else:
                first += compile_s
                first_count += 1
                seen_code.add(code)
        starts += record.overhead_s or 0.0
        warm += max(0.0, (record.warmup_s or 0.0) - compile_s)
        timed += record.timed_s or 0.0
    other = total_s - (first + cached + starts + warm + timed + race_s + writing_s)
    return TimeLedger(
        total_s=total_s,
        trials_s=trials_s,
        configs=len(configs),
        first_compiles=first_count,
        first_compiles_s=first,
        cached_compiles_s=cached,
        process_starts_s=starts,
        warm_ups_s=warm,
        timed_steps_s=timed,
        race_s=race_s,
        writing_s=writing_s,
        other_s=max(0.0, other),
    )


def _stopped_compiling_s(record: TrialRecord) -> float:
    """The time a compiled trial spent compiling when it was stopped before its compile
    ended (the compile cap, the time limit): its wall time after the process start, since
    no warm-up step finished. 0 for any other trial. Without it, a newcomer's 113 s trial
    stopped while compiling went to ``other``."""
    if (
        record.config.get("compile", "off") == "off"
        or record.overhead_s is None  # stopped before it was ready: imports, the build
        or record.warmup_s is not None
        or record.timed_s is not None
        or record.wall_s is None
    ):
        return 0.0
    return max(0.0, record.wall_s - record.overhead_s)


def _rounded(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value
