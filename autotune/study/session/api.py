"""``search(...)``: the Python API, and what ``autotune search`` calls.

It builds the search space, opens the Optuna study (a resumed one rebuilds its trial log from
the study alone, ``storage/search_study.py``), lets the planner and the sampler choose
configs that the objective measures (``limits.trials`` counts trials that ran a burst),
races the finalists side by side (``race/finalist_race.py``) and writes the winner as a
preset. What it is asked comes in the records of ``options.py``, each checked when it was
made.

A time limit covers the trials and the race: the trials stop when the time left is what
the race will need (estimated from its entrants' own trials) or less than a burst, and a
running burst's timeout is capped at the time left. A process killed outright leaves its
trial RUNNING until the storage's heartbeat (RDB storages) marks it FAIL; Ctrl-C leaves
the study consistent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.core import launch_env
from autotune.core.errors import BudgetError, UsageError
from autotune.core.signals import HeldStops
from autotune.core.units import format_bytes, parse_budget
from autotune.machine.compile_cache import check_user_cache, shared_compile_cache
from autotune.preset.sections import Fingerprint
from autotune.study.plan.planner import Planner
from autotune.study.plan.space import SearchSpace, parse_knob_args, parse_seq_len
from autotune.study.race.finalist_race import RACE_SHARE, finalists_in_time, run_race
from autotune.study.race.race_records import RaceResult
from autotune.study.session.context import Limits, SearchContext
from autotune.study.session.options import (
    DEFAULT_BURST_TIMEOUT_S,
    DEFAULT_RUNS_DIR,
    DEFAULT_STEPS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_TRIALS,
    DEFAULT_WARMUP,
    OBJECTIVES,
    Objective,
    SearchLimits,
    SearchMachine,
    SearchOutput,
    SearchRace,
    SearchScope,
    SearchStudy,
)
from autotune.study.session.outcome import write_preset
from autotune.study.session.search_result import SearchResult
from autotune.study.storage.optuna_glue import quiet_optuna, redact, storage_failures
from autotune.study.storage.ownership import describe_owner, exclusive_search, owner_alive
from autotune.study.storage.search_study import (
    default_study_name,
    made_folder,
    model_name,
    open_search_study,
    require_study,
    study_database,
    study_name_for,
)
from autotune.study.storage.workers import Workers, workers_root
from autotune.study.trials.burst_runner import BurstFn, BurstRunner, Goal
from autotune.study.trials.burst_threads import BurstThreads
from autotune.study.trials.ledger import ledger_of
from autotune.study.trials.objective import StopSearch, TrialObjective
from autotune.study.trials.records import TrialRecord, distinct_best, skipped_reasons
from autotune.study.trials.trial_log import TrialLog

if TYPE_CHECKING:
    import optuna

    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.explain.verdict import StepVerdict
    from autotune.machine.profile import HardwareProfile
    from autotune.study.session.watch import MachineWatch

__all__ = [
    "DEFAULT_BURST_TIMEOUT_S",
    "DEFAULT_RUNS_DIR",
    "DEFAULT_STEPS",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_TRIALS",
    "DEFAULT_WARMUP",
    "OBJECTIVES",
    "Objective",
    "default_study_name",
    "search",
]

_O = TypeVar("_O", SearchScope, SearchMachine, SearchLimits, SearchRace, SearchStudy, SearchOutput)

WATCH_REAL_BURSTS = True  # SearchMachine(watch=None) watches the machine when bursts are real


def search(
    model: str | ModelSpec,
    *,
    budget: str | int,
    scope: SearchScope | None = None,
    machine: SearchMachine | None = None,
    limits: SearchLimits | None = None,
    race: SearchRace | None = None,
    study: SearchStudy | None = None,
    output: SearchOutput | None = None,
) -> SearchResult:
    """Search the fastest config of ``model`` within a memory ``budget``; returns what it
    found, with the winner's preset written where ``output`` says.

    ``budget``: bytes, or text such as ``"8GB"``, ``"8GiB"``, ``"8000MB"`` or a fraction of
    the device's memory (``"0.5"``). The other options are records (``options.py``, field
    by field); ``search_options(trials=5, output=None)`` makes them from flat names.

    Raises ``BudgetError`` (exit 2) when even the smallest config does not fit, ``UsageError``
    for bad arguments, ``AutotuneError`` when nothing could be measured or verified, or the
    storage stopped taking writes. A KeyboardInterrupt leaves the study consistent."""
    scope, machine = (
        _record("scope", scope, SearchScope),
        _record("machine", machine, SearchMachine),
    )
    limits, race = _record("limits", limits, SearchLimits), _record("race", race, SearchRace)
    started = time.monotonic() if limits.since is None else limits.since
    study, output = _record("study", study, SearchStudy), _record("output", output, SearchOutput)
    goal = Goal(scope.objective, scope.train_steps)
    restrict = _restrictions(scope.knobs)
    check_user_cache()  # before the model's build imports Inductor
    launch_env.check()  # each burst reads RANK: a malformed one crashed them all
    spec = _resolve_model(model, within_s=limits.time_limit_s)
    hardware = machine.hardware if machine.hardware is not None else _probe()
    caps = hardware.device(machine.device)
    budget_bytes = parse_budget(budget, device_memory_bytes=caps.total_memory_bytes)
    space = _build_space(
        spec, hardware, caps, restrict, scope=scope, machine=machine, shared=study.shared
    )
    notes = _device_notes(budget_bytes, caps)
    context = SearchContext.of(
        spec=spec,
        space=space,
        budget_bytes=budget_bytes,
        limits=Limits(limits.trial_limit, limits.time_limit_s),
        started=started,
        burst_limit_s=limits.burst_timeout_s,  # which earlier timeouts still stand
        progress=output.progress,
    )
    name = study.study or study_name_for(context, goal, shared=study.shared)
    folder: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if study.storage is not None:
        storage = study.storage
    else:
        database = study_database(study.runs_dir, name)
        storage = f"sqlite:///{database}"
        # its folder is made by a search that writes it, and taken away again where the
        # study cannot be opened
        if not study.finish:
            folder = made_folder(database.parent)
    if study.finish:  # it races a study's trials, so the study must be there
        require_study(storage, name)
    bursts = _burst_runner(context, machine.burst_fn, limits, seed=study.seed)
    for message in notes:
        context.note(message)
    with quiet_optuna(), folder:
        opened, log = open_search_study(
            context,
            goal,
            storage,
            name,
            bursts=bursts,
            n_startup_trials=study.n_startup_trials,
            joining=study.shared,
        )
        before = set(log.records)  # a resumed study's trials: not this run's time
        with (
            _claim(opened, name, storage, shared=study.shared),
            _watching(context, machine.watch, machine.burst_fn) as context,
            shared_compile_cache(study.runs_dir),
            storage_failures(storage),  # locked or full mid-search: one paragraph
        ):
            run = _Run(
                context, log, goal, opened, storage, bursts, _Race.of(race, limits), started,
                before=before,
            )  # fmt: skip
            explain = _naive_explainer(context, bursts) if output.profile else None
            here = Fingerprint.from_profile(hardware, caps.device)
            planner = Planner(context=context, log=log, caps=caps, here=here, explain=explain)
            result, found = run.trials_and_race(planner, study, notes)
            out = None if output.output is None else Path(output.output)
            return run.written(result, found, out, spec=spec, hardware=hardware)


def _record(name: str, value: _O | None, kind: type[_O]) -> _O:
    """The option record ``name``: the one given, or its defaults (made here, so that the
    output's folder is checked at each call). A value of another type is refused: flat
    options (``trials=5``) go through ``search_options``."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise UsageError(
            f"{name} must be a {kind.__name__}, got {value!r}; make the options from flat "
            "names with autotune.study.search_options(...)"
        )
    return value


