"""The contention watcher: attribution on a fake process table and a fake NVML, then a real
CPU-burning process inside and outside the watched tree."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace

import psutil
import pynvml
import pytest

from autotune.study.session.watch import Load, MachineWatch, ProcessRow, disturbed_steps
from autotune.testing.nvml import FakeGPU, FakeNVML

ROOT = 100  # the search process in the fake table


@dataclass
class FakeHost:
    """A process table and a clock the test moves by hand; ``rows`` keyed by pid."""

    rows: dict[int, ProcessRow] = field(default_factory=dict)
    steal_s: float | None = None
    now: float = 0.0

    def add(self, pid: int, ppid: int, *, create_time: float = 1.0, cpu: float = 0.0) -> None:
        self.rows[pid] = (pid, ppid, create_time, cpu)

    def burn(self, pid: int, seconds: float) -> None:
        pid_, ppid, create_time, cpu = self.rows[pid]
        self.rows[pid] = (pid_, ppid, create_time, cpu + seconds)

    def processes(self) -> list[ProcessRow]:
        return list(self.rows.values())

    def steal(self) -> float | None:
        return self.steal_s

    def clock(self) -> float:
        return self.now

    def watch(self, **kwargs: object) -> MachineWatch:
        options: dict = {"device": "cpu", "root_pid": ROOT, **kwargs}
        return MachineWatch(processes=self.processes, steal=self.steal, clock=self.clock, **options)


def host_with_search() -> FakeHost:
    host = FakeHost()
    host.add(1, 0, cpu=50.0)  # init
    host.add(ROOT, 1, cpu=3.0)  # the search
    host.add(101, ROOT, cpu=0.0)  # a burst
    host.add(102, 101, cpu=0.0)  # its DataLoader worker
    return host


def tick(host: FakeHost, watch: MachineWatch, seconds: float = 1.0) -> None:
    host.now += seconds
    watch.sample()


# -- CPU attribution ----------------------------------------------------------------------
def test_outside_process_counts_and_our_tree_does_not() -> None:
    host = host_with_search()
    host.add(200, 1, cpu=7.0)  # someone else's job
    watch = host.watch()
    watch.sample()  # baseline
    host.burn(ROOT, 0.1)
    host.burn(101, 1.0)
    host.burn(102, 0.6)
    host.burn(200, 0.8)
    tick(host, watch)
    load = watch.total()
    assert load.samples == 1
    assert load.outside_cores_mean == pytest.approx(0.8)
    assert load.busy


def test_the_search_alone_is_quiet() -> None:
    host = host_with_search()
    watch = host.watch()
    watch.sample()
    for _ in range(3):
        host.burn(101, 0.9)
        host.burn(102, 0.9)
        tick(host, watch)
    load = watch.total()
    assert (load.outside_cores_mean, load.samples, load.busy) == (0.0, 3, False)


def test_tree_membership_follows_ppid_chains() -> None:
    host = host_with_search()
    host.add(103, 102, cpu=0.0)  # compile worker of the worker: three levels down
    host.add(300, 1, cpu=0.0)
    host.add(301, 300, cpu=0.0)  # a child of an outside process is outside
    watch = host.watch()
    watch.sample()
    host.burn(103, 1.5)
    host.burn(301, 0.7)
    tick(host, watch)
    assert watch.total().outside_cores_mean == pytest.approx(0.7)


def test_an_orphaned_worker_of_ours_stays_ours() -> None:
    host = host_with_search()
    watch = host.watch()
    watch.sample()
    del host.rows[101]  # the burst exits; init adopts its worker
    host.add(102, 1, cpu=0.0)
    host.burn(102, 0.9)
    tick(host, watch)
    assert watch.total().outside_cores_mean == 0.0


def test_a_reused_pid_is_a_new_process() -> None:
    host = host_with_search()
    host.add(200, 1, create_time=5.0, cpu=100.0)
    watch = host.watch()
    watch.sample()
    # 200 exits and its PID goes to a new outside process; 101 (ours) too.
    host.add(200, 1, create_time=50.0, cpu=0.3)
    host.add(101, 1, create_time=51.0, cpu=0.4)
    tick(host, watch)
    # Keyed by PID alone, 200 would read -99.7 s (clamped to 0) and 101 would stay ours.
    assert watch.total().outside_cores_mean == pytest.approx(0.7)


def test_a_process_born_mid_window_counts_from_its_birth() -> None:
    host = host_with_search()
    watch = host.watch()
    watch.sample()
    tick(host, watch)
    host.add(400, 1, create_time=9.0, cpu=0.6)  # born between two samples
    tick(host, watch)
    host.burn(400, 1.0)
    tick(host, watch)
    assert [s.outside_cores for s in watch._samples] == pytest.approx([0.0, 0.6, 1.0])


def test_what_ran_before_the_first_sample_is_not_counted() -> None:
    host = host_with_search()
    host.add(200, 1, cpu=1000.0)
    watch = host.watch()
    watch.sample()
    host.burn(200, 0.2)
    tick(host, watch)
    assert watch.total().outside_cores_mean == pytest.approx(0.2)


def test_steal_time_counts_as_outside_load() -> None:
    host = host_with_search()
    host.steal_s = 10.0
    watch = host.watch()
    watch.sample()
    host.steal_s = 10.7
    tick(host, watch)
    host.steal_s = None  # an OS without the counter: no error
    tick(host, watch)
    assert [s.outside_cores for s in watch._samples] == pytest.approx([0.7, 0.0])


def test_outside_load_is_capped_at_the_machines_cores() -> None:
    host = host_with_search()
    watch = host.watch()
    watch.sample()
    host.add(500, 1, cpu=1e6)  # a process missed by one scan, with a long past
    tick(host, watch)
    assert watch.total().outside_cores_max <= watch._cpu_cap


# -- windows --------------------------------------------------------------------------
def loaded_watch(cores: list[float], **kwargs: object) -> tuple[FakeHost, MachineWatch]:
    """One sample per second, ``cores[i]`` outside cores over ``(i, i + 1]``."""
    host = host_with_search()
    host.add(200, 1)
    watch = host.watch(**kwargs)
    watch.sample()
    for c in cores:
        host.burn(200, c)
        tick(host, watch)
    return host, watch


def test_window_aggregates_the_samples_it_overlaps() -> None:
    _, watch = loaded_watch([0.0, 2.0, 1.0, 0.0, 0.0])
    middle = watch.window(1.0, 3.0)  # samples (1, 2] and (2, 3]
    assert (middle.samples, middle.outside_cores_mean, middle.outside_cores_max) == (
        2,
        pytest.approx(1.5),
        2.0,
    )
    assert middle.busy
    assert watch.window(1.5, 1.6).samples == 1  # inside one sample's interval
    assert watch.load_since(3.0).outside_cores_mean == 0.0
    assert not watch.load_since(3.0).busy
    assert watch.total().outside_cores_mean == pytest.approx(0.6)
    empty = watch.window(50.0, 60.0)
    assert (empty.samples, empty.busy) == (0, False)


def test_the_mean_is_weighted_by_time() -> None:
    host = host_with_search()
    host.add(200, 1)
    watch = host.watch()
    watch.sample()
    host.burn(200, 3.0)
    tick(host, watch, 3.0)  # 1 core for 3 s
    tick(host, watch, 1.0)  # 0 cores for 1 s
    assert watch.total().outside_cores_mean == pytest.approx(0.75)


def test_busy_uses_the_watchs_thresholds() -> None:
    _, default = loaded_watch([0.6, 0.6])
    _, lenient = loaded_watch([0.6, 0.6], busy_cores=1.0)
    assert default.total().busy
    assert not lenient.total().busy


def test_busy_now_looks_at_the_last_seconds() -> None:
    _, watch = loaded_watch([2.0, 2.0, 0.0, 0.0, 0.0, 0.0])
    assert not watch.busy_now(last_s=3.0)
    assert watch.busy_now(last_s=6.0)


def test_a_burst_gets_the_cores_outside_processes_leave() -> None:
    """torch's threads wait on the slowest one: on a shared core every op waits a slice."""
    _, quiet = loaded_watch([0.1, 0.2, 0.1])
    assert quiet.burst_threads(cores=2) is None  # torch's default: one per core
    _, one_busy = loaded_watch([1.0, 1.0, 0.9])
    assert one_busy.burst_threads(cores=2) == 1
    assert one_busy.burst_threads(cores=16) == 15
    _, all_busy = loaded_watch([4.0, 4.0])
    assert all_busy.burst_threads(cores=2) == 1  # never below one
    _, earlier = loaded_watch([2.0, 2.0, 0.0, 0.0, 0.0, 0.0])
    assert earlier.burst_threads(cores=2, last_s=3.0) is None  # the load has gone


