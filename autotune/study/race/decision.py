"""How the finalist race decides (``finalist_race.py`` runs it): which rounds count, the winner,
and its speedup over naive and margin over the runner-up, each with its evidence.

A figure is published only with its evidence (docs/design.md, principle 8):

* the rounds that count are the quiet ones, else those run wholly on the cores outside
  load left (their ratios hold, ``benchmarks/threads_under_load.py``); a round where load
  came or went between its bursts, or that the deadline cut, never counts;
* with such rounds, the winner is the best median over them, and its speedup and margin
  are paired ratios over them; one round gives a figure without an interval ("1 round");
* with none, the winner is decided from the trials measured on a quiet machine, and the
  speedup and margin are null, the reason giving the quiet trials' unpaired ratio as
  what it is (two bursts minutes apart: mu's naive trial measured 1,296 and 1,553
  tokens/s in two quiet searches, and that ratio was 0.78x the paired one,
  ``benchmarks/contention.py``); with no quiet trial of both configs either, the
  reason says so;
* when the rounds that count were not quiet, the winner is never a config whose quiet
  trial was below ``CUT`` times another contender's (the race's own line between a
  burst's noise and a real gap);
* a search that measured only the naive config has no speedup: the reason says why
  (the others failed, the trial limit, or the time limit, with the limit that would
  measure the expert start).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from autotune.core.errors import AutotuneError
from autotune.study.race.race_records import NO_RATIO, Entrant, Paired, RaceResult, paired_ratio
from autotune.study.trials.records import memory_model_note

if TYPE_CHECKING:
    from autotune.study.session.context import SearchContext
    from autotune.study.trials.trial_log import TrialLog

__all__ = [
    "CUT",
    "CUT_ROUND",
    "MIXED",
    "QUIET",
    "count_rounds",
    "decide",
    "decided",
    "edge",
    "nothing_ran",
]

CUT = 0.8  # below this fraction of a fair round's fastest, an entrant leaves the race
HINT_ROUNDS = 2  # the race's default rounds, for the time limit a naive-only search needs

QUIET, MIXED, CUT_ROUND = "quiet", "mixed", "cut"


def count_rounds(entrants: list[Entrant], kinds: list[str]) -> tuple[list[str], str]:
    """Which rounds the figures come from, what it says about it, and their kind (""
    when no round counts). A round counts only beside rounds measured alike: outside load
    does not slow every config alike (on a CPU, contended cores slow small micro-batches
    most), so a loaded round's ratios are not a quiet machine's. Quiet rounds when there
    are any; else the rounds run on the cores left by outside load, where the ratios hold
    (``benchmarks/threads_under_load.py``: within 1.3% of the quiet ones) though every
    figure is lower; else none (every round mixed, or cut at the deadline): the race
    publishes no figure of its own (``_decide``). A round cut at the deadline is said where
    it was cut (finalist_race.py) and is not a busy one; when it was the only one, the quiet trials
    stand in, and ``_trials_stand_in`` says the time limit is why."""
    if all(k == QUIET for k in kinds):
        return [], QUIET
    if all(k == CUT_ROUND for k in kinds):
        return [], ""
    capped = [k for k in kinds if k.startswith("capped")]
    kind = QUIET if QUIET in kinds else max(capped, key=capped.count) if capped else ""
    if not kind:
        return [
            "warning: no race round was measured alike (outside load came or went during "
            "every round, or the deadline cut it), and load does not slow every config "
            "alike: the race's figures are left out; run the search again when the machine "
            "is quiet to measure the speedup"
        ], ""
    for e in entrants:
        e.counted = [t if k == kind else None for t, k in zip(e.throughputs, kinds, strict=False)]
    used = kinds.count(kind)
    left = len(kinds) - used - kinds.count(CUT_ROUND)  # measured otherwise (cut: said)
    if kind == QUIET:
        return [
            f"race: the {left} busy round(s) left out; the figures are the {used} quiet one(s)"
        ] if left else [], kind
    cores = kind.split()[1]
    return [
        f"race: outside load held the machine in every round; the figures are the {used} "
        f"round(s) measured on the {cores} core(s) it left (the ratios between configs "
        "hold there, every figure is lower than a quiet machine's)"
        + (f"; {left} round(s) measured otherwise left out" if left else "")
    ], kind


def decide(
    context: SearchContext,
    log: TrialLog,
    entrants: list[Entrant],
    rounds: int,
    notes: list[str],
    *,
    load: dict[str, Any] | None,
    basis: str = QUIET,
    stopped: str = "",
) -> RaceResult:
    """The winner, its speedup over naive and its margin over the runner-up, from the
    rounds of ``basis`` (``_count_rounds``); with none, from the quiet trials. ``stopped``:
    why the search's trials stopped ("": not said)."""
    for e in entrants:
        e.at_edge = e.at_edge or edge(e, context.budget_bytes)
    ranked = _ranked(entrants, basis)
    if not basis:  # no round counts: the figures a preset records are the quiet trials'
        _stand_on_trials(entrants)
    if not ranked and not any(e.problem or e.median for e in entrants):
        ranked = _trials_stand_in(entrants, notes)
    if not ranked:
        tried = "; ".join(f"{e.label}: {e.problem}" for e in entrants if e.problem)
        raise AutotuneError(
            f"no config passed the race's eval and checkpoint round ({tried}); "
            "no preset was written"
        )
    winner = _uncontradicted(ranked) if basis != QUIET else ranked[0]
    fastest = max(ranked, key=lambda e: e.median or 0.0)
    notes.extend(_edge_notes(winner, fastest))
    if winner is not ranked[0]:
        notes.append(
            f"race: {ranked[0].label} led rounds not measured on a quiet machine, but its "
            f"quiet trial was below {CUT:.1f}x {winner.label}'s: {winner.label} wins"
        )
    memory = memory_model_note(log.trials_in_order())
    if memory:
        notes.append(memory)
    runner_up = _runner_up(entrants, winner)
    naive = next((e for e in entrants if "naive" in e.roles), None)
    # (why a speedup is not measured is said with the figure, by every view of it: not a note)
    speedup, margin, reason = _figures(context, log, entrants, winner, runner_up, basis, stopped)
    return RaceResult(
        rounds=rounds,
        unit=context.unit,
        entrants=tuple(entrants),
        winner=winner,
        runner_up=runner_up,
        naive=naive,
        speedup=speedup,
        margin=margin,
        load=load,
        notes=tuple(notes),
        speedup_reason=reason,
        paired=bool(basis),
    )