@dataclass(frozen=True)
class _Run:
    """One search once its study is open: the trials, then the race or a worker's stop."""

    context: SearchContext
    log: TrialLog
    goal: Goal
    study: optuna.Study
    storage: str
    bursts: BurstRunner
    race: _Race
    started: float
    phases: dict[str, float] = field(default_factory=dict)  # the trials' and the race's wall
    before: set[int] = field(default_factory=set)  # the trials the study held before this run

    def written(
        self,
        result: SearchResult,
        found: RaceResult | None,
        out: Path | None,
        *,
        spec: ModelSpec,
        hardware: HardwareProfile,
    ) -> SearchResult:
        """``result`` with the race's winner written as a preset at ``out`` (when there
        is a winner and a path), and the ledger of this run's time (``ledger.py``): its
        trials (not a resumed study's earlier ones), its phases, and the writing."""
        writing = time.monotonic()
        if out is not None and found is not None:
            path = write_preset(result, found, spec=spec, hardware=hardware, path=out)
            result = replace(result, preset_path=str(path))
        ledger = ledger_of(
            (r for n, r in self.log.records.items() if n not in self.before),
            total_s=time.monotonic() - self.started,
            trials_s=self.phases.get("trials", 0.0),
            race_s=self.phases.get("race", 0.0),
            writing_s=time.monotonic() - writing,
            device_kind=self.context.space.device_kind,
        )
        self.study.set_user_attr("ledger", ledger.to_dict())  # the report's (the last run's)
        return replace(result, ledger=ledger, wall_s=ledger.total_s)

    def trials_and_race(
        self, planner: Planner, options: SearchStudy, notes: Sequence[str]
    ) -> tuple[SearchResult, RaceResult | None]:
        """Run the trials (none with ``finish``), then the race, unless another worker of a
        shared study runs it (then no race: None)."""
        context, log, study = self.context, self.log, self.study
        context.deadline.keep_for_race(
            lambda: self.race.reserve_s(log, planner.expert(), limit_s=context.limits.time_limit_s),
            whole=lambda: log.configs_measured() >= 2,  # a config besides naive measured
        )
        workers = (
            Workers(
                log=log,
                absorb_others=planner.absorb_others,
                deadline=context.deadline,
                study=study,
                name=study.study_name,
            )
            if options.shared
            else None
        )
        burst_threads = BurstThreads(context)  # the trials' and the race's
        measure = TrialObjective(
            context=context, log=log, burst_threads=burst_threads, planner=planner,
            bursts=self.bursts, goal=self.goal, workers=workers,
        )  # fmt: skip
        trials_started = time.monotonic()
        stopped = ""  # why the trials stopped ("": none ran, --finish)
        if not options.finish:
            stopped = _optimize(study, planner, measure, options.warm_start, self.storage)
        self.phases["trials"] = time.monotonic() - trials_started
        holder = None if workers is None else _finisher(workers, planner, finish=options.finish)
        finishes = workers is not None and holder == workers.owner
        stopped = stopped or ("finished by this worker" if finishes else "")  # decided here
        if workers is not None and not finishes:
            context.note(f"the race and the preset are {describe_owner(holder)}'s")
            return _worker_result(
                context, log, self.goal, study=study, storage=self.storage,
                started=self.started, stopped=stopped,
            ), None  # fmt: skip
        race_started = time.monotonic()
        found = self.race.run(
            context, log, self.bursts, planner.expert(), score=measure.score,
            burst_threads=burst_threads, stopped=stopped,
        )  # fmt: skip
        self.phases["race"] = time.monotonic() - race_started
        result = _result(
            context,
            log,
            self.goal,
            found,
            study=study,
            storage=self.storage,
            notes=[*notes, *_load_notes(context, measure.disturbed_trials)],
            started=self.started,
            stopped=stopped,
        )
        return result, found


