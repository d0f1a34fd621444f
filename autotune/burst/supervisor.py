"""The burst: one short, real, isolated training run of one config, honestly timed.

``run_burst`` starts ``python -m autotune.burst.child`` as a fresh process in a session
(and process group) of its own (``autotune.burst.process``), and reads one JSON message
per line from a pipe reserved for it (``autotune.burst.channel``). Why a plain subprocess
rather than ``multiprocessing``'s spawn context:

- ``start_new_session`` puts the trial in its own session between fork and exec, with no
  window in which it shares the parent's group; ``os.killpg`` then ends the trial and its
  DataLoader workers together, and Ctrl-C in the terminal reaches only the parent.
- spawn re-imports the parent's ``__main__`` (a user script without a main guard, a
  notebook) and pickles a target; ``python -m`` imports nothing of the caller.
- JSON lines on a dedicated descriptor survive the child being SIGKILLed mid-message (the
  partial line is dropped); a ``multiprocessing.Queue`` killed mid-``put`` can be left
  broken, and its feeder thread and semaphores outlive a killed process badly. The
  child's stdout and stderr go to a log that never feeds the classification.

The outcome comes from the messages alone (``autotune.burst.trial_report``): ``ok``, ``oom``,
``nan`` and ``error`` are sent by the trial; ``timeout`` (the parent killed it at the
deadline), ``crash`` (it died without a result) and ``pruned`` (``on_step`` said stop)
are decided here. On CPU, a watchdog thread samples the memory of the trial's process tree
(``autotune.engine.memory.ProcessTreeSampler``) and kills the group with ``oom`` once it passes
the budget, before the machine's own OOM killer acts. POSIX only (sessions, ``killpg``).

Nothing the trial started outlives the burst: its group is killed, then every process of
its tree the watchdog saw (``reap_tree``), and, as the burst ends, what left the trial's
session (a daemon its ``build`` detached: ``autotune.burst.process.orphans_ended``).
A trial forked by a zygote is its zygote's child; a zygote that stops answering (stopped,
or silent) is noticed within a fraction of a second, said as a ``RuntimeWarning`` and
replaced (``autotune.burst.zygote``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import psutil

from autotune.burst.channel import LineReader, open_channel
from autotune.burst.process import (
    REQUEST_FILE,
    TrialProcess,
    child_env,
    exited,
    kill_group,
    make_workdir,
    orphans_ended,
    reap_tree,
    remove_orphaned_workdirs,
    spawn_child,
    sweep_after_kill,
    tree_budget,
    wait_exit,
)
from autotune.burst.request import BurstRequest, SpecRef, write_request
from autotune.burst.result import (
    CUDA_MIN_TIMED_S,
    CUDA_MIN_WARMUP_S,
    BurstResult,
    BurstStatus,
    Minimum,
    step_figures,
)
from autotune.burst.trial_report import BurstProgress, WatchOutcome, memory_figures, verdict
from autotune.burst.zygote import warm_start_allowed, zygotes
from autotune.engine.memory import ProcessTreeSampler

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = ["run_burst"]

# Seconds a trial gets to end after SIGTERM before its group is SIGKILLed, and to exit on
# its own after sending its result (DataLoader workers shutting down).
TERM_GRACE_S = 2.0
EXIT_GRACE_S = 3.0
SWEEPER_WAIT_S = 5.0  # a sweeper ends within ~50 ms of its group (a fresh interpreter)
POLL_S = 0.05


@functools.lru_cache(maxsize=8)
def _probed_caps(device: str) -> DeviceCaps | None:
    """The device's capabilities from the hardware probe, or None if it cannot tell."""
    try:
        from autotune.machine.hardware import probe

        return probe().device(device)
    except Exception:
        return None


