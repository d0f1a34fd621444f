"""DeepSpeed's autotuner for ``benchmarks/vs_peers.py``: its config, its command, its answer.

``deepspeed --autotuning tune`` launches the training script (``_peer_driver.py --peer
deepspeed-train``) once per experiment with a config of its choosing, and writes the best
one to ``<results_dir>/ds_config_optimal.json``. The ``autotuning`` section is the minimal
one of DeepSpeed's guide (``fast`` mode: the micro-batch per ZeRO stage), with the user's
global batch fixed (``train_batch_size``), as autotune keeps it. CUDA only: this code path
is written from the documentation and has not run on a GPU yet.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Protocol

OPTIMAL = "ds_config_optimal.json"


class _Task(Protocol):
    @property
    def global_batch(self) -> int: ...


def ds_config(task: _Task, folder: Path) -> dict[str, Any]:
    """The config handed to the autotuner: fp32 AdamW at the user's global batch."""
    return {
        "train_batch_size": task.global_batch,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
        "autotuning": {
            "enabled": True,
            "fast": True,
            "metric": "throughput",
            "results_dir": str(folder / "autotuning_results"),
            "exps_dir": str(folder / "autotuning_exps"),
        },
    }


def deepspeed_command(task: _Task, driver: list[str]) -> list[str]:
    """``deepspeed --autotuning tune --num_gpus 1 DRIVER ARGS --deepspeed --deepspeed_config
    FILE``, where ``driver`` is the driver's command line (interpreter first)."""
    folder = Path(driver[driver.index("--root") + 1])
    config = folder / "ds_config.json"
    config.write_text(json.dumps(ds_config(task, folder), indent=2) + "\n")
    launcher = str(Path(sys.executable).parent / "deepspeed")
    return [
        launcher, "--autotuning", "tune", "--num_gpus", "1", *driver[1:],
        "--deepspeed", "--deepspeed_config", str(config),
    ]  # fmt: skip


def read_optimal(folder: Path) -> tuple[int | None, int | None, dict[str, Any]]:
    """(micro-batch, accumulation, other settings) of the autotuner's best config."""
    path = folder / "autotuning_results" / OPTIMAL
    if not path.exists():
        return None, None, {}
    data = json.loads(path.read_text())
    micro = data.get("train_micro_batch_size_per_gpu")
    accum = data.get("gradient_accumulation_steps", 1)
    stage = (data.get("zero_optimization") or {}).get("stage", 0)
    return (
        int(micro) if isinstance(micro, int) else None,
        int(accum) if isinstance(accum, int) else None,
        {"ZeRO stage": stage},
    )