# -- several workers on one study ---------------------------------------------------------------


@contextlib.contextmanager
def _claim(study: optuna.Study, name: str, storage: str, *, shared: bool) -> Iterator[None]:
    """Alone, the study is this search's (``exclusive_search``); a worker of a shared
    search joins the others, but not a study that a lone search holds."""
    if not shared:
        with exclusive_search(study, name, storage=storage):
            yield
        return
    holder = study.user_attrs.get("searching")
    if owner_alive(holder):
        raise UsageError(
            f"study {name!r} is being searched right now by {describe_owner(holder)}, "
            "alone (not as one of its workers): wait for it to finish, or search under "
            "another study name"
        )
    yield


def _finisher(workers: Workers, planner: Planner, *, finish: bool) -> Any:
    """After this worker's trials: wait for the others' last bursts, then claim the race
    and the preset (``finish``: take them over); who holds them."""
    workers.wait_for_others()
    holder = workers.claim_finish(force=finish)
    if holder == workers.owner:
        workers.sync()
        planner.use_experts = planner.use_experts or finish  # --finish ran no starts
        planner.enqueue_experts(workers.study)  # (names the expert start of the race)
    return holder


def _worker_result(
    context: SearchContext,
    log: TrialLog,
    goal: Goal,
    *,
    study: optuna.Study,
    storage: str,
    started: float,
    stopped: str,
) -> SearchResult:
    """What a worker that does not finish the study returns: its trials, no race."""
    return _search_result(
        context,
        log,
        goal,
        study=study,
        storage=storage,
        started=started,
        best=log.best(),
        verified=None,
        naive=log.record_of(context.space.naive()),
        speedup=None,
        stopped=stopped or "stopped",
        notes=("another worker runs the race and writes the preset",),
    )


