"""Whether a config runs here: on its model, its device and this machine, every problem
at once (``check_config``), and the parts a caller asks alone: the model's refusals on any
machine (``model_problems``, as ``presets export`` checks a preset for a machine it does
not know) and the machine's limits (``machine_problems``).

Each knob's own conditions are the registry's (``config/knobs.py``); the parallel record's
are ``config/parallel.py``'s; this module joins them for one config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.config.knobs import Where, device_problems, seq_len_problem
from autotune.config.machine_limits import WORKERS_PER_CORE, usable_cores, worker_limit
from autotune.config.parallel import split_problems
from autotune.core.errors import ConfigError
from autotune.core.validator import did_you_mean, show

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = ["check_config", "machine_problems", "model_problems", "parallel_problems"]


def check_config(
    config: TrainConfig, *, spec: ModelSpec, device: DeviceCaps, cores: int | None = None
) -> None:
    """Reject what this model, device or machine (``cores``: default this process's usable
    cores) cannot run, all problems at once: each knob's conditions (the registry's
    ``runs`` and ``value_problem``), the machine's limits (``machine_problems``), and the
    model's knobs."""
    cores = usable_cores() if cores is None else cores
    problems = device_problems(config, Where(spec=spec, device=device, cores=cores))
    problems += machine_problems(config, device, cores=cores)
    problems += model_problems(config, spec=spec, device=device)
    if problems:
        raise ConfigError(problems, context=f"config not runnable on {device.device}")


def model_problems(
    config: TrainConfig, *, spec: ModelSpec, device: DeviceCaps | None = None
) -> list[str]:
    """What the model refuses in ``config`` on any machine: a sequence longer than it
    accepts, a knob it has not, a value its knob does not take; with ``device``, a value
    that device cannot run too. ``presets export`` asks this of a preset for a machine it
    does not know (it wrote presets that ``train`` then refused)."""
    problems = []
    if (too_long := seq_len_problem(config.seq_len, spec)) is not None:
        problems.append(f"config.seq_len: {too_long}")
    known = {k.name: k for k in spec.knobs}
    for name, value in config.knobs.items():
        if name not in known:
            names = ", ".join(known) or "none"
            problems.append(
                f"config.knobs.{name}: model {spec.name!r} has no such knob "
                f"(its knobs: {names}){did_you_mean(name, list(known))}"
            )
        elif value not in known[name].values:
            allowed = ", ".join(map(str, known[name].values))
            problems.append(f"config.knobs.{name}: expected one of {allowed}; got {show(value)}")
        elif device is not None and (problem := known[name].value_problem(value, device, config)):
            problems.append(f"config.knobs.{name}: {problem}")
    return problems


def machine_problems(
    config: TrainConfig, device: DeviceCaps | None, *, cores: int | None = None
) -> list[str]:
    """What keeps ``config`` from running on this machine (``cores``: the usable CPU cores,
    default this process's), each with its path: more than ``WORKERS_PER_CORE`` DataLoader
    workers per usable core, and the parallel record's processes per core or GPU (with
    its other checks on ``device``). ``device`` may be None only for a config without a
    parallel record (nothing else here needs it)."""
    cores = usable_cores() if cores is None else cores
    problems: list[str] = []
    limit = worker_limit(cores)
    if config.num_workers > limit:
        problems.append(
            f"config.num_workers: at most {limit} on this machine ({WORKERS_PER_CORE} x "
            f"{cores} usable cores), got {config.num_workers}"
        )
    if config.parallel is not None:
        if device is None:
            raise ValueError("machine_problems: a config with a parallel record needs its device")
        problems += parallel_problems(config, device, cores=cores)
    return problems


def parallel_problems(config: TrainConfig, device: DeviceCaps, *, cores: int) -> list[str]:
    """What keeps ``config.parallel`` from running on ``device`` with ``cores`` usable CPU
    cores (``check_config``'s part): at most one process per GPU, or per core on a CPU."""
    par = config.parallel
    if par is None:
        return []
    out = split_problems(config.grad_accum, par.nproc_per_node, config.micro_batch)
    if device.kind == "cpu" and par.nproc_per_node > cores:
        out.append(
            f"config.parallel.nproc_per_node: {par.nproc_per_node} processes on a CPU need as "
            f"many usable cores, this process may use {cores}"
        )
    if par.strategy == "fsdp" and config.precision == "fp16":
        out.append(
            "config.parallel.strategy: fsdp runs with fp32 or bf16 here, not fp16 (its "
            "GradScaler would need sharded gradients); use precision bf16 or strategy ddp"
        )
    if par.mixed_precision == "bf16":
        problem = device.precision_problem("bf16")
        if problem is not None:
            out.append(f"config.parallel.mixed_precision: bf16 on {device.device}: {problem}")
    if device.kind == "cuda":
        import torch

        count = torch.cuda.device_count()
        if par.nproc_per_node > count:
            out.append(
                f"config.parallel.nproc_per_node: {par.nproc_per_node} processes need as "
                f"many GPUs, this machine has {count}"
            )
    return out
