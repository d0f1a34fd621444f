"""A stop signal that also kills the run's helpers (Inductor's compile workers, which are
in the run's process group) makes the step raise: that error is the stop's doing, and the
run ends as the stop (one line, a checkpoint, 128 + the signal), never as a failure of the
user's model. Simulated without a real compile: a loss_fn that sends the signal to its own
process and then raises, as the step does when its compiler's workers die of the signal."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from fake_lm import FAKE_LM, make_spec

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import ModelSpec
from autotune.data import TrainData, prepare_lm_data
from autotune.train.trainer import Trainer

SEQ = 16

pytestmark = [
    pytest.mark.usefixtures("one_thread", "sigint_not_ignored"),
    pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals"),
]

DYING = "InductorError: SubprocException: a compile worker died"


def signal_then_raise(spec: ModelSpec, sig: signal.Signals, at_call: int) -> ModelSpec:
    calls = [0]
    inner = spec.loss_fn

    def loss_fn(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == at_call:
            os.kill(os.getpid(), sig)  # the signal reached the whole process group...
            raise RuntimeError(DYING)  # ...and the compiler's workers died of it
        return inner(module, batch)

    return dataclasses.replace(spec, loss_fn=loss_fn)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_error_after_a_stop_signal_is_the_stop(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    data: TrainData = prepare_lm_data(None, seq_len=SEQ, vocab_size=260, cache_dir=tmp_path)
    said: list[str] = []
    result = Trainer(
        signal_then_raise(make_spec(), sig, at_call=4),
        TrainConfig(micro_batch=4, grad_accum=1, seq_len=SEQ),
        TrainingDefaults(max_steps=50, log_interval=1, eval_interval=100, eval_batches=1),
        data,
        tmp_path / "run",
        echo=said.append,
        tensorboard=False,
    ).run()
    assert (result.interrupted, result.exit_code, result.steps) == (sig.name, code, 3)
    assert result.checkpoint is not None and result.checkpoint.name == "ckpt-step00000003.pt"
    stopped = f"{sig.name}: stopped at step 3 of 50; checkpoint {result.checkpoint}; continue"
    assert [line for line in said if line.startswith(stopped)], said
    assert not any(DYING in line for line in said)


USER_MODEL = textwrap.dedent(
    """
    import dataclasses, os, signal, sys
    sys.path.insert(0, {folder!r})
    from fake_lm import spec as base

    calls = [0]

    def loss_fn(model, batch):
        calls[0] += 1
        if calls[0] == 4:
            os.killpg(os.getpgrp(), signal.SIGTERM)  # `kill -TERM -PGID` mid-compilation
            raise RuntimeError({dying!r})
        return base.loss_fn(model, batch)

    spec = dataclasses.replace(base, loss_fn=loss_fn)
    """
)


@pytest.mark.slow
def test_autotune_train_reports_the_stop_not_the_users_loss_fn(tmp_path: Path) -> None:
    """The CLI: exit 143 and the stop's line, not "its loss_fn failed ... fix loss_fn"
    with exit 2, and no traceback."""
    model = tmp_path / "dying_model.py"
    model.write_text(USER_MODEL.format(folder=str(Path(FAKE_LM).parent), dying=DYING))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "autotune", "train", "--model", f"{model}:spec",
        "--data", str(corpus), "--out", str(out), "--max-steps", "50",
        "--set", "config.micro_batch=2", "--set", "config.seq_len=16",
        "--set", "training.log_interval=1", "--eval-interval", "100000",
    ]  # fmt: skip
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=240, start_new_session=True
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 143, said
    assert "SIGTERM: stopped at step 3 of 50; checkpoint " in said, said
    assert "Traceback" not in said and "loss_fn" not in said and DYING not in said, said
    assert (out / "ckpt-step00000003.pt").exists()
