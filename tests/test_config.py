"""The training config's bounds: DataLoader workers, capped in the config itself and by the
cores of this machine on every path that runs a config (train, a preset, bench, search)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.utils.data
from fake_lm import FAKE_LM
from fake_models import FAKES
from typer.testing import CliRunner

import autotune.config.checks
import autotune.config.machine_limits
from autotune.cli.main import app
from autotune.config.checks import check_config
from autotune.config.machine_limits import usable_cores
from autotune.config.train_config import MAX_NUM_WORKERS, TrainConfig
from autotune.core.errors import ConfigError
from autotune.machine.hardware import probe
from autotune.preset import Fingerprint, Measured, ModelRef, Preset, Task, save_preset
from autotune.study.plan.space import SearchSpace
from autotune.testing.fake_caps import cpu_caps
from autotune.testing.toy import toy_spec

runner = CliRunner()


@pytest.fixture
def one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has one usable core (so at most 4 workers), and forks no DataLoader."""
    monkeypatch.setattr(autotune.config.checks, "usable_cores", lambda: 1)

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a DataLoader was built before the config was checked")

    monkeypatch.setattr(torch.utils.data.DataLoader, "__init__", refuse)


def test_the_config_itself_caps_workers_on_any_machine() -> None:
    TrainConfig(micro_batch=1, seq_len=8, num_workers=MAX_NUM_WORKERS)
    with pytest.raises(ConfigError) as info:
        TrainConfig(micro_batch=1, seq_len=8, num_workers=100000)
    assert f"config.num_workers: expected an integer from 0 to {MAX_NUM_WORKERS}" in str(info.value)
    assert "got 100000" in str(info.value)


def test_check_config_allows_four_workers_per_usable_core() -> None:
    spec, caps = toy_spec(), cpu_caps()
    check_config(
        TrainConfig(micro_batch=1, seq_len=8, num_workers=8), spec=spec, device=caps, cores=2
    )
    with pytest.raises(ConfigError) as info:
        check_config(
            TrainConfig(micro_batch=1, seq_len=8, num_workers=9), spec=spec, device=caps, cores=2
        )
    assert "config.num_workers: at most 8 on this machine (4 x 2 usable cores), got 9" in str(
        info.value
    )


def test_usable_cores_follow_the_affinity_else_the_cpu_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        autotune.config.machine_limits.os,
        "sched_getaffinity",
        lambda _pid: {0, 3, 5},
        raising=False,
    )
    assert usable_cores() == 3
    monkeypatch.delattr(autotune.config.machine_limits.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(autotune.config.machine_limits.os, "cpu_count", lambda: 6)
    assert usable_cores() == 6
    monkeypatch.setattr(autotune.config.machine_limits.os, "cpu_count", lambda: None)
    assert usable_cores() == 1


@pytest.mark.usefixtures("one_core")
def test_train_with_set_is_refused_before_any_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["train", "--model", f"{FAKE_LM}:spec", "--max-steps", "1"]
    for value, message in [
        ("5", "config.num_workers: at most 4 on this machine (4 x 1 usable cores), got 5"),
        ("100000", f"expected an integer from 0 to {MAX_NUM_WORKERS}"),
    ]:
        result = runner.invoke(app, [*args, "--set", f"config.num_workers={value}"])
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "autotune_runs").exists()


@pytest.mark.usefixtures("one_core")
def test_a_preset_with_too_many_workers_is_refused(tmp_path: Path) -> None:
    preset = save_preset(
        Preset(
            name="workers",
            model=ModelRef(name=f"{FAKE_LM}:spec", args={"dim": 8}),
            task=Task(seq_len=16, global_batch=2),
            config=TrainConfig(micro_batch=2, seq_len=16, num_workers=5),
            fingerprint=Fingerprint.from_profile(probe(), "cpu"),
            measured=Measured(tokens_per_s=1000.0),
        ),
        tmp_path / "workers.yaml",
    )
    result = runner.invoke(
        app, ["train", "--preset", str(preset), "--trust-model", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert "config.num_workers: at most 4 on this machine" in result.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.usefixtures("one_core")
def test_bench_is_refused_before_the_burst() -> None:
    args = ["bench", "--model", f"{FAKES}:fake_spec", "--micro-batch", "2", "--seq-len", "16"]
    result = runner.invoke(app, [*args, "--workers", "5"])
    assert result.exit_code == 2, result.output
    assert "config.num_workers: at most 4 on this machine" in result.stderr


def test_the_search_space_stays_within_the_limit_of_one_core() -> None:
    """The search's workers (its --knob restrictions pick among them) never exceed
    ``min(4, cores)``: within the limit even where a single core is usable."""
    spec, caps = toy_spec(global_batch=4), cpu_caps()
    space = SearchSpace.for_model(spec, caps, cpu_count=256, restrict={"num_workers": ["4"]})
    assert max(space.num_workers) == 4
    for config in space.grid():
        check_config(config, spec=spec, device=caps, cores=1)
