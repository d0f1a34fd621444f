"""DataLoader workers (``autotune.data.loader.worker_init``) die with the process that
started them, even one killed outright (``kill -9`` of a search, of a trial, of a run),
leave stop signals to it, and run a caller's own ``worker_init_fn`` after autotune's."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from autotune.config.train_config import TrainConfig
from autotune.data import loader_kwargs
from autotune.data.loader import die_with_parent

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl (Linux)")

PARENT = textwrap.dedent(
    """
    import os, time
    from torch.utils.data import DataLoader
    from autotune.config.train_config import TrainConfig
    from autotune.data import loader_kwargs

    cfg = TrainConfig(micro_batch=2, seq_len=8, num_workers=2, persistent_workers=True)
    it = iter(DataLoader(list(range(100)), **loader_kwargs(cfg)))
    next(it)
    print(" ".join(str(w.pid) for w in it._workers), flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@linux
def test_workers_die_at_once_with_a_parent_killed_outright() -> None:
    """PyTorch's own watchdog would notice only seconds later (it checks every 5 s)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 1.0
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _orphaned_before_prctl() -> None:
    os.getppid = lambda: 1  # as if adopted: the parent is gone
    die_with_parent()
    os._exit(0)  # reached only if it did not notice


@linux
def test_a_worker_whose_parent_died_before_prctl_ends_itself() -> None:
    child = multiprocessing.get_context("fork").Process(target=_orphaned_before_prctl)
    child.start()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL


def _record(worker_id: int) -> None:
    print(f"user init {worker_id}", flush=True)


def _as_worker(queue: multiprocessing.queues.Queue[object]) -> None:
    init = loader_kwargs(
        TrainConfig(micro_batch=2, seq_len=8, num_workers=1), worker_init_fn=_record
    )["worker_init_fn"]
    calls: list[int] = []
    import autotune.data.loader as loader

    loader.ignore_stop_signals = calls.append  # type: ignore[assignment]
    init(3)
    queue.put(calls)


def test_a_callers_worker_init_fn_runs_after_autotunes(capfd: pytest.CaptureFixture[str]) -> None:
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.queues.Queue[object] = ctx.Queue()
    child = ctx.Process(target=_as_worker, args=(queue,))
    child.start()
    calls = queue.get(timeout=20)
    child.join(10)
    assert child.exitcode == 0 and calls == [3]  # autotune's: stop signals left to the parent
    assert "user init 3" in capfd.readouterr().out
    no_workers = loader_kwargs(TrainConfig(micro_batch=2, seq_len=8), worker_init_fn=_record)
    assert no_workers["worker_init_fn"] is _record


def test_worker_init_leaves_stop_signals_to_the_main_process(tmp_path: Path) -> None:
    """In a real worker (SIGINT ignored there, as ``ignore_stop_signals`` does)."""
    script = textwrap.dedent(
        """
        import signal
        from torch.utils.data import DataLoader, get_worker_info
        from autotune.config.train_config import TrainConfig
        from autotune.data import loader_kwargs

        class Probe:
            def __len__(self): return 2
            def __getitem__(self, i):
                return int(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)

        cfg = TrainConfig(micro_batch=2, seq_len=8, num_workers=1)
        print(next(iter(DataLoader(Probe(), **loader_kwargs(cfg)))).tolist(), flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "[1, 1]", done.stderr
