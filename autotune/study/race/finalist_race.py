"""The finalist race: the search's best few configs and the naive baseline, measured again
side by side; the winner and its speedup come from here.

A search measures each trial once, minutes apart from the others, on a machine whose load
can change in between: a speedup computed from two such measurements compares two
machines. The race measures on paired rounds instead. Every entrant runs one fresh burst
per round; a round runs them back to back, each round in another order (rotated by one),
so a change of load falls on a whole round, not on one
config. Then:

* the winner is the entrant with the best median throughput over the rounds (among those
  that passed the first round's eval step and checkpoint save within the budget: that is
  what the old single verification burst checked), and among those with headroom: an
  entrant at the edge of the budget (its CUDA allocator retried, or its peak passed 90% of
  the budget, in its trial or a race burst: ``memory_model.edge_reason``) wins only when
  every entrant is, since a config that barely fits a burst may not fit a long run; the
  preset then records the edge and a warning to keep headroom;
* its speedup over naive and its margin over the runner-up are the geometric means of the
  per-round ratios (winner / naive within each round), with a 95% percentile-bootstrap
  interval over the rounds. With two rounds the interval spans the two rounds' ratios;
  one round gives no interval.

Rounds after the first measure only the contenders: an entrant that ran below ``CUT``
(0.8) times the round's fastest in a round measured alike (below) leaves the race (a
third rung of successive halving, after the trials' screening and their step-wise
pruning), since a paired round that far behind is not this machine's noise
(``benchmarks/burst_noise.py``: a few % between bursts). Naive never leaves (every ratio
needs it); a mixed round (below) removes no one. An entrant that left cannot win; its
figures stay in the table. A finalist whose trial came below ``SURVIVE`` of the best one
measured alike (quiet, or on the same cores left by outside load) does not race at all
(``behind_the_best``): round 1 would only cut it.

Outside load (``MachineWatch``): a burst runs on the cores other processes leave it when
it starts under load, and a round counts only beside rounds measured alike: the quiet
rounds when there are any, else the rounds run on the same cores left, whose ratios hold
though every figure is lower; a round where load came or went between its bursts is
mixed and never counts. How the winner and its figures follow from the rounds that count
(and what is published when none does) is ``decision.py``.

The race's time is counted inside the search's time limit: ``race_reserve_s`` tells the
search how long the race will take, from the entrants' measured step times (a burst of
slow steps times fewer of them: ``race_steps``) and never from a disturbed trial, with
every entrant in the first round and the likely contenders after it. Every
burst is held to the search's deadline (``Deadline.burst_timeout``: the limit plus
half of ``OVERRUN_SHARE`` of it): a burst with no time left is not started, one whose
timeout the deadline capped and that ran out is cut, and a round the deadline cut is left
out; a round that would end past the deadline is not started (the first round always
starts: it is the eval and checkpoint check), or runs with the leader and naive alone
when those two fit. The race stops once it is decided (``decision.decided``: after
the planned rounds, the leader's paired interval over every other entrant still in, naive
included, clears 1); while it is not, the time the entrants that left the race no longer
take goes to more rounds of those still in (up to ``EXTRA_ROUNDS`` more, each only if it
ends within the limit): more paired rounds, a narrower interval.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autotune.core.units import format_figure, over_budget
from autotune.study.race.decision import (
    CUT,
    CUT_ROUND,
    MIXED,
    QUIET,
    count_rounds,
    decide,
    decided,
    edge,
    nothing_ran,
)
from autotune.study.race.race_records import Entrant, RaceResult
from autotune.study.session.deadline import DEADLINE, MIN_BURST_S
from autotune.study.trials.records import SearchEvent, TrialRecord, distinct_best
from autotune.study.trials.trial_cost import cached_compile_s, compile_times, eval_code_key, rest_s

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.session.context import SearchContext
    from autotune.study.session.watch import MachineWatch
    from autotune.study.trials.burst_runner import BurstRunner
    from autotune.study.trials.burst_threads import BurstThreads
    from autotune.study.trials.trial_log import TrialLog

__all__ = [
    "DEFAULT_FINALISTS",
    "DEFAULT_ROUNDS",
    "behind_the_best",
    "entrants_for",
    "finalists_in_time",
    "likely_contenders",
    "race_reserve_s",
    "run_race",
]

DEFAULT_FINALISTS = 3  # the search's top distinct configs in the race
# The share of the time limit the race may take before it races fewer finalists
# (``finalists_in_time``). mu's default races took 94-109 s of a 340 s limit (28-32%);
# beside a busy core its race of 3 finalists and naive took 159 s (47%), and the trials
# measured 4 configs in what was left.
RACE_SHARE = 0.4
HIT = "hit"  # a race burst on every core that outside load reached while it ran
# Paired rounds. Each costs a burst per entrant (mu on a 2-core CPU: 12-20 s each, most
# of it process start and compilation), and a default search has 5 2/3 minutes in all:
# two rounds leave the trials about two thirds of it. More rounds narrow the interval.
DEFAULT_ROUNDS = 2
EXTRA_ROUNDS = 2  # rounds beyond the planned ones, in time the race saved, within the limit
# Where steps are slow a race burst times fewer of them: about RACE_TIMED_S of timed steps,
# never fewer than MIN_RACE_STEPS (a median of 3 steps still leaves out one odd step). The
# rounds, not the steps within a burst, carry the race's evidence: a fourth step of mu's
# 3-second steps added 9 s a round to a race that took 60% of a default search. At 10 s,
# mu's compiled and hand-tuned entrants on the 2-core EPYC (steps of 2.4-2.8 s) still
# timed 4 steps: 7-8 s a round more than 3, in a race of 117 s.
RACE_TIMED_S = 7.0
MIN_RACE_STEPS = 3
# The trials' figures that forecast the race's contenders after its first round: CUT
# (0.8 of a paired round's fastest) less the spread of trials measured minutes apart
# (mu's default search: #2's trial at 0.69x the best's, out after round 1 at 0.59x).
SURVIVE = 0.7
# The first round's eval step runs the model as the trainer evaluates it, uncompiled, but
# a model whose blocks ``compile_regions`` compiled in place compiles their forward-only
# graph there, as a share of a first compile of the training step (mu, mb 16, empty cache,
# the whole model compiled: 27 s more than a cached burst, after a 54 s first compile;
# benchmarks/verify_compile.py)
EVAL_COMPILE_SHARE = 0.5


# -- who races ----------------------------------------------------------------------------


def entrants_for(log: TrialLog, *, finalists: int, expert: TrialRecord | None) -> list[Entrant]:
    """The top ``finalists`` distinct configs of the search and the naive config; one
    entrant per config (a config with several roles has them all: the expert start's is
    ``expert``). A finalist whose trial came below ``SURVIVE`` of the best figure measured
    alike does not race (``behind_the_best``): its first round would cut it. The expert
    start races as any config does, as a finalist: mu on the 2-core EPYC (AVX2), where
    the compiled best's three cached neighbours outran the hand-tuned start, raced it as a
    fifth entrant all the same, 12-24 s of a race that took 131-147 s and held the trials
    to about half the limit; its trial's figure stays in the search's table."""
    out: dict[int, Entrant] = {}

    def add(record: TrialRecord | None, role: str) -> None:
        if record is None or not record.feasible or not record.ran:
            return
        record = log.records.get(_number_of(log, record), record)
        entrant = out.setdefault(record.number, Entrant(record=record, roles=[]))
        if role not in entrant.roles:
            entrant.roles.append(role)

    top = _top(log, finalists)
    behind = behind_the_best(top)
    for record in top:
        if record.number not in behind:
            add(record, "finalist")
    add(log.record_of(log.space.naive()), "naive")
    if expert is not None and _number_of(log, expert) in out:
        add(expert, "expert")
    return list(out.values())


def _number_of(log: TrialLog, record: TrialRecord) -> int:
    """The trial that holds ``record``'s config's result (the first one that measured it)."""
    return log.by_key.get(log.space.key(record.train_config()), record.number)


def _top(log: TrialLog, finalists: int) -> list[TrialRecord]:
    """The search's ``finalists`` best distinct configs, best first."""
    return distinct_best(list(log.records.values()))[:finalists]


