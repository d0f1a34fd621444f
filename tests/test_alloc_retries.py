"""The burst reports the CUDA allocator's retries (``num_alloc_retries``): read in the
trial process, carried to the ``BurstResult``; faked here, no GPU needed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from autotune.burst import trial as _trial
from autotune.burst.result import BurstResult
from autotune.burst.trial_report import BurstProgress, memory_figures


def test_the_child_reads_num_alloc_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {"num_alloc_retries": 3})
    assert _trial.alloc_retries(torch.device("cuda", 0)) == 3
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {})
    assert _trial.alloc_retries(torch.device("cuda", 0)) == 0


def test_a_broken_cuda_state_gives_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(device: Any = None) -> dict[str, int]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "memory_stats", broken)
    assert _trial.alloc_retries(torch.device("cuda", 0)) is None


def test_the_parent_carries_the_retries_to_the_result() -> None:
    progress = BurstProgress(result={"peak_bytes": 5 * 10**9, "alloc_retries": 2})
    sampler: Any = SimpleNamespace(peak_bytes=10**9, peak_processes=1, exact=True)
    figures = memory_figures(progress, sampler, on_cuda=True)
    assert figures["alloc_retries"] == 2 and figures["peak_memory_bytes"] == 5 * 10**9
    result = BurstResult(status="ok", **figures)
    assert BurstResult.from_dict(result.to_dict()).alloc_retries == 2
    # a CPU burst has no allocator retries to report
    assert "alloc_retries" not in memory_figures(progress, sampler, on_cuda=False)