def run_burst(
    spec: ModelSpec,
    config: TrainConfig,
    *,
    steps: int = 10,
    warmup: int = 3,
    budget_bytes: int | None = None,
    timeout_s: float = 300.0,
    device: str = "cpu",
    seed: int = 0,
    verify: bool = False,
    on_step: Callable[[int, float], bool] | None = None,
    device_caps: DeviceCaps | None = None,
    memory_interval_s: float = 0.025,
    threads: int | None = None,
    profile: bool = False,
    trace_path: str | None = None,
    stable_within: float | None = None,
    should_stop: Callable[[], str | None] | None = None,
    min_warmup_s: float | None = None,
    min_timed_s: float | None = None,
    compile_timeout_s: float | None = None,
) -> BurstResult:
    """Run ``steps`` timed optimizer steps of ``config`` (after ``warmup`` untimed ones) in a
    fresh process, and report what happened.

    ``budget_bytes`` is enforced inside the trial on CUDA (the allocator is capped) and by the
    parent's watchdog on CPU. ``on_step(index, seconds)`` is called here, in the caller's process,
    after each timed step (``index`` from 0); returning False stops the trial at once with status
    ``pruned``, as does a reason returned by ``should_stop()`` (polled while the trial runs, from
    its first step on where the config compiles: that step is the compile); an exception either
    raises ends the trial and is re-raised. ``verify`` adds an eval step on a batch twice the
    micro-batch and a checkpoint save. ``device_caps`` (for MFU) defaults to the hardware probe's
    answer. ``threads`` caps torch's intra-op threads (None: one per core). ``profile`` adds
    profiled steps after the timed ones (the result's ``breakdown``; their trace to ``trace_path``).
    ``stable_within``: a one-process trial ends its timed steps once two agree within that fraction
    (``steps_stable``), or on a CPU after the first whose micro-batches ran evenly
    (``micro_batches_even``). ``min_warmup_s`` / ``min_timed_s``: a one-process trial runs more
    steps where its warm-up (after the first step) or its timed steps take less time (None:
    ``CUDA_MIN_WARMUP_S`` / ``CUDA_MIN_TIMED_S`` on CUDA, none on a CPU). ``compile_timeout_s``: a
    compiled config's burst is killed at that many seconds while its first step (the compile)
    has not ended, and runs on to ``timeout_s`` once it has (None: ``timeout_s`` throughout).
    Nothing the trial started outlives it.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s=}")
    if compile_timeout_s is not None and compile_timeout_s <= 0:
        raise ValueError(f"compile_timeout_s must be positive, got {compile_timeout_s=}")
    started = time.perf_counter()
    caps = device_caps if device_caps is not None else _probed_caps(device)
    burst = _Burst(spec=spec, config=config, device=device, caps=caps, started=started)
    # torchrun's ranks run the counts alone (they must run the same steps)
    minimum = Minimum() if burst.nproc > 1 else _minimum(device, min_warmup_s, min_timed_s)
    remove_orphaned_workdirs()
    # torchrun's ranks inherit no descriptors: their request and channel need a folder,
    # made here. A one-process trial makes its own (``spawn_child``).
    workdir = make_workdir() if burst.nproc > 1 else None
    try:
        request = BurstRequest(  # a bad value is a ValueError, raised before any process starts
            spec=SpecRef.of(spec), config=config, steps=steps, warmup=warmup, device=device,
            seed=seed, budget_bytes=budget_bytes, verify=verify, threads=threads,
            workdir=None if workdir is None else str(workdir), profile=profile,
            trace_path=trace_path, stable_within=stable_within, min_warmup_s=minimum.warmup_s,
            min_timed_s=minimum.timed_s,
        )  # fmt: skip
        with tempfile.TemporaryFile() as log, _request_file(workdir) as request_file:
            try:
                write_request(request_file, request)
            except Exception as exc:
                return burst.result("error", _cannot_send(spec, exc), BurstProgress())
            return _supervise(
                request=request_file if workdir is None else workdir / REQUEST_FILE,
                log=log,
                workdir=workdir,
                burst=burst,
                progress=BurstProgress(warmup=warmup, steps=steps, minimum=minimum),
                timeout_s=timeout_s,
                compile_timeout_s=compile_timeout_s if config.compile != "off" else None,
                budget_bytes=budget_bytes,
                on_step=on_step,
                memory_interval_s=memory_interval_s,
                should_stop=should_stop,
            )
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        remove_orphaned_workdirs()  # the trial's own folder, if it was killed outright


def _cannot_send(spec: ModelSpec, exc: Exception) -> str:
    return (
        f"cannot send model {spec.name!r} to the trial process: {type(exc).__name__}: {exc} "
        "(give it a source: a built-in name or a pkg.mod:attr / file.py:attr reference)"
    )


def _request_file(workdir: Path | None) -> IO[bytes]:
    """Where the trial's request is written: a file with no name that a one-process
    trial inherits, or ``request.pkl`` in torchrun's folder."""
    if workdir is None:
        return tempfile.TemporaryFile()
    return open(workdir / REQUEST_FILE, "wb")  # the caller's with closes it