def measured_alike(record: TrialRecord) -> str | None:
    """What a trial's figure compares with: ``quiet`` (no outside load), ``N cores left``
    (it ran on the N cores outside load left it: its figure compares with others run so,
    as the race's rounds on the cores left do), or None (load hit it: it compares with
    nothing)."""
    if not record.disturbed:
        return "quiet"
    return f"{record.cores_left} cores left" if record.cores_left else None


def behind_the_best(records: list[TrialRecord]) -> dict[int, float]:
    """The trials below ``SURVIVE`` of the best figure measured alike (``measured_alike``),
    by number, each with its ratio to it: a paired round cuts an entrant below ``CUT`` of
    its fastest, and trials minutes apart spread less than the gap between the two (mu's
    default search: #2's trial at 0.65x the best's raced a round, 30 s of a 340 s limit,
    and left at 0.65x; beside a busy core, every trial on the core left, #2's at 0.67x
    raced a round to leave at 0.66x)."""
    best: dict[str, float] = {}
    for r in records:
        if (alike := measured_alike(r)) is not None:
            best[alike] = max(best.get(alike, 0.0), r.value or 0.0)
    behind: dict[int, float] = {}
    for r in records:
        top = best.get(measured_alike(r) or "", 0.0)
        if top > 0 and (r.value or 0.0) < SURVIVE * top:
            behind[r.number] = (r.value or 0.0) / top
    return behind


