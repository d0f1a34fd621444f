"""The search: Optuna over the training knobs under a memory budget, one burst per trial.

``search(...)`` is the Python API and what ``autotune search`` calls. Per trial:

1. the sampler (TPE with a constraint) picks a config from the ``SearchSpace``;
2. a config already measured in this study is not run again (its outcome is replayed);
3. the ``MemoryModel`` skips a config dominated by an OOM or predicted over budget:
   recorded as infeasible, no burst;
4. otherwise one burst runs it; each timed step is reported to the trial, and the
   ``SlowConfigPruner`` stops a config whose steps are clearly slower than the best so far.

The order of the first trials: the naive config (fp32, the smallest micro-batch, no
compile, no workers; never pruned), so the speedup over naive is measured in the same
study; if it does not fit, the smallest config (to tell a too-small budget, exit code 2);
else the space's ``guess()`` (or a warm start's preset config and its neighbours). Each
time a trial becomes the best, its micro-batch neighbours (x2, /2) are queued next.

How outcomes are told to Optuna (the constraint goes through ``Trial.set_constraint`` on
Optuna 5, ``TPESampler(constraints_func=...)`` on Optuna 4; > 0 means infeasible):

* ``ok`` within budget -> COMPLETE with the objective value, constraint ``(peak - budget)
  / budget`` (<= 0: feasible);
* ``oom``, over budget, dominated, predicted over budget -> COMPLETE with value 0.0 and a
  constraint > 0, so the sampler learns where the boundary is;
* ``pruned`` -> PRUNED (its intermediate throughputs stay on the trial); ``stopped`` (the
  search's time limit cut the burst) -> PRUNED too, and the config may run again later;
* ``timeout``, ``crash``, ``nan``, ``error`` -> COMPLETE with value 0.0 and a constraint
  > 0 too, with the status and reason stored (``failed`` in the counts). Not Optuna's
  FAIL state: TPE ignores FAIL trials entirely, so it would keep proposing a config that
  crashes (measured: 80 of 90 trials went to repeats of crashing configs). A config that
  crashes, diverges or hangs is not one to ship, so "infeasible" is the honest signal;
  the memory model does not count it as an OOM. Such a config is not run again in the
  study.
* Ctrl-C: the running trial becomes FAIL with status ``interrupted`` (Optuna's optimize
  loop does that; ``run_burst`` kills the trial's process group on its way out), so a
  resumed study never holds a trial RUNNING forever, and the interrupted config, having
  no result, may be tried again. A process killed outright leaves its trial RUNNING until
  the storage's heartbeat (RDB storages) marks it FAIL.

Every trial stores ``config`` and an ``outcome`` (status, reason, peak memory, measured
figures, constraint) as user attributes, so a resumed search (same storage, same study)
rebuilds its state from the study alone. ``--trials`` counts trials that ran a burst.

Objectives (both maximized, so infeasible is always 0):

* ``throughput``: steady-state tokens/s (samples/s for models measured in samples);
* ``time-to-train``: the effective throughput of a run of ``train_steps`` optimizer steps
  with compilation charged: ``train_steps * step_tokens / (train_steps * step_median +
  compile_s)``. Maximizing it minimizes the time to train that many steps; the time
  itself is stored as ``time_to_train_s``.

A time limit stops the search before a burst that would not fit in the time left, and
caps a running burst's timeout at the time left. The winner is verified by a longer burst
with an eval step and a checkpoint save (the next best is tried if it fails) and written
as a preset.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from autotune.config import TrainConfig
from autotune.errors import AutotuneError, BudgetError, UsageError
from autotune.memory_model import MemoryModel
from autotune.space import SearchSpace, parse_knob_args, parse_seq_len
from autotune.units import format_bytes, parse_budget

if TYPE_CHECKING:
    import optuna

    from autotune.burst import BurstResult
    from autotune.hardware import DeviceCaps, HardwareProfile
    from autotune.models.spec import ModelSpec

__all__ = [
    "DEFAULT_STEPS",
    "DEFAULT_TRIALS",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_WARMUP",
    "BurstFn",
    "SearchEvent",
    "SearchResult",
    "SlowConfigPruner",
    "TrialRecord",
    "default_study_name",
    "parse_duration",
    "search",
]

# With neither --trials nor --timeout: up to 30 measured trials within 8 minutes (the
# winner's verification comes after), so a default search ends in about 10 minutes.
DEFAULT_TRIALS = 30
DEFAULT_TIME_LIMIT_S = 480.0
DEFAULT_STEPS = 4
DEFAULT_WARMUP = None  # 1 on a CPU; 3 on CUDA (compilation, CUDA-graph recording)
DEFAULT_BURST_TIMEOUT_S = 300.0
DEFAULT_RUNS_DIR = "autotune_runs"
PRUNE_MIN_STEPS = 2
PRUNE_RATIO = 1 / 3
MAX_CONSECUTIVE_SKIPS = 100  # the sampler keeps proposing known configs: it has converged
MAX_VERIFY_CANDIDATES = 3
VERIFY_AGREEMENT = 0.5  # a verification under this share of the search's figure is re-run
MIN_CAPPED_BURST_S = 1.0  # the least time a burst gets when the time limit caps it
INFEASIBLE_VALUE = 0.0

Objective = Literal["throughput", "time-to-train"]
OBJECTIVES: tuple[str, ...] = ("throughput", "time-to-train")
# A burst function has run_burst's signature (tests pass fakes).
BurstFn = Callable[..., "BurstResult"]

INFEASIBLE_STATUSES = ("oom", "over-budget", "dominated", "predicted")
FAILED_STATUSES = ("timeout", "crash", "nan", "error", "interrupted")


# ------------------------------------------------------------------------------------
# Small parsers
# ------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>s|sec|m|min|h|hr)?\s*$", re.I)
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}


def parse_duration(text: str | float | int, *, what: str = "--timeout") -> float:
    """Seconds from ``"600"``, ``"600s"``, ``"10m"``, ``"1.5h"`` (or a number)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise UsageError(
                f"cannot read {what} {text!r}: expected a duration such as 600, 600s, 10m or 1.5h"
            )
        seconds = float(match["num"]) * _DURATION_UNITS[(match["unit"] or "").lower()]
    if not seconds > 0 or not math.isfinite(seconds):
        raise UsageError(f"{what} must be a positive duration, got {text!r}")
    return seconds