def _trials_stand_in(entrants: list[Entrant], notes: list[str]) -> list[Entrant]:
    """When the deadline left the race no figure at all: the entrants with a quiet trial,
    best first, each standing on its trial's burst (said so; the eval step and checkpoint
    save were not checked). ``AutotuneError`` without one."""
    quiet = sorted(
        (e for e in entrants if _quiet_trial(e)), key=lambda e: -(_quiet_trial(e) or 0.0)
    )
    if not quiet:
        raise AutotuneError(
            "the search's time limit left no time to race a single config, and no trial "
            "was measured on a quiet machine; no preset was written: give the search a "
            "longer --timeout"
        )
    _stand_on_trials(quiet)
    notes.append(
        "warning: the time limit left the race no figure: the winner and its figures are "
        "its trial's (its eval step and checkpoint save were not checked); give the "
        "search a longer --timeout to race the finalists"
    )
    return quiet


def _stand_on_trials(entrants: list[Entrant]) -> None:
    """Each of ``entrants`` with a quiet trial stands on that trial's figures (the
    preset's ``measured``), not on race bursts that no round lets count."""
    from autotune.burst.result import BurstResult

    for e in entrants:
        r = e.record
        if _quiet_trial(e):
            e.stand_in = BurstResult(
                status="ok",
                tokens_per_s=r.tokens_per_s,
                samples_per_s=r.samples_per_s,
                step_time_median_s=r.step_time_median_s,
                step_time_p90_s=r.step_time_p90_s,
                compile_s=r.compile_s,
                peak_memory_bytes=r.peak_memory_bytes,
                mfu=r.mfu,
            )


def _quiet_trial(entrant: Entrant) -> float | None:
    """The entrant's figure from its trial when measured on a quiet machine (None if not)."""
    record = entrant.record
    if not record.feasible or record.disturbed or not record.value:
        return None
    return float(record.value)


