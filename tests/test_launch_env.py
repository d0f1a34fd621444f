"""The launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE, the rendezvous address):
a malformed value is one error naming the variable, in every command that reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core import launch_env
from autotune.core.errors import UsageError

PRESET = Path(__file__).resolve().parents[1] / "presets" / "cpu" / "mu.yaml"


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "0x2"])
def test_a_malformed_number_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("RANK", value)
    with pytest.raises(UsageError, match=rf"RANK={value!r} is not a whole number >= 0"):
        launch_env.rank()
    with pytest.raises(UsageError, match="unset RANK to run one process"):
        launch_env.check()


def test_unset_or_empty_reads_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", " ")
    assert (launch_env.world_size(), launch_env.rank()) == (1, 0)
    monkeypatch.setenv("WORLD_SIZE", " 4 ")
    assert launch_env.world_size() == 4


def test_a_group_without_its_rendezvous_address_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert "MASTER_ADDR is not set: start the processes with torchrun" in str(
        launch_env.rendezvous_problem()
    )
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert launch_env.rendezvous_problem() is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "abc"}, "RANK='abc' is not a whole number"),  # a traceback in its warning
        ({"WORLD_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT are not set"),  # torch's traceback
    ],
)
def test_train_refuses_a_malformed_launch_with_exit_2(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "train", "--preset", str(PRESET), "--out", str(out),
         "--max-steps", "1"],
        env={**clean, **env}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_bench_refuses_a_malformed_rank_before_its_burst() -> None:
    # each burst read RANK in its own process: "burst crash ... ValueError", exit 1
    from typer.testing import CliRunner

    from autotune.cli.main import app

    result = CliRunner().invoke(
        app, ["bench", "--model", "mu", "--steps", "1", "--seq-len", "16"], env={"RANK": "x"}
    )
    assert result.exit_code == 2, result.output
    assert "RANK='x' is not a whole number" in result.stderr and "burst" not in result.stderr
