"""``autotune.tune()``: a model given as functions (a notebook's, a script's) is searched
in real trial processes, its example batch or its own data pipeline feeding the bursts."""

from __future__ import annotations

import pickle
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.core.errors import UsageError
from autotune.study.session.tune import model_spec

pytestmark = pytest.mark.usefixtures("one_thread")


class Constant(Dataset[dict[str, torch.Tensor]]):
    """Samples whose target is 100: a loss near 10,000 says the burst read this data."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.zeros(4), "y": torch.full((1,), 100.0)}


def mse(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def build_linear() -> nn.Module:
    return nn.Linear(4, 1)


def test_exactly_one_data_source() -> None:
    with pytest.raises(UsageError, match="exactly one of batch="):
        model_spec(build=build_linear, loss=mse)
    with pytest.raises(UsageError, match="exactly one of batch="):
        model_spec(
            build=build_linear, loss=mse, batch={"x": torch.zeros(2, 4)}, dataloader=Constant()
        )
    with pytest.raises(UsageError, match="dict of batch-first tensors"):
        model_spec(build=build_linear, loss=mse, batch=[torch.zeros(2, 4)])  # type: ignore[arg-type]
    # an AttributeError and an IndexError from inside, an OSError for the study's folder
    with pytest.raises(UsageError, match="'x' is int, not a tensor with a batch dimension"):
        model_spec(build=build_linear, loss=mse, batch={"x": 5})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="'x' is a 0-d tensor"):
        model_spec(build=build_linear, loss=mse, batch={"x": torch.tensor(1.0)})
    with pytest.raises(UsageError, match="'y' has 3 rows where the first entry has 2"):
        model_spec(
            build=build_linear, loss=mse, batch={"x": torch.zeros(2, 4), "y": torch.zeros(3, 1)}
        )
    with pytest.raises(UsageError, match="name= must be at most 100 characters"):
        model_spec(build=build_linear, loss=mse, batch={"x": torch.zeros(2, 4)}, name="x" * 5000)


def test_the_spec_travels_by_value() -> None:
    scale = 3.0  # a closure over a local, and a lambda: plain pickle cannot send either
    spec = model_spec(
        build=lambda: nn.Linear(4, 1),
        loss=lambda model, batch: scale * mse(model, batch),
        batch={"x": torch.randn(10, 4), "y": torch.randn(10, 1)},
        size=4,
        size_name="features",
    )
    again = pickle.loads(pickle.dumps(spec))
    batch = again.make_batch(batch_size=6, generator=torch.Generator().manual_seed(0))
    assert batch["x"].shape == (6, 4) and batch["y"].shape == (6, 1)
    assert again.loss(again.build(), batch).ndim == 0
    assert again.size_label() == "features 4" and again.throughput_unit == "samples"
    assert not again.supports_checkpointing
    assert again.flops_per_sample() == 6.0 * 5  # 6 x parameters by default


def test_build_with_checkpointing_is_offered_it() -> None:
    seen: list[bool] = []

    def build(activation_checkpointing: bool = False) -> nn.Module:
        seen.append(activation_checkpointing)
        return nn.Linear(4, 1)

    spec = model_spec(build=build, loss=mse, batch={"x": torch.zeros(2, 4), "y": torch.zeros(2, 1)})
    assert spec.supports_checkpointing
    spec.build(activation_checkpointing=True)
    assert seen == [True]


@pytest.mark.parametrize("workers", [0, 2])
def test_bursts_read_the_real_pipeline(workers: int) -> None:
    loader = DataLoader(Constant(), batch_size=3)  # its batch size is the config's business
    spec = model_spec(build=build_linear, loss=mse, dataloader=loader, global_batch=8)
    eval_batch = spec.make_batch(batch_size=4)
    assert torch.equal(eval_batch["y"], torch.full((4, 1), 100.0))
    config = TrainConfig(micro_batch=4, grad_accum=2, seq_len=1, num_workers=workers)
    result = run_burst(spec, config, steps=2, warmup=0, timeout_s=120, verify=True)
    assert result.status == "ok", result.reason
    assert min(result.losses) > 5_000  # the targets of 100, not synthetic ones


def test_a_data_set_smaller_than_a_micro_batch_is_an_error() -> None:
    spec = model_spec(build=build_linear, loss=mse, dataloader=lambda: Constant())
    config = TrainConfig(micro_batch=128, grad_accum=1, seq_len=1)
    result = run_burst(spec, config, steps=1, warmup=0, timeout_s=120)
    assert result.status == "error" and "fewer samples than one micro-batch" in result.reason


SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn

    import autotune


    class Net(nn.Module):  # defined in __main__: the trials get it by value
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.body(x)


    if __name__ == "__main__":
        torch.set_num_threads(1)
        result = autotune.tune(
            build=Net,
            loss=lambda model, batch: nn.functional.mse_loss(model(batch["x"]), batch["y"]),
            batch={"x": torch.randn(64, 8), "y": torch.randn(64, 1)},
            budget="2GB",
            device="cpu",
            global_batch=8,
            trials=3,
            steps=2,
            knobs=["compile=off"],
            runs_dir="runs",
            output=None,
        )
        config = result.config
        assert config.micro_batch * config.grad_accum == 8
        print("tuned", result.preset.model.name, result.search.counts()["measured"])
        print("preset file", result.search.preset_path)
    """
)


