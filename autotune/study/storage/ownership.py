"""Who holds a study or a trial: owner records, first-wins claims, the one-search lock.

A study has one owner at a time for each claim: a lone search holds it from its first
trial to its preset (``exclusive_search``); the workers of a shared search hold it
together, and one of them claims the race and the preset (``FINISHING``). Both claims are
study system attributes written first-wins (``claim_study_attr``); a trial's owner is
this process's record (``trial_owner``), which ``owner_alive`` checks on this machine.

``optuna_glue`` (opening a study) and ``workers`` (several searches on one study) both
read these; this module imports neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import filelock
import optuna
from optuna.trial import TrialState

from autotune.core.errors import UsageError

__all__ = [
    "FINISHING",
    "SEARCHING",
    "claim_study_attr",
    "describe_owner",
    "exclusive_search",
    "host_name",
    "is_me",
    "journal_path",
    "owner_alive",
    "release_study_attr",
    "storage_file",
    "storage_files",
    "trial_owner",
]

FINISHING = "autotune:finishing"
SEARCHING = "autotune:searching"


# -- owner records ----------------------------------------------------------------------------


def host_name() -> str:
    """This machine's name as trial owners record it (``AUTOTUNE_HOST`` overrides it: the
    tests play a worker on another machine with it)."""
    return os.environ.get("AUTOTUNE_HOST") or socket.gethostname()


def trial_owner() -> dict[str, Any]:
    """This process, as a RUNNING trial records it: host, pid and the process's start time
    (a pid alone can be reused by another process after a crash)."""
    import psutil

    return {
        "host": host_name(),
        "pid": os.getpid(),
        "started": psutil.Process().create_time(),
    }


def is_me(owner: Any) -> bool:
    """Whether the owner record ``owner`` is this process."""
    return (
        isinstance(owner, Mapping)
        and owner.get("host") == host_name()
        and owner.get("pid") == os.getpid()
    )


def owner_alive(owner: Any) -> bool | None:
    """Whether the process that owns a trial still runs: None where it cannot be told (a
    trial on another machine, or recorded by no known process)."""
    import psutil

    if not isinstance(owner, Mapping) or owner.get("host") != host_name():
        return None
    try:
        if int(owner["pid"]) == os.getpid():  # this process opens the study: not running it
            return False
        process = psutil.Process(int(owner["pid"]))
        return abs(process.create_time() - float(owner["started"])) < 1.0
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def describe_owner(owner: Any) -> str:
    """``process 123 on host-a`` for an owner record."""
    if not isinstance(owner, Mapping):
        return "another process"
    host = owner.get("host")
    here = " on this machine" if host == host_name() else f" on {host}"
    return f"process {owner.get('pid', '?')}{here}"


# -- first-wins study attributes ------------------------------------------------------------


def claim_study_attr(study: optuna.Study, key: str, value: Any, *, steal: bool = False) -> Any:
    """Write study system attribute ``key`` = ``value`` unless another process holds it
    (it is set, not None); the holder's value either way (``value`` when this call won).
    ``steal``: take it from the current holder (which must still be the one read, so two
    stealers do not both win). Atomic on an RDB storage (an INSERT against the attribute
    table's unique key) and on a journal file (under a file lock beside it)."""
    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    study_id = study._study_id
    if isinstance(backend, optuna.storages.RDBStorage):
        return _claim_rdb(backend, study_id, key, value, steal=steal)
    with _journal_lock(storage):
        holder = storage.get_study_system_attrs(study_id).get(key)
        if holder is None or steal:
            storage.set_study_system_attr(study_id, key, value)
            return value
        return holder


def release_study_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Remove ``key`` if ``value`` still holds it."""
    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    if isinstance(backend, optuna.storages.RDBStorage):
        _delete_rdb(backend, study._study_id, key, json.dumps(value))
        return
    with _journal_lock(storage):
        if storage.get_study_system_attrs(study._study_id).get(key) == value:
            storage.set_study_system_attr(study._study_id, key, None)


def _claim_rdb(
    backend: optuna.storages.RDBStorage, study_id: int, key: str, value: Any, *, steal: bool
) -> Any:
    from sqlalchemy import exc, text

    select = text("SELECT value_json FROM study_system_attributes WHERE study_id = :s AND key = :k")
    insert = text(
        "INSERT INTO study_system_attributes (study_id, key, value_json) VALUES (:s, :k, :v)"
    )
    for _ in range(5):  # a stolen holder deleted under us: read again
        with backend.engine.connect() as conn:
            row = conn.execute(select, {"s": study_id, "k": key}).first()
        if row is not None:
            holder = json.loads(row[0])
            if holder is not None and not steal:
                return holder
            if not _delete_rdb(backend, study_id, key, row[0]):
                continue  # another process changed it between our read and our delete
        try:
            with backend.engine.begin() as conn:
                conn.execute(insert, {"s": study_id, "k": key, "v": json.dumps(value)})
            return value
        except exc.IntegrityError:
            steal = False  # someone else wrote it first: theirs
    with backend.engine.connect() as conn:
        row = conn.execute(select, {"s": study_id, "k": key}).first()
    return None if row is None else json.loads(row[0])


def _delete_rdb(
    backend: optuna.storages.RDBStorage, study_id: int, key: str, value_json: str
) -> bool:
    from sqlalchemy import text

    delete = text(
        "DELETE FROM study_system_attributes WHERE study_id = :s AND key = :k AND value_json = :v"
    )
    with backend.engine.begin() as conn:
        deleted = conn.execute(delete, {"s": study_id, "k": key, "v": value_json}).rowcount
    return bool(deleted)


@contextlib.contextmanager
def _journal_lock(storage: Any) -> Iterator[None]:
    """Wait for, then hold, an OS lock beside the journal file when the storage is a
    journal file (released by the OS if this process dies); else nothing (an in-memory
    storage of one process)."""
    path = getattr(getattr(storage, "_backend", None), "_file_path", None)
    if path is None:
        yield
        return
    with filelock.FileLock(f"{path}.autotune.lock"):
        yield


# -- one search at a time ------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_search(study: optuna.Study, name: str, *, storage: str) -> Iterator[None]:
    """One search process at a time on a study, from its first trial to its preset, so two
    searches never both run the baseline or race to write the preset (workers of one
    shared search do not take this: see ``workers.py``).

    In a SQLite or journal file (``storage``) the claim is an OS lock on a file beside it
    (``study.db.<study>-<hash>.lock``): atomic, so of two searches started at the same
    moment exactly one runs, and released by the OS when its process dies, kill -9
    included; the holder is also recorded in the study (``searching``), so a second
    search on this machine while that process lives is refused. A PostgreSQL or MySQL
    study, which has no file to lock, is claimed in the database itself: a row of the
    study's system attributes inserted against the table's unique key, so that of two
    searches exactly one wins. A claim left by a search that died is taken over: on this
    machine once its process is gone; from another machine once none of the study's
    trials runs under it."""
    with _file_lock(storage, name) as locked:
        holder = study.user_attrs.get("searching")
        if locked is False or owner_alive(holder):
            _refuse(name, holder)
        me = trial_owner()
        if locked is None:
            _claim_search(study, name, me)
        study.set_user_attr("searching", me)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # a storage gone away must not hide the error
                if study.user_attrs.get("searching") == me:
                    study.set_user_attr("searching", None)
                if locked is None:
                    release_study_attr(study, SEARCHING, me)


def _claim_search(study: optuna.Study, name: str, me: dict[str, Any]) -> None:
    """Claim the study for this search in the database (see ``exclusive_search``)."""
    holder = claim_study_attr(study, SEARCHING, me)
    if holder == me:
        return
    alive = owner_alive(holder)
    if alive is None:  # another machine's: alive while one of its trials runs
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        alive = any(t.user_attrs.get("owner") == holder for t in running)
    if alive or claim_study_attr(study, SEARCHING, me, steal=True) != me:
        _refuse(name, holder)


def _refuse(name: str, holder: Any) -> NoReturn:
    raise UsageError(
        f"study {name!r} is being searched right now by {describe_owner(holder)}: wait for "
        "it to finish, or search under another study name (several processes search one "
        "study together as its workers)"
    )


@contextlib.contextmanager
def _file_lock(url: str, name: str) -> Iterator[bool | None]:
    """Try once to take an exclusive OS lock for study ``name`` beside the file of the
    storage at ``url``: True while held, False when another process (or another open of
    the file in this one) holds it, None where there is no file to lock (a database
    server, a folder that cannot be written). The lock file stays: removing it would let
    two processes lock two files."""
    path = storage_file(url)
    if path is None:
        yield None
        return
    label = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    lock = filelock.FileLock(path.with_name(f"{path.name}.{label}-{digest}.lock"), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        yield False
        return
    except OSError:
        yield None
        return
    try:
        yield True
    finally:
        lock.release()


def storage_file(url: str) -> Path | None:
    """The file of a SQLite or journal storage URL (None for a database server)."""
    if url.startswith("journal:"):
        return journal_path(url)
    if not url.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database or ""
    except Exception:
        return None
    return Path(database).expanduser() if database and database != ":memory:" else None


def storage_files(url: str) -> set[Path]:
    """Every file a SQLite or journal storage keeps, resolved (the database and SQLite's
    ``-wal``, ``-shm`` and ``-journal`` beside it): what nothing may be written over.
    Empty for a database server."""
    stored = storage_file(url)
    if stored is None:
        return set()
    base = stored.resolve()
    return {base} | {base.with_name(base.name + end) for end in ("-wal", "-shm", "-journal")}


def journal_path(url: str) -> Path:
    """The file of a ``journal:PATH`` storage URL."""
    return Path(url.removeprefix("journal:").removeprefix("//")).expanduser()
