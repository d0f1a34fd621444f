"""What one search process knows so far about its study: every trial as a record, which
configs have a result, the memory model fitted to them, and when to stop."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.study.plan.memory_model import MemoryModel
from autotune.study.session.deadline import Deadline
from autotune.study.trials.records import SearchEvent, TrialRecord

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.watch import MachineWatch

__all__ = ["MAX_CONSECUTIVE_SKIPS", "Limits", "SearchState"]

MAX_CONSECUTIVE_SKIPS = 100  # the sampler keeps proposing known configs: it has converged


@dataclass(frozen=True)
class Limits:
    """When a search stops: after ``trials`` measured trials (earlier runs' included), or
    once ``time_limit_s`` seconds have passed (None: no such limit)."""

    trials: int | None
    time_limit_s: float | None


@dataclass(kw_only=True)
class SearchState:
    """The state of one search process over its study.

    ``records`` holds every trial seen (earlier runs' included); ``by_key`` maps a config
    (its space key) to the trial whose result it has, so that a config is not run twice;
    ``memory`` learns from each measured peak and OOM.
    """

    spec: ModelSpec
    space: SearchSpace
    budget_bytes: int
    limits: Limits
    progress: Callable[[SearchEvent], None] | None = None
    # When the time limit started (``time.monotonic``): the search's call (loading the model
    # counts); None: now.
    started: InitVar[float | None] = None
    # the time limit's arithmetic; the race's reserve is given to it (``keep_for_race``)
    deadline: Deadline = field(init=False)
    records: dict[int, TrialRecord] = field(default_factory=dict)
    by_key: dict[tuple[Any, ...], int] = field(default_factory=dict)
    memory: MemoryModel = field(init=False)
    consecutive_skips: int = 0
    stopped: str = ""  # why the search stopped ("" while it runs; set by the search loop)
    # compile modes whose compilation outlasted COMPILE_SHARE of the limit: not run again
    slow_compiles: dict[str, str] = field(default_factory=dict)
    watch: MachineWatch | None = None  # what else the machine runs (None: not watched)
    disturbed_trials: list[int] = field(default_factory=list)  # this run's, in order
    trial_steps: int | None = None  # timed steps per trial burst (the objective sets it)
    # this search's --burst-timeout, which a resumed study's timeouts are weighed against
    # (open_search_study sets it; None: every timeout stands)
    burst_limit_s: float | None = None
    last_burst_threads: int | None = None  # the threads of the last burst (None: every core)
    _busy_warned: bool = False
    budget_problem: str = ""  # set when even the smallest config does not fit

    def __post_init__(self, started: float | None) -> None:
        self.deadline = Deadline(limit_s=self.limits.time_limit_s, started=started)
        self.memory = MemoryModel(
            budget_bytes=self.budget_bytes, device_kind=self.space.device_kind
        )

    # -- what is known -----------------------------------------------------------------
    @property
    def device(self) -> str:
        return self.space.device

    @property
    def unit(self) -> str:
        return self.spec.throughput_label

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
        trials = self.limits.trials
        return None if trials is None else max(0, trials - self.measured())

    # -- progress --------------------------------------------------------------------------
    def emit(self, event: SearchEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    def note(self, message: str) -> None:
        self.emit(SearchEvent(kind="note", message=message, elapsed_s=self.deadline.elapsed()))

    # -- contention -----------------------------------------------------------------------
    def busy_now(self) -> bool:
        """Whether the machine watch saw outside load in the last few seconds."""
        return self.watch is not None and self.watch.busy_now()

    def burst_threads(self) -> int | None:
        """torch threads for a CPU burst starting now: fewer than the cores while outside
        processes hold some (``MachineWatch.burst_threads``); None: torch's default."""
        if self.watch is None or self.space.device_kind != "cpu":
            return None
        return self.watch.burst_threads()

    def disturbance(self, since: float, step_times: Sequence[float]) -> str:
        """Why a measurement that started at ``since`` (``time.monotonic``) is suspect:
        outside load during it, or step times that show interference; "" when clean."""
        from autotune.study.session.watch import disturbed_steps

        if self.watch is not None:
            load = self.watch.window(since)
            if load.busy:
                return load.describe()
        if disturbed_steps(step_times):
            ordered = sorted(step_times)
            return (
                f"erratic step times (slowest {ordered[-1]:.3g} s against a median of "
                f"{statistics.median(ordered):.3g} s): something else ran"
            )
        return ""

    def warn_disturbed(self, number: int, reason: str) -> None:
        """Say once, live, that measurements are being disturbed; count the trial."""
        self.disturbed_trials.append(number)
        if not self._busy_warned:
            self._busy_warned = True
            self.note(
                f"warning: trial #{number} was disturbed ({reason}); trials measured "
                "under load are marked, never pruned for it, and measured again once the "
                "machine is quiet; the finalist race compares configs side by side"
            )

    # -- learning from trials ------------------------------------------------------------
    def absorb(self, record: TrialRecord) -> None:
        """Add a finished trial to the state (memory model, known configs)."""
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
        """A trial of this run finished: absorb it, count a run of skipped trials, and tell
        the progress display."""
        self.absorb(record)
        self.consecutive_skips = 0 if record.ran else self.consecutive_skips + 1
        self.emit(
            SearchEvent(
                kind="trial",
                trial=record,
                best=self.best(),
                elapsed_s=self.deadline.elapsed(),
                time_left_s=self.deadline.left(),
                trials_left=self.trials_left(),
                unit=self.unit,
            )
        )

    # -- when to stop ----------------------------------------------------------------------
    def stop_reason(self, *, next_fits: Callable[[], bool] | None = None) -> str:
        """Why the search should stop now, or "" to go on. ``next_fits``: whether a queued
        config is expected to finish in the time left for trials
        (``Planner.next_that_fits``), asked only when less time than a typical burst is
        left, which is then no reason to stop."""
        if self.budget_problem:
            return "budget too small"
        left = self.trials_left()
        if left is not None and left <= 0:
            return f"reached {self.limits.trials} measured trials"
        # The time limit ends a search only once it measured something (the naive config).
        time_left = self.deadline.for_trials() if self.measured() else None
        if time_left is not None and time_left <= 0:
            if self.deadline.left():
                return (
                    f"the time limit ({self.limits.time_limit_s:g} s) leaves what the "
                    f"finalist race needs ({self.deadline.reserve_s():.0f} s)"
                )
            return f"reached the time limit ({self.limits.time_limit_s:g} s)"
        if time_left is not None:
            walls = [r.wall_s for r in self.records.values() if r.ran and r.wall_s and r.feasible]
            typical = statistics.median(walls) if walls else 0.0
            if time_left < typical and not (next_fits is not None and next_fits()):
                return (
                    f"the time limit ({self.limits.time_limit_s:g} s) leaves {time_left:.0f} s, "
                    f"less than a typical burst ({typical:.0f} s)"
                )
        if len(self.by_key) >= self.space.size():
            return f"every config of the space ({self.space.size()}) has a result"
        if self.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            return (
                f"the sampler proposed only known or skipped configs for "
                f"{MAX_CONSECUTIVE_SKIPS} trials in a row (converged)"
            )
        return ""