def race_reserve_s(
    log: TrialLog,
    *,
    trial_steps: int | None = None,
    finalists: int = DEFAULT_FINALISTS,
    rounds: int = DEFAULT_ROUNDS,
    expert: TrialRecord | None = None,
    steps_ratio: float = 1.0,
) -> float:
    """How long the race would take now: each entrant's trial wall time (scaled by the
    race's steps over the search's) times the rounds. A compiled entrant's compilation is
    counted at the quickest one the search saw, and at most ``CACHED_COMPILE_SHARE`` of the
    slowest: the race finds its code in the compile cache (mu on the 2-core CPU: a 48 s
    compile in its trial, 2.7 s from the cache). On a machine whose cache was empty every
    compile of the search is a first one: mu's first search on a fresh machine reserved
    305 s for two rounds while its race ran three in 190 s, and measured 4 trials.

    Rounds after the first measure only the contenders (``_eliminate``): the reserve counts
    every entrant in the first round and, in the later ones, naive and the entrants whose
    trial came within ``SURVIVE`` of the best trial's figure (mu's default search: 2 of 4
    entrants raced after round 1, yet the reserve held 2 full rounds, which the race then
    spent on extra rounds while the trials had stopped at 2 minutes). When a later round
    holds more contenders than its time allows, it is run with the leader and naive alone
    (``_trim_for_time``). ``trial_steps``: the timed steps of the search's trial bursts,
    which split a trial's wall time into start-up and steps (None: not split).

    The first round's eval step compiles a forward-only graph of each regionally compiled
    code among the entrants (``_eval_compiles_s``).

    While fewer than ``finalists`` configs are in the final on their own merit (not as
    naive or the expert start as well, which race anyway), the next trial may make the
    final: the reserve keeps room for its first-round burst (a median entrant's).
    pointer-gen on the 2-core CPU: its fifth trial made the final, pushing out naive (which
    races all the same) after the trials' time was spent; the reserve grew past the time
    left, and the race ran one round."""
    records = list(log.records.values())
    entrants = entrants_for(log, finalists=finalists, expert=expert)
    estimates = {
        id(e): _burst_estimate(e.record, trial_steps, steps_ratio, records) for e in entrants
    }
    quiet = [estimates[id(e)] for e in entrants if not e.record.disturbed]
    walls = {
        id(e): statistics.median(quiet) if e.record.disturbed and quiet else estimates[id(e)]
        for e in entrants
    }
    if not walls:
        return 0.0
    first = sum(walls.values()) + _eval_compiles_s(log, entrants)
    if sum(e.roles == ["finalist"] for e in entrants) < finalists:
        first += statistics.median(walls.values())
    later = sum(walls[id(e)] for e in likely_contenders(entrants))
    return first + later * (rounds - 1)


def finalists_in_time(
    log: TrialLog,
    seconds: float | None,
    *,
    trial_steps: int | None = None,
    finalists: int = DEFAULT_FINALISTS,
    rounds: int = DEFAULT_ROUNDS,
    expert: TrialRecord | None = None,
    steps_ratio: float = 1.0,
) -> tuple[int, float]:
    """How many finalists the race takes in ``seconds`` (None: no limit), and its
    reserve (``race_reserve_s``) with them: the most, up to ``finalists``, whose race is
    expected to end within ``seconds``, and never fewer than one. The search keeps the
    reserve of a race in ``RACE_SHARE`` of its time limit, and the race starts with the
    most finalists that fit the time then left (``_Race``)."""
    reserve = 0.0
    for count in range(finalists, 0, -1):
        reserve = race_reserve_s(
            log, trial_steps=trial_steps, finalists=count, rounds=rounds, expert=expert,
            steps_ratio=steps_ratio,
        )  # fmt: skip
        if seconds is None or reserve <= seconds:
            return count, reserve
    return 1, reserve


def _eval_compiles_s(log: TrialLog, entrants: list[Entrant]) -> float:
    """What the first round's eval steps add: the eval step runs the uncompiled model (as
    the trainer evaluates), except where ``compile_regions`` compiled its blocks in place;
    each such eval code among the entrants (their compiled code less the micro-batch:
    ``eval_code_key``) compiles its forward-only graph there once (no trial ran an eval
    step), at ``EVAL_COMPILE_SHARE`` of the search's slowest compile (a first one)."""
    slowest = max(compile_times(list(log.records.values())), default=0.0)
    codes = {
        eval_code_key(e.record.config)
        for e in entrants
        if e.record.compile_s and e.record.config.get("compile_regions")
    }
    return len(codes) * EVAL_COMPILE_SHARE * slowest


def likely_contenders(entrants: list[Entrant]) -> list[Entrant]:
    """The entrants the race will likely still measure after its first round: naive, and
    those whose trial came within ``SURVIVE`` of the best figure measured alike
    (``behind_the_best``; a trial that load hit says nothing: it counts as a contender)."""
    behind = behind_the_best([e.record for e in entrants])
    return [e for e in entrants if "naive" in e.roles or e.record.number not in behind]


def race_steps(step_time_s: float | None, steps: int) -> int:
    """Timed steps of a race burst for a config whose steps take ``step_time_s``: the
    race's ``steps``, fewer where steps are slow (about ``RACE_TIMED_S`` of timed steps,
    at least ``MIN_RACE_STEPS``). A loaded machine's naive at 25 s a step would otherwise
    spend minutes per round on one config."""
    if not step_time_s or step_time_s <= 0:
        return steps
    return min(steps, max(MIN_RACE_STEPS, int(RACE_TIMED_S // step_time_s)))


def _burst_estimate(
    record: TrialRecord, trial_steps: int | None, steps_ratio: float, records: list[TrialRecord]
) -> float:
    """How long a race burst of ``record``'s config takes: its trial's wall time (the
    compile counted as the cache serves it, ``rest_s``) scaled by the race's steps over
    the trial's, and no more than its start-up plus the race's timed steps at its measured
    step time (``race_steps``: where steps are slow a race burst times fewer of them). A
    trial whose steps were stable early is counted as if it had run all ``trial_steps``.

    Where the trial recorded its parts (``overhead_s``, ``warmup_s``): the median start-up
    of the search's bursts (the first burst of a search starts the zygote and the first
    compiled one sets up the compile cache: mu's naive trial took 5.6 s to its first step,
    its race bursts 0.3 s), the trial's warm-up less its compile plus a cached compile, and
    the race's timed steps. From the trials' walls, mu's race was reserved 190 s and took
    117 s, and the trials stopped with those 73 s unused."""
    step = record.step_time_median_s
    starts = [r.overhead_s for r in records if r.ran and r.overhead_s is not None]
    if step and trial_steps and record.overhead_s is not None and record.warmup_s is not None:
        warm = max(0.0, record.warmup_s - (record.compile_s or 0.0))
        if record.compile_s:
            warm += cached_compile_s(records)
        timed = race_steps(step, round(trial_steps * steps_ratio)) * step
        return statistics.median(starts) + warm + timed
    wall = record.wall_s or 0.0
    if record.compile_s:
        wall = max(0.0, rest_s(record, records)) + cached_compile_s(records)
    if not step or not trial_steps:
        return wall * steps_ratio
    if record.timed_steps and record.timed_steps < trial_steps:
        wall += (trial_steps - record.timed_steps) * step
    start_up = max(0.0, wall - trial_steps * step)
    stepped = start_up + race_steps(step, round(trial_steps * steps_ratio)) * step
    return min(wall * steps_ratio, stepped)


# -- the race -----------------------------------------------------------------------------


def run_race(
    context: SearchContext,
    log: TrialLog,
    bursts: BurstRunner,
    *,
    burst_threads: BurstThreads,
    stopped: str = "",
    expert: TrialRecord | None = None,
    finalists: int = DEFAULT_FINALISTS,
    rounds: int = DEFAULT_ROUNDS,
    steps: int | None = None,
    score: Callable[[TrainConfig, BurstResult], float] | None = None,
    watch: MachineWatch | None = None,
) -> RaceResult:
    """Race the finalists (the expert start among them where it is one) and naive in
    ``rounds`` interleaved rounds of
    ``steps`` timed steps (default: the search's), ranked by ``score`` (the search's
    objective value of a burst; default its throughput). ``burst_threads`` picks each
    burst's threads, the trials' way; ``stopped``: why the trials stopped (said where the
    race has only naive). ``AutotuneError`` when nothing ran successfully, or when no
    entrant passes its eval and checkpoint round."""
    entrants = entrants_for(log, finalists=finalists, expert=expert)
    if not any("finalist" in e.roles for e in entrants):
        raise nothing_ran(log, context.limits.time_limit_s)
    steps = steps or bursts.steps
    scorer = score or (lambda _config, result: bursts.throughput(result))
    notes: list[str] = []
    started = watch.now() if watch is not None else None
    context.note(
        f"race: {len(entrants)} configs ({', '.join(e.label for e in entrants)}), "
        f"{rounds} interleaved rounds of {steps} timed steps"
    )
    for number, ratio in behind_the_best(_top(log, finalists)).items():
        if all(e.record.number != number for e in entrants):
            context.note(f"race: #{number} not raced: its trial was {ratio:.2f}x the best's")
    if expert is not None and not any("expert" in e.roles for e in entrants):
        context.note(
            f"race: #{expert.number} (the {expert.role or 'expert'} start) not raced: not "
            f"among the finalists (the top {finalists})"
        )
    done = 0
    busy: list[bool] = []
    kinds: list[str] = []  # per round: quiet, capped N, mixed or cut (_round_kind)
    for round_ in range(rounds + EXTRA_ROUNDS):
        if round_ >= rounds and decided(entrants, kinds, context.budget_bytes):
            context.note(f"race: decided after {round_} rounds: the leader's interval clears")
            break
        if round_ >= rounds and not _extra_round_fits(context, entrants):
            break
        if round_ >= 1 and _out_of_time(context, entrants):
            trimmed = _trim_for_time(context, entrants, round_)
            if not trimmed:
                notes.append(f"race: stopped after {round_} rounds, at the search's time limit")
                break
            context.note(trimmed)
        round_started = watch.now() if watch is not None else 0.0
        conditions = _run_round(
            context, burst_threads, bursts, entrants, round_, steps=steps, score=scorer, watch=watch
        )
        done = round_ + 1
        kinds.append(CUT_ROUND if CUT_ROUND in conditions else _round_kind(conditions))
        context.note(_round_line(round_, entrants, context.unit))
        load = watch.window(round_started) if watch is not None else None
        busy.append(load is not None and load.busy)
        if load is not None and load.busy:
            notes.append(f"race round {done} ran while the machine was busy ({load.describe()})")
        if kinds[-1] == CUT_ROUND:
            notes.append(f"race: round {done} was cut at {DEADLINE}; its figures are left out")
            break
        if kinds[-1] != MIXED:
            for message in _eliminate(context, entrants, round_):
                context.note(message)
    counted, basis = count_rounds(entrants, kinds)
    notes += counted
    for message in notes:
        context.note(message)
    seen = _load(watch, started)
    result = decide(context, log, entrants, done, notes, load=seen, basis=basis, stopped=stopped)
    return replace(result, busy_rounds=tuple(busy))


def _run_round(
    context: SearchContext,
    burst_threads: BurstThreads,
    bursts: BurstRunner,
    entrants: list[Entrant],
    round_: int,
    *,
    steps: int,
    score: Callable[[TrainConfig, BurstResult], float],
    watch: MachineWatch | None,
) -> list[str]:
    """Run round ``round_``: one burst of every entrant still in, in the round's order,
    each held to the search's deadline (``Deadline.burst_timeout``). How each burst
    ran (``_condition``); ``CUT_ROUND`` last when the deadline cut the round short."""
    conditions: list[str] = []
    for entrant in _order(entrants, round_):
        if entrant.dropped:
            continue
        for again in (False, True):  # once more where load came and went during it
            threads = burst_threads.for_burst()  # may wait a moment to see a load stay
            wanted = 2 * bursts.timeout_s
            timeout_s = context.deadline.burst_timeout(wanted, expected_s=entrant.record.wall_s)
            if timeout_s is None and not any(t for e in entrants for t in e.throughputs):
                timeout_s = MIN_BURST_S  # one burst, however short, or no preset at all
            if timeout_s is None and again:
                break  # no time to run it again: its figure stays, its round mixed
            if timeout_s is None:  # no time left to start it: the round is cut here
                return [*conditions, CUT_ROUND]
            if again:
                entrant.forget_last_burst()
            burst_started = watch.now() if watch is not None else 0.0
            with watch.burst() if watch is not None else contextlib.nullcontext():
                cut = _run_one(
                    context, bursts, entrant, first=round_ == 0, score=score, threads=threads,
                    steps=race_steps(entrant.record.step_time_median_s, steps),
                    timeout_s=timeout_s, capped=timeout_s < wanted,
                )  # fmt: skip
            condition = CUT_ROUND if cut else _condition(watch, burst_started, threads)
            if again or condition != HIT or burst_threads.after_settle() is not None:
                break
            context.note(f"race: load came and went during {entrant.label}'s burst: run again")
        conditions.append(condition)
        if cut:
            break
    return conditions


def _eliminate(context: SearchContext, entrants: list[Entrant], round_: int) -> list[str]:
    """After round ``round_`` (one measured alike: not mixed): every entrant still in (naive
    aside) whose figure is below ``CUT`` times the round's fastest leaves the race. The
    fastest is taken among the entrants with headroom when there is one (a config at the
    edge of the budget wins only if every config is, so it must not push the others out).
    What it says about it."""
    figures = {
        id(e): e.throughputs[round_]
        for e in entrants
        if not e.dropped and not e.problem and len(e.throughputs) > round_
    }
    running = [e for e in entrants if figures.get(id(e))]
    leader = _leader(running, context.budget_bytes, lambda e: figures[id(e)] or 0.0)
    if leader is None:
        return []
    best = figures[id(leader)] or 0.0
    said = []
    for e in running:
        share = (figures[id(e)] or 0.0) / best
        if "naive" in e.roles or share >= CUT:
            continue
        e.eliminated = f"out after round {round_ + 1}: {share:.2f}x {leader.label}"
        e.dropped = True
        said.append(f"race: {e.label} {e.eliminated} (below {CUT:.1f}x the round's fastest)")
    return said


def _leader(
    entrants: list[Entrant], budget: int, figure: Callable[[Entrant], float]
) -> Entrant | None:
    """The entrant with the best ``figure`` among those with headroom when there is one
    (a config at the edge of the budget leads only if every config is), else None."""
    roomy = [e for e in entrants if not edge(e, budget)]
    return max(roomy or entrants, key=figure, default=None)


def _extra_round_fits(context: SearchContext, entrants: list[Entrant]) -> bool:
    """Whether a round beyond the planned ones fits: only under a time limit, only when
    an entrant besides naive is still in, and only if it ends within the limit (no grace),
    judged from the entrants' last bursts."""
    left = context.deadline.left()
    running = [e for e in entrants if not e.dropped]
    if left is None or not any("naive" not in e.roles for e in running):
        return False
    return 0 < sum(_next_burst_s(e) for e in running) <= left


def _condition(watch: MachineWatch | None, since: float, threads: int | None) -> str:
    """How one race burst ran: ``quiet`` (all of torch's threads, no outside load during
    it), ``capped N`` (on the N cores outside load left it when it started), or ``hit``
    (all threads, and load arrived during it: the figure of neither machine)."""
    if threads is not None:
        return f"capped {threads}"
    if watch is not None and watch.window(since).busy:
        return HIT
    return QUIET


def _round_kind(conditions: list[str]) -> str:
    """A round whose bursts all ran alike (all quiet, or all on the same cores left by
    outside load) compares its configs fairly; any other round is ``mixed``."""
    kinds = set(conditions)
    if len(kinds) == 1 and HIT not in kinds:
        return kinds.pop()
    return MIXED


def _order(entrants: list[Entrant], round_: int) -> list[Entrant]:
    """Round ``round_``'s running order: rotated by one each round, so over as many rounds
    as entrants each config runs once in each position (first after the search, after
    each other config)."""
    k = round_ % len(entrants)
    return entrants[k:] + entrants[:k]


def _run_one(
    context: SearchContext,
    bursts: BurstRunner,
    entrant: Entrant,
    *,
    steps: int,
    first: bool,
    score: Callable[[TrainConfig, BurstResult], float],
    threads: int | None,
    timeout_s: float,
    capped: bool,
) -> bool:
    """One burst of ``entrant`` on ``threads`` (None: torch's default); the first round's
    adds the eval step and checkpoint save. True when the deadline cut it (its timeout
    was ``capped`` by the time left, and it ran out): no figure, and not the config's
    fault."""
    config = entrant.record.train_config()
    started = time.monotonic()
    result = bursts.run(config, steps=steps, timeout_s=timeout_s, verify=first, threads=threads)
    entrant.walls.append(time.monotonic() - started)
    entrant.bursts.append(result)
    if capped and result.status == "timeout":
        entrant.throughputs.append(None)
        return True
    problem = ""
    if not result.ok:
        problem = f"{result.status}: {result.reason}"
    elif (over := over_budget(result.peak_memory_bytes, bursts.budget_bytes)) is not None:
        problem = over + (" with eval and checkpointing" if first else "")
    throughput = score(config, result) if not problem else 0.0
    entrant.throughputs.append(throughput or None)
    if problem and not entrant.problem:
        entrant.problem = problem
        # the naive baseline is still measured (the ratios need it); others leave the race
        entrant.dropped = "naive" not in entrant.roles or not result.ok
    context.emit(
        SearchEvent(
            kind="verify",
            trial=entrant.record,
            verify=result,
            message=problem,
            elapsed_s=context.deadline.elapsed(),
            unit=context.unit,
        )
    )
    return False


def _trim_for_time(context: SearchContext, entrants: list[Entrant], round_: int) -> str:
    """When the next round with every contender would end past the deadline but one with
    the leader (the best median so far, with headroom when one has it) and naive would
    not, the others leave the race for time (their figures stay; the margin over them
    rests on the rounds they ran). What it says about it, or "" when even the two would
    not fit."""
    running = [e for e in entrants if not e.dropped]
    others = [e for e in running if "naive" not in e.roles and e.median is not None]
    leader = _leader(others, context.budget_bytes, lambda e: e.median or 0.0)
    if leader is None:
        return ""
    kept = [e for e in running if e is leader or "naive" in e.roles]
    if len(kept) == len(running) or _out_of_time(context, kept):
        return ""
    left = [e for e in running if e not in kept]
    for e in left:
        e.dropped = True
        e.eliminated = f"out after round {round_} for time"
    labels = ", ".join(e.label for e in left)
    return (
        f"race: {labels} out after round {round_}: the time left holds a round of "
        f"{leader.label} and naive only"
    )


def _out_of_time(context: SearchContext, entrants: list[Entrant]) -> bool:
    """Whether another round would end past the search's deadline (``Deadline.fits``:
    the time limit plus half of ``OVERRUN_SHARE``), judged from the entrants' last bursts
    (``_next_burst_s``). Load or no load: a round without a fair figure earns no extra
    time."""
    round_s = sum(_next_burst_s(e) for e in entrants if not e.dropped)
    return not context.deadline.fits(round_s)


def _next_burst_s(entrant: Entrant) -> float:
    """How long ``entrant``'s next burst will take: its last one's wall, less the eval step
    and checkpoint save a first-round burst ran (``verify_s``; gpt-small on the 2-core CPU:
    a first round of 89 s, the next 73 s; in another search a first round of 98 s had the
    race cut the second to the leader and naive). 0 before its first burst."""
    if not entrant.walls:
        return 0.0
    last = entrant.bursts[-1] if entrant.bursts else None
    verify = last.verify_s if last is not None and last.verify_s else 0.0
    return max(0.0, entrant.walls[-1] - verify)


def _round_line(round_: int, entrants: list[Entrant], unit: str) -> str:
    figures = ", ".join(
        f"{e.label} {format_figure(e.throughputs[-1])}" if e.throughputs and e.throughputs[-1] else
        f"{e.label} -"
        for e in entrants
        if len(e.throughputs) == round_ + 1
    )  # fmt: skip
    return f"race round {round_ + 1}: {figures} {unit}"


def _load(watch: MachineWatch | None, started: float | None) -> dict[str, Any] | None:
    if watch is None or started is None:
        return None
    return watch.window(started).to_dict()
