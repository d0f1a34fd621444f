"""The one rule for a user's path (autotune.core.files), through every reader: a preset
(load_preset, report, presets show/diff/export, train --preset, --warm-start, PresetLoop),
a journal or SQLite storage, a model file, data, a checkpoint, a tokenizer, the run
folder's side files. A FIFO, a device, a folder, a socket, a link to one of them or a
dangling link is refused at once with a one-paragraph error naming what it is: never read
without end (/dev/zero grew a report to 6 GB), never waited on (a FIFO hung it)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_presets import make_preset

from autotune.core import files
from autotune.core.errors import (
    CheckpointError,
    DataError,
    ModelLoadError,
    PresetError,
    UsageError,
)
from autotune.core.files import read_capped
from autotune.data.corpus import load_documents
from autotune.data.tokenizer import load_tokenizer
from autotune.engine.distributed import DistInfo
from autotune.models.registry import load_model
from autotune.preset import load_preset, resolve_preset, save_preset
from autotune.report.data import load_report_data
from autotune.study.storage.optuna_glue import check_storage_url, open_storage
from autotune.train.checkpoint import load_checkpoint
from autotune.train.log import Display
from autotune.train.run_folder import LOCK_FILE, RunFolder

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX special files")


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """What a path can be instead of a regular file, by the words a refusal uses."""
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "folder.yaml").mkdir()
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.yaml"))
    yield {
        "a named pipe (FIFO)": tmp_path / "fifo.yaml",
        "a character device": Path("/dev/zero"),
        "a symbolic link to '/dev/zero', a character device": tmp_path / "zero.yaml",
        "a directory": tmp_path / "folder.yaml",
        "which does not exist": tmp_path / "dangling.yaml",
        "a loop of symbolic links": tmp_path / "loop.yaml",
        "a socket": tmp_path / "sock.yaml",
    }
    sock.close()


def _within(seconds: float, read: Callable[[], Any], fifos: list[Path]) -> BaseException | None:
    """What ``read()`` raised (None: nothing); a failure where it is still running after
    ``seconds`` (a FIFO waited on: it is then given an end, so the thread finishes)."""
    caught: list[BaseException | None] = [None]

    def run() -> None:
        try:
            read()
        except BaseException as exc:
            caught[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:  # a writer that closes at once: the reader sees the end
            for _ in range(50):
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"still reading after {seconds} s: it waited on a FIFO or read without end")
    return caught[0]


def _model_file(path: Path) -> Any:
    return load_model(f"{path}:spec")


# reader -> (how it reads a path, the error it raises, the kinds it may take: a folder of
# text files is data)
READERS: dict[str, tuple[Callable[[Path], Any], type[Exception], tuple[str, ...]]] = {
    "load_preset": (load_preset, PresetError, ()),
    "presets show / train --preset / --warm-start / PresetLoop": (
        lambda p: load_preset(resolve_preset(str(p))),
        PresetError,
        (),
    ),
    "report": (load_report_data, PresetError, ()),
    "journal storage": (lambda p: check_storage_url(f"journal:{p}"), UsageError, ()),
    "journal storage, read": (
        lambda p: open_storage(f"journal:{p}", create=False),
        UsageError,
        (),
    ),
    "sqlite storage": (lambda p: check_storage_url(f"sqlite:///{p}"), UsageError, ()),
    "model file": (_model_file, ModelLoadError, ()),
    "data": (load_documents, DataError, ("a directory",)),
    "checkpoint": (load_checkpoint, CheckpointError, ()),
    "tokenizer": (load_tokenizer, DataError, ()),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_what_is_no_regular_file_by_name(
    reader: str, specials: dict[str, Path]
) -> None:
    read, error, takes = READERS[reader]
    fifos = [p for p in specials.values() if p.name.startswith("fifo")]
    for kind, path in specials.items():
        if kind in takes:
            continue
        caught = _within(5, lambda path=path: read(path), fifos)  # type: ignore[misc]
        assert isinstance(caught, error), f"{reader}, {kind}: {caught!r}"
        message = str(caught)
        assert kind in message and str(path) in message, f"{reader}: {message}"
        assert "\n" not in message.strip() and "Traceback" not in message


def test_a_path_swapped_after_its_check_is_checked_again_on_the_open_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regular file when looked at, a FIFO when opened: the open descriptor's fstat
    refuses it (opened without waiting for a writer)."""
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    monkeypatch.setattr(files, "_look", lambda path: (None, regular))
    caught = _within(5, lambda: read_capped(fifo, limit=2**20, what="preset file"), [fifo])
    assert isinstance(caught, UsageError)
    assert "is a named pipe (FIFO) (it changed after it was checked)" in str(caught)


def test_a_preset_larger_than_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "p.yaml")
    monkeypatch.setattr("autotune.preset.io._MAX_FILE_BYTES", 100)

    def never(path: object) -> int:
        raise AssertionError("opened a file its size had refused")

    monkeypatch.setattr(files, "_open_for_reading", never)
    with pytest.raises(PresetError, match=r"larger than 100 B.*a preset is a few KB of YAML"):
        load_preset(path)


def test_a_model_file_that_is_a_device_is_named_not_called_missing() -> None:
    """``--model /dev/zero:spec`` was "does not exist"."""
    with pytest.raises(ModelLoadError) as info:
        load_model("/dev/zero:spec")
    assert "model file '/dev/zero' is a character device" in str(info.value)
    assert "does not exist" not in str(info.value)


# -- the run folder's side files (train --resume auto) -------------------------------------


def _folder(path: Path) -> RunFolder:
    return RunFolder(path, dist=DistInfo(), keep_last=1, message=print)


# best.pt and a checkpoint's name: a folder there was found at the first save, after up to
# checkpoint_interval steps (200) of training lost
@pytest.mark.parametrize(
    "name", [LOCK_FILE, "metrics.jsonl", ".autotune.lock.json", "best.pt", "ckpt-step00000001.pt"]
)
@pytest.mark.parametrize("kind", ["a directory", "a named pipe (FIFO)"])
def test_a_run_folder_side_file_that_is_no_file_is_refused_before_the_run(
    tmp_path: Path, name: str, kind: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    side = run / name
    if kind == "a directory":
        side.mkdir()
    else:
        os.mkfifo(side)

    def take() -> None:
        with _folder(run).locked():
            pass

    caught = _within(5, take, [side])
    assert isinstance(caught, UsageError), repr(caught)
    assert f"file {str(side)!r} is {kind}" in str(caught)
    assert "train into a new folder with out_dir" in str(caught)  # the option's name
    assert stat.S_IFMT(os.lstat(side).st_mode) == (
        stat.S_IFDIR if kind == "a directory" else stat.S_IFIFO
    )  # left as it was


def test_a_damaged_metrics_line_is_dropped_on_resume(tmp_path: Path) -> None:
    """A non-UTF-8 byte, a line that is no object, a step that is no number: each line is
    left out as a truncated one is, and the run goes on (it was a UnicodeDecodeError)."""
    metrics = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2, 3)]
    metrics.write_bytes(
        (good[0] + "\n").encode()
        + b'{"step": 2, "loss": "\xff"}\n'
        + b"[1, 2]\n5\n"
        + b'{"step": "x"}\n'
        + (good[1] + "\n" + good[2] + "\n").encode()
        + b'{"step": 4, "lo'
    )
    display = Display(
        tmp_path, enabled=True, json_logs=False, progress=False, echo=None, tensorboard=False
    )
    display.open_metrics(truncate_after=2)
    display.close()
    assert metrics.read_text().splitlines() == good[:2]
