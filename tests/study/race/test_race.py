"""The finalist race: paired ratios, the running order, a machine that changes under the
search, the expert start and naive in the race, the race inside the time limit."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from virtual_clock import VirtualClock

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.study.race.finalist_race import _order
from autotune.study.race.race_records import Entrant, paired_ratio
from autotune.study.trials.records import TrialRecord
from autotune.testing.burst import FakeBurst, run

# -- paired ratios ---------------------------------------------------------------------------


def test_paired_ratio_is_the_geometric_mean_of_the_rounds_ratios() -> None:
    p = paired_ratio([200.0, 300.0, 100.0], [100.0, 100.0, 100.0])
    assert p is not None and p.rounds == 3
    assert p.estimate == pytest.approx(math.exp((math.log(2) + math.log(3) + 0) / 3))
    assert p.low <= p.estimate <= p.high
    assert p.low >= 1.0 - 1e-9 and p.high <= 3.0 + 1e-9  # within the rounds' own ratios
    # deterministic for a seed
    assert paired_ratio([200.0, 300.0, 100.0], [100.0] * 3) == p


def test_paired_ratio_leaves_out_rounds_without_both_figures() -> None:
    p = paired_ratio([200.0, None, 300.0], [100.0, 100.0, None])
    assert p is not None and p.rounds == 1 and p.estimate == pytest.approx(2.0)
    assert (p.low, p.high) == (p.estimate, p.estimate)
    assert paired_ratio([None, 0.0], [100.0, 100.0]) is None


def test_a_load_that_falls_on_a_whole_round_leaves_the_ratio_alone() -> None:
    # round 2 ran on a machine three times slower: both configs slowed alike
    a = [300.0, 100.0, 300.0]
    b = [150.0, 50.0, 150.0]
    p = paired_ratio(a, b)
    assert p is not None and p.estimate == pytest.approx(2.0)
    assert p.low == pytest.approx(2.0) and p.high == pytest.approx(2.0)
    # the unpaired ratio of the best figures would be the same here, but the ratio of two
    # figures taken in different rounds is not: 300 / 50 = 6
    assert a[0] / b[1] == pytest.approx(6.0)


def test_the_running_order_rotates_and_reverses() -> None:
    entrants = [
        Entrant(record=TrialRecord(number=n, state="COMPLETE", status="ok"), roles=["finalist"])
        for n in range(3)
    ]
    orders = [[e.record.number for e in _order(entrants, r)] for r in range(4)]
    assert orders == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    for position in range(3):  # each config runs once in each position in three rounds
        assert {o[position] for o in orders[:3]} == {0, 1, 2}


# -- the race inside a search ----------------------------------------------------------------


@dataclass
class DriftingBurst(FakeBurst):
    """A machine that becomes ``factor`` times slower for everything after ``after``
    bursts (another job started)."""

    after: int = 4
    factor: float = 2.0
    count: int = 0

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        self.count += 1
        result = super().__call__(spec, config, **kw)
        if self.count > self.after and result.tokens_per_s:
            return BurstResult(
                **{
                    **result.to_dict(),
                    "tokens_per_s": result.tokens_per_s / self.factor,
                    "samples_per_s": (result.samples_per_s or 0.0) / self.factor,
                    "step_times_s": tuple(result.step_times_s),
                    "losses": tuple(result.losses),
                }
            )
        return result


def test_the_speedup_comes_from_paired_rounds_not_from_minutes_apart(tmp_path: Path) -> None:
    # naive is measured while the machine is quiet; the machine halves its speed right
    # after (another job starts); the trials' figures then compare two machines (a
    # speedup too small by 2x), the race's paired rounds compare configs.
    burst = DriftingBurst(after=1, factor=2.0)
    result = run(tmp_path, burst, trials=8)
    assert result.best is not None and result.naive is not None and result.race is not None
    true_ratio = burst.speed(result.best.train_config()) / burst.speed(result.naive.train_config())
    unpaired = (result.best.throughput or 0.0) / (result.naive.throughput or 1.0)
    assert unpaired == pytest.approx(true_ratio / 2)  # what the old verification reported
    assert result.speedup == pytest.approx(true_ratio)
    assert result.race.speedup is not None and result.race.speedup.low == pytest.approx(true_ratio)


def test_naive_races_the_finalists_and_the_expert_start_only_as_one(tmp_path: Path) -> None:
    # mu on the 2-core EPYC: the compiled best's three cached neighbours outran the
    # hand-tuned start, which raced all the same as a fifth entrant (12-24 s of the race).
    burst = FakeBurst()
    notes: list[str] = []
    result = run(
        tmp_path / "a", burst, trials=8, finalists=1,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )  # fmt: skip
    race = result.race
    assert race is not None
    assert sum("finalist" in e.roles for e in race.entrants) == 1
    assert [e.roles for e in race.entrants if "naive" in e.roles] == [["naive"]]
    playbook = next(t for t in result.trials if t.role == "playbook")  # the expert start
    assert all(e.record.number != playbook.number for e in race.entrants)  # #5 beat it
    said = f"#{playbook.number} (the playbook start) not raced: not among the finalists (the top 1)"
    assert any(said in n for n in notes), notes
    # every entrant still in ran every round, in paired rounds; one that left after the
    # first round ran that one
    assert all(len(e.throughputs) == (1 if e.eliminated else 2) for e in race.entrants)
    assert len(burst.verify_calls) + len(burst.race_calls) == sum(
        len(e.throughputs) for e in race.entrants
    )
    # where the expert start is one of the finalists, it races with both roles
    early = run(tmp_path / "b", FakeBurst(), trials=3, finalists=2).race
    assert early is not None
    expert = [e for e in early.entrants if "expert" in e.roles]
    assert len(expert) == 1 and expert[0].roles == ["finalist", "expert"]
    assert expert[0].record.role == "playbook"  # the toy model has no guide


def test_naive_wins_when_nothing_beats_it(tmp_path: Path) -> None:
    @dataclass
    class NaiveBest(FakeBurst):
        def speed(self, c: TrainConfig) -> float:
            return 5000.0 if c.micro_batch == 1 and c.compile == "off" else 1000.0

    result = run(tmp_path, NaiveBest(), trials=6)
    assert result.race is not None and result.naive is not None
    assert result.best is not None and result.best.number == result.naive.number
    assert result.speedup == pytest.approx(1.0)


def test_the_race_counts_inside_the_time_limit(tmp_path: Path, clock: VirtualClock) -> None:
    """Bursts of 1.5 s on the virtual clock in a 30 s limit: the search's own work (the
    study, imports in a cold worker) stays a small part of the limit even on a loaded
    machine, where a real 3 s limit could end before naive ran."""

    @dataclass
    class Slow(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            clock.sleep(1.5)
            return super().__call__(spec, config, **kw)

    t0 = clock.monotonic()
    result = run(tmp_path, Slow(), trials=None, timeout="30s")
    wall = clock.monotonic() - t0
    assert result.race is not None and result.race.rounds >= 1
    # the race did not run past the limit by more than a burst (and the search's own
    # real time, a few seconds at most)
    assert wall < 30.0 + 1.5 + 2.0
    assert "race" in result.stopped or "time limit" in result.stopped


# -- clear losers leave the race; the time they saved buys rounds -----------------------------


def _entrant(number: int, figures: list[float | None], *roles: str, edge: str = "") -> Entrant:
    record = TrialRecord(number=number, state="COMPLETE", status="ok", at_edge=edge)
    return Entrant(record=record, roles=list(roles) or ["finalist"], throughputs=list(figures))


def _state(budget: int = 10**9) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(budget_bytes=budget, unit="tokens/s", trials_in_order=lambda: [])


def test_an_entrant_clearly_behind_in_a_quiet_round_leaves_the_race() -> None:
    from autotune.study.race.decision import CUT
    from autotune.study.race.finalist_race import _eliminate

    fast, behind, close = _entrant(1, [100.0]), _entrant(2, [79.0]), _entrant(3, [81.0])
    naive = _entrant(4, [10.0], "naive")
    edge = _entrant(5, [200.0], edge="peak 95% of the budget")  # faster, but at the edge
    said = _eliminate(_state(), [fast, behind, close, naive, edge], 0)
    assert CUT == 0.8
    # measured against the fastest with headroom (100), not the config at the edge (200)
    assert behind.eliminated == "out after round 1: 0.79x #1" and behind.dropped
    assert not behind.eligible
    assert [e.eliminated for e in (fast, close, naive, edge)] == ["", "", "", ""]
    assert not naive.dropped  # naive is always measured: every ratio needs it
    assert len(said) == 1 and "#2 out after round 1" in said[0]


def test_an_entrant_that_left_cannot_win_and_comes_after_the_contenders() -> None:
    from autotune.study.race.decision import decide as _decide

    # round 2 ran on a machine three times slower; #2 left after round 1 at 0.75x #1, so
    # its one figure (75) is above #1's median (65): by medians alone it would win
    winner, gone = _entrant(1, [100.0, 30.0]), _entrant(2, [75.0])
    gone.eliminated, gone.dropped = "out after round 1: 0.75x #1", True
    naive = _entrant(3, [40.0, 12.0], "naive")
    result = _decide(_state(), _state(), [winner, gone, naive], 2, [], load=None)
    assert result.winner is winner
    assert result.speedup is not None and result.speedup.estimate == pytest.approx(
        math.sqrt(100 / 40 * 30 / 12)
    )
    # the runner-up is the closest rival on the rounds both ran, not naive
    assert result.runner_up is gone
    assert result.margin is not None and result.margin.estimate == pytest.approx(100 / 75)
    entry = next(e for e in result.to_dict()["entries"] if e["trial"] == 2)
    assert entry["eliminated"] == "out after round 1: 0.75x #1"


def test_a_round_where_load_came_or_went_removes_no_one(tmp_path: Path) -> None:
    from fake_watch import FakeWatch

    class Uncapped(FakeWatch):  # load in every burst, and no cores left to run on
        def burst_threads(self) -> int | None:
            return None

    @dataclass
    class Spread(FakeBurst):
        def speed(self, c: TrainConfig) -> float:  # the next at 0.76x mb 4: it races
            return super().speed(c) * (1.75 if c.micro_batch == 4 else 1.0)  # and are cut

    result = run(tmp_path, Spread(), trials=8, watch=Uncapped(loaded=True))
    assert result.race is not None and all(result.race.busy_rounds)
    assert not any(e.eliminated for e in result.race.entrants)
    assert all(len(e.throughputs) == result.race.rounds for e in result.race.entrants)
    quiet = run(tmp_path / "quiet", Spread(), trials=8)
    assert quiet.race is not None and any(e.eliminated for e in quiet.race.entrants)
    capped = run(tmp_path / "capped", Spread(), trials=8, watch=FakeWatch(loaded=True))
    assert capped.race is not None and any(e.eliminated for e in capped.race.entrants)


def test_time_saved_buys_more_rounds_within_the_limit_and_none_without_one(
    tmp_path: Path,
) -> None:
    from autotune.study.race.finalist_race import DEFAULT_ROUNDS, EXTRA_ROUNDS

    @dataclass
    class Tied(FakeBurst):
        """Every compiled config at one speed: a race its rounds do not decide."""

        def speed(self, c: TrainConfig) -> float:
            return 6000.0 if c.compile != "off" else 3000.0

    limited = run(tmp_path / "limited", Tied(), trials=6, timeout="10m")
    assert limited.race is not None and limited.race.rounds == DEFAULT_ROUNDS + EXTRA_ROUNDS
    assert len(limited.race.winner.throughputs) == DEFAULT_ROUNDS + EXTRA_ROUNDS
    unlimited = run(tmp_path / "unlimited", Tied(), trials=6)
    assert unlimited.race is not None and unlimited.race.rounds == DEFAULT_ROUNDS


def test_a_round_that_would_end_past_the_deadline_is_not_started_fair_or_not() -> None:
    # The time limit is the user's: no grace for a race without a fair round (a loaded
    # machine once ran a 3-minute search for 4 min 22 s).
    from autotune.study.race.finalist_race import _out_of_time
    from autotune.study.session.deadline import OVERRUN_SHARE

    state = _limited_state(100.0, elapsed=90.0)  # 15 s to the deadline (100 s + 5%)
    a, naive = _entrant(1, [100.0]), _entrant(2, [50.0], "naive")
    for e in (a, naive):
        e.walls.append(7.0)  # a 14 s round: it fits
    assert not _out_of_time(state, [a, naive])
    a.walls[-1] = 9.0  # a 16 s round does not, whatever the rounds so far were
    assert _out_of_time(state, [a, naive])
    deadline = state.deadline
    assert deadline.hard_left() == pytest.approx(100.0 * (1 + OVERRUN_SHARE / 2) - 90.0, abs=0.5)
    assert deadline.burst_timeout(600.0) == pytest.approx(15.0, abs=0.5)  # capped by it
    late = _limited_state(100.0, elapsed=104.5)
    assert late.deadline.burst_timeout(600.0) is None  # under a second left: not started
    free = _limited_state(None, elapsed=1000.0)
    assert free.deadline.burst_timeout(600.0) == 600.0 and not _out_of_time(free, [a, naive])


def _limited_state(limit: float | None, *, elapsed: float) -> Any:
    import time

    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.context import Limits, SearchContext
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    return SearchContext.of(
        spec=spec,
        space=space,
        budget_bytes=10**9,
        limits=Limits(None, limit),
        started=time.monotonic() - elapsed,
    )


# -- the race's reserve ----------------------------------------------------------------------


def test_the_reserve_counts_the_likely_contenders_after_the_first_round() -> None:
    # mu's default search: 4 entrants, 2 of them out after round 1 as their trials foretold
    # (0.69x and 0.57x the best's), yet the reserve held two full rounds, the trials
    # stopped at 2 minutes of 5 2/3, and the race spent the rest on extra rounds.
    # pointer-gen: the fourth trial made the final three after the trials' time was spent,
    # the reserve grew past the time left, and the race ran one round: room for it stays.
    from autotune.study.plan.space import SearchSpace
    from autotune.study.race.finalist_race import SURVIVE, race_reserve_s
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    log = TrialLog(space=space, budget_bytes=10**9)
    configs = [space.naive().replace(micro_batch=m, grad_accum=32 // m) for m in (1, 2, 4, 8)]
    walls = (30.0, 20.0, 10.0, 40.0)

    def add(number: int) -> None:
        log.absorb(
            TrialRecord(
                number=number,
                state="COMPLETE",
                status="ok",
                config=configs[number].to_dict(),
                value=100.0 * (number + 1),
                ran=True,
                wall_s=walls[number],
            )
        )

    assert SURVIVE == 0.7
    add(0)  # naive alone, a finalist too: room for one more like it in the first round
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx((30 + 30) + 30)
    add(1)
    add(2)  # #1 (200) is below 0.7x #2 (300): not raced; room for a next finalist
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx((10 + 30 + 20) + (10 + 30))
    add(3)  # the fastest so far pushes naive out of the final; #1 still behind: not raced
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx(
        (40 + 10 + 30 + 30) + (40 + 10 + 30)
    )
    assert race_reserve_s(log, finalists=5, rounds=3) == pytest.approx(
        (40 + 10 + 30 + 30) + 2 * (40 + 10 + 30)
    )


def test_likely_contenders_are_naive_the_close_and_the_disturbed() -> None:
    from autotune.study.race.finalist_race import likely_contenders

    def entrant(number: int, value: float, *roles: str, disturbed: bool = False) -> Entrant:
        record = TrialRecord(
            number=number, state="COMPLETE", status="ok", value=value, disturbed=disturbed
        )
        return Entrant(record=record, roles=list(roles) or ["finalist"])

    best, close, far = entrant(1, 100.0), entrant(2, 70.0), entrant(3, 69.0)
    naive = entrant(0, 10.0, "naive")
    slowed = entrant(4, 20.0, disturbed=True)  # its figure says nothing of its config
    loud = entrant(5, 1000.0, disturbed=True)  # nor does it set the bar for the others
    picked = likely_contenders([best, close, far, naive, slowed, loud])
    assert [e.record.number for e in picked] == [1, 2, 0, 4, 5]


def test_a_finalist_whose_quiet_trial_is_far_behind_the_best_does_not_race() -> None:
    # mu's default search: #2's trial at 0.65x the best's raced round 1 (30 s) to leave at
    # 0.65x; naive races whatever its figure.
    from autotune.study.plan.space import SearchSpace
    from autotune.study.race.finalist_race import behind_the_best, entrants_for
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    log = TrialLog(space=space, budget_bytes=10**9)
    configs = [space.naive().replace(micro_batch=m, grad_accum=32 // m) for m in (1, 2, 4, 8)]
    records = [
        TrialRecord(
            number=n, state="COMPLETE", status="ok", config=configs[n].to_dict(), ran=True,
            value=value,
        )
        for n, value in ((0, 10.0), (1, 40.0), (2, 65.0), (3, 100.0))
    ]  # fmt: skip
    for record in records:
        log.absorb(record)
    expert = records[1]  # 0.4x the best: no finalist, so it does not race either
    numbers = [e.record.number for e in entrants_for(log, finalists=3, expert=expert)]
    assert numbers == [3, 0]  # #2 (0.65x) stays out
    assert behind_the_best(records) == {0: 0.1, 1: 0.4, 2: 0.65}
    slowed = replace(records[2], disturbed="load from 12 s")  # a figure that says nothing
    assert behind_the_best([records[3], slowed]) == {}


def test_trials_run_on_the_cores_load_left_compare_among_themselves() -> None:
    # mu under a busy core: every trial ran on the core left; #2 at 0.67x and the expert
    # at 0.54x of #3 raced round 1 to be cut, and the reserve held them for round 2 too.
    from autotune.study.race.finalist_race import behind_the_best, likely_contenders, measured_alike

    def record(number: int, value: float, cores_left: int | None) -> TrialRecord:
        disturbed = "another process used 1.0 cores" if cores_left != 0 else ""
        return TrialRecord(
            number=number, state="COMPLETE", status="ok", value=value,
            disturbed=disturbed, cores_left=cores_left or None,
        )  # fmt: skip

    naive, expert = record(0, 1022.0, 1), record(1, 1176.0, 1)
    playbook, best = record(2, 1451.0, 1), record(3, 2166.0, 1)
    quiet = record(4, 5000.0, 0)  # measured before the load came: another scale
    hit = record(5, 100.0, None)  # load came during it: its figure says nothing
    assert [measured_alike(r) for r in (best, quiet, hit)] == ["1 cores left", "quiet", None]
    behind = behind_the_best([naive, expert, playbook, best, quiet, hit])
    assert sorted(behind) == [0, 1, 2]
    assert behind[2] == pytest.approx(1451 / 2166)
    entrants = [
        Entrant(record=r, roles=roles)
        for r, roles in ((best, ["finalist"]), (playbook, ["finalist"]), (naive, ["naive"]),
                         (expert, ["expert"]), (hit, ["finalist"]))
    ]  # fmt: skip
    assert [e.record.number for e in likely_contenders(entrants)] == [3, 0, 5]


def test_a_later_round_is_judged_without_the_first_rounds_eval_and_checkpoint() -> None:
    # gpt-small: a first round of 98 s (each compiled entrant's eval graph compiled) had
    # the race cut the second round to the leader and naive; the next took 73 s.
    from autotune.study.race.finalist_race import _out_of_time

    state = _limited_state(100.0, elapsed=60.0)  # 45 s to the deadline (the limit + 5%)
    entrants = [_entrant(1, [100.0]), _entrant(2, [95.0]), _entrant(0, [40.0], "naive")]
    for e in entrants:
        e.walls.append(20.0)  # 60 s in all: past the deadline as they stand
        e.bursts.append(BurstResult(status="ok", verify_s=8.0))  # 36 s without the verify
    assert not _out_of_time(state, entrants)  # the round runs with all three
    for e in entrants:
        e.walls.append(20.0)  # a later round's burst: no verify to take off
        e.bursts.append(BurstResult(status="ok"))
    assert _out_of_time(state, entrants)


def test_a_later_round_without_time_for_all_runs_the_leader_and_naive() -> None:
    from autotune.study.race.finalist_race import _trim_for_time

    state = _limited_state(100.0, elapsed=90.0)  # 15 s to the deadline
    leader, second, naive = _entrant(1, [100.0]), _entrant(2, [90.0]), _entrant(0, [40.0], "naive")
    entrants = [second, leader, naive]
    for e in entrants:
        e.walls.append(6.0)  # 18 s for all three; 12 s for two
    said = _trim_for_time(state, entrants, 1)
    assert "#2 out after round 1" in said and "#1 and naive" in said
    assert second.dropped and second.eliminated == "out after round 1 for time"
    assert not leader.dropped and not naive.dropped
    tight = _limited_state(100.0, elapsed=95.0)  # 10 s left: not even the two
    late, other, base = _entrant(1, [100.0]), _entrant(2, [90.0]), _entrant(0, [40.0], "naive")
    for e in (late, other, base):
        e.walls.append(6.0)
    assert _trim_for_time(tight, [late, other, base], 1) == ""
    assert not any(e.dropped for e in (late, other, base))
    # a faster config at the edge of the budget is not the leader the round keeps
    roomy, at_edge = _entrant(1, [100.0]), _entrant(2, [120.0], edge="peak 95% of the budget")
    naive = _entrant(0, [40.0], "naive")
    for e in (roomy, at_edge, naive):
        e.walls.append(6.0)
    assert "#2 out after round 1" in _trim_for_time(state, [roomy, at_edge, naive], 1)
    assert at_edge.dropped and not roomy.dropped


@pytest.mark.parametrize("regions", [False, True])
def test_the_reserve_counts_a_compile_as_the_cache_will_serve_it(regions: bool) -> None:
    # mu's first search on a fresh machine: every compile of the study was a first one, so
    # the quickest the search saw was no cached one; the race's come from the cache. The
    # eval step of round 1 compiles only blocks compiled in place (the trainer evaluates
    # the uncompiled model).
    from autotune.study.plan.space import SearchSpace
    from autotune.study.race.finalist_race import EVAL_COMPILE_SHARE, race_reserve_s
    from autotune.study.trials.trial_cost import CACHED_COMPILE_SHARE
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    log = TrialLog(space=space, budget_bytes=10**9)
    naive = space.naive()
    compiled = naive.replace(
        micro_batch=8, grad_accum=4, compile="default", compile_regions=regions
    )

    def add(number: int, config: TrainConfig, wall: float, compile_s: float | None) -> None:
        log.absorb(
            TrialRecord(
                number=number,
                state="COMPLETE",
                status="ok",
                config=config.to_dict(),
                value=100.0 + number,  # all close: every entrant races every round
                ran=True,
                wall_s=wall,
                compile_s=compile_s,
            )
        )

    add(0, naive, 20.0, None)
    add(1, compiled, 70.0, 60.0)  # a first compile, then 10 s of steps
    hit = CACHED_COMPILE_SHARE * 60.0
    walls = [20.0, 10.0 + hit]
    room = (walls[0] + walls[1]) / 2  # one more entrant: the median of those in
    evals = EVAL_COMPILE_SHARE * 60.0 if regions else 0.0  # a forward-only graph, in place
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx(
        2 * sum(walls) + room + evals
    )
    add(2, compiled.replace(micro_batch=16, grad_accum=2), 11.0, 4.0)  # a cached compile
    walls = [20.0, 10.0 + 4.0, 7.0 + 4.0]  # the quickest compile seen is the cache's
    room = sorted(walls)[1]
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx(
        2 * sum(walls) + room + evals  # one eval graph serves micro-batches 8 and 16
    )
    add(3, compiled.replace(precision="bf16"), 11.0, 4.0)  # another code: its own eval graph
    walls = [20.0, 10.0 + 4.0, 7.0 + 4.0, 7.0 + 4.0]
    assert race_reserve_s(log, finalists=3, rounds=2) == pytest.approx(
        2 * sum(walls) + 2 * evals  # three finalists in: no room for another
    )


def test_a_round_line_writes_throughputs_as_people_read_them() -> None:
    from autotune.study.race.finalist_race import _round_line

    fast, slow, naive = _entrant(7, [10_630.4]), _entrant(4, [24.61]), _entrant(0, [None], "naive")
    line = _round_line(0, [fast, slow, naive], "tokens/s")  # gpt-small printed 1.06e+04
    assert line == "race round 1: #7 10,630, #4 24.6, #0 (naive) - tokens/s"


def test_the_reserve_counts_a_trial_stable_early_as_if_it_ran_every_step() -> None:
    # A trial ends its timed steps once they agree; its race bursts run them all.
    from autotune.study.plan.space import SearchSpace
    from autotune.study.race.finalist_race import race_reserve_s
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)

    def reserve(wall: float, timed_steps: int | None) -> float:
        log = TrialLog(space=space, budget_bytes=10**9)
        log.absorb(
            TrialRecord(
                number=0,
                state="COMPLETE",
                status="ok",
                config=space.naive().to_dict(),
                value=100.0,
                ran=True,
                wall_s=wall,
                step_time_median_s=1.5,
                timed_steps=timed_steps,
            )
        )
        return race_reserve_s(log, trial_steps=4, finalists=3, rounds=2)

    # 6 s of start-up, then 2 of its 4 steps at 1.5 s each: as the 4-step trial's 12 s (two
    # rounds of naive, and room for a finalist's first round)
    assert reserve(9.0, 2) == pytest.approx(reserve(12.0, 4)) == pytest.approx(12 + 12 + 12)
    assert reserve(14.0, None) == pytest.approx(reserve(14.0, 4))


def test_a_round_cut_at_the_deadline_is_not_called_busy_nor_load() -> None:
    from autotune.study.race.decision import CUT_ROUND, MIXED, QUIET, count_rounds

    def entrants() -> list[Entrant]:
        record = TrialRecord(number=0, state="COMPLETE", status="ok")
        return [Entrant(record=record, roles=["finalist"], throughputs=[100.0, None])]

    # the only round cut: no load warning (the time limit's warning comes with the trials)
    assert count_rounds(entrants(), [CUT_ROUND]) == ([], "")
    # a quiet round, then one cut: the quiet one counts, and no "busy round" is left out
    quiet_then_cut = entrants()
    assert count_rounds(quiet_then_cut, [QUIET, CUT_ROUND]) == ([], QUIET)
    assert quiet_then_cut[0].counted == [100.0, None]
    notes, kind = count_rounds(entrants(), [QUIET, MIXED, CUT_ROUND])
    assert kind == QUIET and notes == [
        "race: the 1 busy round(s) left out; the figures are the 1 quiet one(s)"
    ]
    notes, kind = count_rounds(entrants(), [MIXED, CUT_ROUND])
    assert kind == "" and "no race round was measured alike" in notes[0]


# -- a race that stops when it is decided ----------------------------------------------------


def test_the_rounds_decide_once_the_leaders_intervals_clear_everyone_still_in() -> None:
    from autotune.study.race.decision import CUT_ROUND, MIXED, QUIET, decided

    leader = _entrant(3, [120.0, 118.0])
    close = _entrant(1, [110.0, 112.0])
    naive = _entrant(0, [60.0, 61.0], "naive")
    assert decided([leader, close, naive], [QUIET, QUIET], 10**9)
    # one round gives no interval; a round that cannot count decides nothing
    one = [_entrant(3, [120.0]), _entrant(0, [60.0], "naive")]
    assert not decided(one, [QUIET], 10**9)
    for kinds in ([QUIET, MIXED], [MIXED, MIXED], [QUIET, CUT_ROUND], [QUIET, "capped 1"]):
        assert not decided([leader, close, naive], kinds, 10**9), kinds
    assert decided([leader, close, naive], ["capped 1", "capped 1"], 10**9)  # alike: counts
    # an interval that still spans 1: the runner-up led one of the rounds
    swapped = _entrant(1, [110.0, 125.0])
    assert not decided([leader, swapped, naive], [QUIET, QUIET], 10**9)
    # an entrant that left the race is not waited for
    swapped.dropped = True
    assert decided([leader, swapped, naive], [QUIET, QUIET], 10**9)


def test_the_leader_at_the_edge_of_the_budget_does_not_decide_over_one_with_headroom() -> None:
    from autotune.study.race.decision import QUIET, decided

    edge = _entrant(3, [130.0, 131.0], edge="peak 95% of the budget")
    roomy = _entrant(1, [110.0, 112.0])
    naive = _entrant(0, [60.0, 61.0], "naive")
    # the leader is the roomy config, and the edge config's interval over it is above 1
    assert not decided([edge, roomy, naive], [QUIET, QUIET], 10**9)
    roomy.throughputs = [140.0, 141.0]
    assert decided([edge, roomy, naive], [QUIET, QUIET], 10**9)


def test_a_decided_race_runs_no_extra_round_though_time_is_left(tmp_path: Path) -> None:
    from autotune.study.race.finalist_race import DEFAULT_ROUNDS

    # without OpenMP's spin, no two finalists of the fake run alike: the rounds decide
    events: list[Any] = []
    knobs = ["omp_spin=false"]
    result = run(
        tmp_path, FakeBurst(), trials=6, timeout="10m", knobs=knobs, progress=events.append
    )
    assert result.race is not None and result.race.rounds == DEFAULT_ROUNDS
    said = [e.message for e in events if e.kind == "note"]
    assert any(f"decided after {DEFAULT_ROUNDS} rounds" in m for m in said), said


def test_a_race_burst_times_fewer_steps_where_they_are_slow() -> None:
    from autotune.study.race.finalist_race import MIN_RACE_STEPS, race_steps

    assert race_steps(0.5, 4) == 4  # quick steps: the race's own count
    assert race_steps(2.4, 4) == MIN_RACE_STEPS == 3  # mu's compiled steps on 2 cores
    assert race_steps(25.0, 8) == MIN_RACE_STEPS  # a loaded machine's naive
    assert race_steps(None, 4) == 4  # no step time measured: the race's count


def test_the_reserve_counts_the_parts_a_trial_recorded() -> None:
    # A trial that recorded its parts: the race burst is the search's median start-up, the
    # trial's warm-up less its compile (plus a cached compile), and the race's steps. The
    # search's first burst started the zygote (5 s), the others 0.3 s.
    from autotune.study.race.finalist_race import _burst_estimate, race_steps
    from autotune.study.trials.trial_cost import cached_compile_s

    def record(number: int, overhead: float, warmup: float, compile_s: float | None) -> TrialRecord:
        return TrialRecord(
            number=number,
            state="COMPLETE",
            status="ok",
            ran=True,
            wall_s=overhead + warmup + 8.0,
            overhead_s=overhead,
            warmup_s=warmup,
            timed_s=8.0,
            compile_s=compile_s,
            step_time_median_s=4.0,
            timed_steps=2,
        )

    naive, eager, compiled = record(0, 5.0, 1.0, None), record(1, 0.3, 1.0, None), None
    compiled = record(2, 0.3, 51.0, 50.0)
    records = [naive, eager, compiled]
    steps = race_steps(4.0, 4) * 4.0
    assert _burst_estimate(naive, 4, 1.0, records) == pytest.approx(0.3 + 1.0 + steps)
    cached = cached_compile_s(records)
    assert cached == pytest.approx(5.0)  # a tenth of the first compile
    assert _burst_estimate(compiled, 4, 1.0, records) == pytest.approx(0.3 + 1.0 + cached + steps)


def _eager_log(walls: list[float]) -> Any:
    """A search's trial log whose trials ran eager configs of mu-like walls, naive first,
    every figure close (every entrant is a contender after round 1)."""
    from autotune.study.plan.space import SearchSpace
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    space = SearchSpace.for_model(toy_spec(), cpu_profile().device("cpu"), cpu_count=2)
    log = TrialLog(space=space, budget_bytes=10**9)
    configs = [space.naive()] + [
        space.naive().replace(micro_batch=mb, grad_accum=32 // mb) for mb in (2, 4, 8, 16)
    ]
    for number, (config, wall) in enumerate(zip(configs, walls, strict=False)):
        log.absorb(
            TrialRecord(
                number=number, state="COMPLETE", status="ok", config=config.to_dict(),
                value=100.0 + number, ran=True, wall_s=wall,
            )
        )  # fmt: skip
    return log


def test_the_race_takes_the_most_finalists_whose_race_fits_the_time_it_has() -> None:
    # mu beside a busy core: a race of 3 finalists and naive (20 s bursts, 2 rounds) took
    # 159 s of a 340 s limit, and the trials measured 4 configs in what was left.
    from autotune.study.race.finalist_race import finalists_in_time

    log = _eager_log([20.0, 20.0, 20.0, 20.0])  # naive and three finalists
    assert finalists_in_time(log, None) == (3, pytest.approx(2 * 4 * 20.0))
    assert finalists_in_time(log, 160.0) == (3, pytest.approx(160.0))
    assert finalists_in_time(log, 150.0) == (2, pytest.approx(2 * 3 * 20.0))
    assert finalists_in_time(log, 100.0) == (1, pytest.approx(2 * 2 * 20.0))
    assert finalists_in_time(log, 10.0) == (1, pytest.approx(80.0))  # one races anyway


def test_the_race_reserve_is_kept_within_its_share_of_the_time_limit(
    tmp_path: Path, clock: Any
) -> None:
    # Every burst takes 5 s: a race of 2 finalists and naive (6 bursts in 2 rounds) would
    # take more than 40% of a 60 s limit; with 1 finalist (4 bursts, and room for one more
    # entrant's first round) the race comes closest to its share.
    from autotune.study.race.finalist_race import RACE_SHARE

    class FiveSeconds(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            clock.sleep(5.0)
            return super().__call__(spec, config, **kw)

    notes: list[str] = []
    result = run(
        tmp_path,
        FiveSeconds(),
        trials=None,
        timeout="60s",
        output=None,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert RACE_SHARE * 60 < 6 * 5.0
    fewer = [n for n in notes if n.startswith("race: 1 finalist(s) rather than 3, for time")]
    assert fewer, notes
    assert result.race is not None and len(result.race.entrants) == 2  # the best and naive
    assert sum(t.ran and t.status == "ok" for t in result.trials) >= 3
