"""The CLI's error boundary covers the process's surroundings, for every command alike
(autotune.cli._common.cli_command): a full, closed or abandoned standard output, an
encoding that cannot print a name, a working folder that was deleted. Each is one
paragraph on stderr and the right exit code, never a traceback.

The commands run here, in this process, with real streams put in place of the standard
output (a test's runner would replace them with its own); two slow tests run the console
entry in a fresh process, where the interpreter's own handling of the streams at start
and at exit takes part."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
from child_signals import interactive
from fake_presets import make_preset
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.preset import save_preset

AUTOTUNE = [sys.executable, "-m", "autotune"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the working folder, with no user presets."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path


def invoke(
    args: list[str], stdout: IO[str] | None, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """Run ``autotune ARGS`` here with ``stdout`` as the standard output (None: closed):
    its exit code and what it wrote on stderr."""
    capsys.readouterr()
    before, sys.stdout = sys.stdout, stdout  # type: ignore[assignment]
    try:
        code: Any = app(args, prog_name="autotune", standalone_mode=False)
    finally:
        sys.stdout = before
    return int(code or 0), capsys.readouterr().err


def test_a_full_stdout_is_one_paragraph_and_exit_1(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``presets show > /dev/full`` ended in an OSError traceback."""
    with open("/dev/full", "w", encoding="utf-8") as full:
        code, err = invoke(["presets", "show", "cpu/mu"], full, capsys)
    assert code == 1, err
    assert err.strip() == "error: cannot write to standard output: No space left on device"


