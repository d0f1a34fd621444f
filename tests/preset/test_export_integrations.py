"""The exported files, loaded by the libraries they are for: transformers'
``TrainingArguments``, ``lightning.Trainer``, Accelerate's own config loader (and
``accelerate launch``), DeepSpeed's config check. Each library is optional (the
``integrations`` extra, which CI installs); a missing one skips its test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_presets import gpu_fingerprint, make_config, make_preset

from autotune.preset import Preset
from autotune.preset.export import export_preset


def cpu_preset(**config: Any) -> Preset:
    """A CPU preset (this machine can run it): bf16, compiled, two prefetching workers."""
    base: dict[str, Any] = dict(
        precision="bf16",
        compile="reduce-overhead",
        num_workers=2,
        prefetch_factor=4,
        persistent_workers=True,
        fused_optimizer=True,
        knobs={"block_group": 2},
    )
    return make_preset(config=make_config(**{**base, **config}))


# transformers 5 renames gradient_checkpointing (kept until v6); the export keeps the name
# 4.x knows too.
pytestmark = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated")


@pytest.mark.parametrize("nproc", [1, 2])
def test_hf_training_arguments(tmp_path: Path, nproc: int) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # TrainingArguments needs it (the hf extra has none)
    text = export_preset(cpu_preset(), "hf", nproc=nproc).text
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **yaml.safe_load(text))
    assert args.per_device_train_batch_size == 8
    assert args.gradient_accumulation_steps == 4 // nproc
    assert args.bf16 is True and args.fp16 is False and args.use_cpu is True
    assert args.torch_compile is True and args.torch_compile_mode == "reduce-overhead"
    assert args.dataloader_num_workers == 2 and args.dataloader_prefetch_factor == 4
    assert args.dataloader_persistent_workers is True and args.dataloader_drop_last is True
    assert args.optim == "adamw_torch_fused"
    assert args.learning_rate == 6e-4 and args.max_steps == 2000 and args.max_grad_norm == 1.0
    assert args.lr_scheduler_type == "cosine_with_min_lr"
    assert args.adam_beta2 == 0.95 and args.save_total_limit == 3


def test_hf_fp32_and_checkpointing(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    preset = make_preset(config=make_config(activation_checkpointing=True))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), **export_preset(preset, "hf").data
    )
    assert args.bf16 is False and args.fp16 is False and args.torch_compile is False
    assert args.gradient_checkpointing is True and args.dataloader_num_workers == 0


def test_lightning_trainer(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    import torch

    data = yaml.safe_load(export_preset(cpu_preset(), "lightning").text)
    trainer = lightning.Trainer(
        **data["trainer"], default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False
    )
    assert trainer.accumulate_grad_batches == 4
    assert trainer.precision == "bf16-mixed"
    assert trainer.max_steps == 2000 and trainer.gradient_clip_val == 1.0
    loader = torch.utils.data.DataLoader(list(range(64)), **data["dataloader"])
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (8, 2, 4)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), **data["optimizer"])
    assert optimizer.defaults["lr"] == 6e-4 and optimizer.defaults["fused"] is True
    assert data["compile"] == {"mode": "reduce-overhead"}


def test_accelerate_config_loader(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    preset = make_preset(config=make_config(precision="fp16", compile="default"))
    for nproc, kind in ((1, "NO"), (2, "MULTI_CPU")):
        path = tmp_path / f"accelerate-{nproc}.yaml"
        path.write_text(export_preset(preset, "accelerate", nproc=nproc).text)
        config = load_config_from_file(str(path))
        assert config.mixed_precision == "fp16"
        assert config.distributed_type == kind and config.num_processes == nproc
        assert config.use_cpu is True
        assert config.dynamo_config == {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default"}
    gpu = make_preset(config=make_config(precision="bf16"), fingerprint=gpu_fingerprint())
    path = tmp_path / "gpu.yaml"
    path.write_text(export_preset(gpu, "accelerate", nproc=4).text)
    config = load_config_from_file(str(path))
    assert config.distributed_type == "MULTI_GPU" and config.mixed_precision == "bf16"
    assert config.dynamo_config == {}


@pytest.mark.slow
def test_accelerate_launch_runs_with_the_file(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    config = tmp_path / "accelerate.yaml"
    config.write_text(export_preset(cpu_preset(compile="off"), "accelerate").text)
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            print("precision", accelerator.mixed_precision, accelerator.device.type)
            """
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(config),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "precision bf16 cpu" in done.stdout


class _DataParallel:
    """The one method DeepSpeed's config asks of an ``mpu``: the data-parallel world size."""

    def __init__(self, world: int) -> None:
        self.world = world

    def get_data_parallel_world_size(self) -> int:
        return self.world


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("nproc", [1, 2])
def test_deepspeed_config_check(
    precision: str, nproc: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.config import DeepSpeedConfig

    # Without a process group DeepSpeed takes a world of 1 and ignores the mpu: say rank 0.
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda: 0)

    preset = make_preset(config=make_config(precision=precision), fingerprint=gpu_fingerprint())
    data = json.loads(export_preset(preset, "deepspeed", nproc=nproc).text)
    config = DeepSpeedConfig(data, mpu=_DataParallel(nproc))  # checks batch = micro x accum x world
    assert config.train_batch_size == 32
    assert config.train_micro_batch_size_per_gpu == 8
    assert config.gradient_accumulation_steps == 4 // nproc
    assert config.gradient_clipping == 1.0
    assert config.bfloat16_config.enabled is (precision == "bf16")
    assert config.float16_config.enabled is (precision == "fp16")
