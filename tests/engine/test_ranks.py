"""How a run of several processes ends: autotune's torchrun launcher (launcher.py) and
rank 0's steps the other ranks wait for (``rank_zero_first``).

Fast: torchrun's ``run`` and the collective are replaced here; the real two-process runs
are in tests/test_parallel.py (slow tier)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

import autotune.engine.distributed as distributed
from autotune.core.errors import PeerFailed, UsageError
from autotune.core.signals import StopSignal
from autotune.engine.distributed import DistInfo, rank_zero_first
from autotune.engine.launcher import launcher_command, main, run_ranks

TORCHRUN_ENV = ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT",)


def _torchrun_ends(monkeypatch: pytest.MonkeyPatch, error: BaseException | None) -> list[Any]:
    """torchrun's ``run`` replaced by one that records its arguments and environment,
    takes SIGTERM over as torchrun does, and raises ``error``."""
    calls: list[Any] = []
    for name in TORCHRUN_ENV:  # run_ranks sets them in os.environ: put back after the test
        monkeypatch.delenv(name, raising=False)

    def run(args: Any) -> None:
        calls.append((args, {name: os.environ.get(name) for name in TORCHRUN_ENV}))
        signal.signal(signal.SIGTERM, lambda *_: None)
        if error is not None:
            raise error

    monkeypatch.setattr(torchrun, "run", run)
    return calls


def _failure(tmp_path: Path, local_rank: int, exitcode: int) -> ProcessFailure:
    return ProcessFailure(local_rank, 1000 + local_rank, exitcode, str(tmp_path / "none.json"))


def test_the_ranks_run_with_the_commands_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _torchrun_ends(monkeypatch, None)
    module_args = ["autotune", "train", "--preset", "p.yaml"]
    assert run_ranks(2, module_args, log_dir=tmp_path / "torchrun") == 0
    ((args, env),) = calls
    assert args.standalone and args.nproc_per_node == "2" and args.module
    assert args.log_dir == str(tmp_path / "torchrun")
    assert [args.training_script, *args.training_script_args] == module_args
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "300"  # torchrun's 30 s: a checkpoint's


def test_torchrun_leaves_an_ignored_signal_ignored_and_its_handlers_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``nohup`` a hangup must not stop the run: torchrun took SIGHUP over even
    where it was ignored (and its ranks then died of it). What it installs is gone
    once it returns: a signal after that raised its ``SignalException``, a traceback."""
    calls = _torchrun_ends(monkeypatch, None)
    handlers = {  # as under nohup (whatever this test process was started with)
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGINT: signal.default_int_handler,
        signal.SIGHUP: signal.SIG_IGN,
        signal.SIGQUIT: signal.SIG_DFL,
    }
    outside = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        run_ranks(2, ["autotune", "train"], log_dir=tmp_path)
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    finally:
        for sig, handler in outside.items():
            signal.signal(sig, handler)
    ((args, _),) = calls
    assert args.signals_to_handle == "SIGTERM,SIGINT,SIGQUIT"


@pytest.mark.parametrize(
    ("sig", "raised"),
    [(signal.SIGTERM, StopSignal), (signal.SIGHUP, StopSignal), (signal.SIGINT, KeyboardInterrupt)],
)
def test_a_stop_signal_to_the_launcher_is_the_commands_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals, raised: type
) -> None:
    """torchrun passed it to the ranks (they stop with a checkpoint), then raised its own
    ``SignalException``: the CLI's stop (its message, 128 + the number), not a traceback."""
    _torchrun_ends(monkeypatch, SignalException(f"Process got signal: {sig}", sig))
    with pytest.raises(raised) as info:
        run_ranks(2, ["autotune", "train"], log_dir=tmp_path)
    if raised is StopSignal:
        assert info.value.signum == sig  # type: ignore[attr-defined]
    else:
        assert type(info.value) is KeyboardInterrupt  # Ctrl-C says "interrupted"


def test_failed_ranks_give_the_first_ones_code_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failures = {1: _failure(tmp_path, 1, 2), 0: _failure(tmp_path, 0, 1)}
    failures[0].timestamp = failures[1].timestamp + 1  # rank 1 failed first
    _torchrun_ends(monkeypatch, ChildFailedError("autotune", failures))
    assert run_ranks(2, ["autotune", "train"], log_dir=tmp_path) == 2
    err = capsys.readouterr().err
    assert err == "the run failed on 2 processes: rank 0 exited with 1; rank 1 exited with 2\n"


