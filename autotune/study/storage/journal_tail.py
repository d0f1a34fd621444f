"""A journal study's torn last record, cut off before a search appends to it.

Optuna's journal file is one JSON record per line, appended under its lock. A write that
did not end (the disk filled up, the machine lost power, the process was killed mid-write)
leaves a last line that is cut short; so does a line added by hand that is no record.
Optuna's reader skips a bad *last* line, so the study still reads; but the next record
a search appends lands after it, the bad line is no longer last, and from then on every
read of the journal fails (``JSONDecodeError``): every trial of the study was lost to one
torn write. So a writer cuts a bad last line off first, under Optuna's own lock, and keeps
the bytes it cut beside the journal (``<journal>.torn``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO

__all__ = ["TORN_SUFFIX", "mend_journal_tail"]

TORN_SUFFIX = ".torn"
_CHUNK = 1 << 16


def mend_journal_tail(path: Path) -> str | None:
    """Cut a torn or unreadable last record off the journal at ``path`` (what Optuna's
    reader skips, and what the next append would turn into a study no read survives),
    appending the cut bytes to ``<path>.torn``; a note saying so, or None where the last
    record is whole (or there is no journal yet). Holds Optuna's lock on the journal
    meanwhile, so a record another worker is appending is never taken for a torn one."""
    from optuna.storages.journal import JournalFileSymlinkLock

    if not path.is_file() or not os.access(path, os.R_OK | os.W_OK):
        return None  # none yet, or one this search cannot write: its append says why
    lock = JournalFileSymlinkLock(str(path))
    try:
        lock.acquire()
    except OSError:  # no lock can be made beside it (a read-only folder): as above
        return None
    try:
        with open(path, "r+b") as journal:
            start = _last_line_start(journal)
            journal.seek(start)
            last = journal.read()
            if not last or _is_record(last):
                return None
            _keep(Path(f"{path}{TORN_SUFFIX}"), last)
            journal.truncate(start)
            journal.flush()
            os.fsync(journal.fileno())
    finally:
        lock.release()
    what = "cut short" if not last.endswith(b"\n") else "not a record"
    return (
        f"the journal {str(path)!r} ended in a line that was {what} ({len(last):,} bytes: "
        "a write that did not end, or an edit); it is cut off before this search writes, "
        f"as a record after it would make the study unreadable, and kept in "
        f"{str(path) + TORN_SUFFIX!r}"
    )


def _keep(kept: Path, line: bytes) -> None:
    """Append ``line`` to ``kept`` (durably), or leave ``kept`` as it was and raise an
    ``OSError`` naming it (a full disk: the journal is then not cut either)."""
    before = kept.stat().st_size if kept.exists() else None
    try:
        with open(kept, "ab") as handle:
            handle.write(line if line.endswith(b"\n") else line + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            if before is None:
                kept.unlink()
            else:
                os.truncate(kept, before)
        raise OSError(exc.errno, exc.strerror, str(kept)) from exc


def _last_line_start(journal: IO[bytes]) -> int:
    """Where the journal's last line starts: after the last newline that is not its final
    byte (0 for a journal of one line), read backwards in chunks."""
    end = journal.seek(0, os.SEEK_END)
    if end == 0:
        return 0
    journal.seek(end - 1)
    stop = end - 1 if journal.read(1) == b"\n" else end  # the final newline is the line's
    position = stop
    while position > 0:
        size = min(_CHUNK, position)
        position -= size
        journal.seek(position)
        newline = journal.read(size).rfind(b"\n")
        if newline >= 0:
            return position + newline + 1
    return 0


def _is_record(line: bytes) -> bool:
    """A whole journal record: a line that ends and holds one JSON object."""
    if not line.endswith(b"\n"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError, or bytes that are no UTF-8
        return False
