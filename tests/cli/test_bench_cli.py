"""`autotune bench` through the real Typer app: one burst each for ok and not ok, and every
refusal (exit 2) before any trial process starts."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from fake_models import FAKES
from typer.testing import CliRunner

import autotune.burst.supervisor
from autotune.cli.bench import parse_knobs
from autotune.cli.main import app
from autotune.core.errors import UsageError

runner = CliRunner()

BASE = ["bench", "--micro-batch", "2", "--seq-len", "16", "--steps", "2", "--warmup", "1"]


def test_ok_burst_prints_json() -> None:
    result = runner.invoke(app, [*BASE, "--model", f"{FAKES}:fake_spec", "--json", "--verify"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "ok" and data["model"] == "fake"
    assert data["timed_steps"] == 2 and data["warmup_steps"] == 1
    assert data["config"]["micro_batch"] == 2 and data["config"]["seq_len"] == 16
    assert data["tokens_per_s"] > 0 and data["peak_memory_bytes"] > 0
    assert data["checkpoint_bytes"] > 0
    assert data["budget_bytes"] is None


def test_failed_burst_prints_the_table_then_exits_1() -> None:
    result = runner.invoke(app, [*BASE, "--model", f"{FAKES}:nan_spec", "--budget", "8GB"])
    assert result.exit_code == 1, result.output
    assert "status" in result.stdout and "nan" in result.stdout
    assert "budget" in result.stdout  # the peak is shown against the budget
    assert "error: burst nan: loss is nan" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--knob", "block_group=4"], "config.knobs.block_group"),
        (["--knob", "block_group"], "--knob expects name=value"),
        (["--precision", "fp16"], "config.precision: fp16 needs a CUDA device"),
        (["--precision", "fp8"], "config.precision: expected one of"),
        (["--workers", "0", "--prefetch-factor", "2"], "config.prefetch_factor"),
        (["--seq-len", "1000"], "config.seq_len: model 'fake' accepts at most 64"),
        (["--budget", "lots"], "cannot read budget 'lots'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--steps", "0"], "--steps must be a positive integer, got 0"),
        (["--timeout", "0"], "--timeout must be a positive duration"),
        (["--timeout", "nan"], "--timeout must be a positive duration"),
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["--trace", "/"], "--trace '/' is a directory; give a file such as trace.json"),
        (["--trace", "/no/such/folder/t.json"], "the folder '/no/such/folder' does not exist"),
        (["--trace", "/dev/null"], "--trace '/dev/null' is a character device"),
        (["--trace", "/etc/passwd/t.json"], "t.json': '/etc/passwd' is not a folder"),
        (["--trace", "newdir/"], "--trace 'newdir/' ends with '/'"),
        (["--channels-last"], "config.channels_last: model 'fake' is not declared convolutional"),
        (["--expandable-segments"], "config.expandable_segments: a setting of the CUDA"),
    ],
)
def test_refusals_exit_2_without_a_burst(args: list[str], message: str) -> None:
    result = runner.invoke(app, [*BASE, "--model", f"{FAKES}:fake_spec", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_trace_replaces_a_trace_or_an_empty_file_never_another_file(tmp_path: Path) -> None:
    # --trace keep.yaml turned a preset into a 7 MB trace, exit 0
    keep = tmp_path / "keep.yaml"
    keep.write_text("schema_version: 2\n")
    result = runner.invoke(app, [*BASE, "--model", f"{FAKES}:fake_spec", "--trace", str(keep)])
    assert result.exit_code == 2, result.output
    assert "exists and is not a Chrome trace" in result.stderr
    assert keep.read_text() == "schema_version: 2\n"


def test_unknown_model_exits_2() -> None:
    result = runner.invoke(app, [*BASE, "--model", "gtp-small"])
    assert result.exit_code == 2
    assert "unknown model 'gtp-small'" in result.stderr


def test_parse_knobs_reads_yaml_scalars() -> None:
    assert parse_knobs(["block_group=4", "tie=true", "name=abc"]) == {
        "block_group": 4,
        "tie": True,
        "name": "abc",
    }
    assert parse_knobs([]) == {}
    with pytest.raises(UsageError, match="--knob tie is given twice"):  # the last one won
        parse_knobs(["tie=true", "tie=false"])


def test_a_model_that_waits_at_import_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    """bench --timeout 10 waited on a model file that slept at import until killed."""
    model = tmp_path / "sleepy.py"  # unbounded: loads after 2 minutes, no spec
    model.write_text("import time\ntime.sleep(120)\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--model", f"{model}:spec", "--timeout", "2"])
    assert result.exit_code == 1, result.output
    assert "did not load within --timeout (2 s)" in result.output


def test_a_built_in_model_is_not_blamed_for_a_limit_too_short_to_load_it() -> None:
    # "did not load within --timeout (0 s): its module waits or works at import"
    result = runner.invoke(app, ["bench", "--model", "mu", "--timeout", "1e-9"])
    assert result.exit_code == 1, result.output
    assert "did not load within --timeout (1e-09 s): give a longer --timeout" in result.output
    assert "its module" not in result.output


def test_a_built_in_models_refused_argument_exits_2_before_its_burst() -> None:
    # "burst error: ValueError: n_layers must be a positive integer", exit 1, where
    # search, train and models show exit 2 naming the argument
    result = runner.invoke(app, [*BASE, "--model", "mu", "--model-arg", "n_layers=0"])
    assert result.exit_code == 2, result.output
    assert "model 'mu' refused its arguments" in result.stderr and "burst" not in result.stderr


def test_sigterm_during_the_burst_says_so_and_exits_143(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default action ended bench without a word; now the burst's clean-up runs
    (its ``finally``) and the CLI says what stopped it."""
    ended: list[str] = []

    def burst(*args: object, **kwargs: object) -> object:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        finally:
            ended.append("the burst's clean-up")

    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", burst)
    # without the command's handler the test's own takes it (and the test fails), not the
    # default action, which would end the test's process
    before = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        result = runner.invoke(app, [*BASE, "--model", f"{FAKES}:fake_spec"])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert result.exit_code == 143, result.output
    assert "stopped by SIGTERM" in result.stderr
    assert ended == ["the burst's clean-up"]
