"""Checkpoints: written atomically, the last K and the best kept, loaded with weights_only.

A checkpoint is ``ckpt-step00000200.pt`` in the run's folder: a dict of tensors and plain
containers (the model and optimizer state, the scaler, the scheduler, RNG states stored as
tensors, the data position, the config as a dict), so ``torch.load(weights_only=True)``
reads it and loading one never runs code. ``best.pt`` is the checkpoint with the lowest
validation loss (a hard link to its step file where the file system allows, else a copy).

Writes go through :func:`autotune.core.files.atomic_writer` (a temporary file in the same folder,
flushed and fsynced, then renamed over the target): a process killed mid-write leaves a
stray ``.*.tmp`` file (removed by ``clean_stale``) and every earlier checkpoint intact.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch

from autotune.core.errors import CheckpointError
from autotune.core.files import atomic_writer, fsync_dir, regular_file_size

__all__ = [
    "BEST_NAME",
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "capture_rng_state",
    "checkpoint_path",
    "clean_stale",
    "find_resumable",
    "link_best",
    "list_checkpoints",
    "load_checkpoint",
    "prune_checkpoints",
    "restore_rng_state",
    "save_checkpoint",
]

BEST_NAME = "best.pt"
CHECKPOINT_FORMAT = 1  # what checkpoint_state writes; a newer file is refused, not misread
_STEP_RE = re.compile(r"^ckpt-step(\d+)\.pt$")


def checkpoint_path(folder: Path, step: int) -> Path:
    return Path(folder) / f"ckpt-step{step:08d}.pt"


def save_checkpoint(state: Mapping[str, Any], path: Path) -> int:
    """Write ``state`` to ``path`` atomically; return its size in bytes."""
    path = Path(path)
    try:
        with atomic_writer(path, binary=True) as f:
            torch.save(dict(state), f)
    except RuntimeError as exc:
        # torch's zip writer turns a failed write (a full disk: ENOSPC) into a RuntimeError
        # ("unexpected pos ...") raised while handling the OSError: give back the OSError
        if isinstance(exc.__context__, OSError):
            raise exc.__context__ from None
        raise
    return path.stat().st_size


def link_best(path: Path) -> Path:
    """Make ``best.pt`` next to ``path`` the same checkpoint, atomically."""
    path = Path(path)
    best = path.parent / BEST_NAME
    tmp = path.parent / f".{BEST_NAME}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(path, tmp)
    except OSError:  # no hard links here (some network and FAT file systems): copy
        shutil.copyfile(path, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, best)
    fsync_dir(path.parent)
    return best


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the step checkpoints in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune_checkpoints(folder: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` step checkpoints (``best.pt`` is separate)."""
    removed = []
    for _, p in list_checkpoints(folder)[:-keep_last] if keep_last > 0 else []:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed


def clean_stale(folder: Path, names: Collection[str] = ()) -> list[Path]:
    """Remove the temporary files that a killed process left behind: those of checkpoints
    and ``best.pt``, and of the files ``names`` (atomic writes: ``.NAME.XXXXXXXX.tmp``)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in folder.glob(".*.tmp"):
        target = p.name[1:].rsplit(".", 2)[0]  # ".data.json.k3x9_a2b.tmp" -> "data.json"
        if p.name.startswith((".ckpt-step", f".{BEST_NAME}")) or target in names:
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    return removed


def load_checkpoint(
    path: Path, *, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (``mmap``: its tensors mapped from the
    file, not read: to look at it, not to train from it); a bad file is a ``CheckpointError``,
    as is one (read, not mapped) whose model weights hold NaN or infinity."""
    path = Path(path)
    # a regular file (the one rule for a user's path); its size is the model's: no bound
    regular_file_size(path, what="checkpoint", error=CheckpointError)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as exc:
        raise CheckpointError(
            f"cannot load checkpoint {str(path)!r} ({type(exc).__name__}: {_load_problem(exc)}); "
            "it is damaged or not an autotune checkpoint"
        ) from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise CheckpointError(f"{str(path)!r} is not an autotune training checkpoint")
    problem = _shape_problem(state)
    if problem is not None:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot resume a run: {problem}")
    broken = None if mmap else _non_finite_weight(state["model"])
    if broken is not None:  # a run never saves a diverged model: the file was damaged
        raise CheckpointError(
            f"checkpoint {str(path)!r}: its weights are not finite ({broken} holds NaN or "
            "infinity), so a run cannot continue from it; resume from an earlier checkpoint "
            "(--resume FILE) or start afresh"
        )
    return state


