"""``python -m autotune.engine.launcher``: torchrun's launcher, for ``autotune train`` of
a preset with ``parallel``, ending as the CLI's commands end.

``autotune train`` replaces itself by this program (``os.execv``, so that the process
that waits for the ranks all the run long keeps none of the command's imports, model code
or CUDA context), which runs ``torch.distributed.run``'s ``run`` in its own process
(``run_ranks``). Run as its own program, torchrun ended a stop or a failed rank in a
traceback of its own (``SignalException``; ``ChildFailedError`` and its table) and exit 1,
after the ranks had said what happened. Here:

- a stop signal goes to the ranks, which stop after their step with a checkpoint, and
  the launcher says "stopped by SIGTERM" (exit 128 + its number; Ctrl-C: "interrupted",
  130). A signal the launcher was started ignoring (``nohup``) stays ignored, by the
  ranks too, where torchrun took every one of its four over;
- a failed rank gives one line naming how each failed rank ended, and the exit code of
  the first (128 + the signal's number for one a signal ended).

The ranks wait up to ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds (300 here, where torchrun
gives them 30; torch 2.11 keeps its 30) to finish their step and checkpoint before
torchrun kills them. A second stop signal ends the launcher at once; each rank then gets
SIGTERM within a second of its launcher's end (``stop_when_orphaned``, which follows
``AUTOTUNE_LAUNCHER_PID``: a rank orphaned while it starts stops too), its second stop,
and ends at once too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from autotune.core.signals import StopSignal, how_stopped, stop_signals_raise

__all__ = ["launcher_command", "main", "run_ranks"]

MODULE = "autotune.engine.launcher"
PID_VAR = "AUTOTUNE_LAUNCHER_PID"  # the launcher's process id, for its ranks to follow
SHUTDOWN_TIMEOUT_S = 300
_TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # what torchrun takes over


def launcher_command(nproc_per_node: int, module_args: list[str], *, log_dir: Path) -> list[str]:
    """The command that runs ``python -m <module_args>`` on ``nproc_per_node`` processes
    of this machine through this launcher (torchrun's folder in ``log_dir``)."""
    nproc = ["--nproc-per-node", str(nproc_per_node)]
    return [sys.executable, "-m", MODULE, *nproc, "--log-dir", str(log_dir), "--", *module_args]


def run_ranks(nproc_per_node: int, module_args: list[str], *, log_dir: Path) -> int:
    """Run ``torchrun_command``'s job with torchrun's launcher in this process: 0 when
    every rank succeeded, else the exit code of the first failed rank torchrun saw (128
    + the signal's number for one a signal ended), after one line saying how each failed
    rank ended. A stop signal raises ``StopSignal`` once torchrun has stopped the ranks
    (SIGINT: ``KeyboardInterrupt``). The signal handlers torchrun installs are put back
    as they were when it returns."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from autotune.engine.distributed import torchrun_args

    sigs = [getattr(signal, name) for name in _TORCHRUN_SIGNALS if hasattr(signal, name)]
    previous = {sig: signal.getsignal(sig) for sig in sigs}
    taken = [sig.name for sig, handler in previous.items() if handler is not signal.SIG_IGN]
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))
    os.environ[PID_VAR] = str(os.getpid())  # a rank orphaned while it starts stops too
    ours = ["--signals-to-handle", ",".join(taken)] if taken else []
    args = torchrun.parse_args([*ours, *torchrun_args(nproc_per_node, module_args, log_dir)])
    try:
        torchrun.run(args)
    except SignalException as exc:
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise StopSignal(exc.sigval) from None
    except ChildFailedError as exc:
        ended = [_ended(rank, failure.exitcode) for rank, failure in sorted(exc.failures.items())]
        print(f"the run failed on {nproc_per_node} processes: {'; '.join(ended)}", file=sys.stderr)
        code = exc.get_first_failure()[1].exitcode  # by whole seconds, then by rank
        return 128 - code if code < 0 else code
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: not installed from Python; left as torchrun set it
                signal.signal(sig, handler)
    return 0


def _ended(rank: int, exitcode: int) -> str:
    """How a rank ended, from its exit code (a negative one: the signal that ended it)."""
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"rank {rank} was ended by {signal.Signals(-exitcode).name}"
        return f"rank {rank} was ended by signal {-exitcode}"
    return f"rank {rank} exited with {exitcode}"


def main(argv: list[str] | None = None) -> int:
    """``--nproc-per-node N --log-dir D -- MODULE ARGS...`` (``launcher_command``'s)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        split = args.index("--")
        options = dict(zip(args[:split:2], args[1:split:2], strict=True))
        nproc, log_dir = int(options["--nproc-per-node"]), Path(options["--log-dir"])
        if nproc < 1 or split == len(args) - 1:
            raise ValueError(nproc)
    except (ValueError, KeyError):
        usage = f"usage: python -m {MODULE} --nproc-per-node N --log-dir DIR -- MODULE ARGS..."
        print(usage, file=sys.stderr)
        return 2
    try:
        with stop_signals_raise():  # one that comes before torchrun takes them over
            return run_ranks(nproc, args[split + 1 :], log_dir=log_dir)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM or SIGHUP (StopSignal)
        code, said = how_stopped(stop)
        print(said, file=sys.stderr)
        return code
    except OSError as exc:  # torchrun's folder, most often (``train`` makes it first)
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
