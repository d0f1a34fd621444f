"""The pipe between a burst's parent and its trial: one JSON object per line.

The parent opens it (``open_channel``: a pipe the trial inherits, or under torchrun a
FIFO every rank opens by its path) and reads it with ``LineReader``, which drops the
partial line a killed trial leaves. The trial writes it through ``Channel`` (``connect``);
under torchrun the ranks other than 0 speak only of their own failures
(``FailuresOnly``). The messages themselves are listed in ``autotune.burst.child``.
"""

from __future__ import annotations

import json
import os
import select
from pathlib import Path
from typing import Any, TextIO

from autotune.core import launch_env

__all__ = ["Channel", "FailuresOnly", "LineReader", "ParentGone", "connect", "open_channel"]


# -- the parent's end -------------------------------------------------------------------
def open_channel(workdir: Path | None, nproc: int) -> tuple[int, int, str]:
    """(read end, write end, what the child is told): a pipe whose descriptor the child
    inherits; under torchrun, whose workers inherit none, a FIFO in ``workdir`` that every
    rank opens by its path (rank 0 reports, the others only their failures)."""
    if nproc == 1 or workdir is None:
        read_fd, write_fd = os.pipe()
        return read_fd, write_fd, str(write_fd)
    fifo = workdir / "channel.fifo"
    os.mkfifo(fifo, 0o600)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    return read_fd, write_fd, str(fifo)


class LineReader:
    """Whole lines from the read end of the channel, as they arrive."""

    def __init__(self, read_fd: int) -> None:
        self.read_fd = read_fd
        self._buffer = b""

    def read(self, block_s: float) -> bool:
        """Read what the pipe holds, waiting up to ``block_s``; False at end of file."""
        ready, _, _ = select.select([self.read_fd], [], [], block_s)
        if not ready:
            return True
        chunk = os.read(self.read_fd, 1 << 16)
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def read_rest(self, open_: bool) -> bool:
        """Read whatever the pipe still holds without waiting (the trial has ended: all it
        wrote is there); False once at end of file."""
        while open_ and select.select([self.read_fd], [], [], 0.0)[0]:
            open_ = self.read(0.0)
        return open_

    def lines(self) -> list[bytes]:
        """The complete lines read so far; a partial last line waits for its end."""
        *lines, self._buffer = self._buffer.split(b"\n")
        return lines


# -- the trial's end --------------------------------------------------------------------
class ParentGone(BaseException):
    """The parent closed the channel (it was killed outright): nobody is left to hear the
    trial, which ends quietly once its folder is removed (``autotune.burst.child``). A
    BaseException, so that no handler of the trial's (or the model's) takes it for an
    error of the model."""


class Channel:
    """JSON lines to the parent; ``ParentGone`` once the parent is gone."""

    def __init__(self, fd: int) -> None:
        self._out: TextIO = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, kind: str, **fields: Any) -> None:
        try:
            self._out.write(json.dumps({"type": kind, **fields}) + "\n")
            self._out.flush()
        except BrokenPipeError:
            self._discard()
            raise ParentGone from None

    def _discard(self) -> None:
        """Point the broken pipe's descriptor at /dev/null: the line that failed stays in
        the stream's buffer, and its flush when the stream is collected would fail again
        ("Exception ignored ... BrokenPipeError" on stderr, under Python 3.13, which
        collects it before the trial's ``os._exit``)."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._out.fileno())
        finally:
            os.close(devnull)


class FailuresOnly(Channel):
    """A rank other than 0 under torchrun: it speaks only to report its own failure (an
    out-of-memory, an error); rank 0 reports the steps and the result."""

    def __init__(self, fd: int, rank: int) -> None:
        super().__init__(fd)
        self.rank = rank

    def send(self, kind: str, **fields: Any) -> None:
        if kind == "result" and fields.get("status") != "ok":
            fields["reason"] = f"rank {self.rank}: {fields.get('reason', '')}"
            super().send(kind, **fields)


def connect(arg: str) -> Channel:
    """The parent's pipe: a descriptor number, or under torchrun (whose workers inherit no
    descriptors) the path of a FIFO every rank opens; ranks other than 0 filtered."""
    fd = int(arg) if arg.isascii() and arg.isdecimal() else os.open(arg, os.O_WRONLY)
    rank = launch_env.rank()
    return Channel(fd) if rank == 0 else FailuresOnly(fd, rank)
