"""What the machine is: the probe, device capabilities, OpenMP's wait policy, the compile cache.

- ``hardware``: ``probe()``, which measures this machine (GPUs through NVML or torch.cuda,
  the CPU, the software stack);
- ``profile``: ``HardwareProfile``, the record it returns, and its JSON schema;
- ``caps``: ``DeviceCaps``, what one device can run (precisions, compile, peak FLOP/s);
- ``omp``: OpenMP's wait policy for a config; ``compile_cache``: torch.compile's cache.

Nothing here imports torch until ``probe()`` runs.
"""

from __future__ import annotations

from autotune.machine.caps import DeviceCaps, parse_device, peak_flops
from autotune.machine.hardware import probe
from autotune.machine.profile import CPUInfo, GPUInfo, GPUProcess, HardwareProfile, SoftwareInfo

__all__ = [
    "CPUInfo",
    "DeviceCaps",
    "GPUInfo",
    "GPUProcess",
    "HardwareProfile",
    "SoftwareInfo",
    "parse_device",
    "peak_flops",
    "probe",
]
