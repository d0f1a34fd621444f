"""How autotune writes a file (atomically, with the mode the user's umask asks for) and
opens a user's path (a regular file, read up to a size, or a refusal naming what it is).

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, overload

from autotune.core.errors import UsageError
from autotune.core.units import format_bytes

__all__ = [
    "atomic_write_text",
    "atomic_writer",
    "check_output_path",
    "dir_mode",
    "file_head",
    "file_mode",
    "fsync_dir",
    "is_text_path",
    "not_ours_problem",
    "output_problem",
    "path_kind",
    "read_capped",
    "regular_file_size",
    "unwritable_folder",
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
    check_output_path(path)
    target = Path(path)
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


def check_output_path(path: str | Path) -> None:
    """A UsageError where output ``path`` exists and is no regular file (a device, a FIFO, a
    folder, or a link to one): renaming a file over ``/dev/full`` would replace the device
    node and report success. So is a path that ends with a slash (``newdir/``): it names
    a folder, and writing there would make a file named ``newdir``."""
    where = os.fspath(path)
    if where.endswith(os.sep) or (os.altsep is not None and where.endswith(os.altsep)):
        raise UsageError(
            f"{where!r} ends with {where[-1]!r}, so it names a folder, not a file: give the "
            f"file's name after it ({where}NAME)"
        )
    try:
        kind = path_kind(path)
    except OSError:
        return  # missing (or cannot be looked at): making the file says why
    if kind is not None and not kind.endswith("which does not exist"):
        raise UsageError(
            f"{where!r} is {kind}; autotune writes its outputs only as regular files: "
            "choose another path"
        )


def output_problem(path: str | Path, *, example: str, make_folders: bool = True) -> str | None:
    """Why an output file cannot be written at ``path``, in words that start with the path
    (the caller puts its option's name before them), or None: a folder there (``example``
    names a file to give instead), a device, a FIFO or ``newdir/`` (``check_output_path``),
    a file standing where a folder should be (``p.yaml/x``), a folder that cannot be
    written in, and, unless ``make_folders``, a folder that does not exist. Whether a file
    there may be replaced is the caller's: ``not_ours_problem``, ``--overwrite``."""
    where = os.fspath(path)  # a str keeps the slash of "newdir/"
    target = Path(where).expanduser()
    if target.is_dir():
        return f"{where!r} is a directory; give a file such as {example}"
    try:
        check_output_path(where)
    except UsageError as exc:
        return str(exc)
    if not make_folders and not target.parent.exists():
        return f"{where!r}: the folder {str(target.parent)!r} does not exist"
    if problem := unwritable_folder(target.parent):
        return f"{where!r}: {problem}; give a path in a folder you can write to"
    return None


def unwritable_folder(folder: Path) -> str | None:
    """Why no file can be made in ``folder`` or the folders it would need (its nearest
    existing folder is probed with an unnamed temporary file): ``'p.yaml' is not a
    folder``, ``cannot write in '/' (Permission denied)``; None where one can."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{str(folder)!r} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"cannot write in {str(folder)!r} ({exc.strerror or exc})"
    return None


def not_ours_problem(
    path: str | Path, ours: Callable[[Path], bool], *, what: str, by: str
) -> str | None:
    """Why an output may not be written over the file at ``path``: it holds something that
    ``ours`` does not take for what an earlier run wrote (``what``, as ``an autotune
    preset``), and ``by`` (``the search``) would replace it. None where it may be: no
    regular file there, an empty one, or one of ours. An unreadable file is not known to
    be ours. The one rule of every output that replaces only its own files (a preset, a
    report, a trace): a search's output replaced notes.txt, ``report -o ckpt.pt`` a
    checkpoint, ``bench --trace`` a preset."""
    target = Path(path).expanduser()
    if not target.is_file():
        return None  # missing, or no regular file: check_output_path's to refuse
    try:
        if target.stat().st_size == 0:
            return None
    except OSError:
        pass
    else:
        if ours(target):
            return None
    return (
        f"exists and is not {what}, which {by} would replace; give another path, or move "
        "that file away first"
    )


def is_text_path(value: object) -> bool:
    """A path as ``open`` takes one for a name: a str or an ``os.PathLike`` of text (not
    bytes, not a number)."""
    return isinstance(value, str | os.PathLike) and isinstance(os.fspath(value), str)


def file_head(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of ``path`` (b"" where it cannot be read): enough to tell
    whose file it is."""
    try:
        with path.open("rb") as file:
            return file.read(size)
    except OSError:
        return b""


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


# -- opening a user's path ----------------------------------------------------------------
#
# One rule for every path a user names and autotune reads (a preset, a data file, a model
# file, a journal or SQLite storage, a run folder's side files): a regular file (through
# any symbolic links), read with a size bound, never blocking on a named pipe; anything
# else is a one-paragraph refusal that names what the path is. ``/dev/zero`` as a preset
# would be read until memory runs out, a FIFO would wait forever for a writer.

