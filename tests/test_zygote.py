"""Warm start (``autotune.burst.zygote``): a one-process CPU trial is forked by a process
that has torch loaded, and is then what a fresh trial was: a session of its own, the
environment the supervisor gave it, its own exit status; every failure of a zygote falls
back to a fresh interpreter. Through real bursts of a tiny CNN that writes down the
process it was built in (``tests/fake_conv.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from fake_conv import CONV
from fake_detach import DETACH
from fake_models import FAKES

from autotune.burst import zygote as zygote_module
from autotune.burst.request import BurstRequest, SpecRef, write_request
from autotune.burst.supervisor import run_burst
from autotune.burst.zygote import SWITCH_ENV, Zygote, ZygoteError, zygotes
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

ROOT = Path(__file__).resolve().parents[1]

# What the tests of the zygote as a process need of it (its socket, its forks, its stops,
# its end) is not torch: in an environment with this sitecustomize it skips the imports a
# trial needs (WARM_MODULES, 4-5 s a start on the 2-core CPU) and starts in a fraction of a
# second. The tests of trials forked by a zygote use real ones.
_NO_WARM_IMPORTS = (
    "import importlib\n"
    "_import = importlib.import_module\n"
    "_skip = {skip!r}\n"
    "importlib.import_module = lambda name, package=None: (\n"
    "    None if name in _skip else _import(name, package))\n"
)


def _light_env(folder: Path, site: str = "") -> dict[str, str]:
    """The environment of a zygote that imports nothing for its trials; ``site`` is more
    of its ``sitecustomize``."""
    folder.mkdir(parents=True, exist_ok=True)
    skip = sorted(zygote_module.WARM_MODULES + zygote_module.COMPILE_MODULES)
    (folder / "sitecustomize.py").write_text(_NO_WARM_IMPORTS.format(skip=skip) + site)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))


def _trial_process(tmp_path: Path, config: TrainConfig | None = None) -> dict[str, Any]:
    """Run one burst; the facts its model wrote down about the trial's process."""
    facts = tmp_path / f"process-{time.monotonic_ns()}.json"
    spec = load_model(f"{CONV}:conv_spec").with_args(process_file=str(facts))
    result = run_burst(spec, config or TrainConfig(micro_batch=2, seq_len=8), steps=1, warmup=0)
    assert result.status == "ok", result.reason
    recorded: dict[str, Any] = json.loads(facts.read_text())
    return recorded


def test_a_cpu_trial_is_forked_by_a_zygote_into_a_session_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tests' own environment: the zygote the other tests of this process started for
    # it serves here too (a zygote's start is 3-4 s of torch imports on the 2-core CPU)
    monkeypatch.delenv("AUTOTUNE_TEST_MARK", raising=False)
    first = _trial_process(tmp_path)
    second = _trial_process(tmp_path)
    assert first["ppid"] in zygotes.pids() and first["ppid"] != os.getpid()
    assert second["ppid"] == first["ppid"], "the second trial did not reuse the zygote"
    assert second["pid"] != first["pid"]
    assert first["sid"] == first["pid"], "a forked trial must lead a session of its own"
    assert first["mark"] is None  # the environment itself: test_a_changed_environment_...
    # the trial's own folder, as a fresh trial makes it (use_as_tmpdir)
    assert "autotune-burst-" in (first["tmpdir"] or "")
    assert not first["inductor_loaded"], "an eager trial's peak must not carry Inductor"


def test_a_changed_environment_gets_its_own_zygote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenMP and torch read parts of the environment as they load: a zygote serves only
    the environment it started with."""
    monkeypatch.delenv("AUTOTUNE_TEST_MARK", raising=False)  # the tests' own zygote
    one = _trial_process(tmp_path)
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "two")
    two = _trial_process(tmp_path)
    assert (one["mark"], two["mark"]) == (None, "two")
    assert one["ppid"] != two["ppid"]


def test_a_forked_trial_ignores_the_stop_signals_its_search_ignores_now_not_at_the_zygotes_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh trial inherits the search's dispositions of the moment; a forked one must
    too, whatever they were when its zygote started (a test run as a background command
    starts with SIGINT ignored, its fixture then heeds it: the zygote one test started
    served the next with SIGINT ignored, and a trial asked to stop ended as an error)."""
    monkeypatch.delenv("AUTOTUNE_TEST_MARK", raising=False)  # the tests' own zygote
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        heeding = _trial_process(tmp_path)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ignoring = _trial_process(tmp_path)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        heeding_again = _trial_process(tmp_path)
    finally:
        signal.signal(signal.SIGINT, old)
    assert heeding["ppid"] == ignoring["ppid"] == heeding_again["ppid"], "not one zygote"
    assert heeding["ppid"] in zygotes.pids()
    assert [heeding["sigint_ignored"], ignoring["sigint_ignored"]] == [False, True]
    assert not heeding_again["sigint_ignored"]