def test_a_closed_stdout_is_an_error_not_a_silent_success(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``presets show >&-`` (Python's ``sys.stdout`` is then None) printed nothing and
    exited 0."""
    for args in (["presets", "show", "cpu/mu"], ["presets", "show", "cpu/mu", "--json"]):
        code, err = invoke(args, None, capsys)
        assert code == 1, err
        assert err.startswith("error: cannot write to standard output: it is closed")
    assert sys.stdout is not None  # as it was


def test_a_reader_that_leaves_ends_the_command_quietly(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``presets list | head -1``: the reader goes away; the command ends as a SIGPIPE
    would end it (141), with no traceback and no second message."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as pipe:
        code, err = invoke(["presets", "list"], pipe, capsys)
    assert (code, err) == (141, "")


def test_a_name_the_encoding_cannot_print_is_printed_as_show_prints_it(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``PYTHONIOENCODING=ascii presets diff`` with a non-ASCII preset name ended in a
    UnicodeEncodeError; ``presets show`` printed it (click's rule: UTF-8 where the stream
    says ASCII). Every command now prints it the same way; an encoding that is not ASCII
    and lacks a character gets a replacement character."""
    save_preset(make_preset(name="tést-ünïcode"), here / "a.yaml")
    save_preset(make_preset(name="plain-名前"), here / "b.yaml")
    for args in (["presets", "diff", "a.yaml", "b.yaml"], ["presets", "show", "a.yaml"]):
        raw = io.BytesIO()
        ascii_out = io.TextIOWrapper(raw, encoding="ascii")
        code, err = invoke(args, ascii_out, capsys)
        assert code == 0, err
        ascii_out.flush()
        assert "tést-ünïcode".encode() in raw.getvalue()
        assert ascii_out.encoding == "ascii"  # as it was
    raw = io.BytesIO()
    latin = io.TextIOWrapper(raw, encoding="latin-1")
    code, err = invoke(["presets", "show", "b.yaml"], latin, capsys)
    latin.flush()
    assert code == 0, err
    assert b"plain-??" in raw.getvalue()


def test_a_deleted_working_folder_is_one_paragraph_and_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``presets list`` in a folder deleted under the shell ended in FileNotFoundError."""
    gone = here / "gone"
    gone.mkdir()
    os.chdir(gone)
    gone.rmdir()
    code, err = invoke(["presets", "list"], io.StringIO(), capsys)
    os.chdir(here)
    assert code == 2, err
    assert err.startswith("error: the working folder cannot be used (No such file or directory)")
    assert "cd into a folder that exists" in err


def test_a_full_disk_or_our_error_under_another_is_one_paragraph(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal study's write on a full disk became Optuna's ``AssertionError: Should
    not reach.`` and a 90-line traceback; the full disk under it is what is said."""
    from autotune.cli import presets as presets_cli

    def optuna_like(*_: object, **__: object) -> None:
        try:
            try:
                raise OSError(28, "No space left on device")  # the flush: no file name
            except OSError as flush:
                raise OSError(28, "No space left on device", "study.log") from flush
        except OSError:  # as Optuna's _run_trial does: the context kept
            raise AssertionError("Should not reach.")  # noqa: B904

    monkeypatch.setattr(presets_cli, "_load", optuna_like)
    code, err = invoke(["presets", "show", "cpu/mu"], io.StringIO(), capsys)
    assert code == 1, err
    assert err.strip() == (
        "error: cannot use 'study.log': No space left on device; the disk is full: free "
        "some space, or give a path on another disk"
    )

    def damaged_under_a_write(*_: object, **__: object) -> None:
        from autotune.core.errors import UsageError

        try:
            raise UsageError("the study storage 'sqlite:///s.db': 's.db' is damaged")
        except UsageError:
            raise AssertionError("Should not reach.")  # noqa: B904

    monkeypatch.setattr(presets_cli, "_load", damaged_under_a_write)
    code, err = invoke(["presets", "show", "cpu/mu"], io.StringIO(), capsys)
    assert (code, err.strip()) == (
        2,
        "error: the study storage 'sqlite:///s.db': 's.db' is damaged",
    )

    def a_bug(*_: object, **__: object) -> None:
        raise AssertionError("a bug of ours")

    def a_bug_after_a_refusal_caught_on_purpose(*_: object, **__: object) -> None:
        from autotune.core.errors import PresetError

        try:
            raise PresetError([], context="no preset 'x'")
        except PresetError:
            raise KeyError("a bug of ours") from None

    def ends_while_handling_a_refusal(*_: object, **__: object) -> None:
        import typer

        from autotune.core.errors import UsageError

        try:
            raise UsageError("a refusal handled on the way out")
        except UsageError:
            raise typer.Exit(130)  # noqa: B904 (typer.Exit is a RuntimeError)

    monkeypatch.setattr(presets_cli, "_load", ends_while_handling_a_refusal)
    code, err = invoke(["presets", "show", "cpu/mu"], io.StringIO(), capsys)
    assert (code, err) == (130, "")

    for bug in (a_bug, a_bug_after_a_refusal_caught_on_purpose):
        monkeypatch.setattr(presets_cli, "_load", bug)
        with pytest.raises((AssertionError, KeyError), match="a bug of ours"):  # not hidden
            invoke(["presets", "show", "cpu/mu"], io.StringIO(), capsys)


def test_export_to_a_missing_folder_with_a_slash_writes_no_file_named_like_it(
    here: Path,
) -> None:
    """``presets export --output newdir/`` wrote a file named ``newdir``. Refused, as
    ``cp file newdir/`` refuses: a trailing slash names a folder, and which file to make in
    it is the user's to say (a folder that exists is refused as before)."""
    save_preset(make_preset(), here / "p.yaml")
    result = CliRunner().invoke(app, ["presets", "export", "p.yaml", "--output", "newdir/"])
    assert result.exit_code == 2, result.output
    assert "--output 'newdir/' ends with '/', so it names a folder" in result.stderr
    assert not (here / "newdir").exists()


# -- in a fresh process --------------------------------------------------------------------


@pytest.mark.slow  # starts the console entry twice (about a second each)
def test_a_full_or_closed_stdout_in_a_fresh_process(tmp_path: Path) -> None:
    """The real entry: the message, the exit code, and nothing more at the interpreter's
    exit (no "Exception ignored" for the output still buffered)."""
    env = {**os.environ, "AUTOTUNE_CONFIG_DIR": str(tmp_path / "config")}
    show = [*AUTOTUNE, "presets", "show", "cpu/mu"]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            show, env=env, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, timeout=120
        )
    assert done.returncode == 1
    assert done.stderr.decode().strip() == (
        "error: cannot write to standard output: No space left on device"
    )
    sh = shutil.which("sh")
    assert sh is not None
    closed = subprocess.run(
        [sh, "-c", 'exec "$@" >&-', "sh", *show],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    assert closed.returncode == 1
    assert closed.stderr.decode().startswith("error: cannot write to standard output: it is")


def test_a_stop_signal_out_of_a_command_is_its_exit_code_not_a_traceback() -> None:
    """A second SIGTERM stops a training step at once (train/stop.py): the boundary
    exits 128 + its number, as the first one's clean stop does."""
    import signal

    import typer

    from autotune.cli._common import cli_command
    from autotune.core.signals import StopSignal

    tiny = typer.Typer()

    @tiny.command()
    @cli_command
    def hang() -> None:
        raise StopSignal(signal.SIGTERM)

    result = CliRunner().invoke(tiny, [])
    assert result.exit_code == 143 and "stopped by SIGTERM" in result.output
    assert "Traceback" not in result.output


_SLOW_IMPORTS = """
import runpy, sys, time

class Slow:  # the CLI's modules take their time: a Ctrl-C lands while they are imported
    def find_spec(self, name, path=None, target=None):
        if name == "autotune.cli.main":
            print("importing", flush=True)
            time.sleep(30)
        return None

sys.meta_path.insert(0, Slow())
sys.argv = ["autotune", "train", "--help"]
runpy.run_module("autotune", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("a_rank", [False, True], ids=["a-command", "a-rank-of-the-launcher"])
def test_ctrl_c_during_the_imports_of_python_m_autotune(a_rank: bool) -> None:
    """A command says "interrupted" (130), not a traceback from the imports. A rank of a
    multi-process train (``python -m autotune`` under autotune's launcher, which passes a
    Ctrl-C on) ends at once and says nothing, as SIGTERM ends it: every rank printed a
    traceback, or waited in ``init_process_group`` for a rank already gone."""
    from autotune.engine.launcher import PID_VAR

    env = {k: v for k, v in os.environ.items() if k != PID_VAR}
    if a_rank:
        env[PID_VAR] = str(os.getpid())
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_IMPORTS], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=interactive,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "importing\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    if a_rank:
        assert (proc.returncode, err) == (-signal.SIGINT, "")
    else:
        assert (proc.returncode, err) == (130, "interrupted\n")


def test_a_rank_started_with_ctrl_c_ignored_keeps_it_ignored() -> None:
    """A shell without job control starts ``cmd &`` with SIGINT ignored, and so are the
    ranks of its launcher: the trainer then leaves SIGINT alone, as it leaves ``nohup``'s
    SIGHUP."""
    from autotune.engine.launcher import PID_VAR

    script = (
        "import runpy, signal, sys\nsys.argv = ['autotune', '--version']\n"
        "try:\n    runpy.run_module('autotune', run_name='__main__', alter_sys=True)\n"
        "finally:\n    print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, PID_VAR: str(os.getpid())},
        capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert proc.stdout.splitlines()[-1] == "True", proc.stdout + proc.stderr
