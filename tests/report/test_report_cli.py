"""`autotune report` at the CLI edge: the odd studies and presets give a sensible page or a
one-paragraph error with exit code 2, never a traceback."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
import yaml
from conftest import Searched
from typer.testing import CliRunner, Result

import autotune.burst.supervisor
import autotune.machine.hardware
from autotune.cli.main import app
from autotune.core.errors import AutotuneError
from autotune.testing.burst import FakeBurst, cpu_profile, run

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")


def report(*args: str) -> Result:
    return CliRunner().invoke(app, ["report", *args])


def test_report_of_a_preset_writes_the_page_and_the_png(searched: Searched, tmp_path: Path) -> None:
    out, png = tmp_path / "r.html", tmp_path / "s.png"
    result = report(str(searched.preset), "--out", str(out), "--png", str(png))
    assert result.exit_code == 0, result.output
    assert f"report written: {out} and {png}" in result.stdout
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and png.stat().st_size


def test_report_of_a_study_name_finds_it_in_the_runs_folder(
    searched: Searched, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    args = [searched.result.study_name, "--runs-dir", str(searched.runs_dir), "--out", str(out)]
    result = report(*args)
    assert result.exit_code == 0, result.output
    assert 'id="plot-history"' in out.read_text(encoding="utf-8")


def test_a_study_with_one_trial_gives_a_page_that_skips_the_importances(tmp_path: Path) -> None:
    one = run(tmp_path, FakeBurst(), trials=1, study="one")
    assert sum(1 for t in one.trials if t.ran) == 1
    out = tmp_path / "one.html"
    result = report("one", "--runs-dir", str(tmp_path / "runs"), "--out", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "parameter importances need at least 5 measured configs" in page
    assert "No knob took two values" in page
    assert 'id="plot-history"' in page and 'id="plot-memory"' in page


def test_a_study_whose_name_is_not_a_plain_file_name_is_found_by_it(tmp_path: Path) -> None:
    run(tmp_path, FakeBurst(), trials=1, study="my study", output=None)
    out = tmp_path / "r.html"
    result = report("my study", "--runs-dir", str(tmp_path / "runs"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "autotune report: my study" in out.read_text(encoding="utf-8")


def test_a_study_whose_trials_all_failed_gives_a_page_saying_so(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match="no config ran successfully"):
        run(tmp_path, FakeBurst(fail=lambda c: "crash"), trials=3, study="bad", output=None)
    out = tmp_path / "bad.html"
    result = report("bad", "--runs-dir", str(tmp_path / "runs"), "--out", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "No config ran successfully within the budget" in page
    assert 'id="plot-history"' in page  # the failed trials, marked as such
    statuses = re.findall(r'<tr><td class="num">\d+</td><td>(\w+)', page)
    assert statuses and set(statuses) == {"crash"}
    assert "There is no winner" in page


def test_a_preset_whose_study_is_gone_gives_a_page_of_the_preset(
    searched: Searched, tmp_path: Path
) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["search"]["storage"] = f"sqlite:///{tmp_path / 'gone' / 'study.db'}"
    preset = tmp_path / "orphan.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    out = tmp_path / "orphan.html"
    result = report(str(preset), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "could not be read" in result.stderr and "Traceback" not in result.output
    page = out.read_text(encoding="utf-8")
    assert "shows the preset alone" in page and "Test CPU (cpu, 2 cores)" in page
    assert "The preset's measurement" in html.unescape(page)  # whichever entity the escaper uses
    assert not (tmp_path / "gone").exists()  # a report never creates a study file


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["no-such-study"], "no study named 'no-such-study'"),
        (["missing.yaml"], "does not exist"),
        (["x", "--storage", "sqlite:///nowhere/study.db"], "no file"),
    ],
)
def test_a_source_that_names_nothing_is_exit_2_in_one_paragraph(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = report(*args)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())  # nothing written, no study file made


def test_a_study_not_in_the_storage_names_those_that_are(searched: Searched) -> None:
    url = searched.result.storage
    result = report("other", "--storage", url, "--out", "/dev/null")
    assert result.exit_code == 2
    assert searched.result.study_name in result.stderr


def test_a_multi_objective_study_is_exit_2_in_one_paragraph(tmp_path: Path) -> None:
    # "RuntimeError: This attribute is not available during multi-objective optimization."
    import optuna

    url = f"sqlite:///{tmp_path / 'x.db'}"
    study = optuna.create_study(study_name="two", storage=url, directions=["minimize"] * 2)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=2)
    result = report("two", "--storage", url, "--out", str(tmp_path / "r.html"))
    assert result.exit_code == 2, result.output
    assert "study 'two' has 2 objectives: a multi-objective Optuna study" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_an_unwritable_out_is_exit_2(searched: Searched, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    result = report(str(searched.preset), "--out", str(tmp_path / "file" / "r.html"))
    assert result.exit_code == 2 and "--out" in result.stderr
    assert "Not a directory" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("flag", ["--out", "--png"])
def test_a_missing_folder_is_refused_before_the_page_is_drawn(
    searched: Searched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """Drawing the plots takes seconds: a file that cannot be written is said first."""
    import autotune.report.page
    import autotune.report.plots

    def drawn(*args: object, **kwargs: object) -> None:
        raise AssertionError("drawn before the folder was checked")

    monkeypatch.setattr(autotune.report.page, "render_html", drawn)
    monkeypatch.setattr(autotune.report.plots, "summary_png", drawn)
    out = {"--out": tmp_path / "r.html", "--png": tmp_path / "s.png"}
    out[flag] = tmp_path / "no" / "such" / out[flag].name
    result = report(str(searched.preset), "--out", str(out["--out"]), "--png", str(out["--png"]))
    assert result.exit_code == 2, result.output
    assert f"{flag} '{out[flag]}': cannot write it (No such file or directory)" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_out_and_png_replace_only_a_report_s_own_files(searched: Searched, tmp_path: Path) -> None:
    """report -o ckpt.pt turned a checkpoint into a page and --png mine.yaml a preset
    into an image, with exit 0; now only an earlier report's page or image is replaced."""
    ckpt, mine = tmp_path / "ckpt.pt", tmp_path / "mine.yaml"
    ckpt.write_bytes(b"PK\x03\x04 a checkpoint")
    mine.write_text("schema_version: 2\nconfig: {}\n", encoding="utf-8")
    page, image = tmp_path / "r.html", tmp_path / "s.png"
    for args, kept in (
        (["--out", str(ckpt)], ckpt),
        (["--out", str(page), "--png", str(mine)], mine),
    ):
        before = kept.read_bytes()
        result = report(str(searched.preset), *args)
        assert result.exit_code == 2, result.output
        assert "exists and is not a page or image autotune report wrote" in result.output
        assert kept.read_bytes() == before and not page.exists()
    for _ in range(2):  # a rerun replaces its own page and image
        result = report(str(searched.preset), "--out", str(page), "--png", str(image))
        assert result.exit_code == 0, result.output
    (tmp_path / "empty.html").touch()
    assert report(str(searched.preset), "--out", str(tmp_path / "empty.html")).exit_code == 0


