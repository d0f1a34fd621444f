"""torchrun plumbing: the command that starts the processes, the group they join, the
per-rank config and the few collectives the trainer and the burst use.

``torchrun_command`` is how autotune starts several processes itself (a burst of a
multi-process config; ``autotune train`` of a preset with ``parallel`` runs the same
through launcher.py). ``rank_zero_first`` is a step of rank 0's that the others wait
for. How a model is wrapped or sharded across them (DDP, FSDP2) is
``autotune/engine/wrapping.py``.

``torchrun --nproc-per-node N -m autotune train --preset P`` (add ``--nnodes`` and a
rendezvous for several machines) sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and
``MASTER_ADDR``/``MASTER_PORT``; ``init_distributed`` reads them and joins the process
group: NCCL on CUDA, gloo on CPU. Without them (a plain ``autotune train``) it is a no-op
that returns a world of one.

Several machines: ``torchrun --nnodes M --nproc-per-node N --rdzv-backend c10d
--rdzv-endpoint HOST:PORT -m autotune train ...`` on each. Rank 0 alone writes checkpoints
and metrics, and every rank reads the checkpoint it resumes from, so ``--out`` must be on
storage every machine sees for ``--resume``. (The token cache may be per machine: writers
racing on one cache entry keep the first complete copy.)
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist

from autotune.config.parallel import split_problems
from autotune.config.train_config import TrainConfig
from autotune.core import launch_env
from autotune.core.errors import AutotuneError, ConfigError, PeerFailed, UsageError, known_cause
from autotune.core.signals import how_stopped
from autotune.core.validator import COUNT, show

__all__ = [
    "DistInfo",
    "all_gather_objects",
    "any_flag",
    "broadcast_object",
    "end_rank",
    "init_distributed",
    "joined_a_group",
    "per_rank_config",
    "rank_zero_first",
    "torchrun_args",
    "torchrun_command",
]

T = TypeVar("T")
PEER_GRACE_S = 2.0  # how long the other ranks leave rank 0 to say why it failed


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None  # None: not distributed

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str, *, timeout_s: float = 1800.0) -> tuple[DistInfo, str]:
    """Join the torchrun process group if there is one; return it and this rank's device.

    ``device`` is the requested kind (``cpu``, ``cuda``, ``cuda:N``); under torchrun on CUDA
    each process takes ``cuda:LOCAL_RANK``.
    """
    world = launch_env.world_size()
    if world <= 1:
        return DistInfo(), device
    rank = launch_env.rank()
    local_rank = launch_env.env_int("LOCAL_RANK", rank)
    if not dist.is_available():
        raise UsageError("this torch build has no torch.distributed; run without torchrun")
    cuda = device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r} asked for, but CUDA is not available here")
        if local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} "
                "GPU(s); use --nproc-per-node at most the number of GPUs"
            )
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    backend = "nccl" if cuda else "gloo"
    if not dist.is_initialized():
        if problem := launch_env.rendezvous_problem():  # env:// needs both
            raise UsageError(problem)
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        _joined.append(backend)
    return DistInfo(rank=rank, local_rank=local_rank, world_size=world, backend=backend), device


_joined: list[str] = []  # the backends of the process groups this process joined


def joined_a_group() -> bool:
    """Whether this process joined a process group (``init_distributed``): it then ends
    with ``end_rank``."""
    return bool(_joined)


def end_rank(outcome: BaseException | None) -> NoReturn:
    """End a process that joined a process group, skipping the interpreter's teardown:
    with ``outcome``'s exit status (a ``SystemExit``'s code; 130 for Ctrl-C, 128 plus its
    number for a stop signal; 1, after its traceback, for any other exception; 0 for
    None), whatever the standard streams do.

    The teardown could abort a run that had finished: a gloo worker thread drops a
    collective's work a moment after ``wait()`` has returned, and that work may hold the
    last reference to a tensor whose Python object is freed under the GIL. If the main
    thread has meanwhile reached the interpreter's teardown, the worker cannot take the
    GIL, and the process dies of SIGABRT ("terminate called without an active
    exception"), which torchrun reports as the run's failure. Destroying the group
    before is no way out: ``~ProcessGroupGloo`` joins those threads while its caller
    holds the GIL, so a worker in that state hangs the rank for ever (a DDP model freed
    after ``destroy_process_group``, when a broadcast was the last collective). So a
    group joined is never torn down in the process (``train`` leaves it joined) and ends
    here. Rank 0 has written its checkpoints and metrics (closed, not left to the
    teardown) by then; a burst's trial process ends the same way.
    """
    code = _exit_status(outcome)
    try:  # whatever the streams do (closed, full, gone), the process ends here
        if isinstance(outcome, SystemExit) and not isinstance(outcome.code, int | None):
            print(outcome.code, file=sys.stderr)  # sys.exit("message"): Python prints it
        elif outcome is not None and not isinstance(outcome, SystemExit | KeyboardInterrupt):
            traceback.print_exception(outcome)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.flush()
    finally:
        os._exit(code)


def _exit_status(outcome: BaseException | None) -> int:
    """The status Python would exit with after ``outcome`` (None: the command returned)."""
    if outcome is None:
        return 0
    if isinstance(outcome, SystemExit):
        if outcome.code is None or isinstance(outcome.code, int):
            return outcome.code or 0
        return 1
    if isinstance(outcome, KeyboardInterrupt):  # Ctrl-C, or SIGTERM or SIGHUP (StopSignal)
        return how_stopped(outcome)[0]
    return 1


def per_rank_config(config: TrainConfig, world_size: int) -> TrainConfig:
    """The config one rank runs so that the global batch stays the preset's.

    ``micro_batch * grad_accum`` samples per step on one process become ``micro_batch *
    grad_accum / world_size`` per rank: the accumulation is divided by the world size.
    """
    if wanted := COUNT.wanted(world_size):  # 0, -2 and True were taken as one process
        raise UsageError(f"world_size must be {wanted}, got {show(world_size)}")
    if world_size <= 1:
        return config
    problems = split_problems(config.grad_accum, world_size, config.micro_batch)
    if problems:
        raise ConfigError(
            problems, context="the preset's global batch does not split over the processes"
        )
    return config.replace(grad_accum=config.grad_accum // world_size)


def any_flag(info: DistInfo, flag: bool, device: torch.device) -> bool:
    """True on every rank if ``flag`` is true on any (e.g. a signal arrived on one)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_object(info: DistInfo, obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def rank_zero_first(info: DistInfo, what: str, func: Callable[[], T]) -> T | None:
    """``func()`` on rank 0 while the other ranks wait for its outcome, where a barrier
    stood: its result on rank 0, None on the others. Where it raised, rank 0 raises it
    and the others ``PeerFailed`` ("rank 0 failed {what}"), with the same exit code,
    ``PEER_GRACE_S`` later.
    Behind a barrier they had waited for a rank that never came: gloo ended them with a
    "Connection closed by peer" traceback under rank 0's one-paragraph error."""
    if not info.enabled:
        return func()
    if not info.is_main:
        code = broadcast_object(info, None)
        if code is not None:
            # rank 0 first says why and ends: torchrun stops the other ranks as soon as
            # one has ended, and rank 0, stopped before it spoke, left only this message
            time.sleep(PEER_GRACE_S)
            raise PeerFailed(f"rank 0 failed {what}; its error says why", exit_code=code)
        return None
    try:
        result = func()
    except Exception as exc:
        known = known_cause(exc)  # as the CLI ends rank 0
        broadcast_object(info, known.exit_code if isinstance(known, AutotuneError) else 1)
        raise
    broadcast_object(info, None)
    return result


def all_gather_objects(info: DistInfo, obj: Any) -> Sequence[Any]:
    """Every rank's ``obj``, in rank order."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def torchrun_command(
    nproc_per_node: int, module_args: list[str], *, log_dir: Path | None = None
) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m ...``: one
    machine, a free port picked by torchrun's own rendezvous. ``log_dir``: where torchrun
    keeps its per-run folder (without it, a ``torchelastic_*`` folder in the temporary
    folder that nothing removes)."""
    args = torchrun_args(nproc_per_node, module_args, log_dir)
    return [sys.executable, "-m", "torch.distributed.run", *args]


def torchrun_args(nproc_per_node: int, module_args: list[str], log_dir: Path | None) -> list[str]:
    """torchrun's arguments after ``torch.distributed.run`` in ``torchrun_command``."""
    logs = ["--log-dir", str(log_dir)] if log_dir is not None else []
    return ["--standalone", "--nproc-per-node", str(nproc_per_node), *logs, "-m", *module_args]
