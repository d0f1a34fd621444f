"""A tiny ``ModelSpec`` whose ``build`` does to processes what a user's build may do:
start helper daemons that leave the trial's session (a double fork with ``setsid``, as a
daemon does: one that goes on in Python, one that runs ``sleep``), or stop its parent (a
zygote, for a trial forked by one). The trial loads it by reference
(``f"{DETACH}:detach_spec"``); what it did is written to ``record_file`` as JSON."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import torch
from torch import nn

from autotune.contract.spec import Batch, ModelSpec

__all__ = ["DETACH", "detach_spec"]

DETACH = str(Path(__file__).resolve())
WIDTH = 4
DAEMON_S = 60.0  # how long a detached daemon lives unless something ends it


def _daemons() -> list[int]:
    """Two daemons, each the grandchild of a process that called ``setsid`` and exited:
    in a session of their own, their parent gone. Their pids."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:  # the process between: a session of its own, then gone
        try:
            os.close(read)
            os.setsid()
            forked = []
            for command in (None, ["sleep", str(int(DAEMON_S))]):
                pid = os.fork()
                if pid == 0:
                    os.close(write)
                    if command is not None:
                        os.execvp(command[0], command)
                    time.sleep(DAEMON_S)
                    os._exit(0)
                forked.append(pid)
            os.write(write, json.dumps(forked).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        pids: list[int] = json.loads(pipe.read())
    os.waitpid(middle, 0)
    return pids


def _stop_parent() -> int:
    """Stop this process's parent, where that is a zygote (never the search itself: a
    fresh trial's parent is the test). Its pid, 0 where it was not one."""
    parent = os.getppid()
    if "autotune.burst.zygote" not in " ".join(psutil.Process(parent).cmdline()):
        return 0
    os.kill(parent, signal.SIGSTOP)
    return parent


def _build(*, width: int = WIDTH, record_file: str = "", mode: str = "detach") -> nn.Module:
    record: dict[str, Any] = {"pid": os.getpid(), "ppid": os.getppid()}
    if mode == "detach":
        record["daemons"] = _daemons()
    elif mode == "stop_parent":
        record["stopped"] = _stop_parent()
    if record_file:
        Path(record_file).write_text(json.dumps(record))
    return nn.Linear(width, 1)


def _make_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator
) -> Batch:
    width = int(args.get("width", WIDTH))
    return {
        "x": torch.randn(batch_size, seq_len, width, generator=gen),
        "y": torch.randn(batch_size, seq_len, 1, generator=gen),
    }


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    return 6.0 * (int(args.get("width", WIDTH)) + 1) * seq_len


detach_spec = ModelSpec(
    name="detach",
    description="a linear layer whose build detaches daemons or stops its parent",
    task="regression",
    build_fn=_build,
    make_batch_fn=_make_batch,
    loss_fn=_loss,
    flops_fn=_flops,
    args={"width": WIDTH, "mode": "detach"},
    seq_len=4,
    max_seq_len=16,
    global_batch=2,
)
