"""A trial asked to stop (SIGTERM, SIGINT to its process group, which Inductor's compile
workers share) ends as that signal: the error its step raises after the stop (its compiler's
workers died of the same signal) is the stop's doing, never an ``error`` of the model.
Simulated without a real compile: a loss_fn that sends the signal to its own process and
then raises."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest
from fake_models import FAKES
from processes import describe_live, left_behind

from autotune.burst.supervisor import run_burst
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

pytestmark = [
    pytest.mark.usefixtures("sigint_not_ignored"),
    pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals"),
]

DYING = "InductorError: SubprocException: a compile worker died"

MODEL = textwrap.dedent(
    """
    import dataclasses, os, signal, sys
    sys.path.insert(0, {folder!r})
    from fake_models import fake_spec

    def loss_fn(model, batch):
        os.kill(os.getpid(), signal.{sig})  # the stop reached the trial's process group...
        raise RuntimeError({dying!r})  # ...and the compiler's workers died of it

    spec = dataclasses.replace(fake_spec, loss_fn=loss_fn)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_trial_asked_to_stop_ends_as_the_signal_not_as_the_models_error(
    tmp_path: Path, sig: signal.Signals
) -> None:
    model = tmp_path / "dying_model.py"
    model.write_text(MODEL.format(folder=str(Path(FAKES).parent), sig=sig.name, dying=DYING))
    spec = load_model(f"{model}:spec")
    result = run_burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=2, warmup=1)
    assert result.status == "crash", result.reason
    assert result.reason.startswith(f"the trial process killed by {sig.name} without a result")
    assert DYING not in result.reason and "KeyboardInterrupt" not in result.reason
    left = [line for p in left_behind() if (line := describe_live(p))]
    assert not left, f"processes left behind: {left}"
