"""Every command's --help prints its text as written (no markup eaten)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from autotune.cli.main import app

COMMANDS = ["probe", "bench", "search", "train", "report", "models", "presets"]


@pytest.mark.parametrize("command", ["search", "report"])
def test_the_report_extra_survives_the_help(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = re.sub(r"-\s+", "-", " ".join(result.output.split()))  # a line may end at "-"
    assert 'pip install "autotune-train[report]"' in text


@pytest.mark.parametrize("command", COMMANDS)
def test_no_help_shows_a_markup_tag(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert not re.search(r"\[/?(bold|dim|red|yellow|green)\]", result.output)
