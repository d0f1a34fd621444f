"""`autotune presets` (being built)."""

from __future__ import annotations

import typer

app = typer.Typer(help="presets (being built)", no_args_is_help=True)
