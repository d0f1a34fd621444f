"""The burst: one short, real, isolated training run of one config, honestly timed.

``run_burst`` starts ``python -m autotune.burst.child`` as a fresh process in a session
(and process group) of its own, and reads one JSON message per line from a pipe reserved
for it. Why a plain subprocess rather than ``multiprocessing``'s spawn context:

- ``start_new_session`` puts the trial in its own session between fork and exec, with no
  window in which it shares the parent's group; ``os.killpg`` then ends the trial and its
  DataLoader workers together, and Ctrl-C in the terminal reaches only the parent.
- spawn re-imports the parent's ``__main__`` (a user script without a main guard, a
  notebook) and pickles a target; ``python -m`` imports nothing of the caller.
- JSON lines on a dedicated descriptor survive the child being SIGKILLed mid-message (the
  partial line is dropped); a ``multiprocessing.Queue`` killed mid-``put`` can be left
  broken, and its feeder thread and semaphores outlive a killed process badly. The
  child's stdout and stderr go to a log that never feeds the classification.

The outcome comes from the messages alone (see ``autotune.burst.child``): ``ok``,
``oom``, ``nan`` and ``error`` are sent by the trial; ``timeout`` (the parent killed it at
the deadline), ``crash`` (it died without a result) and ``pruned`` (``on_step`` said stop)
are decided here. On CPU, a watchdog thread samples the memory of the trial's process tree
(``autotune.engine.memory.ProcessTreeSampler``) and kills the group with ``oom`` once it passes
the budget, before the machine's own OOM killer acts. POSIX only (sessions, ``killpg``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import pickle
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psutil

from autotune.core.units import format_bytes, throughput_label
from autotune.engine.memory import ProcessTreeSampler

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps

__all__ = ["BurstResult", "BurstStatus", "run_burst"]

BurstStatus = Literal["ok", "oom", "timeout", "crash", "nan", "error", "pruned"]

# Seconds a trial gets to end after SIGTERM before its group is SIGKILLed, and to exit on
# its own after sending its result (DataLoader workers shutting down).
TERM_GRACE_S = 2.0
EXIT_GRACE_S = 3.0
POLL_S = 0.05


@dataclass(frozen=True, kw_only=True)
class BurstResult:
    status: BurstStatus
    reason: str = ""
    device: str = "cpu"
    config: Mapping[str, Any] = field(default_factory=dict)
    timed_steps: int = 0
    warmup_steps: int = 0
    tokens_per_s: float | None = None  # None for a model measured in samples
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    warmup_s: float | None = None  # wall time of the warm-up steps, compilation included
    compile_s: float | None = None  # the first step's excess over the median: compilation
    peak_memory_bytes: int | None = None  # as the budget counts it (see autotune.engine.memory)
    mfu: float | None = None
    losses: tuple[float, ...] = ()
    step_times_s: tuple[float, ...] = ()
    overhead_s: float | None = None  # process start, imports, model build, data set-up
    wall_s: float | None = None
    eval_loss: float | None = None  # set by a verification burst
    checkpoint_bytes: int | None = None  # set by a verification burst
    throughput_unit: Literal["tokens", "samples"] = "tokens"
    memory_source: str = ""  # how peak_memory_bytes was measured
    host_peak_bytes: int | None = None  # CPU memory of the process tree (also on CUDA)
    peak_processes: int | None = None  # most processes seen in the tree (workers + 1)
    cuda_context_bytes: int | None = None
    recompiles: int | None = None  # graphs torch.compile built during the timed steps
    threads: int | None = None  # torch's intra-op threads in the trial (fewer when shared)
    alloc_retries: int | None = None  # CUDA: the caching allocator's num_alloc_retries

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def throughput(self) -> float | None:
        """The figure a search maximises: tokens/s, or samples/s for a samples model."""
        return self.tokens_per_s if self.throughput_unit == "tokens" else self.samples_per_s

    @property
    def throughput_label(self) -> str:
        """``"tokens/s"`` or ``"samples/s"``: the unit of :attr:`throughput`."""
        return throughput_label(self.throughput_unit)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["config"] = dict(self.config)
        data["losses"] = list(self.losses)
        data["step_times_s"] = list(self.step_times_s)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BurstResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["losses"] = tuple(kwargs.get("losses", ()))
        kwargs["step_times_s"] = tuple(kwargs.get("step_times_s", ()))
        return cls(**kwargs)


# -- figures ----------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]) of a non-empty list."""
    if not values:
        raise ValueError("percentile of an empty list")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q=}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def step_figures(
    *,
    spec: ModelSpec,
    config: TrainConfig,
    step_times: list[float],
    warmup_times: list[float],
    caps: DeviceCaps | None,
) -> dict[str, Any]:
    """Throughput, step-time median/p90, warm-up, compile seconds and MFU from step times."""
    figures: dict[str, Any] = {
        "timed_steps": len(step_times),
        "warmup_steps": len(warmup_times),
        "step_times_s": tuple(step_times),
        "warmup_s": sum(warmup_times) if warmup_times else None,
        "throughput_unit": spec.throughput_unit,
    }
    if not step_times:
        return figures
    median = statistics.median(step_times)
    samples_per_s = config.global_batch / median if median > 0 else None
    figures["step_time_median_s"] = median
    figures["step_time_p90_s"] = percentile(step_times, 90)
    figures["samples_per_s"] = samples_per_s
    if samples_per_s is not None and spec.throughput_unit == "tokens":
        figures["tokens_per_s"] = samples_per_s * spec.tokens_per_sample(config.seq_len)
    if config.compile != "off":
        first = (warmup_times or step_times)[0]
        figures["compile_s"] = max(0.0, first - median)
    figures["mfu"] = _mfu(spec, config, samples_per_s, caps)
    return figures