def test_a_compiled_trial_comes_from_a_zygote_with_inductor_loaded(tmp_path: Path) -> None:
    # The compiled trial records its process as it builds its model, then fails to build
    # it (a width of -1): its compile (10-20 s on the 2-core CPU) is not what is tested.
    facts = tmp_path / "compiled.json"
    spec = load_model(f"{CONV}:conv_spec").with_args(process_file=str(facts), width=-1)
    config = TrainConfig(micro_batch=2, seq_len=8, compile="default")
    result = run_burst(spec, config, steps=1, warmup=0)
    assert result.status == "error", result.reason
    compiled = json.loads(facts.read_text())
    eager = _trial_process(tmp_path)
    assert compiled["inductor_loaded"] and not eager["inductor_loaded"]
    assert compiled["ppid"] != eager["ppid"] and compiled["ppid"] in zygotes.pids()


def test_warm_start_is_for_one_process_trials_unless_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision alone; a trial refused a zygote runs as a fresh interpreter through a
    real burst in test_a_zygote_that_cannot_start_leaves_its_trials_to_fresh_processes."""
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    assert zygote_module.warm_start_allowed(nproc=1)
    assert not zygote_module.warm_start_allowed(nproc=2)  # torchrun's ranks
    monkeypatch.setenv(SWITCH_ENV, "0")
    assert not zygote_module.warm_start_allowed(nproc=1)


# -- a CUDA trial's zygote: CUDA untouched in it, and usable in its forks ----------------------

_MAPS = """\
7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6
7f10-7f20 r-xp 00000000 08:01 43 /site/torch/lib/libcudart.so.12
7f20-7f30 r--p 00000000 00:00 0 [heap]
"""


def test_the_cuda_drivers_library_in_a_process_map_is_told_from_the_runtimes() -> None:
    """torch's CUDA runtime (libcudart) is mapped from its import on; the driver (libcuda)
    only once CUDA was used: that is what a zygote must not have."""
    assert not zygote_module._driver_loaded(_MAPS)
    used = _MAPS + "7f30-7f40 r-xp 00000000 08:01 44 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
    assert zygote_module._driver_loaded(used)
    assert not zygote_module._driver_loaded("")


def _exits_3() -> None:
    os._exit(3)


def _raises() -> None:
    raise RuntimeError("CUDA error: initialization error\nCUDA kernel errors might be ...")


def test_a_probe_in_a_fork_says_how_it_ended() -> None:
    in_a_fork = zygote_module._in_a_fork
    assert in_a_fork(lambda: None, timeout_s=30) is None
    assert in_a_fork(_raises, timeout_s=30) == "RuntimeError: CUDA error: initialization error"
    assert in_a_fork(_exits_3, timeout_s=30) == "it ended with exit status 3"
    started = time.monotonic()
    assert in_a_fork(lambda: time.sleep(60), timeout_s=0.5) == "it did not finish in 0.5 s"
    assert time.monotonic() - started < 10, "a hanging probe must be killed at its limit"


def test_the_check_runs_a_kernel_eager_and_compiled_in_a_fork(tmp_path: Path) -> None:
    """The check's own probe, on the CPU (the same code as on a GPU but for the device):
    in a process forked from a single-threaded one, as a zygote is, an eager kernel and
    one that Inductor generates both run; an empty compile cache, as a search's first."""
    script = (
        "import functools\nfrom autotune.burst.zygote import _in_a_fork, _run_a_kernel\n"
        "for compiled in (False, True):\n"
        "    probe = functools.partial(_run_a_kernel, 'cpu', compiled=compiled)\n"
        "    print(compiled, _in_a_fork(probe, timeout_s=240))\n"
    )
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.stdout.splitlines() == ["False None", "True None"], done.stderr[-2000:]
    assert any((tmp_path / "inductor").rglob("*.py")), "the compiled probe compiled nothing"


