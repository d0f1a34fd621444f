"""`autotune train` stopped by a signal sent to its whole process group, as `timeout`,
Slurm, systemd and a terminal do: a clean stop after the step, a checkpoint, the shell's
exit code, no traceback, and no process left (DataLoader workers included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from child_signals import interactive
from fake_lm import FAKE_LM

from autotune.config.train_config import TrainConfig
from autotune.core.signals import end_orphan_watch, ignore_stop_signals, stop_when_orphaned
from autotune.data import loader_kwargs
from autotune.data.loader import worker_init

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")


def test_the_loader_workers_leave_stop_signals_to_the_main_process() -> None:
    with_workers = loader_kwargs(TrainConfig(micro_batch=2, seq_len=8, num_workers=2))
    assert with_workers["worker_init_fn"] is worker_init  # ignore_stop_signals, then more
    assert "worker_init_fn" not in loader_kwargs(TrainConfig(micro_batch=2, seq_len=8))


def _worker() -> None:
    ignore_stop_signals(0)
    time.sleep(60)


@pytest.mark.skipif(not hasattr(signal, "sigwaitinfo"), reason="sigwaitinfo (Linux)")
def test_a_worker_ignores_a_strangers_sigterm_but_obeys_its_parents() -> None:
    import multiprocessing

    worker = multiprocessing.get_context("fork").Process(target=_worker, daemon=True)
    worker.start()
    try:
        time.sleep(0.5)
        assert worker.pid is not None
        subprocess.run(["kill", "-TERM", str(worker.pid)], check=True)  # not its parent
        subprocess.run(["kill", "-HUP", str(worker.pid)], check=True)
        time.sleep(0.5)
        assert worker.is_alive()
        worker.terminate()  # its parent's SIGTERM: how multiprocessing ends a worker
        worker.join(10)
        assert worker.exitcode == 0
    finally:
        if worker.is_alive():
            worker.kill()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "how"),
    [
        (signal.SIGTERM, 143, ""),
        (signal.SIGHUP, 129, ""),
        # a parent that blocked the signal (a mask is inherited through exec) must not
        # leave the run deaf to it
        (signal.SIGINT, 130, "blocked"),
        # a parent that ignored it (nohup: SIGHUP) has the run ignore it: SIGTERM stops it
        (signal.SIGHUP, 143, "ignored"),
    ],
)
def test_a_signal_to_the_process_group_stops_training_cleanly(
    tmp_path: Path, sig: signal.Signals, code: int, how: str
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "autotune", "train", "--model", f"{FAKE_LM}:spec",
        "--data", str(corpus), "--out", str(out), "--max-steps", "100000",
        "--set", "config.micro_batch=2", "--set", "config.seq_len=16",
        "--set", "config.num_workers=1", "--set", "training.log_interval=1",
        "--eval-interval", "100000",
    ]  # fmt: skip
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(FAKE_LM).parent), env.get("PYTHONPATH", "")])

    def start() -> None:
        interactive()
        if how == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
        if how == "ignored":
            signal.signal(sig, signal.SIG_IGN)

    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=start,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []

    def read_to(step: int) -> None:
        deadline = time.monotonic() + 120
        for line in proc.stdout or ():  # the first logged steps: the workers are running
            seen.append(line)
            if line.startswith(f"step {step}/") or time.monotonic() > deadline:
                break
        assert any(line.startswith(f"step {step}/") for line in seen), "".join(seen)

    read_to(3)
    os.killpg(proc.pid, sig)
    if how == "ignored":
        read_to(30)  # still training, its workers too
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "killed by signal" not in err, err
    stopper = signal.SIGTERM if how == "ignored" else sig
    assert f"{stopper.name}: stopped at step" in "".join(seen) + rest + err
    assert any(out.glob("ckpt-step*.pt")), "no checkpoint saved"
    deadline = time.monotonic() + 15  # the workers end with their parent
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_alive(proc.pid), "processes of the run are still alive"


def test_a_worker_still_ends_when_its_parent_exits(tmp_path: Path) -> None:
    """The parent's own SIGTERM (how multiprocessing ends daemonic workers at exit) ends a
    worker: an iterator still alive at exit must not hang the interpreter."""
    script = textwrap.dedent(
        """
        from torch.utils.data import DataLoader
        from autotune.config.train_config import TrainConfig
        from autotune.data import loader_kwargs

        cfg = TrainConfig(micro_batch=2, seq_len=8, num_workers=1)
        it = iter(DataLoader(list(range(100)), **loader_kwargs(cfg)))
        next(it)
        cycle = {"it": it}
        cycle["self"] = cycle  # only the garbage collector could free it: not before exit
        del it
        print("exiting", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang, not a timing
        check=False,
    )
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr


def test_a_second_stop_signal_of_any_kind_stops_at_once() -> None:
    """A step that hangs (a user's forward) ended only on a second Ctrl-C: a second
    SIGTERM, what a scheduler sends, was a no-op, and the message told it to press Ctrl-C."""
    from autotune.core.signals import StopSignal
    from autotune.train.stop import StopSignals

    said: list[str] = []
    term = StopSignals(said.append)
    term._on_signal(signal.SIGTERM, None)
    assert term.received == signal.SIGTERM
    assert said[0].endswith("(a second SIGTERM stops at once)") and "Ctrl-C" not in said[0]
    term._on_signal(signal.SIGTERM, None)  # the same stop delivered twice: the clean stop
    term._first_at -= 2.0  # a second SIGTERM, seconds later
    with pytest.raises(StopSignal) as info:
        term._on_signal(signal.SIGTERM, None)
    assert info.value.signum == signal.SIGTERM
    ctrl_c = StopSignals(said.append)
    ctrl_c._on_signal(signal.SIGINT, None)
    assert said[-1].endswith("(press Ctrl-C again to stop at once)")
    with pytest.raises(KeyboardInterrupt) as raised:
        ctrl_c._on_signal(signal.SIGINT, None)
    assert not isinstance(raised.value, StopSignal)  # Ctrl-C's exit: 130


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_process_whose_parent_died_is_sent_its_stop_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A torchrun rank whose launcher was killed: one stop (SIGTERM by default; SIGUSR1
    here), however many of the dead parent's threads the kernel handed it through."""
    parents = iter([100, 100, 100, 1])  # the launcher, then init once it is gone
    monkeypatch.setattr(os, "getppid", lambda: next(parents, 1))
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _: received.append(signum))
    try:
        stop_when_orphaned(signal.SIGUSR1, interval_s=0.01)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # a second one would have come by now
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == [signal.SIGUSR1]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_process_orphaned_before_it_looked_is_sent_its_stop_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank whose launcher was killed while the rank still imported: the launcher's
    process id (``AUTOTUNE_LAUNCHER_PID``) is no longer its parent's when it starts
    looking, where its parent of the moment (init) would never change."""
    monkeypatch.setattr(os, "getppid", lambda: 1)
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _: received.append(signum))
    try:
        stop_when_orphaned(signal.SIGUSR1, parent=100, interval_s=0.01)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == [signal.SIGUSR1]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_watch_ended_sends_nothing_when_the_parent_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a rank's training loop (``end_orphan_watch``) it finishes by itself: a stop
    then, with the loop's handler gone, ended it before its summary."""
    parent = [100]
    monkeypatch.setattr(os, "getppid", lambda: parent[0])
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _: received.append(signum))
    try:
        stop_when_orphaned(signal.SIGUSR1, interval_s=0.01)
        end_orphan_watch()
        parent[0] = 1
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == []
