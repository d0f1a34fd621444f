"""``autotune search --profile`` keeps its breakdowns in the study, and the report page
shows where a step's time goes for the naive config and the winner (fake bursts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_explain_burst as profiled_search

from autotune.report import load_report_data
from autotune.report.page import render_html

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start : html.index("</section>", start)]


def test_a_profiled_search_reports_both_configs_and_their_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, _ = profiled_search._search(tmp_path / "profiled", monkeypatch, "--profile")
    data = load_report_data(tmp_path / "profiled" / "best.yaml")
    assert [p.label for p in data.profile] == [p["config"] for p in out["profile"]]
    assert [p.label.split(" ")[0] for p in data.profile] == ["naive", "winner"]
    assert data.profile[0].breakdown.parts["data_wait"] == pytest.approx(0.004)
    html = render_html(data)
    section = _section(html, "steps")
    assert "Where a step&#39;s time goes" in html
    assert '<figure id="plot-steps"><svg' in section
    for p in data.profile:
        assert f"<h3>{p.label}</h3>" in section  # each config, under the figure
    assert "Verdict: input-bound: " in section and "<code>num_workers" in section
    assert "4.00 ms" in section  # the naive config's data wait, in the table
    # the section sits after the finalists; the other sections keep their order
    assert html.index('<section id="finalists">') < html.index('<section id="steps">')
    assert html.index('<section id="steps">') < html.index('<section id="hardware">')


def test_without_profile_the_report_has_no_step_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiled_search._search(tmp_path / "plain", monkeypatch)
    data = load_report_data(tmp_path / "plain" / "best.yaml")
    assert data.profile == ()
    html = render_html(data)
    assert 'id="steps"' not in html and "time goes" not in html
    assert '<section id="finalists">' in html
