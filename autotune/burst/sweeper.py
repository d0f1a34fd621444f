"""Removes a trial's temporary folder once every process of the trial's group has ended.

Two moments leave a folder that no live process would remove, and each starts this
process first, in a session of its own: it waits until no live process is left in the
group, then removes the folders whose names begin with the one it was given.

- A trial whose search was killed outright removes its own folder (``autotune.burst.child``)
  and then ends its whole process group. But the trial's main thread runs on while its
  parent-watching thread removes the folder: a DataLoader worker it starts in that moment
  writes its ``pymp-*`` folder after the removal, and the group's end leaves it behind
  (the kill suite on CI: one folder in 50 kills, SIGKILL while a burst started its
  worker). The trial starts a sweeper of its folder before it removes it.
- A search that kills a one-process trial outright (pruned for outside load, timed out,
  over its budget) leaves the folder the trial made to its own sweep after the burst; a
  search killed between the two left it (the kill suite on CI: one in 50 kills). The
  search starts a sweeper of the trial's folders (``autotune-burst-PID-START-``) before
  the kill.

Run by path (``python -I -S sweeper.py PGID FOLDER``), it imports the standard library
only: a fresh interpreter without site-packages starts in about 20 ms (25 ms of CPU), and
needs nothing of the trial's environment to find its modules.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["group_alive", "start_sweeper"]

FOLDER_PREFIX = "autotune-burst-"  # autotune.burst.process.WORKDIR_PREFIX: never a user's
WAIT_S = 60.0  # a group that outlives this (a process stuck in the kernel): remove anyway
_POLL_S = 0.02


def start_sweeper(pgid: int, folder: Path) -> subprocess.Popen[bytes]:
    """Start the process that removes ``folder`` (and the folders beside it whose names
    begin with its name) once group ``pgid`` has ended; it runs in a session of its own,
    so that ending the group does not end it."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(pgid), str(folder)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )  # fmt: skip


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie does not: it writes
    nothing, and its parent may never reap it). Read from /proc; elsewhere, whether the
    group can still be signalled."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isascii() and name.isdecimal()]
    except OSError:
        return _signallable(pgid)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                line = stat.read()
        except OSError:  # ended since the listing
            continue
        # pid (comm) state ppid pgrp ...: the name may hold spaces and parentheses
        state, _ppid, pgrp = line[line.rfind(b")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            return True
    return False


def _signallable(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not (argv[0].isascii() and argv[0].isdecimal()):
        print("usage: sweeper.py PGID FOLDER", file=sys.stderr)
        return 2
    pgid, folder = int(argv[0]), Path(argv[1])
    if not folder.name.startswith(FOLDER_PREFIX) or len(folder.name) <= len(FOLDER_PREFIX):
        return 2  # not a trial's folder: never remove a user's
    deadline = time.monotonic() + WAIT_S
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    try:
        names = [n for n in os.listdir(folder.parent) if n.startswith(folder.name)]
    except OSError:  # the temporary folder itself is gone
        return 0
    for name in names:
        shutil.rmtree(folder.parent / name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