@pytest.mark.slow  # a real search in a fresh interpreter: its zygote, 3 trials and the race
def test_tune_from_a_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tuned tuned-model 3" in done.stdout
    assert "preset file None" in done.stdout
    assert not (tmp_path / "best.yaml").exists()


BY_VALUE = textwrap.dedent(
    """
    import pickle
    import sys

    import torch
    from torch import nn

    from autotune.study.session.tune import model_spec


    class Net(nn.Module):  # defined in __main__: another interpreter has no such class
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(8, 1)

        def forward(self, x):
            return self.body(x)


    if __name__ == "__main__":
        spec = model_spec(
            build=Net,
            loss=lambda model, batch: nn.functional.mse_loss(model(batch["x"]), batch["y"]),
            batch={"x": torch.randn(16, 8), "y": torch.randn(16, 1)},
        )
        sys.stdout.buffer.write(pickle.dumps(spec))
    """
)


def test_a_scripts_main_classes_reach_another_interpreter_by_value(tmp_path: Path) -> None:
    """What test_tune_from_a_script (slow tier) does through a real search, here alone: a
    spec whose model class lives in a script's ``__main__`` unpickles in an interpreter
    where ``__main__`` is another module (this one: pytest's), as a trial's does."""
    script = tmp_path / "train.py"
    script.write_text(BY_VALUE)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    spec = pickle.loads(done.stdout)
    model = spec.build()
    assert type(model).__name__ == "Net" and type(model).__module__ == "__main__"
    batch = spec.make_batch(batch_size=4)
    assert spec.loss(model, batch).ndim == 0


def test_tune_refuses_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune

    kwargs: dict[str, Any] = dict(build=build_linear, loss=mse, budget="1GB", model="mu")
    with pytest.raises(UsageError, match="not model="):
        autotune.tune(**kwargs, batch={"x": torch.zeros(2, 4)})


def half_mse(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return 0.5 * mse(model, batch)


def test_the_fingerprint_follows_the_code_not_the_data() -> None:
    from autotune.study.session.tune import model_fingerprint

    def batch() -> dict[str, torch.Tensor]:
        return {"x": torch.randn(8, 4), "y": torch.randn(8, 1)}

    same = model_fingerprint(build_linear, mse, batch())
    assert model_fingerprint(build_linear, mse, batch()) == same  # random values: same code
    assert model_fingerprint(build_linear, half_mse, batch()) != same  # another loss
    assert model_fingerprint(lambda: nn.Linear(4, 2), mse, batch()) != model_fingerprint(
        lambda: nn.Linear(4, 1), mse, batch()
    )  # a constant changed
    wider = {"x": torch.randn(8, 5), "y": torch.randn(8, 1)}
    assert model_fingerprint(build_linear, mse, wider) != same  # another batch shape


FINGERPRINT = textwrap.dedent(
    """
    import torch
    from torch import nn
    from autotune.study.session.tune import model_fingerprint

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 1)

        def forward(self, x):
            return self.body(x)

    def loss(model, batch):
        return (model(batch["x"]) - batch["y"]).pow(2).mean()

    print(model_fingerprint(Net, loss, {"x": torch.randn(8, 4), "y": torch.randn(8, 1)}))
    """
)


def test_the_fingerprint_is_the_same_in_every_run_of_a_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run in a fresh interpreter (its own hash seed, its own object ids), the other
    here, as ``__main__`` too."""
    script = tmp_path / "fp.py"
    script.write_text(FINGERPRINT)
    fresh = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    runpy.run_path(str(script), run_name="__main__")
    here = capsys.readouterr().out
    assert fresh == here and len(fresh.strip()) == 8


def test_a_changed_model_gets_a_study_of_its_own(tmp_path: Path) -> None:
    """Fixing the loss and calling tune() again searches the fixed model, instead of
    resuming the old study and answering with its trials."""
    import autotune
    from autotune.testing.burst import FakeBurst, cpu_profile

    burst = FakeBurst()
    common: dict[str, Any] = dict(
        build=build_linear,
        batch={"x": torch.zeros(8, 4), "y": torch.zeros(8, 1)},
        budget="1GB",
        global_batch=8,
        trials=2,
        steps=2,
        runs_dir=tmp_path / "runs",
        output=None,
        hardware=cpu_profile(),
        burst_fn=burst,
    )
    first = autotune.tune(loss=mse, **common).search
    again = autotune.tune(loss=mse, **common).search
    assert again.study_name == first.study_name  # the same code resumes its study
    calls = len(burst.calls)
    fixed = autotune.tune(loss=half_mse, **common).search
    assert fixed.study_name != first.study_name
    assert len(burst.calls) == calls + 2  # the fixed model was measured, not the old trials
    named = autotune.tune(loss=half_mse, study="mine", **common).search
    assert named.study_name == "mine"  # a name the user gives is kept as given


def test_an_output_ending_with_a_slash_is_refused_as_search_refuses_it(tmp_path: Path) -> None:
    # Path("x.yaml/") dropped the slash: tune wrote x.yaml where search refuses the path
    import autotune

    with pytest.raises(UsageError, match="ends with '/'"):
        autotune.tune(
            build=build_linear, loss=mse, batch={"x": torch.zeros(2, 4), "y": torch.zeros(2, 1)},
            budget="1GB", output=f"{tmp_path}/x.yaml/", trials=1,
        )  # fmt: skip
    assert not (tmp_path / "x.yaml").exists()