# -- Load ---------------------------------------------------------------------------------
def test_load_round_trips_through_json() -> None:
    load = Load(
        outside_cores_mean=1.23456,
        outside_cores_max=2.0,
        other_gpu_processes=(4242,),
        gpu_util_idle_mean=37.77,
        gpu="watched",
        samples=12,
        busy=True,
    )
    data = json.loads(json.dumps(load.to_dict()))
    assert data["outside_cores_mean"] == 1.23
    assert data["gpu_util_idle_mean"] == 37.8
    assert Load.from_dict(data) == replace(load, outside_cores_mean=1.23, gpu_util_idle_mean=37.8)
    assert Load.from_dict(Load().to_dict()) == Load()


@pytest.mark.parametrize(
    "data",
    [{}, {**Load().to_dict(), "gpu": "maybe"}, {**Load().to_dict(), "samples": None}],
)
def test_load_from_dict_rejects_a_malformed_record(data: dict) -> None:
    with pytest.raises(ValueError):
        Load.from_dict(data)


def test_describe_says_what_competed() -> None:
    busy = Load(outside_cores_mean=1.31, outside_cores_max=2.0, samples=5, busy=True)
    assert busy.describe() == "another process used 1.3 cores (max 2.0) during this measurement"
    gpu = Load(other_gpu_processes=(7, 9), gpu_util_idle_mean=45.0, gpu="watched")
    text = replace(gpu, samples=3, busy=True).describe()
    assert "GPU processes 7, 9 (not ours)" in text
    assert "45% busy between our bursts" in text
    assert "cores" not in text
    both = replace(busy, other_gpu_processes=(7,)).describe()
    assert both.startswith("another process used 1.3 cores (max 2.0); GPU process 7 (not ours)")
    quiet = Load(samples=4, gpu="unknown").describe()
    assert quiet.startswith("the machine was quiet") and "GPU load unknown" in quiet
    assert "no machine samples" in Load().describe()


