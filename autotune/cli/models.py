"""`autotune models` (being built)."""

from __future__ import annotations

import typer

app = typer.Typer(help="models (being built)", no_args_is_help=True)
