"""Shared fixtures. Its presence also puts tests/ on sys.path (pytest's default "prepend"
import mode), so test modules anywhere below can import the helpers beside it; the
shipped fakes are in ``autotune.testing``."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.machine.hardware import probe
from autotune.machine.profile import HardwareProfile
from autotune.testing.nvml import FakeGPU, gpu_stack, no_gpu_stack


def pytest_configure(config: pytest.Config) -> None:
    """pytest writes each test's name into ``PYTEST_CURRENT_TEST``, and a trial's zygote
    serves only the environment it started with (``autotune.burst.zygote``): every test
    paid a zygote's start (torch imported, 3-4 s here) for its first burst. The variable
    is left unset, so the tests of one process share their zygotes as a search's trials
    do; the tests that need a zygote of their own give it another environment."""
    import _pytest.runner

    def leave_unset(item: pytest.Item, when: str | None) -> None:
        os.environ.pop("PYTEST_CURRENT_TEST", None)

    if hasattr(_pytest.runner, "_update_current_test_var"):
        _pytest.runner._update_current_test_var = leave_unset  # type: ignore[assignment]


@pytest.hookimpl(optionalhook=True)  # a machine without pytest-xdist runs the tests too
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many processes run the tests (``-n auto``, in pyproject.toml's addopts): the
    default tier in as many as the machine has cores (most of its time is spent waiting
    on trial processes and timers, which overlap), every other selection (``-m slow``,
    ``-m gpu``) in this one process. The slow tier's kill loops and real searches watch
    process trees and time; its bursts already use every core."""
    if config.option.markexpr != "not slow":
        return 0
    return max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)


@pytest.fixture
def fake_h100_profile() -> HardwareProfile:
    """A probed profile of this machine's CPU plus one faked H100 (cuda:0) through NVML."""
    nvml, cuda = gpu_stack([FakeGPU()])
    return probe(nvml=nvml, cuda=cuda)


@pytest.fixture
def cpu_only_profile() -> HardwareProfile:
    """A probed profile of this machine with every GPU hidden: the device is the CPU."""
    nvml, cuda = no_gpu_stack()
    return probe(nvml=nvml, cuda=cuda)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path (``/tmp/at-XXXX``), as a user's TMPDIR usually
    is: a burst makes its trial's folder in it (under a long one, such as pytest's own
    folders, it goes to /tmp instead: ``autotune.burst.process.make_workdir``)."""
    folder = Path(tempfile.mkdtemp(prefix="at-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread for the test: tiny models run faster on one, and much faster
    when other jobs share this machine's two cores. Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def unwatched_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process searches do not watch the machine unless a test gives them a watch: the
    tests share the machine with whatever else runs, and a fake burst's figures do not
    come from the machine anyway (tests/study/session/test_contention.py drives the watch with a
    fake process table). Searches run as subprocesses watch as users' do."""
    import autotune.study.session.api

    monkeypatch.setattr(autotune.study.session.api, "WATCH_REAL_BURSTS", False)


@pytest.fixture
def sigint_not_ignored() -> Iterator[None]:
    """SIGINT as a terminal leaves it, in the test's own process and so in every process
    it starts: CI runs the tests as a background command (``cmd &`` in a script), which
    starts with SIGINT ignored, and an ignored signal stays ignored through fork and exec
    (tests/child_signals.py does the same for a child alone)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
