"""Checkpoints: atomic writes, keep-last-K and best, weights_only loading, RNG states."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.train.checkpoint import (
    BEST_NAME,
    CheckpointError,
    capture_rng_state,
    checkpoint_path,
    clean_stale,
    find_resumable,
    link_best,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    restore_rng_state,
    save_checkpoint,
)


def state(step: int, **parts: object) -> dict[str, object]:
    """A whole checkpoint's parts (as checkpoint_state writes them), its weights ``step``."""
    return {
        "format": 1,
        "step": step,
        "model": {"w": torch.full((4,), float(step))},
        "optimizer": {"state": {}, "param_groups": []},
        "scheduler": {},
        "stepper": {},
        "rng": [capture_rng_state()],
        "data": {"epoch": 0, "offset": 0},
        "config": {"a": 1},
        **parts,
    }


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = checkpoint_path(tmp_path, 7)
    assert path.name == "ckpt-step00000007.pt"
    size = save_checkpoint(state(7), path)
    assert size == path.stat().st_size > 0
    loaded = load_checkpoint(path)
    assert loaded["step"] == 7 and torch.equal(loaded["model"]["w"], torch.full((4,), 7.0))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_write_leaves_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_checkpoint(state(1), checkpoint_path(tmp_path, 1))

    def half_then_die(obj: object, f: object) -> None:
        f.write(b"PK\x03\x04 partial data")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", half_then_die)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(state(2), checkpoint_path(tmp_path, 2))
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was removed
    found = find_resumable(tmp_path)
    assert found is not None and found[1]["step"] == 1


