"""The expert starts: the guides' hand-tuned configs moved into the space, and the
playbook's rules per device class."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autotune.models.registry import builtin_names, get_model
from autotune.preset.sections import Fingerprint
from autotune.study.plan.memory_model import MemoryModel
from autotune.study.plan.playbook import (
    HAND_TUNED,
    expert_starts,
    hand_tuned_config,
    model_family,
    playbook_config,
    project,
    quick_start,
    shipped_start,
)
from autotune.study.plan.space import SearchSpace
from autotune.testing.fake_caps import cpu_caps, cuda_caps

SHIPPED = Path(__file__).resolve().parents[3] / "presets"

GB = 10**9


@pytest.mark.parametrize("name", ["mu", "gpt-small", "pointer-gen", "text-regressor"])
def test_the_guides_hand_tuned_config_is_the_first_expert_start(name: str) -> None:
    spec = get_model(name)
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2)
    starts = expert_starts(space, spec, caps)
    role, config, _ = starts[0]
    assert role == "hand-tuned" and space.contains(config)
    seq = space.default_seq_len or space.seq_len[-1]
    guide = hand_tuned_config(spec, caps, global_batch=space.global_batch, seq_len=seq).config
    assert guide is not None
    # the same config compare.py measures as hand-tuned, where the space holds it
    assert (config.micro_batch, config.precision, config.compile) == (
        guide.micro_batch,
        guide.precision,
        guide.compile,
    )
    assert model_family(spec) in HAND_TUNED


def test_a_model_without_a_guide_gets_the_playbook_alone() -> None:
    from autotune.testing.burst import toy_spec

    spec = toy_spec()
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2)
    starts = expert_starts(space, spec, caps)
    assert [role for role, _, _ in starts] == ["playbook"]


def test_the_playbook_on_a_cpu_follows_its_bf16_units() -> None:
    from autotune.testing.burst import toy_spec

    spec = toy_spec()
    for native, precision in ((True, "bf16"), (False, "fp32")):
        caps = cpu_caps(bf16_native=native)
        space = SearchSpace.for_model(spec, caps, cpu_count=2)
        config = playbook_config(space, spec)
        assert config.precision == precision
        assert config.compile == "default" and config.num_workers == 0
        assert config.micro_batch == space.global_batch // 4  # no guide: a quarter
        assert not config.activation_checkpointing


def test_the_playbook_on_cuda_takes_the_largest_micro_batch_predicted_to_fit() -> None:
    from autotune.testing.burst import toy_spec

    spec = toy_spec()
    caps = cuda_caps()
    space = SearchSpace.for_model(spec, caps, cpu_count=8)
    assert playbook_config(space, spec).micro_batch == max(space.micro_batch)  # knows nothing
    config = playbook_config(space, spec)
    assert config.precision == "bf16" and config.num_workers == 2 and config.pin_memory
    memory = MemoryModel(budget_bytes=2 * GB, device_kind="cuda")
    base = space.make_config({**space.values_of(config), "micro_batch": 1})
    memory.add(0, base, peak_bytes=int(0.6 * GB), infeasible=False)  # 0.5 GB + 0.1 GB/sample
    memory.add(
        1, base.replace(micro_batch=2, grad_accum=16), peak_bytes=int(0.7 * GB), infeasible=False
    )
    fitted = playbook_config(space, spec, memory=memory)
    assert fitted.micro_batch == 8  # 0.5 + 0.8 GB fits 2 GB; 16 samples (2.1 GB) do not


def test_project_moves_a_config_into_a_restricted_space() -> None:
    spec = get_model("gpt-small")
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2, restrict={"precision": ["fp32"]})
    guide = hand_tuned_config(spec, caps, global_batch=space.global_batch, seq_len=256).config
    assert guide is not None and guide.precision == "bf16"
    moved, notes = project(space, guide)
    assert space.contains(moved) and moved.precision == "fp32"
    assert any("precision 'bf16' is outside" in n for n in notes)


def test_every_builtin_model_has_a_guide() -> None:
    families = {model_family(get_model(n)) for n in builtin_names()}
    assert families <= set(HAND_TUNED) | {"gpt"}


# -- the quick start (a short time limit's first trial) ----------------------------------


def test_the_quick_start_runs_the_whole_batch_in_bf16_without_compile_on_a_cpu() -> None:
    spec = get_model("mu")
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2)
    config = quick_start(space, spec)
    assert space.contains(config)
    assert (config.micro_batch, config.grad_accum) == (space.global_batch, 1)
    assert (config.precision, config.compile, config.num_workers) == ("bf16", "off", 0)
    # each knob at its measured CPU-bf16 value, the others at their defaults
    assert config.knobs == {"block_group": 16, "attention": "eager", "loss": "chunked"}


def test_the_quick_start_keeps_a_knob_the_user_pinned_and_fp32_without_bf16_units() -> None:
    spec = get_model("gpt-small")
    pinned = SearchSpace.for_model(
        spec, cpu_caps(bf16_native=True), cpu_count=2, restrict={"attention": ["sdpa"]}
    )
    config = quick_start(pinned, spec)
    assert config.knobs == {"attention": "sdpa", "loss": "chunked"}
    plain = SearchSpace.for_model(spec, cpu_caps(bf16_native=False), cpu_count=2)
    config = quick_start(plain, spec)
    assert config.precision == "fp32" and config.compile == "off"
    assert config.knobs == {"attention": "sdpa", "loss": "full"}  # the CPU-bf16 values only


def test_the_quick_start_on_cuda_takes_the_largest_micro_batch_predicted_to_fit() -> None:
    spec = get_model("mu")
    space = SearchSpace.for_model(spec, cuda_caps(), cpu_count=8)
    config = quick_start(space, spec)
    assert config.micro_batch == max(space.micro_batch) and config.compile == "off"
    assert config.precision == "bf16" and config.knobs["attention"] == "sdpa"
    memory = MemoryModel(budget_bytes=2 * GB, device_kind="cuda")
    base = space.make_config({**space.values_of(config), "micro_batch": 1})
    memory.add(0, base, peak_bytes=int(0.6 * GB), infeasible=False)  # 0.5 GB + 0.1 GB/sample
    memory.add(
        1, base.replace(micro_batch=2, grad_accum=16), peak_bytes=int(0.7 * GB), infeasible=False
    )
    assert quick_start(space, spec, memory=memory).micro_batch == 8


def test_a_knobs_quick_cpu_value_must_be_one_of_its_values() -> None:
    from autotune.contract.spec import Knob

    with pytest.raises(ValueError, match="quick_cpu 'x' not in values"):
        Knob(name="attention", values=("sdpa", "eager"), default="sdpa", quick_cpu="x")


# -- a shipped preset as a start (measured on this kind of device) ------------------------


def _fingerprint_of(path: str) -> Fingerprint:
    from autotune.preset import load_preset

    return load_preset(SHIPPED / path).fingerprint


def test_a_preset_shipped_for_this_model_and_cpu_is_a_start() -> None:
    spec = get_model("mu")
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2)
    here = _fingerprint_of("cpu/mu-epyc.yaml")  # the same CPU model and core count
    found = shipped_start(space, spec, caps, here, presets=sorted(SHIPPED.rglob("*.yaml")))
    assert found is not None
    config, path = found
    assert path.name == "mu-epyc.yaml" and space.contains(config)
    assert (config.precision, config.knobs["attention"]) == ("bf16", "eager")
    # another model, another CPU (its core count), or a CPU emulating the preset's bf16
    wider = spec.with_args(n_layers=12)  # a preset of mu at its own size is not for this one
    assert shipped_start(space, wider, caps, here, presets=[path]) is None
    elsewhere = dataclasses.replace(here, cpu_cores=here.cpu_cores * 2)
    assert shipped_start(space, spec, caps, elsewhere, presets=[path]) is None
    emulating = cpu_caps(bf16_native=False)
    assert shipped_start(space, spec, emulating, here, presets=[path]) is None


def test_a_shipped_preset_the_file_of_which_is_broken_is_passed_over(tmp_path: Path) -> None:
    spec = get_model("mu")
    caps = cpu_caps(bf16_native=True)
    space = SearchSpace.for_model(spec, caps, cpu_count=2)
    broken = tmp_path / "broken.yaml"
    broken.write_text("schema_version: 2\nconfig: [\n")
    here = _fingerprint_of("cpu/mu-epyc.yaml")
    good = SHIPPED / "cpu/mu-epyc.yaml"
    assert shipped_start(space, spec, caps, here, presets=[broken]) is None
    found = shipped_start(space, spec, caps, here, presets=[broken, good])
    assert found is not None and found[1] == good


def test_the_shipped_start_runs_before_the_first_compiled_start(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from autotune.config.train_config import TrainConfig
    from autotune.study.plan import playbook
    from autotune.study.plan.planner import _shipped_among

    eager = TrainConfig(micro_batch=8, grad_accum=4, seq_len=64)
    compiled = eager.replace(compile="default")
    shipped = eager.replace(micro_batch=4, grad_accum=8, compile="default")
    space = SimpleNamespace(key=lambda c: repr(c.to_dict()))
    state: Any = SimpleNamespace(space=space, spec=None)
    starts = [("hand-tuned", eager, []), ("playbook", compiled, [])]
    found: Any = (shipped, Path("cpu/mu-epyc.yaml"))
    monkeypatch.setattr(playbook, "shipped_start", lambda *a, **k: found)
    out = _shipped_among(starts, state, cpu_caps(), _fingerprint_of("cpu/mu-epyc.yaml"))
    assert [role for role, _, _ in out] == ["hand-tuned", "shipped-preset", "playbook"]
    assert "mu-epyc.yaml" in out[1][2][0]
    found = (compiled, Path("cpu/mu-epyc.yaml"))  # a start already: not run twice
    assert _shipped_among(starts, state, cpu_caps(), _fingerprint_of("cpu/mu-epyc.yaml")) == starts
