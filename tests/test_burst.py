"""The burst runner: each outcome from a real trial process, driven by fake models on CPU.

Every burst starts a Python process that imports torch (a few seconds here), so each
outcome is one burst, and the checks on a healthy run share one module-scoped result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

from autotune.burst import trial as _trial
from autotune.burst.request import BurstRequest, SpecRef, write_request
from autotune.burst.result import BurstResult, percentile, step_figures
from autotune.burst.supervisor import run_burst
from autotune.burst.trial_report import describe_exit
from autotune.burst.zygote import SWITCH_ENV
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

sys.path.insert(0, str(Path(__file__).parent))
import fake_models
from fake_models import FAKES
from processes import left_behind

from autotune.testing.fake_caps import cpu_caps

CPU_CAPS = cpu_caps(peak_flops_bf16=2e11, peak_flops_fp32=1e11)
# torch's intra-op threads as a fresh process of this environment starts with: read as the
# tests are collected, before any test sets them (the ``one_thread`` fixture, a trial's cap)
TORCH_DEFAULT_THREADS = torch.get_num_threads()


def fake(name: str, **args: object) -> fake_models.ModelSpec:
    spec = load_model(f"{FAKES}:{name}")
    return spec.with_args(**args) if args else spec


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_no_children() -> None:
    left = [p for p in left_behind() if not gone(p.pid)]
    assert not left, f"processes left behind: {left}"


# -- a healthy run, with DataLoader workers and verification ----------------------------
@pytest.fixture(scope="module")
def ok_run() -> Iterator[BurstResult]:
    # The oom fake fails only above 4 samples; micro-batch 2 (eval batch 4) is fine.
    spec = fake("oom_spec", step_sleep_s=0.05)
    config = TrainConfig(
        micro_batch=2, seq_len=16, num_workers=2, prefetch_factor=2, persistent_workers=True
    )
    # A fresh interpreter, as a cold start is: its overhead has a torch import in it (the
    # tests of a process share their zygotes, and one already started forks in 0.1 s).
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SWITCH_ENV, "0")
        result = run_burst(spec, config, steps=5, warmup=2, verify=True, device_caps=CPU_CAPS)
    assert_no_children()
    yield result


def test_ok_run_status_and_steps(ok_run: BurstResult) -> None:
    assert ok_run.status == "ok", ok_run.reason
    assert ok_run.ok and ok_run.reason == ""
    assert ok_run.timed_steps == 5 and len(ok_run.step_times_s) == 5
    assert ok_run.warmup_steps == 2
    assert len(ok_run.losses) == 7 and all(math.isfinite(x) for x in ok_run.losses)
    assert ok_run.config["num_workers"] == 2


def test_ok_run_throughput_from_median(ok_run: BurstResult) -> None:
    median = statistics.median(ok_run.step_times_s)
    assert ok_run.step_time_median_s == pytest.approx(median)
    # Each step sleeps 50 ms in forward: the whole step is inside the timed window.
    assert median >= 0.05
    assert ok_run.step_time_p90_s is not None and ok_run.step_time_p90_s >= median
    assert ok_run.samples_per_s == pytest.approx(2 / median)
    assert ok_run.tokens_per_s == pytest.approx(2 * 16 / median)
    assert ok_run.throughput == ok_run.tokens_per_s
    assert ok_run.compile_s is None  # compile is off
    spec = fake("oom_spec")
    assert ok_run.mfu == pytest.approx(spec.flops_per_sample(16) * 2 / median / 1e11)


def test_a_burst_runs_on_the_threads_it_is_given(ok_run: BurstResult) -> None:
    assert ok_run.threads == TORCH_DEFAULT_THREADS  # torch's default in a fresh process
    capped = run_burst(
        fake("oom_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=1, warmup=0, threads=1
    )
    assert capped.status == "ok", capped.reason
    assert capped.threads == 1
    with pytest.raises(ValueError, match="threads must be at least 1"):
        run_burst(fake("oom_spec"), TrainConfig(micro_batch=2, seq_len=16), threads=0)


def test_ok_run_overhead_and_wall(ok_run: BurstResult) -> None:
    assert ok_run.overhead_s is not None and ok_run.overhead_s > 0.5  # a torch import at least
    assert ok_run.warmup_s is not None and ok_run.warmup_s >= 2 * 0.05
    assert ok_run.wall_s is not None
    assert ok_run.wall_s > ok_run.overhead_s + ok_run.warmup_s + sum(ok_run.step_times_s)


def test_ok_run_memory_counts_the_workers(ok_run: BurstResult) -> None:
    assert ok_run.peak_processes is not None and ok_run.peak_processes >= 3  # trial + 2 workers
    assert ok_run.peak_memory_bytes is not None and ok_run.peak_memory_bytes > 100 * 2**20
    assert ok_run.peak_memory_bytes == ok_run.host_peak_bytes
    assert ok_run.memory_source.startswith("cpu")
    assert ok_run.cuda_context_bytes is None


def test_ok_run_verification(ok_run: BurstResult) -> None:
    assert ok_run.eval_loss is not None and math.isfinite(ok_run.eval_loss)
    assert ok_run.checkpoint_bytes is not None and ok_run.checkpoint_bytes > 1000
    # what the race takes off a first-round burst to judge the next round's time
    assert ok_run.verify_s is not None and 0 < ok_run.verify_s < (ok_run.wall_s or 0)


def test_no_sampler_thread_outlives_the_burst(ok_run: BurstResult) -> None:
    assert not [t for t in threading.enumerate() if t.name == "autotune-memory"]


def test_result_round_trips_through_dict(ok_run: BurstResult) -> None:
    data = json.loads(json.dumps(ok_run.to_dict()))
    assert BurstResult.from_dict(data) == ok_run


# -- every other outcome ----------------------------------------------------------------
def test_oom_above_the_batch_size() -> None:
    result = run_burst(fake("oom_spec"), TrainConfig(micro_batch=8, seq_len=16), steps=2, warmup=1)
    assert result.status == "oom", result.reason
    assert "OutOfMemoryError" in result.reason and "warm-up step 1" in result.reason
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 0
    assert result.timed_steps == 0 and result.tokens_per_s is None
    assert_no_children()


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    spec = fake("sleep_spec", pid_file=str(pid_file))
    config = TrainConfig(micro_batch=2, seq_len=16, num_workers=1)
    # the zygote of this environment started first (a moment where the other tests of this
    # process started it): forked by it, the trial reaches its sleep within a second or
    # two, so a 4 s timeout ends it there (a cold start took 6 s to reach it)
    warm = run_burst(fake("sleep_spec", sleep_s=0.0), config, steps=1, warmup=0)
    assert warm.status == "ok", warm.reason
    started = time.monotonic()
    result = run_burst(spec, config, steps=2, warmup=1, timeout_s=4)
    elapsed = time.monotonic() - started
    assert result.status == "timeout", result.reason
    assert "4 s" in result.reason and "warm-up step 1" in result.reason
    assert elapsed < 4 + 8
    pids = json.loads(pid_file.read_text())
    assert pids["workers"], "the fake should have seen its DataLoader worker"
    for pid in [pids["pid"], *pids["workers"]]:
        assert gone(pid), f"process {pid} of the timed-out trial is still running"
    assert_no_children()


def test_abort_is_a_crash() -> None:
    result = run_burst(fake("abort_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=2)
    assert result.status == "crash", result.reason
    assert "process aborted (SIGABRT) without a result" in result.reason
    assert_no_children()


@pytest.mark.parametrize(
    ("returncode", "text"),
    [
        (-6, "aborted (SIGABRT)"),
        (-11, "crashed (SIGSEGV)"),
        (-9, "killed by SIGKILL (the OS out-of-memory killer?)"),
        (-15, "killed by SIGTERM"),
        (-99, "killed by signal 99"),
        (3, "exited with code 3"),
        (None, "did not exit"),
    ],
)
def test_a_dead_trial_is_described_by_its_signal_name(returncode: int | None, text: str) -> None:
    assert describe_exit(returncode) == text


def test_nan_loss() -> None:
    result = run_burst(fake("nan_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=2)
    assert result.status == "nan", result.reason
    assert "nan" in result.reason
    assert len(result.losses) == 1 and math.isnan(result.losses[0])


def test_other_exception_is_an_error_with_its_location() -> None:
    result = run_burst(fake("raise_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=2)
    assert result.status == "error"
    assert result.reason.startswith("ValueError: fake failure in forward at call 1")
    assert "fake_models.py:" in result.reason


def test_warmup_is_not_in_the_timed_figure() -> None:
    spec = fake("slow_warmup_spec")  # the first two forwards sleep 1 s each
    result = run_burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=3, warmup=2)
    assert result.status == "ok", result.reason
    assert result.warmup_s is not None and result.warmup_s >= 2.0
    assert result.step_time_median_s is not None and result.step_time_median_s < 0.5
    assert max(result.step_times_s) < 0.5


def test_cpu_budget_watchdog_stops_the_trial() -> None:
    budget = 1_000_000_000  # the fake allocates 1.5 GB at its first step, then sleeps 30 s
    started = time.monotonic()
    result = run_burst(
        fake("alloc_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=2, budget_bytes=budget
    )
    assert result.status == "oom", result.reason
    assert "budget" in result.reason
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes >= budget
    assert time.monotonic() - started < 25
    assert_no_children()


def test_on_step_false_prunes_and_pickled_spec_travels() -> None:
    # No source: the spec is pickled, so its module must be importable in the trial. A
    # built-in one is, in the tests' own environment (its zygote serves: a start is 3-4 s);
    # a user's module on PYTHONPATH reaches the trial: test_from_a_source_checkout_...
    small = {"vocab_size": 64, "d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16}
    spec = dataclasses.replace(load_model("text-regressor").with_args(**small), source="")
    assert SpecRef.of(spec).pickled is not None
    calls: list[tuple[int, float]] = []

    def on_step(index: int, seconds: float) -> bool:
        calls.append((index, seconds))
        return index < 1

    result = run_burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=50, on_step=on_step)
    assert result.status == "pruned", result.reason
    assert [i for i, _ in calls] == [0, 1]
    assert list(result.step_times_s) == [s for _, s in calls]
    assert result.step_time_median_s is not None
    assert_no_children()


# -- in-process units -------------------------------------------------------------------
def test_timed_step_synchronizes_cuda_before_each_clock_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    ticks = iter([10.0, 12.5])

    def clock() -> float:
        events.append("clock")
        return next(ticks)

    def step() -> str:
        events.append("step")
        return "out"

    seconds, out = _trial.timed_step(step, torch.device("cuda", 0), clock=clock)
    assert (seconds, out) == (2.5, "out")
    assert events == ["sync", "clock", "step", "sync", "clock"]


def test_timed_step_on_cpu_does_not_touch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(device: object = None) -> None:
        raise AssertionError("synchronize called on CPU")

    monkeypatch.setattr(torch.cuda, "synchronize", boom)
    seconds, _ = _trial.timed_step(lambda: None, torch.device("cpu"))
    assert seconds >= 0


def test_classify_exception() -> None:
    def raised(exc: BaseException) -> BaseException:
        try:
            raise exc
        except BaseException as caught:
            return caught

    assert _trial.classify_exception(raised(torch.cuda.OutOfMemoryError("x")))[0] == "oom"
    assert _trial.classify_exception(raised(MemoryError()))[0] == "oom"
    text = RuntimeError("CUDA error: out of memory")
    assert _trial.classify_exception(raised(text))[0] == "oom"
    wrapped = RuntimeError("backend compiler failed")
    wrapped.__cause__ = torch.cuda.OutOfMemoryError("inner")
    assert _trial.classify_exception(raised(wrapped))[0] == "oom"
    status, reason = _trial.classify_exception(raised(KeyError("missing")))
    assert status == "error"
    assert reason.startswith("KeyError: 'missing' [test_burst.py:")


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 90) == 9.0
    assert percentile(values, 50) == 5.0
    assert percentile([3.0], 90) == 3.0
    with pytest.raises(ValueError, match="q must be"):
        percentile(values, 120)


def test_step_figures_compile_and_mfu_peak_choice() -> None:
    spec = fake_models.fake_spec
    config = TrainConfig(micro_batch=4, grad_accum=2, seq_len=16, compile="default")
    figures = step_figures(
        spec=spec, config=config, step_times=[0.2, 0.1, 0.3], warmup_times=[5.0, 0.4], caps=CPU_CAPS
    )
    assert figures["step_time_median_s"] == 0.2
    assert figures["samples_per_s"] == pytest.approx(8 / 0.2)  # global batch of 8
    # the first warm-up step ran one micro-batch of the step's two: its compile is its
    # excess over half a timed step
    assert figures["compile_s"] == pytest.approx(5.0 - 0.2 / 2)
    no_warmup = step_figures(
        spec=spec, config=config, step_times=[5.0, 0.2, 0.1], warmup_times=[], caps=CPU_CAPS
    )
    assert no_warmup["compile_s"] == pytest.approx(5.0 - 0.2)  # a whole first step
    assert figures["warmup_s"] == pytest.approx(5.4)
    fp32 = figures["mfu"]
    bf16 = step_figures(
        spec=spec,
        config=config.replace(precision="bf16"),
        step_times=[0.2, 0.1, 0.3],
        warmup_times=[],
        caps=CPU_CAPS,
    )["mfu"]
    assert fp32 == pytest.approx(2 * bf16)  # bf16 is measured against the 2x bf16 peak
    no_caps = step_figures(spec=spec, config=config, step_times=[0.2], warmup_times=[], caps=None)
    assert no_caps["mfu"] is None
    samples = dataclasses.replace(spec, throughput_unit="samples")
    by_samples = step_figures(
        spec=samples, config=config, step_times=[0.2], warmup_times=[], caps=None
    )
    assert "tokens_per_s" not in by_samples and by_samples["samples_per_s"] == pytest.approx(40)


def test_the_spec_travels_by_its_source_where_it_has_one() -> None:
    spec = fake("oom_spec", width=4)
    ref = SpecRef.of(spec)
    assert ref.pickled is None
    assert ref.source == f"{FAKES}:oom_spec"
    assert ref.args is not None and ref.args["width"] == 4
    pickled = SpecRef.of(dataclasses.replace(spec, source=""))
    assert pickled.pickled is not None and pickled.source is None


def test_unpicklable_spec_without_source_is_an_error_without_a_process() -> None:
    spec = dataclasses.replace(
        fake_models.fake_spec, source="", loss_fn=lambda m, b: m(b["x"]).sum()
    )
    result = run_burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=1)
    assert result.status == "error"
    assert "cannot send model 'fake'" in result.reason


def test_bad_arguments_are_refused() -> None:
    config = TrainConfig(micro_batch=2, seq_len=16)
    with pytest.raises(ValueError, match="steps=0"):
        run_burst(fake_models.fake_spec, config, steps=0)
    with pytest.raises(ValueError, match="timeout_s=0"):
        run_burst(fake_models.fake_spec, config, timeout_s=0)


def test_the_reported_context_is_the_one_the_peak_counts() -> None:
    """The trial measures the CUDA context at the start and again at the end (kernels
    loaded during the steps grow it: cuDNN's grew it by 82 MiB on an H200) and counts the
    larger in its peak; the result reports that one, so peak - context is the reserved
    peak. Found on the GPU: the start's context was reported, 82 MiB short."""
    import json as _json

    from autotune.burst.trial_report import BurstProgress

    progress = BurstProgress()
    messages = [
        {"type": "context", "bytes": 708_837_376, "method": "nvml-process"},
        {"type": "result", "status": "ok", "peak_bytes": 905_969_664,
         "context_bytes": 794_820_608},
    ]  # fmt: skip
    lines = [_json.dumps(m).encode() for m in messages]
    assert progress.take(lines, started=0.0, on_step=None) == "result"
    assert progress.context_bytes == 794_820_608
    assert progress.context_method == "nvml-process"


# -- for real on a GPU ------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_cuda
def test_gpu_burst_counts_reserved_plus_context() -> None:
    result = run_burst(
        fake("oom_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=3, device="cuda:0"
    )
    assert result.status == "ok", result.reason
    assert result.cuda_context_bytes is not None and result.cuda_context_bytes > 0
    assert result.peak_memory_bytes is not None
    assert result.peak_memory_bytes > result.cuda_context_bytes
    assert result.memory_source.startswith("cuda")


@pytest.mark.gpu
@needs_cuda
def test_gpu_budget_is_enforced_inside_the_trial() -> None:
    budget = 3 * 2**30  # the fake asks for 4 GB at once
    spec = fake("alloc_spec", alloc_bytes=4 * 2**30, sleep_s=0.0)
    result = run_burst(
        spec, TrainConfig(micro_batch=2, seq_len=16), steps=2, budget_bytes=budget, device="cuda:0"
    )
    assert result.status == "oom", result.reason
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes <= budget


def test_on_step_exception_ends_the_trial_and_propagates() -> None:
    class Stop(Exception):
        pass

    def on_step(index: int, seconds: float) -> bool:
        raise Stop(f"stop at {index}")

    with pytest.raises(Stop, match="stop at 0"):
        run_burst(
            fake("oom_spec"), TrainConfig(micro_batch=2, seq_len=16), steps=50, on_step=on_step
        )
    assert_no_children()


@pytest.mark.slow  # a search of its own and its zygote: 8 s of imports on the 2-core CPU
def test_trial_ends_when_its_parent_dies(tmp_path: Path) -> None:
    """The whole path, a search SIGKILLed while its trial steps; in the default tier, the
    trial's own process following the search it names: test_a_trial_started_for_a_parent_
    already_gone_ends_at_once, and _follow_parent's tests below."""
    pid_file = tmp_path / "pids.json"
    script = (
        "from autotune.burst.supervisor import run_burst\n"
        "from autotune.config.train_config import TrainConfig\n"
        "from autotune.models.registry import load_model\n"
        f"spec = load_model({FAKES!r} + ':sleep_spec').with_args(pid_file={str(pid_file)!r})\n"
        "run_burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=1, timeout_s=120)\n"
    )
    tmp = tmp_path / "tmp"  # the parent's temporary folders go here
    tmp.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp)}
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), "the trial never reached its first step"
        trial = json.loads(pid_file.read_text())["pid"]
        parent.kill()  # SIGKILL: no cleanup runs in the parent
        parent.wait()
        deadline = time.monotonic() + 5
        while not gone(trial) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(trial), "the trial outlived its parent"
        assert [p.name for p in tmp.glob("autotune-burst-*")] == []  # the trial removed it
    finally:
        parent.kill()
        parent.wait()


