"""A trial's timed steps end early once they agree (``stable_within``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fake_channel import RecordingChannel, StepOut

import autotune.burst.trial as trial_module
from autotune.burst.result import micro_batches_even, steps_stable
from autotune.config.train_config import TrainConfig


def test_steps_are_stable_from_two_that_agree_within_the_fraction() -> None:
    assert not steps_stable([1.0], 0.05)  # one step says nothing
    assert steps_stable([1.0, 1.04], 0.05)
    assert not steps_stable([1.0, 1.06], 0.05)
    assert not steps_stable([1.0, 1.5, 1.02], 0.05)  # every step so far counts
    assert steps_stable([1.0, 1.02, 1.03], 0.05, min_steps=3)
    assert not steps_stable([0.0, 0.0], 0.05)


def _timed(
    monkeypatch: pytest.MonkeyPatch, times: list[float], *, steps: int, within: float | None
) -> list[float]:
    """The timed steps a trial reports when its steps take ``times`` (one warm-up first)."""
    clock = iter(times)
    monkeypatch.setattr(trial_module, "timed_step", lambda run, device: (next(clock), StepOut()))
    channel = RecordingChannel()
    trial = trial_module.Trial({}, channel)  # type: ignore[arg-type]
    stepper = SimpleNamespace(device=torch.device("cpu"))
    config = TrainConfig(micro_batch=1, seq_len=8)
    failed = trial._timed_steps(
        stepper,  # type: ignore[arg-type]
        iter([]),
        config,
        warmup=1,
        steps=steps,
        stable_within=within,
    )
    assert failed is None
    return [fields["time_s"] for kind, fields in channel.sent if kind == "step"]


def test_a_trial_ends_its_timed_steps_once_two_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    # the warm-up (a compile: 5 s) is not among them
    assert _timed(monkeypatch, [5.0, 1.0, 1.02, 1.0, 1.0], steps=4, within=0.05) == [1.0, 1.02]


def test_a_trial_whose_steps_disagree_runs_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    times = [5.0, 1.0, 1.5, 1.04, 1.0]
    assert _timed(monkeypatch, times, steps=4, within=0.05) == times[1:]


def test_without_stable_within_every_step_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    times = [5.0, 1.0, 1.0, 1.0, 1.0]
    assert _timed(monkeypatch, times, steps=4, within=None) == times[1:]


def test_run_burst_refuses_a_fraction_outside_zero_to_one() -> None:
    from autotune.burst.supervisor import run_burst
    from autotune.testing.toy import toy_spec

    config = TrainConfig(micro_batch=1, seq_len=8)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="stable_within"):
            run_burst(toy_spec(), config, steps=2, warmup=0, stable_within=bad)


def test_should_stop_ends_a_running_trial_with_its_reason() -> None:
    import time

    from autotune.burst.supervisor import run_burst
    from tests import fake_models

    start = time.monotonic()

    def load_arrived() -> str | None:
        return "outside load arrived" if time.monotonic() - start > 1.0 else None

    config = TrainConfig(micro_batch=1, seq_len=8)
    result = run_burst(
        fake_models.fake_spec,
        config,
        steps=100_000,
        warmup=0,
        timeout_s=120,
        should_stop=load_arrived,
    )
    assert result.status == "pruned"
    assert result.reason.startswith("outside load arrived after timed step ")
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(
    "compiled",
    [
        False,
        # a real compile in the burst (7.5 s in the default tier); the rule is guarded there
        # by test_a_compiled_configs_should_stop_is_asked_once_a_step_is_done
        pytest.param(True, marks=pytest.mark.slow),
    ],
)
def test_should_stop_waits_for_a_compiled_configs_first_step(compiled: bool) -> None:
    """A stop during the compile throws its work away (mu: a burst stopped 40 s into its
    compile took 98 s run again, where its trial takes 52): a compiled config is asked to
    stop once its first step, the compile, is done; an eager one at once."""
    from autotune.burst.supervisor import run_burst
    from tests import fake_models

    def always() -> str:
        return "outside load arrived"

    config = TrainConfig(micro_batch=1, seq_len=8, compile="default" if compiled else "off")
    # 30 steps: the stop comes after the first, so they cost nothing; 3 were once all done
    # (0.3-0.7 s) before a loaded machine's supervisor asked
    result = run_burst(
        fake_models.fake_spec, config, steps=30, warmup=1, timeout_s=300, should_stop=always
    )
    assert result.status == "pruned" and result.reason.startswith("outside load arrived")
    assert (result.warmup_s is not None) is compiled, config.compile


def test_a_compiled_configs_should_stop_is_asked_once_a_step_is_done() -> None:
    from autotune.burst.supervisor import _after_compile
    from autotune.burst.trial_report import BurstProgress

    asked: list[int] = []

    def should_stop() -> str:
        asked.append(1)
        return "outside load arrived"

    assert _after_compile(None, BurstProgress()) is None
    progress = BurstProgress()
    ask = _after_compile(should_stop, progress)
    assert ask is not None and ask() is None and not asked  # compiling: not asked
    progress.warmup_times.append(12.0)  # the first step, the compile, is done
    assert ask() == "outside load arrived" and asked == [1]
    timed_only = BurstProgress(step_times=[0.1])  # no warm-up: a timed step counts too
    assert _after_compile(should_stop, timed_only)() == "outside load arrived"  # type: ignore[misc]


def test_the_first_warm_up_step_runs_one_micro_batch() -> None:
    # The first warm-up pays the one-time work; a whole step's other micro-batches would
    # only repeat what the timed steps measure. The later warm-ups and the timed steps are
    # whole steps.
    import itertools

    from autotune.burst.result import FIRST_WARMUP_MICRO_BATCHES

    sizes: list[int] = []

    def step(micro: list[dict[str, torch.Tensor]]) -> StepOut:
        sizes.append(len(micro))
        return StepOut()

    stepper = SimpleNamespace(device=torch.device("cpu"), step=step)
    trial = trial_module.Trial({}, RecordingChannel())  # type: ignore[arg-type]
    config = TrainConfig(micro_batch=1, grad_accum=4, seq_len=8)
    batches = itertools.repeat({"x": torch.zeros(1, 8)})
    failed = trial._timed_steps(stepper, batches, config, warmup=2, steps=2)  # type: ignore[arg-type]
    assert failed is None
    assert sizes == [FIRST_WARMUP_MICRO_BATCHES, 4, 4, 4] and FIRST_WARMUP_MICRO_BATCHES == 1


class _SilentReader:
    """A trial's channel on which nothing arrives: each read waits its time out."""

    def read(self, block_s: float) -> bool:
        import time

        time.sleep(min(block_s, 0.01))
        return True

    def lines(self) -> list[bytes]:
        return []

    def read_rest(self, open_: bool) -> bool:
        return open_


