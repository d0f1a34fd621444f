"""What the search records: progress events and the result as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.study import SearchEvent
from autotune.testing.burst import FakeBurst, run


def test_progress_events_and_json(tmp_path: Path) -> None:

    events: list[SearchEvent] = []
    result = run(tmp_path, FakeBurst(), trials=5, progress=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and "verify" in kinds
    trial_events = [e for e in events if e.kind == "trial"]
    assert len(trial_events) == len(result.trials)
    assert all(e.trials_left is not None for e in trial_events)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["best"]["config"] == dict(result.best.config)  # type: ignore[union-attr]
    counts = data["counts"]
    # the fake's fifth trial (the screen of micro-batch 16) runs out of memory: no figure
    assert counts["ran"] == 5
    assert counts["measured"] == 4 and counts["infeasible"] == 1
    assert data["preset_path"] == str(tmp_path / "best.yaml")


def test_a_model_that_names_its_size_is_shown_and_preset_by_that_name(tmp_path: Path) -> None:
    """A vision model's seq_len is an image side: records, summaries and the preset say so."""
    from dataclasses import replace

    from autotune.preset import load_preset
    from autotune.testing.burst import toy_spec

    result = run(tmp_path, FakeBurst(), trials=3, spec=replace(toy_spec(), size_name="image"))
    assert result.best is not None and result.best.size_name == "image"
    assert " image 64 " in f" {result.best.summary()} " and " seq " not in result.best.summary()
    preset = load_preset(tmp_path / "best.yaml")
    assert preset.task.size_name == "image"
    assert preset.task.size_label() == f"image {preset.task.seq_len}"


def test_a_trial_stopped_before_its_figure_ran_but_is_not_counted_as_measured(
    tmp_path: Path,
) -> None:
    """A compiled trial the time limit stopped during its compile ran a burst and measured
    nothing: the summary's "measured" counts configs with a figure."""
    from dataclasses import replace

    from autotune.study.trials.records import TrialRecord

    result = run(tmp_path, FakeBurst(), trials=3)
    before = result.counts()
    stopped = TrialRecord(number=99, state="PRUNED", status="pruned", ran=True)
    skipped = TrialRecord(number=100, state="PRUNED", status="skipped")
    counts = replace(result, trials=(*result.trials, stopped, skipped)).counts()
    assert counts["trials"] == before["trials"] + 2
    assert counts["ran"] == before["ran"] + 1
    assert counts["measured"] == before["measured"] > 0
    assert counts["pruned"] == before["pruned"] + 1
