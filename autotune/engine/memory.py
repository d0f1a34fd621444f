"""Peak-memory accounting for a trial, the way the budget counts it (docs/design.md,
principle 3).

CPU: the memory held by the trial's whole process tree, sampled from the parent by
``ProcessTreeSampler``. The trial process counts with its resident set (RSS); each
descendant (a DataLoader worker) counts with its *private* memory (USS). A forked worker
shares the trial's pages copy-on-write, and its RSS repeats them: measured here, a worker
forked from a 430 MB torch process shows 357 MB of RSS but holds 1.7 MB of its own, so a
plain sum of RSS would charge ``num_workers=4`` five times the memory it uses. With no
workers the figure is exactly the trial's RSS.

CUDA (inside the trial): the caching allocator's peak reserved memory plus the CUDA
context (driver state, loaded kernels, library handles), which the allocator does not
see. The context is NVML's figure for this process minus what torch has reserved; where
NVML cannot see the process (no NVML, or a container whose PIDs NVML does not share) it
falls back to NVML's device-wide growth since before CUDA started, then to
``torch.cuda.mem_get_info`` (an upper bound: other processes' memory is included). A
budget below the card's memory is enforced with
``torch.cuda.set_per_process_memory_fraction`` on what is left after the context.

This module imports neither torch nor NVML at the top: the sampler runs in the parent,
which need not have either loaded.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psutil

if TYPE_CHECKING:
    import torch

__all__ = [
    "CudaContext",
    "ProcessTreeSampler",
    "cap_cuda_memory",
    "cuda_peak_bytes",
    "measure_cuda_context",
    "nvml_device_used_bytes",
    "nvml_handle",
    "nvml_process_used_bytes",
    "own_peak_rss_bytes",
    "tree_memory_bytes",
]

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


# -- CPU: the process tree ---------------------------------------------------------------
def _rss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_info().rss)
    except _GONE:
        return 0
    except psutil.AccessDenied:
        return 0


def _private(proc: psutil.Process) -> tuple[int, int] | None:
    """(USS, RSS at the same moment), or None where USS is unavailable or the process is gone."""
    try:
        full = proc.memory_full_info()
    except (*_GONE, psutil.AccessDenied, NotImplementedError, OSError):
        return None
    uss = getattr(full, "uss", None)
    if uss is None:
        return None
    return int(uss), int(full.rss)


def tree_memory_bytes(pid: int) -> int:
    """One reading: RSS of ``pid`` plus the private memory (USS, else RSS) of its descendants."""
    root = psutil.Process(pid)
    total = _rss(root)
    try:
        children = root.children(recursive=True)
    except _GONE:
        children = []
    for child in children:
        private = _private(child)
        total += private[0] if private is not None else _rss(child)
    return total


@dataclass
class _Descendant:
    proc: psutil.Process
    private: int  # USS at the last full reading (RSS where USS is unavailable)
    rss_then: int  # RSS at that reading


class ProcessTreeSampler:
    """Samples a process tree's memory on a thread, records the peak, enforces a budget.

    Every ``interval_s`` it reads the RSS of the root and of each known descendant (a few
    microseconds each). The private memory of a descendant needs a page-table walk
    (``/proc/PID/smaps_rollup``, ~1.5 ms for a torch process), so it is re-read when a
    descendant appears and then at most every ``rescan_s``, or less often if reading costs
    more than ``max_cost_fraction`` of the time; in between, a descendant's figure moves by
    its RSS change. The list of descendants is refreshed at the same cadence; descendants
    that outlive the root (orphaned workers) stay watched until they exit.

    When a reading passes ``budget_bytes``, ``on_over_budget(reading)`` is called once, on
    the sampler's thread (the burst kills the trial's process group there).
    """

    def __init__(
        self,
        pid: int,
        *,
        interval_s: float = 0.025,
        rescan_s: float = 0.2,
        max_cost_fraction: float = 0.05,
        budget_bytes: int | None = None,
        on_over_budget: Callable[[int], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s=}")
        self.pid = pid
        self.interval_s = interval_s
        self.rescan_s = rescan_s
        self.max_cost_fraction = max_cost_fraction
        self.budget_bytes = budget_bytes
        self.on_over_budget = on_over_budget
        self.peak_bytes = 0
        self.peak_processes = 0
        self.samples = 0
        self.over_budget_bytes: int | None = None  # the reading that passed the budget
        self.exact = True  # False once a descendant's private memory had to be taken as RSS
        self._root: psutil.Process | None = None
        self._descendants: dict[int, _Descendant] = {}
        self._next_full = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._root = psutil.Process(pid)
        except _GONE:
            self._root = None

    # -- readings ---------------------------------------------------------------------
    def _refresh_descendants(self) -> set[int]:
        """Add descendants not seen before (with a full reading); return their pids."""
        if self._root is None:
            return set()
        try:
            children = self._root.children(recursive=True)
        except _GONE:
            return set()
        new = set()
        for child in children:
            known = self._descendants.get(child.pid)
            if known is not None and known.proc == child:  # same pid, same process
                continue
            self._descendants[child.pid] = self._full_reading(child)
            new.add(child.pid)
        return new

    def _full_reading(self, proc: psutil.Process) -> _Descendant:
        private = _private(proc)
        if private is None:
            self.exact = False
            rss = _rss(proc)
            return _Descendant(proc=proc, private=rss, rss_then=rss)
        return _Descendant(proc=proc, private=private[0], rss_then=private[1])

    def sample(self) -> int:
        """Take one reading now; update the peak; return the reading in bytes."""
        with self._lock:
            now = time.monotonic()
            if now >= self._next_full:
                started = time.perf_counter()
                new = self._refresh_descendants()
                for pid, known in list(self._descendants.items()):
                    if pid not in new:
                        self._descendants[pid] = self._full_reading(known.proc)
                cost = time.perf_counter() - started
                self._next_full = now + max(self.rescan_s, cost / self.max_cost_fraction)
            total = _rss(self._root) if self._root is not None else 0
            alive = 1 if total else 0
            for pid, known in list(self._descendants.items()):
                rss = _rss(known.proc)
                if rss == 0 and not _running(known.proc):
                    del self._descendants[pid]
                    continue
                alive += 1
                total += max(0, known.private + rss - known.rss_then)
            self.samples += 1
            self.peak_bytes = max(self.peak_bytes, total)
            self.peak_processes = max(self.peak_processes, alive)
        if (
            self.budget_bytes is not None
            and total > self.budget_bytes
            and self.over_budget_bytes is None
        ):
            self.over_budget_bytes = total
            if self.on_over_budget is not None:
                self.on_over_budget(total)
        return total

    def processes(self) -> list[psutil.Process]:
        """Every process of the tree seen so far that may still be running."""
        with self._lock:
            procs = [d.proc for d in self._descendants.values()]
        if self._root is not None:
            procs.insert(0, self._root)
        return procs

    # -- the thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # never let a sampling hiccup kill the watchdog
                print(f"autotune: memory sampler: {type(exc).__name__}: {exc}", file=sys.stderr)
            self._stop.wait(self.interval_s)

    def start(self) -> ProcessTreeSampler:
        self._thread = threading.Thread(target=self._run, name="autotune-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> ProcessTreeSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def own_peak_rss_bytes() -> int | None:
    """This process's peak RSS since it started its program (no sampling gaps), if known.

    Linux's ``VmHWM``, the high-water mark of the current address space. Not
    ``getrusage().ru_maxrss``: that one survives ``exec`` and so includes the RSS of the
    forked copy of the parent (measured: 2.1 GB reported for a 14 MB child of a 2 GB
    parent). None on other systems.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


