"""Running one trial: the config the sampler proposed, measured by a burst (or not), and its
outcome told to Optuna.

* a config already measured in this study is not run again: its outcome is replayed;
* a config the planner rules out (dominated by an OOM, predicted over budget) is
  recorded as infeasible, no burst;
* otherwise one burst runs it; each timed step is reported to the trial, so the pruner can
  stop a config clearly slower than the best so far. Before it runs, the memory model's
  prediction (its fit, or its bound in a class that ran out) and predicted edge (largest
  micro-batch) are taken; the outcome stores them with the error in % of the measured
  peak (``ok`` bursts), the CUDA allocator's retries and ``at_edge``: why a config that
  fitted did so only narrowly (``memory_model.edge_reason``).

How outcomes are told to Optuna (> 0 constraint means infeasible):

* ``ok`` within budget -> COMPLETE with the objective value, constraint ``(peak - budget)
  / budget`` (<= 0: feasible);
* ``oom``, over budget, dominated, predicted over budget -> COMPLETE with value 0.0 and a
  constraint > 0, so the sampler learns where the boundary is;
* ``pruned`` -> PRUNED (its intermediate throughputs stay on the trial); ``stopped`` (the
  search's time limit cut the burst) -> PRUNED too, and the config may run again later;
  so is ``skipped``: a queued refinement of a trial that a later best clearly beats (no
  burst);
* ``timeout``, ``crash``, ``nan``, ``error`` -> COMPLETE with value 0.0 and a constraint
  > 0 too, with the status and reason stored. Not Optuna's FAIL state: TPE ignores FAIL
  trials entirely, so it would keep proposing a config that crashes (measured: 80 of 90
  trials went to repeats of crashing configs). A config that crashes, diverges or hangs
  is not one to ship, so "infeasible" is the honest signal; the memory model does not
  count it as an OOM.
* a burst measured while something outside the search competed for the device (the
  machine watch, ``watch.py``), or whose step times show interference (p90 over twice the
  median), keeps its outcome but is marked ``disturbed`` with the reason: the planner
  measures it again once the machine is quiet, and the pruner never stops a burst while
  the machine is busy (a loaded machine makes every config look slow);
* Ctrl-C: the running trial becomes FAIL with status ``interrupted`` (Optuna's optimize
  loop does that; ``run_burst`` kills the trial's process group on its way out).

Objectives (both maximized, so infeasible is always 0):

* ``throughput``: steady-state tokens/s (samples/s for models measured in samples);
* ``time-to-train``: the effective throughput of a run of ``train_steps`` optimizer steps
  with compilation charged: ``train_steps * step_tokens / (train_steps * step_median +
  compile_s)``. Maximizing it minimizes the time to train that many steps; the time
  itself is stored as ``time_to_train_s``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

import optuna

from autotune.core.units import format_bytes, format_figure, over_budget
from autotune.study.session.deadline import DEADLINE
from autotune.study.storage.optuna_glue import PRUNE_RATIO, set_outcome
from autotune.study.storage.ownership import trial_owner
from autotune.study.trials.records import FAILED_STATUSES, TrialRecord
from autotune.study.trials.trial_cost import held_to_time, will_not_finish

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.plan.memory_model import MemoryVerdict
    from autotune.study.plan.planner import Planner
    from autotune.study.session.context import SearchContext
    from autotune.study.storage.workers import Workers
    from autotune.study.trials.burst_runner import BurstRunner, Goal
    from autotune.study.trials.burst_threads import BurstThreads
    from autotune.study.trials.trial_log import TrialLog

__all__ = [
    "INFEASIBLE_VALUE",
    "TRIAL_STABLE_WITHIN",
    "StopSearch",
    "TrialObjective",
    "will_not_finish",
]

INFEASIBLE_VALUE = 0.0
MIN_CAPPED_BURST_S = 1.0  # the least time a burst gets when the time limit caps it
# A compiled trial's compile may take at most this share of the search's time limit.
# pointer-gen's compile on the 2-core CPU outlasted a default search's whole limit (its
# decoder loops over the target steps, which compile unrolls); once a compile mode has run
# out of it, the search runs no more trials with that mode. The cap holds the compile (the
# burst's first step), not the steps after it: those run on to the trial's timeout where
# they are expected to end within it (mu beside a busy core: a 77 s compile stopped at its
# 99 s cap one 4.8 s step short, then measured again from the cache in 17 s).
COMPILE_SHARE = 1 / 3
# Until a trial with a compile mode has finished, one may take at most this share of the
# time left for trials, so that as much is left for the others as a compile that may never
# end takes (pointer-gen: a third of the limit left time for one more config, and the
# playbook's config without compile was not reached).
UNPROVEN_COMPILE_SHARE = 1 / 2

# A trial's timed steps end once two or more agree within this fraction: more steps would
# move its figure by less, and a slow config (naive at micro-batch 1: 25 s a step on a
# slow CPU) leaves the search the time of its remaining steps. The race's bursts run all
# their steps: its rounds are compared step count for step count. A trial screens (the
# race, in paired rounds, decides between the finalists): on the 2-core EPYC two steps of
# one config spread 5-10%, and at 5% an eager trial of mu timed 4 steps of 3 s where 2
# told the planner as much. On a CPU one step is enough where its micro-batches ran evenly
# (``micro_batches_even``): steps of one config drift together over the seconds of a trial
# (mu's 8 steps in a row: 0.82x-1.07x their median), so a second step adds less than it
# costs. Interleaved with two-step trials, mu's default search on the 2-core EPYC (AVX2)
# measured 18 and 20 configs against 13 and 13 (beside a nice-19 busy core 10 and 14
# against 8 and 7), and picked alike (1.81x, 1.60x naive against 1.84x, 1.60x).
TRIAL_STABLE_WITHIN = 0.10
# Past the timed steps asked for (a CUDA burst runs more where steps are short: up to
# 500), one step in this many is reported to the pruner: each report is a write to the
# study's storage (500 took 0.6-5.9 s of the search process's time).
REPORT_EVERY_PAST_ASKED = 10
# How the time limit stopped a burst: a trial's is held to the time left for trials, naive's
# and the quick start's only to the deadline (``_timeout``)
TRIALS_TIME_RAN_OUT = (
    "the time left for trials (the limit less the race's share) ran out during its burst"
)
DEADLINE_CAME = f"{DEADLINE} came during its burst"


@contextlib.contextmanager
def _stop_recorded(trial: optuna.Trial, when: str, started: float | None = None) -> Iterator[None]:
    """A stop inside (Ctrl-C, or the CLI's StopSignal for SIGTERM/SIGHUP) leaves ``trial``
    ``interrupted``, ``when``; with ``started``, its burst ran since then."""
    try:
        yield
    except KeyboardInterrupt as stop:
        ran, wall_s = started is not None, None if started is None else time.monotonic() - started
        with contextlib.suppress(Exception):
            reason = f"interrupted ({str(stop) or 'Ctrl-C'}) {when}"
            set_outcome(trial, status="interrupted", reason=reason, ran=ran, wall_s=wall_s)
        raise


class StopSearch(optuna.TrialPruned):
    """A trial passed over (pruned, its outcome stored) whose objective decided that the
    search stops, for ``reason``. The search loop (``api._optimize``) records the reason
    and stops the study; to Optuna it is a pruned trial."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(kw_only=True)
class TrialObjective:
    """Optuna's objective function: one trial, measured and classified. It reads the
    search's ``context`` and ``log`` (the planner writes the log) and picks each burst's
    threads through ``burst_threads``; what it alone learns it holds: the compile modes too
    slow to run again and the trials measured under load."""

    context: SearchContext
    log: TrialLog
    burst_threads: BurstThreads
    planner: Planner
    bursts: BurstRunner
    goal: Goal
    cut_by_time: str = ""  # how the time limit stopped the running burst ("": it did not)
    cut_compile: str = ""  # why the running burst was stopped while compiling, if it was
    # the running compiled burst's start (``time.monotonic``) and timeout, where the time
    # limit holds its steps past the compile cap (None: no such burst runs)
    _past_cap: tuple[float, float] | None = field(default=None, init=False, repr=False)
    workers: Workers | None = None  # the other workers of a shared study (None: alone)
    # compile modes whose compilation outlasted COMPILE_SHARE of the limit: not run again
    slow_compiles: dict[str, str] = field(default_factory=dict)
    disturbed_trials: list[int] = field(default_factory=list)  # this run's, in order
    _owner: dict[str, Any] = field(default_factory=trial_owner, init=False, repr=False)

    def __call__(self, trial: optuna.Trial) -> float:
        trial.set_user_attr("owner", self._owner)  # who runs it (claim_running_trials)
        config = self.context.space.suggest(trial)
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("size_name", self.context.spec.size_name)
        if self.workers is not None:
            self.workers.sync()  # what the other workers finished
        previous = self.log.record_of(config)
        remeasure = trial.user_attrs.get("role") == "re-measure"
        if previous is not None and not (remeasure and previous.disturbed):
            return self._replay(trial, previous)
        verdict = self.planner.ruled_out(config)
        if verdict is not None:
            return _skip(trial, verdict)
        slow = self.slow_compiles.get(config.compile)
        if slow:
            _pass_over(trial, slow)
        role = trial.user_attrs.get("role")
        outdated = self.planner.outdated(trial.user_attrs.get("refines"))
        if outdated and role in ("refine", "screen"):
            _pass_over(trial, outdated)
        short = ""
        if held_to_time(role, config):
            short = will_not_finish(self.log, self.context.deadline, config)
        if short:
            # a config queued after it that fits (its code in the compile cache) runs
            # next; with none, the race gets the time: it runs more rounds in time saved
            _pass_over(trial, short, stop=self.planner.next_that_fits(trial.study) is None)
        if self.workers is not None:
            status, reason = self.workers.gate(trial, config, again=remeasure)
            if status:  # another worker measures it, or the study's budget is spent
                set_outcome(trial, status=status, reason=reason, ran=False, constraint=0.0)
                if status == "stopped":
                    raise StopSearch(reason)
                raise optuna.TrialPruned(reason)
        return self._measure(trial, config)

    # -- a burst -----------------------------------------------------------------------
    def _measure(self, trial: optuna.Trial, config: TrainConfig) -> float:
        exempt = trial.user_attrs.get("role") in ("naive", "quick-start")  # measured whole
        seen: list[float] = []  # each timed step's throughput, as reported
        on_step = self._step_reporter(trial, config, seen, exempt=exempt)
        memory = self.log.memory  # its prediction, made before the burst runs
        predicted = memory.predict(config)
        predicted = memory.bound(config) if predicted is None else predicted
        edge = memory.edge_micro_batch(config)
        with _stop_recorded(trial, "before its burst ran"):
            threads = self.burst_threads.for_burst()  # may wait a moment to see a load stay
        t0 = time.monotonic()
        self.cut_by_time, self.cut_compile = "", ""
        timeout_s, capped = self._timeout(exempt=exempt)
        compile_cap, cap_share = self._compile_cap(config)
        options: dict[str, Any] = {}
        if compile_cap is not None and compile_cap < timeout_s:
            options["compile_timeout_s"] = compile_cap  # its steps may run on to timeout_s
        else:
            compile_cap = None
        self._past_cap = (t0, timeout_s) if compile_cap is not None and capped else None
        watch = self.context.watch
        burst = watch.burst() if watch is not None else contextlib.nullcontext()
        with _stop_recorded(trial, "while its burst ran", started=t0), burst:
            result, threads = self.burst_threads.run_on_cores_left(
                self.bursts,
                config,
                number=trial.number,
                timeout_s=timeout_s,
                threads=threads,
                steps=self.bursts.steps,
                on_step=on_step,
                stable_within=TRIAL_STABLE_WITHIN,
                **options,
            )
        self._past_cap = None
        if compile_cap is not None and result.status == "timeout" and not _compiled(result):
            self.cut_compile = self._cut_at_the_compile_cap(trial, config, compile_cap, cap_share)
            result = replace(result, status="pruned")
        elif capped and result.status == "timeout":
            self.cut_by_time = capped
            result = replace(result, status="pruned")
        if result.recompiles:
            self.context.note(
                f"trial #{trial.number} recompiled {result.recompiles} graph(s) during its "
                "timed steps (dynamic shapes or a failed guard): its figure includes "
                "compilation, and a training run would recompile too"
            )
        disturbed = self.context.disturbance(t0, result.step_times_s)
        if disturbed and threads is not None:
            disturbed += f"; measured on the {threads} core(s) left to it"
        elif threads is not None:  # the load that took cores from it left as it ran
            disturbed = f"measured on the {threads} core(s) that outside load left it, a load "
            disturbed += "gone before its end: a figure of fewer cores than the machine has"
        if disturbed:
            trial.set_user_attr("disturbed", disturbed)
            self._warn_disturbed(trial.number, disturbed)
        return self._classify(
            trial,
            config,
            result,
            wall_s=time.monotonic() - t0,
            seen=seen,
            predicted=predicted,
            edge=edge,
            cores_left=threads,
        )

    def _warn_disturbed(self, number: int, reason: str) -> None:
        """Say once, live, that measurements are being disturbed; count the trial."""
        if not self.disturbed_trials:
            self.context.note(
                f"warning: trial #{number} was disturbed ({reason}); trials measured "
                "under load are marked, never pruned for it, and measured again once the "
                "machine is quiet; the finalist race compares configs side by side"
            )
        self.disturbed_trials.append(number)

    def _step_reporter(
        self, trial: optuna.Trial, config: TrainConfig, seen: list[float], *, exempt: bool
    ) -> Callable[[int, float], bool]:
        """The burst's ``on_step``: report each timed step's throughput to the trial (for
        the pruner) and say whether the burst goes on."""
        tokens_per_step = self._tokens_per_step(config)
        asked = self.bursts.steps

        def on_step(index: int, step_time_s: float) -> bool:
            if exempt:
                return True
            if self.context.deadline.for_trials() == 0.0:  # the trials' time ran out during it
                self.cut_by_time = TRIALS_TIME_RAN_OUT
                return False
            if self._steps_would_pass_timeout(asked - index - 1, step_time_s):
                self.cut_by_time = TRIALS_TIME_RAN_OUT
                return False
            if index >= asked and (index - asked) % REPORT_EVERY_PAST_ASKED:
                return True  # a CUDA burst's extra short steps: every tenth is reported
            if step_time_s > 0:
                seen.append(tokens_per_step / step_time_s)
                trial.report(seen[-1], int(index))
            if self.context.busy_now():  # every config looks slow on a loaded machine
                return True
            return not trial.should_prune()

        return on_step

    def _steps_would_pass_timeout(self, steps_left: int, step_time_s: float) -> bool:
        """Whether a compiled burst past its compile cap would run out the time limit's
        timeout before its remaining steps end: it is stopped now, not at the timeout."""
        if self._past_cap is None:
            return False
        started, timeout_s = self._past_cap
        ends = time.monotonic() - started + max(0, steps_left) * step_time_s
        return ends > timeout_s

    def _timeout(self, *, exempt: bool) -> tuple[float, str]:
        """The burst's timeout, and how the time limit capped it ("": it did not). A trial
        may not eat the race's time: its timeout is at most the time left for trials (pointer-
        gen's compile took a search's whole limit), and running out of it is "stopped", not a
        failure. Naive and the quick start (``exempt``) are held only to the deadline: naive's
        burst can outlast the limit on a loaded machine, and the quick start runs with nothing
        measured (capped, mu's stopped after 2 s of a 4 s limit)."""
        timeout_s = self.bursts.timeout_s
        time_left = self.context.deadline.for_trials()
        capped = ""
        if not exempt and time_left is not None and time_left < timeout_s:
            timeout_s, capped = max(time_left, MIN_CAPPED_BURST_S), TRIALS_TIME_RAN_OUT
        hard = self.context.deadline.burst_timeout(timeout_s)
        if hard is None or hard < timeout_s:
            timeout_s, capped = max(hard or 0.0, MIN_CAPPED_BURST_S), DEADLINE_CAME
        return timeout_s, capped

    def _cut_at_the_compile_cap(
        self, trial: optuna.Trial, config: TrainConfig, cap: float, share: str
    ) -> str:
        """Why a compiled burst that ran out its ``cap`` while still compiling was
        stopped: its compile mode is not run again in this search."""
        cut = f"no result after {cap:.0f} s ({share}), most likely still compiling"
        self.slow_compiles[config.compile] = (
            f"compile={config.compile} is not run again in this search: trial "
            f"#{trial.number} had {cut}"
        )
        self.context.note(self.slow_compiles[config.compile])
        return cut

    def _compile_cap(self, config: TrainConfig) -> tuple[float | None, str]:
        """The most a compiled trial's compile may take, and what share that is: ``COMPILE_SHARE``
        of the time limit, and while no trial with its compile mode has finished,
        ``UNPROVEN_COMPILE_SHARE`` of the time left for trials if that is less. (None
        without a limit, or without compile.)"""
        limit = self.context.limits.time_limit_s
        if config.compile == "off" or limit is None:
            return None, ""
        cap = max(COMPILE_SHARE * limit, MIN_CAPPED_BURST_S)
        share = f"{COMPILE_SHARE:.0%} of the time limit"
        left = self.context.deadline.for_trials()
        proven = self.log.compiled_ok(config.compile)
        if not proven and left is not None and UNPROVEN_COMPILE_SHARE * left < cap:
            cap = max(UNPROVEN_COMPILE_SHARE * left, MIN_CAPPED_BURST_S)
            share = (
                f"{UNPROVEN_COMPILE_SHARE:.0%} of the time left for trials, as no trial "
                f"with compile={config.compile} had finished"
            )
        return cap, share

    def _tokens_per_step(self, config: TrainConfig) -> int:
        return self.context.space.global_batch * self.context.spec.tokens_per_sample(config.seq_len)

    # -- its outcome -----------------------------------------------------------------------
    def _classify(
        self,
        trial: optuna.Trial,
        config: TrainConfig,
        result: BurstResult,
        *,
        wall_s: float,
        seen: Sequence[float] = (),
        predicted: float | None = None,
        edge: int | None = None,
        cores_left: int | None = None,
    ) -> float:
        """Store the burst's outcome on the trial, with the search's burst limit that it ran
        under; return its value (or raise TrialPruned). ``predicted``, ``edge``: the memory
        model's peak and largest micro-batch for the config, made before the burst ran;
        ``cores_left``: the cores outside load left it (None: it ran on all)."""
        throughput = self.context.spec.pick_throughput(result.tokens_per_s, result.samples_per_s)
        peak = result.peak_memory_bytes
        common = _figures(result, throughput, wall_s=wall_s)
        common.update(cores_left=cores_left, burst_timeout_s=self.bursts.timeout_s)
        budget = self.context.budget_bytes
        common.update(_memory_figures(result, budget, predicted=predicted, edge=edge))
        status = result.status
        if status == "ok" and (beyond := over_budget(peak, budget)) is not None:
            set_outcome(
                trial,
                **common,
                status="over-budget",
                reason=beyond,
                constraint=_infeasible_constraint(peak, budget),
            )
            return INFEASIBLE_VALUE
        if status == "ok" and (throughput is None or throughput <= 0):
            status, result = "error", replace(result, reason="the burst reported no throughput")
        if status == "ok" and throughput is not None:
            value, extra = self._value(config, result, throughput)
            set_outcome(
                trial,
                **common,
                **extra,
                status="ok",
                reason=result.reason,
                constraint=(peak - budget) / budget if peak is not None else 0.0,
            )
            return value
        if status == "oom":
            reached = f" (peak {format_bytes(peak)})" if peak is not None else ""
            set_outcome(
                trial,
                **common,
                status="oom",
                reason=result.reason or f"out of memory{reached}",
                constraint=_infeasible_constraint(peak, budget),
            )
            return INFEASIBLE_VALUE
        if status == "pruned":
            self._prune(trial, result, common, seen)
        set_outcome(trial, **common, status=status, reason=result.reason or status, constraint=1.0)
        return INFEASIBLE_VALUE

    def _prune(
        self,
        trial: optuna.Trial,
        result: BurstResult,
        common: dict[str, Any],
        seen: Sequence[float],
    ) -> NoReturn:
        """Store why a burst was stopped early, and tell Optuna the trial was pruned."""
        if self.cut_compile or self.cut_by_time:  # the time limit, not the config
            reason = f"stopped: {self.cut_compile or self.cut_by_time}"
            set_outcome(trial, **common, status="stopped", reason=reason, constraint=0.0)
            raise optuna.TrialPruned(reason)
        best = self.log.best_throughput()
        if seen and best:
            reason = (
                f"pruned after {len(seen)} timed steps: at most {format_figure(max(seen))} "
                f"{self.context.unit}, under {PRUNE_RATIO:.2g}x the best so far "
                f"({format_figure(best)})"
            )
        else:
            reason = result.reason or "pruned"
        set_outcome(trial, **common, status="pruned", reason=reason, constraint=0.0)
        raise optuna.TrialPruned(reason)

    def score(self, config: TrainConfig, result: BurstResult) -> float:
        """The objective value of an ``ok`` burst of ``config`` (0 without a throughput):
        what the race ranks its entrants by."""
        throughput = self.bursts.throughput(result)
        return self._value(config, result, throughput)[0] if throughput > 0 else 0.0

    def _value(
        self, config: TrainConfig, result: BurstResult, throughput: float
    ) -> tuple[float, dict[str, Any]]:
        """The objective value of a successful burst, and figures to store with it."""
        train_steps = self.goal.train_steps
        if self.goal.objective != "time-to-train" or not train_steps:
            return float(throughput), {}
        per_step = self._tokens_per_step(config)
        median = result.step_time_median_s or per_step / throughput
        ttt = train_steps * median + (result.compile_s or 0.0)
        # effective throughput over the whole run: maximizing it minimizes the time
        return per_step * train_steps / ttt, {"time_to_train_s": ttt}

    def _replay(self, trial: optuna.Trial, previous: TrialRecord) -> float:
        """Tell a repeat of a known config the outcome it already had (no burst)."""
        set_outcome(
            trial,
            status=previous.status,
            reason=f"same config as trial #{previous.number}"
            + (f": {previous.reason}" if previous.reason else ""),
            ran=False,
            duplicate_of=previous.number,
            peak_memory_bytes=previous.peak_memory_bytes,
            tokens_per_s=previous.tokens_per_s,
            samples_per_s=previous.samples_per_s,
            throughput=previous.throughput,
            time_to_train_s=previous.time_to_train_s,
            constraint=_replayed_constraint(previous, self.context.budget_bytes),
        )
        if previous.state == "PRUNED":
            raise optuna.TrialPruned(f"same config as pruned trial #{previous.number}")
        return float(previous.value if previous.value is not None else INFEASIBLE_VALUE)


def _compiled(result: BurstResult) -> bool:
    """Whether a burst got past its first step (a compiled config's compile)."""
    return bool(result.step_times_s) or result.compile_s is not None or result.warmup_s is not None


def _pass_over(trial: optuna.Trial, reason: str, *, stop: bool = False) -> NoReturn:
    """Record a config not worth its burst now (``skipped``: not infeasible, no burst);
    ``stop``: the search stops with ``reason`` too (``StopSearch``)."""
    set_outcome(trial, status="skipped", reason=reason, ran=False, constraint=0.0)
    raise StopSearch(reason) if stop else optuna.TrialPruned(reason)


def _skip(trial: optuna.Trial, verdict: MemoryVerdict) -> float:
    """Record a config ruled out without a burst as infeasible."""
    set_outcome(
        trial,
        status=verdict.kind,
        reason=verdict.reason,
        constraint=1.0,
        ran=False,
        predicted_bytes=verdict.predicted_bytes,
        dominated_by=verdict.trial,
    )
    return INFEASIBLE_VALUE


def _figures(result: BurstResult, throughput: float | None, *, wall_s: float) -> dict[str, Any]:
    """What every measured trial stores, whatever its status."""
    return {
        "ran": True,
        "wall_s": result.wall_s if result.wall_s is not None else wall_s,
        "overhead_s": result.overhead_s,
        "warmup_s": result.warmup_s,
        "timed_s": sum(result.step_times_s) if result.step_times_s else None,
        "peak_memory_bytes": result.peak_memory_bytes,
        "cuda_context_bytes": result.cuda_context_bytes,
        "tokens_per_s": result.tokens_per_s,
        "samples_per_s": result.samples_per_s,
        "throughput": throughput,
        "step_time_median_s": result.step_time_median_s,
        "step_time_p90_s": result.step_time_p90_s,
        "compile_s": result.compile_s,
        "mfu": result.mfu,
        "timed_steps": result.timed_steps,
        "recompiles": result.recompiles,
    }


def _memory_figures(
    result: BurstResult, budget: int, *, predicted: float | None, edge: int | None
) -> dict[str, Any]:
    """The memory model against the burst: its prediction and the error in % (``ok``
    bursts only: an OOM's peak is where it was stopped, not what it needed), the predicted
    edge, the allocator's retries, and why the config is at the edge of the budget."""
    from autotune.study.plan.memory_model import edge_reason, prediction_error_pct

    peak = result.peak_memory_bytes
    figures: dict[str, Any] = {
        "predicted_peak_bytes": None if predicted is None else int(predicted),
        "predicted_edge_micro_batch": edge,
        "alloc_retries": result.alloc_retries,
    }
    if result.status == "ok" and peak:
        if predicted is not None:
            figures["prediction_error_pct"] = round(prediction_error_pct(predicted, peak), 2)
        if peak <= budget:
            at_edge = edge_reason(
                peak_bytes=peak, budget_bytes=budget, alloc_retries=result.alloc_retries
            )
            figures["at_edge"] = at_edge or None
    return figures


def _infeasible_constraint(peak: int | None, budget: int) -> float:
    """The constraint of a config over the budget (Optuna's feasibility: above 0 is
    infeasible): 1 plus its share over, so that the sampler learns how far past it was."""
    return 1.0 + (max(0.0, (peak - budget) / budget) if peak is not None else 0.0)


def _replayed_constraint(record: TrialRecord, budget: int) -> float:
    """The constraint a repeat of ``record`` gets: the one its outcome had."""
    if record.status in FAILED_STATUSES:
        return 1.0
    if record.infeasible:
        return _infeasible_constraint(record.peak_memory_bytes, budget)
    if record.status == "ok" and record.peak_memory_bytes is not None:
        return (record.peak_memory_bytes - budget) / budget
    return 0.0
