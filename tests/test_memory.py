"""Memory accounting: the process-tree sampler on real processes (no torch), and the CUDA
accounting with a faked torch.cuda and a fake NVML."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from autotune.engine import memory
from autotune.engine.memory import ProcessTreeSampler, tree_memory_bytes

MB = 1_000_000


def _start(script: str) -> subprocess.Popen[str]:
    """A Python process running ``script``; returns once it printed 'ready'."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"helper process said {line!r}"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()


@pytest.fixture
def parent_with_child() -> Iterator[subprocess.Popen[str]]:
    # The parent holds 150 MB, its (exec'd, not forked) child 100 MB of its own.
    proc = _start(
        """
        import subprocess, sys, time
        data = b"\\x01" * 150_000_000
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import time; d = b'\\\\x01' * 100_000_000; print('ready', flush=True); "
             "time.sleep(60)"],
            stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    yield proc
    _end(proc)


def test_tree_memory_counts_the_child(parent_with_child: subprocess.Popen[str]) -> None:
    own = psutil.Process(parent_with_child.pid).memory_info().rss
    total = tree_memory_bytes(parent_with_child.pid)
    assert own >= 150 * MB
    assert total >= own + 100 * MB  # the child's private memory is in the figure


def test_sampler_records_peak_and_process_count(parent_with_child: subprocess.Popen[str]) -> None:
    with ProcessTreeSampler(parent_with_child.pid, interval_s=0.01) as sampler:
        time.sleep(0.2)
    assert sampler.samples >= 3
    assert sampler.peak_processes == 2
    assert sampler.peak_bytes >= 250 * MB
    assert sampler.exact
    pids = {p.pid for p in sampler.processes()}
    assert parent_with_child.pid in pids and len(pids) == 2


def test_sampler_budget_callback_fires_once(parent_with_child: subprocess.Popen[str]) -> None:
    readings: list[int] = []
    sampler = ProcessTreeSampler(
        parent_with_child.pid,
        interval_s=0.01,
        budget_bytes=200 * MB,
        on_over_budget=readings.append,
    )
    with sampler:
        deadline = time.monotonic() + 5
        while not readings and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    assert len(readings) == 1
    assert readings[0] > 200 * MB
    assert sampler.over_budget_bytes == readings[0]


def test_forked_child_is_not_counted_twice() -> None:
    # A forked child maps the parent's 200 MB copy-on-write: its RSS repeats them, but it
    # holds almost nothing of its own. A DataLoader worker is such a child.
    proc = _start(
        """
        import os, sys, time
        data = b"\\x01" * 200_000_000
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.2)
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    try:
        root = psutil.Process(proc.pid)
        (child,) = root.children()
        rss_sum = root.memory_info().rss + child.memory_info().rss
        sampler = ProcessTreeSampler(proc.pid)
        reading = sampler.sample()
        assert sampler.peak_processes == 2
        if rss_sum < 1.5 * root.memory_info().rss:
            pytest.skip("this kernel does not show shared pages in a forked child's RSS")
        assert reading < 1.2 * root.memory_info().rss
        assert reading >= root.memory_info().rss
    finally:
        _end(proc)


def test_sampler_survives_the_process_ending() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = ProcessTreeSampler(proc.pid)
    proc.wait()
    assert sampler.sample() == 0
    assert sampler.peak_processes <= 1


def test_own_peak_rss_is_at_least_the_current_rss() -> None:
    peak = memory.own_peak_rss_bytes()
    if peak is None:
        pytest.skip("getrusage is not available here")
    assert peak >= psutil.Process().memory_info().rss * 0.9


def test_own_peak_rss_is_not_the_parents() -> None:
    # getrusage's ru_maxrss would report this process's 300 MB for a fresh child.
    ballast = b"\x01" * 300_000_000
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from autotune.engine.memory import own_peak_rss_bytes as f; print(f())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(ballast) == 300_000_000
    if out.stdout.strip() == "None":
        pytest.skip("no VmHWM on this system")
    assert int(out.stdout) < 150 * MB


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s=0"):
        ProcessTreeSampler(os.getpid(), interval_s=0)


