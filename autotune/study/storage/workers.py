"""Several search processes on one study: one worker per device of a machine,
or workers on many machines, all on one Optuna storage (PostgreSQL or MySQL, a journal
file; a SQLite file on one machine).

Optuna already shares the study: a queued trial (WAITING) is popped by exactly one worker,
through the storage's own atomic state change. What autotune adds:

* **a config is measured once**: a trial that is about to run a burst writes its claim
  (``claim``: the config's key) on itself, then reads the study back; when another running
  trial claims the same config, it yields (PRUNED, status ``skipped``, no burst). Of two
  trials that claim at the same moment at least one sees the other (each writes before
  it reads); when both see each other, both yield and the first one queues the config
  again, so a queued start or refinement is not lost.
* **the trial budget is the study's**: ``--trials N`` counts the measured trials of every
  worker; a worker whose burst would take the study past N (counting the bursts running
  in other workers) does not start it, and waits to see whether they finish.
* **a dead worker's trial is failed and its config queued again**: on this machine at
  once, from its owner record (host, pid, start time); on other machines by Optuna's
  heartbeats on an RDB storage (``heartbeat_s``, ``grace_s``). A journal storage has no
  heartbeats in Optuna: a journal shared by machines recovers a dead remote worker's
  trial only when a worker on that machine opens the study again.
* **the race and the preset are written once**: after the trials, each worker tries to
  claim ``autotune:finishing`` in the study, first writer wins (an INSERT against the
  table's unique key on an RDB storage; under a file lock beside it for a journal;
  ``ownership.py``);
  the others stop, saying who finishes. ``autotune search --finish`` takes the claim over
  (a finisher that died).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from autotune.core.errors import UsageError
from autotune.study.storage.optuna_glue import claim_running_trials
from autotune.study.storage.ownership import FINISHING, claim_study_attr, owner_alive, trial_owner
from autotune.study.trials.records import TrialRecord

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.machine.profile import HardwareProfile
    from autotune.study.session.deadline import Deadline
    from autotune.study.trials.trial_log import TrialLog

__all__ = [
    "POLL_S",
    "WorkerSlot",
    "Workers",
    "plan_workers",
    "run_workers",
    "workers_root",
]

POLL_S = 0.5  # how often a waiting worker looks at the study again
WAIT_FOR_LAST_S = 3600.0  # the most a finisher waits for other workers' last bursts


# -- the workers of one study ----------------------------------------------------------------


@dataclass(kw_only=True)
class Workers:
    """This process as one worker of a study that others search too: it reads the trials
    other workers finished and hands them to the log's writer, ``absorb_others`` (the
    planner's: ``sync``), and holds a trial's burst back while another worker measures its
    config, or the study's trials or ``deadline`` are spent (``gate``). ``log`` it reads."""

    log: TrialLog
    absorb_others: Callable[[list[TrialRecord]], None]
    deadline: Deadline
    study: optuna.Study
    name: str
    owner: dict[str, Any] = field(default_factory=trial_owner)

    def sync(self) -> None:
        """Absorb the trials other workers finished, and fail (and queue again) the running
        trials of workers on this machine that died."""
        claim_running_trials(self.study, self.name, joining=True)
        self._absorb(self.study.get_trials(deepcopy=False))

    def _absorb(self, trials: list[optuna.trial.FrozenTrial]) -> None:
        """Hand the finished trials the log does not know as finished to its writer."""
        known = self.log.records
        finished = [
            TrialRecord.from_trial(frozen)
            for frozen in trials
            if frozen.state.is_finished()
            and (frozen.number not in known or not known[frozen.number].finished)
        ]
        if finished:
            self.absorb_others(finished)

    def gate(self, trial: optuna.Trial, config: TrainConfig, *, again: bool) -> tuple[str, str]:
        """Whether ``trial`` may run its burst: ``("", "")`` to run it, else the status
        and reason it does not (``skipped``: another worker measures or measured this
        config; ``stopped``: the study's trial budget or time is spent)."""
        log = self.log
        key = [*map(_plain, log.space.key(config)), "again" if again else ""]
        mine = trial._trial_id
        while True:
            trial.set_user_attr("claim", {"key": key, "measure": True})
            trials = self.study.get_trials(deepcopy=False)
            self._absorb(trials)
            earlier = log.record_of(config)
            if earlier is not None and not again:
                return "skipped", f"trial #{earlier.number} of another worker measured it"
            rivals = [
                t
                for t in trials
                if t._trial_id != mine
                and t.state == TrialState.RUNNING
                and (t.user_attrs.get("claim") or {}).get("measure")
            ]
            same = [t for t in rivals if t.user_attrs["claim"].get("key") == key]
            if same:
                if mine < min(t._trial_id for t in same):  # both may yield: queue it again
                    self._queue_again(trial, config)
                return "skipped", f"trial #{same[0].number} of another worker is measuring it"
            limit = log.trial_limit
            if limit is None or log.measured() + len(rivals) < limit:
                if self.deadline.for_trials() == 0.0:
                    return "stopped", "the search's time limit passed"
                return "", ""
            trial.set_user_attr("claim", {"key": key, "measure": False})  # step back
            if log.measured() >= limit:
                return "stopped", f"the study has its {limit} measured trials"
            time.sleep(random.uniform(POLL_S / 2, POLL_S * 2))
            claim_running_trials(self.study, self.name, joining=True)
            optuna.storages.fail_stale_trials(self.study)  # remote workers' (heartbeats)

    def _queue_again(self, trial: optuna.Trial, config: TrainConfig) -> None:
        attrs = {k: v for k, v in trial.user_attrs.items() if k in ("role", "refines")}
        self.study.enqueue_trial(self.log.space.params_of(config), user_attrs=attrs)

    def wait_for_others(self) -> None:
        """Until no other worker's burst runs in the study (their results go into the
        race), failing the trials of dead workers on the way."""
        deadline = time.monotonic() + WAIT_FOR_LAST_S
        while time.monotonic() < deadline:
            self.sync()
            optuna.storages.fail_stale_trials(self.study)
            running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if not any(
                (t.user_attrs.get("claim") or {}).get("measure")
                and t.user_attrs.get("owner") != self.owner
                for t in running
            ):
                return
            time.sleep(POLL_S)

    def claim_finish(self, *, force: bool = False) -> Any:
        """Claim the race and the preset for this process; the holder (this process's
        owner record when it won). ``force``: take it over (``--finish``); a holder on this
        machine that died is taken over too."""
        holder = claim_study_attr(self.study, FINISHING, self.owner, steal=force)
        if holder != self.owner and owner_alive(holder) is False:
            holder = claim_study_attr(self.study, FINISHING, self.owner, steal=True)
        return holder