def _dead_pid() -> int:
    gone_process = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_process.wait()
    return gone_process.pid


def test_a_trial_whose_parent_died_before_it_started_cleans_up(tmp_path: Path) -> None:
    """The parent killed while the trial's interpreter started: the trial, adopted by
    then, follows the pid its parent gave it (not its adopter's), so it still sees that
    its parent is gone, removes its folder and ends."""
    from autotune.burst.process import child_env

    env = child_env(Path("/tmp/at-w"), TrainConfig(micro_batch=1, seq_len=8))
    assert env["AUTOTUNE_BURST_PARENT"] == str(os.getpid())
    assert env["TMPDIR"] == "/tmp/at-w"  # torchrun's temporary files: in its folder
    workdir = tmp_path / "autotune-burst-1-x"
    workdir.mkdir()
    script = (
        "import time\nfrom pathlib import Path\nfrom autotune.burst.child import _Workdir, "
        f"_follow_parent\n_follow_parent({_dead_pid()}, workdir=_Workdir(Path({str(workdir)!r})))"
        "\ntime.sleep(60)\n"
    )
    trial = subprocess.run(
        [sys.executable, "-c", script], start_new_session=True, timeout=30, check=False
    )
    assert trial.returncode in (1, -9) and not workdir.exists()


def test_a_trial_started_for_a_parent_already_gone_ends_at_once(short_tmp: Path) -> None:
    """``python -m autotune.burst.child`` follows the search that
    ``AUTOTUNE_BURST_PARENT`` names, not its own parent (this process, alive, which would
    let its trial sleep for two minutes): a search killed as it started the trial is gone,
    so the trial ends at once and makes no folder."""
    config = TrainConfig(micro_batch=2, seq_len=16)
    request = BurstRequest(
        spec=SpecRef.of(fake("sleep_spec")), config=config, steps=1, warmup=0, device="cpu", seed=0
    )
    env = {**os.environ, "TMPDIR": str(short_tmp), "AUTOTUNE_BURST_PARENT": str(_dead_pid())}
    read_fd, write_fd = os.pipe()
    try:
        with tempfile.TemporaryFile() as file:
            write_request(file, request)
            child = ["autotune.burst.child", f"fd:{file.fileno()}", str(write_fd)]
            done = subprocess.run(
                [sys.executable, "-m", *child],
                pass_fds=(write_fd, file.fileno()),
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
                start_new_session=True,
            )
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert done.returncode in (1, -9), done.stderr
    assert list(short_tmp.iterdir()) == []


