"""Contention is detected, not absorbed: a trial measured while something else loaded the
machine is marked, warned about live, never pruned for it, and measured again once the
machine is quiet; a burst with erratic step times is marked too; the race records the
load. The watch itself is tested in test_watch.py; here a fake one says when the machine
was busy."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_watch import FakeWatch, slowed

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.study import SearchResult
from autotune.study.session.watch import Load
from autotune.study.trials.records import SearchEvent
from autotune.testing.burst import FakeBurst, run


def run_noting(tmp_path: Path, burst: Any) -> tuple[SearchResult, list[str]]:
    """A 6-trial search watched by ``burst.watch``, and the notes it printed."""
    notes: list[str] = []
    result = run(
        tmp_path,
        burst,
        trials=6,
        watch=burst.watch,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    return result, notes


@dataclass
class LoadedFrom(FakeBurst):
    """Trials ``loaded_calls`` (1-based, trials only) run on a loaded machine: half speed."""

    watch: FakeWatch = field(default_factory=FakeWatch)
    loaded_calls: tuple[int, ...] = ()

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        trial = kw.get("on_step") is not None
        self.watch.loaded = trial and len(self.calls) + 1 in self.loaded_calls
        result = super().__call__(spec, config, **kw)
        if self.watch.loaded and result.tokens_per_s:
            result = slowed(result, 2.0)
        return result

    def quiet(self) -> None:
        self.watch.loaded = False


@dataclass
class LoadFromTrial(FakeBurst):
    """Load arrives as the trial ``first`` (0-based, trials only) starts, and stays."""

    watch: FakeWatch = field(default_factory=FakeWatch)
    first: int = 0

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        self.watch.loaded = self.watch.loaded or len(self.calls) == self.first
        return super().__call__(spec, config, **kw)


def test_a_trial_measured_under_load_is_marked_warned_and_measured_again(tmp_path: Path) -> None:
    burst = LoadedFrom(loaded_calls=(2,))  # the playbook's trial runs on a loaded machine
    events: list[SearchEvent] = []
    result = run(tmp_path, burst, trials=8, watch=burst.watch, progress=events.append)
    loaded = result.trials[1]
    assert loaded.role == "playbook" and "another process used 1.0 cores" in loaded.disturbed
    warnings = [e.message for e in events if e.kind == "note" and "warning" in e.message]
    assert len(warnings) == 1 and f"trial #{loaded.number}" in warnings[0]
    # (the playbook's eager twin, its screen, ran under the load too: measured again also)
    again = [t for t in result.trials if t.role == "re-measure" and t.config == loaded.config]
    assert len(again) == 1
    assert not again[0].disturbed and again[0].throughput == 2 * (loaded.throughput or 0)
    assert any("measured while the machine was busy" in n for n in result.notes)


def test_the_pruner_does_not_prune_while_the_machine_is_busy(tmp_path: Path) -> None:
    # Every trial after naive on a loaded machine: half speed. Without the watch, configs
    # at half the best's speed are pruned; with it, none is pruned for it.
    @dataclass
    class SlowUnderLoad(LoadedFrom):
        def speed(self, c: TrainConfig) -> float:
            return 1000.0 * (4.0 if c.micro_batch == 8 else 1.0)

    loaded = tuple(range(3, 20))
    with_watch = run(tmp_path / "a", SlowUnderLoad(loaded_calls=loaded), trials=8, watch=None)
    burst = SlowUnderLoad(loaded_calls=loaded)
    watched = run(tmp_path / "b", burst, trials=8, watch=burst.watch)
    assert any(t.state == "PRUNED" for t in with_watch.trials)  # the pruner does prune
    busy = [t for t in watched.trials if t.disturbed]
    assert busy and all(t.state != "PRUNED" for t in busy)


def test_erratic_step_times_mark_a_trial_without_a_watch(tmp_path: Path) -> None:
    @dataclass
    class Erratic(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            result = super().__call__(spec, config, **kw)
            if result.ok and len(self.calls) == 2:  # one step took ten times the others
                data = {**result.to_dict(), "step_times_s": (0.1, 0.1, 0.1, 1.0)}
                data["losses"] = tuple(data.get("losses") or ())
                return BurstResult(**data)
            return result

    result = run(tmp_path, Erratic(), trials=5)
    assert "erratic step times" in result.trials[1].disturbed
    assert not result.trials[0].disturbed


def test_the_race_records_the_load_it_ran_under(tmp_path: Path) -> None:
    from autotune.preset import load_preset

    burst = LoadedFrom()
    result = run(tmp_path, burst, trials=5, watch=burst.watch)
    assert result.race is not None and result.race.load is not None
    assert result.race.load["busy"] is False
    preset = load_preset(tmp_path / "best.yaml")
    assert preset.race is not None and preset.race.load == result.race.load


def test_a_race_round_under_load_is_left_out_when_a_quiet_one_exists(tmp_path: Path) -> None:
    # Contended cores slow a small micro-batch far more than a large one (measured: mu's
    # naive mb 1 took minutes under one busy core): a busy round's ratio is not a quiet
    # machine's. Round 2 of the race runs loaded: naive 5x slower, the rest 1.2x.
    @dataclass
    class SecondRoundLoaded(FakeBurst):
        watch: FakeWatch = field(default_factory=FakeWatch)

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            second_round = kw.get("on_step") is None and not kw.get("verify")
            self.watch.loaded = second_round
            result = super().__call__(spec, config, **kw)
            if second_round and result.tokens_per_s:
                slow = 5.0 if config.micro_batch == 1 else 1.2
                result = slowed(result, slow)
            return result

    burst = SecondRoundLoaded()
    result, notes = run_noting(tmp_path, burst)
    assert result.race is not None and result.best is not None and result.naive is not None
    assert result.race.busy_rounds == (False, True)
    quiet_ratio = burst.speed(result.best.train_config()) / burst.speed(result.naive.train_config())
    assert result.speedup is not None and abs(result.speedup - quiet_ratio) < 1e-6 * quiet_ratio
    assert any("1 busy round(s) left out" in n for n in notes)
    # every round is still on record
    assert all(len(e.throughputs) == (1 if e.eliminated else 2) for e in result.race.entrants)


def test_bursts_on_a_busy_machine_run_on_the_cores_left_to_them(tmp_path: Path) -> None:
    """On a shared core torch's threads wait for each other at every op: a burst gets the
    cores that outside processes leave, and its record says so."""
    quiet = FakeBurst()
    run(tmp_path / "quiet", quiet, trials=3, watch=FakeWatch())
    assert quiet.threads and set(quiet.threads) == {None}  # torch's default: every core
    busy = FakeBurst()
    result = run(tmp_path / "busy", busy, trials=3, watch=FakeWatch(loaded=True))
    assert busy.threads and set(busy.threads) == {1}  # trials and race alike
    assert result.trials[0].disturbed.endswith("; measured on the 1 core(s) left to it")
    assert {t.cores_left for t in result.trials if t.ran} == {1}  # they compare alike
    assert {t.cores_left for t in run(tmp_path / "again", FakeBurst(), trials=2).trials} == {None}


def test_load_from_mid_race_on_counts_the_rounds_run_on_the_cores_left(tmp_path: Path) -> None:
    # Load arrives during the race's first round and stays. A burst on all threads under
    # it is nobody's figure (naive 5x slower, the rest 1.2x: measured, mu on 2 cores); a
    # burst on the core left is slower alike (threads_under_load.py: ratio within 1.3%).
    # Round 1 is mixed; the later rounds ran alike, so the figures are theirs.
    @dataclass
    class LoadFromMidRace(FakeBurst):
        watch: FakeWatch = field(default_factory=FakeWatch)

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            self.watch.loaded = self.watch.loaded or len(self.verify_calls) >= 2
            result = super().__call__(spec, config, **kw)
            if self.watch.loaded and result.tokens_per_s:
                if kw.get("threads") is None:
                    slow = 5.0 if config.micro_batch == 1 else 1.2
                else:
                    slow = 1.4
                result = slowed(result, slow)
            return result

    burst = LoadFromMidRace()
    result, notes = run_noting(tmp_path, burst)
    race = result.race
    assert race is not None and result.best is not None and result.naive is not None
    assert race.busy_rounds == (True, True)
    assert len(race.winner.figures) == 2 and race.winner.figures[0] is None  # round 1 out
    quiet_ratio = burst.speed(result.best.train_config()) / burst.speed(result.naive.train_config())
    assert result.speedup is not None and abs(result.speedup - quiet_ratio) < 1e-6 * quiet_ratio
    assert any("measured on the 1 core(s) it left" in n for n in notes)
    assert not any(n.startswith("warning: every race round") for n in notes)


def test_a_burst_on_every_core_that_load_catches_runs_again_on_the_cores_left(
    tmp_path: Path,
) -> None:
    # mu's naive on 2 threads, a busy process arriving on one core: 43.8 tokens/s until its
    # 300 s timeout; on the core left, 1,008.
    burst = LoadFromTrial(stops_on_load=True)  # arrives as the first burst runs, and stays
    result, notes = run_noting(tmp_path, burst)
    assert burst.threads[:2] == [None, 1]  # the naive on every core, then on the core left
    assert set(burst.threads[2:]) == {1}  # every later burst starts on the core left
    naive = result.trials[0]
    assert naive.role == "naive" and naive.status == "ok" and naive.throughput
    assert naive.disturbed.endswith("; measured on the 1 core(s) left to it")
    assert any("#0: outside load arrived" in n and "on the 1 core(s) left" in n for n in notes)


def test_a_burst_that_load_does_not_reach_runs_once(tmp_path: Path) -> None:
    burst = FakeBurst(stops_on_load=True)
    run(tmp_path, burst, trials=3, watch=FakeWatch())
    assert burst.threads and set(burst.threads) == {None}
    assert len(burst.threads) == len(burst.calls) + len(burst.verify_calls) + len(burst.race_calls)


def test_a_load_gone_when_the_burst_stopped_for_it_leaves_it_every_core(tmp_path: Path) -> None:
    # Measured: a 5-second command beside mu's search stopped the playbook's burst (bf16,
    # compiled); run again on the one core "left" on a quiet machine, it measured 1,432
    # tokens/s against the guide's fp32 2,022 on both, and the search refined the fp32.
    @dataclass
    class ShortLoad(FakeBurst):
        watch: FakeWatch = field(default_factory=FakeWatch)
        arrived: bool = False

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            # once, as the second trial (the playbook's) starts
            self.watch.loaded = not self.arrived and len(self.calls) == 1
            self.arrived = self.arrived or self.watch.loaded
            result = super().__call__(spec, config, **kw)
            self.watch.loaded = False  # gone by the time the search looks again
            return result

    burst = ShortLoad(stops_on_load=True)
    result, notes = run_noting(tmp_path, burst)
    playbook = result.trials[1]
    assert playbook.role == "playbook" and burst.threads[1:3] == [None, None]
    assert playbook.cores_left is None and not playbook.disturbed
    assert playbook.throughput == burst.speed(playbook.train_config())
    assert any("#1: outside load stopped its burst and left" in n for n in notes)
    assert not any("core(s) left" in n for n in notes)


def test_a_load_that_stays_past_the_settle_leaves_the_cores_it_does_not_hold(
    tmp_path: Path,
) -> None:
    burst = LoadFromTrial(stops_on_load=True, first=1)  # from the playbook's trial on
    result, notes = run_noting(tmp_path, burst)
    assert burst.threads[1:3] == [None, 1]  # one try on every core, then the core left
    assert result.trials[1].cores_left == 1
    assert not any("left within" in n for n in notes)


@dataclass
class CoresTakenAtTheStart:
    """A watch that leaves a burst one core as it starts (``burst_threads``) while no
    window is busy: a load that left during the measurement."""

    taken: bool = False

    def now(self) -> float:
        return time.monotonic()

    @contextlib.contextmanager
    def burst(self) -> Iterator[None]:
        yield

    def window(self, since: float, until: float | None = None) -> Load:
        return Load(samples=3)

    def busy_now(self, last_s: float = 5.0) -> bool:
        return False

    def burst_threads(self) -> int | None:
        return 1 if self.taken else None

    def total(self) -> Load:
        return Load(samples=3)


def test_a_figure_on_cores_a_gone_load_left_is_measured_again_before_refining(
    tmp_path: Path,
) -> None:
    @dataclass
    class StartsLoaded(FakeBurst):
        watch: CoresTakenAtTheStart = field(default_factory=CoresTakenAtTheStart)

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            result = super().__call__(spec, config, **kw)
            if kw.get("threads") == 1 and result.tokens_per_s:
                result = slowed(result, 2.0)  # one core of two
            self.watch.taken = len(self.calls) == 1 and kw.get("on_step") is not None
            return result

    burst = StartsLoaded()  # the playbook's trial starts on one core, then all is quiet
    result = run(tmp_path, burst, trials=6, watch=burst.watch)
    playbook, after = result.trials[1], result.trials[2]
    assert playbook.role == "playbook" and playbook.cores_left == 1
    assert "measured on the 1 core(s) that outside load left it" in playbook.disturbed
    assert after.role == "re-measure" and after.config == playbook.config  # before refining
    assert after.cores_left is None and not after.disturbed
    assert after.throughput == 2 * (playbook.throughput or 0)


@dataclass
class Blips(CoresTakenAtTheStart):
    """A watch that sees load for ``blip`` looks at the cores, then none: a command of a
    few seconds beside the search."""

    blip: int = 0

    def burst_threads(self) -> int | None:
        if self.blip > 0:
            self.blip -= 1
            return 1
        return None


@dataclass
class BlipAfter(FakeBurst):
    """A blip of load just after the trial or first-round race call ``after`` (1-based)."""

    watch: Blips = field(default_factory=Blips)
    after: tuple[str, int] = ("trial", 0)

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        result = super().__call__(spec, config, **kw)
        kind, n = self.after
        calls = self.calls if kind == "trial" else self.verify_calls
        if len(calls) == n and (kind != "trial" or kw.get("on_step") is not None):
            self.watch.blip = 1
        return result


def test_a_trial_that_starts_during_a_blip_of_load_waits_and_runs_on_every_core(
    tmp_path: Path,
) -> None:
    burst = BlipAfter(after=("trial", 1))  # load seen just as the second trial starts
    result = run(tmp_path, burst, trials=6, watch=burst.watch)
    assert burst.watch.blip == 0 and set(burst.threads) == {None}
    assert not any(t.disturbed for t in result.trials)
    assert not any(t.role == "re-measure" for t in result.trials)


def test_a_race_burst_that_starts_during_a_blip_keeps_its_round_quiet(tmp_path: Path) -> None:
    burst = BlipAfter(after=("race", 1))  # load seen as round 1's second burst starts
    result = run(tmp_path, burst, trials=5, watch=burst.watch)
    assert burst.watch.blip == 0 and set(burst.threads) == {None}
    assert result.race is not None and not any(result.race.busy_rounds)
    assert result.race.speedup is not None and result.race.speedup.has_interval


def test_under_a_load_that_stays_only_the_first_burst_waits_to_see_it_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    clock = type("Clock", (), {"sleep": staticmethod(waits.append), "monotonic": time.monotonic})
    monkeypatch.setattr("autotune.study.trials.burst_threads.time", clock)
    burst = FakeBurst()
    run(tmp_path, burst, trials=4, watch=FakeWatch(loaded=True))
    assert set(burst.threads) == {1} and len(waits) == 1


def test_a_race_burst_that_load_reaches_and_leaves_is_run_again(tmp_path: Path) -> None:
    # Measured: a 5-second command during a race burst (mu's #7: 1,256 tokens/s against
    # 2,277 in round 1) left round 2 out as busy: a speedup on one round, no interval.
    @dataclass
    class LoadDuringARaceBurst(FakeBurst):
        watch: FakeWatch = field(default_factory=FakeWatch)

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            result = super().__call__(spec, config, **kw)
            if len(self.race_calls) == 1 and not self.watch.busy_marks:  # round 2's first
                self.watch.busy_marks.append(time.monotonic())  # came and went during it
                result = slowed(result, 2.0)
            return result

    burst = LoadDuringARaceBurst()
    result, notes = run_noting(tmp_path, burst)
    race = result.race
    assert race is not None and sum("load came and went" in n for n in notes) == 1
    assert all(race.winner.figures) and len(race.winner.figures) == 2  # both rounds count
    again = next(e for e in race.entrants if e.record.train_config() == burst.race_calls[0])
    assert len(again.throughputs) == len(again.walls) == len(again.bursts) == 2
    assert again.throughputs[1] == pytest.approx(burst.speed(burst.race_calls[0]), rel=1e-6)
    assert race.speedup is not None and race.speedup.has_interval


def test_a_stop_while_a_burst_waits_to_see_load_stay_leaves_the_trial_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ctrl_c(seconds: float) -> None:
        raise KeyboardInterrupt

    clock = type("Clock", (), {"sleep": staticmethod(ctrl_c), "monotonic": time.monotonic})
    monkeypatch.setattr("autotune.study.trials.burst_threads.time", clock)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, FakeBurst(), trials=3, watch=FakeWatch(loaded=True))
    monkeypatch.setattr("autotune.study.trials.burst_threads.time", time)
    result = run(tmp_path, FakeBurst(), trials=3, watch=FakeWatch(loaded=True))  # resumed
    first = result.trials[0]
    assert first.status == "interrupted" and not first.ran
    assert first.reason == "interrupted (Ctrl-C) before its burst ran"