# -- CUDA -------------------------------------------------------------------------------
def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def nvml_handle(nvml: Any, device_index: int) -> Any:
    """The NVML handle of torch's ``cuda:device_index``, honouring CUDA_VISIBLE_DEVICES.

    Read from the environment, not from torch, so it works before CUDA is initialised.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return nvml.nvmlDeviceGetHandleByIndex(device_index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    entry = entries[device_index]
    if entry.isascii() and entry.isdecimal():  # as CUDA reads it
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def nvml_device_used_bytes(device_index: int) -> int | None:
    """Memory in use on the whole device, by every process, per NVML; None if unavailable."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(nvml_handle(nvml, device_index)).used)
    except Exception:
        return None


def nvml_process_used_bytes(device_index: int, pid: int | None = None) -> int | None:
    """Device memory NVML charges to ``pid`` (default: this process), as nvidia-smi shows.

    None where NVML is missing, does not report per-process figures, or cannot see the
    PID (a container with its own PID namespace).
    """
    nvml = _nvml()
    if nvml is None:
        return None
    pid = os.getpid() if pid is None else pid
    try:
        handle = nvml_handle(nvml, device_index)
        procs = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:
        return None
    for proc in procs:
        if proc.pid == pid:
            used = getattr(proc, "usedGpuMemory", None)
            return int(used) if used is not None else None
    return None


@dataclass(frozen=True, kw_only=True)
class CudaContext:
    bytes: int
    method: Literal["nvml-process", "nvml-device-delta", "mem-get-info"]


def measure_cuda_context(
    device: torch.device, *, device_used_before: int | None = None
) -> CudaContext:
    """Device memory this process holds outside the caching allocator (the CUDA context).

    Call it after CUDA is initialised (and ideally after a first matmul, which loads the
    cuBLAS kernels). ``device_used_before`` is NVML's device-wide used memory taken before
    this process touched CUDA, for the fallback when NVML cannot see this process.
    """
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.synchronize(device)
    reserved = int(torch.cuda.memory_reserved(device))
    used = nvml_process_used_bytes(index)
    if used is not None:
        return CudaContext(bytes=max(0, used - reserved), method="nvml-process")
    if device_used_before is not None:
        now = nvml_device_used_bytes(index)
        if now is not None:
            return CudaContext(
                bytes=max(0, now - device_used_before - reserved), method="nvml-device-delta"
            )
    free, total = torch.cuda.mem_get_info(device)
    return CudaContext(bytes=max(0, int(total) - int(free) - reserved), method="mem-get-info")


def cap_cuda_memory(budget_bytes: int, *, device: torch.device, context_bytes: int) -> float | None:
    """Make the caching allocator refuse to reserve more than ``budget - context``.

    Returns the fraction of the card set with ``set_per_process_memory_fraction``, or None
    when the budget is the card's memory or more (nothing to enforce). Raises
    ``torch.cuda.OutOfMemoryError`` when the context alone fills the budget.
    """
    import torch

    total = int(torch.cuda.get_device_properties(device).total_memory)
    if budget_bytes >= total:
        return None
    usable = budget_bytes - context_bytes
    if usable <= 0:
        raise torch.cuda.OutOfMemoryError(
            f"the CUDA context alone ({context_bytes} bytes) fills the budget of {budget_bytes} "
            "bytes"
        )
    fraction = usable / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def cuda_peak_bytes(device: torch.device, *, context_bytes: int) -> int:
    """Peak device memory as nvidia-smi would count it: peak reserved plus the context."""
    import torch

    return int(torch.cuda.max_memory_reserved(device)) + context_bytes