def test_the_compile_deadline_holds_a_burst_only_until_its_first_step() -> None:
    # mu beside a busy core: a 77 s compile within its 99 s cap, then steps of 4.8 s that
    # ran out the cap one step short. The cap is the compile's: past the first step the
    # burst runs to its own deadline.
    import os
    import time
    from types import SimpleNamespace

    import psutil

    from autotune.burst.supervisor import _watch
    from autotune.burst.trial_report import BurstProgress

    def watch(progress: BurstProgress, *, compile_in_s: float, end_in_s: float) -> float:
        now = time.perf_counter()
        outcome = _watch(
            reader=_SilentReader(),  # type: ignore[arg-type]
            leader=psutil.Process(os.getpid()),  # alive throughout
            sampler=SimpleNamespace(over_budget_bytes=None),  # type: ignore[arg-type]
            progress=progress,
            started=now,
            deadline=now + end_in_s,
            compile_deadline=now + compile_in_s,
            on_step=None,
        )
        assert outcome == "timeout"
        return time.perf_counter() - now

    assert watch(BurstProgress(), compile_in_s=0.0, end_in_s=30.0) < 5.0  # still compiling
    compiled = BurstProgress(warmup_times=[12.0])  # its first step, the compile, ended
    assert watch(compiled, compile_in_s=0.0, end_in_s=0.3) >= 0.3


@pytest.mark.slow  # two trial processes, one of them compiling: 7-10 s each
@pytest.mark.parametrize("compiled", [False, True])
def test_a_compile_timeout_ends_only_a_compiled_burst_still_in_its_first_step(
    compiled: bool,
) -> None:
    from autotune.burst.supervisor import run_burst
    from tests import fake_models

    config = TrainConfig(micro_batch=1, seq_len=8, compile="default" if compiled else "off")
    with pytest.raises(ValueError, match="compile_timeout_s"):
        run_burst(fake_models.fake_spec, config, compile_timeout_s=0.0)
    result = run_burst(
        fake_models.fake_spec, config, steps=2, warmup=1, timeout_s=300, compile_timeout_s=0.2
    )
    if compiled:  # a real compile takes seconds: killed at 0.2 s, during its first step
        assert result.status == "timeout" and "no result after 0.2 s" in result.reason
        assert result.warmup_s is None
    else:  # nothing to compile: the compile's timeout does not apply
        assert result.status == "ok", result.reason


# -- one even step -------------------------------------------------------------------------
def test_micro_batches_are_even_when_none_was_held_up() -> None:
    assert micro_batches_even([1.0, 1.1, 0.9, 1.0], 0.10)
    assert not micro_batches_even([1.0, 1.0, 1.0, 3.0], 0.10)  # one held up: mean 1.5
    assert not micro_batches_even([1.0], 0.10)  # one micro-batch says nothing
    assert not micro_batches_even([], 0.10)
    assert not micro_batches_even([0.0, 0.0], 0.10)


