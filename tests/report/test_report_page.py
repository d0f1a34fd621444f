"""The report page of a small real study: every section and plot, offline, honest marks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Searched

from autotune.report import ReportData, load_report_data, write_report
from autotune.report.page import SECTIONS, race_html, render_html
from autotune.report.plots import knob_values
from autotune.study.trials.records import TrialRecord

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")


def _sections(page: str) -> dict[str, str]:
    found = re.findall(r'<section id="([^"]+)">(.*?)</section>', page, flags=re.S)
    return dict(found)


def _assert_offline(page: str) -> None:
    """Nothing on the page loads from anywhere: no script, no stylesheet link, no remote
    source or url(); the only http text is the SVG namespaces."""
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert "@import" not in page
    assert not re.search(r'\b(src|href)="(?!#|data:)', page), "a reference to another file"
    assert not re.search(r"url\((?!#)", page)
    leftover = re.sub(r'xmlns(:\w+)?="http://www\.w3\.org/[^"]*"', "", page)
    assert "http://" not in leftover and "https://" not in leftover


@dataclass(frozen=True)
class Written:
    data: ReportData
    page: str
    png: Path


@pytest.fixture(scope="module")
def preset_report(searched: Searched, tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The page and the summary PNG of the study's preset, written once for the tests that
    read them (a page is 2 s of plots on the 2-core CPU)."""
    folder = tmp_path_factory.mktemp("preset-report")
    out, png = folder / "report.html", folder / "summary.png"
    data = write_report(searched.preset, out=out, png=png)
    return Written(data=data, page=out.read_text(encoding="utf-8"), png=png)


def test_the_report_of_a_study_has_every_section_and_plot(
    searched: Searched, preset_report: Written
) -> None:
    data, page, png = preset_report.data, preset_report.page, preset_report.png
    sections = _sections(page)
    assert list(sections) == [sid for sid, _ in SECTIONS]
    finalists = "race" if data.race else "finalists"  # a search that raced records it
    for plot in ("history", "memory", "importance", "knobs", finalists):
        assert f'id="plot-{plot}"' in page, plot
    assert page.count("<svg") == 5
    _assert_offline(page)
    # the summary image: a PNG of a real size
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 20_000
    # what the sections say
    assert data.preset is not None and data.study_name == searched.result.study_name
    assert f"{searched.result.speedup:.2f}x the naive config" in sections["summary"]
    assert "Test CPU (cpu, 2 cores)" in sections["hardware"]
    assert "autotune presets check" in sections["reproduce"]
    assert "autotune train --preset" in sections["reproduce"]
    assert "optuna-dashboard sqlite:///" in sections["reproduce"]
    assert "fANOVA importances over" in sections["knobs"]
    # where the search's time went: the study's ledger, as the search's summary says it
    ledger = searched.result.ledger
    assert ledger is not None and data.ledger is not None
    assert data.ledger.to_dict() == ledger.to_dict()
    assert "where the time went" in sections["summary"]
    assert f"{ledger.configs} configs measured" in sections["summary"]


def test_the_history_marks_infeasible_pruned_and_failed_trials_apart(
    searched: Searched, preset_report: Written
) -> None:
    counts = searched.result.counts()
    history = _sections(preset_report.page)["history"]
    # the legend counts each kind (the SVG draws text as paths; its aria/title text is not
    # kept, so read the counts from the trial table instead, and the legend from the data)
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td><td>([^<]+)</td>", history)
    statuses = [s.split(" ")[0] for _, s in rows]
    assert len(rows) == counts["trials"]
    assert statuses.count("pruned") == counts["pruned"]
    assert (
        sum(s in ("oom", "over-budget", "dominated", "predicted") for s in statuses)
        == counts["infeasible"]
    )
    assert "crash" in statuses


def test_the_winner_is_shown_as_a_diff_against_naive(
    searched: Searched, preset_report: Written
) -> None:
    config = _sections(preset_report.page)["config"]
    best, naive = searched.result.best, searched.result.naive
    assert best is not None and naive is not None
    changed = {k for k in best.config if best.config[k] != naive.config[k]}
    assert changed
    for key in changed:
        row = re.search(rf'<tr class="changed"><td>{key}</td><td[^>]*>([^<]*)</td>', config)
        assert row is not None, key
    assert config.count('class="changed"') == len(changed)


def test_a_study_alone_makes_a_page_and_says_what_only_a_preset_has(searched: Searched) -> None:
    data = load_report_data(searched.result.study_name, runs_dir=searched.runs_dir)
    assert data.preset is None and len(data.finished()) == searched.result.counts()["trials"]
    sections = _sections(render_html(data))
    assert "carries the full fingerprint" in sections["hardware"]
    assert 'id="plot-history"' in sections["history"]


