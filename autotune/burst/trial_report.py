"""How a burst went, from the parent's side: what the trial reported (``BurstProgress``), and
the status, reason and memory figures the parent decides from it.

The outcome comes from the trial's messages alone, never from its log: ``ok``, ``oom``,
``nan`` and ``error`` are sent by the trial; ``timeout`` (killed at the deadline),
``crash`` (died without a result), ``pruned`` (``on_step`` or ``should_stop`` said stop)
and a CPU ``oom`` (the watchdog saw the tree pass the budget) are decided here
(``verdict``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

from autotune.burst.result import Minimum
from autotune.core.units import format_bytes, over_budget

if TYPE_CHECKING:
    from autotune.burst.result import BurstStatus
    from autotune.engine.memory import ProcessTreeSampler

__all__ = ["BurstProgress", "WatchOutcome", "describe_exit", "memory_figures", "verdict"]

# How the parent's watch of a trial ended.
WatchOutcome = Literal["result", "exited", "timeout", "budget", "pruned"]


@dataclass
class BurstProgress:
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
    stop_reason: str | None = None  # why the caller's ``should_stop`` stopped it
    minimum: Minimum = field(default_factory=Minimum)  # the phases' least time (CUDA)

    def recompiles(self) -> int | None:
        """Graphs torch.compile built during the timed steps (recompilation: dynamic shapes
        or a guard that failed); None without compile or without a warm-up."""
        if self.graphs is None or self.graphs_after_warmup is None:
            return None
        return max(0, self.graphs - self.graphs_after_warmup)

    def next_stage(self) -> str:
        k = len(self.warmup_times) + 1
        if not self.step_times and self.minimum.more_warmup(self.warmup_times, self.warmup):
            if k <= self.warmup:
                return f"warm-up step {k} of {self.warmup}"
            return f"warm-up step {k} (past {self.warmup}: steps are short)"
        if len(self.step_times) < self.steps:
            return f"timed step {len(self.step_times) + 1} of {self.steps}"
        return f"timed step {len(self.step_times) + 1} (past {self.steps}: steps are short)"

    def take(
        self,
        lines: list[bytes],
        *,
        started: float,
        on_step: Callable[[int, float], bool] | None,
    ) -> Literal["result", "pruned"] | None:
        """Record the trial's messages (``started``: the burst's start, for the overhead);
        ``result`` once the trial sent its result, ``pruned`` once ``on_step`` said stop."""
        for raw in lines:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # a partial line from a killed trial
            kind = msg.get("type")
            if kind == "result":
                self.result = msg
                if msg.get("context_bytes"):  # 0: CUDA failed before it was measured
                    # measured again at the end (kernels loaded during the steps grow it):
                    # the context the peak was computed with, so the two agree
                    self.context_bytes = int(msg["context_bytes"])
                return "result"
            if kind in ("warmup", "step"):
                seconds = self._step(kind, msg)
                if (
                    kind == "step"
                    and on_step is not None
                    and on_step(int(msg["index"]), seconds) is False
                ):
                    return "pruned"
            else:
                self._note(kind, msg, started=started)
        return None

    def _note(self, kind: str, msg: dict[str, Any], *, started: float) -> None:
        """A message about the set-up: its stage, the CUDA context, the cap, ready."""
        if kind == "stage":
            self.stage = str(msg.get("name"))
        elif kind == "context":
            self.context_bytes = int(msg["bytes"])
            self.context_method = str(msg.get("method"))
        elif kind == "cap":
            self.cap_fraction = msg.get("fraction")
        elif kind == "ready":
            self.overhead_s = time.perf_counter() - started
            if msg.get("threads") is not None:
                self.threads = int(msg["threads"])
            self.stage = self.next_stage()

    def _step(self, kind: str, msg: dict[str, Any]) -> float:
        """A warm-up or timed step: its time, its loss, the graphs and the CUDA peak."""
        seconds = float(msg["time_s"])
        (self.warmup_times if kind == "warmup" else self.step_times).append(seconds)
        self.losses.append(float(msg["loss"]))
        if msg.get("graphs") is not None:
            self.graphs = int(msg["graphs"])
            if kind == "warmup":
                self.graphs_after_warmup = self.graphs
        if msg.get("peak_bytes") is not None:
            self.cuda_peak = int(msg["peak_bytes"])
        self.stage = self.next_stage()
        return seconds


def memory_figures(
    progress: BurstProgress, sampler: ProcessTreeSampler, *, on_cuda: bool, nproc: int = 1
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
    if own_rss:  # a trial that ends within the sampler's first interval has only this
        memory["host_peak_bytes"] = max(host_peak or 0, own_rss)
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


def verdict(
    outcome: WatchOutcome,
    progress: BurstProgress,
    *,
    peak: int | None,
    budget_bytes: int | None,
    timeout_s: float,
    on_cuda: bool,
    log: IO[bytes],
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
        why = progress.stop_reason or "stopped by on_step"
        return "pruned", f"{why} after timed step {len(progress.step_times)}", {}
    result = progress.result
    if result is None:
        tail = log_tail(log)
        return (
            "crash",
            f"the trial process {describe_exit(returncode)} without a result, during "
            f"{progress.stage}" + (f"; last output: {tail}" if tail else ""),
            {},
        )
    kept = ("eval_loss", "checkpoint_bytes", "verify_s", "breakdown")
    extra = {k: result[k] for k in kept if result.get(k) is not None}
    status, reason = result["status"], result.get("reason", "")
    over = over_budget(peak, budget_bytes)
    if status == "ok" and not on_cuda and over is not None:
        # Between two samples, but the trial's own high-water mark saw it.
        status, reason = "oom", over
    return status, reason, extra


def describe_exit(returncode: int | None) -> str:
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


def log_tail(log: IO[bytes], limit: int = 300) -> str:
    """The last meaningful line of the trial's stderr, for context in a crash reason."""
    try:
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - 8192))
        lines = log.read().decode("utf-8", "replace").splitlines()
    except (OSError, ValueError):  # not seekable, or closed
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("File ", "Current thread", "Thread 0x", "Extension")):
            return text[:limit]
    return ""
