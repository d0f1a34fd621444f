"""What a compiled trial will cost in the time left: its compile is a first one, unless
an earlier trial of this search compiled the same code, which the compile cache then
serves.

torch.compile compiles the model, so the knobs that act outside it (the DataLoader's, the
environment's such as OpenMP's wait policy, the optimizer's, the number of micro-batches)
leave its code as it was: a config that differs from a compiled trial's only in those
compiles from the cache (2-core EPYC: mu 2.7 s instead of 48 s on an empty cache,
gpt-small 2.5 s instead of 31 s). So does the micro-batch on a CPU, where a model compiled
whole is compiled for any micro-batch (``TrainConfig.any_micro_batch``). Every other knob
(the micro-batch on a GPU: the shapes; precision; checkpointing; the model's own knobs)
compiles new code.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from autotune.config.knobs import registry

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.deadline import Deadline
    from autotune.study.trials.records import TrialRecord

__all__ = [
    "CACHED_COMPILE_SHARE",
    "cached_compile_s",
    "compile_times",
    "compiled_code_key",
    "eval_code_key",
    "held_to_time",
    "model_code_key",
    "TrialsSeen",
    "rest_s",
    "will_not_finish",
]

# A compile found in the cache, as a share of the first one, with a margin (2-core EPYC:
# mu 2.7 s after a 47.7 s first compile, 0.06; gpt-small 2.5 s after 30.5 s, 0.08; until
# the precompiled header was kept in the cache, each burst built it again: 7-9 s).
CACHED_COMPILE_SHARE = 0.1


def _outside_the_model(config: TrainConfig) -> frozenset[str]:
    """The config's knobs that the compiled code does not see: the DataLoader's (but the
    micro-batch, which sets the shapes), the environment's, the optimizer's, and the
    number of micro-batches a step accumulates."""
    names = {"grad_accum"}
    for k in registry(type(config)):
        loader = k.loader_arg is not None and k.name != "micro_batch"
        if loader or k.env is not None or k.optimizer_arg is not None:
            names.add(k.name)
    return frozenset(names)


def compiled_code_key(
    config: TrainConfig | Mapping[str, Any], device_kind: str
) -> tuple[tuple[str, str], ...]:
    """What decides ``config``'s compiled code on a ``device_kind`` device: its settings
    less the knobs outside the model, and less the micro-batch where its code serves any
    (``TrainConfig.any_micro_batch``: compiled whole on a CPU; a micro-batch of 1 is
    compiled for its size). Two compiled configs with one key share their compile in the
    cache."""
    cfg = _train_config(config)
    any_batch = cfg.any_micro_batch(device_kind) and cfg.micro_batch > 1
    return _key(cfg, _outside_the_model(cfg) | ({"micro_batch"} if any_batch else set()))


def eval_code_key(config: TrainConfig | Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What decides the compiled code of ``config``'s eval step (the race's first round;
    only where ``compile_regions`` compiled the model's blocks in place, since the eval
    step runs the uncompiled model otherwise): its compiled code less the micro-batch. The
    eval batch (twice the micro-batch) is the second shape the model sees in its process,
    so torch.compile makes the eval graph dynamic in the batch, and one compile serves
    every micro-batch (mu on the 2-core CPU, an empty cache: the eval of mb 8 added 26 s
    to a burst, that of mb 16 after it none; in git history, BENCHMARKS.md's "the race's
    time as it is spent")."""
    cfg = _train_config(config)
    return _key(cfg, _outside_the_model(cfg) | {"micro_batch"})