# -- GPU through NVML ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def gpu_watch(gpu: FakeGPU, **nvml: object) -> tuple[FakeHost, FakeNVML, MachineWatch]:
    host = host_with_search()
    host.add(4242, 1)  # another user's training job
    fake = FakeNVML([FakeGPU(), gpu], **nvml)  # we watch cuda:1
    return host, fake, host.watch(device="cuda:1", nvml=fake)


def test_another_process_on_our_gpu_is_busy() -> None:
    host, _, watch = gpu_watch(FakeGPU(processes=((101, None), (4242, 2**30))))
    watch.sample()
    tick(host, watch)
    load = watch.total()
    assert (load.other_gpu_processes, load.gpu, load.busy) == ((4242,), "watched", True)


def test_our_own_processes_on_the_gpu_are_not() -> None:
    host, _, watch = gpu_watch(FakeGPU(processes=((ROOT, None), (102, None))))
    watch.sample()
    tick(host, watch)
    assert (watch.total().other_gpu_processes, watch.total().busy) == ((), False)


def test_a_process_on_another_gpu_is_not_ours_to_worry_about() -> None:
    host = host_with_search()
    host.add(4242, 1)
    fake = FakeNVML([FakeGPU(processes=((4242, None),)), FakeGPU()])
    watch = host.watch(device="cuda:1", nvml=fake)
    watch.sample()
    tick(host, watch)
    assert not watch.total().busy


def test_graphics_processes_count() -> None:
    host, _, watch = gpu_watch(FakeGPU(graphics_processes=((4242, None),)))
    watch.sample()
    tick(host, watch)
    assert watch.total().other_gpu_processes == (4242,)


def test_a_pid_outside_our_pid_namespace_is_not_attributed() -> None:
    # In a container NVML reports host PIDs: 777777 may be our own burst.
    host, _, watch = gpu_watch(FakeGPU(processes=((777777, None),)))
    watch.sample()
    tick(host, watch)
    assert watch.total().other_gpu_processes == ()


