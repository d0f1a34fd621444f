"""DistributedDataParallel on CPU: 2 processes with the gloo backend."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from fake_lm import FAKE_LM, make_spec

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core.errors import ConfigError
from autotune.engine.distributed import per_rank_config
from autotune.train.checkpoint import list_checkpoints, load_checkpoint

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="this torch build has no gloo backend",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_accumulation_is_divided_by_the_world_size() -> None:
    cfg = TrainConfig(micro_batch=2, grad_accum=4, seq_len=8)
    assert per_rank_config(cfg, 2).grad_accum == 2
    assert per_rank_config(cfg, 1) == cfg
    many = TrainConfig(micro_batch=1, grad_accum=2048, seq_len=8)  # a world of many machines
    assert per_rank_config(many, 2048).grad_accum == 1
    with pytest.raises(ConfigError, match="4 does not split over 3 processes"):
        per_rank_config(cfg, 3)


def _worker(rank: int, world: int, ports: list[int], tmp: str) -> None:
    import autotune.train.run_folder as folder_module
    from autotune.engine.distributed import end_rank
    from autotune.train.run import train
    from autotune.train.trainer import Trainer

    torch.set_num_threads(1)
    root = Path(tmp)
    saved: list[str] = []
    real_save = folder_module.save_checkpoint

    def recording_save(state: Any, path: Path) -> int:
        saved.append(str(path))
        return real_save(state, path)

    folder_module.save_checkpoint = recording_save
    real_finish = Trainer._finish

    def finish(trainer: Trainer, *args: Any, **kwargs: Any) -> Any:  # each rank's last weights
        torch.save(trainer.raw_model.state_dict(), root / f"{trainer.out_dir.name}-rank{rank}.pt")
        return real_finish(trainer, *args, **kwargs)

    Trainer._finish = finish  # type: ignore[method-assign]
    settings = TrainingDefaults(
        max_steps=4,
        warmup_steps=1,
        lr=3e-3,
        log_interval=1,
        eval_interval=2,
        eval_batches=1,
        checkpoint_interval=2,
        seed=5,
    )
    config = TrainConfig(micro_batch=2, grad_accum=4, seq_len=16)  # global batch 8
    common: dict[str, Any] = {"cache_dir": root / "cache", "echo": lambda _: None}
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1"
    )
    os.environ["MASTER_PORT"] = str(ports[0])
    full = train(make_spec(), config, settings, out_dir=root / "full", **common)
    # a second run resumed from the first one's step-2 checkpoint
    if rank == 0:
        (root / "resumed").mkdir()
        shutil.copy(root / "full" / "ckpt-step00000002.pt", root / "resumed")
    os.environ["MASTER_PORT"] = str(ports[1])  # unused: the first run's group is reused
    resumed = train(
        make_spec(), config, settings, out_dir=root / "resumed", resume="auto", **common
    )
    # never torn down in the process: destroying it could hang this rank (see end_rank)
    joined = torch.distributed.is_initialized()
    (root / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "saved": saved,
                "full": list(full.losses),
                "resumed": list(resumed.losses),
                "joined": joined,
            }
        )
    )
    end_rank(None)  # as autotune's own ranks end: Python's teardown could abort this one


@pytest.mark.slow
def test_two_process_gloo_ddp(tmp_path: Path) -> None:
    mp.spawn(  # type: ignore[attr-defined]
        _worker, args=(2, [free_port(), free_port()], str(tmp_path)), nprocs=2, join=True
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["joined"] for r in ranks] == [True, True]
    # every rank holds the same parameters after the steps
    for run in ("full", "resumed"):
        a = torch.load(tmp_path / f"{run}-rank0.pt", weights_only=True)
        b = torch.load(tmp_path / f"{run}-rank1.pt", weights_only=True)
        for name in a:
            assert torch.equal(a[name], b[name]), name
    initial = make_spec().build()
    final = torch.load(tmp_path / "full-rank0.pt", weights_only=True)
    assert not torch.equal(final["tok.weight"], initial.state_dict()["tok.weight"])
    # only rank 0 writes checkpoints; they carry every rank's RNG state
    assert ranks[1]["saved"] == [] and ranks[0]["saved"]
    assert [s for s, _ in list_checkpoints(tmp_path / "full")] == [2, 4]
    assert len(load_checkpoint(tmp_path / "full" / "ckpt-step00000004.pt")["rng"]) == 2
    records = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").open()]
    steps = [r["step"] for r in records if r["type"] == "train"]
    assert steps == [1, 2, 3, 4]  # logged once, by rank 0
    # resuming under DDP continues the same run
    assert ranks[0]["resumed"] == pytest.approx(ranks[0]["full"][2:], abs=1e-6)
    full = torch.load(tmp_path / "full-rank0.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed-rank0.pt", weights_only=True)
    for name in full:
        torch.testing.assert_close(full[name], resumed[name], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_torchrun_cli(tmp_path: Path) -> None:
    """``torchrun --nproc-per-node 2 -m autotune train`` end to end, on CPU."""
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "autotune", "train", "--model", f"{FAKE_LM}:spec", "--out", str(tmp_path / "run"),
        "--max-steps", "2", "--eval-interval", "2",
        "--set", "config.micro_batch=2", "--set", "config.grad_accum=2",
        "--set", "config.seq_len=16", "--set", "training.log_interval=1",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "x 2 processes" in proc.stdout
    assert proc.stdout.count("saved ") == 1  # rank 0 alone reports (and writes)
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [2]
    # an accumulation that does not split over the processes is a clear error, exit 2
    bad = [*cmd[:-8], "--set", "config.grad_accum=3", "--out", str(tmp_path / "bad")]
    proc = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0  # torchrun reports its own failure after the workers' exit 2
    assert "error: the preset's global batch does not split" in proc.stderr
    assert "does not split over 2 processes" in proc.stderr
    assert "autotune/train/trainer.py" not in proc.stderr  # a message, not a traceback of ours