def _minimum(device: str, warmup_s: float | None, timed_s: float | None) -> Minimum:
    """The least warm-up and timed seconds of a burst on ``device`` (see
    ``autotune.burst.result.CUDA_MIN_TIMED_S``); a negative one is a ValueError."""
    cuda = device.startswith("cuda")
    warmup_s = (CUDA_MIN_WARMUP_S if cuda else 0.0) if warmup_s is None else warmup_s
    timed_s = (CUDA_MIN_TIMED_S if cuda else 0.0) if timed_s is None else timed_s
    if warmup_s < 0 or timed_s < 0:
        raise ValueError(f"minimum seconds must be >= 0, got {warmup_s=}, {timed_s=}")
    return Minimum(warmup_s=warmup_s, timed_s=timed_s)


@dataclass(frozen=True, kw_only=True)
class _Burst:
    """What one ``run_burst`` call measures, and how its result is assembled."""

    spec: ModelSpec
    config: TrainConfig
    device: str
    caps: DeviceCaps | None
    started: float  # time.perf_counter() when the burst began

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def nproc(self) -> int:
        """Processes the trial runs (torchrun's ranks), one without a parallel record."""
        parallel = self.config.parallel
        return parallel.nproc_per_node if parallel is not None else 1

    def result(
        self, status: BurstStatus, reason: str, progress: BurstProgress, **extra: Any
    ) -> BurstResult:
        """The result: the trial's figures from ``progress``, with ``extra`` fields."""
        figures = step_figures(
            spec=self.spec,
            config=self.config,
            step_times=progress.step_times,
            warmup_times=progress.warmup_times,
            caps=self.caps,
            world_size=self.nproc,
        )
        return BurstResult(
            status=status,
            reason=reason,
            losses=tuple(progress.losses),
            overhead_s=progress.overhead_s,
            cuda_context_bytes=progress.context_bytes,
            recompiles=progress.recompiles(),
            threads=progress.threads,
            wall_s=time.perf_counter() - self.started,
            device=self.device,
            config=self.config.to_dict(),
            **figures,
            **extra,
        )