def test_a_zygote_that_started_cuda_itself_may_not_fork_cuda_trials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Started by torch (``torch.cuda`` initialised) or loaded by anything else (the
    driver's library mapped): refused before any fork, whatever a fork would do."""
    probe_ran: list[bool] = []

    def probe() -> None:
        probe_ran.append(True)

    unfit = zygote_module._cuda_unfit
    monkeypatch.setattr(zygote_module, "_own_maps", lambda: _MAPS)
    assert unfit(lambda: None, timeout_s=30) is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "the imports started CUDA here" in (unfit(probe, timeout_s=30) or "")
    monkeypatch.undo()
    monkeypatch.setattr(
        zygote_module, "_own_maps", lambda: _MAPS + "1-2 r-xp 0 0:0 0 /l/libcuda.so.1"
    )
    assert "the imports started CUDA here" in (unfit(probe, timeout_s=30) or "")
    assert probe_ran == []
    monkeypatch.setattr(zygote_module, "_own_maps", lambda: _MAPS)
    assert "could not use CUDA: RuntimeError: CUDA error" in (unfit(_raises, timeout_s=30) or "")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="a CPU-only torch's refusal; on a GPU: tests/test_gpu.py"
)
def test_a_cuda_trials_zygote_that_cannot_use_cuda_in_a_fork_leaves_them_to_fresh_processes(
    tmp_path: Path,
) -> None:
    """Here a torch built without CUDA: the zygote's check forks, the fork cannot put a
    tensor on the GPU, and the zygote says why instead of forking trials that would each
    fail as a crash; its environment starts fresh processes from then on."""
    ours = zygote_module.Zygotes()
    read_fd, write_fd = os.pipe()
    try:
        fds = {"request_fd": read_fd, "write_fd": write_fd, "log_fd": write_fd}
        env = _light_env(tmp_path)
        assert ours.spawn(env, compiled=False, cuda=True, **fds) is None
        (reason,) = ours.failures().values()
        assert "could not use CUDA" in reason
        # a CPU build of torch, or a CUDA build on a machine without a driver
        assert "not compiled with CUDA" in reason or "no NVIDIA driver" in reason
        assert ours.pids() == set()
        assert ours.spawn(env, compiled=False, cuda=True, **fds) is None  # not tried again
        # nor another CUDA environment (each try: the imports and a CUDA context)
        assert ours.spawn(env, compiled=True, cuda=True, **fds) is None
        assert len(ours.failures()) == 1
    finally:
        ours.close()
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.slow  # a fresh interpreter's imports: 4-5 s on the 2-core CPU; its parts above
def test_warm_start_off_starts_a_fresh_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SWITCH_ENV, "0")
    assert _trial_process(tmp_path)["ppid"] == os.getpid()


def test_a_zygote_that_cannot_start_leaves_its_trials_to_fresh_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Here a torch that fails to import in the zygote's environment: the zygote says why,
    and the trial starts fresh (where, in this test's environment, torch imports)."""
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, "PYTHONPATH": f"{broken}{os.pathsep}{ROOT}"}
    with pytest.raises(ZygoteError, match="importing: ImportError: no torch here"):
        Zygote(env)

    def refuse(env: dict[str, str], compiled: bool = False, cuda: bool = False) -> Zygote:
        raise ZygoteError("refused for the test")

    monkeypatch.setattr(zygote_module, "Zygote", refuse)
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "refused")
    assert _trial_process(tmp_path)["ppid"] == os.getpid()
    assert "refused for the test" in zygotes.failures().values()


def test_a_zygote_ends_when_its_parent_closes_the_socket(tmp_path: Path) -> None:
    zygote = Zygote(_light_env(tmp_path))
    pid = zygote.proc.pid
    assert psutil.pid_exists(pid) and zygote.alive()
    zygote.sock.close()  # what a parent's death does
    assert zygote.proc.wait(timeout=10) == 0