class _FullDisk:
    """A file that takes a few bytes, then fails as a full disk does (ENOSPC)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.written = inner, 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > 64:
            raise OSError(28, "No space left on device")
        self.written += len(data)
        return self.inner.write(data)  # type: ignore[attr-defined,no-any-return]

    def flush(self) -> None:
        self.inner.flush()  # type: ignore[attr-defined]


def test_a_full_disk_under_the_real_torch_save_is_an_oserror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's zip writer reports ENOSPC as a RuntimeError ("unexpected pos"): the caller
    (RunFolder._write) turns only an OSError into its "free some space" message."""
    save_checkpoint(state(1), checkpoint_path(tmp_path, 1))
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: real_save(obj, _FullDisk(f)))
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(state(2), checkpoint_path(tmp_path, 2))
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert not list(tmp_path.glob(".*.tmp"))


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time, torch
    from pathlib import Path
    from autotune.train.checkpoint import capture_rng_state, checkpoint_path, save_checkpoint

    folder = Path(sys.argv[1])
    whole = {"optimizer": {"state": {}, "param_groups": []}, "scheduler": {}, "stepper": {},
             "rng": [capture_rng_state()], "data": {"epoch": 0, "offset": 0}, "config": {}}
    save_checkpoint({"step": 1, "model": {"w": torch.ones(3)}, **whole},
                    checkpoint_path(folder, 1))
    real_save = torch.save

    def slow_save(obj, f):
        f.write(b"\\0" * (1 << 20))  # a megabyte of a big checkpoint, then the kill
        f.flush()
        (folder / "writing").touch()
        time.sleep(60)

    torch.save = slow_save
    save_checkpoint({"step": 2, "model": {"w": torch.zeros(3)}}, checkpoint_path(folder, 2))
    """
)


def test_a_process_killed_mid_write_leaves_the_previous_checkpoint_loadable(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "writing").exists():
            assert proc.poll() is None, "the writer died before writing"
            assert time.monotonic() < deadline, "the writer never started writing"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]  # no half step-2 file
    stale = list(tmp_path.glob(".ckpt-step00000002.pt.*.tmp"))
    assert len(stale) == 1 and stale[0].stat().st_size >= 1 << 20
    found = find_resumable(tmp_path)
    assert found is not None and found[0].name == "ckpt-step00000001.pt"
    assert torch.equal(found[1]["model"]["w"], torch.ones(3))
    assert clean_stale(tmp_path) == stale and not stale[0].exists()


def test_find_resumable_skips_a_damaged_newest_file(tmp_path: Path) -> None:
    save_checkpoint(state(1), checkpoint_path(tmp_path, 1))
    checkpoint_path(tmp_path, 2).write_bytes(b"garbage")
    warnings: list[str] = []
    found = find_resumable(tmp_path, warn=warnings.append)
    assert found is not None and found[1]["step"] == 1
    assert warnings and "ckpt-step00000002.pt" in warnings[0]
    with pytest.raises(CheckpointError, match="damaged or not an autotune checkpoint"):
        load_checkpoint(checkpoint_path(tmp_path, 2))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    # a preset given to --resume: torch's own reason, not its plea to file an issue
    wrong = tmp_path / "best.yaml"
    wrong.write_text("name: x\n")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(wrong)
    assert "(UnpicklingError: Unsupported operand" in str(info.value)
    assert "file an issue" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_checkpoint_with_weights_that_are_not_finite_is_named_as_broken(
    tmp_path: Path, bad: float
) -> None:
    """A run never saves a diverged model: NaN weights are a damaged file, named as such
    (resuming from it once ended in advice to lower the learning rate)."""
    save_checkpoint(state(1), checkpoint_path(tmp_path, 1))
    broken = state(2)
    broken["model"] = {"w": torch.tensor([1.0, bad]), "steps": torch.tensor([3])}
    save_checkpoint(broken, checkpoint_path(tmp_path, 2))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(checkpoint_path(tmp_path, 2))
    text = str(info.value)
    assert "ckpt-step00000002.pt" in text and "weights are not finite" in text, text
    assert "'w'" not in text and "w holds NaN or infinity" in text, text
    assert "lr" not in text, text
    warnings: list[str] = []  # --resume auto: the earlier checkpoint, the broken one named
    found = find_resumable(tmp_path, warn=warnings.append)
    assert found is not None and found[1]["step"] == 1
    assert "ckpt-step00000002.pt" in warnings[0] and "not finite" in warnings[0], warnings
    assert load_checkpoint(checkpoint_path(tmp_path, 2), mmap=True)["step"] == 2  # a look


def test_loading_refuses_pickled_objects(tmp_path: Path) -> None:
    """weights_only: a checkpoint that would construct arbitrary objects is refused."""
    path = tmp_path / "evil.pt"
    torch.save({"step": 1, "model": {}, "obj": Path("x")}, path)
    with pytest.raises(CheckpointError, match="cannot load"):
        load_checkpoint(path)


def test_keep_last_k_and_best(tmp_path: Path) -> None:
    for step in range(1, 6):
        save_checkpoint(state(step), checkpoint_path(tmp_path, step))
        if step == 2:
            link_best(checkpoint_path(tmp_path, step))
        prune_checkpoints(tmp_path, keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 5]
    best = load_checkpoint(tmp_path / BEST_NAME)  # outlives its pruned step file
    assert best["step"] == 2


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    save_checkpoint(state(0, rng=[capture_rng_state()]), tmp_path / "r.pt")
    expected = (random.random(), random.gauss(0, 1), np.random.rand(), torch.rand(3))
    restore_rng_state(load_checkpoint(tmp_path / "r.pt")["rng"][0])
    got = (random.random(), random.gauss(0, 1), np.random.rand(), torch.rand(3))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"optimizer": None}, "it holds no optimizer"),  # weights alone, shared without it
        ({"scheduler": None, "rng": None}, "it holds no scheduler, rng"),
        ({"format": 99}, "its format is 99 and this autotune reads format 1"),
        ({"step": -5}, "its step is -5, not a count of steps"),
        ({"step": "forty"}, "its step is 'forty'"),
        ({"data": {"epoch": 0, "offset": -100}}, "is not an epoch and an offset"),
        ({"rng": [{"python": torch.zeros(3)}]}, "its random states ('rng') lack the parts"),
        ({"optimizer": [1, 2]}, "its optimizer is not a mapping"),
    ],
)
def test_a_checkpoint_a_run_cannot_continue_from_is_named_and_skipped(
    tmp_path: Path, change: dict[str, object], said: str
) -> None:
    """A checkpoint that loads but lacks what a resume restores ended in a KeyError
    traceback, and --resume auto stopped at it instead of the good one before it."""
    broken = state(2)
    for key, value in change.items():
        if value is None:
            del broken[key]
        else:
            broken[key] = value
    save_checkpoint(state(1), checkpoint_path(tmp_path, 1))
    save_checkpoint(broken, checkpoint_path(tmp_path, 2))
    with pytest.raises(CheckpointError, match=re.escape(said)):
        load_checkpoint(checkpoint_path(tmp_path, 2))
    warned: list[str] = []
    found = find_resumable(tmp_path, warn=warned.append)
    assert found is not None and found[1]["step"] == 1
    assert len(warned) == 1 and "skipping ckpt-step00000002.pt" in warned[0]


def test_a_checkpoint_that_ends_early_says_so_not_an_empty_cause(tmp_path: Path) -> None:
    # "cannot load checkpoint ... (EOFError: )"
    from autotune.train.checkpoint import load_checkpoint

    short = tmp_path / "short.pt"
    short.write_bytes(b"\x80\x02")
    with pytest.raises(CheckpointError, match=r"\(EOFError: the file ends early\)"):
        load_checkpoint(short)