@contextlib.contextmanager
def _watching(
    context: SearchContext, watch: MachineWatch | bool | None, burst_fn: BurstFn | None
) -> Iterator[SearchContext]:
    """Run the machine watch (see ``search``'s ``watch``) while the search measures; the
    search's context with it (``context`` where nothing is watched)."""
    if isinstance(watch, bool) or watch is None:
        if not (watch if watch is not None else burst_fn is None and WATCH_REAL_BURSTS):
            yield context
            return
        from autotune.study.session.watch import MachineWatch

        with MachineWatch(device=context.device, root_pid=workers_root()) as started:
            yield replace(context, watch=started)
        return
    yield replace(context, watch=watch)


def _load_notes(context: SearchContext, disturbed: Sequence[int]) -> list[str]:
    """What the watch saw over the whole search, when anything disturbed it."""
    if not disturbed:
        return []
    shown = ", ".join(f"#{n}" for n in disturbed[:10])
    more = "" if len(disturbed) <= 10 else ", ..."
    total = context.watch.total().describe() if context.watch is not None else ""
    return [
        f"{len(disturbed)} trials were measured while the machine was busy or "
        f"erratic ({shown}{more})" + (f"; over the whole search: {total}" if total else "")
    ]


@dataclass(frozen=True)
class _Race:
    """The finalist race's settings (``SearchRace``, its steps resolved)."""

    finalists: int
    rounds: int
    steps: int
    trial_steps: int  # the trials' timed steps, which the race's time is estimated from

    @classmethod
    def of(cls, race: SearchRace, limits: SearchLimits) -> _Race:
        return cls(
            finalists=race.finalists,
            rounds=race.race_rounds,
            steps=race.race_steps or limits.steps,
            trial_steps=limits.steps,
        )

    def run(
        self,
        context: SearchContext,
        log: TrialLog,
        bursts: BurstRunner,
        expert: TrialRecord | None,
        *,
        score: Callable[[TrainConfig, BurstResult], float],
        burst_threads: BurstThreads,
        stopped: str,
    ) -> RaceResult:
        """The race, with the most finalists that fit the time left, or ``RACE_SHARE`` of
        the limit where more is left (the share the trials kept for it)."""
        limit, left = context.limits.time_limit_s, context.deadline.left()
        seconds = None if limit is None or left is None else max(left, RACE_SHARE * limit)
        finalists, reserve = self._in_time(log, expert, seconds)
        if finalists < self.finalists:
            context.note(
                f"race: {finalists} finalist(s) rather than {self.finalists}, for time: a race "
                f"of more would not end in the {seconds:.0f} s it has ({finalists}: about "
                f"{reserve:.0f} s)"
            )
        return run_race(
            context,
            log,
            bursts,
            burst_threads=burst_threads,
            stopped=stopped,
            expert=expert,
            score=score,
            watch=context.watch,
            finalists=finalists,
            rounds=self.rounds,
            steps=self.steps,
        )

    def reserve_s(
        self, log: TrialLog, expert: TrialRecord | None, *, limit_s: float | None
    ) -> float:
        """The race's time, estimated from its entrants' trials: with the most finalists
        whose race takes at most ``RACE_SHARE`` of the time limit ``limit_s`` (beside a
        busy core, mu's race of three took 47% of it, and its trials measured 4 configs)."""
        seconds = None if limit_s is None else RACE_SHARE * limit_s
        return self._in_time(log, expert, seconds)[1]

    def _in_time(
        self, log: TrialLog, expert: TrialRecord | None, seconds: float | None
    ) -> tuple[int, float]:
        return finalists_in_time(
            log,
            seconds,
            trial_steps=self.trial_steps,
            finalists=self.finalists,
            rounds=self.rounds,
            expert=expert,
            steps_ratio=self.steps / self.trial_steps,
        )


def _restrictions(
    knobs: Mapping[str, Sequence[Any]] | Sequence[str] | None,
) -> dict[str, Sequence[Any]]:
    """``knobs`` as a mapping: knob name -> the values to keep. ``UsageError`` for
    anything else than a mapping of names to lists or a list of ``NAME=VALUE`` texts."""
    if knobs is None:
        return {}
    if isinstance(knobs, Mapping):
        if all(isinstance(k, str) and isinstance(v, list | tuple) for k, v in knobs.items()):
            return dict(knobs)
    elif isinstance(knobs, list | tuple) and all(isinstance(k, str) for k in knobs):
        return dict(parse_knob_args(list(knobs)))
    raise UsageError(
        "knobs must be a mapping of knob names to lists of values ({'precision': ['bf16']}) "
        f"or a list of NAME=VALUE texts (['precision=bf16']), got {knobs!r}"
    )


