"""How torch's OpenMP threads wait between CPU operations: the ``omp_spin`` switch.

torch runs a CPU operation on its intra-op threads (GNU OpenMP in the PyPI builds) and waits
for all of them at its end. Between operations an idle thread spins for a while, then
sleeps; a step of many small operations then pays a sleeping thread's wake-up at each of
them (on a VM, a wake-up is a trip through the hypervisor). Under OpenMP's default policy,
which of the two a process mostly does differs from one process to the next: MU at
micro-batch 1 on the 2-core EPYC VM measured 1,281-1,713 tokens/s over eight fresh
processes of plain torch, 1,202-1,311 with ``OMP_WAIT_POLICY=PASSIVE`` and 1,687-1,776 (one
of six: 1,351) with ``ACTIVE`` (BENCHMARKS.md, "the 3,839 vs 2,904 gap").

``TrainConfig.omp_spin`` asks for ``OMP_WAIT_POLICY=ACTIVE`` (a CPU device only). OpenMP reads
the variable once, when torch loads it, so it is set in the environment of a process to
come: the burst's child (``environment_for``), and ``autotune train``, which starts itself
again with it (``restart_needed``). A process already running torch cannot change it: the
Python API says so (``mismatch``). Off, the environment stays as the user has it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig

__all__ = ["OMP_WAIT_VAR", "environment_for", "mismatch", "restart_needed", "wait_policy"]

OMP_WAIT_VAR = "OMP_WAIT_POLICY"
SPIN = "ACTIVE"


def wait_policy(config: TrainConfig, current: str | None) -> str | None:
    """The ``OMP_WAIT_POLICY`` a run of ``config`` needs, given the one it has (``current``):
    ``ACTIVE`` where the config spins, otherwise ``current`` as it is."""
    return SPIN if config.omp_spin else current


def environment_for(config: TrainConfig, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the OpenMP wait policy ``config`` runs with."""
    out = dict(env)
    wanted = wait_policy(config, env.get(OMP_WAIT_VAR))
    if wanted is not None:
        out[OMP_WAIT_VAR] = wanted
    return out


def restart_needed(config: TrainConfig, env: Mapping[str, str] | None = None) -> bool:
    """Whether a process started with ``env`` (default: this one's) runs ``config`` other
    than it was measured: it spins, and the environment does not say so."""
    env = os.environ if env is None else env
    return wait_policy(config, env.get(OMP_WAIT_VAR)) != env.get(OMP_WAIT_VAR)


def mismatch(config: TrainConfig, env: Mapping[str, str] | None = None) -> str | None:
    """What to tell a user whose process cannot run ``config`` as measured (None when it
    does): OpenMP took its wait policy from the environment when torch loaded."""
    if not restart_needed(config, env):
        return None
    return (
        f"config.omp_spin: the search measured this config with {OMP_WAIT_VAR}={SPIN} "
        "(torch's CPU threads spin between operations), and this process started without "
        "it; OpenMP reads it once, when torch loads, so set it before Python starts "
        f"({OMP_WAIT_VAR}={SPIN} python ...) to run as measured"
    )
