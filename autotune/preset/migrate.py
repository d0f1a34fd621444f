"""Schema version 1 (autotune 0.0.x): flatter, ``budget`` as text, ``hardware`` for the
fingerprint, no ``training`` section. Migrated on load; never written.

``migrate_v1`` turns version 1 data into version 2 data, which is then validated as
version 2; ``v1_path`` puts that validation's problems back in the names the file uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autotune.core.errors import BudgetError
from autotune.core.units import parse_budget
from autotune.core.validator import did_you_mean, key_text
from autotune.preset.sections import PRESET_SCHEMA_VERSION

__all__ = ["migrate_v1", "v1_path"]

_V1_TOP = (
    "schema_version",
    "name",
    "created",
    "model",
    "model_args",
    "seq_len",
    "global_batch",
    "budget",
    "config",
    "hardware",
    "measured",
    "baseline",
    "search",
    "notes",
)
_V1_HARDWARE = {  # v1 name -> v2 fingerprint name
    "device": "device_kind",
    "name": "device_name",
    "memory_bytes": "memory_bytes",
    "compute_capability": "compute_capability",
    "driver": "driver_version",
    "cuda": "cuda_version",
    "torch": "torch_version",
    "autotune": "autotune_version",
    "cpu": "cpu_model",
    "cores": "cpu_cores",
}
_V1_MEASURED = {
    "tokens_per_s": "tokens_per_s",
    "samples_per_s": "samples_per_s",
    "step_time_s": "step_time_median_s",
    "step_time_p90_s": "step_time_p90_s",
    "peak_memory_bytes": "peak_memory_bytes",
    "mfu": "mfu",
    "compile_s": "compile_s",
}
_V1_SEARCH = {
    "trials": "trials_run",
    "infeasible": "infeasible",
    "pruned": "pruned",
    "failed": "failed",
    "wall_s": "wall_s",
    "study": "study_name",
    "storage": "storage",
}
# v2 path prefix -> v1 path, to report problems in the names the file uses
_V2_TO_V1 = (
    [("model.name", "model"), ("model.args", "model_args")]
    + [("task.seq_len", "seq_len"), ("task.global_batch", "global_batch")]
    + [("budget_bytes", "budget")]
    + [(f"fingerprint.{v2}", f"hardware.{v1}") for v1, v2 in _V1_HARDWARE.items()]
    + [("fingerprint", "hardware")]
    + [(f"measured.{v2}", f"measured.{v1}") for v1, v2 in _V1_MEASURED.items()]
    + [(f"search.{v2}", f"search.{v1}") for v1, v2 in _V1_SEARCH.items()]
)
_V1_DEVICE = re.compile(r"^(cpu|cuda)(:\d+)?$")


def v1_path(problem: str) -> str:
    for new, old in _V2_TO_V1:
        if problem == new or problem.startswith((f"{new}:", f"{new}.")):
            return old + problem[len(new) :]
    return problem


def _rename(
    section: Any, mapping: Mapping[str, str], path: str, problems: list[str]
) -> dict[str, Any] | Any:
    """Rename a v1 section's keys to v2 names; unknown keys are problems (v1 names)."""
    if not isinstance(section, Mapping):
        return section  # the v2 validation reports the type (under the v1 path)
    out: dict[str, Any] = {}
    for key, value in section.items():
        if key in mapping:
            out[mapping[key]] = value
        else:
            problems.append(
                f"{path}.{key_text(key)}: unknown field{did_you_mean(key_text(key), list(mapping))}"
            )
    return out


def migrate_v1(data: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Turn a version 1 preset into version 2 data (validated afterwards as version 2)."""
    for key in data:
        if key not in _V1_TOP:
            problems.append(
                f"{key_text(key)}: unknown field{did_you_mean(key_text(key), list(_V1_TOP))}"
            )
    out: dict[str, Any] = {"schema_version": PRESET_SCHEMA_VERSION}
    for key in ("name", "created", "config", "notes"):
        if key in data:
            out[key] = data[key]
    model: dict[str, Any] = {}
    if "model" in data:
        model["name"] = data["model"]
    if "model_args" in data:
        model["args"] = data["model_args"]
    out["model"] = model
    out["task"] = {k: data[k] for k in ("seq_len", "global_batch") if k in data}

    hardware = _rename(data.get("hardware"), _V1_HARDWARE, "hardware", problems)
    if isinstance(hardware, dict):  # v1 named the device ("cuda:1"); v2 keeps its kind
        device = hardware.get("device_kind")
        if isinstance(device, str) and _V1_DEVICE.match(device):
            hardware["device_kind"] = device.partition(":")[0]
    if "hardware" in data:
        out["fingerprint"] = hardware

    budget = data.get("budget")
    if isinstance(budget, str):
        memory = hardware.get("memory_bytes") if isinstance(hardware, dict) else None
        try:
            out["budget_bytes"] = parse_budget(
                budget, device_memory_bytes=memory if isinstance(memory, int) else None
            )
        except BudgetError as exc:
            problems.append(f"budget: {exc}")
    elif "budget" in data:
        out["budget_bytes"] = budget

    if "measured" in data:
        out["measured"] = _rename(data["measured"], _V1_MEASURED, "measured", problems)
    if "baseline" in data:
        out["baseline"] = data["baseline"]
    search = data.get("search")
    if search is not None:
        search = _rename(search, _V1_SEARCH, "search", problems)
        if isinstance(search, dict):  # v1 searches were always TPE maximising throughput
            search.setdefault("objective", "throughput")
            search.setdefault("sampler", "tpe")
    if "search" in data:
        out["search"] = search
    return out