# Around the whole supervision: the orphans of the trial's tree, once it has ended.
@orphans_ended(keep=zygotes.pids)
def _supervise(
    *,
    request: IO[bytes] | Path,
    log: IO[bytes],
    workdir: Path | None,
    burst: _Burst,
    progress: BurstProgress,
    timeout_s: float,
    compile_timeout_s: float | None,
    budget_bytes: int | None,
    on_step: Callable[[int, float], bool] | None,
    memory_interval_s: float,
    should_stop: Callable[[], str | None] | None,
) -> BurstResult:
    """Start the trial process, watch it to its end, stop its whole tree and say how it
    went."""
    nproc, on_cuda = burst.nproc, burst.on_cuda
    read_fd, write_fd, channel = open_channel(workdir, nproc)
    proc: TrialProcess | None = None
    sampler: ProcessTreeSampler | None = None
    kills = _Kills(own_folder=nproc == 1)
    try:
        proc = _start(burst, request=request, write_fd=write_fd, log=log, channel=channel)
        if nproc == 1:  # a FIFO's write end stays open here: no end of file before rank 0 opens it
            os.close(write_fd)
            write_fd = -1
        pgid = proc.pid
        leader = _leader(proc.pid)
        sampler = ProcessTreeSampler(
            proc.pid,
            interval_s=memory_interval_s,
            budget_bytes=None if on_cuda else tree_budget(budget_bytes, nproc),
            on_over_budget=lambda _: kills.kill(pgid, leader),
        ).start()
        deadline, compile_deadline = _deadlines(
            started=burst.started,
            running=time.perf_counter(),
            timeout_s=timeout_s,
            compile_timeout_s=compile_timeout_s,
        )
        outcome = _watch(
            reader=LineReader(read_fd),
            leader=leader,
            sampler=sampler,
            progress=progress,
            started=burst.started,
            deadline=deadline,
            compile_deadline=compile_deadline,
            on_step=on_step,
            should_stop=should_stop
            if burst.config.compile == "off"
            else _after_compile(should_stop, progress),
        )
        returncode = _end(proc, leader, sampler, outcome, kills)
        memory = memory_figures(progress, sampler, on_cuda=on_cuda, nproc=nproc)
        if outcome == "budget":
            memory["peak_memory_bytes"] = max(sampler.over_budget_bytes or 0, sampler.peak_bytes)
        if outcome == "timeout" and compile_timeout_s is not None and not _past_first(progress):
            timeout_s = min(compile_timeout_s, timeout_s)  # it ran out its compile's time
        status, reason, extra = verdict(
            outcome,
            progress,
            peak=memory["peak_memory_bytes"],
            budget_bytes=budget_bytes,
            timeout_s=timeout_s,
            on_cuda=on_cuda,
            log=log,
            returncode=returncode,
        )
        return burst.result(status, reason, progress, **memory, **extra)
    finally:
        _clean_up(proc, sampler, kills, read_fd=read_fd, write_fd=write_fd)


def _deadlines(
    *, started: float, running: float, timeout_s: float, compile_timeout_s: float | None
) -> tuple[float, float | None]:
    """When a burst begun at ``started`` is ended, and when a compiled one still in its
    first step is (None: no such cap), its process running from ``running`` on. The whole
    burst's time counts from ``started`` (the search's deadline holds it); the compile's
    from ``running``: a zygote made for this trial (the imports, and for CUDA a forked
    kernel, up to ``CUDA_CHECK_TIMEOUT_S``) is no part of the compile, where a fresh
    process's imports are (a fresh one runs at once)."""
    deadline = started + timeout_s
    if compile_timeout_s is None:
        return deadline, None
    return deadline, min(running + compile_timeout_s, deadline)


def _start(
    burst: _Burst, *, request: IO[bytes] | Path, write_fd: int, log: IO[bytes], channel: str | None
) -> TrialProcess:
    """The trial's process: forked by a zygote that has torch loaded where one can serve
    (a one-process trial: ``autotune.burst.zygote``), else a fresh interpreter."""
    if not isinstance(request, Path) and warm_start_allowed(nproc=burst.nproc):
        forked = zygotes.spawn(
            child_env(None, burst.config),
            compiled=burst.config.compile != "off",
            cuda=burst.on_cuda,
            request_fd=request.fileno(),
            write_fd=write_fd,
            log_fd=log.fileno(),
        )
        if forked is not None:
            return forked
    return spawn_child(
        burst.config,
        request=request,
        write_fd=write_fd,
        log=log,
        channel=channel,
        nproc=burst.nproc,
    )


def _after_compile(
    should_stop: Callable[[], str | None] | None, progress: BurstProgress
) -> Callable[[], str | None] | None:
    """``should_stop`` for a compiled config: asked once the first step is done. That step
    is the compile: no figure comes from it, and a stop throws its work away (a
    5-second command beside mu's search stopped its playbook's burst 40 s into the
    compile, and the burst run again took 98 s where the trial takes 52, which cost the
    search its next refinement). Stopped after it, the burst run again compiles from the
    cache (3 s)."""
    if should_stop is None:
        return None

    def ask() -> str | None:
        return should_stop() if _past_first(progress) else None

    return ask


def _past_first(progress: BurstProgress) -> bool:
    """Whether the trial's first step (a compiled config's compile) has ended."""
    return bool(progress.warmup_times or progress.step_times)


