"""A full training run in one call: ``train``, what ``autotune train`` runs and what a
Python caller can run too.

``train`` joins the torchrun process group when there is one (distributed.py), loads the
data for the model's task (rank 0 first: it writes the token cache the others then read),
runs a ``Trainer`` (trainer.py). The group stays joined until the process ends (a later
call reuses it): see ``end_rank`` in distributed.py for why it is never torn down in the
process. ``autotune.train.launch.prepare_training`` decides its arguments from a preset or
a bare model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core import launch_env
from autotune.core.signals import stop_when_orphaned
from autotune.data.tasks import load_data
from autotune.data.train_data import TrainData
from autotune.engine.distributed import init_distributed, rank_zero_first
from autotune.engine.launcher import PID_VAR
from autotune.train.run_result import TrainResult
from autotune.train.trainer import OnOOM, Trainer

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = ["train"]


def train(
    spec: ModelSpec,
    config: TrainConfig,
    training: TrainingDefaults | None = None,
    *,
    data: str | Path | TrainData | None = None,
    out_dir: str | Path,
    device: str = "cpu",
    device_caps: DeviceCaps | None = None,
    resume: str | Path | None = None,
    on_oom: OnOOM = "fail",
    cache_dir: str | Path | None = None,
    text_column: str = "text",
    target_column: str = "target",
    json_logs: bool = False,
    progress: bool | None = None,
    echo: Callable[[str], None] | None = None,
    option_names: Mapping[str, str] | None = None,
) -> TrainResult:
    """Train ``spec`` with ``config`` (see ``Trainer``); under torchrun, as one rank of DDP.

    ``data``: a path (see autotune/data/tasks.py for the formats), prepared ``TrainData``, or
    None for the default corpus (language models only). ``option_names`` maps a parameter
    to the name errors give it (the CLI's flags: ``{"out_dir": "--out"}``).
    """
    training = training or TrainingDefaults()
    if launch_env.world_size() > 1:  # a launcher killed (kill -9, a second Ctrl-C): a stop
        # before joining, which waits for a launcher that may be gone
        stop_when_orphaned(parent=launch_env.env_int(PID_VAR, os.getppid()))
    info, device = init_distributed(device)  # left joined: see the module's docstring
    if isinstance(data, TrainData):
        prepared = data
    else:

        def load() -> TrainData:
            return load_data(
                spec,
                data,
                seq_len=config.seq_len,
                cache_dir=None if cache_dir is None else Path(cache_dir),
                text_column=text_column,
                target_column=target_column,
                log=echo or (lambda s: print(s, file=sys.stderr, flush=True)),
            )

        # rank 0 writes the token cache, the others then read it
        first = rank_zero_first(info, "to load the data", load)
        prepared = load() if first is None else first
    trainer = Trainer(
        spec,
        config,
        training,
        prepared,
        out_dir,
        device=device,
        device_caps=device_caps,
        resume=resume,
        on_oom=on_oom,
        dist=info,
        json_logs=json_logs,
        progress=progress,
        echo=echo,
        option_names=option_names,
    )
    return trainer.run()
