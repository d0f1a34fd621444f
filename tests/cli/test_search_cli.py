"""`autotune search` through the CLI, with a fake burst function and a hand-made machine."""

from __future__ import annotations

import errno
import json
import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from typer.testing import CliRunner

import autotune.burst.supervisor
import autotune.machine.hardware
from autotune.cli.main import app
from autotune.testing.burst import FakeBurst, cpu_profile

MODEL_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn
    from autotune.contract.spec import Knob, ModelSpec

    def build(width=4, block_group=1, activation_checkpointing=False):
        return nn.Linear(width, width)

    def make_batch(args, batch_size, seq_len, generator):
        return {"x": torch.zeros(batch_size, seq_len, args["width"])}

    def loss(model, batch):
        return model(batch["x"]).pow(2).mean()

    spec = ModelSpec(name="toy", description="a toy", task="lm", build_fn=build,
                     make_batch_fn=make_batch, loss_fn=loss, flops_fn=lambda a, s: 1.0,
                     args={"width": 4}, seq_len=64, max_seq_len=256, global_batch=32,
                     supports_checkpointing=True,
                     knobs=(Knob(name="block_group", values=(1, 2, 4), default=1),))
    """
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, FakeBurst]:
    """A working directory with a model file; the burst and the probe faked."""
    model = tmp_path / "toy_model.py"
    model.write_text(MODEL_FILE)
    monkeypatch.chdir(tmp_path)
    burst = FakeBurst()
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", burst)
    monkeypatch.setattr(autotune.machine.hardware, "probe", lambda: cpu_profile(ram=16 * 10**9))
    return f"{model}:spec", burst


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, ["search", *args])


def test_search_writes_a_preset_and_prints_the_summary(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    from autotune.preset import load_preset

    model, burst = env
    result = CliRunner().invoke(
        app, ["search", "--model", model, "--budget", "1GB", "--trials", "5", "--steps", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "Preset written" in result.stdout and "best.yaml" in result.stdout
    assert "Speedup over naive" in result.stdout and "Top configs" in result.stdout
    assert "Finalist race (2 interleaved rounds)" in result.stdout and "winner" in result.stdout
    assert "naive" in result.stderr  # the live table: role and rows on stderr
    preset = load_preset(tmp_path / "best.yaml")
    assert preset.model.name == model and preset.task.global_batch == 32
    assert len(burst.calls) == 5  # the trials; then the race re-measures the finalists
    assert len(burst.verify_calls) == len(preset.race.entries) >= 2
    assert list((tmp_path / "autotune_runs").glob("*/study.db"))


def test_json_output_and_resume(env: tuple[str, FakeBurst], tmp_path: Path) -> None:
    model, burst = env
    base = ["search", "--model", model, "--budget", "1GB", "--steps", "3", "--json"]
    first = CliRunner().invoke(app, [*base, "--trials", "3", "--output", "a.yaml"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["counts"]["ran"] == 3 and data["preset_path"] == "a.yaml"
    assert data["trials"][0]["role"] == "naive" and data["best"]["status"] == "ok"
    second = CliRunner().invoke(app, [*base, "--trials", "5", "--output", "b.yaml"])
    assert second.exit_code == 0, second.output
    again = json.loads(second.stdout)
    assert again["study_name"] == data["study_name"]  # the same study, resumed
    assert again["counts"]["ran"] == 5
    assert len(burst.calls) == 5  # 3 + 2: nothing measured twice


def test_a_study_resumed_with_other_measurement_settings_is_refused(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    # The study's name holds the model, device, budget, batch and length, not how its
    # trials were measured: a resume with other --steps, --warmup or --seed went on
    # silently, ranking figures measured two ways as if alike.
    model, burst = env
    base = ["search", "--model", model, "--budget", "1GB", "--json", "--steps", "3"]
    first = CliRunner().invoke(app, [*base, "--trials", "2", "--output", "a.yaml"])
    assert first.exit_code == 0, first.output
    name, preset = json.loads(first.stdout)["study_name"], (tmp_path / "a.yaml").read_text()
    for other, shown in [
        (["--steps", "5"], "--steps: the study has 3, now 5"),
        (["--warmup", "2"], "--warmup: the study has 1, now 2"),  # 1: a CPU's default
        (["--seed", "7"], "--seed: the study has 0, now 7"),
    ]:
        refused = CliRunner().invoke(app, [*base, "--trials", "3", "--output", "a.yaml", *other])
        assert refused.exit_code == 2, refused.output
        assert "Traceback" not in refused.output and refused.stdout == ""
        message = " ".join(refused.stderr.split())
        assert f"the study {name!r} was made for a different search ({shown})" in message
        assert "give a new study name (--study NAME)" in message, message
    assert len(burst.calls) == 2  # nothing measured under the other settings
    assert (tmp_path / "a.yaml").read_text() == preset  # nor the preset replaced
    # the study is whole: the same settings resume it (a CPU's warm-up given or not)
    again = CliRunner().invoke(app, [*base, "--trials", "3", "--warmup", "1", "-o", "b.yaml"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["study_name"] == name and len(burst.calls) == 3


def test_a_study_resumed_with_other_limits_and_race_settings_goes_on(
    env: tuple[str, FakeBurst],
) -> None:
    # They change how much is measured and how the finalists race (anew, side by side),
    # not how a trial is measured.
    model, burst = env
    base = ["search", "--model", model, "--budget", "1GB", "--json", "--steps", "3"]
    first = CliRunner().invoke(app, [*base, "--trials", "2"])
    assert first.exit_code == 0, first.output
    other = ["--trials", "3", "--burst-timeout", "60s", "--finalists", "2", "--race-rounds", "3"]
    again = CliRunner().invoke(app, [*base, *other])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["study_name"] == json.loads(first.stdout)["study_name"]
    assert len(burst.calls) == 3


def test_a_resume_with_a_longer_burst_timeout_says_which_timeouts_it_measures_again(
    env: tuple[str, FakeBurst], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = env
    burst = FakeBurst(compile_needs_s=30.0)  # compiled bursts time out under 30 s
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", burst)
    base = ["search", "--model", model, "--budget", "1GB", "--steps", "3"]
    first = CliRunner().invoke(app, [*base, "--json", "--trials", "6", "--burst-timeout", "10s"])
    assert first.exit_code == 0, first.output
    trials = json.loads(first.stdout)["trials"]
    timed_out = [f"#{t['number']}" for t in trials if t["status"] == "timeout"]
    assert timed_out
    again = CliRunner().invoke(app, [*base, "--trials", "9", "--burst-timeout", "1m"])
    assert again.exit_code == 0, again.output
    output = " ".join(again.output.split())  # the console wraps a long line
    assert output.count("--burst-timeout") == 1, output
    assert (
        f"{len(timed_out)} config{'s' if len(timed_out) > 1 else ''} timed out under a shorter "
        f"--burst-timeout than this search's (60 s): {', '.join(timed_out)} under 10 s; "
        "queued to be measured again under it"
    ) in output


def test_too_small_a_budget_exits_2_with_what_the_smallest_config_needed(
    env: tuple[str, FakeBurst], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model, _ = env
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", FakeBurst(base=3 * 10**9))
    result = CliRunner().invoke(app, ["search", "--model", model, "--budget", "2GB"])
    assert result.exit_code == 2, result.output
    assert "too small" in result.stderr and "smallest config" in result.stderr
    assert "1.86 GiB" in result.stderr  # the peak it reached (2 GB) before running out
    assert "Traceback" not in result.output
    assert not (tmp_path / "best.yaml").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--knob", "precison=bf16"], "unknown knob 'precison'"),
        (["--knob", "precision=fp8"], "--knob precision: unknown value 'fp8'"),
        (["--knob", "precision=fp16"], "fp16 needs a CUDA device"),
        (["--knob", "block_group=3"], "allowed here: 1, 2, 4"),
        (["--knob", "compile"], "NAME=VALUE"),
        (["--budget", "lots"], "cannot read budget 'lots'"),
        (["--budget", "12"], "has no unit"),
        (["--budget", "0.0"], "budget must be positive, got '0.0'"),
        (["--budget", "0GB"], "budget must be positive, got '0GB'"),
        (["--budget", "0.1B"], "budget must be at least one byte"),
        (["--timeout", "soon"], "cannot read --timeout"),
        (["--seq-len", "64-32"], "cannot read --seq-len"),
        (["--seq-len", "1024"], "at most 256"),
        (["--objective", "speed"], "--objective must be one of"),
        (["--objective", "time-to-train"], "needs --train-steps"),
        (["--device", "cuda:0"], "no NVIDIA GPU"),
        (["--trials", "0"], "--trials must be a positive integer"),
        (["--output", "."], "is a directory"),
        (["--output", "/dev/null/best.yaml"], "'/dev/null' is not a folder"),
        (["--output", "newdir/"], "--output 'newdir/' ends with '/', so it names a folder"),
        (["--output", "/dev/null"], "--output '/dev/null' is a character device"),
        (["--storage", "journal:/dev/zero"], "the file '/dev/zero' is a character device"),
        (["--model", "/dev/zero:spec"], "model file '/dev/zero' is a character device"),
        (["--warm-start", "/dev/zero"], "preset file '/dev/zero' is a character device"),
        (["--study", ".."], "--study '..': expected a plain name"),
        (["--study", "s" * 300], "--study name of 300 characters: expected at most 200"),
        (["--storage", "sqlite:///:memory:"], "an in-memory SQLite study cannot be resumed"),
        (["--storage", "sqlite:///"], "names no database file"),
        (["--storage", "journal:nope/j.log"], "the folder 'nope' does not exist"),
        (["--warm-start", "nope.yaml"], "no preset file 'nope.yaml'"),
        (["--storage", "postgresql://u@127.0.0.1:1/db"], "cannot open the study storage"),
        (["--storage", "postgresq://u@host/db"], "cannot open the study storage"),
        (["--storage", "mysql://u@host/db"], "MySQL needs a driver: pip install PyMySQL"),
        (["--devices", "cuda:0,cuda:1"], "no NVIDIA GPU"),
        (["--devices", "all"], "--cpu-workers N"),
        (["--devices", "cpu"], "one worker by default"),
        (["--cpu-workers", "999"], "--cpu-workers must be between 1"),
        (["--finish", "a", "--study", "b"], "names another study"),
        (["--storage", "sqlite:///s.db", "--output", "./s.db"], "the study's own storage file"),
        (["--storage", "journal:j.log", "--output", "j.log"], "the study's own storage file"),
    ],
)
def test_usage_errors_exit_2(env: tuple[str, FakeBurst], args: list[str], expected: str) -> None:
    model, burst = env
    base = {"--model": model, "--budget": "1GB"}
    for i in range(0, len(args) - 1, 2):
        base.pop(args[i], None)
    flat = [x for kv in base.items() for x in kv]
    result = CliRunner().invoke(app, ["search", *flat, *args])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert not burst.calls


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder nothing can be made in, as a read-only mount is: made read-only, and, for
    root (whom the mode does not stop), every creation in it fails with EROFS."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    real_open, real_mkdir = os.open, os.mkdir

    def inside(path: object) -> bool:
        return Path(os.path.abspath(os.fspath(path))).is_relative_to(folder)  # type: ignore[arg-type]

    def refuse(path: object) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))  # type: ignore[arg-type]

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and inside(path):
            raise refuse(path)
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path):
            raise refuse(path)
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    yield folder
    folder.chmod(0o755)


def test_a_read_only_working_folder_says_where_it_cannot_write(
    env: tuple[str, FakeBurst], tmp_path: Path, read_only: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``search`` in a read-only folder failed in mkdir('autotune_runs') with an OSError
    (exit 1); now it is refused before anything runs, naming the folder and what to do."""
    model, burst = env
    monkeypatch.chdir(read_only)
    output = str(tmp_path / "best.yaml")  # writable: the runs folder is what is refused
    result = CliRunner().invoke(
        app, ["search", "--model", model, "--budget", "1GB", "--output", output]
    )
    assert result.exit_code == 2, result.output
    assert (
        "the runs folder 'autotune_runs': cannot write in '.' (Read-only file system)"
        in result.stderr
    )
    assert "run it from a folder you can write to" in result.stderr
    assert not burst.calls and "Traceback" not in result.output


