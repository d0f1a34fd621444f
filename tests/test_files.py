"""autotune.core.files: the one atomic writer every saved file goes through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autotune.core.errors import UsageError
from autotune.core.files import atomic_write_text, atomic_writer, file_mode


def _strays(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_writes_text_and_creates_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "out.txt"
    atomic_write_text(target, "héllo\n")
    assert target.read_text(encoding="utf-8") == "héllo\n"
    assert stat.S_IMODE(target.stat().st_mode) == file_mode()
    assert _strays(target.parent) == []


def test_binary_mode(tmp_path: Path) -> None:
    target = tmp_path / "blob.bin"
    with atomic_writer(target, binary=True) as handle:
        handle.write(b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"


def test_failure_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert _strays(tmp_path) == []


def test_existing_mode_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "ro.txt"
    target.write_text("old")
    os.chmod(target, 0o600)
    atomic_write_text(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text() == "new"


def test_no_overwrite_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "exists.txt"
    target.write_text("theirs")
    with pytest.raises(FileExistsError):
        atomic_write_text(target, "mine", overwrite=False)
    assert target.read_text() == "theirs"
    assert _strays(tmp_path) == []
    fresh = tmp_path / "fresh.txt"
    atomic_write_text(fresh, "mine", overwrite=False)
    assert fresh.read_text() == "mine"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a device"])
def test_an_output_that_is_no_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to("/dev/null")
    before = os.lstat(target)
    with pytest.raises(UsageError, match="regular files"):
        atomic_write_text(target, "x")
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left


def test_a_device_node_is_not_replaced(tmp_path: Path) -> None:
    """What ``--output /dev/full --overwrite`` did: the device node renamed away (made here,
    in a temporary folder, as a copy of /dev/null's numbers)."""
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    with pytest.raises(UsageError, match="character device"):
        atomic_write_text(node, "x")
    assert node.is_char_device()


def test_an_output_replaces_only_an_empty_file_or_one_of_its_own(tmp_path: Path) -> None:
    from autotune.core.files import not_ours_problem

    def ours(path: Path) -> bool:
        return path.read_text().startswith("ours")

    def problem(path: Path) -> str | None:
        return not_ours_problem(path, ours, what="a thing of ours", by="the writer")

    (empty := tmp_path / "empty").touch()
    (mine := tmp_path / "mine").write_text("ours: v1")
    (theirs := tmp_path / "theirs").write_text("notes")
    assert problem(tmp_path / "missing") is None and problem(empty) is None
    assert problem(mine) is None and problem(tmp_path) is None  # a folder: not this rule's
    assert problem(theirs) == (
        "exists and is not a thing of ours, which the writer would replace; give another "
        "path, or move that file away first"
    )


def test_an_output_path_problem_names_what_stands_in_the_way(tmp_path: Path) -> None:
    # one rule for the search's --output, presets export's --output and bench --trace:
    # export said "already exists" of best.yaml/x, the trace "the folder does not exist"
    from autotune.core.files import output_problem

    (tmp_path / "best.yaml").write_text("kept\n")
    under_a_file = str(tmp_path / "best.yaml" / "x")
    assert f"{str(tmp_path / 'best.yaml')!r} is not a folder" in (
        output_problem(under_a_file, example="a.json") or ""
    )
    assert output_problem(tmp_path, example="a.json") == (
        f"{str(tmp_path)!r} is a directory; give a file such as a.json"
    )
    assert "ends with '/'" in (output_problem(f"{tmp_path}/new/", example="a.json") or "")
    missing = str(tmp_path / "new" / "a.json")
    assert output_problem(missing, example="a.json") is None  # the folder is made
    assert "does not exist" in (output_problem(missing, example="a", make_folders=False) or "")
    assert output_problem(tmp_path / "best.yaml", example="a.json") is None  # the caller's
    assert (tmp_path / "best.yaml").read_text() == "kept\n"
