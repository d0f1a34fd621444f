"""One exception hierarchy. The CLI turns these into a message and an exit code.

``exit_code`` follows the CLI contract: 1 for a failure of the run, 2 for bad input
(usage, a malformed preset, an impossible budget, an unknown model, a missing file).
"""

from __future__ import annotations

import errno
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "AutotuneError",
    "BudgetError",
    "ConfigError",
    "DataError",
    "HardwareMismatchError",
    "ModelLoadError",
    "PeerFailed",
    "PresetError",
    "UsageError",
    "describe_exception",
    "error_chain",
    "known_cause",
]


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""

    exit_code: int = 1


class UsageError(AutotuneError):
    """The user asked for something invalid: bad flag value, unknown name, missing file."""

    exit_code = 2


class ConfigError(UsageError):
    """One or more invalid fields; ``problems`` lists every one, each with its path."""

    def __init__(self, problems: Iterable[str], *, context: str = "invalid configuration"):
        self.problems = list(problems)
        self.context = context
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{context}:\n{lines}" if self.problems else context)


class PresetError(ConfigError):
    """A preset file that cannot be read, parsed or validated."""


class ModelLoadError(UsageError):
    """An unknown built-in model, or a user model that cannot be imported."""


class DataError(UsageError):
    """Training data that is missing, empty, binary or in the wrong format."""


class BudgetError(UsageError):
    """A memory budget that cannot be parsed, or that no configuration fits in."""


class HardwareMismatchError(UsageError):
    """A preset or config that this device cannot run (e.g. bf16 on a pre-Ampere GPU)."""


class CheckpointError(UsageError):
    """A checkpoint that is missing, unreadable or not autotune's (exit code 2)."""


class TrainingOOMError(AutotuneError):
    """The run ran out of memory (exit code 1); the message says what to do."""


class UntrustedModelError(UsageError):
    """A preset names user code (a model file or module) and the user has not said to run
    it: a preset is data, and opening one must not run a stranger's program."""


class PeerFailed(AutotuneError):
    """Rank 0 failed at a step the other ranks of the run waited for: its own message says
    why, and each other rank ends with its exit code."""

    def __init__(self, message: str, *, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def error_chain(exc: BaseException, *, as_shown: bool = False) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or while handling, and so on (each once).
    ``as_shown``: the chain Python's traceback shows, which stops at a ``from None`` (a
    refusal caught on purpose is not the cause of an error raised while handling it)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        hidden = as_shown and link.__suppress_context__
        link = link.__cause__ or (None if hidden else link.__context__)


def known_cause(exc: BaseException) -> AutotuneError | OSError | None:
    """What another error stands on that autotune can say, or None: Optuna turned a
    failed write of a trial's result into ``AssertionError: Should not reach.`` and a
    traceback, whether a journal's disk was full or the storage raised autotune's own
    error (a damaged SQLite file). Of the chain: autotune's own error first, else a full
    disk or used-up quota, one that names its file where there is one."""
    full: list[OSError] = []
    # the chain Python shows: an error raised while handling another `from None` (a
    # refusal caught on purpose, then a bug) is not that other's doing
    for cause in error_chain(exc, as_shown=True):
        if isinstance(cause, AutotuneError):
            return cause
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            full.append(cause)
    named = [e for e in full if e.filename]
    return next(iter(named or full), None)


def describe_exception(exc: BaseException, *, limit: int = 240) -> str:
    """One line for an exception raised by code autotune ran (a trial, a user's model):
    ``Type: first line of the message [file:line in function]``, the place being the
    innermost frame, where the fix usually is (for a ``SyntaxError``, the line it is
    about). ``sys.exit(code)`` reads as what it was.
    """
    if isinstance(exc, SystemExit):
        message = f"it called sys.exit({exc.code!r})"
    elif isinstance(exc, SyntaxError) and exc.msg:  # str() adds "(file, line N)": placed below
        message = exc.msg
    elif isinstance(exc, ConfigError) and exc.problems:  # its first line is only the context
        message = "; ".join(exc.problems)
    else:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(message) > limit:
        message = message[: limit - 3] + "..."
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:  # the code's line, not its compiler's
        text += f" [{Path(exc.filename).name}:{exc.lineno}]"
    elif frames:
        last = frames[-1]
        text += f" [{Path(last.filename).name}:{last.lineno} in {last.name}]"
    return text
