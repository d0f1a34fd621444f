"""The race's winner written as a preset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autotune.config.train_config import TrainConfig
from autotune.core.errors import AutotuneError
from autotune.testing.burst import GB, FakeBurst, run, toy_spec

# -- verification and the preset ---------------------------------------------------------


def test_the_preset_written_loads_back(tmp_path: Path) -> None:
    from autotune.preset import load_preset

    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8)
    assert result.preset_path == str(tmp_path / "best.yaml")
    preset = load_preset(result.preset_path)
    assert result.best is not None and result.verified is not None
    assert preset.config == result.best.train_config()
    assert preset.task.global_batch == 32 and preset.task.seq_len == preset.config.seq_len
    assert preset.budget_bytes == GB
    assert preset.measured.tokens_per_s == pytest.approx(result.verified.tokens_per_s)
    assert preset.baseline is not None
    assert preset.baseline.speedup == pytest.approx(result.speedup, rel=1e-4)
    assert preset.baseline.config == burst.calls[0]
    # the race is recorded: every entry's rounds, the winner, the interval
    assert preset.race is not None and result.race is not None
    assert preset.race.rounds == 2 and preset.race.winner == result.race.winner.label
    assert {e.label for e in preset.race.entries} == {e.label for e in result.race.entrants}
    assert all(len(e.samples) == (1 if e.eliminated else 2) for e in preset.race.entries)
    assert [e.eliminated for e in preset.race.entries] == [
        e.eliminated for e in result.race.entrants
    ]
    assert preset.race.speedup_interval is not None
    low, high = preset.race.speedup_interval
    assert low <= preset.race.speedup <= high
    assert preset.search is not None and preset.search.trials_run == 8
    assert preset.search.study_name == result.study_name
    assert preset.model.name == "toy" and preset.fingerprint.device_kind == "cpu"
    assert preset.model.sha256 is None  # a built-in name: no user code to fingerprint
    # the race's first round adds the eval step and checkpoint save, once per entrant
    assert result.best.train_config() in burst.verify_calls
    assert len(burst.verify_calls) == len(result.race.entrants)


def test_a_user_models_file_hash_is_recorded(tmp_path: Path) -> None:
    import hashlib

    from autotune.preset import load_preset

    model_file = tmp_path / "my_model.py"
    model_file.write_text("from autotune.testing.burst import toy_spec\nspec = toy_spec()\n")
    spec = replace(toy_spec(), source=f"{model_file}:spec")
    result = run(tmp_path, FakeBurst(), trials=4, spec=spec)
    assert result.preset_path is not None
    model = load_preset(result.preset_path).model
    assert model.name == f"{model_file}:spec"
    assert model.sha256 == hashlib.sha256(model_file.read_bytes()).hexdigest()


def test_a_winner_that_fails_its_eval_and_checkpoint_round_cannot_win(tmp_path: Path) -> None:
    fastest: list[TrainConfig] = []

    def verify_fail(config: TrainConfig) -> bool:
        if not fastest:  # the search's best is raced first: it crashes while saving
            fastest.append(config)
        return config == fastest[0]

    burst = FakeBurst(verify_fail=verify_fail)
    result = run(tmp_path, burst, trials=8)
    assert result.best is not None and result.race is not None
    assert result.best.train_config() != fastest[0]
    failed = [e for e in result.race.entrants if e.problem]
    assert len(failed) == 1 and "crash" in failed[0].problem
    assert len(failed[0].throughputs) == 1  # it left the race after round 1
    assert result.race.to_dict()["entries"][result.race.entrants.index(failed[0])]["problem"]


def test_when_every_verification_fails_no_preset_is_written(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    earlier = "schema_version: 2\nconfig: {}\n"  # an earlier preset, as far as the search asks
    out.write_text(earlier)
    burst = FakeBurst(verify_fail=lambda c: True)
    with pytest.raises(AutotuneError, match="no config passed the race"):
        run(tmp_path, burst, trials=6)
    assert out.read_text() == earlier


def test_the_preset_notes_say_when_the_race_left_its_winner_no_figure() -> None:
    from autotune.burst.result import BurstResult
    from autotune.study.race.race_records import Entrant, RaceResult
    from autotune.study.session.outcome import _preset_notes
    from autotune.study.trials.records import TrialRecord

    record = TrialRecord(number=0, state="COMPLETE", status="ok")
    winner = Entrant(record=record, roles=["naive"], throughputs=[None])
    race = RaceResult(
        rounds=1, unit="tokens/s", entrants=(winner,), winner=winner, runner_up=None,
        naive=winner, speedup=None, margin=None,
    )  # fmt: skip
    raced = _preset_notes(winner, race, "throughput")
    assert "won a race of 1 config over 1 interleaved round" in raced
    winner.stand_in = BurstResult(status="ok", tokens_per_s=1625.0)  # its trial's figures
    notes = _preset_notes(winner, race, "throughput")
    assert "won a race" not in notes
    assert "not raced: no round of the race of 1 config counted, its figures are its trial's" in (
        notes
    )
