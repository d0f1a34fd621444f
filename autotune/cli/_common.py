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


def model_with_args(model: str, model_args: list[str] | None) -> Any:
    """What ``--model`` and ``--model-arg`` name: the reference itself where no argument
    is set (the library loads it), else the spec with those arguments (a ``ModelSpec``)."""
    if not model_args:
        return model
    from autotune.models.registry import load_model, parse_model_args

    return load_model(model, parse_model_args(model_args))
