"""The report's "Where a step's time goes" section from a study's kept profile: every
string in it is escaped, an entry that does not read is left out with a note, and the
bars share one scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.explain.breakdown import Breakdown
from autotune.explain.render import explain_to_dict
from autotune.explain.verdict import Finding, StepVerdict
from autotune.report import load_report_data
from autotune.report.page import SECTIONS, render_html
from autotune.report.plots import STEP_PARTS, profile_figure

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

HOSTILE = '<script>alert("x")</script> $\\frac{1}{0}$ & </section>'


def _entry(label: str, data_wait: float, evidence: str) -> dict[str, Any]:
    parts = {"data_wait": data_wait, "h2d": 0.0, "forward": 0.002, "backward": 0.003,
             "optimizer": 0.0005, "rest": 0.0005}  # fmt: skip
    breakdown = Breakdown(device="cpu", steps=3, step_s=sum(parts.values()), parts=parts)
    finding = Finding(kind="input-bound", evidence=evidence, knobs=("num_workers",))
    verdict = StepVerdict(kind="input-bound", findings=(finding,), unknown=("MFU unknown",))
    return {"config": label, **explain_to_dict(breakdown, verdict)}


def _study(tmp_path: Path, profile: Any) -> str:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    study.set_user_attr("profile", profile)
    return url


def test_hostile_labels_and_evidence_are_escaped(tmp_path: Path) -> None:
    url = _study(tmp_path, [_entry(HOSTILE, 0.004, HOSTILE), _entry("winner (b=4)", 0.0, "ok")])
    data = load_report_data("s", storage=url)
    assert [p.label for p in data.profile] == [HOSTILE, "winner (b=4)"]
    html = render_html(data)
    assert "<script>" not in html and "&lt;script&gt;alert(" in html
    assert html.count("</section>") == len(SECTIONS) + 1  # none from the label
    section = html[html.index('<section id="steps">') : html.index('<section id="hardware">')]
    assert "&lt;/section&gt;" in section and "$\\frac{1}{0}$ &amp;" in section


def test_an_entry_that_does_not_read_is_left_out_with_a_note(tmp_path: Path) -> None:
    url = _study(tmp_path, [{"config": "naive", "breakdown": {"steps": 1}}, _entry("w", 0.0, "")])
    data = load_report_data("s", storage=url)
    assert [p.label for p in data.profile] == ["w"]
    assert any("profile entry 0 could not be read" in n for n in data.notes)
    assert 'id="steps"' in render_html(data)


def test_the_bars_stack_every_part_on_one_scale() -> None:
    rows = [("naive", {"data_wait": 0.004, "forward": 0.002}), ("winner", {"forward": 0.001})]
    ax = profile_figure(rows).axes[0]
    assert len(ax.patches) == len(STEP_PARTS) * len(rows)
    assert ax.get_xlim()[1] >= 6.0  # ms: the longer step fits
    naive = [p for p in ax.patches if p.get_y() + p.get_height() / 2 == 1]  # on top
    assert sum(p.get_width() for p in naive) == 6.0