def _mfu(
    spec: ModelSpec, config: TrainConfig, samples_per_s: float | None, caps: DeviceCaps | None
) -> float | None:
    if samples_per_s is None or caps is None:
        return None
    peak = caps.peak_flops(config.precision)
    if not peak:
        return None
    try:
        flops = spec.flops_per_sample(config.seq_len)
    except Exception:  # a user's FLOPs formula must not sink the measurement
        return None
    if not flops or flops <= 0:
        return None
    return flops * samples_per_s / peak


@functools.lru_cache(maxsize=8)
def _probed_caps(device: str) -> DeviceCaps | None:
    """The device's capabilities from the hardware probe, or None if it cannot tell."""
    try:
        from autotune.machine.hardware import probe

        return probe().device(device)
    except Exception:
        return None


# -- the trial process ------------------------------------------------------------------
def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _exited(proc: psutil.Process | None) -> bool:
    """Whether the trial's main process has ended (without reaping it: the pid, and with it
    the process group id, stays reserved until we wait on it)."""
    if proc is None:
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return True


def _wait_exit(proc: psutil.Process | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


_WORKDIR_PREFIX = "autotune-burst-"  # then the pid of the process that made it


def _remove_orphaned_workdirs() -> None:
    """Remove the trial folders whose maker died. A trial removes its folder when its
    search was killed (``_burst_child._follow_parent``), except when the search was
    killed in the moment between making the folder and starting the trial: then the
    next burst on this machine removes it."""
    for path in Path(tempfile.gettempdir()).glob(f"{_WORKDIR_PREFIX}*-*"):
        pid = path.name.removeprefix(_WORKDIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


# The longest temporary folder whose files can still be AF_UNIX sockets (108 bytes with
# the name multiprocessing gives them: pymp-XXXXXXXX/listener-XXXXXXXX).
_MAX_SOCKET_DIR = 70


def _child_env(workdir: Path, config: TrainConfig) -> dict[str, str]:
    """The trial's environment: this process's, with the OpenMP wait policy ``config`` runs
    with (``autotune/machine/omp.py``: OpenMP reads it when torch loads, before the child can set
    anything). Its temporary files go in its own folder (``workdir``),
    which is removed when the burst ends, or by the trial when its search was killed: a
    DataLoader worker's ``pymp-*`` folder (its worker ends by a signal, skipping the
    clean-up at exit) would otherwise be left in the user's temporary folder by every
    burst. torch.compile's cache stays where it was, shared by the bursts."""
    from autotune.machine.compile_cache import CACHE_ENV, torch_default_dir
    from autotune.machine.omp import environment_for

    env = environment_for(config, os.environ)
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault leaves a traceback in the trial's log
    env["AUTOTUNE_BURST_PARENT"] = str(os.getpid())  # the trial follows this process
    if len(str(workdir)) <= _MAX_SOCKET_DIR:
        env.setdefault(CACHE_ENV, torch_default_dir())
        env["TMPDIR"] = str(workdir)
    # From a source checkout (not installed), make this autotune importable in the child.
    # Never for an installed one: site-packages on PYTHONPATH would go before the stdlib.
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(root) + (os.pathsep + path if path else "")
    return env


def _describe_exit(returncode: int | None) -> str:
    """How a process ended, a signal by its name: ``aborted (SIGABRT)``, ``crashed
    (SIGSEGV)``, ``killed by SIGKILL``, ``exited with code 3``."""
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return f"killed by signal {-returncode}"
        if -returncode == signal.SIGABRT:
            return f"aborted ({name})"
        if -returncode in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
            return f"crashed ({name})"
        hint = " (the OS out-of-memory killer?)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {returncode}"


def _log_tail(path: Path, limit: int = 300) -> str:
    """The last meaningful line of the trial's stderr, for context in a crash reason."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 8192))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("File ", "Current thread", "Thread 0x", "Extension")):
            return text[:limit]
    return ""


@dataclass
class _Progress:
    """What the trial has reported so far."""

    stage: str = "starting the process"
    overhead_s: float | None = None
    warmup: int = 0
    steps: int = 0
    warmup_times: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    cuda_peak: int | None = None
    context_bytes: int | None = None
    context_method: str | None = None
    cap_fraction: float | None = None
    result: dict[str, Any] | None = None
    graphs_after_warmup: int | None = None  # graphs torch.compile had built by then
    graphs: int | None = None  # ... by the last step
    threads: int | None = None  # torch's intra-op threads, as the trial said

    def recompiles(self) -> int | None:
        """Graphs torch.compile built during the timed steps (recompilation: dynamic shapes
        or a guard that failed); None without compile or without a warm-up."""
        if self.graphs is None or self.graphs_after_warmup is None:
            return None
        return max(0, self.graphs - self.graphs_after_warmup)

    def next_stage(self) -> str:
        if len(self.warmup_times) < self.warmup:
            return f"warm-up step {len(self.warmup_times) + 1} of {self.warmup}"
        return f"timed step {len(self.step_times) + 1} of {self.steps}"


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
) -> BurstResult:
    """Run ``steps`` timed optimizer steps of ``config`` (after ``warmup`` untimed ones) in a
    fresh process, and report what happened.

    ``budget_bytes`` is enforced inside the trial on CUDA (the allocator is capped) and by
    the parent's watchdog on CPU. ``on_step(index, seconds)`` is called here, in the
    caller's process, after each timed step (``index`` from 0); returning False stops the
    trial at once with status ``pruned``; an exception it raises ends the trial and is
    re-raised. ``verify`` adds an eval step on a batch twice the micro-batch and a
    checkpoint save. ``device_caps`` (for MFU) defaults to the hardware probe's answer.
    ``threads`` caps torch's intra-op threads in the trial (None: torch's default, one
    per core); a search gives fewer while other processes hold cores (see
    ``autotune.study.watch.free_cores``). Nothing the trial started outlives this call.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps=}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup=}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s=}")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes=}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads=}")
    started = time.perf_counter()
    on_cuda = device.startswith("cuda")
    caps = device_caps if device_caps is not None else _probed_caps(device)
    base: dict[str, Any] = {"device": device, "config": config.to_dict()}

    def finish(status: BurstStatus, reason: str, progress: _Progress, **extra: Any) -> BurstResult:
        figures = step_figures(
            spec=spec,
            config=config,
            step_times=progress.step_times,
            warmup_times=progress.warmup_times,
            caps=caps,
        )
        return BurstResult(
            status=status,
            reason=reason,
            losses=tuple(progress.losses),
            overhead_s=progress.overhead_s,
            cuda_context_bytes=progress.context_bytes,
            recompiles=progress.recompiles(),
            threads=progress.threads,
            wall_s=time.perf_counter() - started,
            **base,
            **figures,
            **extra,
        )

    _remove_orphaned_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix=f"{_WORKDIR_PREFIX}{os.getpid()}-"))
    try:
        request: dict[str, Any] = {
            "config": config,
            "steps": steps,
            "warmup": warmup,
            "budget_bytes": budget_bytes,
            "device": device,
            "seed": seed,
            "verify": verify,
            "workdir": str(workdir),
            "threads": threads,
        }
        try:
            request.update(_spec_payload(spec))
            with open(workdir / "request.pkl", "wb") as f:
                pickle.dump(request, f)
        except Exception as exc:
            return finish(
                "error",
                f"cannot send model {spec.name!r} to the trial process: "
                f"{type(exc).__name__}: {exc} (give it a source: a built-in name or a "
                "pkg.mod:attr / file.py:attr reference)",
                _Progress(),
            )
        return _supervise(
            workdir=workdir,
            config=config,
            nproc=config.parallel.nproc_per_node if config.parallel is not None else 1,
            progress=_Progress(warmup=warmup, steps=steps),
            started=started,
            timeout_s=timeout_s,
            budget_bytes=budget_bytes,
            on_cuda=on_cuda,
            on_step=on_step,
            memory_interval_s=memory_interval_s,
            finish=finish,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _spec_payload(spec: ModelSpec) -> dict[str, Any]:
    """How the child gets the spec: re-loaded from its source with these args, or pickled."""
    if spec.source:
        args = dict(spec.args)
        pickle.dumps(args)  # fail here, with a clear message, if the args cannot travel
        return {"spec_source": spec.source, "spec_args": args, "spec": None}
    pickle.dumps(spec)  # fail here, with a clear message, rather than in the child
    return {"spec_source": None, "spec_args": None, "spec": spec}


def _supervise(
    *,
    workdir: Path,
    config: TrainConfig,
    nproc: int = 1,
    progress: _Progress,
    started: float,
    timeout_s: float,
    budget_bytes: int | None,
    on_cuda: bool,
    on_step: Callable[[int, float], bool] | None,
    memory_interval_s: float,
    finish: Callable[..., BurstResult],
) -> BurstResult:
    """Start the trial process, watch it to its end, stop its whole tree and say how it
    went."""
    log_path = workdir / "trial.log"
    read_fd, write_fd, channel = _open_channel(workdir, nproc)
    proc: subprocess.Popen[bytes] | None = None
    sampler: ProcessTreeSampler | None = None
    try:
        proc = _spawn_child(
            workdir,
            config,
            write_fd=write_fd,
            log_path=log_path,
            channel=channel,
            nproc=nproc,
        )
        if nproc == 1:  # a FIFO's write end stays open here: no end of file before rank 0 opens it
            os.close(write_fd)
            write_fd = -1
        pgid = proc.pid
        try:
            leader: psutil.Process | None = psutil.Process(proc.pid)
        except psutil.NoSuchProcess:
            leader = None
        sampler = ProcessTreeSampler(
            proc.pid,
            interval_s=memory_interval_s,
            budget_bytes=None if on_cuda else _tree_budget(budget_bytes, nproc),
            on_over_budget=lambda _: _kill_group(pgid, signal.SIGKILL),
        ).start()

        outcome = _watch(
            read_fd=read_fd,
            leader=leader,
            sampler=sampler,
            progress=progress,
            started=started,
            deadline=started + timeout_s,
            on_step=on_step,
        )
        if outcome == "result":
            _wait_exit(leader, EXIT_GRACE_S)
        elif outcome == "timeout":
            _kill_group(pgid, signal.SIGTERM)
            _wait_exit(leader, TERM_GRACE_S)
        sampler.stop()  # before the reap below frees the group id for reuse
        _kill_group(pgid, signal.SIGKILL)
        returncode = proc.wait()
        _reap_tree(sampler)

        memory = _memory_figures(progress, sampler, on_cuda=on_cuda, nproc=nproc)
        if outcome == "budget":
            reached = max(sampler.over_budget_bytes or 0, sampler.peak_bytes)
            memory["peak_memory_bytes"] = reached
        status, reason, extra = _verdict(
            outcome,
            progress,
            peak=memory["peak_memory_bytes"],
            budget_bytes=budget_bytes,
            timeout_s=timeout_s,
            on_cuda=on_cuda,
            log_path=log_path,
            returncode=returncode,
        )
        return finish(status, reason, progress, **memory, **extra)
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)
        if sampler is not None:
            sampler.stop()
        if proc is not None and proc.returncode is None:
            _kill_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if sampler is not None:
            _reap_tree(sampler)