def _slug(text: str) -> str:
    text = text.rsplit("/", 1)[-1].replace(".py:", "-").replace(":", "-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"


def default_study_name(
    *,
    model: str,
    device: str,
    budget_bytes: int,
    space: SearchSpace,
    objective: str = "throughput",
    train_steps: int | None = None,
) -> str:
    """``mu-cpu-8000MB-gb32-seq128-1a2b3c4d``: model, device, budget, global batch, sequence
    length(s) and a hash of the search space (knob restrictions change it)."""
    seqs = space.seq_len
    seq = str(seqs[0]) if len(seqs) == 1 else f"{seqs[0]}-{seqs[-1]}"
    name = (
        f"{_slug(model)}-{device.replace(':', '')}-{round(budget_bytes / 1e6)}MB"
        f"-gb{space.global_batch}-seq{seq}"
    )
    if objective == "time-to-train":
        name += f"-ttt{train_steps}"
    return f"{name}-{space.fingerprint()}"


def _redact(url: str) -> str:
    """A storage URL without its password (``postgresql://user:***@host/db``)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


# ------------------------------------------------------------------------------------
# Records: what a trial was, rebuilt from the study's stored attributes
# ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial of the study, as the search stored it."""

    number: int
    state: str  # Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    status: str  # ok | oom | over-budget | dominated | predicted | pruned | timeout | ...
    config: Mapping[str, Any] = field(default_factory=dict)
    value: float | None = None
    throughput: float | None = None  # tokens/s, or samples/s for samples-unit models
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    compile_s: float | None = None
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    time_to_train_s: float | None = None
    reason: str = ""
    role: str = ""  # naive | smallest | warm-start | ""
    ran: bool = False  # whether a burst ran for this trial
    duplicate_of: int | None = None
    wall_s: float | None = None

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.status == "ok"

    @property
    def infeasible(self) -> bool:
        return self.status in INFEASIBLE_STATUSES

    @property
    def failed(self) -> bool:
        """The burst failed (timeout, crash, nan, error) or was interrupted."""
        return self.state == "FAIL" or self.status in FAILED_STATUSES

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETE", "PRUNED", "FAIL")

    def train_config(self) -> TrainConfig:
        return TrainConfig.from_mapping(self.config)

    def summary(self) -> str:
        """``mb 8x4 seq 128 bf16 ckpt compile=default workers=2 block_group=4``."""
        return summarize_config(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "state": self.state,
            "status": self.status,
            "config": dict(self.config),
            "value": self.value,
            "throughput": self.throughput,
            "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s,
            "step_time_median_s": self.step_time_median_s,
            "step_time_p90_s": self.step_time_p90_s,
            "compile_s": self.compile_s,
            "mfu": self.mfu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "time_to_train_s": self.time_to_train_s,
            "reason": self.reason,
            "role": self.role,
            "ran": self.ran,
            "duplicate_of": self.duplicate_of,
            "wall_s": self.wall_s,
        }

    @classmethod
    def from_trial(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord:
        attrs = {**trial.user_attrs, **(trial.user_attrs.get("outcome") or {})}
        state = trial.state.name
        status = attrs.get("status")
        if status is None:
            status = {"RUNNING": "running", "WAITING": "waiting", "PRUNED": "pruned"}.get(
                state, "error" if state == "FAIL" else "unknown"
            )
        value = trial.value if state == "COMPLETE" else None
        return cls(
            number=trial.number,
            state=state,
            status=str(status),
            config=dict(attrs.get("config") or {}),
            value=value,
            throughput=attrs.get("throughput"),
            tokens_per_s=attrs.get("tokens_per_s"),
            samples_per_s=attrs.get("samples_per_s"),
            step_time_median_s=attrs.get("step_time_median_s"),
            step_time_p90_s=attrs.get("step_time_p90_s"),
            compile_s=attrs.get("compile_s"),
            mfu=attrs.get("mfu"),
            peak_memory_bytes=attrs.get("peak_memory_bytes"),
            time_to_train_s=attrs.get("time_to_train_s"),
            reason=str(attrs.get("reason") or ""),
            role=str(attrs.get("role") or ""),
            ran=bool(attrs.get("ran", False)),
            duplicate_of=attrs.get("duplicate_of"),
            wall_s=attrs.get("wall_s"),
        )


def summarize_config(config: Mapping[str, Any]) -> str:
    """A one-line summary of a config mapping for tables."""
    if not config:
        return "-"
    parts = [f"mb {config.get('micro_batch')}x{config.get('grad_accum')}"]
    parts.append(f"seq {config.get('seq_len')}")
    parts.append(str(config.get("precision")))
    if config.get("activation_checkpointing"):
        parts.append("ckpt")
    if config.get("compile", "off") != "off":
        parts.append(f"compile={config.get('compile')}")
    workers = config.get("num_workers") or 0
    if workers:
        extra = "+pin" if config.get("pin_memory") else ""
        prefetch = config.get("prefetch_factor")
        extra += f" pf{prefetch}" if prefetch else ""
        parts.append(f"workers={workers}{extra}")
    for name, value in (config.get("knobs") or {}).items():
        parts.append(f"{name}={value}")
    return " ".join(parts)


@dataclass(frozen=True, kw_only=True)
class SearchEvent:
    """Progress of a search, for a live display (``progress=`` callback)."""

    kind: Literal["start", "trial", "verify", "note"]
    message: str = ""
    trial: TrialRecord | None = None
    best: TrialRecord | None = None
    elapsed_s: float = 0.0
    time_left_s: float | None = None
    trials_left: int | None = None
    verify: BurstResult | None = None
    unit: str = "tokens/s"


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
    verified: BurstResult | None
    naive: TrialRecord | None
    speedup: float | None  # verified throughput / naive throughput (same study)
    top: tuple[TrialRecord, ...]
    trials: tuple[TrialRecord, ...]
    skipped: Mapping[str, int]  # why configs were not run or not kept: reason -> count
    preset_path: str | None
    wall_s: float
    stopped: str  # why the search stopped
    verify_attempts: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def best_config(self) -> TrainConfig | None:
        return None if self.best is None else self.best.train_config()

    def counts(self) -> dict[str, int]:
        """trials (all finished), measured (a burst ran), infeasible, pruned, failed."""
        done = [t for t in self.trials if t.finished]
        return {
            "trials": len(done),
            "measured": sum(1 for t in done if t.ran),
            "infeasible": sum(1 for t in done if t.infeasible),
            "pruned": sum(1 for t in done if t.state == "PRUNED"),
            "failed": sum(1 for t in done if t.failed),
            "duplicates": sum(1 for t in done if t.duplicate_of is not None),
        }

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
            "counts": self.counts(),
            "skipped": dict(self.skipped),
            "top": [t.to_dict() for t in self.top],
            "trials": [t.to_dict() for t in self.trials],
            "preset_path": self.preset_path,
            "wall_s": self.wall_s,
            "stopped": self.stopped,
            "verify_attempts": [dict(a) for a in self.verify_attempts],
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------
# Optuna pieces
# ------------------------------------------------------------------------------------


@functools.cache
def _has_set_constraint() -> bool:
    import optuna

    return hasattr(optuna.trial.Trial, "set_constraint")


def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    """TPE's constraint: > 0 means infeasible (ran out of memory or budget)."""
    outcome = trial.user_attrs.get("outcome") or {}
    return (float(outcome.get("constraint", 0.0)),)


def _make_pruner(
    best_fn: Callable[[], float | None], min_steps: int, ratio: float
) -> optuna.pruners.BasePruner:
    import optuna

    class SlowConfigPrunerImpl(optuna.pruners.BasePruner):
        def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
            return _should_prune(trial.intermediate_values, best_fn(), min_steps, ratio)

    return SlowConfigPrunerImpl()


def _should_prune(
    steps: Mapping[int, float], best: float | None, min_steps: int, ratio: float
) -> bool:
    if best is None or best <= 0 or not steps:
        return False
    fastest = max(steps.values())  # its fastest step so far
    if fastest < ratio * ratio * best:  # hopeless (under 1/9 of the best): one step says so
        return True
    return len(steps) >= min_steps and fastest < ratio * best


class SlowConfigPruner:
    """Stops a trial once ``min_steps`` timed steps are in and even its fastest step's
    throughput is below ``ratio`` x the best completed trial's, or after a single step
    below ``ratio**2`` x (1/9 by default): a config 30x slower than the best so far costs
    its warm-up and one timed step, not a whole burst.

    ``make()`` returns the Optuna pruner; ``best_fn`` gives the best throughput so far.
    """

    def __init__(self, *, min_steps: int = PRUNE_MIN_STEPS, ratio: float = PRUNE_RATIO):
        if min_steps < 1 or not 0 < ratio < 1:
            raise ValueError(f"need min_steps >= 1 and 0 < ratio < 1, got {min_steps=}, {ratio=}")
        self.min_steps = min_steps
        self.ratio = ratio

    def should_prune(self, steps: Mapping[int, float], best: float | None) -> bool:
        return _should_prune(steps, best, self.min_steps, self.ratio)

    def make(self, best_fn: Callable[[], float | None]) -> optuna.pruners.BasePruner:
        return _make_pruner(best_fn, self.min_steps, self.ratio)


def _open_storage(url: str) -> Any:
    """An Optuna storage for ``url``: ``journal:PATH`` is a journal file; anything else is
    an RDB URL (SQLite, PostgreSQL, MySQL), opened with heartbeats so that a trial whose
    process was killed is marked FAIL by the next run."""
    import optuna

    try:
        if url.startswith("journal:"):
            from optuna.storages.journal import JournalFileBackend

            path = url.removeprefix("journal:").removeprefix("//")
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(Path(path).expanduser())))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = optuna.storages.RDBStorage(url, heartbeat_interval=30, grace_period=120)
        if url.startswith("sqlite:"):
            _sqlite_wal(storage.engine)
        return storage
    except Exception as exc:
        raise UsageError(
            f"cannot open the study storage {_redact(url)!r}: {type(exc).__name__}: {exc}. "
            "Give an Optuna storage URL (sqlite:///path/study.db, postgresql://..., "
            "mysql://...) or journal:PATH for a journal file"
        ) from exc


