"""machine: the GPU path through a faked NVML / torch.cuda, the CPU path for real."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys

import psutil
import pytest
import torch
import yaml

from autotune.core.device_caps import parse_device, peak_flops
from autotune.core.errors import ConfigError, HardwareMismatchError, UsageError
from autotune.machine import hardware
from autotune.machine.hardware import parse_cpu_family, parse_cpuinfo, probe
from autotune.machine.profile import ISA_FLAGS, SCHEMA_VERSION, HardwareProfile
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.nvml import FakeCuda, FakeGPU, FakeNVML, GiB, gpu_stack, no_gpu_stack

H100 = FakeGPU(processes=((4242, 3 * GiB), (4243, None)))
A10G = FakeGPU(
    name="NVIDIA A10G",
    uuid="0badcafe-0000-0000-0000-000000000002",
    total=24 * GiB,
    free=20 * GiB,
    cc=(8, 6),
    sm_count=80,
    power_mw=300_000,
    sm_clock=1710,
    mem_clock=6251,
)
V100 = FakeGPU(
    name="Tesla V100-SXM2-16GB",
    uuid="5eedf00d-0000-0000-0000-000000000003",
    total=16 * GiB,
    cc=(7, 0),
    sm_count=80,
)


# --- the GPU path, faked ------------------------------------------------------------------


def test_nvml_reports_every_field_per_gpu() -> None:
    nvml, cuda = gpu_stack([H100, A10G])
    profile = probe(nvml=nvml, cuda=cuda)

    h100, a10g = profile.gpus
    assert h100.index == 0 and a10g.index == 1
    assert h100.name == "NVIDIA H100 80GB HBM3"
    assert h100.total_memory_bytes == 80 * GiB and h100.free_memory_bytes == 79 * GiB
    assert h100.compute_capability == (9, 0) and a10g.compute_capability == (8, 6)
    assert h100.sm_count == 132 and a10g.sm_count == 80  # from torch: NVML does not say
    assert h100.bf16_supported and h100.tf32_supported
    assert h100.driver_version == "550.54.15" and h100.driver_cuda_version == "12.4"
    assert h100.cuda_version == torch.version.cuda
    assert h100.power_limit_watts == 700.0 and a10g.power_limit_watts == 300.0
    assert (h100.max_sm_clock_mhz, h100.max_memory_clock_mhz) == (1980, 2619)
    assert (a10g.max_sm_clock_mhz, a10g.max_memory_clock_mhz) == (1710, 6251)
    assert h100.uuid == H100.uuid
    assert h100.source == "nvml" and a10g.source == "nvml"
    assert h100.processes is not None
    assert [(p.pid, p.used_memory_bytes) for p in h100.processes] == [
        (4242, 3 * GiB),
        (4243, None),
    ]
    assert a10g.processes == ()
    assert profile.default_device == "cuda:0"
    assert profile.notes == ()
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


def test_gpus_are_numbered_as_torch_numbers_them_matched_by_uuid() -> None:
    # NVML lists by PCI bus; torch (CUDA_DEVICE_ORDER=FASTEST_FIRST) may list otherwise.
    nvml = FakeNVML([A10G, H100])
    cuda = FakeCuda([H100, A10G])
    profile = probe(nvml=nvml, cuda=cuda)
    assert [g.name for g in profile.gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA A10G"]
    assert profile.gpus[0].power_limit_watts == 700.0  # NVML data of the right card
    assert profile.gpus[1].sm_count == 80


@pytest.mark.parametrize(
    ("failing", "field", "expected"),
    [
        ("nvmlDeviceGetEnforcedPowerLimit", "power_limit_watts", None),
        ("nvmlDeviceGetMaxClockInfo", "max_sm_clock_mhz", None),
        ("nvmlDeviceGetComputeRunningProcesses", "processes", None),
        ("nvmlDeviceGetMemoryInfo", "free_memory_bytes", None),
        ("nvmlDeviceGetMemoryInfo", "total_memory_bytes", 80 * GiB),  # torch's figure
        ("nvmlDeviceGetName", "name", "NVIDIA H100 80GB HBM3"),  # torch's name
        ("nvmlDeviceGetCudaComputeCapability", "compute_capability", (9, 0)),  # torch's
    ],
)
def test_one_failing_nvml_query_costs_only_its_field(
    failing: str, field: str, expected: object
) -> None:
    gpu = dataclasses.replace(H100, failing=frozenset({failing}))
    nvml, cuda = gpu_stack([gpu])
    profile = probe(nvml=nvml, cuda=cuda)
    (info,) = profile.gpus
    assert failing in nvml.calls  # the query really was made, and failed
    assert getattr(info, field) == expected
    assert info.source == "nvml"
    assert info.driver_version == "550.54.15"  # the rest of the probe is intact
    assert info.max_memory_clock_mhz == (None if failing == "nvmlDeviceGetMaxClockInfo" else 2619)


def test_failing_nvml_falls_back_to_torch_cuda_with_a_note() -> None:
    import pynvml

    nvml, cuda = gpu_stack([H100], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    profile = probe(nvml=nvml, cuda=cuda)

    (info,) = profile.gpus
    assert info.source == "torch"
    assert info.name == H100.name
    assert info.total_memory_bytes == H100.total
    assert info.free_memory_bytes == H100.free  # torch.cuda.mem_get_info
    assert info.compute_capability == (9, 0) and info.sm_count == 132
    assert info.bf16_supported and info.tf32_supported
    assert info.driver_version is None and info.power_limit_watts is None
    assert info.processes is None  # unknown, not "none"
    assert "nvmlShutdown" not in nvml.calls  # never initialised, never shut down
    (note,) = profile.notes
    assert "NVML unavailable" in note and "Driver Not Loaded" in note and "torch.cuda" in note


def test_missing_pynvml_falls_back_to_torch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    profile = probe(cuda=FakeCuda([A10G]))
    (info,) = profile.gpus
    assert info.source == "torch" and info.name == "NVIDIA A10G"
    assert any("pynvml not importable" in note for note in profile.notes)


def test_nvml_that_cannot_list_devices_falls_back_and_shuts_down() -> None:
    import pynvml

    nvml, cuda = gpu_stack([H100], count_error=pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN))
    profile = probe(nvml=nvml, cuda=cuda)
    assert [g.source for g in profile.gpus] == ["torch"]
    assert nvml.calls[-1] == "nvmlShutdown"
    assert any(note.startswith("NVML failed") for note in profile.notes)


def test_a_machine_without_gpu_reports_the_cpu_as_the_device() -> None:
    nvml, cuda = no_gpu_stack()
    profile = probe(nvml=nvml, cuda=cuda)
    assert profile.gpus == ()
    assert profile.default_device == "cpu"
    caps = profile.device()
    assert caps.device == "cpu" and caps.kind == "cpu"
    assert caps.total_memory_bytes == profile.cpu.total_ram_bytes
    with pytest.raises(HardwareMismatchError, match=r"no NVIDIA GPU.*only device is cpu"):
        profile.device("cuda")


def test_gpus_torch_cannot_use_are_named_in_a_note() -> None:
    nvml = FakeNVML([H100])
    profile = probe(nvml=nvml, cuda=FakeCuda([], available=False))
    assert profile.gpus == ()
    assert profile.default_device == "cpu"
    (note,) = profile.notes
    assert "NVML sees 1 NVIDIA GPU(s) (NVIDIA H100 80GB HBM3)" in note
    if torch.version.cuda is None:
        assert "CPU build" in note
    with pytest.raises(HardwareMismatchError, match="NVIDIA H100"):
        profile.device("cuda:0")  # the error carries the hint


def test_gpus_hidden_from_torch_are_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    profile = probe(nvml=FakeNVML([H100, A10G]), cuda=FakeCuda([A10G]))
    assert [(g.index, g.name) for g in profile.gpus] == [(0, "NVIDIA A10G")]
    assert any("1 more GPU(s)" in n and "CUDA_VISIBLE_DEVICES='1'" in n for n in profile.notes)


def test_torch_device_without_nvml_match_uses_torch_for_that_device() -> None:
    mig = dataclasses.replace(A10G, uuid="mig-slice-not-in-nvml")
    profile = probe(nvml=FakeNVML([H100]), cuda=FakeCuda([H100, mig]))
    assert [g.source for g in profile.gpus] == ["nvml", "torch"]
    assert any("cuda:1" in note and "no matching NVML device" in note for note in profile.notes)


def test_pre_ampere_gpu_has_no_bf16_or_tf32() -> None:
    nvml, cuda = gpu_stack([V100])
    profile = probe(nvml=nvml, cuda=cuda)
    (info,) = profile.gpus
    assert not info.bf16_supported and not info.tf32_supported
    caps = profile.device("cuda")
    assert (caps.bf16, caps.tf32, caps.fp16) == (False, False, True)
    assert caps.peak_flops_bf16 is None and caps.peak_flops_fp32 == 15.7e12
    assert caps.compile == profile.software.compile_available  # cc 7.0 is enough for Triton


def test_nvml_not_available_process_memory_is_none() -> None:
    gpu = dataclasses.replace(H100, processes=((7, 2**64 - 1), (8, 5 * GiB)))
    nvml, cuda = gpu_stack([gpu])
    (info,) = probe(nvml=nvml, cuda=cuda).gpus
    assert info.processes is not None
    assert [p.used_memory_bytes for p in info.processes] == [None, 5 * GiB]


def test_process_names_are_read_where_the_process_is_visible() -> None:
    gpu = dataclasses.replace(H100, processes=((os.getpid(), GiB),))
    nvml, cuda = gpu_stack([gpu])
    (info,) = probe(nvml=nvml, cuda=cuda).gpus
    assert info.processes is not None
    assert info.processes[0].name == psutil.Process().name()


# --- device() -----------------------------------------------------------------------------


def test_device_caps_of_each_gpu() -> None:
    nvml, cuda = gpu_stack([H100, A10G])
    profile = probe(nvml=nvml, cuda=cuda)
    assert profile.devices == ("cpu", "cuda:0", "cuda:1")
    assert profile.device().device == "cuda:0"
    assert profile.device("cuda").device == "cuda:0"
    assert profile.device(" CUDA:1 ").name == "NVIDIA A10G"
    h100 = profile.device("cuda:0")
    assert (h100.kind, h100.bf16, h100.bf16_native, h100.fp16, h100.tf32) == (
        "cuda",
        True,
        True,
        True,
        True,
    )
    assert h100.total_memory_bytes == 80 * GiB
    assert h100.peak_flops_bf16 == 989.4e12
    assert h100.peak_flops("bf16") == h100.peak_flops("fp16") == 989.4e12
    assert h100.peak_flops("tf32") == 494.7e12
    assert h100.compile == profile.software.compile_available


def test_device_caps_of_the_cpu(fake_h100_profile: HardwareProfile) -> None:
    caps = fake_h100_profile.device("cpu")
    cpu = fake_h100_profile.cpu
    assert (caps.kind, caps.bf16, caps.fp16, caps.tf32) == ("cpu", True, False, False)
    assert caps.bf16_native == cpu.bf16_native
    assert caps.compile == fake_h100_profile.software.compile_cpu_available
    assert caps.total_memory_bytes == cpu.total_ram_bytes
    assert caps.peak_flops_bf16 is None and caps.peak_flops_fp32 is None


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("cuda:3", HardwareMismatchError, r"no GPU cuda:3.*cpu, cuda:0 \(NVIDIA H100 80GB HBM3\)"),
        ("tpu", UsageError, r"unknown device 'tpu'.*cpu, cuda or cuda:N"),
        ("cuda:x", UsageError, r"unknown device 'cuda:x'"),
        ("mps", UsageError, r"this machine has cpu, cuda:0"),
    ],
)
def test_device_rejects_what_does_not_exist(
    fake_h100_profile: HardwareProfile, name: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as info:
        fake_h100_profile.device(name)
    assert isinstance(info.value, UsageError)  # exit code 2 at the CLI


def test_peak_flops_of_unknown_precision_is_a_usage_error(
    fake_h100_profile: HardwareProfile,
) -> None:
    with pytest.raises(UsageError, match="'fp8'"):
        fake_h100_profile.device().peak_flops("fp8")


def test_parse_device_reads_a_name_without_a_machine() -> None:
    assert parse_device("cpu") == ("cpu", None)
    assert parse_device("cuda") == ("cuda", None)
    assert parse_device(" CUDA:1 ") == ("cuda", 1)
    for bad in ("tpu", "cuda:", "cuda:x", "cuda1", ""):
        with pytest.raises(UsageError, match="expected cpu, cuda or cuda:N"):
            parse_device(bad)


def test_resolve_device_gives_the_canonical_name_and_its_gpu() -> None:
    nvml, cuda = gpu_stack([H100, A10G])
    profile = probe(nvml=nvml, cuda=cuda)
    assert profile.resolve_device("cpu") == ("cpu", None)
    assert profile.resolve_device() == ("cuda:0", profile.gpus[0])
    assert profile.resolve_device("cuda") == ("cuda:0", profile.gpus[0])
    assert profile.resolve_device(" CUDA:1 ") == ("cuda:1", profile.gpus[1])
    with pytest.raises(HardwareMismatchError, match="'cuda:2' does not exist here"):
        profile.resolve_device("cuda:2")


def test_device_caps_say_which_precisions_run() -> None:
    nvml, cuda = gpu_stack([H100, V100])
    profile = probe(nvml=nvml, cuda=cuda)
    h100, v100 = profile.device("cuda:0"), profile.device("cuda:1")
    assert h100.precisions == ("fp32", "tf32", "bf16", "fp16")
    assert v100.precisions == ("fp32", "fp16")
    assert v100.compute_capability == (7, 0)
    assert cpu_caps().precisions == ("fp32", "bf16")
    for caps in (h100, v100, cpu_caps()):
        for precision in ("fp32", "tf32", "bf16", "fp16"):
            runs = precision in caps.precisions
            assert (caps.precision_problem(precision) is None) == runs
            assert (caps.fallback_precision(precision) == precision) == runs


def test_a_precision_problem_says_why_and_what_to_use_instead() -> None:
    nvml, cuda = gpu_stack([V100])
    v100 = probe(nvml=nvml, cuda=cuda).device("cuda:0")
    bf16 = v100.precision_problem("bf16")
    assert bf16 is not None and "Tesla V100-SXM2-16GB is 7.0" in bf16
    assert "use fp16 instead" in bf16 and v100.fallback_precision("bf16") == "fp16"
    assert re.search(
        r"tf32 .* use fp32 \(or fp16 for speed\)", v100.precision_problem("tf32") or ""
    )
    assert v100.fallback_precision("tf32") == "fp32"
    old = cuda_caps(ampere=False)  # compute capability unknown
    assert "bf16 needs compute capability 8.0 or newer" in (old.precision_problem("bf16") or "")
    for precision in ("fp16", "tf32"):
        slow = cpu_caps().precision_problem(precision) or ""
        assert f"{precision} needs a CUDA device" in slow and "use fp32 (bf16 also runs" in slow
        native = cpu_caps(bf16_native=True).precision_problem(precision) or ""
        assert "use fp32 or bf16 (this CPU has native bf16)" in native
        assert cpu_caps().fallback_precision(precision) == "fp32"


def test_bf16_on_a_cpu_without_bf16_units_runs_with_a_warning() -> None:
    assert "emulated" in (cpu_caps().precision_warning("bf16") or "")
    assert cpu_caps(bf16_native=True).precision_warning("bf16") is None
    assert cpu_caps().precision_warning("fp32") is None
    assert cuda_caps().precision_warning("bf16") is None


@pytest.mark.parametrize("method", ["precision_problem", "precision_warning", "fallback_precision"])
def test_an_unknown_precision_is_a_usage_error(method: str) -> None:
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        getattr(cpu_caps(), method)("fp8")


@pytest.mark.parametrize(
    ("name", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200", 989.4e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100 80GB PCIe", 312e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", None),
        ("NVIDIA A10", 125e12),
        ("NVIDIA A10G", 125e12),
        ("NVIDIA A100X", None),
        ("NVIDIA GeForce RTX 4090", 165.2e12),
        ("Tesla V100-PCIE-32GB", None),
        ("Some Future GPU", None),
    ],
)
def test_peak_flops_table(name: str, bf16: float | None) -> None:
    assert peak_flops(name)["bf16"] == bf16


# --- to_dict / from_dict ------------------------------------------------------------------


def _keys(data: object, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            keys.add(key)
            keys |= _keys(value)
    elif isinstance(data, list):
        for item in data:
            keys |= _keys(item)
    return keys


def test_to_dict_is_plain_json_and_yaml_and_documented_key_by_key(
    fake_h100_profile: HardwareProfile,
) -> None:
    data = fake_h100_profile.to_dict()
    assert json.loads(json.dumps(data)) == data  # no tuples, nothing JSON cannot hold
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # presets embed it
    assert list(data) == ["schema_version", "default_device", "gpus", "cpu", "software", "notes"]
    assert data["schema_version"] == SCHEMA_VERSION
    gpu = data["gpus"][0]
    assert gpu["compute_capability"] == [9, 0]
    assert gpu["peak_flops_bf16"] == 989.4e12
    assert data["cpu"]["bf16_native"] == fake_h100_profile.cpu.bf16_native
    doc = HardwareProfile.to_dict.__doc__ or ""
    undocumented = sorted(k for k in _keys(data) if f"``{k}``" not in doc)
    assert undocumented == [], "document these keys in HardwareProfile.to_dict"


def test_from_dict_round_trips(fake_h100_profile: HardwareProfile) -> None:
    data = json.loads(json.dumps(fake_h100_profile.to_dict()))
    again = HardwareProfile.from_dict(data)
    assert again == fake_h100_profile
    assert again.device("cuda:0") == fake_h100_profile.device("cuda:0")


def test_from_dict_round_trips_a_cpu_only_profile(cpu_only_profile: HardwareProfile) -> None:
    assert HardwareProfile.from_dict(cpu_only_profile.to_dict()) == cpu_only_profile


def test_from_dict_ignores_keys_it_does_not_know(fake_h100_profile: HardwareProfile) -> None:
    data = fake_h100_profile.to_dict()
    data["added_by_a_newer_autotune"] = 1
    data["gpus"][0]["mig_mode"] = "off"
    assert HardwareProfile.from_dict(data) == fake_h100_profile


def test_from_dict_reports_every_bad_field_with_its_path(
    fake_h100_profile: HardwareProfile,
) -> None:
    data = fake_h100_profile.to_dict()
    del data["cpu"]["model_name"]
    data["gpus"][0]["compute_capability"] = [9]
    data["gpus"][0]["source"] = "opencl"
    data["software"]["torch_version"] = 2.4
    with pytest.raises(ConfigError) as info:
        HardwareProfile.from_dict(data)
    problems = "\n".join(info.value.problems)
    assert "hardware.cpu.model_name: missing required field" in problems
    assert "hardware.gpus[0].compute_capability: expected 2 items; got [9]" in problems
    assert "hardware.gpus[0].source: expected one of nvml, torch; got 'opencl'" in problems
    assert "hardware.software.torch_version: expected a string; got 2.4" in problems
    with pytest.raises(ConfigError, match="expected a mapping"):
        HardwareProfile.from_dict([1, 2])


# --- the CPU path, for real ---------------------------------------------------------------


def test_probe_of_this_machine_cpu_and_software() -> None:
    profile = probe()
    cpu = profile.cpu
    assert cpu.logical_cores == psutil.cpu_count(logical=True)
    assert cpu.physical_cores == psutil.cpu_count(logical=False)
    assert cpu.total_ram_bytes == psutil.virtual_memory().total
    assert 0 < cpu.available_ram_bytes <= cpu.total_ram_bytes
    assert cpu.torch_threads == torch.get_num_threads()
    assert set(cpu.isa_flags) <= set(ISA_FLAGS)
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name, flags = parse_cpuinfo(f.read())
        assert cpu.model_name == (name or cpu.model_name)
        assert set(cpu.isa_flags) == flags & set(ISA_FLAGS)
    software = profile.software
    assert software.torch_version == torch.__version__
    assert software.torch_cuda_version == torch.version.cuda
    assert software.compile_cpu_reason and software.compile_reason
    import optuna

    assert software.optuna_version == optuna.__version__
    assert software.autotune_version == __import__("autotune").__version__
    if not torch.cuda.is_available():
        assert profile.gpus == () and profile.default_device == "cpu"


def test_parse_cpuinfo_x86_and_arm() -> None:
    x86 = (
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\n"
        "processor\t: 1\nmodel name\t: something else\nflags\t\t: fpu\n"
    )
    name, flags = parse_cpuinfo(x86)
    assert name == "Intel(R) Xeon(R) Platinum 8480+"
    assert {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"} <= flags
    assert parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd bf16\nCPU part\t: 0xd4f\n") == (
        None,
        frozenset(),
    )


def test_parse_cpu_family_x86_and_arm() -> None:
    x86 = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\n"
    )
    assert parse_cpu_family(x86) == (26, 2)
    assert parse_cpu_family("processor\t: 0\nFeatures\t: fp asimd\nCPU part\t: 0xd4f\n") == (
        None,
        None,
    )
    assert parse_cpu_family("cpu family\t: six\nmodel\t: 85\n") == (None, 85)


def test_the_cpu_family_is_probed_shown_and_unknown_in_an_older_profile(
    cpu_only_profile: HardwareProfile,
) -> None:
    nvml, cuda = no_gpu_stack()
    text = "processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
    cpu = probe(nvml=nvml, cuda=cuda, cpuinfo_text=text).cpu
    assert (cpu.model_name, cpu.family, cpu.model_number) == ("AMD EPYC", 26, 2)
    assert cpu.generation == "family 26, model 2"
    assert cpu.described == "AMD EPYC (family 26, model 2)"
    data = json.loads(json.dumps(cpu_only_profile.to_dict()))
    del data["cpu"]["family"], data["cpu"]["model_number"]  # a preset written before them
    older = HardwareProfile.from_dict(data).cpu
    assert (older.family, older.model_number, older.generation) == (None, None, "")
    assert older.described == older.model_name


def test_cpu_model_name_falls_back_to_platform(cpu_only_profile: HardwareProfile) -> None:
    nvml, cuda = no_gpu_stack()
    profile = probe(nvml=nvml, cuda=cuda, cpuinfo_text="processor\t: 0\n")
    assert profile.cpu.model_name  # platform.processor() / machine(), never empty
    assert profile.cpu.isa_flags == ()
    assert not profile.cpu.bf16_native
    assert not profile.device("cpu").bf16_native and profile.device("cpu").bf16


def test_without_a_cxx_compiler_cpu_compile_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.setenv("CXX", "no-such-compiler++")
    profile = probe(nvml=no_gpu_stack()[0], cuda=no_gpu_stack()[1])
    assert not profile.software.compile_cpu_available
    assert "no-such-compiler++" in profile.software.compile_cpu_reason
    assert not profile.device("cpu").compile
    assert not profile.software.compile_available  # the CPU is the default device here
    # A config that compiles is refused with the probe's reason, not a bare "cannot run".
    from autotune.config.checks import check_config
    from autotune.config.train_config import TrainConfig
    from autotune.testing.toy import toy_spec

    caps = profile.device("cpu")
    assert "no-such-compiler++" in caps.compile_problem
    with pytest.raises(ConfigError, match=r"cannot run on cpu .* here: no C\+\+ compiler"):
        config = TrainConfig(micro_batch=1, seq_len=8, compile="default")
        check_config(config, spec=toy_spec(), device=caps)


def test_cxx_environment_variable_picks_the_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler on this machine")
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.setenv("CXX", compiler)
    ok, reason = hardware.compile_check_cpu()
    assert compiler in reason
    assert ok == os.path.exists(
        os.path.join(__import__("sysconfig").get_paths()["include"], "Python.h")
    )


def test_a_compiler_that_does_not_run_turns_compile_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # CXX=/bin/false was reported as "can build with /bin/false"
    false = shutil.which("false")
    if false is None:
        pytest.skip("no false(1) here")
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.setenv("CXX", false)
    ok, reason = hardware.compile_check_cpu()
    assert not ok and f"the C++ compiler {false} does not run" in reason


def test_without_triton_gpu_compile_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    nvml, cuda = gpu_stack([H100])
    profile = probe(nvml=nvml, cuda=cuda)
    assert not profile.software.compile_available
    assert "triton" in profile.software.compile_reason
    assert not profile.device("cuda:0").compile
    assert "triton" in profile.device("cuda:0").compile_problem
    assert profile.device("cpu").compile == profile.software.compile_cpu_available


def test_a_gpu_older_than_volta_names_why_it_does_not_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hardware, "compile_check_cuda", lambda: (True, "triton 3.0"))
    pascal = FakeGPU(name="Tesla P100-PCIE-16GB", total=16 * GiB, cc=(6, 0), sm_count=56)
    profile = probe(nvml=gpu_stack([pascal])[0], cuda=gpu_stack([pascal])[1])
    assert profile.software.compile_available  # triton is there: the card is the reason
    caps = profile.device("cuda:0")
    assert not caps.compile
    assert caps.compile_problem == "Triton needs compute capability 7.0 or newer"
    assert profile.device("cpu").compile_problem == (
        "" if profile.device("cpu").compile else profile.software.compile_cpu_reason
    )


# --- a real GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (torch.cuda)")
def test_probe_matches_torch_cuda_on_a_real_gpu() -> None:
    profile = probe()
    assert len(profile.gpus) == torch.cuda.device_count()
    for gpu in profile.gpus:
        props = torch.cuda.get_device_properties(gpu.index)
        assert gpu.compute_capability == (props.major, props.minor)
        assert gpu.sm_count == props.multi_processor_count
        assert gpu.bf16_supported == ((props.major, props.minor) >= (8, 0))
        # NVML counts memory torch's context-free figure leaves out: within 5 %.
        assert abs(gpu.total_memory_bytes - props.total_memory) <= 0.05 * props.total_memory
        assert gpu.free_memory_bytes is not None
        assert 0 < gpu.free_memory_bytes <= gpu.total_memory_bytes
        assert gpu.cuda_version == torch.version.cuda
        if gpu.source == "nvml":
            assert gpu.name == props.name
            assert gpu.driver_version and gpu.uuid == str(props.uuid).lower().removeprefix("gpu-")
            assert gpu.processes is not None
        caps = profile.device(f"cuda:{gpu.index}")
        assert caps.kind == "cuda" and caps.fp16
    assert profile.default_device == "cuda:0"
