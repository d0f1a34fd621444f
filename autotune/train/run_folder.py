"""A training run's folder and its checkpoints.

Which checkpoint a run resumes from (``--resume auto``, a file or a folder), that a fresh
run never writes over another run's checkpoints (nor a resume from an earlier checkpoint
over the later ones of its folder; the refusal advises ``--resume auto`` only where this
run could continue them: resumable.py), and each step's checkpoint: written by
rank 0 alone (with every rank's RNG state), the last ``keep_last`` kept, ``best.pt`` beside
them. The checkpoint's contents are checkpoint_state.py's (``checkpoint_state``).

One writer per folder: a run holds the folder's lock (``.autotune.lock``, an OS file lock
the OS drops when its process dies) from before it reads a checkpoint to resume from
until its summary is written; a second run into the folder is refused at once, naming
the running one (``.autotune.lock.json``: its pid, host and start).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from autotune.core.errors import AutotuneError, UsageError
from autotune.core.files import atomic_write_text, read_capped, regular_file_size
from autotune.engine.distributed import DistInfo, all_gather_objects, rank_zero_first
from autotune.train.checkpoint import (
    BEST_NAME,
    CheckpointError,
    capture_rng_state,
    checkpoint_path,
    clean_stale,
    find_resumable,
    link_best,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from autotune.train.log import CURVES_FILE

__all__ = ["HOLDER_FILE", "LOCK_FILE", "RunFolder", "create_run_folder"]

LOCK_FILE = ".autotune.lock"  # held by the one run that writes the folder
HOLDER_FILE = ".autotune.lock.json"  # who holds it, for the refusal of a second run

StateFn = Callable[[Sequence[Any]], dict[str, Any]]
Judge = Callable[[Path, dict[str, Any]], str | None]

# What a run writes beside its checkpoints, each file atomically (a write killed midway
# leaves its temporary file, which the next run into the folder removes).
RUN_FILES = (
    "data.json",
    "tokenizer.json",
    "metrics.jsonl",
    "summary.json",
    CURVES_FILE,
    HOLDER_FILE,
)


def create_run_folder(path: Path, out_name: str = "--out") -> None:
    """The run folder ``path``, made where it is missing; a ``UsageError`` naming the
    option ``out_name`` where it cannot be (a file, a folder that is not writable)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as exc:
        what = "it is a file" if path.is_file() else _what_is_there(path, exc)
        raise UsageError(
            f"cannot use {str(path)!r} as the run folder: {what}; give {out_name} a folder "
            "you can write to"
        ) from None


def _what_is_there(path: Path, exc: OSError) -> str:
    """Why ``path`` is no folder to make, in words: what is there (``/dev/null``: a
    character device; a dangling link) where the OS said only ``File exists``."""
    from autotune.core.files import path_kind

    try:
        kind = path_kind(path)
    except OSError:
        kind = None
    folder = kind is None or kind.endswith("a directory")  # a link to one too: the OS says why
    return (exc.strerror or str(exc)) if folder else f"it is {kind}"


