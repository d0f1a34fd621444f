"""The trial's channel to its parent (autotune/burst/channel.py): a parent gone breaks
the pipe, and the trial hears ``ParentGone`` once, with nothing printed after it."""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import pytest

from autotune.burst.channel import Channel, ParentGone


def test_a_broken_pipe_is_parent_gone_and_leaves_nothing_to_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under Python 3.13 the line that failed stayed in the stream's buffer, and its flush
    when the channel was collected failed again: "Exception ignored ... BrokenPipeError"
    and a traceback in the trial's stderr (Python 3.11 drops the line; this test fails
    without the fix under 3.13 only)."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # nobody reads: the parent is gone
    channel = Channel(write_fd)
    with pytest.raises(ParentGone):
        channel.send("stage", name="importing")
    del channel
    gc.collect()
    assert [u.exc_value for u in unraisable] == []