class _MicroStepper:
    """A stepper whose micro-batches advance a scripted clock by ``gaps[step][i]``."""

    def __init__(self, gaps: list[list[float]], device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.gaps = iter(gaps)
        self.now = 0.0
        self.passed: list[object] = []  # each step's after_micro_batch

    def clock(self) -> float:
        return self.now

    def step(self, micro: list[object], *, after_micro_batch: object = None) -> StepOut:
        self.passed.append(after_micro_batch)
        gaps = next(self.gaps)
        assert len(gaps) == len(micro)
        for i, gap in enumerate(gaps):
            self.now += gap
            if callable(after_micro_batch):
                after_micro_batch(i)
        return StepOut()


def _timed_micro(
    monkeypatch: pytest.MonkeyPatch,
    stepper: _MicroStepper,
    step_times: list[float],
    *,
    within: float | None = 0.10,
) -> list[float]:
    """The timed steps a trial of 4 micro-batches a step reports (one warm-up first)."""
    clock = iter(step_times)
    monkeypatch.setattr(trial_module, "timed_step", lambda run, device: (next(clock), run()))
    monkeypatch.setattr(trial_module, "_micro_clock", stepper.clock)
    channel = RecordingChannel()
    trial = trial_module.Trial({}, channel)  # type: ignore[arg-type]
    config = TrainConfig(micro_batch=1, grad_accum=4, seq_len=8)
    batches = iter(dict, None)  # empty batches: nothing to move to the device
    failed = trial._timed_steps(
        stepper,  # type: ignore[arg-type]
        batches,
        config,
        warmup=1,
        steps=4,
        stable_within=within,
    )
    assert failed is None
    return [fields["time_s"] for kind, fields in channel.sent if kind == "step"]


def test_a_first_timed_step_that_ran_evenly_ends_the_timed_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the warm-up runs one micro-batch; the first timed step's four ran evenly
    stepper = _MicroStepper([[5.0], [0.7, 0.75, 0.72, 0.8], [0.7] * 4, [0.7] * 4, [0.7] * 4])
    assert _timed_micro(monkeypatch, stepper, [5.0, 3.0, 2.0, 2.8, 2.0]) == [3.0]


def test_a_first_timed_step_held_up_is_followed_by_more(monkeypatch: pytest.MonkeyPatch) -> None:
    # one micro-batch of the first timed step held up (mean 30% above the median): the
    # steps go on, and end as steps do, once two agree; a later even step does not end them
    gaps = [[5.0], [0.7, 0.7, 0.7, 1.6], [0.7] * 4, [0.7] * 4, [0.7] * 4]
    times = [5.0, 3.7, 2.8, 3.0, 2.8]
    assert _timed_micro(monkeypatch, _MicroStepper(gaps), times) == times[1:]


def test_micro_batches_are_not_timed_without_stable_within_nor_on_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gaps = [[5.0]] + [[0.7] * 4] * 4
    times = [5.0, 3.0, 2.0, 2.8, 2.0]  # no two of them agree within 10%
    race = _MicroStepper(gaps)  # the race's bursts run every step
    assert _timed_micro(monkeypatch, race, times, within=None) == times[1:]
    assert race.passed == [None] * 5
    # a CUDA step's micro-batches are queued, not run: a clock read between them would
    # time the queueing (or, synchronized, change what is measured)
    cuda = _MicroStepper(gaps, device="cuda")
    assert _timed_micro(monkeypatch, cuda, times) == times[1:]
    assert cuda.passed == [None] * 5


def test_a_zygote_made_for_the_trial_is_no_part_of_its_compile_time() -> None:
    """The first compiled trial of an environment waits for its zygote (the imports; on
    CUDA a forked kernel too, up to two minutes) before its process runs: the compile's cap
    counts from then, the burst's whole time from its start (the search's deadline)."""
    from autotune.burst.supervisor import _deadlines

    fresh = _deadlines(started=100.0, running=100.0, timeout_s=300.0, compile_timeout_s=60.0)
    assert fresh == (400.0, 160.0)
    forked = _deadlines(started=100.0, running=130.0, timeout_s=300.0, compile_timeout_s=60.0)
    assert forked == (400.0, 190.0)
    late = _deadlines(started=100.0, running=380.0, timeout_s=300.0, compile_timeout_s=60.0)
    assert late == (400.0, 400.0)  # never past the burst's own end
    assert _deadlines(started=0.0, running=5.0, timeout_s=10.0, compile_timeout_s=None) == (
        10.0,
        None,
    )
