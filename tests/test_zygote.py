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
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from fake_conv import CONV
from fake_models import FAKES

from autotune.burst import zygote as zygote_module
from autotune.burst.request import write_request
from autotune.burst.supervisor import run_burst
from autotune.burst.zygote import SWITCH_ENV, Zygote, ZygoteError, zygotes
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

ROOT = Path(__file__).resolve().parents[1]


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
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "first")
    first = _trial_process(tmp_path)
    second = _trial_process(tmp_path)
    assert first["ppid"] in zygotes.pids() and first["ppid"] != os.getpid()
    assert second["ppid"] == first["ppid"], "the second trial did not reuse the zygote"
    assert second["pid"] != first["pid"]
    assert first["sid"] == first["pid"], "a forked trial must lead a session of its own"
    assert first["mark"] == "first"
    # the trial's own folder, as a fresh trial makes it (use_as_tmpdir)
    assert "autotune-burst-" in (first["tmpdir"] or "")
    assert not first["inductor_loaded"], "an eager trial's peak must not carry Inductor"


def test_a_changed_environment_gets_its_own_zygote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenMP and torch read parts of the environment as they load: a zygote serves only
    the environment it started with."""
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "one")
    one = _trial_process(tmp_path)
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "two")
    two = _trial_process(tmp_path)
    assert (one["mark"], two["mark"]) == ("one", "two")
    assert one["ppid"] != two["ppid"]


def test_a_compiled_trial_comes_from_a_zygote_with_inductor_loaded(tmp_path: Path) -> None:
    compiled = _trial_process(tmp_path, TrainConfig(micro_batch=2, seq_len=8, compile="default"))
    eager = _trial_process(tmp_path)
    assert compiled["inductor_loaded"] and not eager["inductor_loaded"]
    assert compiled["ppid"] != eager["ppid"] and compiled["ppid"] in zygotes.pids()


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

    def refuse(env: dict[str, str], compiled: bool = False) -> Zygote:
        raise ZygoteError("refused for the test")

    monkeypatch.setattr(zygote_module, "Zygote", refuse)
    monkeypatch.setenv("AUTOTUNE_TEST_MARK", "refused")
    assert _trial_process(tmp_path)["ppid"] == os.getpid()
    assert "refused for the test" in zygotes.failures().values()


def test_a_zygote_ends_when_its_parent_closes_the_socket() -> None:
    zygote = Zygote(dict(os.environ, PYTHONPATH=str(ROOT)))
    pid = zygote.proc.pid
    assert psutil.pid_exists(pid) and zygote.alive()
    zygote.sock.close()  # what a parent's death does
    assert zygote.proc.wait(timeout=10) == 0


def test_a_zygote_ends_without_the_interpreters_teardown(tmp_path: Path) -> None:
    # Tearing torch down took 0.6-0.8 s per zygote when a search ended, past its limit.
    # An atexit handler (from sitecustomize, which the zygote's interpreter imports at its
    # start) would run in that teardown: it must not.
    marker = tmp_path / "torn-down"
    (tmp_path / "sitecustomize.py").write_text(
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)\n"
    )
    zygote = Zygote(dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    zygote.close()
    assert zygote.proc.returncode == 0
    assert not marker.exists()


def test_a_forked_trials_wait_times_out_while_it_runs_and_reports_its_signal() -> None:
    """``ForkedTrial`` keeps ``Popen``'s contract: ``wait(timeout)`` raises while the trial
    runs (here it waits for a request that never comes); a trial killed by a signal
    returns minus the signal's number."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    zygote = Zygote(env)
    result_read, result_write = os.pipe()
    try:
        with tempfile.TemporaryFile() as request, open(os.devnull, "wb") as log:
            spec = load_model(f"{FAKES}:sleep_spec")
            write_request(
                request, spec, TrainConfig(micro_batch=2, seq_len=16), steps=2, warmup=1,
                budget_bytes=None, device="cpu", seed=0, verify=False, threads=1,
            )  # fmt: skip
            request.flush()
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
    result = run_burst(
        spec.with_args(pid_file=str(pid_file)), config, steps=2, warmup=1, timeout_s=8
    )
    killer.join()
    assert result.status == "timeout", result.reason
    trial = json.loads(pid_file.read_text())["pid"]
    assert not psutil.pid_exists(trial) or psutil.Process(trial).status() == psutil.STATUS_ZOMBIE
    after = _trial_process(tmp_path)
    assert after["ppid"] in zygotes.pids() and after["ppid"] not in before


def test_a_zygote_that_does_not_answer_in_time_is_ended_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A late reply would answer the next question: a zygote that missed one is ended."""
    zygote = Zygote(dict(os.environ, PYTHONPATH=str(ROOT)))
    monkeypatch.setattr(zygote_module, "REPLY_TIMEOUT_S", 0.5)
    os.kill(zygote.proc.pid, signal.SIGSTOP)  # alive, but answering nothing
    try:
        with pytest.raises(ZygoteError, match="gone"):
            zygote.poll(os.getpid())
        assert not zygote.alive()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote.proc.pid, signal.SIGCONT)
        zygote.close()