def _plain(value: Any) -> Any:
    """A config key's part as JSON keeps it (tuples become lists)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


# -- several workers on one machine ------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSlot:
    """One worker process of ``--devices``: its device, and on a CPU the cores it owns
    (empty: not pinned)."""

    device: str
    cores: tuple[int, ...] = ()


def plan_workers(
    devices: str, hardware: HardwareProfile, *, cpu_workers: int | None = None
) -> list[WorkerSlot]:
    """The workers ``--devices`` asks for: ``all`` (every GPU here) or a list such as
    ``cuda:0,cuda:1``, one worker per device; two workers never share a device. A CPU
    runs one worker unless ``cpu_workers`` splits its cores between that many workers
    (bursts on shared cores would measure each other)."""
    if cpu_workers is not None:
        return _cpu_slots(cpu_workers, devices)
    names = [d.strip() for d in devices.split(",") if d.strip()]
    if names == ["all"]:
        names = [f"cuda:{gpu.index}" for gpu in hardware.gpus]
        if not names:
            raise UsageError(
                "--devices all: this machine has no GPU. On a CPU, workers run one at a "
                "time by default, as two bursts on the same cores measure each other; give "
                "--cpu-workers N to run N workers, each pinned to its own share of the cores"
            )
    if not names or len(set(names)) != len(names):
        raise UsageError(
            f"--devices {devices!r}: give distinct devices, e.g. cuda:0,cuda:1, or all "
            "(two workers never share a device)"
        )
    if any(name == "cpu" for name in names):
        raise UsageError(
            f"--devices {devices!r}: a CPU runs one worker by default (two bursts on the "
            "same cores measure each other); give --cpu-workers N to split its cores "
            "between N workers"
        )
    kinds = set()
    for name in names:
        kinds.add(hardware.device(name).name)  # UsageError for a device not here
    if len(kinds) > 1:
        raise UsageError(
            f"--devices {devices!r} names different GPU models ({', '.join(sorted(kinds))}): "
            "one study measures one kind of device; search each kind in its own study"
        )
    return [WorkerSlot(name) for name in names]


def _cpu_slots(workers: int, devices: str) -> list[WorkerSlot]:
    if devices not in ("", "cpu"):
        raise UsageError(f"--cpu-workers runs workers on the CPU; got --devices {devices!r}")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not isinstance(workers, int) or workers < 1 or workers > len(cores):
        raise UsageError(
            f"--cpu-workers must be between 1 and the {len(cores)} cores this process may "
            f"use (each worker gets cores of its own), got {workers!r}"
        )
    share = len(cores) // workers
    return [WorkerSlot("cpu", tuple(cores[i * share : (i + 1) * share])) for i in range(workers)]


ROOT_ENV = "AUTOTUNE_WORKERS_ROOT"  # set by run_workers: the launcher's pid


def workers_root() -> int | None:
    """The process whose tree the machine watch counts as this search's own: for a worker
    that ``run_workers`` started, the launcher (the other workers, on their own devices
    or cores, are not outside load); else None (this process)."""
    raw = os.environ.get(ROOT_ENV, "")
    return int(raw) if raw.isascii() and raw.isdecimal() and int(raw) == os.getppid() else None


def run_workers(command: list[str], slots: list[WorkerSlot], *, logs: Path) -> int:
    """Run ``command`` (an ``autotune search`` command line) once per slot, with
    ``--device`` and ``--worker`` added, each worker pinned to its cores (and torch's
    threads to their number) on a CPU; each worker's progress goes to
    ``logs/worker-<n>.log``. The highest exit code of the workers."""
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for n, slot in enumerate(slots):
        env = {**os.environ, ROOT_ENV: str(os.getpid())}
        if slot.cores:
            env["OMP_NUM_THREADS"] = str(len(slot.cores))
        log = (logs / f"worker-{n}.log").open("w")
        proc = subprocess.Popen(
            [*command, "--device", slot.device, "--worker"],
            env=env,
            stderr=log,
            preexec_fn=_pin(slot.cores) if slot.cores else None,
        )
        log.close()
        procs.append(proc)
    try:
        return max(proc.wait() for proc in procs)
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait()
        raise


def _pin(cores: tuple[int, ...]) -> Callable[[], None]:
    def pin() -> None:
        os.sched_setaffinity(0, cores)

    return pin