def _open_channel(workdir: Path, nproc: int) -> tuple[int, int, str]:
    """(read end, write end, what the child is told): a pipe whose descriptor the child
    inherits; under torchrun, whose workers inherit none, a FIFO in ``workdir`` that every
    rank opens by its path (rank 0 reports, the others only their failures)."""
    if nproc == 1:
        read_fd, write_fd = os.pipe()
        return read_fd, write_fd, str(write_fd)
    fifo = workdir / "channel.fifo"
    os.mkfifo(fifo, 0o600)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    return read_fd, write_fd, str(fifo)


def _tree_budget(budget_bytes: int | None, nproc: int) -> int | None:
    """What the CPU watchdog allows the whole tree: the budget is each rank's, and the
    torchrun launcher counts like one more process."""
    if budget_bytes is None or nproc == 1:
        return budget_bytes
    return budget_bytes * (nproc + 1)


def _spawn_child(
    workdir: Path,
    config: TrainConfig,
    *,
    write_fd: int,
    log_path: Path,
    channel: str | None = None,
    nproc: int = 1,
) -> subprocess.Popen[bytes]:
    """The trial process, in a session (and process group) of its own, its output in
    ``log_path``, its messages to ``write_fd`` (or, under torchrun with ``nproc`` > 1
    processes, to the FIFO named ``channel``)."""
    from autotune.train.distributed import torchrun_command

    args = ["autotune.burst.child", str(workdir / "request.pkl"), channel or str(write_fd)]
    command = [sys.executable, "-m", *args] if nproc == 1 else torchrun_command(nproc, args)
    with open(log_path, "wb") as log:
        return subprocess.Popen(  # an OSError here (no interpreter?) is the caller's
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,) if nproc == 1 else (),
            start_new_session=True,
            env=_child_env(workdir, config),
        )


