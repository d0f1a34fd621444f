"""The trainer: resume equality, signals, OOM handling, eval batch, outputs, overrides."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_lm import make_spec

from autotune.config.overrides import apply_overrides
from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import ModelSpec
from autotune.core.errors import AutotuneError, ConfigError, UsageError
from autotune.data import TrainData, prepare_lm_data
from autotune.train.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from autotune.train.run import train
from autotune.train.schedule import lr_factor
from autotune.train.trainer import (
    Trainer,
    TrainingOOMError,
    TrainResult,
)

SEQ = 16


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TrainData:
    cache = tmp_path_factory.mktemp("cache")
    return prepare_lm_data(None, seq_len=SEQ, vocab_size=260, cache_dir=cache)


def settings(**changes: Any) -> TrainingDefaults:
    base: dict[str, Any] = {
        "max_steps": 6,
        "warmup_steps": 2,
        "lr": 3e-3,
        "log_interval": 2,
        "eval_interval": 100,  # the last step only, unless a test asks for more
        "eval_batches": 2,
        "checkpoint_interval": 3,
        "keep_last": 5,
        "seed": 1,
    }
    return TrainingDefaults(**{**base, **changes})


def config(**changes: Any) -> TrainConfig:
    return TrainConfig(**{"micro_batch": 4, "grad_accum": 2, "seq_len": SEQ, **changes})


def run(
    out: Path,
    data: TrainData,
    *,
    spec: ModelSpec | None = None,
    cfg: TrainConfig | None = None,
    training: TrainingDefaults | None = None,
    **kwargs: Any,
) -> TrainResult:
    trainer = Trainer(
        spec or make_spec(),
        cfg or config(),
        training or settings(),
        data,
        out,
        echo=lambda _: None,
        tensorboard=False,
        **kwargs,
    )
    return trainer.run()


def learned(losses: Sequence[float]) -> bool:
    """Whether a short run's loss went down: the mean of its later steps below that of its
    first. Each step's loss is another batch's, and the corpus is the running Python's own
    documentation: under Python 3.12, 6 steps ran 12.46, 11.77, 11.47, 12.07, 9.98, 12.61,
    so the last step alone stood above the first where the run had learned."""
    half = len(losses) // 2
    return sum(losses[-half:]) / half < sum(losses[:half]) / half


def with_loss_hook(
    spec: ModelSpec, hook: Callable[[int, dict[str, torch.Tensor]], None]
) -> ModelSpec:
    """``spec`` whose loss calls ``hook(call_number, batch)`` first."""
    calls = [0]
    inner = spec.loss_fn

    def loss_fn(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        hook(calls[0], batch)
        return inner(module, batch)

    return dataclasses.replace(spec, loss_fn=loss_fn)


# -- resume ------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 1])
def test_resume_continues_the_same_loss_curve(
    tmp_path: Path, data: TrainData, workers: int
) -> None:
    extra = {"num_workers": workers, "persistent_workers": workers > 0}
    full = run(tmp_path / "full", data, cfg=config(**extra))
    assert full.steps == 6 and len(full.losses) == 6
    assert learned(full.losses)
    # a second run that starts from the uninterrupted run's step-3 checkpoint
    (tmp_path / "resumed").mkdir()
    shutil.copy(tmp_path / "full" / "ckpt-step00000003.pt", tmp_path / "resumed")
    resumed = run(tmp_path / "resumed", data, cfg=config(**extra), resume="auto")
    assert resumed.start_step == 3 and resumed.steps == 6
    assert resumed.losses == pytest.approx(full.losses[3:], abs=1e-6)
    a = load_checkpoint(tmp_path / "full" / "ckpt-step00000006.pt")["model"]
    b = load_checkpoint(tmp_path / "resumed" / "ckpt-step00000006.pt")["model"]
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


def test_sigterm_saves_and_resume_auto_finishes_identically(
    tmp_path: Path, data: TrainData
) -> None:
    full = run(tmp_path / "full", data, training=settings(checkpoint_interval=100))

    def kill_in_step_3(call: int, batch: dict[str, torch.Tensor]) -> None:
        if call == 5:  # the first micro-batch of step 3 (between two log lines)
            os.kill(os.getpid(), signal.SIGTERM)

    spec = with_loss_hook(make_spec(), kill_in_step_3)
    before = signal.getsignal(signal.SIGTERM)
    stopped = run(tmp_path / "run", data, spec=spec, training=settings(checkpoint_interval=100))
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored
    assert stopped.interrupted == "SIGTERM" and stopped.exit_code == 143
    assert stopped.steps == 3 and [s for s, _ in list_checkpoints(tmp_path / "run")] == [3]
    assert len(stopped.losses) == 3  # the step after the last log line is reported too
    resumed = run(tmp_path / "run", data, training=settings(checkpoint_interval=100), resume="auto")
    assert resumed.interrupted is None and resumed.exit_code == 0
    assert list(stopped.losses) + list(resumed.losses) == pytest.approx(full.losses, abs=1e-6)
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert steps == sorted(steps)  # the records after the checkpoint were not duplicated


def test_resuming_a_finished_run_trains_nothing_and_keeps_its_summary(
    tmp_path: Path, data: TrainData
) -> None:
    run(tmp_path, data)
    summary = (tmp_path / "summary.json").read_bytes()
    said: list[str] = []
    again = Trainer(
        make_spec(), config(), settings(), data, tmp_path, resume="auto", echo=said.append
    ).run()
    assert again.steps == 6 and again.exit_code == 0 and not again.losses
    assert (tmp_path / "summary.json").read_bytes() == summary  # the run's figures kept
    assert any("nothing to train" in line and "max_steps" in line for line in said), said


def test_a_resume_in_fp16_takes_a_checkpoint_without_a_grad_scaler(
    tmp_path: Path, data: TrainData
) -> None:
    """An fp32 (or bf16) checkpoint has no GradScaler state; fp16 starts a fresh scale."""
    run(tmp_path, data, training=settings(max_steps=3))
    resumed = run(tmp_path, data, cfg=config(precision="fp16"), resume="auto")
    assert resumed.start_step == 3 and resumed.steps == 6
    scaler = load_checkpoint(tmp_path / "ckpt-step00000006.pt")["stepper"]["scaler"]
    assert scaler["scale"] > 0


def test_an_evaluation_leaves_the_training_random_stream_alone(
    tmp_path: Path, data: TrainData
) -> None:
    """Dropout draws the same numbers with evaluations at every step as with one at the
    end: a resume with another --eval-interval continues the same curve."""
    every_step = run(tmp_path / "every", data, training=settings(eval_interval=1))
    at_the_end = run(tmp_path / "end", data)
    assert every_step.losses == at_the_end.losses


def test_evaluation_sees_the_same_samples_whatever_the_micro_batch(
    tmp_path: Path, data: TrainData
) -> None:
    """A resume with another micro-batch (and an out-of-memory fallback) evaluates the
    same validation samples as the run did: best.pt compares like with like."""
    training = settings(eval_interval=3)
    full = run(tmp_path / "full", data, training=training)
    (tmp_path / "resumed").mkdir()
    shutil.copy(tmp_path / "full" / "ckpt-step00000003.pt", tmp_path / "resumed")
    small = config(micro_batch=2, grad_accum=4)  # the same global batch
    resumed = run(tmp_path / "resumed", data, cfg=small, training=training, resume="auto")
    assert full.eval is not None and resumed.eval is not None
    assert resumed.eval["samples"] == full.eval["samples"] == 16  # 2 batches of 2 x 4
    assert resumed.eval["loss"] == pytest.approx(full.eval["loss"], rel=1e-4)

    def eval_oom_above_4(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        if batch["input_ids"].shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")
        return metric(module, batch)

    spec = make_spec()
    metric = spec.extras["metric"]
    spec = dataclasses.replace(spec, extras={**spec.extras, "metric": eval_oom_above_4})
    fallback = run(tmp_path / "oom", data, spec=spec, training=training)
    assert fallback.eval is not None and fallback.eval["samples"] == 16
    assert fallback.eval["loss"] == pytest.approx(full.eval["loss"], abs=1e-5)


def test_run_folder_errors_name_the_parameter(tmp_path: Path, data: TrainData) -> None:
    """The library names ``out_dir``; the CLI passes its flag (``--out``) instead."""
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(UsageError, match="it is a file; give out_dir a folder"):
        run(tmp_path / "taken", data)
    run(tmp_path / "run", data, training=settings(max_steps=3))
    with pytest.raises(UsageError, match=r"train into a new folder with out_dir$"):
        run(tmp_path / "run", data)
    # what is there, where the OS says only "File exists"
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for where, said in (
        ("/dev/null", "a character device"),
        (tmp_path / "dangling", "a symbolic link"),
    ):
        with pytest.raises(UsageError, match=f"run folder: it is {said}"):
            run(Path(where), data)


def test_resume_refuses_a_checkpoint_of_another_model(tmp_path: Path, data: TrainData) -> None:
    run(tmp_path, data, training=settings(max_steps=3))
    with pytest.raises(CheckpointError, match="checkpoint of model 'fake-lm' with other") as info:
        run(tmp_path, data, spec=make_spec(dim=8), resume="auto")
    assert "args dim 16 there, 8 here" in str(info.value), str(info.value)  # what differs


def test_a_fresh_run_never_overwrites_a_previous_run(tmp_path: Path, data: TrainData) -> None:
    run(tmp_path, data, training=settings(max_steps=3))
    with pytest.raises(UsageError, match="--resume auto"):
        run(tmp_path, data)
    with pytest.raises(CheckpointError, match="does not exist"):
        run(tmp_path / "other", data, resume=tmp_path / "missing.pt")
    # resuming another folder's checkpoint into a folder that holds a run: refused too
    run(tmp_path / "b", data, training=settings(max_steps=3))
    with pytest.raises(UsageError, match="already holds checkpoints"):
        run(tmp_path / "b", data, resume=tmp_path / "ckpt-step00000003.pt")
    # into an empty folder: a new run that starts from that checkpoint
    branched = run(
        tmp_path / "c",
        data,
        resume=tmp_path / "ckpt-step00000003.pt",
        training=settings(max_steps=4),
    )
    assert branched.start_step == 3 and branched.steps == 4


def test_a_resume_from_an_earlier_checkpoint_never_writes_over_later_ones(
    tmp_path: Path, data: TrainData
) -> None:
    run(tmp_path, data)  # checkpoints 3 and 6
    later = (tmp_path / "ckpt-step00000006.pt").read_bytes()
    metrics = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(UsageError, match=r"after step 3 .*latest ckpt-step00000006.pt") as info:
        run(tmp_path, data, resume=tmp_path / "ckpt-step00000003.pt", training=settings(lr=1e-4))
    assert "out_dir" in str(info.value)  # how to branch from step 3 instead
    assert (tmp_path / "ckpt-step00000006.pt").read_bytes() == later
    assert (tmp_path / "metrics.jsonl").read_bytes() == metrics
    # the latest, named as a file, continues as --resume auto does
    assert run(tmp_path, data, resume=tmp_path / "ckpt-step00000006.pt").steps == 6


# -- eval, outputs -------------------------------------------------------------------------------


def test_a_killed_writes_leftovers_are_removed_by_the_next_run(
    tmp_path: Path, data: TrainData
) -> None:
    """kill -9 in the middle of an atomic write leaves its temporary file; the next run
    into the folder removes those of the run's own files, and nothing of the user's."""
    names = ["data.json", "tokenizer.json", "metrics.jsonl", "summary.json", "curves.png"]
    stale = [tmp_path / f".{name}.k3x9_a2b.tmp" for name in names]
    stale.append(tmp_path / "..autotune.lock.json.q1w2e3r4.tmp")
    theirs = tmp_path / ".notes.txt.k3x9_a2b.tmp"
    for path in [*stale, theirs]:
        path.write_text("half")
    run(tmp_path, data, training=settings(max_steps=1))
    assert [p.name for p in stale if p.exists()] == []
    assert theirs.exists()


def test_eval_uses_a_larger_batch_without_gradients(tmp_path: Path, data: TrainData) -> None:
    seen: list[tuple[int, bool, bool]] = []
    spec = make_spec()
    metric = spec.extras["metric"]

    def recording_metric(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        seen.append((batch["input_ids"].shape[0], torch.is_grad_enabled(), module.training))
        return metric(module, batch)

    spec = dataclasses.replace(spec, extras={**spec.extras, "metric": recording_metric})
    trainer = Trainer(
        spec, config(micro_batch=3), settings(max_steps=3), data, tmp_path, echo=lambda _: None
    )
    assert trainer.eval_loader.batch_size == 6
    result = trainer.run()
    assert seen and all(size == 6 for size, _, _ in seen)
    assert not any(grad or training for _, grad, training in seen)
    assert result.eval is not None
    assert result.eval["perplexity"] == pytest.approx(math.exp(result.eval["loss"]))
    assert isinstance(result.eval["sample"], str)


def test_run_folder_contents(tmp_path: Path, data: TrainData) -> None:
    result = run(
        tmp_path,
        data,
        training=settings(max_steps=8, eval_interval=3, checkpoint_interval=2, keep_last=2),
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert {"tokenizer.json", "data.json", "metrics.jsonl", "summary.json", "best.pt"} <= names
    assert [s for s, _ in list_checkpoints(tmp_path)] == [6, 8]  # the last 2
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["best_eval_loss"] == pytest.approx(result.best_eval_loss)
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").open()]
    train_records = [r for r in records if r["type"] == "train"]
    assert [r["step"] for r in train_records] == [2, 3, 4, 6, 8]  # and before each eval
    for r in train_records:
        assert r["tokens_per_s"] > 0 and r["data_wait_s"] >= 0 and r["compute_s"] >= 0
    assert [r["step"] for r in records if r["type"] == "eval"] == [3, 6, 8]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["steady_tokens_per_s"] > 0
    assert json.loads((tmp_path / "tokenizer.json").read_text())["kind"] == "byte"


def test_label_smoothing_reaches_the_model(tmp_path: Path, data: TrainData) -> None:
    trainer = Trainer(
        make_spec(),
        config(),
        settings(max_steps=1, label_smoothing=0.2),
        data,
        tmp_path,
        echo=lambda _: None,
    )
    trainer.run()
    assert trainer.raw_model.label_smoothing == 0.2


def test_epochs_bound_the_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    small = tmp_path / "small.txt"
    small.write_text("abcdefgh" * 60)  # ~480 tokens: a few dozen chunks of 16
    data = prepare_lm_data(small, seq_len=SEQ, vocab_size=260, cache_dir=tmp_path / "c")
    n = len(data.train)  # type: ignore[arg-type]
    result = run(tmp_path / "out", data, training=settings(max_steps=1000, epochs=2))
    assert result.steps == 2 * (n // 8)


# -- out of memory ---------------------------------------------------------------------------------


def fake_oom_above(limit: int) -> Callable[[int, dict[str, torch.Tensor]], None]:
    def hook(call: int, batch: dict[str, torch.Tensor]) -> None:
        if batch["input_ids"].shape[0] > limit:
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")

    return hook


def test_on_oom_adapt_halves_micro_batch_and_keeps_global_batch(
    tmp_path: Path, data: TrainData
) -> None:
    spec = with_loss_hook(make_spec(), fake_oom_above(2))
    adapted = run(
        tmp_path / "a", data, spec=spec, cfg=config(micro_batch=8, grad_accum=1), on_oom="adapt"
    )
    assert adapted.steps == 6 and adapted.oom_adaptations == 2
    assert (adapted.config.micro_batch, adapted.config.grad_accum) == (2, 4)
    # the same samples per step: the curve of a run configured 2 x 4 from the start
    direct = run(tmp_path / "b", data, cfg=config(micro_batch=2, grad_accum=4))
    assert adapted.losses == pytest.approx(direct.losses, abs=1e-5)
    saved = load_checkpoint(tmp_path / "a" / "ckpt-step00000006.pt")
    assert saved["config"]["micro_batch"] == 2 and saved["oom_adapted"]


def test_on_oom_fail_saves_and_says_what_to_do(tmp_path: Path, data: TrainData) -> None:
    def oom_at_step_4(call: int, batch: dict[str, torch.Tensor]) -> None:
        if call == 7:  # step 4's first micro-batch
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")

    spec = with_loss_hook(make_spec(), oom_at_step_4)
    with pytest.raises(TrainingOOMError, match=r"--on-oom adapt.*config.micro_batch=2") as info:
        run(tmp_path, data, spec=spec, training=settings(checkpoint_interval=100))
    assert "step 4" in str(info.value) and info.value.exit_code == 1
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3]


# -- settings -------------------------------------------------------------------------------


def test_apply_overrides() -> None:
    cfg, tr = apply_overrides(
        config(),
        settings(),
        ["config.micro_batch=2", "config.knobs.block_group=4", "training.lr=1e-3",
         "training.schedule=constant", "config.precision=bf16", "training.grad_clip=null"],
    )  # fmt: skip
    assert cfg.micro_batch == 2 and cfg.knobs == {"block_group": 4} and cfg.precision == "bf16"
    assert tr.lr == 1e-3 and tr.schedule == "constant" and tr.grad_clip is None


def test_a_yaml_alias_bomb_in_set_is_refused_in_a_short_message() -> None:
    # eight levels of ten aliases: 10**8 items when printed whole (a MemoryError after 60 s
    # and 358 MB of message), as the same value in a preset file is not
    bomb = (
        "[&a [1,1,1,1,1,1,1,1,1,1]"
        + "".join(
            f", &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in itertools.pairwise("abcdefgh")
        )
        + "]"
    )
    for key in ("config.micro_batch", "config.compile", "config.precision"):
        with pytest.raises(ConfigError) as refused:
            apply_overrides(config(), settings(), [f"{key}={bomb}"])
        assert len(str(refused.value)) < 500, key


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ("config.micro_batc=2", "did you mean 'micro_batch'"),
        ("config.micro_batch=0", "config.micro_batch: expected a positive integer"),
        ("training.lrr=1", "did you mean 'lr'"),
        ("training.lr=fast", "training.lr: expected a number"),
        ("training.schedule=exp", "training.schedule"),
        ("model.dim=3", "expected config.FIELD"),
        ("config.micro_batch", "expected KEY=VALUE"),
    ],
)
def test_bad_overrides_are_config_errors(item: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        apply_overrides(config(), settings(), [item])
    assert info.value.exit_code == 2


def test_lr_schedule() -> None:
    f = [lr_factor(s, warmup=10, total=110, min_ratio=0.1) for s in range(111)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0) and f[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(f[10:]))
    assert lr_factor(50, warmup=10, total=110, schedule="constant") == 1.0
    assert lr_factor(60, warmup=10, total=110, schedule="linear", min_ratio=0.0) == 0.5


def test_train_api_with_a_built_in_model(tmp_path: Path) -> None:
    from autotune.models import get_model

    spec = get_model("mu").with_args(
        n_layers=1, cell_dim=1, mlp_hidden=32, n_heads=2, vocab_size=260
    )
    result = train(
        spec,
        TrainConfig(micro_batch=2, seq_len=16),
        settings(max_steps=2, eval_interval=2, eval_batches=1),
        out_dir=tmp_path / "run",
        cache_dir=tmp_path / "cache",
        echo=lambda _: None,
    )
    assert result.steps == 2 and result.eval is not None
    assert math.isfinite(result.eval["loss"]) and "perplexity" in result.eval
    assert isinstance(result.eval.get("sample"), str)


def test_a_resume_takes_this_runs_learning_rate(tmp_path: Path, data: TrainData) -> None:
    run(tmp_path, data, training=settings(max_steps=3, schedule="constant"))
    trainer = Trainer(
        make_spec(),
        config(),
        settings(max_steps=4, schedule="constant", lr=1e-4),
        data,
        tmp_path,
        resume="auto",
        echo=lambda _: None,
    )
    trainer.run()
    assert [g["lr"] for g in trainer.optimizer.param_groups] == pytest.approx([1e-4, 1e-4])
    record = [json.loads(x) for x in (tmp_path / "metrics.jsonl").open()][-2]
    assert record["step"] == 4 and record["lr"] == pytest.approx(1e-4)


def test_tensorboard_and_progress_bar(
    tmp_path: Path, data: TrainData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorBoard gets the scalars when it is installed; the rich bar runs on a terminal."""
    import sys
    import types

    scalars: list[tuple[str, float, int]] = []
    purged: list[int | None] = []

    class FakeWriter:
        def __init__(self, log_dir: str, purge_step: int | None = None) -> None:
            self.log_dir = log_dir
            purged.append(purge_step)

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            scalars.append((tag, value, step))

        def add_text(self, tag: str, text: str, step: int) -> None:
            pass

        def close(self) -> None:
            pass

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = FakeWriter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    trainer = Trainer(make_spec(), config(), settings(max_steps=2), data, tmp_path, progress=True)
    trainer.run()
    assert [step for tag, _, step in scalars if tag == "train/loss"] == [2]
    assert any(tag == "eval/loss" for tag, _, _ in scalars)
    # a resume hides the events logged after its checkpoint, as metrics.jsonl drops them
    Trainer(make_spec(), config(), settings(max_steps=3), data, tmp_path, resume="auto").run()
    assert purged == [1, 3]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_mixed_precision_run_and_resume(
    tmp_path: Path, data: TrainData, precision: str
) -> None:
    cfg = config(precision=precision, pin_memory=True, num_workers=1)
    full = run(tmp_path / "full", data, cfg=cfg, device="cuda")
    assert all(math.isfinite(x) for x in full.losses) and learned(full.losses)
    state = load_checkpoint(tmp_path / "full" / "ckpt-step00000003.pt")
    assert isinstance(state["rng"][0]["cuda"], torch.Tensor)
    if precision == "fp16":
        assert state["stepper"]["scaler"]["scale"] > 0  # the GradScaler's state is saved
    (tmp_path / "resumed").mkdir()
    shutil.copy(tmp_path / "full" / "ckpt-step00000003.pt", tmp_path / "resumed")
    resumed = run(tmp_path / "resumed", data, cfg=cfg, device="cuda", resume="auto")
    assert resumed.losses == pytest.approx(full.losses[3:], abs=1e-3)