def test_an_out_that_names_a_folder_is_refused_and_makes_nothing(
    searched: Searched, tmp_path: Path
) -> None:
    result = report(str(searched.preset), "--out", f"{tmp_path / 'newdir'}/")
    assert result.exit_code == 2 and "names a folder, not a file" in result.output
    assert not (tmp_path / "newdir").exists()


def test_out_or_png_on_the_report_s_own_input_is_exit_2_and_keeps_it(
    searched: Searched, tmp_path: Path
) -> None:
    preset_text = searched.preset.read_bytes()
    db = searched.runs_dir / searched.result.study_name / "study.db"
    study_bytes = db.read_bytes()
    name, runs = searched.result.study_name, str(searched.runs_dir)
    for args, expected in [
        ([str(searched.preset), "--out", str(searched.preset)], "the preset it reports"),
        ([str(searched.preset), "--png", str(searched.preset)], "the preset it reports"),
        ([name, "--runs-dir", runs, "--out", str(db)], "the study's storage file"),
        (
            [name, "--runs-dir", runs, "--out", str(tmp_path / "r"), "--png", str(tmp_path / "r")],
            "the same file",
        ),
    ]:
        result = report(*args)
        assert result.exit_code == 2, result.output
        assert expected in result.stderr and "Traceback" not in result.output
    assert searched.preset.read_bytes() == preset_text and db.read_bytes() == study_bytes


def test_without_matplotlib_the_error_names_the_extra(
    searched: Searched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    result = report(str(searched.preset), "--out", str(tmp_path / "r.html"))
    assert result.exit_code == 2
    assert 'pip install "autotune-train[report]"' in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "r.html").exists()


TOY_MODEL = """
import torch
from torch import nn
from autotune.contract.spec import ModelSpec

spec = ModelSpec(name="toy", description="a toy", task="lm",
                 build_fn=lambda width=4: nn.Linear(width, width),
                 make_batch_fn=lambda a, b, t, g: {"x": torch.zeros(b, t, a["width"])},
                 loss_fn=lambda m, b: m(b["x"]).pow(2).mean(), flops_fn=lambda a, s: 1.0,
                 args={"width": 4}, seq_len=64, max_seq_len=256, global_batch=32)
"""


