"""Every trial one search process knows of, the configs that have a result, and the memory
model fitted to them: the search's one record of what it measured."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.study.plan.memory_model import MemoryModel
from autotune.study.trials.records import TrialRecord

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.context import SearchContext

__all__ = ["TrialLog"]


@dataclass(kw_only=True)
class TrialLog:
    """The trials of one search process over its study (earlier runs' included).

    ``records`` holds every trial seen; ``by_key`` maps a config (its space key) to the
    trial whose result it has, so that a config is not run twice; ``memory`` learns from
    each measured peak and OOM; ``consecutive_skips`` counts this run's trials in a row
    that ran no burst.

    Who writes it: the planner alone. It records each trial of this process once it
    finished (``Planner.after_trial``) and, in a shared study, the trials other workers
    finished, as ``Workers`` reads them (``Planner.absorb_others``). A resumed study's
    earlier trials are in the log from the start (``TrialLog.of``, by
    ``open_search_study``). Everything else only reads it.

    ``space``, ``budget_bytes``, ``trial_limit`` and ``burst_limit_s`` are the search's
    (``SearchContext``; ``TrialLog.of``)."""

    space: SearchSpace
    budget_bytes: int
    trial_limit: int | None = None
    burst_limit_s: float | None = None
    records: dict[int, TrialRecord] = field(default_factory=dict)
    by_key: dict[tuple[Any, ...], int] = field(default_factory=dict)
    memory: MemoryModel = field(init=False)
    consecutive_skips: int = 0

    def __post_init__(self) -> None:
        self.memory = MemoryModel(
            budget_bytes=self.budget_bytes, device_kind=self.space.device_kind
        )

    @classmethod
    def of(cls, context: SearchContext, earlier: Iterable[TrialRecord] = ()) -> TrialLog:
        """The log for the search of ``context``, holding the study's ``earlier`` trials (a
        resumed search goes on from them)."""
        log = cls(
            space=context.space,
            budget_bytes=context.budget_bytes,
            trial_limit=context.limits.trials,
            burst_limit_s=context.burst_limit_s,
        )
        for record in earlier:
            log.absorb(record)
        return log

    # -- what is known -----------------------------------------------------------------
    def measured(self) -> int:
        """Trials that ran a burst to its end (interrupted ones do not count)."""
        return sum(1 for r in self.records.values() if r.ran and r.status != "interrupted")

    def best(self) -> TrialRecord | None:
        feasible = [r for r in self.records.values() if r.feasible and r.value is not None]
        return max(feasible, key=lambda r: (r.value or 0.0, -r.number), default=None)

    def best_throughput(self) -> float | None:
        values = [
            r.throughput for r in self.records.values() if r.feasible and r.throughput is not None
        ]
        return max(values, default=None)

    def record_of(self, config: TrainConfig) -> TrialRecord | None:
        """The trial whose result ``config`` has, or None."""
        number = self.by_key.get(self.space.key(config))
        return None if number is None else self.records.get(number)

    def timed_out_sooner(self, record: TrialRecord) -> bool:
        """Whether ``record`` ran out a shorter burst limit (``--burst-timeout``) than this
        search's: it tells nothing of its config under this one. A replay goes by the trial
        it replayed; a trial that did not record its limit (an older autotune's) is not."""
        if record.duplicate_of is not None:
            record = self.records.get(record.duplicate_of, record)
        ran_under, limit = record.burst_timeout_s, self.burst_limit_s
        if record.status != "timeout" or ran_under is None or limit is None:
            return False
        return ran_under < limit

    def compiled_ok(self, mode: str) -> bool:
        """Whether a trial with compile ``mode`` got through its compile: it has a
        result, or the pruner stopped it after timed steps."""
        return any(
            r.ran and r.status in ("ok", "pruned") and r.config.get("compile") == mode
            for r in self.records.values()
        )

    def trials_in_order(self) -> list[TrialRecord]:
        """Every trial but those queued and never started (WAITING), by number."""
        return sorted(
            (r for r in self.records.values() if r.state != "WAITING"), key=lambda r: r.number
        )

    # -- trials and budget ---------------------------------------------------------------
    def configs_measured(self) -> int:
        """Distinct configs with a successful result (replays and re-measures count once)."""
        return len({number for number in self.by_key.values() if self._ok(number)})

    def _ok(self, number: int) -> bool:
        record = self.records.get(number)
        return record is not None and record.ran and record.feasible

    def trials_left(self) -> int | None:
        trials = self.trial_limit
        return None if trials is None else max(0, trials - self.measured())

    # -- learning from trials ------------------------------------------------------------
    def absorb(self, record: TrialRecord) -> None:
        """Add a finished trial to the log (memory model, known configs)."""
        self.records[record.number] = record
        if not record.finished or not record.config:
            return
        config = record.known_config()
        if config is None:  # a trial from an older, different space: ignore it
            return
        # A FAIL trial was interrupted or its process killed: it has no result, so its
        # config may run again.
        # A config stopped by the time limit has no result either, nor one whose burst ran
        # out a shorter --burst-timeout than this search's (the planner queues it again).
        retry = record.state == "FAIL" or record.status in ("stopped", "skipped")
        retry = retry or self.timed_out_sooner(record)
        if not retry and self.space.contains(config):
            key = self.space.key(config)
            earlier = self.records.get(self.by_key.get(key, -1))
            # A re-measure of a disturbed trial stands for the config when it measured more
            # (load only ever slows a burst down).
            if earlier is None or (
                record.role == "re-measure" and (record.value or 0.0) > (earlier.value or 0.0)
            ):
                self.by_key[key] = record.number
        if record.ran and record.duplicate_of is None:
            if record.status in ("oom", "over-budget"):
                self.memory.add(
                    record.number, config, peak_bytes=record.peak_memory_bytes, infeasible=True
                )
            elif record.status == "ok":
                self.memory.add(
                    record.number, config, peak_bytes=record.peak_memory_bytes, infeasible=False,
                    context_bytes=record.cuda_context_bytes,
                )  # fmt: skip

    def record_trial(self, record: TrialRecord) -> None:
        """A trial of this run finished: absorb it and count a run of skipped trials."""
        self.absorb(record)
        self.consecutive_skips = 0 if record.ran else self.consecutive_skips + 1
