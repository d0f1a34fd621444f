"""A real ``autotune train`` stopped by a signal sent to its whole process group (what
``timeout``, Slurm and systemd do): the DataLoader workers leave the signal to the trainer,
which finishes the step, saves a checkpoint and exits 128 + the signal, with no traceback
and no worker left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from fake_lm import FAKE_LM

pytestmark = pytest.mark.skipif(not hasattr(signal, "sigwaitinfo"), reason="POSIX signals")


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"]
)
def test_a_signal_to_the_process_group_stops_cleanly(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    settings = ["training.log_interval=1", "config.micro_batch=2", "config.seq_len=16"]
    command = [sys.executable, "-m", "autotune", "train", "--model", f"{FAKE_LM}:spec"]
    command += ["--max-steps", "100000", "--eval-interval", "100000", "--out", "run"]
    command += ["--set", "config.num_workers=1", *[a for s in settings for a in ("--set", s)]]
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a scheduler's job has
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # until the first step is logged
            if line.startswith("step 1/"):
                break
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the run should have a DataLoader worker"
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "killed by signal" not in err, err
    assert f"{sig.name}: stopped at step" in out and "continue with --resume auto" in out
    assert sorted(p.name for p in (tmp_path / "run").glob("ckpt-step*.pt"))
    assert all(gone(w) for w in workers), f"workers left: {workers}"


def test_a_worker_still_ends_when_its_parent_exits(tmp_path: Path) -> None:
    """The parent's own SIGTERM (how multiprocessing ends daemonic workers at exit) ends a
    worker: an iterator still alive at exit must not hang the interpreter."""
    script = textwrap.dedent(
        """
        from torch.utils.data import DataLoader
        from autotune.config import TrainConfig
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