def test_knob_values_groups_measured_throughput_by_value() -> None:
    def trial(n: int, mb: int, tp: float, status: str = "ok") -> TrialRecord:
        config = {"micro_batch": mb, "precision": "fp32", "knobs": {"attention": "sdpa"}}
        return TrialRecord(
            number=n, state="COMPLETE", status=status, config=config, throughput=tp, ran=True
        )

    values = knob_values(
        [trial(0, 1, 10.0), trial(1, 2, 20.0), trial(2, 2, 30.0), trial(3, 4, 99.0, status="oom")]
    )
    assert values == {"micro_batch": {"1": [10.0], "2": [20.0, 30.0]}}  # one value: no panel


def test_the_memory_plot_labels_the_starts_by_their_roles() -> None:
    from autotune.report.data import ReportData
    from autotune.report.plots import _labelled

    def trial(n: int, role: str, tp: float) -> TrialRecord:
        config = {"micro_batch": 2**n, "precision": "fp32"}
        return TrialRecord(
            number=n,
            state="COMPLETE",
            status="ok",
            config=config,
            value=tp,
            throughput=tp,
            ran=True,
            role=role,
        )

    roles = ["quick-start", "naive", "hand-tuned", "playbook"]
    data = ReportData(title="t", trials=tuple(trial(n, r, 10.0 + n) for n, r in enumerate(roles)))
    labels = [(label, t.number) for label, t in _labelled(data)]
    assert labels == [("winner", 3), ("quick start", 0), ("naive", 1), ("hand-tuned", 2)]


def test_the_report_counts_trials_as_the_search_summary_does() -> None:
    """The report said "trials 35 (28 measured, 8 pruned)" where the search said "28
    trials ran, 27 measured, 1 pruned": it counted the outdated refinements skipped
    without a burst, and a trial the time limit stopped, as pruned (clearly slower)."""
    from autotune.report.blocks import Table
    from autotune.report.data import ReportData
    from autotune.report.page import _section_summary
    from autotune.report.plots import _kind
    from autotune.study.trials.records import counts_text, trial_counts

    def trial(n: int, state: str, status: str, tp: float | None, ran: bool) -> TrialRecord:
        config = {"micro_batch": 2**n, "precision": "fp32"}
        value = tp if state == "COMPLETE" else None
        return TrialRecord(
            number=n, state=state, status=status, config=config, value=value, throughput=tp, ran=ran
        )

    trials = (
        trial(0, "COMPLETE", "ok", 10.0, True),
        trial(1, "PRUNED", "pruned", 4.0, True),
        trial(2, "PRUNED", "stopped", None, True),  # stopped while compiling
        trial(3, "PRUNED", "skipped", None, False),
        trial(4, "PRUNED", "skipped", None, False),
        trial(5, "PRUNED", "stopped", None, False),  # at the study's gate: it never ran
    )
    counts = trial_counts(trials)
    assert (counts["ran"], counts["measured"], counts["pruned"], counts["skipped"]) == (3, 2, 3, 2)
    blocks = _section_summary(ReportData(title="t", trials=trials))
    rows = {
        r.cells[0].text: r.cells[1].text for b in blocks if isinstance(b, Table) for r in b.rows
    }
    assert rows["trials"] == f"6 finished; {counts_text(counts)}; 2 skipped without a burst"
    assert [(_kind(t) or {}).get("label") for t in trials] == [
        "measured",
        "pruned (clearly slower)",
        "stopped (the time limit)",
        None,
        None,
        None,
    ]


RACE: dict[str, Any] = {
    "rounds": 5,
    "unit": "tokens/s",
    "winner": "#7",
    "speedup": 2.31,
    "speedup_interval": [2.1, 2.5],
    "margin": 0.042,
    "margin_interval": [0.01, 0.07],
    "entries": [
        {
            "label": "#7",
            "trial": 7,
            "config": "mb 4x8 seq 64 fp32",
            "median": 5700.0,
            "spread": 0.031,
            "samples": [5600.0, 5700.0, 5750.0, 5690.0, 5720.0],
            "ratio_to_naive": 2.31,
        },
        {
            "label": "naive",
            "trial": None,
            "config": "mb 1x32 seq 64 fp32",
            "median": 2400.0,
            "spread": 0.02,
            "samples": [2390.0, 2400.0, 2410.0, 2380.0, 2420.0],
            "ratio_to_naive": 1.0,
        },
    ],
}


