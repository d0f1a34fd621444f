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

Which knob sets which variable is its registry entry's ``env`` (``EnvSetting``): these
functions loop over the entries read when torch loads, and name no knob.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.config.knobs import env_settings, environment, registry

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig

__all__ = ["OMP_WAIT_VAR", "environment_for", "mismatch", "restart_needed", "wait_policy"]

OMP_WAIT_VAR = "OMP_WAIT_POLICY"
_AT_START = "torch loads"  # the variables a process reads once, when torch loads


def wait_policy(config: TrainConfig, current: str | None) -> str | None:
    """The ``OMP_WAIT_POLICY`` a run of ``config`` needs, given the one it has (``current``):
    ``ACTIVE`` where the config spins, otherwise ``current`` as it is."""
    env = {} if current is None else {OMP_WAIT_VAR: current}
    return environment(config, env, read=_AT_START).get(OMP_WAIT_VAR, current)


def environment_for(config: TrainConfig, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the variables ``config``'s knobs set that torch reads when it loads
    (the registry's ``EnvSetting`` entries: the OpenMP wait policy)."""
    return {**env, **environment(config, env, read=_AT_START)}


def _unmet(config: TrainConfig, env: Mapping[str, str]) -> list[str]:
    """The knobs of ``config`` whose variable ``env`` lacks (read when torch loads)."""
    return [
        k.name
        for k, setting in env_settings(type(config))
        if setting.restart
        and getattr(config, k.name)
        and setting.wanted(env.get(setting.var)) != env.get(setting.var)
    ]


def restart_needed(config: TrainConfig, env: Mapping[str, str] | None = None) -> bool:
    """Whether a process started with ``env`` (default: this one's) runs ``config`` other
    than it was measured: a knob sets a variable read when torch loads, and the
    environment does not say so."""
    return bool(_unmet(config, os.environ if env is None else env))


def mismatch(config: TrainConfig, env: Mapping[str, str] | None = None) -> str | None:
    """What to tell a user whose process cannot run ``config`` as measured (None when it
    does): torch's libraries read these variables from the environment when torch loaded."""
    unmet = _unmet(config, os.environ if env is None else env)
    if not unmet:
        return None
    settings = {k.name: s for k, s in env_settings(type(config))}
    first = settings[unmet[0]]
    words = " ".join(f"{settings[n].var}={settings[n].value}" for n in unmet)
    return (
        f"config.{unmet[0]}: the search measured this config with {first.var}={first.value} "
        f"({_what(config, unmet[0])}), and this process started without it; it is "
        f"read once, when torch loads, so set it before Python starts ({words} python ...) to "
        "run as measured"
    )


def _what(config: TrainConfig, name: str) -> str:
    """What the knob does, in the words of its CLI help."""
    help_ = next(k.help for k in registry(type(config)) if k.name == name)
    return help_.rstrip(".").split(":")[0] or name