def model_code_key(config: TrainConfig | Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What decides the model code ``config`` runs, compiled or not: its settings less the
    knobs outside the model, the micro-batch and the compile mode. Trials without compile
    of one key differ in how their global batch is cut, not in the code its steps run."""
    cfg = _train_config(config)
    return _key(cfg, _outside_the_model(cfg) | {"micro_batch", "compile"})


def _train_config(config: TrainConfig | Mapping[str, Any]) -> TrainConfig:
    from autotune.config.train_config import TrainConfig

    return config if isinstance(config, TrainConfig) else TrainConfig.from_mapping(config)


def _key(config: TrainConfig, left_out: frozenset[str] | set[str]) -> tuple[tuple[str, str], ...]:
    """``config``'s settings but those ``left_out``, in a stable order."""
    return tuple(sorted((k, repr(v)) for k, v in config.to_dict().items() if k not in left_out))


def compile_times(records: list[TrialRecord]) -> list[float]:
    """The compile of every trial that ran one (first ones and the cache's alike)."""
    return [r.compile_s for r in records if r.ran and r.compile_s]


def cached_compile_s(records: list[TrialRecord]) -> float:
    """How long a compile served by the cache takes here: the quickest compile the search
    saw, and at most ``CACHED_COMPILE_SHARE`` of the slowest (on an empty cache every
    compile of a search is a first one). 0 before any compile."""
    compiles = compile_times(records)
    return min([*compiles, CACHED_COMPILE_SHARE * max(compiles)]) if compiles else 0.0


def _start_up_s(record: TrialRecord) -> float | None:
    """What a compiled trial spent besides its compile and its timed steps (process start,
    build, warm-up, teardown), or None where its figures do not say."""
    step, timed = record.step_time_median_s, record.timed_steps
    if not (record.wall_s and record.compile_s and step and timed):
        return None
    return max(0.0, record.wall_s - record.compile_s - timed * step)


def rest_s(record: TrialRecord, records: list[TrialRecord]) -> float:
    """What a trial of ``record``'s compiled code spends besides its compile once the
    cache holds that code: ``record``'s own timed steps, and at most the median start-up
    of the compiled trials (``_start_up_s``). Its own start-up may say more than a trial
    will spend: the search's first compiled trial also sets up the compile cache (mu on
    one core of the Xeon: 12.8 s besides its compile and steps, where the later compiled
    trials spent 1.3-3.7 s; its OpenMP-spin variant was expected to take 19 s, was
    skipped with 18 s left, and such variants took 5-6 s)."""
    rest = (record.wall_s or 0.0) - (record.compile_s or 0.0)
    own = _start_up_s(record)
    ups = [u for r in records if r.ran and (u := _start_up_s(r)) is not None]
    if own is None or not ups:
        return rest
    return rest - own + min(own, statistics.median(ups))


class TrialsSeen(Protocol):
    """What a trial's cost is estimated from: the search's trials so far and its space
    (``TrialLog``)."""

    @property
    def records(self) -> Mapping[int, TrialRecord]: ...

    @property
    def space(self) -> SearchSpace: ...


def expected_wall_s(log: TrialsSeen, config: TrainConfig) -> tuple[float, str] | None:
    """How long a trial of ``config`` will take, and why: without compile, the quickest
    trial without compile of the same model code (``model_code_key``), else the median
    trial without compile (mu's eager screens of eager attention took 15 s where its
    quickest eager trial, sdpa attention, took 7 s: a screen started with 8 s left was
    stopped, measuring nothing); compiled, a trial with the same compiled code less its compile
    plus a cached one, else (new code: a first compile) the slowest first compile seen
    plus the rest of a compiled trial (its median: process start, build, steps). A trial
    the limit stops measures nothing: mu on the 2-core CPU started a first compile with
    47 s left, where such trials had taken 38, 47 and 49 s, and it was stopped; a config
    the cache serves (10-14 s) would have fitted. The slowest trial's wall is not the
    measure: the search's first compiled trial also sets up the compile cache (the
    checks of the CPU's vector ISAs: mu's playbook trial on the 2-core Xeon took 39.6 s,
    25.8 s of it compiling and 13.8 s besides, where later first compiles took 29-32 s
    with 4-5 s besides). None before such a trial has a result."""
    eager = config.compile == "off"
    alike = [
        r
        for r in log.records.values()
        if r.ran and r.feasible and r.wall_s and (r.config.get("compile", "off") == "off") == eager
    ]
    if not alike:
        return None
    if eager:
        model = model_code_key(config)
        walls = [r.wall_s or 0.0 for r in alike if model_code_key(r.config) == model]
        if walls:
            return min(walls), "the quickest trial of its model code without compile so far"
        return statistics.median(r.wall_s or 0.0 for r in alike), (
            "the median trial without compile so far"
        )
    kind = log.space.device_kind
    key = compiled_code_key(config, kind)
    same = [r for r in alike if r.compile_s and compiled_code_key(r.config, kind) == key]
    records = list(log.records.values())
    cached = cached_compile_s(records)
    if same:
        wall = min(rest_s(r, records) for r in same) + cached
        return wall, f"#{same[0].number}'s code from the compile cache"
    # a first compile: the trials whose compile was well above what the cache takes
    first = [r.compile_s or 0.0 for r in alike if (r.compile_s or 0.0) > 2 * cached]
    if first:
        rest = statistics.median((r.wall_s or 0.0) - (r.compile_s or 0.0) for r in alike)
        return max(first) + rest, "the slowest first compile so far"
    return min(r.wall_s or 0.0 for r in alike), "the quickest compiled trial so far"


def held_to_time(role: str | None, config: TrainConfig) -> bool:
    """Whether a trial in ``role`` is passed over when ``will_not_finish`` says so: not
    naive, the quick start or a re-measure (they always run), nor an expert start without
    compile (a loaded machine measures at least the expert's config; its timeout is
    capped)."""
    if role in ("naive", "quick-start", "re-measure"):
        return False
    return config.compile != "off" or role in ("refine", "screen", "", None)


def will_not_finish(log: TrialsSeen, deadline: Deadline, config: TrainConfig) -> str:
    """Why a burst of ``config`` would not finish in the time left for trials ("" when it
    may): ``expected_wall_s``. mu on the 2-core CPU with an empty cache: a refinement
    started with 36 s left, where compiled trials had taken 44-52 s, and was stopped at
    the limit with nothing measured."""
    left = deadline.for_trials()
    expected = expected_wall_s(log, config) if left is not None else None
    if left is None or expected is None or left >= expected[0]:
        return ""
    wall, basis = expected
    kind = "this trial" if config.compile == "off" else "this compiled trial"
    return (
        f"the time left for trials ({left:.0f} s) is less than {kind} takes here "
        f"({wall:.0f} s: {basis})"
    )
