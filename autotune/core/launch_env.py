"""What a launcher (torchrun, SLURM) tells a process through its environment: ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` as whole numbers, and the rendezvous address that a
process group of several needs. One reader, so that a malformed value is the same
one-paragraph error wherever it is read (a train's warning, a burst's channel, the
process group), never a ``ValueError`` traceback.

This module imports nothing heavy: the CLI's fast paths may use it.
"""

from __future__ import annotations

import os

from autotune.core.errors import UsageError

__all__ = ["check", "env_int", "rank", "rendezvous_problem", "world_size"]


def env_int(name: str, default: int) -> int:
    """The environment variable ``name`` as an integer >= 0 (``default`` where unset or
    empty); a UsageError naming it otherwise."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise UsageError(
            f"environment variable {name}={value!r} is not a whole number >= 0; torchrun "
            f"sets it for each process it starts: unset {name} to run one process"
        )
    return number


def rank() -> int:
    return env_int("RANK", 0)


def world_size() -> int:
    return env_int("WORLD_SIZE", 1)


def check() -> None:
    """Read the launcher's numbers once, up front: a command whose bursts read them in a
    child process (bench, search) would otherwise report a crash of every burst."""
    world_size()
    env_int("LOCAL_RANK", rank())


def rendezvous_problem() -> str | None:
    """Why a process group of ``WORLD_SIZE`` > 1 cannot meet (torch's ``env://`` needs
    ``MASTER_ADDR`` and ``MASTER_PORT``), or None."""
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if not missing:
        return None
    return (
        f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} asks for a process group, but "
        f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: start "
        "the processes with torchrun, which sets them (autotune presets export PRESET "
        "--format torchrun --nproc N writes the command), or unset WORLD_SIZE to train on "
        "one process"
    )
