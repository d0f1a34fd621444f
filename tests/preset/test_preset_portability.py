"""Portability: this device against the one a preset was measured on."""

from __future__ import annotations

import pytest
from fake_presets import (
    A100,
    CPU_MODEL,
    GiB,
    cpu_fingerprint,
    gpu_fingerprint,
    make_config,
    make_gpu,
    make_preset,
    make_profile,
)

from autotune.core.errors import HardwareMismatchError
from autotune.preset import Fingerprint, Measured, check_portability


def test_same_gpu_model_is_fine() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="bf16"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert report.same_device and not report.measured_elsewhere
    assert report.device == "cuda:0" and report.device_name == A100
    assert report.warnings == []
    assert report.differences == []


def test_same_gpu_with_other_software_lists_the_differences() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(torch_version="2.4.0", driver_version="1"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert report.same_device and not report.measured_elsewhere
    assert "torch_version: preset 2.4.0 vs here 2.13.0" in report.differences
    assert "driver_version: preset 1 vs here 550.54.15" in report.differences
    assert any("torch 2.4.0" in w for w in report.warnings)


def test_a_different_gpu_is_a_warning_and_measured_elsewhere() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(name="NVIDIA H100 80GB HBM3", cc="9.0"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert not report.same_device and report.measured_elsewhere
    assert "device_name: preset NVIDIA H100 80GB HBM3 vs here " + A100 in report.differences
    assert "compute_capability: preset 9.0 vs here 8.0" in report.differences
    assert any("measured elsewhere" in w for w in report.warnings)


def test_a_different_cpu_is_a_warning_and_measured_elsewhere() -> None:
    preset = make_preset()
    here = make_profile(cpu_model="AMD EPYC 7B12", cores=8)
    report = check_portability(preset, here)
    assert report.measured_elsewhere and report.device == "cpu"
    assert f"cpu_model: preset {CPU_MODEL} vs here AMD EPYC 7B12" in report.differences
    same = check_portability(preset, make_profile())
    assert same.same_device and same.warnings == []


def test_one_cpu_name_of_another_family_or_model_number_is_measured_elsewhere() -> None:
    """A VM that names only the brand may be one generation or another (mu's preset at
    3,889 and 6,785 tokens/s on two "AMD EPYC"s): the family and model numbers tell them
    apart where both fingerprints have them; an older preset, without them, as before."""
    here = make_profile(family=26, model_number=2)
    fingerprint = Fingerprint.from_profile(here, "cpu")
    assert (fingerprint.cpu_family, fingerprint.cpu_model_number) == (26, 2)
    assert fingerprint.describe() == f"{CPU_MODEL} (family 26, model 2; cpu, 2 cores)"
    assert check_portability(make_preset(fingerprint=fingerprint), here).same_device
    for family, model_number in ((25, 2), (26, 1)):
        there = cpu_fingerprint(cpu_family=family, cpu_model_number=model_number)
        report = check_portability(make_preset(fingerprint=there), here)
        assert not report.same_device and report.measured_elsewhere
        assert any(f"family {family}, model {model_number}; cpu" in w for w in report.warnings)
    older = check_portability(make_preset(), here)
    assert older.same_device and older.warnings == []


def test_bf16_on_a_pre_ampere_gpu_is_refused_with_fp16_as_the_fallback() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="bf16"))
    v100 = make_profile(gpus=(make_gpu(name="Tesla V100-SXM2-16GB", cc=(7, 0), total=16 * GiB),))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, v100)
    message = str(info.value)
    assert "bf16" in message and "Tesla V100-SXM2-16GB is 7.0" in message
    assert "use fp16 instead" in message and "config.precision: fp16" in message
    assert info.value.exit_code == 2
    # force does not make bf16 run on a V100
    with pytest.raises(HardwareMismatchError):
        check_portability(preset, v100, force=True)


def test_tf32_on_a_pre_ampere_gpu_is_refused_with_fp32() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="tf32"))
    t4 = make_profile(gpus=(make_gpu(name="Tesla T4", cc=(7, 5), total=16 * GiB),))
    with pytest.raises(HardwareMismatchError, match=r"tf32 .* use fp32"):
        check_portability(preset, t4)


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_fp16_or_tf32_on_a_cpu_is_refused(precision: str) -> None:
    preset = make_preset(config=make_config(precision=precision))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, make_profile())
    message = str(info.value)
    assert f"config.precision {precision} needs a CUDA device" in message
    assert "use fp32" in message
    with pytest.raises(HardwareMismatchError, match=r"use fp32 or bf16 .*native bf16"):
        check_portability(preset, make_profile(isa=("avx2", "avx512_bf16")))