def test_search_report_writes_the_page_beside_the_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "toy_model.py"
    model.write_text(TOY_MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", FakeBurst())
    monkeypatch.setattr(autotune.machine.hardware, "probe", lambda: cpu_profile(ram=16 * 10**9))
    args = ["search", "--model", f"{model}:spec", "--budget", "1GB", "--trials", "3"]
    result = CliRunner().invoke(app, [*args, "--output", "out/best.yaml", "--report"])
    assert result.exit_code == 0, result.output
    page = tmp_path / "out" / "best.html"
    assert f"report written: {Path('out/best.html')}" in result.stderr
    text = page.read_text(encoding="utf-8")
    assert 'id="plot-history"' in text and "autotune train --preset out/best.yaml" in text


def test_search_report_without_matplotlib_stops_before_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    burst = FakeBurst()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", burst)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = ["search", "--model", "gpt-small", "--budget", "1GB", "--report"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "autotune-train[report]" in result.stderr
    assert not burst.calls and not (tmp_path / "autotune_runs").exists()


def test_report_json_says_what_was_written_and_prints_nothing_else(
    searched: Searched, tmp_path: Path
) -> None:
    import json

    out = tmp_path / "r.html"
    result = report(str(searched.preset), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["html"] == str(out) and out.is_file()
    assert summary["png"] is None
    assert summary["trials"] >= len(searched.result.trials) > 0  # the study holds every trial
    assert "report written" not in result.stdout


@pytest.mark.parametrize(
    ("storage", "leftover"),
    [
        ("journal:{tmp}/j.log", "j.log"),
        ("sqlite:///{tmp}/s.db", "s.db"),
        ("journal:{tmp}/nofolder/j.log?password=s3cret", "nofolder"),
    ],
)
def test_reading_a_preset_creates_no_storage_and_shows_no_password(
    searched: Searched, tmp_path: Path, storage: str, leftover: str
) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["search"]["storage"] = storage.format(tmp=tmp_path)
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    out = tmp_path / "p.html"
    result = report(str(preset), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / leftover).exists()  # reading never creates a storage
    shown = result.output + out.read_text(encoding="utf-8")
    assert "s3cret" not in shown
    assert "is not there" in result.output and "shows the preset alone" in result.output


def test_a_preset_with_a_password_in_its_storage_never_shows_it(
    searched: Searched, tmp_path: Path
) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["search"]["storage"] = "postgresql://user:s3cret@127.0.0.1:1/db"
    preset = tmp_path / "pg.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    out = tmp_path / "pg.html"
    result = report(str(preset), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    shown = result.output + out.read_text(encoding="utf-8")
    assert "s3cret" not in shown and "user:***@127.0.0.1" in result.output


def _preset_with_storage(searched: Searched, tmp_path: Path, storage: str) -> Path:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["search"]["storage"] = storage
    preset = tmp_path / "shared.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return preset


def test_a_shared_preset_cannot_make_the_report_change_another_sqlite_file(
    searched: Searched, tmp_path: Path
) -> None:
    import sqlite3

    victim = tmp_path / "places.sqlite"  # someone's database, not a study
    with sqlite3.connect(victim) as db:
        db.execute("CREATE TABLE bookmarks (url TEXT)")
    before = victim.read_bytes()
    preset = _preset_with_storage(searched, tmp_path, f"sqlite:///{victim}")
    result = report(str(preset), "--out", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == before  # no Optuna tables added, not switched to WAL
    assert not Path(f"{victim}-wal").exists()
    assert "not an Optuna study database" in result.output


def test_a_shared_preset_cannot_make_the_report_connect_to_its_server(
    searched: Searched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setenv("PGPASSWORD", "my-own-db-password")  # libpq would send it
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")  # a client that connects gives up soon
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        preset = _preset_with_storage(searched, tmp_path, f"postgresql://127.0.0.1:{port}/db")
        result = report(str(preset), "--out", str(tmp_path / "r.html"))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert result.exit_code == 0, result.output
    assert "--storage" in result.output and "shows the preset alone" in result.output


def test_dollar_signs_in_a_preset_are_text_in_the_plots_not_mathtext(
    searched: Searched, tmp_path: Path
) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    label = "$\\undefinedmacro{$"  # mathtext's parser raises on it
    raw["name"] = label
    raw["race"] = {
        "rounds": 1,
        "unit": label,
        "winner": label,
        "entries": [{"label": label, "samples": [1.0], "median": 1.0}],
    }
    preset = tmp_path / "dollars.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    out, png = tmp_path / "d.html", tmp_path / "d.png"
    result = report(str(preset), "--out", str(out), "--png", str(png))
    assert result.exit_code == 0, result.output
    assert out.is_file() and png.is_file()


def test_a_storage_given_for_a_preset_that_cannot_be_opened_is_exit_2(
    searched: Searched, tmp_path: Path
) -> None:
    """The storage a preset names may have moved (a note, the preset alone on the page);
    one the user gave with --storage is theirs to fix: ``--storage bogus://`` wrote the
    page and exited 0 with a note."""
    out = tmp_path / "r.html"
    result = report(str(searched.preset), "--storage", "bogus://", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "cannot open the study storage 'bogus://'" in result.stderr
    assert not out.exists()