def test_a_race_renders_as_a_table_with_its_intervals() -> None:
    text = race_html(RACE, "tokens/s")
    assert "5 interleaved rounds" in text and "winner #7" in text
    assert "2.31x naive (interval 2.10x to 2.50x)" in text
    assert "+4.2% over the runner-up (interval +1.0% to +7.0%)" in text
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td>", text)
    assert rows == [("#7", "#7"), ("naive", "-")]
    assert "3.1%" in text and "2.31x" in text and 'id="plot-race"' in text
    assert "busy" not in text  # a quiet race says nothing about load
    # missing fields: what is there still renders
    assert "<table>" in race_html({"entries": [{"label": "x", "median": 1.0}]}, "samples/s")


def test_a_race_shows_its_problems_and_the_load_it_ran_under() -> None:
    from autotune.study.session.watch import Load

    busy = Load(outside_cores_mean=1.2, outside_cores_max=2.0, samples=9, busy=True)
    entries = [dict(RACE["entries"][0]), {**RACE["entries"][1], "problem": "timeout (round 2)"}]
    race = {**RACE, "entries": entries, "busy_rounds": [False, True], "load": busy.to_dict()}
    text = race_html(race, "tokens/s")
    assert "<td>timeout (round 2)</td>" in text
    assert "Round(s) 2 ran while the machine was busy and were left out" in text
    assert "another process used 1.2 cores (max 2.0)" in text
    every = race_html({**race, "busy_rounds": [True, True]}, "tokens/s")
    assert "Every round ran while the machine was busy" in every
    broken = race_html({**race, "load": {"outside_cores_mean": "x"}}, "tokens/s")
    assert "The machine watch saw" not in broken and "<table>" in broken


def test_a_preset_with_a_race_shows_it_in_the_finalists(searched: Searched, tmp_path: Path) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["race"] = RACE
    preset = tmp_path / "raced.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    page = render_html(load_report_data(preset))
    finalists = _sections(page)["finalists"]
    assert "2.31x naive (interval 2.10x to 2.50x)" in finalists
    assert (
        "The preset measured" in _sections(page)["summary"]
        and "2.31x" in _sections(page)["summary"]
    )


def test_reading_a_preset_for_a_report_never_runs_its_model(
    searched: Searched, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    model = tmp_path / "evil.py"
    model.write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n")
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["model"] = {"name": f"{model}:spec", "args": {}}
    preset = tmp_path / "user.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    page = render_html(load_report_data(preset))
    assert f"{model}:spec" in page and not marker.exists()


HOSTILE = "</td><script>alert(1)</script><!-- --> & 'q\""


def test_every_preset_and_race_string_reaches_the_page_escaped(
    searched: Searched, tmp_path: Path
) -> None:
    raw = yaml.safe_load(searched.preset.read_text(encoding="utf-8"))
    raw["model"] = {"name": f"{HOSTILE}:spec", "args": {}}
    hostile = {"label": HOSTILE, "config": HOSTILE, "problem": HOSTILE}
    entries = [{**e, **hostile} for e in RACE["entries"]]
    raw["race"] = {**RACE, "winner": HOSTILE, "entries": entries}
    preset = tmp_path / "hostile.yaml"
    preset.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    page = render_html(load_report_data(preset))
    # the race's labels are drawn in its plot too: matplotlib writes them only as paths
    # and escaped comments, so the SVG (the one part passed unescaped) holds no markup
    assert "<script" not in page and HOSTILE not in page
    escaped = "&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!-- --&gt; &amp; &#39;q&#34;"
    assert f"<td>{escaped}:spec</td>" in _sections(page)["summary"]
    assert page.count(escaped) >= 6  # model, winner, and each entry's label, config, problem
    _assert_offline(page)


def test_the_templates_ship_in_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")
    from fnmatch import fnmatch

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["autotune.report"]
    folder = root / "autotune" / "report"
    templates = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.j2"))
    assert "templates/report.html.j2" in templates
    assert [t for t in templates if not any(fnmatch(t, g) for g in globs)] == []


def test_a_race_without_evidence_says_not_measured_with_the_reason() -> None:
    reason = "no quiet round, and no quiet trial of both configs"
    entries = [{**e, "ratio_to_naive": None} for e in RACE["entries"]]
    unmeasured = {
        **RACE,
        "speedup": None,
        "speedup_interval": None,
        "speedup_reason": reason,
        "entries": entries,
    }
    text = race_html(unmeasured, "tokens/s")
    assert f"speedup over naive not measured ({reason})" in text
    assert "2.31x" not in text
    one = {**RACE, "rounds": 1, "speedup_interval": None, "interval_reason": "1 round"}
    assert "2.31x naive" in race_html(one, "tokens/s") and "(1 round)" in race_html(one, "tokens/s")