def test_a_zygote_ends_without_the_interpreters_teardown(tmp_path: Path) -> None:
    # Tearing torch down took 0.6-0.8 s per zygote when a search ended, past its limit.
    # An atexit handler (from sitecustomize, which the zygote's interpreter imports at its
    # start) would run in that teardown: it must not.
    marker = tmp_path / "torn-down"
    site = f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)\n"
    zygote = Zygote(_light_env(tmp_path, site))
    zygote.close()
    assert zygote.proc.returncode == 0
    assert not marker.exists()


def _write_sleeping_request(request: Any) -> None:
    """A request for a trial of the sleeping fake: a trial that runs until it is ended."""
    spec = load_model(f"{FAKES}:sleep_spec")
    write_request(
        request,
        BurstRequest(
            spec=SpecRef.of(spec), config=TrainConfig(micro_batch=2, seq_len=16), steps=2,
            warmup=1, device="cpu", seed=0, threads=1,
        ),
    )  # fmt: skip
    request.flush()


def test_a_forked_trials_wait_times_out_while_it_runs_and_reports_its_signal(
    tmp_path: Path,
) -> None:
    """``ForkedTrial`` keeps ``Popen``'s contract: ``wait(timeout)`` raises while the trial
    runs (here it waits for a request that never comes); a trial killed by a signal
    returns minus the signal's number."""
    zygote = Zygote(_light_env(tmp_path))
    result_read, result_write = os.pipe()
    try:
        with tempfile.TemporaryFile() as request, open(os.devnull, "wb") as log:
            _write_sleeping_request(request)
            pid = zygote.spawn(
                request_fd=request.fileno(), write_fd=result_write, log_fd=log.fileno()
            )
        trial = zygote_module.ForkedTrial(pid, zygote)
        with pytest.raises(subprocess.TimeoutExpired):
            trial.wait(timeout=1.0)
        assert trial.returncode is None
        os.killpg(trial.pid, signal.SIGKILL)
        assert trial.wait(timeout=10) == -signal.SIGKILL
    finally:
        for fd in (result_read, result_write):
            os.close(fd)
        zygote.close()


def test_a_trial_whose_zygote_dies_still_ends_and_the_next_one_gets_a_new_zygote(
    tmp_path: Path,
) -> None:
    """The zygote killed while its trial runs: the trial is left to init, the supervisor
    still ends it (here at its timeout) and returns a result, not an exception, and the
    next trial of that environment is forked by a new zygote."""
    pid_file = tmp_path / "pids.json"
    spec = load_model(f"{FAKES}:sleep_spec")
    config = TrainConfig(micro_batch=2, seq_len=16)
    run_burst(spec.with_args(sleep_s=0.0), config, steps=1, warmup=0)  # the zygote, started
    before = zygotes.pids()
    assert before

    def kill_the_zygotes_once_the_trial_steps() -> None:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in before:
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_zygotes_once_the_trial_steps)
    killer.start()
    # forked by the zygote started above, the trial writes its pid within a second; the
    # timeout is what ends it (8 s before: 4 s of this test's 12 s in the default tier)
    result = run_burst(
        spec.with_args(pid_file=str(pid_file)), config, steps=2, warmup=1, timeout_s=4
    )
    killer.join()
    assert result.status == "timeout", result.reason
    trial = json.loads(pid_file.read_text())["pid"]
    assert not psutil.pid_exists(trial) or psutil.Process(trial).status() == psutil.STATUS_ZOMBIE
    after = _trial_process(tmp_path)
    assert after["ppid"] in zygotes.pids() and after["ppid"] not in before


def _silent_zygote(tmp_path: Path) -> Zygote:
    """A zygote that runs but never answers a poll of pid 1: its ``os.waitpid`` hangs
    there (a ``sitecustomize`` its interpreter imports at its start)."""
    site = (
        "import os, time\n_waitpid = os.waitpid\n"
        "os.waitpid = lambda pid, flags: time.sleep(3600) if pid == 1 else _waitpid(pid, flags)\n"
    )
    return Zygote(_light_env(tmp_path, site))