_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device"}
_KINDS |= {stat.S_IFBLK: "a block device", stat.S_IFIFO: "a named pipe (FIFO)"}
_KINDS |= {stat.S_IFSOCK: "a socket"}
_CHUNK = 2**24

ErrorFn = Callable[[str], Exception]


def _kind_of(st: os.stat_result) -> str:
    return _KINDS.get(stat.S_IFMT(st.st_mode), "no regular file")


def path_kind(path: str | Path) -> str | None:
    """What ``path`` is where it is no regular file, in words for a refusal (``a
    directory``, ``a named pipe (FIFO)``, ``a symbolic link to '/dev/zero', a character
    device``, ``a symbolic link to 'gone', which does not exist``); None for a regular
    file or a link to one. ``FileNotFoundError`` where nothing is there, another
    ``OSError`` where the path cannot be looked at. Looking never opens the path."""
    return _look(path)[0]


def _look(path: str | Path) -> tuple[str | None, os.stat_result | None]:
    """``path_kind`` and the path's ``os.stat`` (None where it is a dangling link)."""
    where = os.fspath(path)
    link = os.path.islink(where)
    target = f"a symbolic link to {os.readlink(where)!r}" if link else ""
    try:
        st = os.stat(where)
    except FileNotFoundError:
        if link:
            return f"{target}, which does not exist", None
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links", None
        raise
    if stat.S_ISREG(st.st_mode):
        return None, st
    return (f"{target}, {_kind_of(st)}" if link else _kind_of(st)), st


@overload
def regular_file_size(
    path: str | Path,
    *,
    what: str = ...,
    error: ErrorFn = ...,
    limit: int | None = ...,
    advice: str = ...,
    missing_ok: Literal[False] = ...,
) -> int: ...
@overload
def regular_file_size(
    path: str | Path,
    *,
    what: str = ...,
    error: ErrorFn = ...,
    limit: int | None = ...,
    advice: str = ...,
    missing_ok: bool,
) -> int | None: ...
def regular_file_size(
    path: str | Path,
    *,
    what: str = "file",
    error: ErrorFn = UsageError,
    limit: int | None = None,
    advice: str = "",
    missing_ok: bool = False,
) -> int | None:
    """The size of ``path``, a regular file (a link to one counts): else ``error(message)``,
    one paragraph starting with ``what`` and the path, naming what the path is instead (a
    directory, a device, a FIFO, a socket, a link to one of them) or saying it does not
    exist (None where ``missing_ok``). Beyond ``limit`` bytes: ``error`` too, with
    ``advice``. Nothing is opened."""
    where = str(path)
    try:
        kind, st = _look(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise error(f"{what} {where!r} does not exist") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise error(f"cannot read {what} {where!r}: {reason}") from None
    if kind is not None or st is None:
        raise error(f"{what} {where!r} is {kind}; expected a regular file")
    if limit is not None and st.st_size > limit:
        raise error(_too_large(what, where, limit, advice))
    return st.st_size


def _too_large(what: str, where: str, limit: int, advice: str) -> str:
    text = f"{what} {where!r} is larger than {format_bytes(limit)}, the most autotune reads"
    return f"{text} from one file" + (f"; {advice}" if advice else "")


def _open_for_reading(path: str | Path) -> int:
    """A descriptor of ``path`` that never waits: a FIFO put in the file's place after it
    was checked opens at once (and is refused by its ``fstat``)."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


def read_capped(
    path: str | Path,
    *,
    limit: int,
    what: str = "file",
    error: ErrorFn = UsageError,
    advice: str = "",
) -> bytes:
    """The bytes of the user's file ``path``, by the rule above: a regular file of at most
    ``limit`` bytes, else ``error(message)`` (see :func:`regular_file_size`). The open
    descriptor is checked again (the path may have changed since), and a file longer than
    its size said (it grew, or reports none: ``/proc`` files) is read to ``limit`` at most.
    A failure to read is ``error`` too, with the system's reason."""
    where = str(path)
    regular_file_size(path, what=what, error=error, limit=limit, advice=advice)
    try:
        fd = _open_for_reading(path)
    except OSError as exc:
        raise error(f"cannot read {what} {where!r}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(
                f"{what} {where!r} is {_kind_of(st)} (it changed after it was checked); "
                "expected a regular file"
            )
        try:
            raw = f.read(min(st.st_size, limit) + 1)
            while len(raw) <= limit and (more := f.read(min(_CHUNK, limit + 1 - len(raw)))):
                raw += more
        except OSError as exc:
            raise error(f"cannot read {what} {where!r}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise error(_too_large(what, where, limit, advice))
    return raw
