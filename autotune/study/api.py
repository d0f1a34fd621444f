"""``search(...)``: the Python API, and what ``autotune search`` calls.

It checks its arguments, builds the search space, opens the Optuna study (a resumed one
rebuilds its state from the study alone), lets the planner and the sampler choose configs
that the objective measures (``--trials`` counts trials that ran a burst), races the
finalists side by side (``race.py``) and writes the winner as a preset.

A time limit covers the trials and the race: the trials stop when the time left is what
the race will need (estimated from its entrants' own trials) or less than a burst, and a
running burst's timeout is capped at the time left. A process killed outright leaves its
trial RUNNING until the storage's heartbeat (RDB storages) marks it FAIL; Ctrl-C leaves
the study consistent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from autotune.core.errors import BudgetError, UsageError
from autotune.core.units import format_bytes, parse_budget, parse_duration
from autotune.machine.compile_cache import shared_compile_cache
from autotune.study.objective import BurstFn, BurstRunner, Goal, TrialObjective
from autotune.study.optuna_glue import (
    PRUNE_MIN_STEPS,
    SlowConfigPruner,
    check_storage_url,
    open_study,
    quiet_optuna,
    redact,
)
from autotune.study.outcome import write_preset
from autotune.study.ownership import describe_owner, exclusive_search, owner_alive
from autotune.study.plan import Planner
from autotune.study.race import (
    DEFAULT_FINALISTS,
    DEFAULT_ROUNDS,
    RaceResult,
    race_reserve_s,
    run_race,
)
from autotune.study.records import (
    SearchEvent,
    SearchResult,
    TrialRecord,
    distinct_best,
    skipped_reasons,
)
from autotune.study.space import SearchSpace, parse_knob_args, parse_seq_len
from autotune.study.state import Limits, SearchState
from autotune.study.workers import Workers, workers_root

if TYPE_CHECKING:
    import optuna

    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile
    from autotune.study.watch import MachineWatch

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

# With neither --trials nor --timeout: up to 30 measured trials, and the finalist race,
# within 5 2/3 minutes (the race counts inside the limit), so a default search ends in
# under 6 minutes.
DEFAULT_TRIALS = 30
DEFAULT_TIME_LIMIT_S = 340.0
DEFAULT_STEPS = 4
DEFAULT_WARMUP = None  # 1 on a CPU; 3 on CUDA (compilation, CUDA-graph recording)
DEFAULT_BURST_TIMEOUT_S = 300.0
DEFAULT_RUNS_DIR = "autotune_runs"
WATCH_REAL_BURSTS = True  # search(watch=None) watches the machine when bursts are real

Objective = Literal["throughput", "time-to-train"]
OBJECTIVES: tuple[str, ...] = ("throughput", "time-to-train")


def search(
    model: str | ModelSpec,
    *,
    budget: str | int,
    device: str | None = None,
    global_batch: int | None = None,
    seq_len: str | int | Sequence[int] | None = None,
    trials: int | None = None,
    timeout: str | float | None = None,
    steps: int = DEFAULT_STEPS,
    warmup: int | None = DEFAULT_WARMUP,
    storage: str | None = None,
    study: str | None = None,
    output: str | Path | None = "best.yaml",
    seed: int = 0,
    knobs: Mapping[str, Sequence[Any]] | Sequence[str] | None = None,
    objective: str = "throughput",
    train_steps: int | None = None,
    warm_start: str | Path | None = None,
    burst_timeout: str | float = DEFAULT_BURST_TIMEOUT_S,
    race_steps: int | None = None,
    finalists: int = DEFAULT_FINALISTS,
    race_rounds: int = DEFAULT_ROUNDS,
    n_startup_trials: int | None = None,
    hardware: HardwareProfile | None = None,
    burst_fn: BurstFn | None = None,
    progress: Callable[[SearchEvent], None] | None = None,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
    watch: MachineWatch | bool | None = None,
    option_names: Mapping[str, str] | None = None,
    nproc_per_node: int = 1,
    worker: bool = False,
    finish: bool = False,
) -> SearchResult:
    """Search the fastest config of ``model`` on ``device`` within a memory ``budget``.

    ``budget``: bytes, or text such as ``"8GB"``, ``"8GiB"``, ``"8000MB"`` or a fraction of
    the device's memory (``"0.5"``). ``seq_len``: one length, or a range ``"64-256"``
    (the powers of two within it are searched). ``trials`` counts measured trials (those
    that ran a burst) in the study, earlier runs included; with neither ``trials`` nor
    ``timeout``, ``DEFAULT_TRIALS``. ``knobs`` restricts the space (``{"precision":
    ["bf16"]}`` or ``["precision=bf16", "compile=off"]``). ``storage``: any Optuna storage
    URL (default ``sqlite:///<runs_dir>/<study>/study.db``); rerunning resumes the study.
    ``output``: where the preset goes (None: not written). ``burst_fn``: the burst
    function (default ``autotune.burst.supervisor.run_burst``). ``progress`` receives a
    ``SearchEvent`` per trial. ``option_names`` maps a parameter to the name errors give
    it (the CLI's flags; by default the parameter's own name).

    Raises ``BudgetError`` (exit code 2) when even the smallest config does not fit,
    ``UsageError`` for bad arguments, ``AutotuneError`` when nothing could be measured or
    verified. A KeyboardInterrupt leaves the study consistent and propagates.

    ``watch``: the machine watch that marks trials measured under outside load (a
    ``MachineWatch``, True, False; None: on with the real burst runner, off with a
    ``burst_fn``, whose figures do not come from this machine).

    The finalist race: the ``finalists`` best distinct configs, the naive config and the
    expert start, ``race_rounds`` interleaved rounds of ``race_steps`` timed steps each
    (default: ``steps``).

    ``nproc_per_node`` > 1: every burst runs under torchrun with that many processes and
    the space adds the DDP/FSDP settings (autotune/config/parallel.py); the preset records them.

    ``worker``: one of several processes searching this study together (other devices,
    other machines, one shared ``storage``; see ``workers.py``): a config is measured by
    one worker only, ``trials`` counts every worker's, and the race and the preset are
    run by the one worker that claims them first; the others return with no race and no
    preset (``preset_path`` None), naming the finisher. ``finish``: run no trials; wait
    for the workers' last bursts, then race the study's trials and write the preset
    (taking over from a finisher that died).
    """
    started = time.monotonic()
    goal = _check_goal(objective, train_steps)
    limits = _check_limits(trials=trials, timeout=timeout, steps=steps, warmup=warmup)
    names = option_names or {}
    race = _check_race(
        finalists=finalists, rounds=race_rounds, steps=race_steps or steps, names=names
    )
    burst_timeout_s = parse_duration(burst_timeout, what="burst_timeout")
    _check_output(output, name=names.get("output", "output"))
    _check_study_name(study, name=names.get("study", "study"))
    if storage is not None:
        check_storage_url(storage)
    restrict = _restrictions(knobs)

    spec = _resolve_model(model)
    hardware = hardware if hardware is not None else _probe()
    caps = hardware.device(device)
    budget_bytes = _budget_bytes(budget, caps)
    space = _build_space(
        spec,
        hardware,
        caps,
        restrict,
        global_batch=global_batch,
        seq_len=seq_len,
        nproc_per_node=nproc_per_node,  # > 1: bursts under torchrun (autotune/config/parallel.py)
    )
    notes = _budget_notes(budget_bytes, caps)
    state = SearchState(
        spec=spec, space=space, budget_bytes=budget_bytes, limits=limits, progress=progress
    )
    shared = worker or finish
    study_name = study or _default_study_name(state, goal, shared=shared)
    storage = storage if storage is not None else _default_storage(runs_dir, study_name)
    bursts = _burst_runner(
        state, burst_fn, steps=steps, warmup=warmup, timeout_s=burst_timeout_s, seed=seed
    )
    for message in notes:
        state.note(message)
    with quiet_optuna():
        opt_study = _open_study(
            state,
            goal,
            storage,
            study_name,
            seed=seed,
            n_startup_trials=n_startup_trials,
            joining=shared,
        )
        with (
            _claim(opt_study, study_name, storage, shared=shared),
            _watching(state, watch, burst_fn),
            shared_compile_cache(runs_dir),
        ):
            planner = Planner(state=state, caps=caps)
            state.reserve = lambda: race.reserve_s(state, planner.expert(), steps=steps)
            workers = Workers(state=state, study=opt_study, name=study_name) if shared else None
            measure = TrialObjective(
                state=state, planner=planner, bursts=bursts, goal=goal, workers=workers
            )
            if not finish:
                _optimize(opt_study, planner, measure, warm_start, storage)
            if workers is not None:
                holder = _finisher(workers, planner, finish=finish)
                if holder != workers.owner:
                    state.note(f"the race and the preset are {describe_owner(holder)}'s")
                    return _worker_result(
                        state, goal, study=opt_study, storage=storage, started=started
                    )
            found = race.run(state, bursts, planner.expert(), score=measure.score)
            notes = [*notes, *_load_notes(state)]
            result = _result(
                state, goal, found, study=opt_study, storage=storage, notes=notes, started=started
            )
            if output is not None:
                path = write_preset(result, found, spec=spec, hardware=hardware, path=Path(output))
                result = replace(result, preset_path=str(path))
            return result


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
    state = workers.state
    workers.wait_for_others()
    holder = workers.claim_finish(force=finish)
    if holder == workers.owner:
        workers.sync()
        planner.use_experts = planner.use_experts or finish  # --finish ran no starts
        planner.enqueue_experts(workers.study)  # (names the expert start of the race)
        if not state.stopped:
            state.stopped = "finished by this worker"
    return holder


def _worker_result(
    state: SearchState, goal: Goal, *, study: optuna.Study, storage: str, started: float
) -> SearchResult:
    """What a worker that does not finish the study returns: its trials, no race."""
    return _search_result(
        state,
        goal,
        study=study,
        storage=storage,
        started=started,
        best=state.best(),
        verified=None,
        naive=state.record_of(state.space.naive()),
        speedup=None,
        stopped=state.stopped or "stopped",
        notes=("another worker runs the race and writes the preset",),
    )


# -- check the arguments --------------------------------------------------------------------


def _check_goal(objective: str, train_steps: int | None) -> Goal:
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "time-to-train" and train_steps is None:
        raise UsageError("--objective time-to-train needs --train-steps N (the run's length)")
    if train_steps is not None and (not isinstance(train_steps, int) or train_steps < 1):
        raise UsageError(f"--train-steps must be a positive integer, got {train_steps!r}")
    return Goal(objective, train_steps)


def _check_limits(
    *, trials: int | None, timeout: str | float | None, steps: int, warmup: int | None
) -> Limits:
    """The search's limits; with neither ``trials`` nor ``timeout``, the defaults."""
    if trials is not None and (not isinstance(trials, int) or trials < 1):
        raise UsageError(f"--trials must be a positive integer, got {trials!r}")
    if not isinstance(steps, int) or steps < PRUNE_MIN_STEPS:
        raise UsageError(f"--steps must be an integer >= {PRUNE_MIN_STEPS}, got {steps!r}")
    if warmup is not None and (not isinstance(warmup, int) or warmup < 0):
        raise UsageError(f"--warmup must be an integer >= 0, got {warmup!r}")
    time_limit_s = None if timeout is None else parse_duration(timeout, what="timeout")
    if trials is None and time_limit_s is None:
        return Limits(DEFAULT_TRIALS, DEFAULT_TIME_LIMIT_S)
    return Limits(trials, time_limit_s)


@contextlib.contextmanager
def _watching(
    state: SearchState, watch: MachineWatch | bool | None, burst_fn: BurstFn | None
) -> Iterator[None]:
    """Run the machine watch (see ``search``'s ``watch``) while the search measures."""
    if isinstance(watch, bool) or watch is None:
        if not (watch if watch is not None else burst_fn is None and WATCH_REAL_BURSTS):
            yield
            return
        from autotune.study.watch import MachineWatch

        with MachineWatch(device=state.device, root_pid=workers_root()) as started:
            state.watch = started
            yield
        return
    state.watch = watch
    yield


def _load_notes(state: SearchState) -> list[str]:
    """What the watch saw over the whole search, when anything disturbed it."""
    if not state.disturbed_trials:
        return []
    shown = ", ".join(f"#{n}" for n in state.disturbed_trials[:10])
    more = "" if len(state.disturbed_trials) <= 10 else ", ..."
    total = state.watch.total().describe() if state.watch is not None else ""
    return [
        f"{len(state.disturbed_trials)} trials were measured while the machine was busy or "
        f"erratic ({shown}{more})" + (f"; over the whole search: {total}" if total else "")
    ]


@dataclass(frozen=True)
class _Race:
    """The finalist race's settings."""

    finalists: int
    rounds: int
    steps: int

    def run(
        self,
        state: SearchState,
        bursts: BurstRunner,
        expert: TrialRecord | None,
        *,
        score: Callable[[TrainConfig, BurstResult], float],
    ) -> RaceResult:
        return run_race(
            state,
            bursts,
            expert=expert,
            score=score,
            watch=state.watch,
            finalists=self.finalists,
            rounds=self.rounds,
            steps=self.steps,
        )

    def reserve_s(self, state: SearchState, expert: TrialRecord | None, *, steps: int) -> float:
        """The race's time, estimated from its entrants' trials (``steps`` timed steps)."""
        return race_reserve_s(
            state,
            finalists=self.finalists,
            rounds=self.rounds,
            expert=expert,
            steps_ratio=self.steps / steps,
        )


def _check_race(*, finalists: int, rounds: int, steps: int, names: Mapping[str, str]) -> _Race:
    for name, value in (("finalists", finalists), ("race_rounds", rounds), ("race_steps", steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            shown = names.get(name, name)
            raise UsageError(f"{shown} must be a positive integer, got {value!r}")
    return _Race(finalists=finalists, rounds=rounds, steps=steps)


def _check_output(output: str | Path | None, *, name: str) -> None:
    """The preset's path, checked before the first trial rather than after the last: its
    nearest existing folder must be one this process can write in (the folders below it
    are made when the preset is written). The probe is an unnamed temporary file."""
    if output is None:
        return
    target = Path(output).expanduser()
    if target.is_dir():
        raise UsageError(f"{name} {str(output)!r} is a directory; give a file such as best.yaml")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{name} {str(output)!r}: {str(folder)!r} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(
            f"{name} {str(output)!r}: cannot write in {str(folder)!r} "
            f"({exc.strerror or exc}); give a path in a folder you can write to"
        ) from None


def _check_study_name(study: str | None, *, name: str) -> None:
    """A study's name is also its folder under the runs folder: a plain name, no path."""
    if study is None:
        return
    if study.strip() in ("", ".", "..") or any(c in study for c in "/\\\0"):
        raise UsageError(
            f"{name} {study!r}: expected a plain name such as my-search (no path "
            "separators, not '.' or '..'): the study's files go in a folder of that name "
            "under the runs folder"
        )


def _restrictions(
    knobs: Mapping[str, Sequence[Any]] | Sequence[str] | None,
) -> dict[str, Sequence[Any]]:
    """``knobs`` as a mapping: knob name -> the values to keep."""
    if isinstance(knobs, Mapping):
        return dict(knobs)
    if knobs is not None:
        return dict(parse_knob_args(list(knobs)))
    return {}


# -- build the space ------------------------------------------------------------------------


def _resolve_model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, str):
        from autotune.models.registry import load_model

        return load_model(model)
    return model


def _model_name(spec: ModelSpec) -> str:
    """How the search names the model: the reference it was loaded from, or its name."""
    return spec.source or spec.name


def _probe() -> HardwareProfile:
    from autotune.machine.hardware import probe

    return probe()


def _budget_bytes(budget: str | int, caps: DeviceCaps) -> int:
    budget_bytes = (
        budget
        if isinstance(budget, int) and not isinstance(budget, bool)
        else parse_budget(str(budget), device_memory_bytes=caps.total_memory_bytes)
    )
    if budget_bytes <= 0:
        raise BudgetError(f"budget must be positive, got {budget!r}")
    return budget_bytes


def _build_space(
    spec: ModelSpec,
    hardware: HardwareProfile,
    caps: DeviceCaps,
    restrict: Mapping[str, Sequence[Any]],
    *,
    global_batch: int | None,
    seq_len: str | int | Sequence[int] | None,
    nproc_per_node: int = 1,
) -> SearchSpace:
    seqs = None if seq_len is None else parse_seq_len(seq_len, max_seq_len=spec.max_seq_len)
    return SearchSpace.for_model(
        spec,
        caps,
        global_batch=global_batch,
        seq_len=seqs,
        cpu_count=hardware.cpu.logical_cores,
        restrict=restrict,
        nproc_per_node=nproc_per_node,
    )


def _budget_notes(budget_bytes: int, caps: DeviceCaps) -> list[str]:
    if budget_bytes <= caps.total_memory_bytes:
        return []
    return [
        f"warning: the budget {format_bytes(budget_bytes)} is above the memory of "
        f"{caps.device} ({format_bytes(caps.total_memory_bytes)}); the device's memory "
        "is the real limit"
    ]


def _burst_runner(
    state: SearchState,
    burst_fn: BurstFn | None,
    *,
    steps: int,
    warmup: int | None,
    timeout_s: float,
    seed: int,
) -> BurstRunner:
    """How this search runs its bursts: ``burst_fn`` defaults to ``run_burst``; the warm-up
    to 3 steps on CUDA (compilation, CUDA-graph recording), 1 on a CPU."""
    if burst_fn is None:
        from autotune.burst.supervisor import run_burst

        burst_fn = run_burst
    if warmup is None:
        warmup = 3 if state.space.device_kind == "cuda" else 1
    return BurstRunner(
        spec=state.spec,
        device=state.device,
        budget_bytes=state.budget_bytes,
        burst_fn=burst_fn,
        steps=steps,
        warmup=warmup,
        timeout_s=timeout_s,
        seed=seed,
    )


# -- open the study ---------------------------------------------------------------------------


def default_study_name(
    *,
    model: str,
    device: str,
    budget_bytes: int,
    space: SearchSpace,
    objective: str = "throughput",
    train_steps: int | None = None,
) -> str:
    """``mu-cpu-8000MB-gb32-seq128-1a2b3c4d``: model, device, budget, global batch, sequence
    length(s) and a hash of the search space (knob restrictions change it)."""
    seqs = space.seq_len
    seq = str(seqs[0]) if len(seqs) == 1 else f"{seqs[0]}-{seqs[-1]}"
    name = (
        f"{_slug(model)}-{device.replace(':', '')}-{round(budget_bytes / 1e6)}MB"
        f"-gb{space.global_batch}-seq{seq}"
    )
    if objective == "time-to-train":
        name += f"-ttt{train_steps}"
    return f"{name}-{space.fingerprint()}"


def _default_study_name(state: SearchState, goal: Goal, *, shared: bool = False) -> str:
    name = default_study_name(
        model=_model_name(state.spec),
        device=_study_device(state, shared=shared),
        budget_bytes=state.budget_bytes,
        space=state.space,
        objective=goal.objective,
        train_steps=goal.train_steps,
    )
    if not shared:
        return name
    text = json.dumps(_space_setup(state, shared=True), sort_keys=True)
    return f"{name.rsplit('-', 1)[0]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _space_setup(state: SearchState, *, shared: bool) -> dict[str, Any]:
    """The space as a study records it; a shared study's, without the device's index."""
    space = state.space.describe()
    return {**space, "device": _study_device(state, shared=True)} if shared else space


def _slug(text: str) -> str:
    text = text.rsplit("/", 1)[-1].replace(".py:", "-").replace(":", "-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"


def _default_storage(runs_dir: str | Path, study_name: str) -> str:
    """``sqlite:///<runs_dir>/<study>/study.db`` (its folder is made)."""
    db = Path(runs_dir) / _slug(study_name) / "study.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def _study_device(state: SearchState, *, shared: bool) -> str:
    """The device a study is for: ``cuda:1``; for workers of a shared study, which each
    search on a device of their own, the kind (``cuda``: the space's device capabilities,
    also in the study's set-up, tell one GPU model from another)."""
    return re.sub(r":\d+$", "", state.device) if shared else state.device


def _study_setup(state: SearchState, goal: Goal, *, shared: bool = False) -> dict[str, Any]:
    """What a study is made for: resuming it with other settings is refused."""
    spec = state.spec
    return {
        "model": _model_name(spec),
        "model_args": {k: repr(v) for k, v in spec.args.items()},
        "device": _study_device(state, shared=shared),
        "budget_bytes": state.budget_bytes,
        "global_batch": state.space.global_batch,
        "objective": goal.objective,
        "train_steps": goal.train_steps,
        "space": _space_setup(state, shared=shared),
    }


def _open_study(
    state: SearchState,
    goal: Goal,
    storage: str,
    name: str,
    *,
    seed: int,
    n_startup_trials: int | None,
    joining: bool = False,
) -> optuna.Study:
    """The study, its trials so far absorbed into ``state`` (a resumed search goes on from
    them), and the start announced."""
    study = open_study(
        storage,
        name,
        setup=_study_setup(state, goal, shared=joining),
        pruner=SlowConfigPruner(state.best_throughput),
        seed=seed,
        n_startup_trials=n_startup_trials,
        space_size=state.space.size(),
        trials=state.limits.trials,
        joining=joining,
    )
    for frozen in study.get_trials(deepcopy=False):
        state.absorb(TrialRecord.from_trial(frozen))
    resumed = sum(1 for r in state.records.values() if r.finished)
    state.emit(
        SearchEvent(
            kind="start",
            message=(
                f"study {name!r} in {redact(storage)}; space of {state.space.size()} "
                f"configs; budget {format_bytes(state.budget_bytes)} on {state.device}"
                + (f"; resuming with {resumed} finished trials" if resumed else "")
            ),
            best=state.best(),
            unit=state.unit,
            trials_left=state.trials_left(),
            time_left_s=state.time_left(),
        )
    )
    return study


# -- optimize ---------------------------------------------------------------------------------


def _optimize(
    study: optuna.Study,
    planner: Planner,
    measure: TrialObjective,
    warm_start: str | Path | None,
    storage: str,
) -> None:
    """The starts, then trials until the search has a reason to stop (``state.stopped``).
    ``BudgetError`` when even the smallest config does not fit."""
    state = planner.state
    planner.enqueue_starts(study, warm_start)
    planner.check_budget(study)
    state.stopped = state.stop_reason()
    if not state.stopped:
        try:
            study.optimize(measure, callbacks=[planner.after_trial], gc_after_trial=False)
        except KeyboardInterrupt:
            state.note(
                f"interrupted: {state.measured()} measured trials are saved in study "
                f"{study.study_name!r} ({redact(storage)}); rerun the same command to resume"
            )
            raise
    if not state.stopped:
        state.stopped = "stopped"
    if state.budget_problem:
        raise BudgetError(state.budget_problem)


# -- the result ---------------------------------------------------------------------------------


def _result(
    state: SearchState,
    goal: Goal,
    found: RaceResult,
    *,
    study: optuna.Study,
    storage: str,
    notes: Sequence[str],
    started: float,
) -> SearchResult:
    """What the search found (the preset is not written yet)."""
    # Queued trials that never started (WAITING) stay in the study for the next run.
    return _search_result(
        state,
        goal,
        study=study,
        storage=storage,
        started=started,
        best=found.winner.record,
        verified=found.winner.verify_burst(),  # round 1: with the eval step and checkpoint
        naive=state.record_of(state.space.naive()),
        speedup=None if found.speedup is None else found.speedup.estimate,
        stopped=state.stopped,
        race=found,
        notes=(*notes, *found.notes),
    )


def _search_result(
    state: SearchState,
    goal: Goal,
    *,
    study: optuna.Study,
    storage: str,
    started: float,
    **found: Any,
) -> SearchResult:
    """The result's fields every search fills alike (the search, its trials); ``found``
    holds what the race, or a worker's lack of one, decided."""
    records = state.trials_in_order()
    return SearchResult(
        model=_model_name(state.spec),
        device=state.device,
        budget_bytes=state.budget_bytes,
        global_batch=state.space.global_batch,
        seq_len=state.space.seq_len,
        objective=goal.objective,
        train_steps=goal.train_steps,
        unit=state.unit,
        study_name=study.study_name,
        storage=redact(storage),
        space_size=state.space.size(),
        top=tuple(distinct_best(records)[:5]),
        trials=tuple(records),
        skipped=skipped_reasons(records),
        preset_path=None,
        wall_s=time.monotonic() - started,
        **found,
    )
