"""A journal study's torn last record, cut off before anything is appended after it.

Optuna's journal file is one JSON record per line, appended under its lock. A write that
did not end (the disk filled up, the machine lost power, the process was killed mid-write)
leaves a last line that is cut short; so does a line added by hand that is no record.
Optuna's reader skips a bad *last* line, so the study still reads; but the next record
appended lands after it, the bad line is no longer last, and from then on every read of
the journal fails (``JSONDecodeError``): every trial of the study was lost to one torn
write. So every append (``MendingJournalBackend``, the journal storage autotune opens)
first cuts a last line that has no newline, under the lock it appends under, and a
search that opens a study first cuts a last line that is no record at all
(``mend_journal_tail``); the bytes cut are kept beside the journal (``<journal>.torn``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

__all__ = ["TORN_SUFFIX", "MendingJournalBackend", "mend_journal_tail"]

TORN_SUFFIX = ".torn"
_CHUNK = 1 << 16


class MendingJournalBackend(JournalFileBackend):
    """Optuna's journal file, each append preceded by the cut of a torn last line (one
    with no newline: a writer killed mid-write, while this search's workers go on
    appending), under the same lock. Otherwise Optuna's own append, record for record."""

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
        with _held(self._lock):
            _cut_bad_tail(Path(self._file_path), unended_only=True)
            with open(self._file_path, "ab") as journal:
                journal.write(text.encode("utf-8"))
                journal.flush()
                os.fsync(journal.fileno())


def mend_journal_tail(path: Path) -> str | None:
    """Cut a torn or unreadable last line off the journal at ``path`` before a search
    opens it (what Optuna's reader skips, and what the next append would turn into a
    study no read survives), appending the cut bytes to ``<path>.torn``; a note saying
    so, or None where the last record is whole (or there is no journal yet, or none this
    process may write: its append says why). Holds Optuna's lock on the journal
    meanwhile, so a record another worker is appending is never taken for a torn one."""
    if not path.is_file() or not os.access(path, os.R_OK | os.W_OK):
        return None
    try:
        with _held(JournalFileSymlinkLock(str(path))):
            cut = _cut_bad_tail(path, unended_only=False)
    except OSError as exc:
        if exc.filename is not None and str(exc.filename).endswith(TORN_SUFFIX):
            raise  # no room to keep the cut line (a full disk): the journal is left as is
        return None  # no lock can be made beside it (a read-only folder): as above
    if cut is None:
        return None
    what = "cut short" if not cut.endswith(b"\n") else "not a record"
    return (
        f"the journal {str(path)!r} ended in a line that was {what} ({len(cut):,} bytes: "
        "a write that did not end, or an edit); it is cut off before this search writes, "
        f"as a record after it would make the study unreadable, and kept in "
        f"{str(path) + TORN_SUFFIX!r}"
    )


@contextlib.contextmanager
def _held(lock: Any) -> Iterator[None]:
    """Optuna's journal lock held. Its ``acquire`` waits out a lock a killed writer left
    (30 s) and, stopped meanwhile (Ctrl-C), raised RuntimeError from its own clean-up:
    the stop is raised instead. A lock another process broke meanwhile is not ours to
    release (RuntimeError there too)."""
    try:
        lock.acquire()
    except RuntimeError as exc:
        stop = exc.__context__
        if isinstance(stop, BaseException) and not isinstance(stop, Exception):
            raise stop from None
        raise
    try:
        yield
    finally:
        with contextlib.suppress(RuntimeError):
            lock.release()


def _cut_bad_tail(path: Path, *, unended_only: bool) -> bytes | None:
    """Cut the journal's last line off where it has no newline or (``unended_only``
    false) is no record, keeping it in ``<path>.torn``; the bytes cut, or None. The
    lock is the caller's."""
    with open(path, "r+b") as journal:
        end = journal.seek(0, os.SEEK_END)
        if end == 0:
            return None
        if unended_only:
            journal.seek(end - 1)
            if journal.read(1) == b"\n":
                return None
        start = _last_line_start(journal)
        journal.seek(start)
        last = journal.read()
        if not last or (not unended_only and _is_record(last)):
            return None
        _keep(Path(f"{path}{TORN_SUFFIX}"), last)
        journal.truncate(start)
        journal.flush()
        os.fsync(journal.fileno())
        return last


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
    """A whole journal record: a line that ends and holds a JSON object with its
    ``op_code`` (``[1]`` or ``{}`` stopped Optuna's replay with a TypeError, a KeyError)."""
    if not line.endswith(b"\n"):
        return False
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError, or bytes that are no UTF-8
        return False
    return isinstance(record, dict) and "op_code" in record