def test_a_diverged_loss_stops_before_any_checkpoint_of_it(tmp_path: Path, data: TrainData) -> None:
    spec = make_spec()
    inner = spec.loss_fn
    calls = [0]

    def nan_from_step_4(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = inner(module, batch)
        return loss * float("nan") if calls[0] > 6 else loss

    spec = dataclasses.replace(spec, loss_fn=nan_from_step_4)
    with pytest.raises(AutotuneError, match=r"not finite at step 4.*checkpoint is step 2"):
        run(tmp_path, data, spec=spec, training=settings(checkpoint_interval=2, log_interval=5))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2]


def test_a_loss_not_finite_from_the_first_step_blames_the_loss_not_the_lr(
    tmp_path: Path, data: TrainData
) -> None:
    """A user's loss of NaN from step 1 was told to lower the learning rate (at step 10,
    the log line's) though no update had run."""
    spec = make_spec()
    inner = spec.loss_fn

    def nan_always(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return inner(module, batch) * float("nan")

    spec = dataclasses.replace(spec, loss_fn=nan_always)
    with pytest.raises(AutotuneError) as info:
        run(tmp_path, data, spec=spec, training=settings(log_interval=5))
    text = str(info.value)
    assert "not finite at the run's first step" in text and "before any update" in text, text
    assert "lr" not in text and "fp16" not in text, text
    from autotune.train.progress import check_finite

    with pytest.raises(AutotuneError, match=r"fp16's range gives it.*use bf16 or fp32"):
        check_finite([float("inf")], step=1, last_saved=None, precision="fp16")


@pytest.mark.parametrize("synced", [True, False])
def test_the_median_step_is_given_only_where_each_steps_end_was_waited_for(
    tmp_path: Path, synced: bool
) -> None:
    """On a GPU the trainer queues steps and reads the loss at log steps: one step's time
    is its launch or the queue's wait, so the median step (and its tokens/s) is None there,
    while the figures over all the steps stand."""
    from autotune.train.progress import TrainingProgress
    from autotune.train.run_result import finish

    config = TrainConfig(micro_batch=2, seq_len=8)
    progress = TrainingProgress(tokens_per_sample=8, step_times=[5.0, 5.0] + [0.01, 0.5] * 10)
    result = finish(
        progress, spec=make_spec(), config=config, global_config=config, caps=None,
        world_size=1, out_dir=tmp_path, start_step=0, steps=22, total=22,
        best_eval_loss=None, checkpoint=None, oom_adaptations=0, interrupted=None,
        wall_s=15.0, message=None, steps_synced=synced,
    )  # fmt: skip
    assert result.steady_tokens_per_s == pytest.approx(2 * 8 * 20 / 5.1)
    if synced:
        assert result.median_step_s == pytest.approx(0.255)
        assert result.median_tokens_per_s == pytest.approx(16 / 0.255)
    else:
        assert result.median_step_s is None and result.median_tokens_per_s is None
