"""Temporary folders named after the process that makes them (``PID-START``, START its
start time in hex seconds), so that a later process can tell a folder whose maker is
gone, killed before it could remove it, from one still being written, and remove it.

A trial's folder (``autotune.burst.process``) and a token cache entry being built
(``autotune.data.token_cache``) are named so: SIGKILL, the out-of-memory killer, or a stop
signal before any handler leave them behind, and the next burst, or the next build in
that cache, removes them.
"""

from __future__ import annotations

import psutil

__all__ = ["maker_alive", "maker_tag"]

# The start time as its maker and a later reader each compute it: the same within this.
_SAME_START_S = 2.0


def maker_tag(process: psutil.Process | None = None) -> str:
    """``PID-START`` of ``process`` (this one by default)."""
    maker = process if process is not None else psutil.Process()
    return f"{maker.pid}-{int(maker.create_time()):x}"


def maker_alive(name: str) -> bool:
    """Whether the process that made the folder named ``PID-START-ANYTHING`` still runs:
    False where no process has the pid, or another one does (the pid reused since: its
    start time differs). A name that is not such (another program's), a process of
    another user's, or ``PID-ANYTHING`` (an older autotune's: the pid is all there is to
    go by) counts as alive: never removed."""
    pid, _, rest = name.partition("-")
    if not (pid.isascii() and pid.isdecimal()):
        return True
    start = rest.split("-", 1)[0] if "-" in rest else ""
    try:
        created = psutil.Process(int(pid)).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    try:
        return abs(created - int(start, 16)) < _SAME_START_S
    except ValueError:
        return True