def decided(entrants: list[Entrant], kinds: list[str], budget: int) -> bool:
    """Whether the rounds so far (``kinds``, one per round) decide the race: every round
    measured alike (all quiet, or all on the same cores left by outside load), and the
    leader (the best median, one with headroom before one at the edge) ahead of every
    other entrant still in, naive included, with the whole interval of its paired ratio
    above 1. More rounds would narrow intervals that already clear; a round that cannot
    count, or an interval that still spans 1, needs another round."""
    if len(kinds) < 2 or len(set(kinds)) != 1 or kinds[0] in (MIXED, CUT_ROUND):
        return False
    running = [e for e in entrants if not e.dropped and not e.problem and e.median]
    roomy = [e for e in running if not edge(e, budget)]
    leader = max(roomy or running, key=lambda e: e.median or 0.0, default=None)
    if leader is None or len(running) < 2:
        return False
    for other in running:
        if other is leader:
            continue
        ratio = paired_ratio(leader.throughputs, other.throughputs)
        if ratio is None or not ratio.has_interval or ratio.low <= 1.0:
            return False
    return True


def _ranked(entrants: list[Entrant], basis: str) -> list[Entrant]:
    """Who may win, best first: by the median of the rounds that count; with no such
    round, by the quiet trial figures (those entrants that have one), else by every
    round's median (no figure is published then). A config at the edge of the budget
    comes after every config with headroom."""
    eligible = [e for e in entrants if e.eligible]

    def figure(e: Entrant) -> float:
        return e.median or 0.0

    if not basis and any(_quiet_trial(e) for e in eligible):
        eligible = [e for e in eligible if _quiet_trial(e)]

        def figure(e: Entrant) -> float:
            return _quiet_trial(e) or 0.0

    return sorted(eligible, key=lambda e: (bool(e.at_edge), -figure(e), e.record.number))


def _uncontradicted(ranked: list[Entrant]) -> Entrant:
    """The first of ``ranked`` that no quiet trial of another contender found slower
    beyond the noise (below ``CUT`` times its figure: the race's own line between noise
    and a real gap). Rounds not measured on a quiet machine do not outrank a quiet
    measurement that says the opposite."""
    for e in ranked:
        mine = _quiet_trial(e)
        if mine is None or not any(
            (_quiet_trial(o) or 0.0) * CUT > mine for o in ranked if o is not e
        ):
            return e
    return ranked[0]


def _runner_up(entrants: list[Entrant], winner: Entrant) -> Entrant | None:
    """The closest rival: the highest paired ratio to the winner over the rounds both ran
    (an entrant that left the race early included; naive only when nothing else is
    closer), one with headroom before one at the edge."""
    rivals = [e for e in entrants if e is not winner and not e.problem and e.median is not None]
    return max(
        rivals,
        key=lambda e: (
            not e.at_edge,
            (paired_ratio(e.figures, winner.figures) or NO_RATIO).estimate,
        ),
        default=None,
    )


def _figures(
    context: SearchContext,
    log: TrialLog,
    entrants: list[Entrant],
    winner: Entrant,
    runner_up: Entrant | None,
    basis: str,
    stopped: str,
) -> tuple[Paired | None, Paired | None, str]:
    """The winner's speedup over naive and margin over the runner-up, and the reason that
    qualifies them: paired rounds measured alike (no reason; one round has no interval);
    with none, nothing, the reason giving the quiet trials' unpaired ratio if any."""
    naive = next((e for e in entrants if "naive" in e.roles), None)
    if naive is winner and not any(e is not naive and not e.problem for e in entrants):
        return None, None, _only_naive(context, log, naive, entrants, stopped)
    if basis:
        speedup = None if naive is None else paired_ratio(winner.figures, naive.figures)
        margin = None if runner_up is None else paired_ratio(winner.figures, runner_up.figures)
        why = _naive_not_run(log, context.limits.time_limit_s) if naive is None else ""
        return speedup, margin, why
    mine = _quiet_trial(winner)
    base = None if naive is None else _quiet_trial(naive)
    if mine is None or base is None:
        why = _naive_not_run(log, context.limits.time_limit_s) if naive is None else ""
        return None, None, why or "no quiet round, and no quiet trial of both configs"
    return (
        None,
        None,
        (
            f"no race round was quiet; the quiet trials, minutes apart and unpaired, gave "
            f"{mine / base:.2f}x, too loose to publish"
        ),
    )


