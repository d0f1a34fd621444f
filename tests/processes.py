"""Reading a process that may end while it is read, for the kill tests."""

from __future__ import annotations

import psutil


def describe_live(process: psutil.Process, kind: str = "") -> str | None:
    """``process``'s pid and command line, or None once it has exited: a process can end,
    or become a zombie waiting for its reaper, between being listed and being read."""
    try:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"{process.pid} {kind}{' '.join(process.cmdline())[:120]}"
    except psutil.Error:  # gone, or a zombie, since it was listed
        return None


def left_behind() -> list[psutil.Process]:
    """This process's live descendants but its zygotes (``autotune.burst.zygote``: they
    outlive every trial on purpose; a trial one of them forked still counts)."""
    from autotune.burst.zygote import zygotes

    keep = zygotes.pids()
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in keep]