# -- CUDA, faked ------------------------------------------------------------------------
GB = 1_000_000_000


class FakeNVML:
    """Enough of pynvml for autotune.engine.memory."""

    def __init__(self, *, processes: dict[int, int], device_used: list[int]) -> None:
        self.processes = processes
        self.device_used = device_used  # successive answers of nvmlDeviceGetMemoryInfo
        self.handles: list[tuple[str, Any]] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.handles.append(("index", index))
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.handles.append(("uuid", uuid))
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=u) for p, u in self.processes.items()]

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(used=self.device_used.pop(0))


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    torch = pytest.importorskip("torch")
    state = SimpleNamespace(
        reserved=1 * GB, max_reserved=3 * GB, free=70 * GB, total=80 * GB, fractions=[]
    )
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state.reserved)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: state.max_reserved)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (state.free, state.total))
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: SimpleNamespace(total_memory=state.total),
    )
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, device=None: state.fractions.append((fraction, device)),
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    state.device = torch.device("cuda", 0)
    return state


def test_context_from_nvml_process_figure(
    fake_cuda: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = FakeNVML(processes={os.getpid(): int(1.6 * GB), 12345: 9 * GB}, device_used=[])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    context = memory.measure_cuda_context(fake_cuda.device)
    assert context.method == "nvml-process"
    assert context.bytes == int(1.6 * GB) - 1 * GB  # NVML's figure minus torch's reserved


def test_context_from_device_delta_when_nvml_cannot_see_the_pid(
    fake_cuda: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = FakeNVML(processes={12345: 9 * GB}, device_used=[int(11.5 * GB)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    context = memory.measure_cuda_context(fake_cuda.device, device_used_before=10 * GB)
    assert context.method == "nvml-device-delta"
    assert context.bytes == int(0.5 * GB)  # 1.5 GB more on the device, 1 GB of it reserved


def test_context_from_mem_get_info_without_nvml(
    fake_cuda: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    context = memory.measure_cuda_context(fake_cuda.device, device_used_before=10 * GB)
    assert context.method == "mem-get-info"
    assert context.bytes == 80 * GB - 70 * GB - 1 * GB


def test_cap_sets_the_fraction_left_after_the_context(fake_cuda: SimpleNamespace) -> None:
    fraction = memory.cap_cuda_memory(8 * GB, device=fake_cuda.device, context_bytes=GB // 2)
    assert fraction == pytest.approx(7.5 / 80)
    assert fake_cuda.fractions == [(pytest.approx(7.5 / 80), fake_cuda.device)]


def test_cap_is_skipped_for_a_budget_of_the_whole_card(fake_cuda: SimpleNamespace) -> None:
    assert memory.cap_cuda_memory(80 * GB, device=fake_cuda.device, context_bytes=GB) is None
    assert fake_cuda.fractions == []


def test_cap_refuses_a_budget_the_context_fills(fake_cuda: SimpleNamespace) -> None:
    import torch

    with pytest.raises(torch.cuda.OutOfMemoryError, match="context alone"):
        memory.cap_cuda_memory(GB // 2, device=fake_cuda.device, context_bytes=GB)
    assert fake_cuda.fractions == []


def test_peak_is_max_reserved_plus_context(fake_cuda: SimpleNamespace) -> None:
    assert memory.cuda_peak_bytes(fake_cuda.device, context_bytes=GB // 2) == 3 * GB + GB // 2


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, ("index", 1)), ("2,3", ("index", 3)), ("GPU-aaa,GPU-bbb", ("uuid", "GPU-bbb"))],
)
def test_nvml_handle_follows_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, expected: tuple[str, Any]
) -> None:
    nvml = FakeNVML(processes={os.getpid(): 5 * GB}, device_used=[])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert memory.nvml_process_used_bytes(1) == 5 * GB
    assert nvml.handles == [expected]


def test_nvml_figures_are_none_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert memory.nvml_process_used_bytes(0) is None
    assert memory.nvml_device_used_bytes(0) is None