def _naive_not_run(log: TrialLog, limit: float | None) -> str:
    """Why the race has no naive config to compare with when its trial never ran: a short
    time limit ran the quick start first and ended before it. "" when it ran (a naive
    config that failed or did not fit is reported as such)."""
    if log.record_of(log.space.naive()) is not None:
        return ""
    if limit is None:
        return "the naive config did not run"
    return (
        f"the time limit ({_minutes(limit)}) ran out before the naive config, which a short "
        "search runs after its quick start; a longer --timeout measures it"
    )


def _only_naive(
    context: SearchContext, log: TrialLog, naive: Entrant, entrants: list[Entrant], stopped: str
) -> str:
    """Why a search whose race holds only the naive config has no speedup: every other
    config failed or did not fit, the trial limit allowed no other, or the time limit left
    no time for another (it stopped one, or none other ran); then what limit would measure
    the expert start and race it (a trial like naive's, then the planned rounds of two
    configs)."""
    what = "the search measured only the naive config"
    others = [r for r in log.trials_in_order() if r.number != naive.record.number]
    failed = Counter(r.status for r in others if r.failed or r.infeasible)
    problems = [f"#{e.record.number} {e.problem}" for e in entrants if e is not naive and e.problem]
    why = "; ".join([f"{n} {status}" for status, n in sorted(failed.items())] + problems)
    limit = context.limits.time_limit_s
    timed = limit is not None and any(r.status == "stopped" for r in others)
    if why and not timed:
        return f"{what}: every other config failed or did not fit ({why})"
    if log.trials_left() == 0:
        return f"{what}: the limit of {context.limits.trials} measured trials allowed no other"
    if limit is None:
        return f"{what} ({stopped or 'stopped'})"
    burst = max(naive.record.wall_s or 0.0, max(naive.walls, default=0.0))
    needed = context.deadline.elapsed() + burst * (1 + 2 * HINT_ROUNDS)
    return (
        f"the time limit ({_minutes(limit)}) left time to measure only the naive config"
        + (f" (the others: {why})" if why else "")
        + f"; a limit of about {_minutes(math.ceil(max(needed, limit + burst)))} would measure the "
        "expert start and race it"
    )


def _minutes(seconds: float) -> str:
    """A time limit as ``--timeout`` takes it: whole minutes, or seconds under two (a
    tenth of a second where it has one: ``--timeout 11.7s``)."""
    return f"{round(seconds, 1):g} s" if seconds < 120 else f"{math.ceil(seconds / 60)} min"


def edge(entrant: Entrant, budget: int) -> str:
    """Why ``entrant`` is at the edge of the budget: in its trial, or in a race burst."""
    from autotune.study.plan.memory_model import edge_reason

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


def nothing_ran(log: TrialLog, limit: float | None) -> AutotuneError:
    """Why the race has no config to race: each finished trial's status, counted; where a
    time limit stopped every one, that the limit was too short for a single burst (mu
    with ``--timeout 8s``: its naive trial stopped, which read as a budget problem); where
    trials failed, the most common failure. ``limit``: the search's time limit (None:
    none)."""
    finished = [r for r in log.records.values() if r.finished]
    statuses = Counter(r.status for r in finished)
    shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no trials"
    if limit is not None and finished and set(statuses) <= {"stopped", "timeout"}:
        longest = max(r.wall_s or 0.0 for r in finished)
        return AutotuneError(
            f"no config finished a burst within the time limit ({_minutes(limit)}): {shown}, "
            f"the longest still running after {longest:.0f} s; give a longer --timeout, or "
            "none (the default limit measures and races several configs)"
        )
    failed = Counter(r.reason for r in finished if r.status in ("error", "crash") and r.reason)
    reason, count = failed.most_common(1)[0] if failed else ("", 0)
    if count > 1 or (count and count == len(finished)):  # one cause says more than a count
        which = "every one" if count == len(finished) else f"{count} of them"
        return AutotuneError(
            f"no config ran successfully ({shown}); {which} failed with: {reason} (the "
            "study's trials hold each reason)"
        )
    return AutotuneError(
        f"no config ran successfully within the budget ({shown}); see the study's trials "
        "for the reasons"
    )