def _leader(pid: int) -> psutil.Process | None:
    """The trial's main process, or None if it is already gone. Its start time is read
    now, as the trial reads it to name its folder (``sweep_after_kill``): psutil reads
    it on first use, from the clock of that moment."""
    try:
        leader = psutil.Process(pid)
        leader.create_time()
    except psutil.NoSuchProcess:
        return None
    return leader


@dataclass
class _Kills:
    """The trial's group killed outright. A trial that made its own folder (one process)
    and still runs cannot remove it then: a sweeper that will is started first, and
    waited for once the group has ended."""

    own_folder: bool
    sweepers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kill(self, pgid: int, leader: psutil.Process | None) -> None:
        if (
            self.own_folder
            and leader is not None
            and not exited(leader)
            and (sweeper := sweep_after_kill(pgid, leader)) is not None
        ):
            self.sweepers.append(sweeper)
        kill_group(pgid, signal.SIGKILL)

    def wait(self) -> None:
        """The sweepers, once the group has ended: milliseconds (one that waits for a
        process stuck in the kernel is left to end by itself)."""
        for sweeper in self.sweepers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                sweeper.wait(timeout=SWEEPER_WAIT_S)


def _end(
    proc: TrialProcess,
    leader: psutil.Process | None,
    sampler: ProcessTreeSampler,
    outcome: WatchOutcome,
    kills: _Kills,
) -> int:
    """End the trial's whole tree once the watch is over; the trial's exit code."""
    pgid = proc.pid
    if outcome == "result":
        wait_exit(leader, EXIT_GRACE_S)
    elif outcome == "timeout":
        kill_group(pgid, signal.SIGTERM)
        wait_exit(leader, TERM_GRACE_S)
    sampler.stop()  # before the reap below frees the group id for reuse
    kills.kill(pgid, leader)
    returncode = proc.wait()
    reap_tree(sampler)
    return returncode


def _clean_up(
    proc: TrialProcess | None,
    sampler: ProcessTreeSampler | None,
    kills: _Kills,
    *,
    read_fd: int,
    write_fd: int,
) -> None:
    """Whatever way the supervision ended: close the channel, leave no process behind."""
    if write_fd >= 0:
        os.close(write_fd)
    os.close(read_fd)
    if sampler is not None:
        sampler.stop()
    if proc is not None and proc.returncode is None:
        kills.kill(proc.pid, _leader(proc.pid))
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if sampler is not None:
        reap_tree(sampler)
    kills.wait()


def _watch(
    *,
    reader: LineReader,
    leader: psutil.Process | None,
    sampler: ProcessTreeSampler,
    progress: BurstProgress,
    started: float,
    deadline: float,
    on_step: Callable[[int, float], bool] | None,
    should_stop: Callable[[], str | None] | None = None,
    compile_deadline: float | None = None,
) -> WatchOutcome:
    """Read the trial's messages until it sends a result, dies, times out, passes the
    budget or is pruned (by ``on_step``, or by the reason ``should_stop`` gives). It times
    out at ``compile_deadline`` while its first step has not ended (None: no such
    deadline), else at ``deadline``."""
    while True:
        if sampler.over_budget_bytes is not None:
            return "budget"
        if should_stop is not None and (reason := should_stop()):
            progress.stop_reason = reason
            return "pruned"
        until = deadline
        if compile_deadline is not None and not _past_first(progress):
            until = compile_deadline  # still compiling
        remaining = until - time.perf_counter()
        if remaining <= 0:
            return "timeout"
        open_ = reader.read(min(remaining, POLL_S))
        outcome = progress.take(reader.lines(), started=started, on_step=on_step)
        if outcome is not None:
            return outcome
        if not open_ or exited(leader):
            # Whatever the trial wrote before it ended is in the pipe: read it all.
            reader.read_rest(open_)
            outcome = progress.take(reader.lines(), started=started, on_step=on_step)
            if outcome is not None:
                return outcome
            if sampler.over_budget_bytes is not None:
                return "budget"
            return "exited"