def test_a_warm_start_that_is_no_preset_is_refused_before_the_study_is_made(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    model, burst = env
    (tmp_path / "empty.yaml").write_text("")
    args = ["search", "--model", model, "--budget", "1GB", "--warm-start", "empty.yaml"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "is empty" in result.stderr
    assert not burst.calls and not (tmp_path / "autotune_runs").exists()


def test_unknown_knob_lists_the_allowed_ones(env: tuple[str, FakeBurst]) -> None:
    model, _ = env
    result = CliRunner().invoke(
        app, ["search", "--model", model, "--budget", "1GB", "--knob", "blockgroup=2"]
    )
    assert result.exit_code == 2
    for name in ("micro_batch", "precision", "compile", "num_workers", "block_group"):
        assert name in result.stderr


def test_unknown_model_exits_2(env: tuple[str, FakeBurst]) -> None:
    result = CliRunner().invoke(app, ["search", "--model", "no-such-model", "--budget", "1GB"])
    assert result.exit_code == 2 and "unknown model" in result.stderr


def test_fraction_budget_and_knobs_reach_the_search(env: tuple[str, FakeBurst]) -> None:
    model, burst = env
    result = CliRunner().invoke(
        app,
        [
            "search",
            "--model",
            model,
            "--budget",
            "0.25",
            "--trials",
            "3",
            "--knob",
            "precision=bf16",
            "--knob",
            "compile=off",
            "--seq-len",
            "32-64",
            "--json",
            "--output",
            "x.yaml",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["budget_bytes"] == 4 * 10**9
    assert data["seq_len"] == [32, 64]
    assert all(c.precision == "bf16" and c.compile == "off" for c in burst.calls)


def test_budget_above_the_device_warns(env: tuple[str, FakeBurst]) -> None:
    model, _ = env
    result = CliRunner().invoke(
        app, ["search", "--model", model, "--budget", "64GB", "--trials", "1", "-o", "y.yaml"]
    )
    assert result.exit_code == 0, result.output
    assert "above the memory" in result.stderr


def test_ctrl_c_exits_130_and_leaves_the_study_consistent(
    env: tuple[str, FakeBurst], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model, _ = env
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", FakeBurst(interrupt_at=3))
    result = CliRunner().invoke(app, ["search", "--model", model, "--budget", "1GB"])
    assert result.exit_code == 130
    assert "rerun" in result.stderr
    # said once, by the search, with the study it left (not again by the CLI)
    assert result.stderr.count("interrupted") == 1, result.stderr
    assert "2 measured trials are saved in study" in result.stderr
    (db,) = (tmp_path / "autotune_runs").glob("*/study.db")
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    states = [t.state.name for t in study.trials if t.state.name != "WAITING"]
    assert states == ["COMPLETE", "COMPLETE", "FAIL"]  # nothing left RUNNING
    assert not (tmp_path / "best.yaml").exists()


@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_take_the_ctrl_c_path(
    env: tuple[str, FakeBurst],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sig: str,
    code: int,
) -> None:
    model, _ = env
    fake = FakeBurst()

    def burst(*args: object, **kwargs: object) -> object:
        if len(fake.calls) == 2:  # the third trial's burst: a scheduler stops the job
            os.kill(os.getpid(), getattr(signal, sig))
        return fake(*args, **kwargs)

    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", burst)
    # under nohup SIGHUP is ignored, and the search rightly leaves it so: this test is
    # about a process that receives it
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    before = signal.getsignal(signal.SIGTERM)
    try:
        result = CliRunner().invoke(app, ["search", "--model", model, "--budget", "1GB"])
    finally:
        signal.signal(signal.SIGHUP, hup)
    assert result.exit_code == code, result.output
    assert f"stopped by {sig}" in result.stderr and "rerun" in result.stderr
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are given back
    (db,) = (tmp_path / "autotune_runs").glob("*/study.db")
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    trials = [t for t in study.trials if t.state.name != "WAITING"]
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "FAIL"]
    outcome = trials[-1].user_attrs["outcome"]
    assert outcome["reason"] == f"interrupted ({sig}) while its burst ran"
    assert not (tmp_path / "best.yaml").exists()


def test_the_race_is_set_from_the_command_line(env: tuple[str, FakeBurst], tmp_path: Path) -> None:
    from autotune.preset import load_preset

    model, _ = env
    base = ["search", "--model", model, "--budget", "1GB", "--trials", "4", "--steps", "3"]
    result = CliRunner().invoke(app, [*base, "--race-rounds", "3", "--finalists", "1"])
    assert result.exit_code == 0, result.output
    race = load_preset(tmp_path / "best.yaml").race
    assert race is not None and race.rounds == 3
    assert sum("finalist" in e.roles for e in race.entries) == 1
    bad = CliRunner().invoke(app, [*base, "--race-rounds", "0"])
    assert bad.exit_code == 2 and "--race-rounds must be a positive integer" in bad.output


@pytest.mark.parametrize("storage", [None, "journal:j.log", "sqlite:///s.db"])
def test_finish_of_a_study_that_does_not_exist_is_exit_2_and_creates_nothing(
    env: tuple[str, FakeBurst], tmp_path: Path, storage: str | None
) -> None:
    model, burst = env
    before = set(tmp_path.iterdir())
    args = ["--model", model, "--budget", "1GB", "--finish", "nosuchstudy"]
    args += ["--storage", storage] if storage else []
    result = CliRunner().invoke(app, ["search", *args])
    assert result.exit_code == 2, result.output
    assert "no study named 'nosuchstudy'" in result.stderr and "--worker" in result.stderr
    assert "Traceback" not in result.output
    assert set(tmp_path.iterdir()) == before and not burst.calls  # nothing created


def test_finish_names_the_studies_the_storage_holds(env: tuple[str, FakeBurst]) -> None:
    model, _ = env
    url = "sqlite:///s.db"
    optuna.create_study(study_name="there", storage=url)
    args = ["--model", model, "--budget", "1GB", "--finish", "gone", "--storage", url]
    result = CliRunner().invoke(app, ["search", *args])
    assert result.exit_code == 2, result.output
    assert "no study named 'gone'" in result.stderr and "'there'" in result.stderr
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["there"]


def test_in_80_columns_the_tables_fold_configs_and_cut_none(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    """The race's point is telling the winner from the runner-up: at 80 columns every
    word of every entrant's config is printed whole (folded onto more lines, never cut)."""
    from autotune.preset import load_preset

    model, _ = env
    args = ["search", "--model", model, "--budget", "1GB", "--trials", "5", "--steps", "3"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    race = load_preset(tmp_path / "best.yaml").race
    assert race is not None and len(race.entries) >= 2
    words = set(result.stdout.split())
    for entry in race.entries:
        assert set(entry.config.split()) <= words, entry.config


def test_the_time_limit_counts_from_the_commands_start(
    env: tuple[str, FakeBurst], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `autotune search --timeout 16s` ended 17-19 s after the shell started it: the clock
    # started after Python's start-up and the imports, 1-3 s on a 2-core CPU.
    import time

    from autotune.cli._common import process_started, state

    model, _ = env
    base = ["--model", model, "--budget", "1GB", "--trials", "2", "--steps", "3", "--json"]
    monkeypatch.setattr(state, "started", time.monotonic() - 30.0)  # as main() sets it
    long_ago = invoke(*base, "--output", "a.yaml")
    assert long_ago.exit_code == 0, long_ago.output
    assert json.loads(long_ago.stdout)["wall_s"] >= 30.0
    monkeypatch.setattr(state, "started", None)  # inside another program: from the call
    now = invoke(*base, "--output", "b.yaml", "--study", "other")
    assert now.exit_code == 0, now.output
    assert json.loads(now.stdout)["wall_s"] < 30.0
    # this process's start, at most the given seconds ago
    assert time.monotonic() - 60.0 <= process_started() <= time.monotonic()
    assert process_started(most_s=0.0) == pytest.approx(time.monotonic(), abs=0.5)


def test_the_console_script_notes_its_process_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.cli.main as cli_main
    from autotune.cli._common import state

    monkeypatch.setattr(state, "started", None)
    monkeypatch.setattr(cli_main, "app", lambda prog_name: None)
    monkeypatch.setattr(cli_main, "process_started", lambda: 123.0)
    cli_main.main()
    assert state.started == 123.0


@pytest.mark.parametrize(
    ("arg", "said"),
    [("n_layers=0", "n_layers must be a positive integer, got 0"),
     ("n_layers=1.5", "n_layers must be a positive integer, got 1.5")],
)  # fmt: skip
def test_a_model_size_its_code_refuses_stops_the_search_before_any_trial(
    env: tuple[str, FakeBurst], tmp_path: Path, arg: str, said: str
) -> None:
    """mu with ``n_layers=0`` ran 108 failing trials to "no config ran successfully within
    the budget": the model is built once on the meta device first, and its refusal is the
    answer, with nothing written."""
    _model, burst = env
    result = invoke("--model", "mu", "--budget", "1GB", "--model-arg", arg, "--trials", "5")
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "model 'mu' refused its arguments" in result.stderr and said in result.stderr  # type: ignore[attr-defined]
    assert "--model-arg values" in result.stderr  # type: ignore[attr-defined]
    assert not burst.calls and not (tmp_path / "autotune_runs").exists()
    assert not (tmp_path / "best.yaml").exists()


def test_the_output_replaces_a_preset_but_never_a_file_of_the_users(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    """``-o notes.txt`` wrote a preset over the user's notes without a word. A file that
    is not a preset (nor empty) is refused before anything runs; an earlier preset is
    replaced, as the docs say."""
    model, burst = env
    notes = tmp_path / "notes.txt"
    for text in ("my precious notes\n", "- a list\n", "schema_version: 2\n", "\x00\xff binary"):
        notes.write_text(text)
        result = invoke("--model", model, "--budget", "1GB", "--trials", "3", "-o", str(notes))
        assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
        assert "exists and is not an autotune preset" in result.stderr  # type: ignore[attr-defined]
        assert notes.read_text() == text and not burst.calls
    first = invoke("--model", model, "--budget", "1GB", "--trials", "3", "-o", "best.yaml")
    assert first.exit_code == 0, first.output  # type: ignore[attr-defined]
    again = invoke("--model", model, "--budget", "1GB", "--trials", "4", "-o", "best.yaml",
                   "--study", "again")  # fmt: skip
    assert again.exit_code == 0, again.output  # type: ignore[attr-defined]
    (tmp_path / "empty.yaml").write_text("")
    empty = invoke("--model", model, "--budget", "1GB", "--trials", "3", "-o", "empty.yaml",
                   "--study", "third")  # fmt: skip
    assert empty.exit_code == 0, empty.output  # type: ignore[attr-defined]
    assert "schema_version" in (tmp_path / "empty.yaml").read_text()


def test_a_users_model_that_cannot_be_built_on_the_meta_device_is_searched(
    env: tuple[str, FakeBurst], tmp_path: Path
) -> None:
    """The up-front meta build is for built-in and hf: models: a user's build may need
    real tensors (a stochastic depth list read with .item(), a .to() at the end), which
    the trials give it; built on the meta device up front, it stopped the search."""
    model, burst = env
    path = tmp_path / "toy_model.py"
    path.write_text(
        path.read_text().replace(
            "    return nn.Linear(width, width)",
            "    drop = [x.item() for x in torch.linspace(0, 0.1, 2)]  # real tensors only\n"
            "    return nn.Linear(width, width)",
        )
    )
    assert ".item()" in path.read_text()
    result = invoke("--model", model, "--budget", "1GB", "--trials", "3", "--steps", "3")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert len(burst.calls) == 3
