"""What every command shares: the error boundary, the consoles, the --debug state."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from autotune.core.errors import AutotuneError
from autotune.core.text import terminal_safe

__all__ = ["DeviceOption", "ModelOption", "cli_command", "print_json", "state"]

# Options that several commands take, spelled once.
ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A built-in model (autotune models list) or pkg.mod:attr / file.py:attr.",
    ),
]
DeviceOption = Annotated[
    str | None, typer.Option(help="cuda:0, cuda:1, cpu. Default: the best device here.")
]

P = ParamSpec("P")
R = TypeVar("R")


class _State:
    debug: bool = False


state = _State()


def cli_command(func: Callable[P, R]) -> Callable[P, R]:
    """Turn autotune's own errors into a one-paragraph message and an exit code.

    A user mistake never shows a traceback unless ``autotune --debug`` asked for it.
    Ctrl-C exits with 130 after whatever cleanup the command did on its way out.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except AutotuneError as exc:
            if state.debug:
                raise
            # a message may quote a file's strings: nothing in it acts on the terminal
            typer.echo(terminal_safe(f"error: {exc}"), err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if state.debug:
                raise
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
