"""What a resume may change and what it may not: a checkpoint's data position means the
same batches only with the same seed, sequence length and training data, and a folder's
checkpoints are another run's to continue only where this run could resume them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_lm import make_spec
from torch.utils.data import Subset

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import ModelSpec
from autotune.core.errors import CheckpointError, UsageError
from autotune.data import TrainData, prepare_lm_data
from autotune.train.evaluation import improves
from autotune.train.trainer import Trainer, TrainResult

SEQ = 16

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def data(cache: Path) -> TrainData:
    return prepare_lm_data(None, seq_len=SEQ, vocab_size=260, cache_dir=cache)


def settings(**changes: Any) -> TrainingDefaults:
    base: dict[str, Any] = {
        "max_steps": 3,
        "warmup_steps": 1,
        "log_interval": 1,
        "eval_interval": 100,
        "eval_batches": 1,
        "checkpoint_interval": 3,
        "seed": 1,
    }
    return TrainingDefaults(**{**base, **changes})


def config(**changes: Any) -> TrainConfig:
    return TrainConfig(**{"micro_batch": 4, "grad_accum": 1, "seq_len": SEQ, **changes})


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
        tensorboard=False,
        **{"echo": lambda _: None, **kwargs},
    )
    return trainer.run()


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path in it."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refusal(
    out: Path, data: TrainData, *, training: TrainingDefaults | None = None, **kwargs: Any
) -> str:
    """The message of a resume of ``out`` that must be refused, having changed nothing."""
    before = contents(out)
    training = training or settings(max_steps=6)
    with pytest.raises(UsageError) as info:
        run(out, data, resume="auto", training=training, **kwargs)
    assert contents(out) == before  # checkpoints, metrics, summary, best.pt as they were
    return str(info.value)


def edited_checkpoint(out: Path, data: TrainData, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A run of 3 steps into ``out``, its checkpoint then changed by ``edit``."""
    run(out, data)
    path = out / "ckpt-step00000003.pt"
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)
    return path


# -- a resume that changes the schedule --------------------------------------------------------


def test_a_resume_with_another_schedule_says_so(tmp_path: Path, data: TrainData) -> None:
    # --max-steps 210 after a run of 300 recomputed the cosine decay without a word
    out = tmp_path / "run"
    run(out, data)
    said: list[str] = []
    run(out, data, resume="auto", training=settings(max_steps=6, lr=1e-3), echo=said.append)
    notes = [line for line in said if "schedule differs" in line]
    assert notes == [
        "note: the learning-rate schedule differs from the checkpoint's run (lr 0.0003 -> "
        "0.001, max_steps 3 -> 6): from step 3 the rate follows this run's schedule"
    ], said
    again: list[str] = []
    run(out, data, resume="auto", training=settings(max_steps=6, lr=1e-3), echo=again.append)
    assert not any("schedule differs" in line for line in again)  # nothing to train, same


# -- a resume whose batches would differ ------------------------------------------------------


def test_a_resume_with_another_seed_is_refused_naming_both_values(
    tmp_path: Path, data: TrainData
) -> None:
    run(tmp_path, data)
    text = refusal(tmp_path, data, training=settings(max_steps=6, seed=7))
    assert "training.seed" in text and "1" in text and "7" in text, text
    assert "training.seed=1" in text, text  # how to keep the checkpoint's value
    assert "new folder" in text, text
    assert "\n" not in text  # one paragraph
    # with the checkpoint's seed it continues
    assert run(tmp_path, data, resume="auto", training=settings(max_steps=6)).steps == 6


def test_a_resume_with_another_seq_len_or_data_is_refused(
    tmp_path: Path, data: TrainData, cache: Path
) -> None:
    run(tmp_path, data)
    longer = prepare_lm_data(None, seq_len=2 * SEQ, vocab_size=260, cache_dir=cache)
    text = refusal(tmp_path, longer, cfg=config(seq_len=2 * SEQ))
    assert f"config.seq_len is {SEQ} in the checkpoint and {2 * SEQ} in this run" in text, text
    corpus = tmp_path.parent / f"{tmp_path.name}-corpus.txt"
    corpus.write_text("".join(f"line {i} of another corpus\n" for i in range(400)))
    other = prepare_lm_data(corpus, seq_len=SEQ, vocab_size=260, cache_dir=cache)
    text = refusal(tmp_path, other)
    saved, now = len(data.train), len(other.train)  # type: ignore[arg-type]
    assert f"{saved:,} samples in the checkpoint and {now:,} in this run" in text, text
    assert "seq_len" not in text and "seed" not in text, text  # only what differs


def test_a_resume_into_a_new_folder_is_refused_too(tmp_path: Path, data: TrainData) -> None:
    run(tmp_path / "a", data)
    with pytest.raises(UsageError, match=r"training\.seed is 1 in the checkpoint and 2"):
        run(
            tmp_path / "b",
            data,
            resume=tmp_path / "a" / "ckpt-step00000003.pt",
            training=settings(max_steps=6, seed=2),
        )
    assert not list((tmp_path / "b").glob("*.pt"))


