"""The finalist race: the search's best few configs, the naive baseline and the expert
start, measured again side by side; the winner and its speedup come from here.

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
  interval over the rounds. With two rounds the interval spans the two rounds' ratios,
  and says so.

Rounds after the first measure only the contenders: an entrant that ran below ``CUT``
(0.8) times the round's fastest in a round measured alike (below) leaves the race (a
third rung of successive halving, after the trials' screening and their step-wise
pruning), since a paired round that far behind is not this machine's noise
(``benchmarks/burst_noise.py``: a few % between bursts). Naive never leaves (every ratio
needs it); a mixed round (below) removes no one. An entrant that left cannot win; its
figures stay in the table.

Outside load (``MachineWatch``): a burst runs on the cores other processes leave it when
it starts under load, and a round counts only beside rounds measured alike: the quiet
rounds when there are any, else the rounds run on the same cores left, whose ratios hold
though every figure is lower; a round where load came or went between its bursts is
mixed, and counts only when nothing else does (with a warning).

The race's time is counted inside the search's time limit: ``race_reserve_s`` tells the
search how long the race will take, from the entrants' own trials, and a round that would
end past the limit is not started (the first round always runs: it is the eval and
checkpoint check, and one paired round; while no round was measured alike, a round may
end up to ``UNFAIR_GRACE`` of the limit past it). The time the entrants that left the race no
longer take goes to more rounds of those still in (up to ``EXTRA_ROUNDS`` more, each only
if it ends within the limit): more paired rounds, a narrower interval.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autotune.core.errors import AutotuneError
from autotune.core.units import format_bytes, format_figure
from autotune.study.race_records import NO_RATIO, Entrant, Paired, RaceResult, paired_ratio
from autotune.study.records import (
    SearchEvent,
    TrialRecord,
    distinct_best,
    memory_model_note,
)

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.objective import BurstRunner
    from autotune.study.state import SearchState
    from autotune.study.watch import MachineWatch

__all__ = [
    "DEFAULT_FINALISTS",
    "CUT",
    "DEFAULT_ROUNDS",
    "Entrant",
    "Paired",
    "RaceResult",
    "entrants_for",
    "paired_ratio",
    "race_reserve_s",
    "run_race",
]

DEFAULT_FINALISTS = 3  # the search's top distinct configs in the race
# Paired rounds. Each costs a burst per entrant (mu on a 2-core CPU: 12-20 s each, most
# of it process start and compilation), and a default search has 5 2/3 minutes in all:
# two rounds leave the trials about two thirds of it. More rounds narrow the interval.
DEFAULT_ROUNDS = 2
ROUND_GRACE_S = 20.0  # a round may end this far past the time limit,
ROUND_GRACE_SHARE = 0.1  # or this share of the limit when less (a short search's limit)
CUT = 0.8  # below this fraction of a fair round's fastest, an entrant leaves the race
EXTRA_ROUNDS = 2  # rounds beyond the planned ones, in time the race saved, within the limit
UNFAIR_GRACE = 0.5  # of the limit: how far past it a round may end when no round was fair
# A compile found in the cache, as a share of the first one (mu on the 2-core CPU: 7-9 s
# from the cache after a 33 s first compile)
CACHED_COMPILE_SHARE = 0.3


# -- who races ----------------------------------------------------------------------------


def entrants_for(
    state: SearchState, *, finalists: int, expert: TrialRecord | None
) -> list[Entrant]:
    """The top ``finalists`` distinct configs of the search, the naive config and the
    expert start; one entrant per config (a config with several roles has them all)."""
    out: dict[int, Entrant] = {}

    def add(record: TrialRecord | None, role: str) -> None:
        if record is None or not record.feasible or not record.ran:
            return
        number = state.by_key.get(state.space.key(record.train_config()), record.number)
        record = state.records.get(number, record)
        entrant = out.setdefault(record.number, Entrant(record=record, roles=[]))
        if role not in entrant.roles:
            entrant.roles.append(role)

    for record in distinct_best(list(state.records.values()))[:finalists]:
        add(record, "finalist")
    add(state.record_of(state.space.naive()), "naive")
    add(expert, "expert")
    return list(out.values())


def race_reserve_s(
    state: SearchState,
    *,
    finalists: int = DEFAULT_FINALISTS,
    rounds: int = DEFAULT_ROUNDS,
    expert: TrialRecord | None = None,
    steps_ratio: float = 1.0,
) -> float:
    """How long the race would take now: each entrant's trial wall time (scaled by the
    race's steps over the search's) times the rounds. A compiled entrant's compilation is
    counted at the quickest one the search saw, and at most ``CACHED_COMPILE_SHARE`` of the
    slowest: the race finds its code in the compile cache (mu on the 2-core CPU: a 33 s
    compile in its trial, 7-9 s from the cache). On a machine whose cache was empty every
    compile of the search is a first one: mu's first search on a fresh machine reserved
    305 s for two rounds while its race ran three in 190 s, and measured 4 trials.

    While fewer than ``finalists`` configs are in the final on their own merit (not as
    naive or the expert start as well, which race anyway), the next trial may make the
    final and add its own rounds: the reserve keeps room for them (a median entrant's).
    pointer-gen on the 2-core CPU: its fifth trial made the final, pushing out naive (which
    races all the same) after the trials' time was spent; the reserve grew past the time
    left, and the race ran one round."""
    compiles = [r.compile_s for r in state.records.values() if r.ran and r.compile_s]
    cached = min([*compiles, CACHED_COMPILE_SHARE * max(compiles)]) if compiles else 0.0
    walls = []
    entrants = entrants_for(state, finalists=finalists, expert=expert)
    for e in entrants:
        wall = e.record.wall_s or 0.0
        if e.record.compile_s:
            wall = max(0.0, wall - e.record.compile_s) + cached
        walls.append(wall * steps_ratio)
    if walls and sum(e.roles == ["finalist"] for e in entrants) < finalists:
        walls.append(statistics.median(walls))
    return sum(walls) * rounds


# -- the race -----------------------------------------------------------------------------


def run_race(
    state: SearchState,
    bursts: BurstRunner,
    *,
    expert: TrialRecord | None = None,
    finalists: int = DEFAULT_FINALISTS,
    rounds: int = DEFAULT_ROUNDS,
    steps: int | None = None,
    score: Callable[[TrainConfig, BurstResult], float] | None = None,
    watch: MachineWatch | None = None,
) -> RaceResult:
    """Race the finalists, naive and the expert start in ``rounds`` interleaved rounds of
    ``steps`` timed steps (default: the search's), ranked by ``score`` (the search's
    objective value of a burst; default its throughput). ``AutotuneError`` when nothing
    ran successfully, or when no entrant passes its eval and checkpoint round."""
    entrants = entrants_for(state, finalists=finalists, expert=expert)
    if not any("finalist" in e.roles for e in entrants):
        raise _nothing_ran(state)
    steps = steps or bursts.steps
    scorer = score or (lambda _config, result: bursts.throughput(result))
    notes: list[str] = []
    started = watch.now() if watch is not None else None
    state.note(
        f"race: {len(entrants)} configs ({', '.join(e.label for e in entrants)}), "
        f"{rounds} interleaved rounds of {steps} timed steps"
    )
    done = 0
    busy: list[bool] = []
    kinds: list[str] = []  # per round: quiet, capped N, or mixed (_round_kind)
    for round_ in range(rounds + EXTRA_ROUNDS):
        if round_ >= rounds and not _extra_round_fits(state, entrants):
            break
        fair = any(k != MIXED for k in kinds)
        if round_ >= 1 and _out_of_time(state, entrants, fair=fair):
            notes.append(f"race: stopped after {round_} rounds, at the search's time limit")
            break
        if round_ >= 1 and not fair and _out_of_time(state, entrants, fair=True):
            state.note(
                f"race: outside load came or went during every round so far; round "
                f"{round_ + 1} runs, past the time limit if need be (at most "
                f"{UNFAIR_GRACE:.0%} of it), so that one round compares the configs alike"
            )
        round_started = watch.now() if watch is not None else 0.0
        conditions = []
        for entrant in _order(entrants, round_):
            if not entrant.dropped:
                burst_started = watch.now() if watch is not None else 0.0
                threads = state.burst_threads()
                with watch.burst() if watch is not None else contextlib.nullcontext():
                    _run_one(
                        state,
                        bursts,
                        entrant,
                        steps=steps,
                        first=round_ == 0,
                        score=scorer,
                        threads=threads,
                    )
                conditions.append(_condition(watch, burst_started, threads))
        done = round_ + 1
        kinds.append(_round_kind(conditions))
        state.note(_round_line(round_, entrants, state.unit))
        load = watch.window(round_started) if watch is not None else None
        busy.append(load is not None and load.busy)
        if load is not None and load.busy:
            notes.append(f"race round {done} ran while the machine was busy ({load.describe()})")
        if kinds[-1] != MIXED:
            for message in _eliminate(state, entrants, round_):
                state.note(message)
    notes += _count_rounds(entrants, kinds)
    for message in notes:
        state.note(message)
    result = _decide(state, entrants, done, notes, load=_load(watch, started))
    return replace(result, busy_rounds=tuple(busy))


def _eliminate(state: SearchState, entrants: list[Entrant], round_: int) -> list[str]:
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
    roomy = [e for e in running if not _edge(e, state.budget_bytes)]
    leader = max(roomy or running, key=lambda e: figures[id(e)] or 0.0, default=None)
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


def _extra_round_fits(state: SearchState, entrants: list[Entrant]) -> bool:
    """Whether a round beyond the planned ones fits: only under a time limit, only when
    an entrant besides naive is still in, and only if it ends within the limit (no grace),
    judged from the entrants' last bursts."""
    left = state.time_left()
    running = [e for e in entrants if not e.dropped]
    if left is None or not any("naive" not in e.roles for e in running):
        return False
    return 0 < sum(w for e in running for w in e.walls[-1:]) <= left


QUIET, MIXED = "quiet", "mixed"


def _condition(watch: MachineWatch | None, since: float, threads: int | None) -> str:
    """How one race burst ran: ``quiet`` (all of torch's threads, no outside load during
    it), ``capped N`` (on the N cores outside load left it when it started), or ``hit``
    (all threads, and load arrived during it: the figure of neither machine)."""
    if threads is not None:
        return f"capped {threads}"
    if watch is not None and watch.window(since).busy:
        return "hit"
    return QUIET


def _round_kind(conditions: list[str]) -> str:
    """A round whose bursts all ran alike (all quiet, or all on the same cores left by
    outside load) compares its configs fairly; any other round is ``mixed``."""
    kinds = set(conditions)
    if len(kinds) == 1 and "hit" not in kinds:
        return kinds.pop()
    return MIXED


def _count_rounds(entrants: list[Entrant], kinds: list[str]) -> list[str]:
    """Which rounds the figures come from, and what it says about it. A round counts only
    beside rounds measured alike: outside load does not slow every config alike (on a CPU,
    contended cores slow small micro-batches most), so a loaded round's ratios are not a
    quiet machine's. Quiet rounds when there are any; else the rounds run on the cores
    left by outside load, where the ratios hold (``benchmarks/threads_under_load.py``:
    within 1.3% of the quiet ones) though every figure is lower; else (every round mixed)
    all of them, with a warning."""
    if all(k == QUIET for k in kinds):
        return []
    capped = [k for k in kinds if k.startswith("capped")]
    kind = QUIET if QUIET in kinds else max(capped, key=capped.count) if capped else None
    if kind is None:
        return [
            "warning: every race round ran while outside load came or went, and load does "
            "not slow every config alike: the winner and its speedup may differ on a quiet "
            "machine; run the search again when the machine is quiet to be sure"
        ]
    for e in entrants:
        e.counted = [t if k == kind else None for t, k in zip(e.throughputs, kinds, strict=False)]
    used, left = kinds.count(kind), len(kinds) - kinds.count(kind)
    if kind == QUIET:
        return [f"race: the {left} busy round(s) left out; the figures are the {used} quiet one(s)"]
    cores = kind.split()[1]
    return [
        f"race: outside load held the machine in every round; the figures are the {used} "
        f"round(s) measured on the {cores} core(s) it left (the ratios between configs "
        "hold there, every figure is lower than a quiet machine's)"
        + (f"; {left} round(s) measured otherwise left out" if left else "")
    ]


def _order(entrants: list[Entrant], round_: int) -> list[Entrant]:
    """Round ``round_``'s running order: rotated by one each round, so over as many rounds
    as entrants each config runs once in each position (first after the search, after
    each other config)."""
    k = round_ % len(entrants)
    return entrants[k:] + entrants[:k]


def _run_one(
    state: SearchState,
    bursts: BurstRunner,
    entrant: Entrant,
    *,
    steps: int,
    first: bool,
    score: Callable[[TrainConfig, BurstResult], float],
    threads: int | None,
) -> None:
    """One burst of ``entrant`` on ``threads`` (None: torch's default); the first round's
    adds the eval step and checkpoint save."""
    config = entrant.record.train_config()
    started = time.monotonic()
    result = bursts.run(
        config, steps=steps, timeout_s=2 * bursts.timeout_s, verify=first, threads=threads
    )
    entrant.walls.append(time.monotonic() - started)
    entrant.bursts.append(result)
    problem = ""
    if not result.ok:
        problem = f"{result.status}: {result.reason}"
    elif result.peak_memory_bytes is not None and result.peak_memory_bytes > bursts.budget_bytes:
        problem = (
            f"peak {format_bytes(result.peak_memory_bytes)} over the budget "
            f"{format_bytes(bursts.budget_bytes)}"
            + (" with eval and checkpointing" if first else "")
        )
    throughput = score(config, result) if not problem else 0.0
    entrant.throughputs.append(throughput or None)
    if problem and not entrant.problem:
        entrant.problem = problem
        # the naive baseline is still measured (the ratios need it); others leave the race
        entrant.dropped = "naive" not in entrant.roles or not result.ok
    state.emit(
        SearchEvent(
            kind="verify",
            trial=entrant.record,
            verify=result,
            message=problem,
            elapsed_s=state.elapsed(),
            unit=state.unit,
        )
    )


def _out_of_time(state: SearchState, entrants: list[Entrant], *, fair: bool = True) -> bool:
    """Whether another round would run past the search's time limit by more than
    ``ROUND_GRACE_S`` (or ``ROUND_GRACE_SHARE`` of the limit, when less; the last round's
    bursts, the first with its eval and checkpoint, overestimate the next); by more than
    ``UNFAIR_GRACE`` of the limit when no round so far was ``fair`` (measured alike), since
    without one the race has no figure to trust."""
    left, limit = state.time_left(), state.limits.time_limit_s
    if left is None or limit is None:
        return False
    grace = min(ROUND_GRACE_S, ROUND_GRACE_SHARE * limit)
    if not fair:
        grace = max(grace, UNFAIR_GRACE * limit)
    round_s = sum(w for e in entrants if not e.dropped for w in e.walls[-1:])
    return left + grace < round_s


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


def _decide(
    state: SearchState,
    entrants: list[Entrant],
    rounds: int,
    notes: list[str],
    *,
    load: dict[str, Any] | None,
) -> RaceResult:
    for e in entrants:
        e.at_edge = e.at_edge or _edge(e, state.budget_bytes)
    fastest = max((e for e in entrants if e.eligible), key=lambda e: e.median or 0.0, default=None)
    ranked = sorted(  # a config at the edge of the budget wins only if every config is
        (e for e in entrants if e.eligible),
        key=lambda e: (bool(e.at_edge), -(e.median or 0.0), e.record.number),
    )
    if not ranked:
        tried = "; ".join(f"{e.label}: {e.problem}" for e in entrants if e.problem)
        raise AutotuneError(
            f"no config passed the race's eval and checkpoint round ({tried}); "
            "no preset was written"
        )
    winner = ranked[0]
    notes.extend(_edge_notes(winner, fastest))
    memory = memory_model_note(state.trials_in_order())
    if memory:
        notes.append(memory)
    # the runner-up is the closest rival: the highest paired ratio to the winner over the
    # rounds both ran (an entrant that left the race early included; naive is only when
    # nothing else is closer), one with headroom before one at the edge
    rivals = [e for e in entrants if e is not winner and not e.problem and e.median is not None]
    runner_up = max(
        rivals,
        key=lambda e: (
            not e.at_edge,
            (paired_ratio(e.figures, winner.figures) or NO_RATIO).estimate,
        ),
        default=None,
    )
    naive = next((e for e in entrants if "naive" in e.roles), None)
    speedup = None if naive is None else paired_ratio(winner.figures, naive.figures)
    margin = None
    if runner_up is not None:
        margin = paired_ratio(winner.figures, runner_up.figures)
    return RaceResult(
        rounds=rounds,
        unit=state.unit,
        entrants=tuple(entrants),
        winner=winner,
        runner_up=runner_up,
        naive=naive,
        speedup=speedup,
        margin=margin,
        load=load,
        notes=tuple(notes),
    )


def _edge(entrant: Entrant, budget: int) -> str:
    """Why ``entrant`` is at the edge of the budget: in its trial, or in a race burst."""
    from autotune.study.memory_model import edge_reason

    if entrant.record.at_edge:
        return entrant.record.at_edge
    for burst in entrant.bursts:
        if burst.ok:
            why = edge_reason(
                peak_bytes=burst.peak_memory_bytes,
                budget_bytes=budget,
                alloc_retries=burst.alloc_retries,
            )
            if why:
                return why
    return ""


def _edge_notes(winner: Entrant, fastest: Entrant | None) -> list[str]:
    if winner.at_edge:
        return [
            f"race: the winner {winner.label} runs at the edge of the memory budget "
            f"({winner.at_edge}); every finalist does: the preset records it, keep headroom "
            "(a smaller micro-batch) for a long run"
        ]
    if fastest is not None and fastest is not winner and fastest.at_edge:
        return [
            f"race: {fastest.label} was faster but runs at the edge of the memory budget "
            f"({fastest.at_edge}); {winner.label}, the fastest config with headroom, wins"
        ]
    return []


def _nothing_ran(state: SearchState) -> AutotuneError:
    statuses: dict[str, int] = {}
    for r in state.records.values():
        if r.finished:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no trials"
    return AutotuneError(
        f"no config ran successfully within the budget ({shown}); see the study's trials "
        "for the reasons"
    )
