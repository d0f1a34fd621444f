"""Contention: was something outside the search competing for the device while it measured?

``MachineWatch`` runs a daemon thread in the search process that samples the machine every
``interval_s`` and keeps the samples; ``watch.window(since, until)`` aggregates the ones
overlapping a time window into a ``Load`` whose ``busy`` says whether that measurement was
disturbed.

* **CPU** (every device): the cores used by processes *outside* the tree rooted at
  ``root_pid`` (the search process by default; the tree is it and its descendants at
  sample time, so burst children, DataLoader workers and Inductor compile workers are
  ours), from per-process ``cpu_times`` deltas keyed by ``(pid, create_time)`` so a
  reused PID is a new process. A process once ours stays ours (an orphaned worker
  reparented to init is still the search's). A process first seen after the first sample
  was born since the previous one, so all its CPU time counts in that interval. The host's
  ``steal`` time (a VM neighbour) counts as outside load too. Load is in cores:
  CPU-seconds over wall-seconds.
* **CUDA** (``device="cuda:N"``), through NVML: the compute and graphics processes on our
  device that are not in our tree, and the device's utilization sampled while none of our
  bursts runs (the caller marks bursts: ``with watch.burst(): ...``). A PID that NVML
  reports but this machine's process table does not hold (a container with its own PID
  namespace) cannot be attributed and is left out; the idle utilization still sees it if
  it computes. Without NVML, or when it fails, the GPU side reads "unknown" and the CPU
  side goes on.

Not seen: a process that is born and exits between two samples (CPU time of reaped
children is not attributed), so a build spawning sub-second compiler processes is
undercounted.

Cost, measured on the 2-core dev VM with 92 processes: one sample takes 4.8 ms of CPU
(10 ms wall on the loaded machine), ``psutil.process_iter`` reading ``/proc/<pid>/stat``
once per process, about 50 us each: 0.5% of a core at the default 1 s interval. It grows
linearly with the number of processes (a 1,000-process host: ~50 ms, 5% of a core).

``disturbed_steps(step_times)`` is the other signal: a burst's own step times.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import psutil

from autotune.burst.result import percentile
from autotune.config.machine_limits import usable_cores
from autotune.core.errors import describe_exception
from autotune.core.plain import from_plain
from autotune.engine.memory import nvml_handle

__all__ = [
    "BUSY_CORES",
    "BUSY_GPU_UTIL",
    "DISTURBED_RATIO",
    "GPU_SETTLE_S",
    "Load",
    "MachineWatch",
    "ProcessRow",
    "disturbed_steps",
]

# One CPU-bound outside process is ~1 core; on a 2-core machine that halves a CPU trial's
# throughput. Half a core (sustained over the window) is well above background noise
# (shell, sshd, journald: ~0.05 cores here) and catches one contender even when the
# scheduler gives it only half a core against a trial that uses both.
BUSY_CORES = 0.5
# Percent of the time a kernel ran on the GPU while none of our bursts did. An idle card
# reads 0; a display or monitoring agent a few percent; another job's training tens.
BUSY_GPU_UTIL = 10.0
# NVML's utilization covers the last 1/6 s to 1 s (by product): a sample taken this soon
# after our burst ended may still see our own kernels.
GPU_SETTLE_S = 1.0
# A quiet burst's p90/median on this machine is 1.0-1.1; one disturbed by an outside
# CPU-bound job measured 21.8 s p90 against a 2.8 s median.
DISTURBED_RATIO = 2.0

# One process as the sampler reads it: pid, ppid, create_time (epoch seconds, as psutil
# gives it), CPU seconds used so far (user + system, its reaped children excluded).
ProcessRow = tuple[int, int, float, float]

GpuState = Literal["none", "watched", "unknown"]


@dataclass(frozen=True, kw_only=True)
class Load:
    """What the machine did outside the search over a window of samples.

    ``outside_cores_mean`` is time-weighted over the samples; ``other_gpu_processes`` the
    PIDs (not ours) seen on our GPU; ``gpu_util_idle_mean`` the mean utilization sampled
    while none of our bursts ran (None: no such sample, or no GPU data); ``gpu`` "none"
    (not a CUDA device), "watched" or "unknown" (NVML missing or failing).
    """

    outside_cores_mean: float = 0.0
    outside_cores_max: float = 0.0
    other_gpu_processes: tuple[int, ...] = ()
    gpu_util_idle_mean: float | None = None
    gpu: GpuState = "none"
    samples: int = 0
    busy: bool = False

    def describe(self) -> str:
        """One line for a person, e.g. "another process used 1.3 cores (max 2.0) during
        this measurement"."""
        if self.samples == 0:
            return "no machine samples during this measurement"
        parts = []
        if self.other_gpu_processes:
            pids = ", ".join(str(pid) for pid in self.other_gpu_processes)
            noun = "process" if len(self.other_gpu_processes) == 1 else "processes"
            parts.append(f"GPU {noun} {pids} (not ours) ran on the device")
        if self.gpu_util_idle_mean is not None and self.gpu_util_idle_mean >= 1:
            parts.append(f"the GPU was {self.gpu_util_idle_mean:.0f}% busy between our bursts")
        if self.outside_cores_mean >= 0.05 or (self.busy and not parts):
            cores = (
                f"another process used {self.outside_cores_mean:.1f} cores "
                f"(max {self.outside_cores_max:.1f})"
            )
            parts.insert(0, cores)
        gpu_note = "; GPU load unknown" if self.gpu == "unknown" else ""
        if not self.busy:
            detail = f" ({'; '.join(parts)})" if parts else ""
            return f"the machine was quiet during this measurement{detail}{gpu_note}"
        return f"{'; '.join(parts)} during this measurement{gpu_note}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, rounded (2 decimals for cores, 1 for percent)."""
        util = self.gpu_util_idle_mean
        return {
            "outside_cores_mean": round(self.outside_cores_mean, 2),
            "outside_cores_max": round(self.outside_cores_max, 2),
            "other_gpu_processes": list(self.other_gpu_processes),
            "gpu_util_idle_mean": round(util, 1) if util is not None else None,
            "gpu": self.gpu,
            "samples": self.samples,
            "busy": self.busy,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Load:
        """The inverse of ``to_dict``: every field must be there; raises ValueError listing
        each missing or malformed one."""
        return from_plain(
            cls,
            data,
            path="load",
            required=tuple(f.name for f in fields(cls)),
            error=ValueError,
            context="not a machine load record",
        )


@dataclass(frozen=True, slots=True)
class _Sample:
    start: float
    end: float
    outside_cores: float
    gpu_others: tuple[int, ...] | None  # None: no GPU data in this sample
    gpu_util_idle: float | None  # None: a burst ran, ours was on the device, or no data


def disturbed_steps(step_times: Sequence[float], *, ratio: float = DISTURBED_RATIO) -> bool:
    """True when a burst's step times show interference: p90 > ``ratio`` x median.

    Needs at least 3 steps (fewer say nothing). The p90 is the burst's own
    (nearest-rank, ``autotune.burst.supervisor.percentile``). A quiet burst's p90/median here is
    1.0-1.1 and a step's own variation (an allocator growth, a GC pause) stays under 2x;
    an outside job that takes the cores for part of the burst makes the slowed steps
    several times the median (21.8 s p90 against 2.8 s).
    """
    if not ratio > 1:
        raise ValueError(f"ratio must be > 1, got {ratio=}")
    times = [float(t) for t in step_times]
    if any(not math.isfinite(t) or t < 0 for t in times):
        raise ValueError(f"step times must be finite and >= 0, got {times!r}")
    if len(times) < 3:
        return False
    return percentile(times, 90) > ratio * statistics.median(times)


class MachineWatch:
    """Samples the machine in a daemon thread; see the module docstring.

    ``with MachineWatch(device="cpu") as watch:`` (or ``start()``/``stop()``), mark each
    burst with ``with watch.burst():``, then ask ``watch.window(t0, t1).busy``.
    ``processes`` and ``steal`` replace the psutil readings (tests): a callable returning
    ``ProcessRow``s, and one returning the host's cumulative steal seconds (or None).
    """

    def __init__(
        self,
        *,
        device: str,
        interval_s: float = 1.0,
        busy_cores: float = BUSY_CORES,
        busy_gpu_util: float = BUSY_GPU_UTIL,
        root_pid: int | None = None,
        nvml: Any = None,
        processes: Callable[[], Iterable[ProcessRow]] | None = None,
        steal: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s=}")
        if not busy_cores >= 0:
            raise ValueError(f"busy_cores must be >= 0, got {busy_cores=}")
        if not 0 <= busy_gpu_util <= 100:
            raise ValueError(f"busy_gpu_util must be in [0, 100], got {busy_gpu_util=}")
        self.device = device
        self.interval_s = interval_s
        self.busy_cores = busy_cores
        self.busy_gpu_util = busy_gpu_util
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self._gpu_index = _cuda_index(device)
        self._nvml = nvml
        self._processes = processes or _psutil_processes
        self._steal = steal or _psutil_steal
        self._clock = clock
        self._cpu_cap = float(os.cpu_count() or 1)

        self._lock = threading.Lock()  # guards the samples and the burst marks
        self._sampling = threading.Lock()  # one sample at a time (thread, stop(), tests)
        self._samples: list[_Sample] = []
        self._bursts = 0
        self._last_burst_end: float | None = None
        self._prev_t: float | None = None
        self._prev_cpu: dict[tuple[int, float], float] = {}
        self._prev_steal: float | None = None
        self._ours: set[tuple[int, float]] = set()
        self._gpu_handle: Any = None
        self._gpu_ready = False  # NVML set up (or given up on)
        self._nvml_open = False
        self._gpu_error: str | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> MachineWatch:
        """Take the baseline sample now, then sample every ``interval_s`` in a thread."""
        if self._thread is not None:
            raise RuntimeError("this MachineWatch was already started")
        self._thread = threading.Thread(target=self._run, name="autotune-watch", daemon=True)
        if self._guarded_sample():
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (within a second), take a last sample, release NVML."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.ident is not None:
            thread.join(timeout=1.0)
            if thread.is_alive():
                return  # mid-sample on a stalled machine: a daemon, it ends with the process
            if self._error is None:
                self._guarded_sample()
        if self._nvml_open:
            self._nvml_open = False
            self._gpu_handle = None
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def __enter__(self) -> MachineWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def error(self) -> str | None:
        """What stopped the sampler, if an exception did (sampling ended there)."""
        return self._error

    @property
    def gpu_error(self) -> str | None:
        """Why the GPU side is unknown, if it is (the first NVML failure)."""
        return self._gpu_error

    # -- bursts ---------------------------------------------------------------------------
    def burst_started(self) -> None:
        """One of our bursts is running: GPU utilization now is ours, not sampled."""
        with self._lock:
            self._bursts += 1

    def burst_ended(self) -> None:
        with self._lock:
            self._bursts = max(0, self._bursts - 1)
            self._last_burst_end = self._clock()

    @contextlib.contextmanager
    def burst(self) -> Iterator[None]:
        self.burst_started()
        try:
            yield
        finally:
            self.burst_ended()

    # -- queries --------------------------------------------------------------------------
    def now(self) -> float:
        """The watch's clock (the one ``window`` takes times in)."""
        return self._clock()

    def window(self, since: float, until: float | None = None) -> Load:
        """The load over the samples overlapping ``[since, until]`` (``clock`` times;
        ``until`` None: up to now)."""
        end = math.inf if until is None else until
        with self._lock:
            chosen = [s for s in self._samples if s.end > since and s.start < end]
        return self._aggregate(chosen)

    def load_since(self, t: float) -> Load:
        return self.window(t)

    def busy_now(self, last_s: float = 5.0) -> bool:
        """Whether the last ``last_s`` seconds were busy (the live warning)."""
        return self.window(self._clock() - last_s).busy

    def burst_threads(self, cores: int | None = None, last_s: float = 5.0) -> int | None:
        """torch's intra-op threads for a CPU burst starting now: None (torch's default, one
        per core) on a quiet machine; while outside processes hold cores, the cores they
        leave (at least one).

        Why: torch's CPU kernels split each operation over its threads and wait for the
        slowest; a thread that shares its core with another process arrives a scheduler
        slice late at every operation. Measured on the 2-core VM with one core busy
        (``benchmarks/threads_under_load.py``, BENCHMARKS.md): mu at micro-batch 1 ran at
        67 tokens/s on 2 threads and 777 on 1, and its ratio to micro-batch 8 went from
        1.58x quiet to 3.19x; on the core left it stayed at 1.56x. Contention distorts
        configs unequally unless each burst runs on the cores it actually has.
        """
        load = self.window(self._clock() - last_s)
        if not load.busy:
            return None
        cores = cores if cores is not None else usable_cores()
        free = round(cores - load.outside_cores_mean)
        return max(1, free) if free < cores else None

    def total(self) -> Load:
        """The load over the whole run."""
        return self.window(-math.inf)

    def _aggregate(self, samples: Sequence[_Sample]) -> Load:
        wall = sum(s.end - s.start for s in samples)
        mean = sum(s.outside_cores * (s.end - s.start) for s in samples) / wall if wall else 0.0
        peak = max((s.outside_cores for s in samples), default=0.0)
        others = tuple(sorted({pid for s in samples for pid in s.gpu_others or ()}))
        utils = [s.gpu_util_idle for s in samples if s.gpu_util_idle is not None]
        util = statistics.fmean(utils) if utils else None
        gpu: GpuState = "none"
        if self._gpu_index is not None:
            seen = any(s.gpu_others is not None for s in samples)
            gpu = "watched" if seen or not samples else "unknown"
        busy = bool(samples) and (
            mean >= self.busy_cores
            or bool(others)
            or (util is not None and util >= self.busy_gpu_util)
        )
        return Load(
            outside_cores_mean=mean,
            outside_cores_max=peak,
            other_gpu_processes=others,
            gpu_util_idle_mean=util,
            gpu=gpu,
            samples=len(samples),
            busy=busy,
        )

    # -- sampling -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self._guarded_sample():
                return

    def _guarded_sample(self) -> bool:
        try:
            self.sample()
        except Exception as exc:
            if self._error is None:
                self._error = describe_exception(exc)
            return False
        return True

    def sample(self) -> None:
        """Take one sample now (the thread does this every ``interval_s``); the first one
        only sets the baseline."""
        with self._sampling:
            now = self._clock()
            rows = list(self._processes())
            steal = self._steal()
            ours = self._our_pids(rows)
            outside_cpu = self._outside_cpu(rows, ours, now)
            if steal is not None and self._prev_steal is not None:
                outside_cpu += max(0.0, steal - self._prev_steal)
            self._prev_steal = steal
            gpu_others, gpu_util = self._gpu_sample(ours, {row[0] for row in rows}, now)
            start, self._prev_t = self._prev_t, now
            if start is None or now <= start:
                return
            cores = min(self._cpu_cap, outside_cpu / (now - start))  # clock-tick rounding
            record = _Sample(start, now, cores, gpu_others, gpu_util)
            with self._lock:
                self._samples.append(record)

    def _our_pids(self, rows: Sequence[ProcessRow]) -> set[int]:
        """The tree rooted at ``root_pid`` now, plus every process once ours (and its
        descendants); remembers them for the next sample."""
        children: dict[int, list[int]] = {}
        for pid, ppid, _, _ in rows:
            children.setdefault(ppid, []).append(pid)
        seeds = [self.root_pid] + [pid for pid, _, ct, _ in rows if (pid, ct) in self._ours]
        ours: set[int] = set()
        while seeds:
            pid = seeds.pop()
            if pid not in ours:
                ours.add(pid)
                seeds.extend(children.get(pid, ()))
        self._ours = {(pid, ct) for pid, _, ct, _ in rows if pid in ours}
        return ours

    def _outside_cpu(self, rows: Sequence[ProcessRow], ours: set[int], now: float) -> float:
        """CPU seconds used by processes outside our tree since the previous sample."""
        first = self._prev_t is None
        cap = self._cpu_cap * (now - self._prev_t) if self._prev_t is not None else 0.0
        total = 0.0
        current: dict[tuple[int, float], float] = {}
        for pid, _, create_time, cpu in rows:
            key = (pid, create_time)
            current[key] = cpu
            if first or pid in ours:
                continue
            before = self._prev_cpu.get(key, 0.0)  # not seen before: born since then
            total += min(cap, max(0.0, cpu - before))
        self._prev_cpu = current
        return total

    def _gpu_sample(
        self, ours: set[int], visible: set[int], now: float
    ) -> tuple[tuple[int, ...] | None, float | None]:
        """Other processes on our device and the idle utilization; (None, None) unknown."""
        handle = self._device_handle()
        if handle is None:
            return None, None
        try:
            pids = self._device_pids(handle)
        except Exception as exc:
            self._note_gpu_error(exc)
            return None, None
        others = tuple(sorted(pid for pid in pids if pid in visible and pid not in ours))
        with self._lock:
            idle = self._bursts == 0 and (
                self._last_burst_end is None or now - self._last_burst_end >= GPU_SETTLE_S
            )
        if not idle or any(pid in ours for pid in pids):
            return others, None
        try:
            util = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception as exc:
            self._note_gpu_error(exc)
            return others, None
        return others, util

    def _device_pids(self, handle: Any) -> set[int]:
        nvml = self._nvml
        pids = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        with contextlib.suppress(Exception):  # NotSupported on some cards and VMs
            pids |= {int(p.pid) for p in nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)}
        return pids

    def _device_handle(self) -> Any:
        """The NVML handle of our device, initialising NVML once; None: no GPU data."""
        if self._gpu_index is None or self._gpu_ready:
            return self._gpu_handle
        self._gpu_ready = True
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._nvml_open = True
            self._gpu_handle = nvml_handle(self._nvml, self._gpu_index)
        except Exception as exc:
            self._note_gpu_error(exc)
            self._gpu_handle = None
        return self._gpu_handle

    def _note_gpu_error(self, exc: BaseException) -> None:
        if self._gpu_error is None:
            self._gpu_error = describe_exception(exc)


def _cuda_index(device: str) -> int | None:
    """``cuda`` -> 0, ``cuda:N`` -> N, anything else (cpu, mps) -> None."""
    kind, _, index = device.partition(":")
    if kind != "cuda":
        return None
    if not index:
        return 0
    if not (index.isascii() and index.isdecimal()):  # as torch.device reads it
        raise ValueError(f"device must be cuda or cuda:N, got {device=}")
    return int(index)


def _psutil_processes() -> list[ProcessRow]:
    rows: list[ProcessRow] = []
    for proc in psutil.process_iter(["ppid", "create_time", "cpu_times"], ad_value=None):
        info = proc.info
        times, ppid, create_time = info["cpu_times"], info["ppid"], info["create_time"]
        if times is None or ppid is None or create_time is None:
            continue  # not ours to read (another user's, hidepid)
        rows.append((proc.pid, ppid, create_time, times.user + times.system))
    return rows


def _psutil_steal() -> float | None:
    """The host's cumulative steal seconds, all CPUs; None where the OS has no such count."""
    steal = getattr(psutil.cpu_times(), "steal", None)
    return float(steal) if steal is not None else None