def test_a_rank_a_signal_ended_exits_as_a_signal_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failures = {0: _failure(tmp_path, 0, -signal.SIGKILL)}  # the kernel's out-of-memory killer
    _torchrun_ends(monkeypatch, ChildFailedError("autotune", failures))
    assert run_ranks(2, ["autotune", "train"], log_dir=tmp_path) == 128 + signal.SIGKILL
    assert "rank 0 was ended by SIGKILL" in capsys.readouterr().err


class _Collective:
    """``broadcast_object`` of a world of two, seen from one rank: rank 0's value is
    recorded; a rank other than 0 receives ``from_rank_zero``."""

    def __init__(self, from_rank_zero: Any = None) -> None:
        self.sent: list[Any] = []
        self.from_rank_zero = from_rank_zero

    def __call__(self, info: DistInfo, obj: Any) -> Any:
        if info.is_main:
            self.sent.append(obj)
            return obj
        return self.from_rank_zero


RANK0 = DistInfo(rank=0, world_size=2, backend="gloo")
RANK1 = DistInfo(rank=1, local_rank=1, world_size=2, backend="gloo")


def test_rank_zero_runs_the_step_and_tells_the_others_it_went_well(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collective = _Collective()
    monkeypatch.setattr(distributed, "broadcast_object", collective)
    assert rank_zero_first(RANK0, "to load the data", lambda: "data") == "data"
    assert collective.sent == [None]

    def not_on_rank_1() -> str:
        raise AssertionError("rank 1 ran rank 0's step")

    assert rank_zero_first(RANK1, "to load the data", not_on_rank_1) is None
    assert rank_zero_first(DistInfo(), "to load the data", lambda: "alone") == "alone"


@pytest.mark.parametrize(("error", "code"), [(UsageError("no such data"), 2), (OSError(28), 1)])
def test_a_failure_of_rank_zeros_step_ends_the_others_with_its_code(
    monkeypatch: pytest.MonkeyPatch, error: Exception, code: int
) -> None:
    """Without it, rank 1 waited at a barrier for a rank that had left: gloo's "Connection
    closed by peer" traceback under rank 0's one-paragraph error."""
    collective = _Collective()
    monkeypatch.setattr(distributed, "broadcast_object", collective)
    monkeypatch.setattr(distributed, "PEER_GRACE_S", 0.0)

    def fails() -> None:
        raise error

    with pytest.raises(type(error)):
        rank_zero_first(RANK0, "to load the data", fails)
    assert collective.sent == [code]
    monkeypatch.setattr(distributed, "broadcast_object", _Collective(from_rank_zero=code))
    with pytest.raises(PeerFailed, match=r"^rank 0 failed to load the data; its error") as info:
        rank_zero_first(RANK1, "to load the data", fails)
    assert info.value.exit_code == code


def test_the_launcher_says_what_stopped_it_and_exits_with_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``autotune train`` replaces itself by this program: its ends are the CLI's."""
    import autotune.engine.launcher as launcher

    command = launcher_command(2, ["autotune", "train", "--preset", "p.yaml"], log_dir=tmp_path)
    argv = command[command.index("autotune.engine.launcher") + 1 :]
    seen: list[Any] = []

    def ends(outcome: BaseException | int) -> None:
        def run_ranks(nproc: int, module_args: list[str], *, log_dir: Path) -> int:
            seen.append((nproc, module_args, log_dir))
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        monkeypatch.setattr(launcher, "run_ranks", run_ranks)

    ends(3)
    assert main(argv) == 3
    assert seen == [(2, ["autotune", "train", "--preset", "p.yaml"], tmp_path)]
    ends(StopSignal(signal.SIGTERM))
    assert main(argv) == 143
    assert capsys.readouterr().err == "stopped by SIGTERM\n"
    ends(KeyboardInterrupt())
    assert main(argv) == 130
    assert capsys.readouterr().err == "interrupted\n"
    ends(NotADirectoryError(20, "Not a directory", "run/torchrun"))
    assert main(argv) == 1
    assert capsys.readouterr().err == "error: Not a directory: run/torchrun\n"
    for bad in (
        ["--nproc-per-node", "2", "autotune", "train"],  # no "--"
        ["--nproc-per-node", "0", "--log-dir", "x", "--", "autotune", "train"],
        ["--nproc-per-node", "2", "--log-dir", "x", "--"],  # nothing to run
    ):
        assert main(bad) == 2, bad
        assert "usage: python -m autotune.engine.launcher" in capsys.readouterr().err