def test_a_trial_makes_no_folder_once_its_parent_is_gone(short_tmp: Path) -> None:
    """A one-process trial makes its own folder: when its parent died before that, the
    folder is never made (the parent-death handler holds the folder's lock to the end)."""
    script = (
        "import tempfile, time\nfrom autotune.burst.child import _Workdir, _follow_parent\n"
        f"tempfile.tempdir = {str(short_tmp)!r}\nw = _Workdir(None)\n"
        f"_follow_parent({_dead_pid()}, workdir=w)\ntime.sleep(0.5)\nw.make()\n"
        "time.sleep(60)\n"
    )
    trial = subprocess.run(
        [sys.executable, "-c", script], start_new_session=True, timeout=30, check=False
    )
    assert trial.returncode in (1, -9)
    assert list(short_tmp.glob("autotune-burst-*")) == []


_WRITES_ON = "while True:\n    (folder / 'pymp-x').mkdir(parents=True, exist_ok=True)\n"
# as a main thread that fails on the removal would: it writes once more, and its failure
# ends the process before the parent-watching thread goes on (CI, once)
_ENDS_ON_THE_REMOVAL = (
    "while folder.exists():\n    pass\n"
    "(folder / 'pymp-x').mkdir(parents=True, exist_ok=True)\nos._exit(1)\n"
)


