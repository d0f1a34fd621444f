"""`autotune report`: a search as one self-contained HTML page, and a summary PNG.

A thin layer over ``autotune.report.write_report``; matplotlib and optuna are imported
inside the command, so ``autotune --help`` stays instant.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from autotune.cli._common import cli_command

__all__ = ["report"]


@cli_command
def report(
    source: Annotated[
        str,
        typer.Argument(
            metavar="STUDY|PRESET",
            help="A study's name (in --runs-dir or --storage), or a preset (best.yaml, or "
            "a preset's name).",
        ),
    ],
    out: Annotated[
        str, typer.Option("--out", "-o", help="Where to write the HTML page.")
    ] = "report.html",
    png: Annotated[
        str | None,
        typer.Option("--png", help="Also write the two main plots as one PNG image."),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Optuna storage URL of the study (default: the preset's, or the runs folder's)."
        ),
    ] = None,
    runs_dir: Annotated[
        str, typer.Option("--runs-dir", help="Where the search keeps its studies.")
    ] = "autotune_runs",
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print what was written as JSON (for scripts), no text."),
    ] = False,
) -> None:
    """Write a search's report: one HTML file that opens offline (plots inline, no script).

    It shows the search history, throughput against peak memory with the budget, each
    knob's effect, the finalists, the hardware, the winner's config against naive and the
    commands to reproduce it. Needs the report extra: pip install "autotune-train[report]".
    """
    from autotune.report import write_report

    data = write_report(source, out=out, png=png, storage=storage, runs_dir=runs_dir)
    if as_json:
        summary = {
            "html": out,
            "png": png,
            "title": data.title,
            "study": data.study_name,
            "storage": data.storage,  # already redacted
            "trials": len(data.trials),
            "preset": data.preset_path,
            "notes": list(data.notes),
        }
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"report written: {out}" + (f" and {png}" if png else ""))
    for note in data.notes:
        typer.echo(f"note: {note}", err=True)
