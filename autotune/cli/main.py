"""The ``autotune`` Typer app. Only typer is imported here: ``--help`` stays instant."""

from __future__ import annotations

import sys
from typing import Any

import typer

from autotune import __version__
from autotune.cli import bench, models, presets, probe, report, search, train
from autotune.cli._common import process_started, state

__all__ = ["app", "main"]

app = typer.Typer(
    name="autotune",
    help=(
        "Find the fastest way to train a PyTorch model on this machine, by measurement, "
        "then train with it."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text is plain text: with rich markup, `pip install "autotune-train[report]"` lost its
    # "[report]" as an unknown style tag.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    state.debug = debug


app.command("probe")(probe.probe)
app.add_typer(models.app, name="models")
app.command("bench")(bench.bench)
app.command("search")(search.search)
app.add_typer(presets.app, name="presets")
app.command("train")(train.train)
app.command("report")(report.report)


def main() -> None:
    state.started = process_started()  # a search's --timeout counts from here
    try:
        app(prog_name="autotune")
    except BaseException as outcome:  # SystemExit too: the app ends with one
        _end_rank_of_a_group(outcome)
        raise
    _end_rank_of_a_group(None)


def _end_rank_of_a_group(outcome: BaseException | None) -> None:
    """A process that joined a torchrun process group ends here, without the interpreter's
    teardown (``end_rank``); others return. Only a process that imported the module that
    joins a group can have joined one, so torch's import is not paid here."""
    distributed = sys.modules.get("autotune.engine.distributed")
    if distributed is not None and distributed.joined_a_group():
        distributed.end_rank(outcome)


def __getattr__(name: str) -> Any:
    """``cli``: the click command behind ``app``, for the docs' CLI reference (mkdocs-click).
    Built on first access, so ``autotune --help`` does not build it twice."""
    if name == "cli":
        return typer.main.get_command(app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