def test_an_older_checkpoint_without_a_field_is_not_refused_on_it(
    tmp_path: Path, data: TrainData
) -> None:
    """A checkpoint written before the training split's size was kept resumes on other
    data (nothing says it differs); what it does keep (the seed) is still checked."""
    edited_checkpoint(tmp_path, data, lambda state: state["data"].pop("samples", None))
    with pytest.raises(UsageError, match=r"training\.seed"):
        run(tmp_path, data, resume="auto", training=settings(max_steps=6, seed=2))
    half = dataclasses.replace(data, train=Subset(data.train, range(len(data.train) // 2)))  # type: ignore[arg-type]
    assert run(tmp_path, half, resume="auto", training=settings(max_steps=6)).steps == 6


def test_a_checkpoint_with_nan_weights_is_named_not_blamed_on_the_learning_rate(
    tmp_path: Path, data: TrainData
) -> None:

    def nan_weights(state: dict[str, Any]) -> None:
        name = next(k for k, v in state["model"].items() if v.is_floating_point())
        state["model"][name] = torch.full_like(state["model"][name], float("nan"))

    path = edited_checkpoint(tmp_path, data, nan_weights)
    for resume in (path, "auto"):
        with pytest.raises(CheckpointError) as info:
            run(tmp_path, data, resume=resume, training=settings(max_steps=6))
        text = str(info.value)
        assert str(path.name) in text and "weights are not finite" in text, text
        assert "lr" not in text, text


def test_a_nan_best_validation_loss_is_no_best(tmp_path: Path, data: TrainData) -> None:
    """A diverged evaluation's nan held the best at nan: no later loss was below it, and
    best.pt was never written again. A checkpoint's nan is no best, nor is a new nan."""
    edited_checkpoint(tmp_path, data, lambda state: state.update(best_eval_loss=float("nan")))
    result = run(tmp_path, data, resume="auto", training=settings(max_steps=6, eval_interval=6))
    assert result.best_eval_loss is not None and math.isfinite(result.best_eval_loss)
    assert (tmp_path / "best.pt").is_file()
    assert not improves(float("nan"), None) and not improves(float("inf"), 2.0)
    assert improves(1.5, None) and improves(1.5, 2.0) and not improves(2.5, 2.0)


def test_an_optimizer_state_that_does_not_fit_is_a_checkpoint_error_not_a_traceback(
    tmp_path: Path, data: TrainData
) -> None:
    path = edited_checkpoint(  # a ValueError inside torch before the fix
        tmp_path, data, lambda state: state["optimizer"].update(param_groups=[])
    )
    with pytest.raises(CheckpointError, match="optimizer state does not fit this run's optimizer"):
        run(tmp_path, data, resume=path, training=settings(max_steps=6))


def _moments_of_another_shape(state: dict[str, Any]) -> None:
    for entry in state["optimizer"]["state"].values():
        entry["exp_avg"] = torch.zeros(3)


def _scheduler_without_its_keys(state: dict[str, Any]) -> None:
    state["scheduler"] = {"x": 1}


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        # torch loaded it, and the first step failed: "The size of tensor a (3) must match"
        (_moments_of_another_shape, "optimizer state does not fit this run's optimizer"),
        (_scheduler_without_its_keys, "learning-rate schedule state does not fit this run"),
    ],
)
def test_an_edited_state_that_does_not_fit_is_refused_before_a_step(
    tmp_path: Path, data: TrainData, edit: Callable[[dict[str, Any]], None], said: str
) -> None:
    path = edited_checkpoint(tmp_path, data, edit)
    with pytest.raises(CheckpointError, match=said):
        run(tmp_path, data, resume=path, training=settings(max_steps=6))


def test_a_refused_resume_leaves_no_run_folder_behind(tmp_path: Path, data: TrainData) -> None:
    """A failed --resume FILE into a new --out left the folder with its lock file."""
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    for resume in (tmp_path / "nosuch.pt", broken):
        with pytest.raises((CheckpointError, UsageError)):
            run(tmp_path / "new", data, resume=resume, training=settings(max_steps=6))
        assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a folder the user made stays, as it was
    with pytest.raises((CheckpointError, UsageError)):
        run(tmp_path / "mine", data, resume=tmp_path / "nosuch.pt")
    assert (tmp_path / "mine").is_dir()


# -- a fresh run into a folder that holds another run's checkpoints ---------------------------


def test_a_fresh_run_is_told_whose_checkpoints_a_folder_holds(
    tmp_path: Path, data: TrainData
) -> None:
    run(tmp_path, data)
    other = dataclasses.replace(make_spec(), name="other-lm")
    with pytest.raises(UsageError) as info:
        run(tmp_path, data, spec=other)
    text = str(info.value)
    assert "model 'fake-lm'" in text and "'other-lm'" in text, text
    assert "--resume" not in text and "resume auto" not in text, text
    assert "new folder with out_dir" in text, text
    # the same model with other weights (dim 8 instead of 16): no resume either
    with pytest.raises(UsageError) as info:
        run(tmp_path, data, spec=make_spec(dim=8))
    text = str(info.value)
    assert "model 'fake-lm'" in text and "dim" in text and "resume" not in text, text
    # another seed: continue it with the checkpoint's seed, or a new folder
    with pytest.raises(UsageError) as info:
        run(tmp_path, data, training=settings(seed=5))
    text = str(info.value)
    assert "training.seed is 1 in the checkpoint and 5 in this run" in text, text
    assert "resume auto" in text and "training.seed=1" in text, text
    # this run could continue them: the advice is to
    with pytest.raises(UsageError, match="continue it with --resume auto"):
        run(tmp_path, data)


def test_a_resume_from_another_model_s_checkpoint_says_so_before_the_data(
    tmp_path: Path, data: TrainData
) -> None:
    """Another model's checkpoint (with another seq_len too) was refused for its seq_len,
    and the advice to resume with the checkpoint's seq_len led to a second refusal."""
    run(tmp_path, data)
    other = dataclasses.replace(make_spec(), name="other-lm")
    for spec in (other, make_spec(dim=8)):
        with pytest.raises(CheckpointError) as info:
            run(tmp_path, data, spec=spec, resume="auto", cfg=config(seq_len=SEQ // 2))
        text = str(info.value)
        assert "it is a checkpoint of model" in text and "seq_len" not in text, text
