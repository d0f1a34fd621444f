"""The verdict's rules on hand-made breakdowns, and the knob order it gives a search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.knobs import registry, searched_knobs
from autotune.config.train_config import TrainConfig
from autotune.explain import KNOBS_BY_LIMIT, Breakdown, StepVerdict, classify, refine_order
from autotune.explain.render import compact, markdown, table_rows


def breakdown(**fields: Any) -> Breakdown:
    """A 100 ms step: 10 ms forward, 20 ms backward, 5 ms optimizer unless ``parts``
    says; 50 operators of 1 ms each."""
    parts = {"data_wait": 0.0, "h2d": 0.0, "forward": 0.06, "backward": 0.03, "optimizer": 0.005}
    parts.update(fields.pop("parts", {}))
    parts["rest"] = 0.1 - sum(parts.values())
    base: dict[str, Any] = {"device": "cpu", "steps": 3, "step_s": 0.1, "parts": parts}
    base.update(op_s=0.09, ops_per_step=50.0)
    return Breakdown(**{**base, **fields})


def test_every_knob_a_verdict_names_is_in_the_registry() -> None:
    names = {k.name for k in registry(TrainConfig)}
    for kind, knobs in KNOBS_BY_LIMIT.items():
        assert set(knobs) <= names, kind


def test_input_bound_above_a_fifth_of_the_step_in_data_wait() -> None:
    v = classify(breakdown(parts={"data_wait": 0.03, "forward": 0.03}))
    assert v.kind == "input-bound" and "data wait is 30%" in v.evidence
    assert v.knobs[:3] == ("num_workers", "pin_memory", "prefetch_factor")
    assert classify(breakdown(parts={"data_wait": 0.01})).kind != "input-bound"


def test_overhead_bound_on_cpu_by_time_outside_operators_or_many_small_ones() -> None:
    assert classify(breakdown(op_s=0.04)).kind == "overhead-bound"  # 60% outside
    many = classify(breakdown(op_s=0.09, ops_per_step=3000.0))  # 30 us each
    assert many.kind == "overhead-bound" and "3000 operators" in many.evidence
    assert classify(breakdown()).kind == "compute-bound"


def test_overhead_bound_on_cuda_by_gpu_idle_time() -> None:
    idle = classify(breakdown(device="cuda:0", device_busy_s=0.05), mfu=0.1)
    assert idle.kind == "overhead-bound" and "GPU idles 50%" in idle.evidence
    busy = classify(breakdown(device="cuda:0", device_busy_s=0.095), mfu=0.5)
    assert busy.kind == "compute-bound" and "MFU 50%" in busy.evidence


def test_compute_bound_by_mfu_and_unknown_without_a_peak() -> None:
    assert classify(breakdown(), mfu=0.1).kind == "balanced"
    assert classify(breakdown(), mfu=0.6).kind == "compute-bound"
    v = classify(breakdown())
    assert v.kind == "compute-bound" and v.unknown == ("MFU unknown: no peak FLOP/s known for cpu",)
    assert v.knobs[0] == "precision"


def test_memory_bound_at_the_budget_comes_first() -> None:
    v = classify(breakdown(parts={"data_wait": 0.05}), peak_bytes=95, budget_bytes=100)
    assert v.kind == "memory-bound" and v.knobs[0] == "activation_checkpointing"
    assert [f.kind for f in v.findings][:2] == ["memory-bound", "input-bound"]
    assert classify(breakdown(), peak_bytes=50, budget_bytes=100).kind != "memory-bound"


@pytest.mark.parametrize(
    ("kind", "first"),
    [("input-bound", "num_workers"), ("overhead-bound", "compile"),
     ("compute-bound", "precision"), ("memory-bound", "activation_checkpointing")],
)  # fmt: skip
def test_refine_order_puts_the_verdicts_knobs_first(kind: str, first: str) -> None:
    from autotune.explain.verdict import Finding

    finding = Finding(kind=kind, evidence="", knobs=KNOBS_BY_LIMIT[kind])
    v = StepVerdict(kind=kind, findings=(finding,))
    order = refine_order(v)
    searched = [k.name for k in searched_knobs(TrainConfig)]
    assert order[0] == first
    assert sorted(order) == sorted(searched)  # every searched knob once, nothing else


def test_balanced_keeps_the_registry_order() -> None:
    v = StepVerdict(kind="balanced", findings=())
    assert refine_order(v) == [k.name for k in searched_knobs(TrainConfig)]


def test_round_trip_and_renderings() -> None:
    b = breakdown(modules={"embed": {"forward": 0.01, "backward": 0.02}}, compile_s=1.5)
    assert Breakdown.from_dict(b.to_dict()) == b
    v = classify(b)
    labels = [label for label, _ in table_rows(b, v)]
    assert "  module embed" in labels and "compile (once)" in labels and "verdict" in labels
    line = compact("naive", b, v)
    assert line.startswith("profile of naive: step 100.00 ms = data wait 0%") and "\n" not in line
    table = markdown([("naive", b, v), ("tuned", b, v)])
    assert table.splitlines()[0] == "| part | naive | tuned |"
    assert "| verdict | compute-bound | compute-bound |" in table


def test_the_search_folder_is_the_study_file_s_whatever_its_kind(tmp_path: Path) -> None:
    """Where --profile writes beside the study: a SQLite file's folder, a journal's
    (it used to fall back to the preset's folder), else the preset's."""
    import types

    from autotune.study.session.profile_found import run_folder

    def result(storage: str, preset: str | None = None) -> Any:
        return types.SimpleNamespace(storage=storage, preset_path=preset)

    assert run_folder(result(f"sqlite:///{tmp_path}/a/study.db")) == tmp_path.resolve() / "a"
    assert run_folder(result(f"journal:{tmp_path}/b/j.log", "x/best.yaml")) == (
        tmp_path.resolve() / "b"
    )
    assert run_folder(result("postgresql://u@h/db", str(tmp_path / "best.yaml"))) == tmp_path
    assert run_folder(result("postgresql://u@h/db")) is None