def test_utilization_between_our_bursts_is_busy_and_during_them_is_not() -> None:
    host, fake, watch = gpu_watch(FakeGPU(utilization=80))
    watch.sample()
    with watch.burst():
        tick(host, watch)
        tick(host, watch)
    during = watch.total()
    assert (during.gpu_util_idle_mean, during.busy) == (None, False)

    host.now += 0.5  # our kernels may still be in NVML's last period
    watch.sample()
    assert watch.load_since(2.0).gpu_util_idle_mean is None

    tick(host, watch)
    assert watch.load_since(3.0).gpu_util_idle_mean == 80.0
    assert watch.load_since(3.0).busy

    fake.gpus = [FakeGPU(), FakeGPU(utilization=3)]  # a monitoring agent
    t = host.now
    tick(host, watch)
    assert not watch.load_since(t).busy


def test_burst_marks_nest_and_use_plain_calls() -> None:
    host, _, watch = gpu_watch(FakeGPU(utilization=90))
    watch.sample()
    watch.burst_started()
    watch.burst_started()
    watch.burst_ended()
    tick(host, watch, 2.0)
    watch.burst_ended()
    tick(host, watch, 2.0)
    assert [s.gpu_util_idle for s in watch._samples] == [None, 90.0]


def test_utilization_is_not_sampled_while_our_process_holds_the_gpu() -> None:
    host, _, watch = gpu_watch(FakeGPU(processes=((101, None),), utilization=90))
    watch.sample()
    tick(host, watch)  # no burst marked, but a burst child is on the device
    assert watch.total().gpu_util_idle_mean is None


def test_nvml_missing_is_unknown_and_cpu_sampling_goes_on() -> None:
    missing = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    host, fake, watch = gpu_watch(FakeGPU(), init_error=missing)
    watch.sample()
    host.burn(4242, 0.9)
    tick(host, watch)
    tick(host, watch)
    load = watch.total()
    assert (load.gpu, load.samples, load.outside_cores_max) == ("unknown", 2, 0.9)
    assert watch.gpu_error is not None and "NVMLError" in watch.gpu_error
    assert fake.calls.count("nvmlInit") == 1  # not retried every second


def test_nvml_failing_mid_run_is_unknown_not_an_error() -> None:
    failing = frozenset({"nvmlDeviceGetComputeRunningProcesses"})
    host, _, watch = gpu_watch(FakeGPU(failing=failing, utilization=90))
    watch.sample()
    tick(host, watch)
    load = watch.total()
    assert (load.gpu, load.gpu_util_idle_mean, watch.error) == ("unknown", None, None)


def test_utilization_failing_leaves_the_processes() -> None:
    failing = frozenset({"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetGraphicsRunningProcesses"})
    host, _, watch = gpu_watch(FakeGPU(processes=((4242, None),), failing=failing))
    watch.sample()
    tick(host, watch)
    load = watch.total()
    assert (load.gpu, load.other_gpu_processes, load.gpu_util_idle_mean) == (
        "watched",
        (4242,),
        None,
    )


def test_a_cpu_device_does_not_touch_nvml() -> None:
    host = host_with_search()
    fake = FakeNVML([FakeGPU(utilization=100)])
    watch = host.watch(device="cpu", nvml=fake)
    watch.sample()
    tick(host, watch)
    watch.stop()
    assert (fake.calls, watch.total().gpu) == ([], "none")


def test_stop_shuts_nvml_down() -> None:
    _, fake, watch = gpu_watch(FakeGPU())
    watch.sample()
    watch.stop()
    assert fake.calls[-1] == "nvmlShutdown"


# -- the thread ---------------------------------------------------------------------------
def test_stop_returns_within_a_second() -> None:
    host = host_with_search()
    watch = MachineWatch(device="cpu", interval_s=30.0, processes=host.processes)
    watch.start()
    assert watch._thread is not None and watch._thread.is_alive()
    started = time.monotonic()
    watch.stop()
    assert time.monotonic() - started < 1.0
    assert not watch._thread.is_alive()
    assert watch.total().samples == 1  # stop() takes a last sample


def test_the_thread_samples_every_interval() -> None:
    host = host_with_search()
    with MachineWatch(device="cpu", interval_s=0.02, processes=host.processes) as watch:
        time.sleep(0.3)
    assert watch.total().samples >= 3
    assert watch.error is None


