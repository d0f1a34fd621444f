"""The search's Optuna pieces: the storage, the sampler, the pruner, the study's set-up check,
and how a trial's outcome and constraint are stored.

The constraint (> 0 means infeasible) goes through ``Trial.set_constraint`` on Optuna 5 and
``TPESampler(constraints_func=...)`` on Optuna 4; either way it is stored with the trial's
``outcome`` user attribute, one storage write per trial.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import logging
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.core.errors import UsageError, error_chain
from autotune.core.files import regular_file_size
from autotune.study.storage.ownership import is_me, journal_path, owner_alive, storage_file

__all__ = [
    "PRUNE_MIN_STEPS",
    "PRUNE_RATIO",
    "SQLITE_BUSY_TIMEOUT_S",
    "SlowConfigPruner",
    "check_storage_url",
    "check_study_setup",
    "constraints",
    "has_set_constraint",
    "make_sampler",
    "missing_storage",
    "open_storage",
    "heartbeat_settings",
    "open_study",
    "queue_again",
    "quiet_optuna",
    "redact",
    "set_outcome",
    "storage_failures",
    "storage_problem",
]

PRUNE_MIN_STEPS = 2
PRUNE_RATIO = 1 / 3
# How long a write to a SQLite study waits for a lock another connection holds (another
# worker's commit, a sqlite3 shell's transaction) before failing with "database is locked":
# SQLite's own default through SQLAlchemy is 5 s, which a worker starved of CPU by bursts
# on every core, a slow disk, or a short `sqlite3 study.db` session can outlast, ending a
# search that could have waited. A study's writes take milliseconds, so 30 s (6x the
# default) lets any write that is merely slow through; it is also within the overrun a
# default search's time limit allows (10% of 340 s), so a waited-out lock does not break
# the limit much. A lock held longer (a shell left inside a transaction) still ends the
# search with ``storage_failures``' one paragraph. (Optuna tries a trial's creation up to
# 5 times, so that one write may wait a few times this.)
SQLITE_BUSY_TIMEOUT_S = 30.0


# -- the pruner ------------------------------------------------------------------------


class SlowConfigPruner(optuna.pruners.BasePruner):
    """Stops a trial once ``min_steps`` timed steps are in and even its fastest step's
    throughput is below ``ratio`` x the best completed trial's, or after a single step
    below ``ratio**2`` x (1/9 by default): a config 30x slower than the best so far costs
    its warm-up and one timed step, not a whole burst.

    ``best_fn`` gives the best throughput so far (None before any trial completed).
    """

    def __init__(
        self,
        best_fn: Callable[[], float | None],
        *,
        min_steps: int = PRUNE_MIN_STEPS,
        ratio: float = PRUNE_RATIO,
    ) -> None:
        if min_steps < 1 or not 0 < ratio < 1:
            raise ValueError(f"need min_steps >= 1 and 0 < ratio < 1, got {min_steps=}, {ratio=}")
        self.best_fn = best_fn
        self.min_steps = min_steps
        self.ratio = ratio

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.should_prune(trial.intermediate_values, self.best_fn())

    def should_prune(self, steps: Mapping[int, float], best: float | None) -> bool:
        """Whether a trial whose timed steps reached ``steps`` (step -> throughput) is
        clearly slower than ``best``."""
        if best is None or best <= 0 or not steps:
            return False
        fastest = max(steps.values())  # its fastest step so far
        if fastest < self.ratio * self.ratio * best:  # hopeless: one step says so
            return True
        return len(steps) >= self.min_steps and fastest < self.ratio * best


# -- a trial's outcome and constraint -----------------------------------------------------


@functools.cache
def has_set_constraint() -> bool:
    """Optuna 5 takes a trial's constraint through ``Trial.set_constraint``."""
    return hasattr(optuna.trial.Trial, "set_constraint")


def constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    """TPE's constraint: > 0 means infeasible (ran out of memory or budget)."""
    outcome = trial.user_attrs.get("outcome") or {}
    return (float(outcome.get("constraint", 0.0)),)