def _memory_figures(
    progress: _Progress, sampler: ProcessTreeSampler, *, on_cuda: bool, nproc: int = 1
) -> dict[str, Any]:
    """The burst's memory fields: the peak that counts against the budget (the card's on
    CUDA, the process tree's on CPU; under torchrun the busiest rank's, a budget being
    each process's), the host's peak, and where the figure comes from."""
    host_peak = sampler.peak_bytes or None
    memory: dict[str, Any] = {
        "host_peak_bytes": host_peak,
        "peak_processes": sampler.peak_processes or None,
    }
    result = progress.result or {}
    own_rss = result.get("own_peak_rss_bytes")
    if own_rss and host_peak is not None:
        memory["host_peak_bytes"] = max(host_peak, own_rss)
    if on_cuda:
        peak = result.get("peak_bytes") or progress.cuda_peak
        memory["peak_memory_bytes"] = peak
        memory["alloc_retries"] = result.get("alloc_retries")
        method = progress.context_method or "unknown"
        memory["memory_source"] = f"cuda: peak reserved + context ({method})"
        if progress.cap_fraction is not None:
            memory["memory_source"] += (
                f"; allocator capped at {progress.cap_fraction:.1%} of the card"
            )
    elif nproc > 1:
        memory["peak_memory_bytes"] = own_rss
        memory["memory_source"] = f"cpu: peak RSS of the busiest of {nproc} ranks"
    else:
        memory["peak_memory_bytes"] = memory["host_peak_bytes"]
        memory["memory_source"] = "cpu: process-tree memory (trial RSS + workers' USS)"
        if not sampler.exact:
            memory["memory_source"] = "cpu: process-tree RSS (workers' USS unavailable)"
    if nproc > 1:
        memory["memory_source"] += f"; per rank, {nproc} ranks under torchrun"
    return memory


