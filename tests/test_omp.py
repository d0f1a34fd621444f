"""The ``omp_spin`` switch: OpenMP's wait policy in the environment of every process that
runs a config that spins (autotune/machine/omp.py), and never anywhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from fake_conv import CONV
from fake_lm import FAKE_LM

from autotune.burst.supervisor import run_burst
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.core.errors import ConfigError
from autotune.machine import omp
from autotune.models.registry import load_model
from autotune.study.plan.playbook import playbook_config
from autotune.study.plan.space import SearchSpace
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.toy import toy_spec

SPIN = TrainConfig(micro_batch=2, seq_len=8, omp_spin=True)
PLAIN = TrainConfig(micro_batch=2, seq_len=8)


def test_a_spinning_config_asks_for_active_and_another_keeps_the_users_policy() -> None:
    assert omp.wait_policy(SPIN, None) == "ACTIVE"
    assert omp.wait_policy(SPIN, "PASSIVE") == "ACTIVE"
    assert omp.wait_policy(PLAIN, None) is None
    assert omp.wait_policy(PLAIN, "PASSIVE") == "PASSIVE"
    assert omp.environment_for(SPIN, {"A": "1"}) == {"A": "1", "OMP_WAIT_POLICY": "ACTIVE"}
    assert omp.environment_for(PLAIN, {"A": "1"}) == {"A": "1"}


def test_a_process_started_without_the_policy_is_told_to_set_it() -> None:
    assert omp.restart_needed(SPIN, {})
    assert omp.restart_needed(SPIN, {"OMP_WAIT_POLICY": "PASSIVE"})
    assert not omp.restart_needed(SPIN, {"OMP_WAIT_POLICY": "ACTIVE"})
    assert not omp.restart_needed(PLAIN, {})
    problem = omp.mismatch(SPIN, {})
    assert problem is not None and "OMP_WAIT_POLICY=ACTIVE python" in problem
    assert omp.mismatch(SPIN, {"OMP_WAIT_POLICY": "ACTIVE"}) is None


def test_the_switch_is_a_cpu_one_searched_with_more_than_one_core() -> None:
    spec = toy_spec()
    assert SearchSpace.for_model(spec, cpu_caps(), cpu_count=2).omp_spin == (False, True)
    assert SearchSpace.for_model(spec, cpu_caps(), cpu_count=1).omp_spin == (False,)
    assert SearchSpace.for_model(spec, cuda_caps(), cpu_count=16).omp_spin == (False,)
    with pytest.raises(ConfigError, match=r"config.omp_spin: .*CPU device only"):
        check_config(SPIN, spec=spec, device=cuda_caps())
    check_config(SPIN, spec=spec, device=cpu_caps())


def test_no_start_assumes_spinning_and_the_refinement_tries_it() -> None:
    space = SearchSpace.for_model(toy_spec(), cpu_caps(), cpu_count=2)
    start = playbook_config(space, toy_spec())
    assert not start.omp_spin and not space.naive().omp_spin and not space.guess().omp_spin
    flipped = [c for c in space.neighbours(start, kernels=True) if c.omp_spin]
    assert flipped == [start.replace(omp_spin=True)]
    assert not space.neighbours(start, kernels=False) or not any(
        c.omp_spin for c in space.neighbours(start, kernels=False)
    )


@pytest.mark.parametrize(
    ("config", "user", "seen"),
    [
        (SPIN, None, "ACTIVE"),
        # each case a zygote of its own (its environment: 3-4 s on the 2-core CPU); the
        # user's policy kept is test_a_spinning_config_asks_for_active_and_another_keeps_
        # the_users_policy (the child's environment is omp.environment_for's, as above)
        pytest.param(PLAIN, "PASSIVE", "PASSIVE", marks=pytest.mark.slow),
    ],
)
def test_a_burst_child_starts_with_the_configs_wait_policy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: TrainConfig,
    user: str | None,
    seen: str,
) -> None:
    """Through a real burst (its own process): the policy is in the child's environment
    before torch loads, and a config that does not spin keeps the user's."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if user is not None:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    record = tmp_path / "record.json"
    result = run_burst(
        load_model(f"{CONV}:conv_spec").with_args(record_file=str(record)),
        config,
        steps=1,
        warmup=0,
        timeout_s=120,
    )
    assert result.status == "ok", result.reason
    assert json.loads(record.read_text())["omp_wait_policy"] == seen