def set_outcome(trial: optuna.Trial, **attrs: Any) -> None:
    """Store a trial's outcome as one user attribute ``outcome`` (one storage write: SQLite
    commits are the search's main overhead) and its ``constraint`` for the sampler
    (Optuna 5's ``Trial.set_constraint``; under Optuna 4 ``constraints`` reads it)."""
    outcome = {name: value for name, value in attrs.items() if value is not None}
    trial.set_user_attr("outcome", outcome)
    if "constraint" in outcome and has_set_constraint():
        trial.set_constraint("memory", float(outcome["constraint"]))


# -- the study ---------------------------------------------------------------------------


def scrub(text: str, url: str) -> str:
    """``text`` with the secrets of ``url`` hidden (``autotune.core.redact.scrub``)."""
    from autotune.core.redact import scrub as scrub_text

    return scrub_text(text, url)


def _database_words(exc: BaseException) -> str:
    """What the database itself said: the innermost cause of ``exc`` (a DBAPI error's
    ``orig`` where SQLAlchemy wrapped one), one paragraph."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def storage_problem(exc: BaseException) -> str | None:
    """The database's own words when ``exc`` comes from a study storage that failed
    mid-run (SQLite "database is locked", "database or disk is full"; a journal's write
    on a full disk), else None. Optuna
    wraps them in a StorageInternalError, then, failing to mark the trial FAIL through the
    same storage, raises ``AssertionError("Should not reach.")`` with it as its context."""
    found: BaseException | None = None
    for link in error_chain(exc):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return " ".join(str(link).split())  # a journal file's write: the disk is full
        if isinstance(link, optuna.exceptions.StorageInternalError) or (
            type(link).__name__ == "OperationalError"
        ):
            found = link
    return None if found is None else _database_words(found)


@contextlib.contextmanager
def storage_failures(url: str) -> Iterator[None]:
    """A study storage that stops taking writes mid-search (locked by another program, a
    full disk) is a one-paragraph ``AutotuneError``, not optuna's traceback: the trials
    finished before it are in the study, and the same command resumes it."""
    from autotune.core.errors import AutotuneError

    try:
        yield
    except Exception as exc:
        problem = storage_problem(exc)
        if problem is None:
            raise
        raise AutotuneError(
            f"the study storage {redact(url)} stopped taking writes "
            f"({scrub(problem, url)}): the trial then running was not recorded; the "
            "trials finished before it are saved. Free the disk or close the program "
            "holding the database, then rerun the same command to resume"
        ) from exc


def redact(url: str) -> str:
    """A storage URL without its password (``postgresql://user:***@host/db``): the one
    rule, ``autotune.core.redact.redact``."""
    from autotune.core.redact import redact as redact_url

    return redact_url(url)


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Optuna's own per-trial log lines would interleave with our progress display."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.filterwarnings("ignore", message=".*reported.*step.*")
            yield
    finally:
        optuna.logging.set_verbosity(previous)


def open_study(
    url: str,
    name: str,
    *,
    setup: Mapping[str, Any],
    pruner: optuna.pruners.BasePruner,
    seed: int,
    n_startup_trials: int | None,
    space_size: int,
    trials: int | None,
    joining: bool = False,
    note: Callable[[str], None] | None = None,
) -> optuna.Study:
    """Create or load study ``name`` in the storage at ``url`` (maximized, with the TPE
    sampler and ``pruner``) and check that it was made for the same search (``setup``).
    ``joining``: a worker of a shared search (see ``claim_running_trials``). ``note``
    hears of settings the study did not record (``check_study_setup``), and of a journal's
    torn last record cut off before this search appends (``mend_journal_tail``)."""
    if url.startswith("journal:"):  # before Optuna reads it: a bad last line stops its replay
        from autotune.study.storage.journal_tail import mend_journal_tail

        check_storage_url(url)  # a regular file, where it exists
        mended = mend_journal_tail(journal_path(url))
        if mended is not None and note is not None:
            note(mended)
    storage = open_storage(url)
    existing = _existing_trial_count(storage, name)
    sampler = make_sampler(
        # a resumed study does not replay the same random draws
        seed=seed + existing,
        n_startup_trials=n_startup_trials,
        space_size=space_size,
        trials=trials,
    )
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            sampler=sampler,
            pruner=pruner,
            direction="maximize",
            load_if_exists=True,
        )
    except Exception as exc:  # optuna's "exceeding max length" hides "database is locked"
        why = scrub(_database_words(exc), url)
        raise UsageError(f"cannot create or load study {name!r} in {redact(url)!r}: {why}") from exc
    unrecorded = check_study_setup(study, setup, name)
    if unrecorded and note is not None:
        note(
            f"study {name!r} did not record its {', '.join(unrecorded)} (an older autotune "
            "made it): this search's are recorded now, and a resume with others is refused; "
            "its earlier trials may have been measured otherwise"
        )
    claim_running_trials(study, name, joining=joining)
    return study


# -- running trials of a study ------------------------------------------------------------------


def claim_running_trials(study: optuna.Study, name: str, *, joining: bool = False) -> None:
    """Before a search runs trials of ``study``: refuse when another live process on this
    machine is searching it (one writer per study; ``joining``: a worker of a shared
    search, which runs beside the others), and fail the RUNNING trials whose search
    process died (kill -9, a crash, a lost machine's power), queueing their configs again,
    so that no trial stays RUNNING forever. Trials owned on other machines are left alone
    (heartbeats are for distributed searches)."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for frozen in running:
        owner = frozen.user_attrs.get("owner")
        alive = owner_alive(owner)
        if joining and (alive or owner is None or is_me(owner)):
            continue  # a fellow worker's (one without an owner yet is just starting)
        if alive:
            pid = owner.get("pid") if isinstance(owner, Mapping) else "?"
            raise UsageError(
                f"study {name!r} is being searched right now by process {pid} on "
                f"this machine (trial #{frozen.number} is running): wait for it to finish, or "
                "search under another study name"
            )
        if alive is None and owner is not None:
            continue
        storage = study._storage
        outcome = {"status": "interrupted", "reason": "its search process died"}
        try:
            storage.set_trial_user_attr(frozen._trial_id, "outcome", outcome)
            if not storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker failed it first, and queued it again
        queue_again(study, frozen)


def queue_again(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
    """Queue the config of a trial whose process died (its role kept), unless it is queued
    already. Also the failed-trial callback of an RDB storage's heartbeats."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    queued = [t.system_attrs.get("fixed_params") for t in waiting]
    if frozen.params and dict(frozen.params) not in queued:
        attrs = {k: v for k, v in frozen.user_attrs.items() if k in ("role", "refines")}
        # (skip_if_exists would see the dead one)
        study.enqueue_trial(dict(frozen.params), user_attrs=attrs)


def make_sampler(
    *, seed: int, n_startup_trials: int | None, space_size: int, trials: int | None
) -> optuna.samplers.TPESampler:
    """TPE with the memory constraint, multivariate and grouped.

    Without ``n_startup_trials``: random trials before TPE models the results (the naive
    config and the guess count), fewer for a short search or a small space.
    """
    if n_startup_trials is None:
        n_startup_trials = max(3, min(10, space_size // 6))
        if trials is not None:
            n_startup_trials = min(n_startup_trials, max(3, trials // 3))
    sampler_kwargs: dict[str, Any] = {}
    if not has_set_constraint():  # Optuna 4: constraints come through constraints_func
        sampler_kwargs["constraints_func"] = constraints
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=n_startup_trials,
        multivariate=True,
        group=True,
        **sampler_kwargs,
    )


def check_study_setup(study: optuna.Study, setup: Mapping[str, Any], name: str) -> list[str]:
    """Mark a new study as this search's (``setup``); refuse a study made by something else
    or for a different search (another model, device, budget, space, or trials measured
    otherwise: ``opening._measured_by``), naming each setting's value in the study and
    now. A setting the study lacks (one an older autotune did not record) is recorded as
    this search's: which ones (none for a new study)."""
    stored = study.user_attrs.get("autotune")
    if stored is None:
        if study.trials:
            raise UsageError(
                f"study {name!r} already exists in this storage and was not made by "
                "autotune search; give another study name"
            )
        study.set_user_attr("autotune", dict(setup))
        return []
    diffs = [key for key in setup if key in stored and stored[key] != setup[key]]
    if diffs:
        shown = "; ".join(f"{k}: the study has {stored[k]!r}, now {setup[k]!r}" for k in diffs)
        raise UsageError(
            f"the study {name!r} was made for a different search ({shown}): its trials and "
            "this search's would be compared as if measured alike. Rerun with the study's "
            "settings to resume it, or give a new study name to start another"
        )
    unrecorded = [key for key in setup if key not in stored]
    if unrecorded:
        study.set_user_attr("autotune", {**stored, **{k: setup[k] for k in unrecorded}})
    return unrecorded


def check_storage_url(url: str) -> None:
    """Refuse a storage the search cannot use, before any work: a SQLite URL with no file
    or in memory (trials run in other processes, and the study could not be resumed or
    shared), a journal file with no name or in a folder that does not exist (no folder is
    made outside the runs folder)."""
    if url.startswith("journal:"):
        path = journal_path(url)
        if not str(path).strip() or path == Path():
            raise UsageError(
                f"storage {redact(url)!r}: give the journal file, e.g. journal:study.log"
            )
        if not path.parent.is_dir():
            raise UsageError(
                f"storage {redact(url)!r}: the folder {redact(str(path.parent))!r} does not "
                "exist; create it first (the search makes no folders outside its runs folder)"
            )
        _require_regular_file(url, path)
        return
    if not url.startswith("sqlite:"):
        return
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database or ""
    except Exception:  # a malformed URL: opening it says why
        return
    if not database.strip():
        raise UsageError(
            f"storage {redact(url)!r} names no database file; give one, e.g. sqlite:///study.db"
        )
    if database == ":memory:" or database.startswith("file::memory:") or "mode=memory" in url:
        raise UsageError(
            f"storage {redact(url)!r}: an in-memory SQLite study cannot be resumed or shared, and "
            "the search's trials run in other processes; give a file, e.g. sqlite:///study.db"
        )
    if not database.startswith("file:"):
        _require_regular_file(url, Path(database).expanduser())


def _require_regular_file(url: str, path: Path) -> None:
    """A storage's file, where it exists, is a regular file, by the one rule for a user's
    path (``autotune.core.files``): Optuna reads a journal whole, so ``/dev/zero`` would
    grow until memory ran out and a FIFO would stop the search for good. Its size has no
    bound: a study's file grows with its trials."""
    regular_file_size(path, what=f"storage {redact(url)!r}: the file", missing_ok=True)


def missing_storage(url: str) -> str | None:
    """Why opening ``url`` would make a new, empty storage instead of reading one: its
    SQLite or journal file is not there (None: it is, or the storage is a server's)."""
    if url.startswith("journal:"):
        path = journal_path(url)
    elif url.startswith("sqlite:"):
        from sqlalchemy.engine import make_url

        try:
            database = make_url(url).database or ""
        except Exception:  # a malformed URL: opening it says why
            return None
        if not database.strip() or database == ":memory:" or database.startswith("file:"):
            return None  # check_storage_url refuses these
        path = Path(database).expanduser()
    else:
        return None
    if os.path.lexists(path):
        return None  # there: check_storage_url refuses what is no regular file
    return (
        f"the study storage {redact(url)!r} is not there (no file {redact(str(path))!r} "
        f"from {str(Path.cwd())!r})"
    )


def open_storage(url: str, *, create: bool = True) -> Any:
    """An Optuna storage for ``url``: ``journal:PATH`` is a journal file; anything else is
    an RDB URL (SQLite, PostgreSQL, MySQL), opened with heartbeats so that a trial whose
    process was killed is marked FAIL by the next run (behind Optuna's cache, as
    ``optuna.create_study`` would put it; the RDB storage is its ``_backend``). Stop
    signals wait for each of its calls to end (``_stops_held_in``).

    ``create=False`` (a reader: a report, ``--finish``): a SQLite or journal file that is
    not there is refused (``UsageError``) rather than made."""
    problem = None if create else missing_storage(url)
    if problem is not None:
        raise UsageError(f"{problem}; nothing was created")
    check_storage_url(url)
    interval, grace = heartbeat_settings()
    try:
        if url.startswith("journal:"):
            from autotune.study.storage.journal_tail import MendingJournalBackend

            journal = MendingJournalBackend(str(journal_path(url)))
            return _stops_held_in(optuna.storages.JournalStorage(journal))
        storage = _rdb_storage(_with_driver(url), interval, grace)
        if url.startswith("sqlite:"):
            _sqlite_wal(storage.engine)
        # the cache Optuna puts in front of an RDB storage, so that its own work is held too
        return _stops_held_in(optuna.storages.get_storage(storage), url)
    except Exception as exc:
        hint = ""
        if isinstance(exc, ImportError) and url.startswith("postgresql"):
            hint = ' (PostgreSQL needs a driver: pip install "autotune-train[distributed]")'
        elif isinstance(exc, ImportError) and url.startswith("mysql"):
            hint = " (MySQL needs a driver: pip install PyMySQL, and a mysql+pymysql:// URL)"
        why = scrub(" ".join(str(exc).split()).rstrip("."), url)  # one paragraph, no secret
        damaged = _sqlite_problem(url, why) or _journal_problem(url, exc)
        if damaged is not None:
            raise UsageError(
                f"cannot open the study storage {redact(url)!r}: {damaged}; nothing was written"
            ) from exc
        raise UsageError(
            f"cannot open the study storage {redact(url)!r}: {type(exc).__name__}: "
            f"{why}{hint}. Give an Optuna storage URL (sqlite:///path/study.db, "
            "postgresql://user@host/db, mysql://...) or journal:PATH for a journal file; "
            "nothing was written"
        ) from exc


SQLITE_MAX_PATH = 512  # SQLite's longest file name on Unix (SQLITE_MAX_PATHLEN)


def _sqlite_problem(url: str, why: str) -> str | None:
    """What is wrong with a SQLite study file that would not open, where it is the file
    and not the URL: a damaged file, or a path longer than SQLite opens (from a folder
    3,000 characters deep, the default study file failed with "unable to open database
    file" and advice to give another URL). None: not a SQLite file problem."""
    found = storage_file(url) if url.startswith("sqlite:") else None
    if found is None or str(found).startswith("file:"):
        return None
    path = found.absolute()
    for damage in ("file is not a database", "database disk image is malformed"):
        if damage in why:
            return (
                f"{str(path)!r} is damaged (SQLite: {damage}): move it away to start the "
                "study again, or give another --study or --storage"
            )
    if "unable to open database file" in why and len(str(path)) > SQLITE_MAX_PATH:
        return (
            f"its path is {len(str(path)):,} characters, longer than SQLite opens "
            f"({SQLITE_MAX_PATH}); run from a shorter folder, or give --storage "
            "sqlite:///SHORT/PATH.db or journal:PATH"
        )
    return None


def _journal_problem(url: str, exc: Exception) -> str | None:
    """A journal file that does not read because a line inside it is no record (an edit,
    or a write torn before ``mend_journal_tail`` cut such lines off), where the advice
    was to give another storage URL: the URL is fine, the file is not."""
    if not url.startswith("journal:") or not isinstance(exc, ValueError | TypeError | KeyError):
        return None  # JSONDecodeError, Optuna's "Invalid log format."; a line of [1] or {}
    return (
        f"{str(journal_path(url).absolute())!r} is damaged (a line inside it is no journal "
        f"record: {type(exc).__name__}: {exc}): move it away to start the study again, or "
        "mend the line by hand; or give another --study or --storage"
    )


def _stops_held_in(storage: Any, url: str | None = None) -> Any:
    """``storage``, each of its methods run with stop signals held until it returns
    (``autotune.core.signals.stops_held``), in this one place so that no call site can
    forget it: a Ctrl-C or SIGTERM that landed inside a write (a trial's intermediate value
    as its burst ran) left Optuna's SQLAlchemy session unusable, and the write marking the
    interrupted trial failed then failed too. The methods are the instance's own
    attributes, so ``type(storage)`` and Optuna's ``isinstance`` checks are unchanged.
    With the SQLite ``url``, a file found damaged by a later read (a bad page deep inside
    it opens fine) is a ``UsageError`` naming it, as at opening, not Optuna's
    "exception raised during the commit" and a traceback."""
    from autotune.core.signals import stops_held

    for name, _ in inspect.getmembers(type(storage), inspect.isfunction):
        if not name.startswith("__"):
            method = stops_held(getattr(storage, name))
            if url is not None and url.startswith("sqlite:"):
                method = _damage_said(method, url)
            setattr(storage, name, method)
    return storage


def _damage_said(method: Callable[..., Any], url: str) -> Callable[..., Any]:
    """``method``, a damaged SQLite file under its failure said as ``_sqlite_problem``."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            for cause in error_chain(exc):
                problem = _sqlite_problem(url, str(cause))
                if problem is not None:
                    raise UsageError(f"the study storage {redact(url)!r}: {problem}") from exc
            raise

    return run


def _with_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy 2.1 defaults to
    psycopg 3, and the ``distributed`` extra installs psycopg2."""
    import importlib.util

    find = importlib.util.find_spec
    if url.startswith("postgresql://") and find("psycopg") is None and find("psycopg2"):
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


def _rdb_storage(url: str, interval: int, grace: int) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats. Workers that open a new database at the same moment
    all create its tables: the ones that lose that race (an IntegrityError on PostgreSQL)
    open it again once the winner has made them."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=_engine_kwargs(url),
                    heartbeat_interval=interval,
                    grace_period=grace,
                    heartbeat_stale_trial_callback=queue_again,
                )
        except (IntegrityError, ProgrammingError):
            if attempt == 4:
                raise
            time.sleep(0.2 + random.random())
    raise AssertionError("unreachable")


def _engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy's engine arguments for ``url``: a SQLite study waits
    ``SQLITE_BUSY_TIMEOUT_S`` for a lock, unless the URL sets its own ``?timeout=``; other
    databases keep their drivers' defaults (``timeout`` is no argument of theirs)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or "timeout" in parsed.query:
        return {}
    return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}


MAX_HEARTBEAT_S = 3600


def heartbeat_settings() -> tuple[int, int]:
    """An RDB storage's heartbeat interval and grace period in seconds: 30 s and 120 s, or
    ``AUTOTUNE_HEARTBEAT_S`` seconds (1 to an hour) and 4x that (the kill tests use 1);
    another value is not one (``²``, 10**20, which overflowed in Optuna's heartbeat
    thread) and leaves the default."""
    raw = os.environ.get("AUTOTUNE_HEARTBEAT_S", "")
    interval = (
        int(raw) if raw.isascii() and raw.isdecimal() and 0 < int(raw) <= MAX_HEARTBEAT_S else 30
    )
    return interval, 4 * interval


def _sqlite_wal(engine: Any) -> None:
    """Write-ahead logging with ``synchronous=NORMAL``: a commit no longer waits for an
    fsync (which made each trial's dozen commits cost ~0.2 s on a busy disk), and the
    file stays consistent if the process is killed (SQLite's WAL guarantee)."""
    from sqlalchemy import event

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections made before the listener reconnect with it


def _existing_trial_count(storage: Any, study_name: str) -> int:
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:
        return 0
    return len(storage.get_all_trials(study_id, deepcopy=False))
