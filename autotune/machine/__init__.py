"""What the machine is: the probe, the profile it returns, OpenMP's wait policy, the compile cache.

- ``hardware``: ``probe()``, which measures this machine (GPUs through NVML or torch.cuda,
  the CPU, the software stack);
- ``profile``: ``HardwareProfile``, the record it returns, and its JSON schema; its
  ``device(name)`` gives the ``DeviceCaps`` of one device (``autotune.core.device_caps``,
  re-exported here), the record the config and the model contract check against;
- ``omp``: OpenMP's wait policy for a config; ``compile_cache``: torch.compile's cache.

Nothing here imports torch until ``probe()`` runs.
"""

from __future__ import annotations

from autotune.core.device_caps import DeviceCaps, parse_device, peak_flops
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