def test_a_zygote_that_does_not_answer_in_time_is_ended_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late reply would answer the next question: a zygote that missed one is ended,
    and said so."""
    zygote = _silent_zygote(tmp_path)
    monkeypatch.setattr(zygote_module, "REPLY_TIMEOUT_S", 0.5)
    try:
        with (
            pytest.warns(RuntimeWarning, match="did not answer in 0.5 s"),
            pytest.raises(ZygoteError, match="gone") as raised,
        ):
            zygote.poll(1)
        assert raised.value.stall == "silent"
        assert not zygote.alive()
    finally:
        zygote.close()


def test_an_environment_whose_zygote_went_silent_starts_fresh_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hang would come back: the next trials of that environment start fresh."""
    zygote = _silent_zygote(tmp_path)
    monkeypatch.setattr(zygote_module, "REPLY_TIMEOUT_S", 0.5)
    pool = zygote_module.Zygotes()
    key = zygote_module.environment_key(zygote.env, compiled=False, cuda=False)
    pool._live[key] = zygote
    with pytest.warns(RuntimeWarning), pytest.raises(ZygoteError):
        zygote.poll(1)
    with tempfile.TemporaryFile() as request, open(os.devnull, "wb") as log:
        fds = {"request_fd": request.fileno(), "write_fd": log.fileno(), "log_fd": log.fileno()}
        assert pool.spawn(zygote.env, compiled=False, **fds) is None
    assert [reason.startswith("gone") for reason in pool.failures().values()] == [True]
    pool.close()


def test_a_stopped_zygote_is_noticed_at_once_said_and_killed(tmp_path: Path) -> None:
    """Stopped (by hand, or by a trial's build that stops its parent), a zygote answers
    nothing and would never read the end of file: the parent sees the state within a
    fraction of a second (not after the reply timeout), says so and kills it."""
    zygote = Zygote(_light_env(tmp_path))
    os.kill(zygote.proc.pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        with (
            pytest.warns(RuntimeWarning, match=f"process {zygote.proc.pid} was stopped"),
            pytest.raises(ZygoteError, match="gone") as raised,
        ):
            zygote.poll(os.getpid())
        assert time.monotonic() - started < 3.0
        assert raised.value.stall == "stopped"
        assert zygote.proc.returncode == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote.proc.pid, signal.SIGKILL)
        zygote.close()


def test_a_spawn_a_stopped_zygote_did_not_answer_ends_the_fork_it_may_have_made(
    tmp_path: Path,
) -> None:
    """A zygote stopped between its fork and its answer: the trial it forked must not run
    beside the one started again. Here a trial it forked whose answer is taken as lost."""
    zygote = Zygote(_light_env(tmp_path))
    result_read, result_write = os.pipe()
    try:
        with tempfile.TemporaryFile() as request, open(os.devnull, "wb") as log:
            _write_sleeping_request(request)
            fds = {"request_fd": request.fileno(), "write_fd": result_write, "log_fd": log.fileno()}
            forked = zygote.spawn(**fds)
            zygote.trials.discard(forked)  # its answer, as if it never came
            os.kill(zygote.proc.pid, signal.SIGSTOP)
            with pytest.warns(RuntimeWarning, match="was stopped"), pytest.raises(ZygoteError):
                zygote.spawn(**fds)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(forked) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(forked, os.WNOHANG)  # ours once its zygote died, where we adopt
            time.sleep(0.05)
        assert not psutil.pid_exists(forked) or psutil.Process(forked).status() == "zombie"
    finally:
        for fd in (result_read, result_write):
            os.close(fd)
        zygote.close()


