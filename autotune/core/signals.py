"""Which signals stop a run, and how DataLoader workers leave them to the main process.

The trainer stops cleanly (after the step, with a checkpoint) on each of
:data:`STOP_SIGNALS`; the burst and the trainer's DataLoader workers run
:func:`ignore_stop_signals` (through ``data.loader_kwargs``), so a signal sent to the whole
process group reaches only the process that knows how to stop.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["STOP_SIGNALS", "ignore_stop_signals"]


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def ignore_stop_signals(_worker_id: int) -> None:
    """A DataLoader worker leaves Ctrl-C, SIGTERM and SIGHUP to the main process.

    ``timeout``, Slurm, systemd and a terminal send them to the whole process group. A
    worker that died of one made PyTorch raise "DataLoader worker is killed by signal" in
    the middle of a step, instead of the main process stopping cleanly after the step (and
    saving a checkpoint), then shutting its workers down. SIGINT and SIGHUP are ignored.
    SIGTERM is also what the main process's own clean-up sends its workers
    (``Process.terminate``), so a worker keeps obeying that one: its SIGTERM is taken by a
    thread that ends the worker when the parent sent it and ignores it otherwise. A
    worker still ends with its parent (PyTorch's watchdog) and with SIGKILL.
    """
    for sig in STOP_SIGNALS:
        if sig != signal.SIGTERM:
            signal.signal(sig, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):  # not on macOS: SIGTERM keeps its default
        return
    parent = os.getppid()
    # Blocked here, before any other thread exists, so every thread of the worker inherits
    # it and a SIGTERM waits for the watcher instead of ending the process.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def watch() -> None:
        while True:
            info = signal.sigwaitinfo({signal.SIGTERM})
            if info.si_pid == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="autotune-sigterm", daemon=True).start()