@pytest.mark.parametrize(
    "main_thread", [_WRITES_ON, _ENDS_ON_THE_REMOVAL], ids=["writes-on", "ends-on-the-removal"]
)
def test_what_a_trial_writes_after_its_parent_died_goes_with_its_group(
    short_tmp: Path, main_thread: str
) -> None:
    """A trial whose parent died removes its folder, but its main thread runs on until the
    group ends, and may write there again (a DataLoader worker started in that moment):
    what it wrote goes once the whole group has ended (``autotune.burst.sweeper``), even
    when the main thread ends the process as the folder goes."""
    workdir = short_tmp / "autotune-burst-1-x"
    workdir.mkdir()
    parent = subprocess.Popen(["sleep", "60"])
    script = (
        "import os\nfrom pathlib import Path\n"
        "from autotune.burst.child import _Workdir, _follow_parent\n"
        f"folder = Path({str(workdir)!r})\n"
        f"_follow_parent({parent.pid}, workdir=_Workdir(folder))\n"
        "print('watching', flush=True)\n" + main_thread
    )
    trial = subprocess.Popen(
        [sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert trial.stdout is not None and trial.stdout.readline() == "watching\n"
        parent.kill()
        parent.wait()
        assert trial.wait(timeout=30) in (1, -9)
    finally:
        for process in (parent, trial):
            process.kill()
            process.wait()
    deadline = time.monotonic() + 10
    while workdir.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workdir.exists()


class _KilledAtTheStart(BaseException):
    """As if the search were SIGKILLed there: no handler of the burst's catches it."""


def test_a_search_killed_as_it_starts_a_trial_leaves_no_folder(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent makes no folder for a one-process trial (its request is a file with no
    name), so a search killed at the moment it starts one leaves nothing behind: the
    temporary folder is looked at as the trial's process is started (a fresh one here, so
    that its start is ``subprocess.Popen``), and the burst ends there. In this process (a
    search of its own to kill was 4-8 s of imports on the 2-core CPU)."""
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    monkeypatch.setenv(SWITCH_ENV, "0")
    seen: list[list[str]] = []

    def killed(*args: object, **kwargs: object) -> None:
        seen.append(sorted(p.name for p in short_tmp.iterdir()))
        raise _KilledAtTheStart

    monkeypatch.setattr(subprocess, "Popen", killed)
    config = TrainConfig(micro_batch=2, seq_len=16)
    with pytest.raises(_KilledAtTheStart):
        run_burst(fake("oom_spec"), config, steps=1, warmup=0, device_caps=CPU_CAPS)
    assert seen == [[]]


def test_a_trial_the_search_kills_leaves_no_folder_if_the_search_dies_next(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial pruned (here as for outside load) is SIGKILLed and cannot remove the folder
    it made; the search's own sweep after the burst is gone with a search killed in that
    moment (the kill suite on CI: 1 kill in 50), so a sweeper started before the kill
    removes it. The search's sweeps are turned off here, as if it had died."""
    from autotune.burst import supervisor

    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    monkeypatch.setattr(supervisor, "remove_orphaned_workdirs", lambda: None)
    seen: list[str] = []

    def once_it_made_its_folder() -> str | None:
        seen[:] = [p.name for p in short_tmp.glob("autotune-burst-*")]
        return "outside load arrived" if seen else None

    config = TrainConfig(micro_batch=1, seq_len=8)
    result = run_burst(
        fake_models.fake_spec, config, steps=100_000, warmup=0, timeout_s=120,
        should_stop=once_it_made_its_folder,
    )  # fmt: skip
    assert result.status == "pruned" and seen
    deadline = time.monotonic() + 10
    while list(short_tmp.glob("autotune-burst-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(short_tmp.glob("autotune-burst-*")) == []


@pytest.fixture(scope="module")
def shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short temporary folder for the trials of the tests below, and their Inductor
    cache beside it: the trial's environment names both, and a zygote serves one
    environment, so the tests that share them share a zygote (a start is 4-5 s on the
    2-core CPU). Each test leaves the folder empty, as it checks."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="at-", dir="/tmp"))
    (folder.parent / f"{folder.name}-inductor").mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(folder.parent / f"{folder.name}-inductor", ignore_errors=True)


@pytest.fixture
def trial_tmp(shared_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``shared_tmp`` as this process's and the trial's temporary folder."""
    import tempfile

    assert list(shared_tmp.iterdir()) == [], "a test before left the shared folder dirty"
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    monkeypatch.setenv("TMPDIR", str(shared_tmp))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", f"{shared_tmp}-inductor")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return shared_tmp


def test_a_trial_killed_outright_has_its_folder_removed(trial_tmp: Path) -> None:
    """The trial's folder is named after the trial; a trial SIGKILLed mid-step (as the
    budget's watchdog does) cannot remove it, and its burst does so as it ends."""
    short_tmp = trial_tmp
    folders: list[str] = []

    def kill_the_trial(index: int, seconds: float) -> bool:
        (folder,) = short_tmp.glob("autotune-burst-*")
        folders.append(folder.name)
        os.kill(int(folder.name.split("-")[2]), signal.SIGKILL)  # the trial's own pid
        return True

    config = TrainConfig(micro_batch=2, seq_len=16)  # steps of 0.5 s: killed during the next
    spec = fake("fake_spec", step_sleep_s=0.5)
    result = run_burst(spec, config, steps=5, warmup=0, on_step=kill_the_trial)
    assert result.status == "crash", result.reason
    assert len(folders) == 1 and list(short_tmp.iterdir()) == []


def test_a_bursts_temporary_files_go_with_its_folder(trial_tmp: Path) -> None:
    """DataLoader workers' pymp-* folders land in the trial's folder, removed with it; a
    folder whose maker died is removed by the next burst; a live maker's is kept."""
    short_tmp = trial_tmp
    orphan = short_tmp / f"autotune-burst-{_dead_pid()}-abc"
    live = short_tmp / f"autotune-burst-{os.getpid()}-abc"
    orphan.mkdir()
    live.mkdir()
    try:
        config = TrainConfig(micro_batch=2, seq_len=16, num_workers=1)
        result = run_burst(fake("oom_spec"), config, steps=2, warmup=0, device_caps=CPU_CAPS)
        assert result.ok, result.reason
        assert sorted(p.name for p in short_tmp.iterdir()) == [live.name]
    finally:
        for folder in (orphan, live):
            with contextlib.suppress(FileNotFoundError):
                folder.rmdir()


def test_a_trial_asks_for_its_temporary_folder_without_writing_a_probe_file(
    tmp_path: Path,
) -> None:
    """Python's first gettempdir() in a process writes a file of 8 random letters in the
    folder and removes it; a trial killed between the two left it in the user's folder
    (CI's kill suite, seed 20, kill 12). The search gives the trial its checked TMPDIR
    and the trial takes it as it is: its start-up opens no file there."""
    from autotune.burst.process import child_env

    assert child_env(None, TrainConfig(micro_batch=1, seq_len=8))["TMPDIR"]  # always given
    folder = tmp_path / "tmp"
    folder.mkdir()
    env = {**child_env(None, TrainConfig(micro_batch=1, seq_len=8)), "TMPDIR": str(folder)}
    script = (
        "import os, shutil\n"
        "opened = []\n"
        "real = os.open\n"
        "os.open = lambda path, *a, **k: (opened.append(str(path)), real(path, *a, **k))[1]\n"
        "from autotune.burst.process import make_workdir, trust_tmpdir\n"
        "trust_tmpdir()\n"
        "made = make_workdir()  # in /tmp where the folder is too long for sockets\n"
        "print(opened)\n"
        "shutil.rmtree(made)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "[]", out  # no probe file opened in the folder
    assert not any(folder.iterdir())


def test_from_a_source_checkout_the_child_imports_this_autotune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's PYTHONPATH starts with the checkout that holds pyproject.toml (the
    package moved a folder deeper once, and the lookup silently stopped finding it)."""
    from autotune.burst.process import child_env

    root = Path(__file__).resolve().parents[1]
    assert (root / "pyproject.toml").is_file()
    env = child_env(tmp_path / "w", TrainConfig(micro_batch=1, seq_len=8))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(root)
    # and the user's own path after it: a pickled spec's module may be found there
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mine"))
    env = child_env(tmp_path / "w", TrainConfig(micro_batch=1, seq_len=8))
    assert env["PYTHONPATH"].split(os.pathsep) == [str(root), str(tmp_path / "mine")]


def test_the_trial_removes_its_folder_once_its_result_is_sent(
    trial_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search killed after the trial's result, before its own clean-up, leaves no folder:
    the trial took it with it (here the parent's own removal is switched off). In this
    process (a fresh interpreter for the search was 4-10 s of imports on the 2-core CPU)."""
    from autotune.burst import supervisor

    short_tmp = trial_tmp  # the trial makes its folder here
    monkeypatch.setattr(supervisor, "remove_orphaned_workdirs", lambda: None)  # as if killed
    seen: list[str] = []

    def look(index: int, seconds: float) -> bool:
        seen.extend(p.name for p in short_tmp.glob("autotune-burst-*"))
        return True

    config = TrainConfig(micro_batch=2, seq_len=16, num_workers=1)
    result = supervisor.run_burst(fake("oom_spec"), config, steps=2, warmup=0, on_step=look)
    assert result.ok, result.reason
    assert seen, "the trial's folder was not made where this test looks"
    assert [p.name for p in short_tmp.glob("autotune-burst-*")] == []


def test_a_folder_whose_makers_pid_was_reused_is_removed(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's name carries its maker's start time: a live process with the same
    pid that started at another time did not make it."""
    import tempfile

    from autotune.burst.process import make_workdir, remove_orphaned_workdirs

    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    mine = make_workdir()
    started = int(psutil.Process().create_time())
    reused = short_tmp / f"autotune-burst-{os.getpid()}-{started - 3600:x}-abc"
    reused.mkdir()
    remove_orphaned_workdirs()
    assert sorted(p.name for p in short_tmp.iterdir()) == [mine.name]


def test_a_burst_with_workers_runs_under_a_temporary_folder_too_long_for_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DataLoader worker's socket lives in the temporary folder; under a long one (the
    tests' own folder under pytest-xdist) it cannot be bound, the batch never came and the
    burst waited out its timeout. The trial's folder then goes in /tmp."""
    import tempfile

    long = tmp_path / ("x" * 40)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    config = TrainConfig(micro_batch=2, seq_len=16, num_workers=1)
    result = run_burst(fake("oom_spec"), config, steps=2, warmup=0, timeout_s=60)
    assert result.ok, result.reason
    assert [p.name for p in long.iterdir()] == []


def test_a_trial_whose_channel_breaks_removes_its_folder(short_tmp: Path) -> None:
    """A parent killed outright breaks the channel, and the trial's next message fails
    before its parent-watch thread may have run: the trial still takes its folder with it,
    and ends quietly (exit 3, no traceback). 18 of 50 kills left a folder this way."""
    import tempfile

    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # nobody reads: the first message fails (EPIPE)
    with tempfile.TemporaryFile() as request:
        done = subprocess.run(
            [sys.executable, "-m", "autotune.burst.child", f"fd:{request.fileno()}", str(write_fd)],
            pass_fds=(write_fd, request.fileno()),
            env={**os.environ, "TMPDIR": str(short_tmp), "AUTOTUNE_BURST_PARENT": str(os.getpid())},
            capture_output=True,
            timeout=60,
            check=False,
            start_new_session=True,
        )
    os.close(write_fd)
    assert done.returncode == 3, done.stderr
    assert b"Traceback" not in done.stderr
    assert list(short_tmp.iterdir()) == []