def test_a_build_that_stops_its_zygote_costs_its_burst_seconds_not_a_minute(
    tmp_path: Path,
) -> None:
    """The trial's parent is its zygote: a build that stops its parent stops the zygote.
    The burst still ends ok, within seconds, says so, and kills the stopped zygote; the
    next trial is forked by a new one."""
    record = tmp_path / "record.json"
    spec = load_model(f"{DETACH}:detach_spec").with_args(
        mode="stop_parent", record_file=str(record)
    )
    config = TrainConfig(micro_batch=2, seq_len=4)
    run_burst(spec.with_args(mode="ok"), config, steps=1, warmup=0)  # the zygote, started
    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match="was stopped"):
        result = run_burst(spec, config, steps=1, warmup=0, timeout_s=120)
    assert result.status == "ok", result.reason
    assert time.monotonic() - started < 30.0  # (the reply timeout was 60 s)
    stopped = json.loads(record.read_text())["stopped"]
    assert stopped, "the trial was not forked by a zygote"
    assert not psutil.pid_exists(stopped), "the stopped zygote outlived its burst"
    after = _trial_process(tmp_path)
    assert after["ppid"] in zygotes.pids() and after["ppid"] != stopped


def test_a_stopped_zygote_gives_the_next_trial_to_a_new_one_at_once(tmp_path: Path) -> None:
    """A zygote stopped between two trials (by hand): the next spawn of its environment
    notices it at once, says so, kills it and has the trial forked by a new zygote; the
    environment is not given up (a silent zygote's is: test_an_environment_whose_...)."""
    env = _light_env(tmp_path)
    pool = zygote_module.Zygotes()
    stopped = Zygote(env)
    pool._live[zygote_module.environment_key(env, compiled=False, cuda=False)] = stopped
    os.kill(stopped.proc.pid, signal.SIGSTOP)
    result_read, result_write = os.pipe()
    try:
        with tempfile.TemporaryFile() as request, open(os.devnull, "wb") as log:
            _write_sleeping_request(request)
            fds = {"request_fd": request.fileno(), "write_fd": result_write, "log_fd": log.fileno()}
            started = time.monotonic()
            with pytest.warns(RuntimeWarning, match=f"process {stopped.proc.pid} was stopped"):
                forked = pool.spawn(env, compiled=False, **fds)
            assert time.monotonic() - started < 10.0  # (the reply timeout was 60 s)
        assert forked is not None and forked.zygote is not stopped
        assert forked.zygote.proc.pid in pool.pids() and pool.failures() == {}
        assert stopped.proc.returncode == -signal.SIGKILL
        os.killpg(forked.pid, signal.SIGKILL)
        assert forked.wait(timeout=10) == -signal.SIGKILL
    finally:
        for fd in (result_read, result_write):
            os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped.proc.pid, signal.SIGKILL)
        pool.close()


# the same through real bursts (a zygote of trials, and a new one: 5 s on the 2-core CPU);
# its parts in the default tier: the test above, and a trial's build that stops its zygote
@pytest.mark.slow
def test_a_zygote_stopped_by_hand_costs_the_next_burst_a_new_zygote_not_a_minute(
    tmp_path: Path,
) -> None:
    first = _trial_process(tmp_path)
    os.kill(first["ppid"], signal.SIGSTOP)
    started = time.monotonic()
    try:
        with pytest.warns(RuntimeWarning, match=f"process {first['ppid']} was stopped"):
            second = _trial_process(tmp_path)
        assert time.monotonic() - started < 30.0  # (the reply timeout was 60 s)
        assert second["ppid"] in zygotes.pids() and second["ppid"] != first["ppid"]
        assert not psutil.pid_exists(first["ppid"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first["ppid"], signal.SIGKILL)


def test_a_stopped_zygote_of_a_killed_search_ends_too(tmp_path: Path) -> None:
    """The search killed outright while its zygote is stopped: a stopped process never
    reads the end of file, so the kernel continues it (``PR_SET_PDEATHSIG``) and it
    ends."""
    script = (
        "import os, sys, time\nfrom autotune.burst.zygote import Zygote\n"
        "zygote = Zygote(dict(os.environ))\nprint(zygote.proc.pid, flush=True)\ntime.sleep(60)\n"
    )
    search = subprocess.Popen(
        [sys.executable, "-c", script],
        env=_light_env(tmp_path / "site"),  # and so its zygote's
        stdout=subprocess.PIPE,
    )
    assert search.stdout is not None
    pid = int(search.stdout.readline())
    try:
        os.kill(pid, signal.SIGSTOP)
        os.kill(search.pid, signal.SIGKILL)
        search.wait()
        deadline = time.monotonic() + 10
        while _running_pid(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running_pid(pid), "a stopped zygote outlived its search"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _running_pid(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