def test_a_gpu_preset_on_a_machine_without_gpu_checks_the_cpu() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="fp16"))
    with pytest.raises(HardwareMismatchError, match="fp16 needs a CUDA device"):
        check_portability(preset, make_profile())
    fp32 = make_preset(fingerprint=gpu_fingerprint())
    report = check_portability(fp32, make_profile())
    assert report.device == "cpu" and report.measured_elsewhere
    assert "device_kind: preset cuda vs here cpu" in report.differences


def test_bf16_on_a_cpu_without_bf16_units_is_a_warning() -> None:
    preset = make_preset(config=make_config(precision="bf16"))
    report = check_portability(preset, make_profile())
    assert any("emulated" in w for w in report.warnings)
    native = check_portability(preset, make_profile(isa=("amx_bf16",)))
    assert not any("emulated" in w for w in native.warnings)


def test_peak_memory_above_free_gpu_memory_is_refused_unless_forced() -> None:
    measured = Measured(tokens_per_s=1.0, peak_memory_bytes=30 * GiB)
    preset = make_preset(fingerprint=gpu_fingerprint(), measured=measured)
    busy = make_profile(gpus=(make_gpu(free=20 * GiB),))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, busy)
    assert "peak memory 30.00 GiB exceeds the 20.00 GiB of free GPU memory" in str(info.value)
    assert "--force" in str(info.value)
    report = check_portability(preset, busy, force=True)
    assert any("forced" in w and "30.00 GiB" in w for w in report.warnings)
    assert check_portability(preset, make_profile(gpus=(make_gpu(free=31 * GiB),))).warnings == []


def test_peak_memory_above_available_ram_is_refused_on_cpu() -> None:
    preset = make_preset(measured=Measured(samples_per_s=5.0, peak_memory_bytes=13 * GiB))
    with pytest.raises(HardwareMismatchError, match="of available RAM on this machine"):
        check_portability(preset, make_profile(available=12 * GiB))
    report = check_portability(preset, make_profile(available=12 * GiB), force=True)
    assert report.same_device and len(report.warnings) == 1


def test_unknown_free_memory_and_unknown_peak_are_warnings() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), measured=Measured(tokens_per_s=1.0))
    report = check_portability(preset, make_profile(gpus=(make_gpu(free=None),)))
    assert any("records no peak memory" in w for w in report.warnings)
    preset = make_preset(fingerprint=gpu_fingerprint())
    report = check_portability(preset, make_profile(gpus=(make_gpu(free=None),)))
    assert any("free memory of cuda:0" in w for w in report.warnings)


def test_an_explicit_device_is_checked() -> None:
    profile = make_profile(gpus=(make_gpu(index=0), make_gpu(index=1, name="Tesla T4", cc=(7, 5))))
    preset = make_preset(fingerprint=gpu_fingerprint())
    assert check_portability(preset, profile, "cuda:1").device_name == "Tesla T4"
    assert check_portability(preset, profile, "cpu").device == "cpu"
    with pytest.raises(HardwareMismatchError, match="does not exist here"):
        check_portability(preset, profile, "cuda:7")


def test_a_few_kib_of_memory_are_no_difference_but_another_size_is() -> None:
    """presets check said 'memory_bytes: preset 23.54 GiB vs here 23.54 GiB': the kernel's
    count of the same RAM moves by some KiB between boots."""
    import dataclasses

    preset = make_preset()
    near = dataclasses.replace(preset.fingerprint, memory_bytes=16 * GiB - 300 * 1024)
    report = check_portability(dataclasses.replace(preset, fingerprint=near), make_profile())
    assert not any(d.startswith("memory_bytes") for d in report.differences)
    far = dataclasses.replace(preset.fingerprint, memory_bytes=32 * GiB)
    report = check_portability(dataclasses.replace(preset, fingerprint=far), make_profile())
    assert "memory_bytes: preset 32.00 GiB vs here 16.00 GiB" in report.differences
