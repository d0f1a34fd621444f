"""What the search records: progress events and the result as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.study import SearchEvent
from autotune.testing.burst import FakeBurst, run


def test_progress_events_and_json(tmp_path: Path) -> None:

    events: list[SearchEvent] = []
    result = run(tmp_path, FakeBurst(), trials=4, progress=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and "verify" in kinds
    trial_events = [e for e in events if e.kind == "trial"]
    assert len(trial_events) == len(result.trials)
    assert all(e.trials_left is not None for e in trial_events)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["best"]["config"] == dict(result.best.config)  # type: ignore[union-attr]
    assert data["counts"]["measured"] == 4
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
