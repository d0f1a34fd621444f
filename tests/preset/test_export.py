"""`autotune presets export --format hf|lightning|accelerate|deepspeed|torchrun`: the
mappings, what each lists as not mapped, the per-process batch, and the CLI. The real
libraries load these files in test_export_integrations.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_presets import gpu_fingerprint, make_config, make_preset, wire_preset_places
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.core.errors import ConfigError, UsageError
from autotune.preset import ModelRef, Preset, save_preset
from autotune.preset.export import EXPORT_FORMATS, export_preset

TUNED = make_config(
    precision="bf16",
    compile="max-autotune",
    num_workers=2,
    prefetch_factor=4,
    persistent_workers=True,
    pin_memory=True,
    fused_optimizer=True,
    activation_checkpointing=True,
    knobs={"block_group": 2},
)


def gpu_preset(**changes: Any) -> Preset:
    return make_preset(config=TUNED, fingerprint=gpu_fingerprint(), **changes)


def test_hf_maps_each_setting() -> None:
    exported = export_preset(gpu_preset(), "hf")
    args = yaml.safe_load(exported.text)
    assert args == exported.data
    assert args["per_device_train_batch_size"] == 8
    assert args["gradient_accumulation_steps"] == 4
    assert (args["bf16"], args["fp16"], args["tf32"]) == (True, False, False)
    assert args["gradient_checkpointing"] is True
    assert (args["torch_compile"], args["torch_compile_mode"]) == (True, "max-autotune")
    assert args["dataloader_num_workers"] == 2
    assert args["dataloader_pin_memory"] is True
    assert args["dataloader_prefetch_factor"] == 4
    assert args["dataloader_persistent_workers"] is True
    assert args["dataloader_drop_last"] is True
    assert args["optim"] == "adamw_torch_fused"
    assert args["use_cpu"] is False
    assert args["learning_rate"] == 6e-4 and args["max_steps"] == 2000
    assert args["lr_scheduler_type"] == "cosine_with_min_lr"
    assert args["lr_scheduler_kwargs"] == {"min_lr_rate": 0.1}


def test_every_format_lists_what_it_cannot_carry() -> None:
    for fmt in ("hf", "lightning", "accelerate", "deepspeed"):
        exported = export_preset(gpu_preset(), fmt)
        text = "\n".join(exported.unmapped)
        assert "config.knobs.block_group=2" in text, fmt
        assert "budget_bytes=8000000000" in text, fmt
        assert "task.seq_len=64" in text, fmt
        assert "model 'mu'" in text, fmt
        if fmt != "deepspeed":  # JSON has no comments: the CLI prints the notes
            for line in exported.unmapped:
                assert f"#   - {line}" in exported.text, fmt


def test_fp32_and_fp16_and_uncompiled() -> None:
    plain = make_preset(config=make_config())
    hf = export_preset(plain, "hf").data
    assert hf is not None
    assert (hf["bf16"], hf["fp16"], hf["torch_compile"], hf["optim"]) == (
        False,
        False,
        False,
        "adamw_torch",
    )
    assert "torch_compile_mode" not in hf and "dataloader_prefetch_factor" not in hf
    assert hf["use_cpu"] is True
    lightning = export_preset(plain, "lightning").data
    assert lightning is not None
    assert lightning["trainer"]["precision"] == "32-true" and lightning["compile"] is None
    fp16 = make_preset(config=make_config(precision="fp16"), fingerprint=gpu_fingerprint())
    ds = export_preset(fp16, "deepspeed").data
    assert ds is not None
    assert ds["fp16"]["enabled"] is True and ds["bf16"]["enabled"] is False
    assert export_preset(fp16, "accelerate").data["mixed_precision"] == "fp16"  # type: ignore[index]
    tf32 = make_preset(config=make_config(precision="tf32"), fingerprint=gpu_fingerprint())
    assert export_preset(tf32, "hf").data["tf32"] is True  # type: ignore[index]
    lit = export_preset(tf32, "lightning").data
    assert lit is not None and lit["float32_matmul_precision"] == "high"


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_the_global_batch_is_kept_over_processes(nproc: int) -> None:
    preset = gpu_preset()  # micro-batch 8 x accumulation 4 = 32
    ds = export_preset(preset, "deepspeed", nproc=nproc).data
    assert ds is not None
    assert ds["train_micro_batch_size_per_gpu"] == 8
    assert ds["gradient_accumulation_steps"] == 4 // nproc
    assert ds["train_batch_size"] == 32
    hf = export_preset(preset, "hf", nproc=nproc).data
    assert hf is not None and hf["gradient_accumulation_steps"] * nproc * 8 == 32
    lit = export_preset(preset, "lightning", nproc=nproc).data
    assert lit is not None and lit["trainer"]["devices"] == nproc
    assert lit["trainer"]["accumulate_grad_batches"] == 4 // nproc
    acc = export_preset(preset, "accelerate", nproc=nproc).data
    assert acc is not None and acc["num_processes"] == nproc
    assert acc["distributed_type"] == ("NO" if nproc == 1 else "MULTI_GPU")
    run = export_preset(preset, "torchrun", nproc=nproc, preset_ref="best.yaml")
    assert f"--nproc-per-node {nproc} -m autotune train --preset best.yaml" in run.text
    assert f"accumulation {4 // nproc}" in run.text


def test_a_process_count_that_splits_no_batch_is_refused() -> None:
    with pytest.raises(ConfigError, match="4 does not split over 3 processes"):
        export_preset(gpu_preset(), "hf", nproc=3)
    with pytest.raises(UsageError, match="expected one of json, yaml, hf"):
        export_preset(gpu_preset(), "xml")
    with pytest.raises(UsageError, match="nproc"):
        export_preset(gpu_preset(), "hf", nproc=0)


def test_torchrun_for_user_code_asks_for_consent() -> None:
    preset = make_preset(model=ModelRef(name="my_model.py:spec"))
    text = export_preset(preset, "torchrun", preset_ref="best.yaml").text
    assert "--trust-model" in text and "read it before running" in text
    assert "--trust-model" not in export_preset(make_preset(), "torchrun").text


def test_exporting_never_imports_the_model(tmp_path: Path) -> None:
    planted = tmp_path / "evil.py"
    planted.write_text("raise SystemExit('imported!')\n")
    preset = make_preset(model=ModelRef(name=f"{planted}:spec"))
    for fmt in EXPORT_FORMATS:
        assert export_preset(preset, fmt, preset_ref="p.yaml").text


def test_cli_export_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    places = wire_preset_places(tmp_path, monkeypatch)
    save_preset(gpu_preset(), places["cwd"] / "best.yaml")
    runner = CliRunner()
    out = runner.invoke(app, ["presets", "export", "best.yaml", "--format", "deepspeed"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["train_batch_size"] == 32
    assert "note: not mapped: config.knobs.block_group=2" in out.stderr
    target = places["cwd"] / "args.yaml"
    written = runner.invoke(
        app,
        ["presets", "export", "best.yaml", "--format", "hf", "--nproc", "2", "-o", str(target)],
    )
    assert written.exit_code == 0, written.output
    assert yaml.safe_load(target.read_text())["gradient_accumulation_steps"] == 2
    odd = runner.invoke(app, ["presets", "export", "best.yaml", "--format", "hf", "--nproc", "3"])
    assert odd.exit_code == 2 and "does not split over 3 processes" in odd.output
    # export has no --set: the advice names the command that takes it
    assert "autotune train: --set config.grad_accum" in odd.output.replace("\n", " ")
    run = runner.invoke(app, ["presets", "export", "best.yaml", "--format", "torchrun"])
    assert run.exit_code == 0 and "--preset best.yaml" in run.stdout
    # a process count past the bound of one machine, or one a format does not use
    for fmt, nproc, said in (
        ("torchrun", "1073741824", "expected an integer of at most 1024"),
        ("json", "2", "the json format writes the preset as it is"),
    ):
        refused = runner.invoke(app, ["presets", "export", "best.yaml", "--format", fmt,
                                      "--nproc", nproc])  # fmt: skip
        assert refused.exit_code == 2 and said in refused.output, refused.output
