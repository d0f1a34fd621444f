"""`autotune search`'s flags against the option records' fields: one table, read both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.cli.search import FILLED, FLAGS, PYTHON_ONLY, _with_flags, flag_of
from autotune.study.session.options import (
    SearchLimits,
    SearchOptionsError,
    field_paths,
    search_options,
)

# The command's own options, which give no record's field (--budget is search()'s argument).
OWN = {"--model", "--budget", "--json", "--report", "--devices", "--cpu-workers", "--model-arg"}


def _search_flags() -> dict[str, str]:
    """The options of ``autotune search``, by parameter name -> the flag's long name."""
    command = typer.main.get_command(app).commands["search"]  # type: ignore[attr-defined]
    return {p.name: next(o for o in p.opts if o.startswith("--")) for p in command.params}


def test_every_record_field_has_a_flag_and_every_flag_a_field() -> None:
    paths = set(field_paths().values())
    declared = [*FLAGS, *FILLED, *PYTHON_ONLY]
    assert len(declared) == len(set(declared)), "a field is declared twice"
    assert set(declared) == paths, (
        f"fields without a flag or a reason: {sorted(paths - set(declared))}; "
        f"entries naming no field: {sorted(set(declared) - paths)}"
    )
    command = _search_flags()
    for path, flag in FLAGS.items():
        parameter = flag.removeprefix("--").replace("-", "_")
        assert command.get(parameter) == flag, f"{path}: the command has no {flag}"
    assert set(command.values()) == set(FLAGS.values()) | OWN


def test_a_field_path_maps_to_its_flag() -> None:
    assert flag_of("limits.timeout") == "--timeout"
    assert flag_of("limits.time_limit_s") == "--timeout"  # a figure read from the field
    assert flag_of("scope.knobs") == "--knob"
    assert flag_of("machine.hardware") is None  # Python only


def test_the_records_problems_carry_their_fields_paths() -> None:
    with pytest.raises(SearchOptionsError) as raised:
        search_options(trials=0, objective="time-to-train", timeout="soon", hardware=None)
    assert raised.value.fields == [
        ("scope.objective", "scope.train_steps"),
        ("limits.trials",),
        ("limits.timeout",),
    ]
    shown = [_with_flags(p.text, p.fields) for p in raised.value.found]
    assert shown[0].startswith("--objective time-to-train needs --train-steps N")
    assert shown[1].startswith("--trials must be a positive integer")
    assert shown[2].startswith("cannot read --timeout 'soon'")


def test_a_field_is_shown_as_its_flag_where_the_text_names_it_not_in_a_value() -> None:
    with pytest.raises(SearchOptionsError) as raised:
        SearchLimits(timeout="steps")  # the value reads as another field's name
    (found,) = raised.value.found
    assert _with_flags(found.text, found.fields) == (
        found.text.replace("timeout", "--timeout", 1)
    ), "only the named field is replaced, once"
    assert "'steps'" in _with_flags(found.text, found.fields)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--timeout", "0"], "--timeout must be a positive duration"),
        (["--burst-timeout", "soon"], "cannot read --burst-timeout 'soon'"),
        (["--finalists", "0"], "--finalists must be a positive integer"),
        (["--seed", "-1"], "--seed must be"),
    ],
)
def test_an_error_on_a_field_names_its_flag(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # refused before the study is made: nothing written
    result = CliRunner().invoke(app, ["search", "--model", "mu", "--budget", "1GB", *args])
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output


def test_each_flag_s_default_is_its_field_s() -> None:
    """The command states its defaults (for --help) beside the records' own: a default
    changed in the library and not on the command would change the API alone. A flag
    left unset (None) takes the field's default; --finish's None is the field's False."""
    import dataclasses

    from autotune.core.units import parse_duration
    from autotune.study.session import options

    records: dict[str, Any] = {
        "scope": options.SearchScope,
        "machine": options.SearchMachine,
        "limits": options.SearchLimits,
        "race": options.SearchRace,
        "study": options.SearchStudy,
        "output": options.SearchOutput,
    }
    command = typer.main.get_command(app).commands["search"]  # type: ignore[attr-defined]
    flag_defaults = {p.name: p.default for p in command.params}
    for path, flag in FLAGS.items():
        record, name = path.split(".")
        default = {f.name: f.default for f in dataclasses.fields(records[record])}[name]
        given = flag_defaults[flag.removeprefix("--").replace("-", "_")]
        if given is None:
            continue
        if name == "burst_timeout":
            given = parse_duration(given)
        assert given == default, f"{flag}: {given!r} on the command, {default!r} in {path}"


def test_the_report_looks_in_the_search_s_runs_folder_by_default() -> None:
    from autotune.report.data import DEFAULT_RUNS_DIR as REPORT_RUNS_DIR
    from autotune.study.session.options import DEFAULT_RUNS_DIR

    command = typer.main.get_command(app).commands["report"]  # type: ignore[attr-defined]
    runs_dir = next(p.default for p in command.params if p.name == "runs_dir")
    assert runs_dir == REPORT_RUNS_DIR == DEFAULT_RUNS_DIR