def _verdict(
    outcome: Literal["result", "exited", "timeout", "budget", "pruned"],
    progress: _Progress,
    *,
    peak: int | None,
    budget_bytes: int | None,
    timeout_s: float,
    on_cuda: bool,
    log_path: Path,
    returncode: int | None,
) -> tuple[BurstStatus, str, dict[str, Any]]:
    """The burst's status, its reason and the result's extra fields, from how the watch
    ended and what the trial sent."""
    if outcome == "budget":
        return (
            "oom",
            f"the process tree's memory reached {format_bytes(peak)}, past the budget "
            f"of {format_bytes(budget_bytes)}, during {progress.stage}; stopped",
            {},
        )
    if outcome == "timeout":
        return (
            "timeout",
            f"no result after {timeout_s:g} s, during {progress.stage}; process group killed",
            {},
        )
    if outcome == "pruned":
        return "pruned", f"stopped by on_step after timed step {len(progress.step_times)}", {}
    result = progress.result
    if result is None:
        tail = _log_tail(log_path)
        return (
            "crash",
            f"the trial process {_describe_exit(returncode)} without a result, during "
            f"{progress.stage}" + (f"; last output: {tail}" if tail else ""),
            {},
        )
    extra = {k: result[k] for k in ("eval_loss", "checkpoint_bytes") if result.get(k) is not None}
    status, reason = result["status"], result.get("reason", "")
    if status == "ok" and not on_cuda and budget_bytes and peak and peak > budget_bytes:
        # Between two samples, but the trial's own high-water mark saw it.
        status = "oom"
        reason = f"peak {format_bytes(peak)} passed the budget of {format_bytes(budget_bytes)}"
    return status, reason, extra