def test_presetloop_warns_where_the_process_started_without_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.train.loop import PresetLoop

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with pytest.warns(RuntimeWarning, match="config.omp_spin"):
        PresetLoop(SPIN)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PresetLoop(SPIN)
    assert not [w for w in caught if "omp_spin" in str(w.message)]


@pytest.mark.parametrize(
    "spin",
    [
        # a trainer in a process of its own, twice with the restart (10-22 s on the 2-core
        # CPU); in the default tier the restart is guarded by
        # test_autotune_train_with_a_spinning_config_starts_again_as_the_same_command, that
        # a config that does not spin needs none by
        # test_a_process_started_without_the_policy_is_told_to_set_it, and the trainer's
        # own check by test_presetloop_warns_where_the_process_started_without_the_policy
        pytest.param(True, marks=pytest.mark.slow),
        pytest.param(False, marks=pytest.mark.slow),
    ],
)
def test_autotune_train_starts_again_with_the_policy_its_config_spins_with(
    tmp_path: Path, spin: bool
) -> None:
    """The trainer's own check (a warning when the policy is not in its environment) is
    what shows that the training process ran with it."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 100)
    cmd = [
        sys.executable, "-m", "autotune", "train", "--model", f"{FAKE_LM}:spec",
        "--data", str(corpus), "--out", str(tmp_path / "run"), "--max-steps", "2",
        "--set", "config.micro_batch=2", "--set", "config.seq_len=16",
        "--set", f"config.omp_spin={str(spin).lower()}", "--eval-interval", "100000",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["AUTOTUNE_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(FAKE_LM).parent), env.get("PYTHONPATH", "")])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert ("starting again with OMP_WAIT_POLICY=ACTIVE" in out) == spin, out
    assert ("OpenMP threads spin (omp_spin)" in out) == spin, out  # the config line
    assert "config.omp_spin: the search measured" not in out, out  # the trainer's warning


class _Restarted(Exception):
    pass


@pytest.mark.parametrize("spin", [True, False])
def test_autotune_train_with_a_spinning_config_starts_again_as_the_same_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spin: bool
) -> None:
    """In this process, ``os.execv`` caught: a config that spins replaces the process by
    the same command with the policy in its environment, before any training; one that
    does not trains on here (stopped at its data, which the test leaves missing)."""
    from typer.testing import CliRunner

    from autotune.cli import train as train_cli
    from autotune.cli.main import app

    execs: list[tuple[str, list[str], str | None]] = []

    def execv(path: str, argv: list[str]) -> None:
        execs.append((path, argv, os.environ.get("OMP_WAIT_POLICY")))
        raise _Restarted

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained before starting again")

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(train_cli.os, "execv", execv)
    monkeypatch.setattr("autotune.train.run.train", no_training)
    args = ["train", "--model", f"{FAKE_LM}:spec", "--out", str(tmp_path / "run"),
            "--max-steps", "2", "--set", f"config.omp_spin={str(spin).lower()}"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["autotune", *args])
    result = CliRunner().invoke(app, args)
    if not spin:
        assert execs == [] and isinstance(result.exception, AssertionError), result.output
        return
    assert isinstance(result.exception, _Restarted), result.output
    assert execs == [(sys.executable, [sys.executable, "-m", "autotune", *args], "ACTIVE")]
    assert "starting again with OMP_WAIT_POLICY=ACTIVE" in result.output