class RunFolder:
    """The run folder ``path``; ``message`` reports (rank 0's display). Errors name the
    folder's parameter as ``option_names["out_dir"]`` says (the CLI: its flag)."""

    def __init__(
        self,
        path: Path,
        *,
        dist: DistInfo,
        keep_last: int,
        message: Callable[[str], None],
        option_names: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.out_name = (option_names or {}).get("out_dir", "out_dir")
        self.dist = dist
        self.keep_last = keep_last
        self.message = message
        self.last_saved: int | None = None  # the step of the last checkpoint written
        self.last_checkpoint: Path | None = None  # its file (rank 0; None on the others)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock for the run (rank 0, which alone writes; a no-op on the
        other ranks): a second run into the folder is refused at once (``UsageError``
        naming the holder). A dead holder's lock is the OS's to drop, and its holder file
        is only read when the lock is taken, so neither blocks a later run."""
        if not self.dist.is_main:
            yield
            return
        made = not self.path.exists()
        self._create()
        self._check_side_files()
        lock = FileLock(self.path / LOCK_FILE)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            raise UsageError(self._in_use()) from None
        holder = self.path / HOLDER_FILE
        failed = False
        try:
            started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            who = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
            atomic_write_text(holder, json.dumps(who) + "\n")
            yield
        except BaseException:
            failed = True
            raise
        finally:
            holder.unlink(missing_ok=True)
            if failed and made:  # a run refused before it wrote anything leaves no folder
                self._remove_if_unused()  # while the lock is held: no run starts in it
            lock.release()

    def _remove_if_unused(self) -> None:
        """Take away the folder this run made, where it holds nothing but the lock."""
        try:
            if {p.name for p in self.path.iterdir()} <= {LOCK_FILE}:
                (self.path / LOCK_FILE).unlink(missing_ok=True)
                self.path.rmdir()
        except OSError:  # another run opened it meanwhile, or it cannot be read: leave it
            pass

    def _check_side_files(self) -> None:
        """The files the run keeps beside its checkpoints (its lock, its metrics...) are
        regular files where they exist, by the one rule for a user's path: a folder or a
        FIFO in their place is refused, named, before the run takes the lock or reads a
        checkpoint (a FIFO would stop it for good)."""

        def refuse(message: str) -> UsageError:
            return UsageError(
                f"{message} (the run keeps that file in its folder): move it away, or train "
                f"into a new folder with {self.out_name}"
            )

        # its checkpoints too: a folder named best.pt or ckpt-step00000200.pt was found
        # only at the first save, after up to 200 steps
        checkpoints = sorted(self.path.glob("ckpt-step*.pt")) if self.path.is_dir() else []
        names = (LOCK_FILE, *RUN_FILES, BEST_NAME)
        for path in (*(self.path / name for name in names), *checkpoints):
            regular_file_size(path, what="file", error=refuse, missing_ok=True)

    def _in_use(self) -> str:
        """The refusal of a second run, naming the one that holds the folder."""
        try:
            raw = read_capped(self.path / HOLDER_FILE, limit=2**16)
            who = json.loads(raw)
            holder = f"pid {who['pid']} on {who['host']}, started {who['started']}"
        except (AutotuneError, ValueError, KeyError, TypeError):
            holder = "it has not said who it is yet"
        return (
            f"{self.path} is in use by another training run ({holder}): a run folder has "
            f"one writer, so this run did not start. Wait for that run to end (or stop it), "
            f"then continue it with --resume auto, or train into a new folder with "
            f"{self.out_name}"
        )

    def find_resume(self, resume: str | Path | None) -> tuple[Path, dict[str, Any]] | None:
        """The checkpoint ``resume`` names, loaded: ``"auto"`` (this folder's latest, or
        None for a fresh start), a checkpoint file, or a folder of them."""
        if resume is None:
            return None
        where = str(resume)
        if where == "auto":
            skipped: list[str] = []
            found = find_resumable(self.path, warn=lambda text: self._skip(text, skipped))
            if found is None and skipped:
                raise CheckpointError(
                    f"none of the {len(skipped)} checkpoint(s) in {str(self.path)!r} loads "
                    f"({skipped[0]}), so there is nothing to resume from: move them away to "
                    f"start afresh in this folder, or train into a new folder with {self.out_name}"
                )
            if found is None:
                self.message(f"no checkpoint in {self.path} to resume from: starting from step 0")
            return found
        path = Path(where).expanduser()
        if path.is_dir():
            found = find_resumable(path, warn=self.message)
            if found is None:
                raise CheckpointError(f"no loadable checkpoint (ckpt-step*.pt) in {str(path)!r}")
            return found
        state = load_checkpoint(path)
        self._refuse_rewind(path, int(state["step"]))
        return path, state

    def _refuse_rewind(self, path: Path, step: int) -> None:
        """A checkpoint named in this folder must be its latest: continuing from an earlier
        one would write the later steps' checkpoints, best.pt and metrics over the run's."""
        if path.parent.resolve() != self.path.resolve():
            return
        later = [(s, p) for s, p in list_checkpoints(self.path) if s > step]
        if later:
            latest_step, latest = later[-1]
            raise UsageError(
                f"{self.path} holds checkpoints after step {step} of {path.name} (latest "
                f"{latest.name}, step {latest_step}): continuing from step {step} in this "
                f"folder would write over them. Continue the run with --resume auto, or start "
                f"from step {step} in a new folder: {self.out_name} NEW_FOLDER --resume {path}"
            )

    def _skip(self, text: str, skipped: list[str]) -> None:
        skipped.append(text.removeprefix("warning: "))
        self.message(text)

    def prepare(self, resumed_from: Path | None, *, judge: Judge | None = None) -> None:
        """Create the folder and drop a killed write's leftovers; a run that does not
        continue this folder's own checkpoint must find no checkpoints in it (rank 0).
        Its refusal advises ``--resume auto``, unless ``judge(path, state)``, given the
        checkpoint that resume would take, returns the refusal to give instead (why this
        run cannot simply continue it)."""
        self._create()
        clean_stale(self.path, RUN_FILES)
        elsewhere = resumed_from is not None and (
            resumed_from.parent.resolve() != self.path.resolve()
        )
        if resumed_from is None or elsewhere:  # never mix two runs' checkpoints in one folder
            existing = list_checkpoints(self.path)
            if existing:
                raise UsageError(self._holds_a_run(*existing[-1], judge=judge))

    def _holds_a_run(self, step: int, path: Path, *, judge: Judge | None) -> str:
        """The refusal of a run into this folder, whose latest checkpoint is ``path``:
        ``judge``'s, given the checkpoint ``--resume auto`` would take (its tensors mapped
        from the file, not read), else the advice to continue it."""
        found = find_resumable(self.path, mmap=True) if judge is not None else None
        if judge is not None and found is not None and (refusal := judge(*found)):
            return refusal
        return (
            f"{self.path} already holds checkpoints of a run (latest {path.name}, step "
            f"{step}); continue it with --resume auto, or train into a new folder with "
            f"{self.out_name}"
        )

    def resumed(self, path: Path, step: int) -> None:
        """The run continues ``path``, the checkpoint of ``step``: where it lies in this
        folder, it is the run's last checkpoint (not written again at that step, and the
        one kept when a later write fails)."""
        if path.parent.resolve() == self.path.resolve():
            self.last_saved = step
            self.last_checkpoint = path if self.dist.is_main else None

    def _create(self) -> None:
        create_run_folder(self.path, self.out_name)

    def save(self, step: int, state: StateFn, *, best: bool = False) -> Path | None:
        """Checkpoint ``step`` with ``state(every rank's RNG state)`` (collective under DDP:
        every rank must call it); rank 0 writes it, links best.pt and prunes the old ones."""
        rngs = all_gather_objects(self.dist, capture_rng_state())

        def write() -> Path:
            path = checkpoint_path(self.path, step)
            if self.last_saved != step or not path.exists():
                size = self._write(path, state(rngs))
                self.message(f"saved {path} ({size / 2**20:.1f} MiB)")
            if best:
                link_best(path)
            prune_checkpoints(self.path, self.keep_last)
            return path

        path = rank_zero_first(self.dist, f"to write the checkpoint of step {step}", write)
        self.last_saved = step
        self.last_checkpoint = path
        return path

    def _write(self, path: Path, state: dict[str, Any]) -> int:
        """Write one checkpoint; a full disk (checked first against the last checkpoint's
        size, then by the write itself) is an error that keeps the last good checkpoint."""
        kept = (
            f"the last good checkpoint {self.last_checkpoint} is kept"
            if self.last_checkpoint is not None
            else "no checkpoint of this run was written yet"
        )
        if self.last_checkpoint is not None and self.last_checkpoint.exists():
            need = self.last_checkpoint.stat().st_size
            free = shutil.disk_usage(self.path).free
            if free < need:
                raise AutotuneError(
                    f"not enough disk space for checkpoint {path.name} in {self.path}: "
                    f"{free / 2**20:.1f} MiB free, about {need / 2**20:.1f} MiB needed; {kept}. "
                    "Free some space, then continue with --resume auto"
                )
        try:
            return save_checkpoint(state, path)
        except OSError as exc:
            raise AutotuneError(
                f"cannot write checkpoint {path}: {exc.strerror or exc}; {kept}. Free some "
                "space (or fix the folder), then continue with --resume auto"
            ) from None
