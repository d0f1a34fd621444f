"""How autotune writes a file (atomically, with the mode the user's umask asks for) and
reads a user's data file (a regular file, up to a size).

Every file autotune writes that someone may rely on (a preset, a checkpoint, a tokenizer,
a token cache's metadata, a benchmark table) goes through :func:`atomic_writer`: the bytes
go to a temporary file in the same folder, are flushed and fsynced, then renamed over the
target with ``os.replace`` (or hard-linked into place when the target must not be
overwritten). A process killed mid-write leaves the old file or the new one, never half of
one, and at most a stray ``.NAME.*.tmp`` beside it, which nothing reads.

This module imports nothing heavy: the CLI's fast paths may use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from autotune.core.errors import DataError, UsageError
from autotune.core.units import format_bytes

__all__ = [
    "atomic_write_text",
    "atomic_writer",
    "dir_mode",
    "file_mode",
    "fsync_dir",
    "read_capped",
    "regular_file_size",
]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets under the current umask (``mkstemp`` would give 0600)."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """The mode a new folder gets under the current umask (``mkdtemp`` would give 0700)."""
    return 0o777 & ~_umask()


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where the platform refuses)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(
    path: str | Path, *, binary: bool = False, overwrite: bool = True
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit, put it in ``path``'s place.

    Text is UTF-8 with ``\\n`` line ends. An existing target keeps its mode; a new one gets
    the umask's. With ``overwrite=False`` an existing target is never clobbered, not even
    one that appears while writing: ``FileExistsError`` is raised and nothing changes.
    On any exception (a full disk, Ctrl-C) the temporary file is removed and the target is
    as it was.
    """
    target = Path(path)
    _refuse_special(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        handle: IO[Any]
        if binary:
            handle = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else file_mode())
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_new(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)


def _refuse_special(target: Path) -> None:
    """A UsageError where ``target`` exists and is no regular file (a device, a FIFO, a
    folder, or a link to one): renaming a file over ``/dev/full`` would replace the device
    node and report success."""
    try:
        st = target.stat()
    except OSError:
        return  # missing (or a dangling link): the rename creates a regular file
    if stat.S_ISREG(st.st_mode):
        return
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else _SPECIAL.get(stat.S_IFMT(st.st_mode))
    raise UsageError(
        f"{str(target)!r} is {kind or 'no regular file'}; autotune writes its outputs only as "
        "regular files: choose another path"
    )


def _link_new(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target`` only if ``target`` does not exist (atomically where the
    file system has hard links)."""
    try:
        os.link(tmp, target)  # fails if the target exists, even one that just appeared
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then replace
        if target.exists():
            raise FileExistsError(errno.EEXIST, "File exists", str(target)) from None
        os.replace(tmp, target)
    else:
        tmp.unlink()


def atomic_write_text(path: str | Path, text: str, *, overwrite: bool = True) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path, overwrite=overwrite) as handle:
        handle.write(text)


# -- reading a user's file ----------------------------------------------------------------

_SPECIAL = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
_SPECIAL |= {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFSOCK: "a socket"}


def regular_file_size(path: Path) -> int:
    """The size of data file ``path``; a DataError when it is missing, a folder, or no
    regular file (reading ``/dev/zero`` never ends, opening a FIFO waits for a writer)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DataError(f"data path {str(path)!r} does not exist") from None
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else _SPECIAL.get(stat.S_IFMT(st.st_mode))
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"data path {str(path)!r} is {kind or 'no file'}; expected a regular file")
    return st.st_size


def read_capped(path: Path, *, limit: int) -> bytes:
    """The bytes of the user's data file ``path``; a DataError beyond ``limit`` bytes."""
    size, raw = regular_file_size(path), b""
    if size <= limit:
        with path.open("rb") as f:
            raw = f.read(size + 1)
            # Longer than its size said: it grew since, or reports none (/proc files).
            while size < len(raw) <= limit and (more := f.read(min(2**24, limit + 1 - len(raw)))):
                raw += more
    if max(size, len(raw)) > limit:
        raise DataError(
            f"data file {str(path)!r} is larger than {format_bytes(limit)}, the most autotune "
            "reads from one file; split it into smaller files"
        )
    return raw