def _reap_tree(sampler: ProcessTreeSampler) -> None:
    """Make sure no process of the trial's tree is left (one that left the group too)."""
    procs = [p for p in sampler.processes()[1:] if _alive(p)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if procs:
        psutil.wait_procs(procs, timeout=5)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _watch(
    *,
    read_fd: int,
    leader: psutil.Process | None,
    sampler: ProcessTreeSampler,
    progress: _Progress,
    started: float,
    deadline: float,
    on_step: Callable[[int, float], bool] | None,
) -> Literal["result", "exited", "timeout", "budget", "pruned"]:
    """Read the trial's messages until it sends a result, dies, times out, passes the
    budget or is pruned."""
    buffer = b""

    def handle(lines: list[bytes]) -> Literal["result", "pruned"] | None:
        for raw in lines:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # a partial line from a killed trial
            kind = msg.get("type")
            if kind == "stage":
                progress.stage = str(msg.get("name"))
            elif kind == "context":
                progress.context_bytes = int(msg["bytes"])
                progress.context_method = str(msg.get("method"))
            elif kind == "cap":
                progress.cap_fraction = msg.get("fraction")
            elif kind == "ready":
                progress.overhead_s = time.perf_counter() - started
                if msg.get("threads") is not None:
                    progress.threads = int(msg["threads"])
                progress.stage = progress.next_stage()
            elif kind in ("warmup", "step"):
                seconds = float(msg["time_s"])
                (progress.warmup_times if kind == "warmup" else progress.step_times).append(seconds)
                progress.losses.append(float(msg["loss"]))
                if msg.get("graphs") is not None:
                    progress.graphs = int(msg["graphs"])
                    if kind == "warmup":
                        progress.graphs_after_warmup = progress.graphs
                if msg.get("peak_bytes") is not None:
                    progress.cuda_peak = int(msg["peak_bytes"])
                progress.stage = progress.next_stage()
                if (
                    kind == "step"
                    and on_step is not None
                    and on_step(int(msg["index"]), seconds) is False
                ):
                    return "pruned"
            elif kind == "result":
                progress.result = msg
                return "result"
        return None

    def read_available(block_s: float) -> bool:
        """Read what the pipe holds; False at end of file."""
        nonlocal buffer
        ready, _, _ = select.select([read_fd], [], [], block_s)
        if not ready:
            return True
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            return False
        buffer += chunk
        return True

    def drain_lines() -> list[bytes]:
        nonlocal buffer
        *lines, buffer = buffer.split(b"\n")
        return lines

    while True:
        if sampler.over_budget_bytes is not None:
            return "budget"
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return "timeout"
        open_ = read_available(min(remaining, POLL_S))
        outcome = handle(drain_lines())
        if outcome is not None:
            return outcome
        if not open_ or _exited(leader):
            # Whatever the trial wrote before it ended is in the pipe: read it all.
            while open_ and select.select([read_fd], [], [], 0.0)[0]:
                open_ = read_available(0.0)
            outcome = handle(drain_lines())
            if outcome is not None:
                return outcome
            if sampler.over_budget_bytes is not None:
                return "budget"
            return "exited"
