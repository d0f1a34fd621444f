"""A process that joined a torchrun process group ends without the interpreter's teardown
(``end_rank``): a gloo worker thread that drops a collective's work during the teardown
aborted finished runs with SIGABRT."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist

from autotune.cli import main as cli_main
from autotune.core.signals import StopSignal
from autotune.engine import distributed


class Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _exit(code: int) -> None:
    raise Exited(code)


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed.os, "_exit", _exit)


@pytest.mark.parametrize(
    ("outcome", "code"),
    [(None, 0), (SystemExit(0), 0), (SystemExit(None), 0), (SystemExit(3), 3),
     (KeyboardInterrupt(), 130), (StopSignal(signal.SIGTERM), 143),
     (StopSignal(signal.SIGHUP), 129)],
)  # fmt: skip
def test_a_rank_ends_with_its_outcomes_exit_status(
    exits: None, outcome: BaseException | None, code: int
) -> None:
    with pytest.raises(Exited) as ended:
        distributed.end_rank(outcome)
    assert ended.value.code == code


def test_a_message_exit_is_printed_and_ends_with_1(
    exits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(Exited) as ended:
        distributed.end_rank(SystemExit("no such preset"))
    assert ended.value.code == 1
    assert "no such preset" in capsys.readouterr().err


def test_an_exception_shows_its_traceback_and_ends_with_1(
    exits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        raise RuntimeError("boom in rank 1")
    except RuntimeError as exc:
        error = exc
    with pytest.raises(Exited) as ended:
        distributed.end_rank(error)
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom in rank 1" in err


@pytest.mark.parametrize("outcome", [SystemExit(2), SystemExit("gone"), RuntimeError("x")])
def test_a_rank_ends_with_its_status_whatever_the_streams_do(
    exits: None, monkeypatch: pytest.MonkeyPatch, outcome: BaseException
) -> None:
    """A closed stdout (``>&-``: None) and a stderr whose writes fail: the flush raised
    before, the exception escaped, and the process went through the teardown with 1."""

    class Broken:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", Broken())
    with pytest.raises(Exited) as ended:
        distributed.end_rank(outcome)
    assert ended.value.code == (2 if outcome.args == (2,) else 1)


def test_joining_a_group_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "_joined", [])
    joined: list[str] = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **_: joined.append(backend))
    monkeypatch.setattr(dist, "is_initialized", lambda: bool(joined))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    distributed.init_distributed("cpu")  # a world of one joins nothing
    assert not distributed.joined_a_group()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    info, device = distributed.init_distributed("cpu")
    assert (info.rank, info.world_size, device, joined) == (1, 2, "cpu", ["gloo"])
    assert distributed.joined_a_group()


def test_the_cli_of_a_rank_ends_through_end_rank(
    exits: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["autotune", "--version"])
    monkeypatch.setattr(distributed, "_joined", ["gloo"])
    with pytest.raises(Exited) as ended:
        cli_main.main()
    assert ended.value.code == 0
    assert "autotune " in capsys.readouterr().out
    monkeypatch.setattr(distributed, "_joined", [])  # not a rank: the app's own SystemExit
    with pytest.raises(SystemExit):
        cli_main.main()


def test_a_rank_skips_the_teardown_and_keeps_its_output() -> None:
    """For real: no atexit handler runs (the teardown is skipped), the printed lines
    arrive (flushed first), and the exit status is the command's."""
    code = textwrap.dedent(
        """
        import atexit, sys
        from autotune.cli.main import main
        from autotune.engine import distributed
        atexit.register(lambda: print("TEARDOWN RAN", flush=True))
        distributed._joined.append("gloo")
        sys.argv = ["autotune", "models", "show", "no-such-model"]
        print("before", end="")  # unflushed, as output a rank leaves in its buffer
        main()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("before"), proc.stdout + proc.stderr
    assert "TEARDOWN RAN" not in proc.stdout
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no-such-model" in proc.stderr
