"""What a search found (``SearchResult``): the best config, the naive one and the race
between them, every trial, and where the search's time went. The CLI prints it, ``--json``
dumps ``to_dict()``. It is made of the search's records (``autotune.study.trials.records``)
and the race's (``autotune.study.race.race_records``), and sits above both, so that the
records import none of what is built from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.study.trials.records import memory_model_summary, trial_counts

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.race.race_records import RaceResult
    from autotune.study.trials.ledger import TimeLedger
    from autotune.study.trials.records import TrialRecord

__all__ = ["SearchResult"]


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What a search found: the CLI prints it, ``--json`` dumps ``to_dict()``."""

    model: str
    device: str
    budget_bytes: int
    global_batch: int
    seq_len: tuple[int, ...]
    objective: str
    train_steps: int | None
    unit: str  # tokens/s or samples/s
    study_name: str
    storage: str
    space_size: int
    best: TrialRecord | None
    verified: BurstResult | None  # the winner's first race burst (eval step, checkpoint save)
    naive: TrialRecord | None
    speedup: float | None  # the winner over naive, from the race's paired rounds
    top: tuple[TrialRecord, ...]
    trials: tuple[TrialRecord, ...]
    skipped: Mapping[str, int]  # why configs were not run or not kept: reason -> count
    preset_path: str | None
    wall_s: float
    stopped: str  # why the search stopped
    race: RaceResult | None = None  # the finalist race that chose ``best``
    notes: tuple[str, ...] = ()
    ledger: TimeLedger | None = None  # where the search's time went

    @property
    def best_config(self) -> TrainConfig | None:
        return None if self.best is None else self.best.train_config()

    def counts(self) -> dict[str, int]:
        """The trials counted by what became of them (``trial_counts``)."""
        return trial_counts(self.trials)

    def memory_model(self) -> dict[str, Any]:
        """How the memory model did (``memory_model_summary`` of the trials)."""
        return memory_model_summary(self.trials)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "budget_bytes": self.budget_bytes,
            "global_batch": self.global_batch,
            "seq_len": list(self.seq_len),
            "objective": self.objective,
            "train_steps": self.train_steps,
            "unit": self.unit,
            "study_name": self.study_name,
            "storage": self.storage,
            "space_size": self.space_size,
            "best": None if self.best is None else self.best.to_dict(),
            "verified": None if self.verified is None else self.verified.to_dict(),
            "naive": None if self.naive is None else self.naive.to_dict(),
            "speedup": self.speedup,
            "speedup_reason": None if self.race is None else self.race.speedup_reason or None,
            "counts": self.counts(),
            "skipped": dict(self.skipped),
            "memory_model": self.memory_model(),
            "top": [t.to_dict() for t in self.top],
            "trials": [t.to_dict() for t in self.trials],
            "preset_path": self.preset_path,
            "wall_s": self.wall_s,
            "stopped": self.stopped,
            "race": None if self.race is None else self.race.to_dict(),
            "notes": list(self.notes),
            "ledger": None if self.ledger is None else self.ledger.to_dict(),
        }