# -- build the space ------------------------------------------------------------------------


def _resolve_model(model: str | ModelSpec, *, within_s: float | None) -> ModelSpec:
    """The spec ``model`` names, loaded within the search's time limit ``within_s``: a
    user's module that waits at import would otherwise outlast any --timeout."""
    from autotune.contract.spec import ModelSpec

    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, str):
        raise UsageError(
            f"model must be a model's name or reference (such as 'mu', 'gpt2-124m', "
            f"'my_model.py:spec' or 'hf:gpt2') or a ModelSpec, got {type(model).__name__}; "
            "autotune.tune() searches a torch module of your own"
        )
    from autotune.models.registry import load_model, load_within

    ref = model
    return load_within(ref, within_s, lambda: load_model(ref), limit="the search's time limit")


def _probe() -> HardwareProfile:
    from autotune.machine.hardware import probe

    return probe()


def _build_space(
    spec: ModelSpec,
    hardware: HardwareProfile,
    caps: DeviceCaps,
    restrict: Mapping[str, Sequence[Any]],
    *,
    scope: SearchScope,
    machine: SearchMachine,
    shared: bool = False,
) -> SearchSpace:
    """The space of configs: the model's and the device's knobs, narrowed by ``restrict``;
    with ``nproc_per_node`` > 1, the DDP/FSDP settings too (bursts under torchrun). Its
    CPU knobs count the cores this process may use, as ``check_config`` does; a shared
    study's, the machine's, so that workers pinned to other cores record one space."""
    from autotune.config.checks import machine_problems
    from autotune.config.machine_limits import usable_cores
    from autotune.contract.spec import check_built_arguments

    check_built_arguments(spec)
    seq_len = scope.seq_len
    seqs = None if seq_len is None else parse_seq_len(seq_len, max_seq_len=spec.max_seq_len)
    space = SearchSpace.for_model(
        spec,
        caps,
        global_batch=scope.global_batch,
        seq_len=seqs,
        cpu_count=(
            usable_cores()
            if machine.hardware is None and not shared
            else hardware.cpu.logical_cores
        ),
        restrict=restrict,
        nproc_per_node=machine.nproc_per_node,
    )
    # The machine's bounds (processes per core or GPU) hold for every config the space
    # holds alike: checked on its naive config, before any process starts.
    problems = machine_problems(space.naive(), caps)
    if problems:
        raise UsageError("this machine cannot run the search: " + "; ".join(problems))
    return space


def _device_notes(budget_bytes: int, caps: DeviceCaps) -> list[str]:
    """Why torch.compile is left out (on a CPU its 2.5-3x), a budget above the memory."""
    why = caps.compile_problem or f"it cannot run on {caps.device} here"
    notes = [] if caps.compile else [f"warning: torch.compile is not searched: {why}"]
    if budget_bytes > caps.total_memory_bytes:
        notes.append(
            f"warning: the budget {format_bytes(budget_bytes)} is above the memory of "
            f"{caps.device} ({format_bytes(caps.total_memory_bytes)}); the device's memory "
            "is the real limit"
        )
    return notes


def _naive_explainer(
    context: SearchContext, bursts: BurstRunner
) -> Callable[[TrainConfig], StepVerdict | None]:
    """``Planner.explain`` for a profiled search: one burst of a config with the profiler
    on (3 profiled steps after 1 timed one, held to the search's deadline like any other)
    and the verdict of its breakdown; None where the burst brought none back."""

    def explain(config: TrainConfig) -> StepVerdict | None:
        from autotune.explain.render import explain_result

        timeout = context.deadline.burst_timeout(bursts.timeout_s)
        if timeout is None:
            return None
        burst = bursts.run(config, steps=1, timeout_s=timeout, profile=True)
        explained = explain_result(burst, budget_bytes=context.budget_bytes)
        return None if explained is None else explained[1]

    return explain


