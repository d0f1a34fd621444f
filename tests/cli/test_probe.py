"""`autotune probe`: the table and the --json schema, through the real Typer app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.machine import hardware
from autotune.machine.profile import SCHEMA_VERSION, HardwareProfile
from autotune.testing.nvml import FakeGPU, gpu_stack, no_gpu_stack

runner = CliRunner()


def _use_fakes(monkeypatch: pytest.MonkeyPatch, nvml: object, cuda: object) -> None:
    real_probe = hardware.probe
    monkeypatch.setattr(hardware, "probe", lambda: real_probe(nvml=nvml, cuda=cuda))


def test_probe_json_parses_and_has_the_documented_keys() -> None:
    result = runner.invoke(app, ["probe", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    assert set(data) == {"schema_version", "default_device", "gpus", "cpu", "software", "notes"}
    assert data["software"]["torch_version"] == torch.__version__
    assert data["cpu"]["logical_cores"] >= 1
    assert data["default_device"] == ("cuda:0" if data["gpus"] else "cpu")
    assert HardwareProfile.from_dict(data).cpu.model_name == data["cpu"]["model_name"]


def test_probe_json_with_a_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_fakes(monkeypatch, *gpu_stack([FakeGPU()]))
    result = runner.invoke(app, ["probe", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (gpu,) = data["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["compute_capability"] == [9, 0]
    assert gpu["source"] == "nvml" and gpu["power_limit_watts"] == 700.0
    assert data["default_device"] == "cuda:0"


def test_the_help_names_the_page_that_documents_every_json_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`probe --help` points at the schema's page, and that page has a row for every key
    the JSON holds (a faked GPU, so the gpus[] keys are there too)."""
    help_text = " ".join(runner.invoke(app, ["probe", "--help"]).output.split())
    assert "docs/probe.md" in help_text
    page = (Path(__file__).resolve().parents[2] / "docs" / "probe.md").read_text()
    _use_fakes(monkeypatch, *gpu_stack([FakeGPU()]))
    data = json.loads(runner.invoke(app, ["probe", "--json"]).stdout)
    keys = [k for k in data if k not in ("cpu", "software")]  # those two: a row per key
    keys += [f"gpus[].{k}" for k in data["gpus"][0]]
    keys += [f"{section}.{k}" for section in ("cpu", "software") for k in data[section]]
    missing = [k for k in keys if f"`{k}`" not in page and f"`{k}[]`" not in page]
    assert not missing, f"docs/probe.md has no row for {missing}"


def test_probe_table_without_gpu_says_so_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_fakes(monkeypatch, *no_gpu_stack())
    result = runner.invoke(app, ["probe"])
    assert result.exit_code == 0, result.output
    assert "No NVIDIA GPU found; the device is the CPU." in result.stdout
    assert "cpu (the device)" in result.stdout
    profile = hardware.probe()  # the patched, GPU-less one
    assert profile.cpu.model_name in result.stdout
    assert profile.cpu.generation in result.stdout  # "family F, model M" on x86
    assert "cuda:0" not in result.stdout


def test_probe_table_with_a_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGPU(processes=((1234, 2**30),))
    _use_fakes(monkeypatch, *gpu_stack([gpu]))
    result = runner.invoke(app, ["probe"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "1 NVIDIA GPU(s); the default device is cuda:0 (NVIDIA H100 80GB HBM3)" in out
    assert "No NVIDIA GPU" not in out
    for expected in ("9.0", "132", "bf16 989.4 T", "700 W", "pid 1234", "550.54.15"):
        assert expected in out, expected


def test_probe_of_this_machine_table() -> None:
    result = runner.invoke(app, ["probe"])
    assert result.exit_code == 0, result.output
    if not torch.cuda.is_available():
        assert "No NVIDIA GPU found; the device is the CPU." in result.stdout
    assert "Software" in result.stdout and torch.__version__ in result.stdout


def test_probe_rejects_an_unknown_option() -> None:
    result = runner.invoke(app, ["probe", "--jsn"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "module", ["autotune.cli.probe", "autotune.machine", "autotune.machine.hardware"]
)
def test_importing_the_probe_command_does_not_import_torch(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'rich') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