def _sqlite_wal(engine: Any) -> None:
    """Write-ahead logging with ``synchronous=NORMAL``: a commit no longer waits for an
    fsync (which made each trial's dozen commits cost ~0.2 s on a busy disk), and the
    file stays consistent if the process is killed (SQLite's WAL guarantee)."""
    from sqlalchemy import event

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections made before the listener reconnect with it


# ------------------------------------------------------------------------------------
# The search
# ------------------------------------------------------------------------------------


@dataclass
class _Run:
    """The state of one search process over its study."""

    spec: ModelSpec
    space: SearchSpace
    device: str
    budget_bytes: int
    burst_fn: BurstFn
    steps: int
    warmup: int
    burst_timeout_s: float
    seed: int
    objective: str
    train_steps: int | None
    trials: int | None
    time_limit_s: float | None
    progress: Callable[[SearchEvent], None] | None
    pruner: SlowConfigPruner
    started: float = field(default_factory=time.monotonic)
    records: dict[int, TrialRecord] = field(default_factory=dict)
    by_key: dict[tuple[Any, ...], int] = field(default_factory=dict)
    memory: MemoryModel = field(init=False)
    consecutive_skips: int = 0
    stopped: str = ""
    budget_problem: str = ""
    smallest_enqueued: bool = False
    use_guess: bool = False
    cut_by_time: bool = False  # the running burst was stopped by the time limit
    guess_enqueued: bool = False

    def __post_init__(self) -> None:
        self.memory = MemoryModel(
            budget_bytes=self.budget_bytes, device_kind=self.space.device_kind
        )

    # -- bookkeeping ----------------------------------------------------------------------
    @property
    def unit(self) -> str:
        return "tokens/s" if self.spec.throughput_unit == "tokens" else "samples/s"

    def measured(self) -> int:
        return sum(1 for r in self.records.values() if r.ran and r.status != "interrupted")

    def best(self) -> TrialRecord | None:
        feasible = [r for r in self.records.values() if r.feasible and r.value is not None]
        return max(feasible, key=lambda r: (r.value or 0.0, -r.number), default=None)

    def best_throughput(self) -> float | None:
        values = [
            r.throughput for r in self.records.values() if r.feasible and r.throughput is not None
        ]
        return max(values, default=None)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def time_left(self) -> float | None:
        return None if self.time_limit_s is None else max(0.0, self.time_limit_s - self.elapsed())

    def trials_left(self) -> int | None:
        return None if self.trials is None else max(0, self.trials - self.measured())

    def emit(self, event: SearchEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    def note(self, message: str) -> None:
        self.emit(SearchEvent(kind="note", message=message, elapsed_s=self.elapsed()))

    def absorb(self, record: TrialRecord) -> None:
        """Add a finished trial to the state (memory model, known configs)."""
        self.records[record.number] = record
        if not record.finished or not record.config:
            return
        try:
            config = record.train_config()
        except Exception:  # a trial from an older, different space: ignore it
            return
        # A FAIL trial was interrupted or its process killed: it has no result, so its
        # config may run again.
        # A config stopped by the time limit has no result either.
        retry = record.state == "FAIL" or record.status == "stopped"
        if not retry and self.space.contains(config):
            self.by_key.setdefault(self.space.key(config), record.number)
        if record.ran and record.duplicate_of is None:
            if record.status in ("oom", "over-budget"):
                self.memory.add(
                    record.number, config, peak_bytes=record.peak_memory_bytes, infeasible=True
                )
            elif record.status == "ok":
                self.memory.add(
                    record.number, config, peak_bytes=record.peak_memory_bytes, infeasible=False
                )

    def stop_reason(self) -> str:
        if self.budget_problem:
            return "budget too small"
        left = self.trials_left()
        if left is not None and left <= 0:
            return f"reached {self.trials} measured trials"
        # The time limit ends a search only once it measured something (the naive config).
        time_left = self.time_left() if self.measured() else None
        if time_left is not None and time_left <= 0:
            return f"reached the time limit ({self.time_limit_s:.0f} s)"
        if time_left is not None:
            walls = [r.wall_s for r in self.records.values() if r.ran and r.wall_s and r.feasible]
            typical = statistics.median(walls) if walls else 0.0
            if time_left < typical:
                return (
                    f"the time limit ({self.time_limit_s:.0f} s) leaves {time_left:.0f} s, "
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

    # -- the objective --------------------------------------------------------------------
    def objective_fn(self, trial: optuna.Trial) -> float:
        config = self.space.suggest(trial)
        trial.set_user_attr("config", config.to_dict())
        key = self.space.key(config)
        previous = self.by_key.get(key)
        if previous is not None and previous in self.records:
            return self._replay(trial, self.records[previous])
        verdict = self.memory.verdict(config)
        if verdict is not None:
            _set_attrs(
                trial,
                status=verdict.kind,
                reason=verdict.reason,
                constraint=1.0,
                ran=False,
                predicted_bytes=verdict.predicted_bytes,
                dominated_by=verdict.trial,
            )
            return INFEASIBLE_VALUE
        exempt = trial.user_attrs.get("role") == "naive"  # the baseline is always measured
        tokens_per_step = self.space.global_batch * self.spec.tokens_per_sample(config.seq_len)

        seen: list[float] = []  # each timed step's throughput, as reported

        def on_step(index: int, step_time_s: float) -> bool:
            if exempt:
                return True
            if self.time_left() == 0.0:  # the time limit passed during this burst
                self.cut_by_time = True
                return False
            if step_time_s > 0:
                seen.append(tokens_per_step / step_time_s)
                trial.report(seen[-1], int(index))
            return not trial.should_prune()

        t0 = time.monotonic()
        self.cut_by_time = False
        # A burst may not outlive the search's time limit by much: past it, its timeout is
        # the time left (a compile in the warm-up can take minutes), and running out of it
        # is "stopped", not a failure of the config.
        timeout_s = self.burst_timeout_s
        time_left = self.time_left()
        capped = not exempt and time_left is not None and time_left < timeout_s
        if capped and time_left is not None:
            timeout_s = max(time_left, MIN_CAPPED_BURST_S)
        try:
            result = self.burst_fn(
                self.spec,
                config,
                steps=self.steps,
                warmup=self.warmup,
                budget_bytes=self.budget_bytes,
                timeout_s=timeout_s,
                device=self.device,
                seed=self.seed,
                on_step=on_step,
            )
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):
                _set_attrs(
                    trial,
                    status="interrupted",
                    reason="interrupted (Ctrl-C) while its burst ran",
                    ran=True,
                    wall_s=time.monotonic() - t0,
                )
            raise
        except Exception as exc:  # a burst function must not raise; treat it as an error
            from autotune.burst import BurstResult

            result = BurstResult(
                status="error", reason=f"the burst raised {type(exc).__name__}: {exc}"
            )
        if capped and result.status == "timeout":
            self.cut_by_time = True
            result = replace(result, status="pruned")
        return self._classify(trial, config, result, wall_s=time.monotonic() - t0, seen=seen)

    def _classify(
        self,
        trial: optuna.Trial,
        config: TrainConfig,
        result: BurstResult,
        *,
        wall_s: float,
        seen: Sequence[float] = (),
    ) -> float:
        import optuna

        tokens = result.tokens_per_s
        samples = result.samples_per_s
        throughput = tokens if self.spec.throughput_unit == "tokens" else samples
        peak = result.peak_memory_bytes
        common: dict[str, Any] = {
            "ran": True,
            "wall_s": result.wall_s if result.wall_s is not None else wall_s,
            "peak_memory_bytes": peak,
            "tokens_per_s": tokens,
            "samples_per_s": samples,
            "throughput": throughput,
            "step_time_median_s": result.step_time_median_s,
            "step_time_p90_s": result.step_time_p90_s,
            "compile_s": result.compile_s,
            "mfu": result.mfu,
            "timed_steps": result.timed_steps,
        }
        budget = self.budget_bytes
        status = result.status
        if status == "ok" and peak is not None and peak > budget:
            _set_attrs(
                trial,
                **common,
                status="over-budget",
                reason=f"peak {format_bytes(peak)} over the budget {format_bytes(budget)}",
                constraint=1.0 + (peak - budget) / budget,
            )
            return INFEASIBLE_VALUE
        if status == "ok" and (throughput is None or throughput <= 0):
            status, result = "error", replace(result, reason="the burst reported no throughput")
        if status == "ok" and throughput is not None:
            value, extra = self._value(config, result, throughput)
            _set_attrs(
                trial,
                **common,
                **extra,
                status="ok",
                reason=result.reason,
                constraint=(peak - budget) / budget if peak is not None else 0.0,
            )
            return value
        if status == "oom":
            over = max(0.0, (peak - budget) / budget) if peak is not None else 0.0
            reached = f" (peak {format_bytes(peak)})" if peak is not None else ""
            _set_attrs(
                trial,
                **common,
                status="oom",
                reason=result.reason or f"out of memory{reached}",
                constraint=1.0 + over,
            )
            return INFEASIBLE_VALUE
        if status == "pruned" and self.cut_by_time:
            reason = "stopped: the search's time limit passed during its burst"
            _set_attrs(trial, **common, status="stopped", reason=reason, constraint=0.0)
            raise optuna.TrialPruned(reason)
        if status == "pruned":
            best = self.best_throughput()
            if seen and best:
                reason = (
                    f"pruned after {len(seen)} timed steps: at most {max(seen):,.4g} "
                    f"{self.unit}, under {PRUNE_RATIO:.2g}x the best so far ({best:,.4g})"
                )
            else:
                reason = result.reason or "pruned"
            _set_attrs(trial, **common, status="pruned", reason=reason, constraint=0.0)
            raise optuna.TrialPruned(reason)
        _set_attrs(trial, **common, status=status, reason=result.reason or status, constraint=1.0)
        return INFEASIBLE_VALUE

    def _value(
        self, config: TrainConfig, result: BurstResult, throughput: float
    ) -> tuple[float, dict[str, Any]]:
        """The objective value of a successful burst, and figures to store with it."""
        if self.objective != "time-to-train" or not self.train_steps:
            return float(throughput), {}
        per_step = self.space.global_batch * self.spec.tokens_per_sample(config.seq_len)
        median = result.step_time_median_s or per_step / throughput
        ttt = self.train_steps * median + (result.compile_s or 0.0)
        # effective throughput over the whole run: maximizing it minimizes the time
        return per_step * self.train_steps / ttt, {"time_to_train_s": ttt}

    def _replay(self, trial: optuna.Trial, previous: TrialRecord) -> float:
        """Tell a repeat of a known config the outcome it already had (no burst)."""
        import optuna

        _set_attrs(
            trial,
            status=previous.status,
            reason=f"same config as trial #{previous.number}"
            + (f": {previous.reason}" if previous.reason else ""),
            ran=False,
            duplicate_of=previous.number,
            peak_memory_bytes=previous.peak_memory_bytes,
            tokens_per_s=previous.tokens_per_s,
            samples_per_s=previous.samples_per_s,
            throughput=previous.throughput,
            time_to_train_s=previous.time_to_train_s,
            constraint=_record_constraint(previous, self.budget_bytes),
        )
        if previous.state == "PRUNED":
            raise optuna.TrialPruned(f"same config as pruned trial #{previous.number}")
        return float(previous.value if previous.value is not None else INFEASIBLE_VALUE)

    # -- after each trial -----------------------------------------------------------------
    def after_trial(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        record = TrialRecord.from_trial(frozen)
        self.absorb(record)
        self.consecutive_skips = 0 if record.ran else self.consecutive_skips + 1
        self.emit(
            SearchEvent(
                kind="trial",
                trial=record,
                best=self.best(),
                elapsed_s=self.elapsed(),
                time_left_s=self.time_left(),
                trials_left=self.trials_left(),
                unit=self.unit,
            )
        )
        self.check_budget(study)
        self.enqueue_guess(study)
        self.refine(study, record)
        reason = self.stop_reason()
        if reason:
            self.stopped = reason
            study.stop()

    def refine(self, study: optuna.Study, record: TrialRecord) -> None:
        """When a measured trial becomes the best, queue its neighbours that have no
        result yet, one knob moved at a time: the micro-batch (x2, /2) first, as it
        matters most, then compile turned on and each model knob moved (a kernel choice
        such as MU's attention can double the speed, but only together with the right
        precision). TPE, sampling around its model, can take many trials to land on the
        one step next to the best, and a short search has few to spare. OOM neighbours
        cost nothing (the memory model skips them)."""
        best = self.best()
        if not record.ran or record.role == "naive" or best is None or best.number != record.number:
            return
        for cand in self.space.neighbours(record.train_config(), workers=False, kernels=True):
            if self._record_of(cand) is None and not self._waiting(cand, study):
                study.enqueue_trial(self.space.params_of(cand), user_attrs={"role": "refine"})

    def enqueue_guess(self, study: optuna.Study) -> None:
        """Queue the space's guess once the naive config has run within the budget (when
        it did not, the smallest config goes next instead: see ``check_budget``)."""
        if not self.use_guess or self.guess_enqueued:
            return
        naive = self._record_of(self.space.naive())
        if naive is None or not naive.feasible:
            return
        guess = self.space.guess()
        if self._record_of(guess) is None and not self._waiting(guess, study):
            study.enqueue_trial(self.space.params_of(guess), user_attrs={"role": "guess"})
        self.guess_enqueued = True

    def check_budget(self, study: optuna.Study) -> None:
        """After the naive config (and, if it did not fit, the smallest) ran: stop when
        even the smallest config does not fit the budget."""
        if any(r.feasible for r in self.records.values()):
            return
        naive = self.space.naive()
        smallest = self.space.smallest()
        naive_rec = self._record_of(naive)
        if naive_rec is None or not naive_rec.infeasible:
            return
        same = self.space.key(naive) == self.space.key(smallest)
        small_rec = naive_rec if same else self._record_of(smallest)
        if small_rec is None:
            if not self.smallest_enqueued and not self._waiting(smallest, study):
                study.enqueue_trial(self.space.params_of(smallest), user_attrs={"role": "smallest"})
                self.smallest_enqueued = True
            return
        if not small_rec.infeasible:
            return
        needed = self._needed(small_rec)
        self.budget_problem = (
            f"the budget {format_bytes(self.budget_bytes)} is too small for model "
            f"{self.spec.name!r} on {self.device}: even the smallest config "
            f"({summarize_config(small_rec.config)}) {needed}"
            + (
                ""
                if same
                else f", and the naive config ({naive_rec.summary()}) {self._needed(naive_rec)}"
            )
            + ". Give a larger --budget, or a shorter --seq-len"
        )

    def _needed(self, record: TrialRecord) -> str:
        source = record
        if record.status == "dominated" and record.duplicate_of is None:
            dominated_by = self._dominating(record)
            if dominated_by is not None:
                source = dominated_by
        peak = source.peak_memory_bytes
        if source.status == "over-budget" and peak is not None:
            return f"needed {format_bytes(peak)}"
        if peak is not None:
            return f"ran out of memory at {format_bytes(peak)} (it needs more than that)"
        return f"ran out of memory ({source.reason or source.status})"

    def _dominating(self, record: TrialRecord) -> TrialRecord | None:
        match = re.search(r"#(\d+)", record.reason)
        return self.records.get(int(match[1])) if match else None

    def _record_of(self, config: TrainConfig) -> TrialRecord | None:
        number = self.by_key.get(self.space.key(config))
        return None if number is None else self.records.get(number)

    def _waiting(self, config: TrainConfig, study: optuna.Study) -> bool:
        from optuna.trial import TrialState

        params = self.space.params_of(config)
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            if t.system_attrs.get("fixed_params") == params:
                return True
        return False


def _set_attrs(trial: optuna.Trial, **attrs: Any) -> None:
    """Store a trial's outcome as one user attribute ``outcome`` (one storage write: SQLite
    commits are the search's main overhead) and its ``constraint`` for the sampler
    (Optuna 5's ``Trial.set_constraint``; under Optuna 4 ``_constraints`` reads it)."""
    outcome = {name: value for name, value in attrs.items() if value is not None}
    trial.set_user_attr("outcome", outcome)
    if "constraint" in outcome and _has_set_constraint():
        trial.set_constraint("memory", float(outcome["constraint"]))


def _record_constraint(record: TrialRecord, budget: int) -> float:
    if record.status in FAILED_STATUSES:
        return 1.0
    if record.infeasible:
        peak = record.peak_memory_bytes
        return 1.0 + (max(0.0, (peak - budget) / budget) if peak is not None else 0.0)
    if record.status == "ok" and record.peak_memory_bytes is not None:
        return (record.peak_memory_bytes - budget) / budget
    return 0.0


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's own per-trial log lines would interleave with our progress display."""
    import optuna

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.filterwarnings("ignore", message=".*reported.*step.*")
            yield
    finally:
        optuna.logging.set_verbosity(previous)


def _resolve_model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, str):
        from autotune.models.registry import load_model

        return load_model(model)
    return model


def _model_ref(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """The preset's model reference: the loader's name and the args that differ from it."""
    name = spec.source or spec.name
    args = dict(spec.args)
    if spec.source:
        with contextlib.suppress(Exception):
            reference = _resolve_model(spec.source)
            args = {k: v for k, v in spec.args.items() if reference.args.get(k, object()) != v}
    return name, args


def _check_study_setup(study: optuna.Study, setup: Mapping[str, Any], name: str) -> None:
    stored = study.user_attrs.get("autotune")
    if stored is None:
        if study.trials:
            raise UsageError(
                f"study {name!r} already exists in this storage and was not made by "
                "autotune search; give another --study name"
            )
        study.set_user_attr("autotune", dict(setup))
        return
    diffs = [key for key in setup if stored.get(key) != setup[key]]
    if diffs:
        shown = "; ".join(f"{k}: study has {stored.get(k)!r}, now {setup[k]!r}" for k in diffs)
        raise UsageError(
            f"study {name!r} was created for a different search ({shown}); rerun with the "
            "same settings to resume it, or give a new --study name"
        )


def search(
    model: str | ModelSpec,
    *,
    budget: str | int,
    device: str | None = None,
    global_batch: int | None = None,
    seq_len: str | int | Sequence[int] | None = None,
    trials: int | None = None,
    timeout: str | float | None = None,
    steps: int = DEFAULT_STEPS,
    warmup: int | None = DEFAULT_WARMUP,
    storage: str | None = None,
    study: str | None = None,
    output: str | Path | None = "best.yaml",
    seed: int = 0,
    knobs: Mapping[str, Sequence[Any]] | Sequence[str] | None = None,
    objective: str = "throughput",
    train_steps: int | None = None,
    warm_start: str | Path | None = None,
    burst_timeout: str | float = DEFAULT_BURST_TIMEOUT_S,
    verify_steps: int | None = None,
    n_startup_trials: int | None = None,
    hardware: HardwareProfile | None = None,
    burst_fn: BurstFn | None = None,
    progress: Callable[[SearchEvent], None] | None = None,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
) -> SearchResult:
    """Search the fastest config of ``model`` on ``device`` within a memory ``budget``.

    ``budget``: bytes, or text such as ``"8GB"``, ``"8GiB"``, ``"8000MB"`` or a fraction of
    the device's memory (``"0.5"``). ``seq_len``: one length, or a range ``"64-256"``
    (the powers of two within it are searched). ``trials`` counts measured trials (those
    that ran a burst) in the study, earlier runs included; with neither ``trials`` nor
    ``timeout``, ``DEFAULT_TRIALS``. ``knobs`` restricts the space (``{"precision":
    ["bf16"]}`` or ``["precision=bf16", "compile=off"]``). ``storage``: any Optuna storage
    URL (default ``sqlite:///<runs_dir>/<study>/study.db``); rerunning resumes the study.
    ``output``: where the preset goes (None: not written). ``burst_fn``: the burst
    function (default ``autotune.burst.run_burst``). ``progress`` receives a
    ``SearchEvent`` per trial.

    Raises ``BudgetError`` (exit code 2) when even the smallest config does not fit,
    ``UsageError`` for bad arguments, ``AutotuneError`` when nothing could be measured or
    verified. A KeyboardInterrupt leaves the study consistent and propagates.
    """
    import optuna

    t_start = time.monotonic()
    # -- arguments --------------------------------------------------------------------
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "time-to-train" and train_steps is None:
        raise UsageError("--objective time-to-train needs --train-steps N (the run's length)")
    if train_steps is not None and (not isinstance(train_steps, int) or train_steps < 1):
        raise UsageError(f"--train-steps must be a positive integer, got {train_steps!r}")
    if trials is not None and (not isinstance(trials, int) or trials < 1):
        raise UsageError(f"--trials must be a positive integer, got {trials!r}")
    if not isinstance(steps, int) or steps < PRUNE_MIN_STEPS:
        raise UsageError(f"--steps must be an integer >= {PRUNE_MIN_STEPS}, got {steps!r}")
    if warmup is not None and (not isinstance(warmup, int) or warmup < 0):
        raise UsageError(f"--warmup must be an integer >= 0, got {warmup!r}")
    time_limit = None if timeout is None else parse_duration(timeout)
    if trials is None and time_limit is None:
        trials, time_limit = DEFAULT_TRIALS, DEFAULT_TIME_LIMIT_S
    burst_timeout_s = parse_duration(burst_timeout, what="--burst-timeout")
    if output is not None and Path(output).expanduser().is_dir():
        raise UsageError(f"--output {str(output)!r} is a directory; give a file such as best.yaml")
    restrict: dict[str, Sequence[Any]] = {}
    if isinstance(knobs, Mapping):
        restrict = dict(knobs)
    elif knobs is not None:
        restrict = dict(parse_knob_args(list(knobs)))

    spec = _resolve_model(model)
    if hardware is None:
        from autotune.hardware import probe

        hardware = probe()
    caps: DeviceCaps = hardware.device(device)
    budget_bytes = (
        budget
        if isinstance(budget, int) and not isinstance(budget, bool)
        else parse_budget(str(budget), device_memory_bytes=caps.total_memory_bytes)
    )
    if budget_bytes <= 0:
        raise BudgetError(f"budget must be positive, got {budget!r}")
    seqs = None if seq_len is None else parse_seq_len(seq_len, max_seq_len=spec.max_seq_len)
    space = SearchSpace.for_model(
        spec,
        caps,
        global_batch=global_batch,
        seq_len=seqs,
        cpu_count=hardware.cpu.logical_cores,
        restrict=restrict,
    )
    notes: list[str] = []
    if budget_bytes > caps.total_memory_bytes:
        notes.append(
            f"warning: the budget {format_bytes(budget_bytes)} is above the memory of "
            f"{caps.device} ({format_bytes(caps.total_memory_bytes)}); the device's memory "
            "is the real limit"
        )
    study_name = study or default_study_name(
        model=spec.source or spec.name,
        device=caps.device,
        budget_bytes=budget_bytes,
        space=space,
        objective=objective,
        train_steps=train_steps,
    )
    if storage is None:
        db = Path(runs_dir) / _slug(study_name) / "study.db"
        db.parent.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{db}"
    if burst_fn is None:
        from autotune.burst import run_burst

        burst_fn = run_burst
    if warmup is None:
        warmup = 3 if caps.kind == "cuda" else 1
    if verify_steps is None:
        verify_steps = max(2 * steps, 10)

    run = _Run(
        spec=spec,
        space=space,
        device=caps.device,
        budget_bytes=budget_bytes,
        burst_fn=burst_fn,
        steps=steps,
        warmup=warmup,
        burst_timeout_s=burst_timeout_s,
        seed=seed,
        objective=objective,
        train_steps=train_steps,
        trials=trials,
        time_limit_s=time_limit,
        progress=progress,
        pruner=SlowConfigPruner(),
    )
    for message in notes:
        run.note(message)

    # -- the study ----------------------------------------------------------------------
    with _quiet_optuna():
        storage_obj = _open_storage(storage)
        existing = _existing_trial_count(storage_obj, study_name)
        if n_startup_trials is None:
            # Random trials before TPE models the results (the naive config and the guess
            # count): fewer for a short search or a small space.
            n_startup_trials = max(3, min(10, space.size() // 6))
            if trials is not None:
                n_startup_trials = min(n_startup_trials, max(3, trials // 3))
        sampler_kwargs: dict[str, Any] = {}
        if not _has_set_constraint():  # Optuna 4: constraints come through constraints_func
            sampler_kwargs["constraints_func"] = _constraints
        sampler = optuna.samplers.TPESampler(
            seed=seed + existing,  # a resumed study does not replay the same random draws
            n_startup_trials=n_startup_trials,
            multivariate=True,
            group=True,
            **sampler_kwargs,
        )
        try:
            opt_study = optuna.create_study(
                storage=storage_obj,
                study_name=study_name,
                sampler=sampler,
                pruner=run.pruner.make(run.best_throughput),
                direction="maximize",
                load_if_exists=True,
            )
        except Exception as exc:
            raise UsageError(
                f"cannot create or load study {study_name!r} in {_redact(storage)!r}: {exc}"
            ) from exc
        setup = {
            "model": spec.source or spec.name,
            "model_args": {k: repr(v) for k, v in spec.args.items()},
            "device": caps.device,
            "budget_bytes": budget_bytes,
            "global_batch": space.global_batch,
            "objective": objective,
            "train_steps": train_steps,
            "space": space.describe(),
        }
        _check_study_setup(opt_study, setup, study_name)
        for frozen in opt_study.get_trials(deepcopy=False):
            run.absorb(TrialRecord.from_trial(frozen))
        resumed = sum(1 for r in run.records.values() if r.finished)
        run.emit(
            SearchEvent(
                kind="start",
                message=(
                    f"study {study_name!r} in {_redact(storage)}; space of {space.size()} "
                    f"configs; budget {format_bytes(budget_bytes)} on {caps.device}"
                    + (f"; resuming with {resumed} finished trials" if resumed else "")
                ),
                best=run.best(),
                unit=run.unit,
                trials_left=run.trials_left(),
                time_left_s=run.time_left(),
            )
        )
        _enqueue_starts(run, opt_study, warm_start)
        run.check_budget(opt_study)
        run.stopped = run.stop_reason()
        if not run.stopped:
            try:
                opt_study.optimize(
                    run.objective_fn,
                    callbacks=[run.after_trial],
                    gc_after_trial=False,
                )
            except KeyboardInterrupt:
                run.note(
                    f"interrupted: {run.measured()} measured trials are saved in study "
                    f"{study_name!r} ({_redact(storage)}); rerun the same command to resume"
                )
                raise
        if not run.stopped:
            run.stopped = "stopped"
        if run.budget_problem:
            raise BudgetError(run.budget_problem)

        # -- verify the winner and write the preset --------------------------------------
        # Queued trials that never started (WAITING) stay in the study for the next run.
        records = sorted(
            (r for r in run.records.values() if r.state != "WAITING"), key=lambda r: r.number
        )
        naive_rec = run._record_of(space.naive())
        winner, verified, attempts = _verify(run, opt_study, verify_steps)
        speedup = None
        if (
            verified is not None
            and naive_rec is not None
            and naive_rec.feasible
            and naive_rec.throughput
        ):
            measured_tp = (
                verified.tokens_per_s
                if spec.throughput_unit == "tokens"
                else verified.samples_per_s
            )
            if measured_tp:
                speedup = measured_tp / naive_rec.throughput
        wall_s = time.monotonic() - t_start
        top = _top(records, 5)
        skipped = _skipped(records)
        result = SearchResult(
            model=spec.source or spec.name,
            device=caps.device,
            budget_bytes=budget_bytes,
            global_batch=space.global_batch,
            seq_len=space.seq_len,
            objective=objective,
            train_steps=train_steps,
            unit=run.unit,
            study_name=study_name,
            storage=_redact(storage),
            space_size=space.size(),
            best=winner,
            verified=verified,
            naive=naive_rec,
            speedup=speedup,
            top=top,
            trials=tuple(records),
            skipped=skipped,
            preset_path=None,
            wall_s=wall_s,
            stopped=run.stopped,
            verify_attempts=tuple(attempts),
            notes=tuple(notes),
        )
        if output is not None and winner is not None and verified is not None:
            path = _write_preset(result, winner, verified, spec, hardware, Path(output), naive_rec)
            result = replace(result, preset_path=str(path))
        return result


def _existing_trial_count(storage: Any, study_name: str) -> int:
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:
        return 0
    return len(storage.get_all_trials(study_id, deepcopy=False))


def _enqueue_starts(run: _Run, study: optuna.Study, warm_start: str | Path | None) -> None:
    """The naive config first (once per study), then a warm start's config and its
    neighbours; without a warm start, the space's ``guess()`` once the naive config fits."""
    space = run.space
    naive = space.naive()
    if run._record_of(naive) is None and not run._waiting(naive, study):
        study.enqueue_trial(space.params_of(naive), user_attrs={"role": "naive"})
    if warm_start is None:
        run.use_guess = True
        run.enqueue_guess(study)
        return
    from autotune.preset import load_preset

    preset = load_preset(warm_start)
    config = preset.config
    gb = space.global_batch
    if config.micro_batch in space.micro_batch and gb % config.micro_batch == 0:
        config = config.replace(grad_accum=gb // config.micro_batch)
    if config.seq_len not in space.seq_len:
        nearest = min(space.seq_len, key=lambda s: abs(s - config.seq_len))
        config = config.replace(seq_len=nearest)
    if not space.contains(config):
        run.note(
            f"warm start: the config of {str(warm_start)!r} ({summarize_config(config.to_dict())}) "
            "is outside this search space (restricted knobs, another device or model); "
            "starting without it"
        )
        return
    queued = 0
    for i, cand in enumerate([config, *space.neighbours(config)]):
        if run._record_of(cand) is None and not run._waiting(cand, study):
            study.enqueue_trial(
                space.params_of(cand), user_attrs={"role": "warm-start" if i == 0 else ""}
            )
            queued += 1
    run.note(f"warm start from {str(warm_start)!r}: {queued} configs queued first")


def _distinct_best(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Feasible trials that ran, best value first, one per config."""
    seen: set[str] = set()
    out: list[TrialRecord] = []
    for r in sorted(
        (r for r in records if r.feasible and r.ran and r.value is not None),
        key=lambda r: (-(r.value or 0.0), r.number),
    ):
        key = repr(sorted(r.config.items()))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _top(records: Sequence[TrialRecord], n: int) -> tuple[TrialRecord, ...]:
    return tuple(_distinct_best(records)[:n])


def _skipped(records: Sequence[TrialRecord]) -> dict[str, int]:
    """Why configs were not kept, grouped: 'dominated by OOM trial #3' -> 4, ..."""
    out: dict[str, int] = {}
    for r in records:
        if not r.finished or r.duplicate_of is not None or r.status == "ok":
            continue
        if r.status == "predicted":
            reason = "predicted over budget by the memory model"
        elif r.status == "pruned":
            reason = "pruned: clearly slower than the best so far"
        elif r.status == "stopped":
            reason = r.reason
        else:
            reason = r.reason if r.status == "dominated" else f"{r.status}: {r.reason}"
        out[reason] = out.get(reason, 0) + 1
    return out


def _verify_once(run: _Run, config: TrainConfig, verify_steps: int) -> tuple[BurstResult, str]:
    """One verification burst of ``config``: its result and what is wrong with it ("")."""
    try:
        result = run.burst_fn(
            run.spec,
            config,
            steps=verify_steps,
            warmup=run.warmup,
            budget_bytes=run.budget_bytes,
            timeout_s=2 * run.burst_timeout_s,
            device=run.device,
            seed=run.seed,
            verify=True,
        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        from autotune.burst import BurstResult

        result = BurstResult(status="error", reason=f"the burst raised {type(exc).__name__}: {exc}")
    if not result.ok:
        return result, f"{result.status}: {result.reason}"
    if result.peak_memory_bytes is not None and result.peak_memory_bytes > run.budget_bytes:
        return result, (
            f"peak {format_bytes(result.peak_memory_bytes)} over the budget "
            f"{format_bytes(run.budget_bytes)} with eval and checkpointing"
        )
    return result, ""


def _verify(
    run: _Run, study: optuna.Study, verify_steps: int
) -> tuple[TrialRecord | None, BurstResult | None, list[dict[str, Any]]]:
    """Run the best configs again, longer, with an eval step and a checkpoint save; the
    first that passes (ok, within the budget) wins.

    A verification far slower than the search measured (under ``VERIFY_AGREEMENT`` of it)
    says the machine was busier than during the search: it is run once more and the
    faster of the two kept (load only ever slows a burst down), with a note."""
    candidates = _distinct_best(list(run.records.values()))
    if not candidates:
        statuses: dict[str, int] = {}
        for r in run.records.values():
            if r.finished:
                statuses[r.status] = statuses.get(r.status, 0) + 1
        shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no trials"
        raise AutotuneError(
            f"no config ran successfully within the budget ({shown}); see the trials in "
            f"study {study.study_name!r} for the reasons"
        )
    attempts: list[dict[str, Any]] = []
    for cand in candidates[:MAX_VERIFY_CANDIDATES]:
        config = cand.train_config()
        run.note(f"verifying trial #{cand.number} ({cand.summary()}) with {verify_steps} steps")
        result, problem = _verify_once(run, config, verify_steps)
        if (
            not problem
            and cand.throughput
            and _throughput(run, result) < (VERIFY_AGREEMENT * cand.throughput)
        ):
            run.note(
                f"the verification measured {_throughput(run, result):,.4g} {run.unit}, under "
                f"{VERIFY_AGREEMENT:.0%} of the search's {cand.throughput:,.4g}: the machine "
                "may be busy; measuring once more"
            )
            again, again_problem = _verify_once(run, config, verify_steps)
            if not again_problem and _throughput(run, again) > _throughput(run, result):
                result = again
        attempt = {
            "trial": cand.number,
            "status": "ok" if not problem else "failed",
            "problem": problem,
            "tokens_per_s": result.tokens_per_s,
            "samples_per_s": result.samples_per_s,
            "peak_memory_bytes": result.peak_memory_bytes,
            "eval_loss": result.eval_loss,
            "checkpoint_bytes": result.checkpoint_bytes,
        }
        attempts.append(attempt)
        with contextlib.suppress(Exception):
            study.set_user_attr(f"verify.{cand.number}", attempt)
        run.emit(
            SearchEvent(
                kind="verify",
                trial=cand,
                verify=result,
                message=problem,
                elapsed_s=run.elapsed(),
                unit=run.unit,
            )
        )
        if not problem:
            return cand, result, attempts
    tried = "; ".join(f"trial #{a['trial']}: {a['problem']}" for a in attempts)
    raise AutotuneError(
        f"verification failed for the {len(attempts)} best configs ({tried}); no preset was written"
    )


def _throughput(run: _Run, result: BurstResult) -> float:
    value = result.tokens_per_s if run.spec.throughput_unit == "tokens" else result.samples_per_s
    return float(value or 0.0)


def _write_preset(
    result: SearchResult,
    best: TrialRecord,
    verified: BurstResult,
    spec: ModelSpec,
    hardware: HardwareProfile,
    path: Path,
    naive: TrialRecord | None,
) -> Path:
    from autotune.preset import (
        Baseline,
        Fingerprint,
        Measured,
        ModelRef,
        Preset,
        SearchSummary,
        Task,
        save_preset,
    )

    config = best.train_config()
    name, args = _model_ref(spec)
    baseline = None
    if naive is not None and naive.feasible:
        baseline = Baseline(
            config=naive.train_config(),
            tokens_per_s=naive.tokens_per_s,
            samples_per_s=naive.samples_per_s,
            speedup=result.speedup,
        )
    counts = result.counts()
    extras = []
    if verified.eval_loss is not None:
        extras.append(f"eval loss {verified.eval_loss:.4g}")
    if verified.checkpoint_bytes is not None:
        extras.append(f"checkpoint {format_bytes(verified.checkpoint_bytes)}")
    preset = Preset(
        name=path.stem,
        model=ModelRef(name=name, args=args),
        task=Task(seq_len=config.seq_len, global_batch=config.global_batch),
        config=config,
        budget_bytes=result.budget_bytes,
        fingerprint=Fingerprint.from_profile(hardware, result.device),
        measured=Measured.from_burst(verified),
        baseline=baseline,
        search=SearchSummary(
            trials_run=counts["measured"],
            infeasible=counts["infeasible"],
            pruned=counts["pruned"],
            failed=counts["failed"],
            wall_s=round(result.wall_s, 1),
            study_name=result.study_name,
            storage=result.storage,
            objective=result.objective,
            sampler="tpe",
        ),
        notes=(
            f"found by autotune search (trial #{best.number}, {result.objective}); "
            f"verified with {verified.timed_steps} timed steps"
            + (f", {', '.join(extras)}" if extras else "")
        ),
    )
    return save_preset(preset, path)