# What a resume reads of a checkpoint besides its weights (checkpoint_state.restore_state)
_PARTS = ("optimizer", "scheduler", "stepper", "rng", "data", "config")
_RNG_KEYS = ("python_version", "python", "python_gauss", "torch")


def _shape_problem(state: Mapping[str, Any]) -> str | None:
    """Why ``state`` is not a whole checkpoint a run can continue from (None: it is): a
    newer format, a part missing (a file of weights alone, shared without its optimizer),
    a step or data position that is not a count, an RNG state without its parts."""
    version = state.get("format", CHECKPOINT_FORMAT)
    if not _count(version) or version > CHECKPOINT_FORMAT:
        return (
            f"its format is {version!r} and this autotune reads format {CHECKPOINT_FORMAT} "
            "(pip install -U autotune-train, or resume it where it was written)"
        )
    missing = [part for part in _PARTS if part not in state]
    if missing:
        return (
            f"it holds no {', '.join(missing)} (a file of the weights alone has lost the "
            "optimizer's state, the schedule and the data position a resume continues)"
        )
    if not _count(state["step"]):
        return f"its step is {state['step']!r}, not a count of steps"
    wrong = [p for p in ("model", "optimizer", "scheduler", "stepper", "data", "config")
             if not isinstance(state[p], Mapping)]  # fmt: skip
    if wrong:
        return f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not a mapping"
    data = state["data"]
    if not (_count(data.get("epoch")) and _count(data.get("offset"))):
        return f"its data position {dict(data)!r} is not an epoch and an offset of samples"
    rngs = state["rng"]
    if (
        not isinstance(rngs, list)
        or not rngs
        or not all(isinstance(r, Mapping) and all(k in r for k in _RNG_KEYS) for r in rngs)
    ):
        return (
            f"its random states ('rng') lack the parts a resume restores ({', '.join(_RNG_KEYS)})"
        )
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _non_finite_weight(model: Any) -> str | None:
    """The name of a floating-point tensor of ``model`` (a state dict) holding NaN or
    infinity, or None."""
    if not isinstance(model, Mapping):
        return None
    for name, value in model.items():
        floating = isinstance(value, torch.Tensor) and value.is_floating_point()
        if floating and not bool(torch.isfinite(value).all()):
            return str(name)
    return None


def _load_problem(exc: Exception) -> str:
    """torch.load's reason in its own words: the line after ``WeightsUnpickler error:``
    (torch's text before it asks to file an issue and suggests ``weights_only=False``,
    which would run the file's code), else its first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            tail = line.split("WeightsUnpickler error:", 1)[1].strip()
            return tail or (lines[i + 1] if i + 1 < len(lines) else line)
    if lines:
        return lines[0]
    return "the file ends early" if isinstance(exc, EOFError) else "no reason given"


def find_resumable(
    folder: Path,
    *,
    map_location: str | torch.device = "cpu",
    warn: Any = None,
    mmap: bool = False,
) -> tuple[Path, dict[str, Any]] | None:
    """The newest step checkpoint in ``folder`` that loads, and its state (None: none)."""
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return path, load_checkpoint(path, map_location=map_location, mmap=mmap)
        except CheckpointError as exc:
            if warn is not None:
                warn(f"warning: skipping {path.name}: {exc}")
    return None


# -- RNG states as tensors (weights_only-loadable) -----------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """Python, numpy, torch and (current device) CUDA generator states, as tensors."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": torch.tensor(list(internal), dtype=torch.int64),
        "python_version": int(version),
        "python_gauss": torch.tensor(
            [0.0 if gauss is None else 1.0, 0.0 if gauss is None else gauss],
            dtype=torch.float64,
        ),
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np

        _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = torch.from_numpy(np.asarray(keys).astype("int64"))
        state["numpy_extra"] = torch.tensor([pos, has_gauss, cached], dtype=torch.float64)
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device's (one per process)
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo ``capture_rng_state``: the same random numbers come next."""
    has_gauss, gauss = state["python_gauss"].tolist()
    random.setstate(
        (
            int(state["python_version"]),
            tuple(int(x) for x in state["python"].tolist()),
            gauss if has_gauss else None,
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        with contextlib.suppress(ImportError):
            import numpy as np

            pos, has_g, cached = state["numpy_extra"].tolist()
            np.random.set_state(
                (
                    "MT19937",
                    state["numpy"].numpy().astype("uint32"),
                    int(pos),
                    int(has_g),
                    float(cached),
                )
            )
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].cpu())
