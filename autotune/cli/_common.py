"""What every command shares: the error boundary, the consoles, the --debug state."""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from autotune.core.errors import AutotuneError, UsageError, known_cause
from autotune.core.signals import how_stopped
from autotune.core.text import terminal_safe

__all__ = [
    "DeviceOption",
    "ModelArgOption",
    "ModelOption",
    "cli_command",
    "model_with_args",
    "print_json",
    "state",
]

# Options that several commands take, spelled once.
ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A built-in model (autotune models list), a Hugging Face architecture "
        "(hf:llama, hf:gpt2, hf:bert, or hf:path/to/config.json), or pkg.mod:attr / "
        "file.py:attr.",
    ),
]
ModelArgOption = Annotated[
    list[str] | None,
    typer.Option(
        "--model-arg",
        metavar="NAME=VALUE",
        help="Set one of the model's arguments (repeatable): a built-in's size "
        "(n_layers=4), an hf: model's config field (hidden_size=256, "
        "num_hidden_layers=4) or its head (head=sequence-classification).",
    ),
]
DeviceOption = Annotated[
    str | None, typer.Option(help="cuda:0, cuda:1, cpu. Default: the best device here.")
]

P = ParamSpec("P")
R = TypeVar("R")


class _State:
    debug: bool = False
    # When the command's process started (``time.monotonic()``): set by the console
    # script's ``main``; None where the CLI runs inside another program (a test's runner).
    started: float | None = None


state = _State()


def process_started(*, most_s: float = 60.0) -> float:
    """When this process started, on ``time.monotonic()``'s clock (at most ``most_s`` ago:
    a process that ran a while before it became this command counts from now less that):
    the interpreter's start and the imports count toward a command's time limit."""
    import time

    import psutil

    try:
        age = time.time() - psutil.Process().create_time()
    except (psutil.Error, OSError):
        age = 0.0
    return time.monotonic() - min(max(age, 0.0), most_s)


def cli_command(func: Callable[P, R]) -> Callable[P, R]:
    """Turn autotune's own errors, and those of the process's surroundings, into a
    one-paragraph message and an exit code.

    A user mistake never shows a traceback unless ``autotune --debug`` asked for it.
    Ctrl-C exits with 130 after whatever cleanup the command did on its way out. The
    surroundings: a working folder that was deleted (exit 2, before anything runs); a
    standard output that is closed, full or gone (exit 1; a reader that left, as ``| head``
    does, exits 141 as a SIGPIPE would, silently); an encoding that cannot print a name
    (printed with click's rule: UTF-8 where the stream says ASCII, else a replacement
    character); any other ``OSError`` that escapes (exit 1, naming the file).
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _guarded_stdout():
            try:
                _check_working_folder()
                result = func(*args, **kwargs)
                sys.stdout.flush()  # what is still buffered fails here, inside the boundary
                return result
            except AutotuneError as exc:
                if state.debug:
                    raise
                # a message may quote a file's strings: nothing in it acts on the terminal
                typer.echo(terminal_safe(f"error: {exc}"), err=True)
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM or SIGHUP (StopSignal)
                if state.debug:
                    raise
                code, said = how_stopped(stop)
                typer.echo(said, err=True)
                raise typer.Exit(code) from None
            except (StdoutError, OSError) as exc:
                if state.debug:
                    raise
                code, message = _surroundings_error(exc)
                if message:
                    typer.echo(terminal_safe(f"error: {message}"), err=True)
                raise typer.Exit(code) from None
            except (typer.Exit, typer.Abort):
                raise  # how a command ends on purpose (typer.Exit is a RuntimeError)
            except Exception as exc:
                known = known_cause(exc)
                if known is None or state.debug:
                    raise
                if isinstance(known, AutotuneError):
                    typer.echo(terminal_safe(f"error: {known}"), err=True)
                    raise typer.Exit(known.exit_code) from None
                code, message = _surroundings_error(known)
                typer.echo(terminal_safe(f"error: {message}"), err=True)
                raise typer.Exit(code) from None

    return wrapper


# -- the process's surroundings -----------------------------------------------------------


class StdoutError(Exception):
    """Standard output took no more text: it is closed, full, or its reader went away."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause


class _ClosedOutput(io.TextIOBase):
    """``sys.stdout`` of a process started without one (``>&-``): writing to it fails as
    writing to a closed descriptor does, instead of printing nothing and exiting 0."""

    encoding = "utf-8"
    errors = "strict"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


class _GuardedOutput:
    """``sys.stdout`` for a command: a failed write is a ``StdoutError`` (so the boundary
    knows whose failure it was), and a character its encoding lacks is replaced rather
    than raised. Everything else is the stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except UnicodeEncodeError:
            encoding = getattr(self._stream, "encoding", None) or "utf-8"
            shown = text.encode(encoding, "replace").decode(encoding)
            return self.write(shown)
        except OSError as exc:
            raise StdoutError(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_stdout() -> Iterator[None]:
    """``sys.stdout`` guarded (``_GuardedOutput``) for the command, as it was after. A
    stream that says ASCII is switched to UTF-8 first, as click's ``echo`` does (so every
    command prints a preset's name as ``presets show`` does)."""
    before = sys.stdout
    stream: Any = _ClosedOutput() if before is None else before
    encoding = getattr(stream, "encoding", None)
    switched = encoding is not None and _is_ascii(encoding) and hasattr(stream, "reconfigure")
    if switched:
        stream.reconfigure(encoding="utf-8", errors="replace")
    sys.stdout = _GuardedOutput(stream)
    try:
        yield
    finally:
        sys.stdout = before
        if switched:
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(encoding=encoding, errors="strict")


def _is_ascii(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False


def _check_working_folder() -> None:
    """A ``UsageError`` where the working folder is gone (deleted after the shell entered
    it): every relative path, and the runs folder, would fail later, one by one."""
    try:
        os.getcwd()
    except OSError as exc:
        raise UsageError(
            f"the working folder cannot be used ({exc.strerror or exc}): it was deleted or "
            "moved after this shell entered it; cd into a folder that exists and run the "
            "command again"
        ) from None


def _surroundings_error(exc: StdoutError | OSError) -> tuple[int, str]:
    """The exit code and message for a failure of the surroundings (no message: the
    reader of the output went away on purpose, as ``| head`` does)."""
    if isinstance(exc, StdoutError):
        cause = exc.cause
        if cause.errno == errno.EPIPE:
            _drop_stdout()
            return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1, ""
        _drop_stdout()
        if cause.errno == errno.EBADF:
            return 1, (
                "cannot write to standard output: it is closed (the command was started "
                "with >&-?); send it to a file or to /dev/null instead"
            )
        return 1, f"cannot write to standard output: {exc}"
    where = f" {exc.filename!r}" if exc.filename else ""
    reason = exc.strerror or str(exc)
    hint = _HINTS.get(exc.errno or 0, "")
    return 1, f"cannot use{where}: {reason}" + (f"; {hint}" if hint else "")


_HINTS = {
    errno.EROFS: "give a path in a folder you can write to (or run from one)",
    errno.EACCES: "give a path in a folder you can write to (or run from one)",
    errno.EPERM: "give a path in a folder you can write to (or run from one)",
    errno.ENOSPC: "the disk is full: free some space, or give a path on another disk",
    errno.EDQUOT: "the disk quota is used up: free some space, or give a path elsewhere",
}


def _drop_stdout() -> None:
    """Point the failed standard output's descriptor at /dev/null: what is left in its
    buffer then goes nowhere at exit, instead of a second error after the message."""
    try:
        fd = sys.stdout.fileno()  # the guarded stream's: a test's stand-in has none
    except (OSError, ValueError, AttributeError):
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def model_with_args(model: str, model_args: list[str] | None) -> Any:
    """What ``--model`` and ``--model-arg`` name: the reference itself where no argument
    is set (the library loads it), else the spec with those arguments (a ``ModelSpec``)."""
    if not model_args:
        return model
    from autotune.models.registry import load_model, parse_model_args

    return load_model(model, parse_model_args(model_args))