def _burst_runner(
    context: SearchContext, burst_fn: BurstFn | None, limits: SearchLimits, *, seed: int
) -> BurstRunner:
    """How this search runs its bursts: ``burst_fn`` defaults to ``run_burst``; the warm-up
    to 3 steps on CUDA (compilation, CUDA-graph recording), 1 on a CPU."""
    if burst_fn is None:
        from autotune.burst.supervisor import run_burst

        burst_fn = run_burst
    warmup = limits.warmup
    if warmup is None:
        warmup = 3 if context.space.device_kind == "cuda" else 1
    return BurstRunner(
        spec=context.spec,
        device=context.device,
        budget_bytes=context.budget_bytes,
        burst_fn=burst_fn,
        steps=limits.steps,
        warmup=warmup,
        timeout_s=limits.burst_timeout_s,
        seed=seed,
    )


# -- optimize ---------------------------------------------------------------------------------


def _optimize(
    study: optuna.Study,
    planner: Planner,
    measure: TrialObjective,
    warm_start: str | Path | None,
    storage: str,
) -> str:
    """The starts, then trials until the search has a reason to stop; that reason.
    ``BudgetError`` when even the smallest config does not fit."""
    planner.enqueue_starts(study, warm_start)
    planner.check_budget(study)
    stops = _Stops(planner)
    reason = planner.stop_reason(None)
    if not reason:
        try:
            with HeldStops() as held:  # a stop lands in a trial or once its outcome is stored
                study.optimize(
                    held.let_through(stops.objective(measure)),
                    callbacks=[planner.after_trial, stops.after_trial, held.replay],
                    gc_after_trial=False,
                )
        except KeyboardInterrupt:
            planner.context.note(
                f"interrupted: {planner.log.measured()} measured trials are saved in study "
                f"{study.study_name!r} ({redact(storage)}); rerun the same command to resume"
            )
            raise
        reason = stops.reason
    if planner.budget_problem:
        raise BudgetError(planner.budget_problem)
    return reason or "stopped"


@dataclass
class _Stops:
    """Where the trials' deciders stop the study: the objective raises ``StopSearch`` in
    a trial, the planner gives a reason after it (``Planner.stop_reason``). ``reason``:
    the last one given ("" while the trials go on)."""

    planner: Planner
    reason: str = ""

    def objective(self, measure: TrialObjective) -> Callable[[optuna.Trial], float]:
        """``measure``, with the study stopped when it raises ``StopSearch``."""

        def run(trial: optuna.Trial) -> float:
            try:
                return measure(trial)
            except StopSearch as stop:
                self._stop(trial.study, stop.reason)
                raise

        return run

    def after_trial(self, study: optuna.Study, _: optuna.trial.FrozenTrial) -> None:
        """Optuna's callback, after the planner's: stop the study when the search is done."""
        reason = self.planner.stop_reason(study)
        if reason:
            self._stop(study, reason)

    def _stop(self, study: optuna.Study, reason: str) -> None:
        self.reason = reason
        study.stop()


# -- the result ---------------------------------------------------------------------------------


def _result(
    context: SearchContext,
    log: TrialLog,
    goal: Goal,
    found: RaceResult,
    *,
    study: optuna.Study,
    storage: str,
    notes: Sequence[str],
    started: float,
    stopped: str,
) -> SearchResult:
    """What the search found (the preset is not written yet); ``stopped``: why its trials
    stopped."""
    # Queued trials that never started (WAITING) stay in the study for the next run.
    return _search_result(
        context,
        log,
        goal,
        study=study,
        storage=storage,
        started=started,
        best=found.winner.record,
        verified=found.winner.verify_burst(),  # round 1: with the eval step and checkpoint
        naive=log.record_of(context.space.naive()),
        speedup=None if found.speedup is None else found.speedup.estimate,
        stopped=stopped,
        race=found,
        notes=(*notes, *found.notes),
    )


def _search_result(
    context: SearchContext,
    log: TrialLog,
    goal: Goal,
    *,
    study: optuna.Study,
    storage: str,
    started: float,
    **found: Any,
) -> SearchResult:
    """The result's fields every search fills alike (the search, its trials); ``found``
    holds what the race, or a worker's lack of one, decided."""
    records = log.trials_in_order()
    return SearchResult(
        model=model_name(context.spec),
        device=context.device,
        budget_bytes=context.budget_bytes,
        global_batch=context.space.global_batch,
        seq_len=context.space.seq_len,
        objective=goal.objective,
        train_steps=goal.train_steps,
        unit=context.unit,
        study_name=study.study_name,
        storage=redact(storage),
        space_size=context.space.size(),
        top=tuple(distinct_best(records)[:5]),
        trials=tuple(records),
        skipped=skipped_reasons(records),
        preset_path=None,
        wall_s=time.monotonic() - started,
        **found,
    )