def test_an_exception_in_sampling_is_recorded_and_stops_the_sampler() -> None:
    host = host_with_search()
    calls = 0

    def flaky() -> list[ProcessRow]:
        nonlocal calls
        calls += 1
        if calls >= 3:
            raise RuntimeError("proc went away")
        return host.processes()

    with MachineWatch(device="cpu", interval_s=0.01, processes=flaky) as watch:
        time.sleep(0.2)
        assert watch._thread is not None and not watch._thread.is_alive()
    assert watch.error is not None and "RuntimeError: proc went away" in watch.error
    assert calls == 3  # stopped at the first failure; stop() did not sample again
    assert watch.total().samples == 1


def test_a_failing_baseline_does_not_start_the_thread() -> None:
    def broken() -> list[ProcessRow]:
        raise PermissionError("no /proc")

    with MachineWatch(device="cpu", processes=broken) as watch:
        pass
    assert watch.error is not None and "PermissionError" in watch.error
    assert watch.total().samples == 0


def test_start_twice_is_refused() -> None:
    host = host_with_search()
    watch = MachineWatch(device="cpu", interval_s=30.0, processes=host.processes)
    with watch, pytest.raises(RuntimeError):
        watch.start()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval_s": 0.0},
        {"busy_cores": -1.0},
        {"busy_gpu_util": 101.0},
        {"device": "cuda:first"},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        MachineWatch(**{"device": "cpu", **kwargs})


# -- a real process -----------------------------------------------------------------------
BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def test_a_real_burner_counts_outside_the_tree_and_not_inside_it() -> None:
    # Two watchers on the same machine at once: one rooted at an idle child (the burner,
    # a child of this process, is outside its tree), one at this process (the burner is
    # inside). Everything else on the machine counts the same in both, so the difference
    # is the burner, however busy the machine is.
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    outside = MachineWatch(device="cpu", interval_s=0.25, root_pid=idle.pid)
    inside = MachineWatch(device="cpu", interval_s=0.25)
    burner = None
    try:
        with outside, inside:
            started = time.monotonic()
            burner = subprocess.Popen([sys.executable, "-c", BURN.format(s=2.0)])
            proc = psutil.Process(burner.pid)
            time.sleep(2.0)
            times = proc.cpu_times()
            elapsed = time.monotonic() - started
    finally:
        for child in (idle, burner):
            if child is not None:
                child.kill()
                child.wait()
    burner_cores = (times.user + times.system) / elapsed
    seen_outside = outside.total().outside_cores_mean
    seen_inside = inside.total().outside_cores_mean
    # The difference is the burner plus this process's samplers (~0.04 cores), less the
    # idle child: were the burner counted inside too, it would be ~0.04.
    assert burner_cores > 0.2, f"the burner got {burner_cores:.2f} cores; machine overloaded"
    assert seen_outside >= 0.5
    assert seen_outside - seen_inside >= 0.5 * burner_cores, (seen_outside, seen_inside)
    assert outside.total().busy


# -- step times -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("steps", "disturbed"),
    [
        ([], False),
        ([1.0, 50.0], False),  # too few to say
        ([1.0, 1.0, 1.0], False),
        ([1.0, 1.1, 1.05, 0.98, 1.02, 1.1, 1.0, 1.0, 1.03, 1.08], False),  # quiet: ~1.1x
        ([2.8] * 8 + [21.8, 21.8], True),  # the disturbed burst the watch was built on
        ([1.0, 1.0, 5.0], True),
        ([1.0] * 8 + [2.0, 2.0], False),  # p90 exactly 2x the median is not "more than"
        ([1.0] * 9 + [2.01], False),  # one slow step in ten is the p100, not the p90
        ([1.0] * 8 + [2.01, 2.01], True),
        ([0.0, 0.0, 0.0], False),
    ],
)
def test_disturbed_steps(steps: list[float], disturbed: bool) -> None:
    assert disturbed_steps(steps) is disturbed


def test_disturbed_steps_ratio_is_a_keyword() -> None:
    steps = [1.0] * 8 + [1.6, 1.6]
    assert not disturbed_steps(steps)
    assert disturbed_steps(steps, ratio=1.5)


@pytest.mark.parametrize(
    ("steps", "ratio"), [([1.0, 1.0, 1.0], 1.0), ([1.0, -1.0, 1.0], 2.0), ([math.nan] * 3, 2.0)]
)
def test_disturbed_steps_refuses_nonsense(steps: list[float], ratio: float) -> None:
    with pytest.raises(ValueError):
        disturbed_steps(steps, ratio=ratio)
