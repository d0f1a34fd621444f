"""A compiled trial's cost in the time left: a first compile, or the cache's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna

from autotune.config.train_config import TrainConfig
from autotune.study.trials.records import TrialRecord
from autotune.study.trials.trial_cost import (
    CACHED_COMPILE_SHARE,
    cached_compile_s,
    compiled_code_key,
    eval_code_key,
    will_not_finish,
)

# micro-batch changes below are new code: each compiled for its shapes, as on a GPU
GPU: Any = SimpleNamespace(device_kind="cuda")
BEST = TrainConfig(
    micro_batch=8, grad_accum=4, seq_len=128, precision="bf16", compile="default",
    knobs={"attention": "eager"},
)  # fmt: skip


def test_knobs_outside_the_model_keep_its_compiled_code() -> None:
    for kind in ("cpu", "cuda"):
        key = compiled_code_key(BEST, kind)
        for same in (
            BEST.replace(num_workers=2, pin_memory=True),
            BEST.replace(omp_spin=True),
            BEST.replace(fused_optimizer=True),
            BEST.replace(grad_accum=8),
        ):
            assert compiled_code_key(same, kind) == key, same
        for other in (
            BEST.replace(precision="fp32"),
            BEST.replace(activation_checkpointing=True),
            BEST.replace(knobs={"attention": "eager", "loss": "chunked"}),
            BEST.replace(compile="max-autotune-no-cudagraphs"),
        ):
            assert compiled_code_key(other, kind) != key, other
        assert compiled_code_key(BEST.to_dict(), kind) == key  # a trial record's config


def test_on_a_cpu_one_compile_serves_every_micro_batch_above_one() -> None:
    other_shape = BEST.replace(micro_batch=16, grad_accum=2)
    assert compiled_code_key(other_shape, "cpu") == compiled_code_key(BEST, "cpu")
    assert compiled_code_key(other_shape, "cuda") != compiled_code_key(BEST, "cuda")
    one = BEST.replace(micro_batch=1, grad_accum=32)  # torch specializes a size of 1
    assert compiled_code_key(one, "cpu") != compiled_code_key(BEST, "cpu")
    regions = BEST.replace(compile_regions=True)  # a block's inputs are not the batch
    assert compiled_code_key(regions.replace(micro_batch=16, grad_accum=2), "cpu") != (
        compiled_code_key(regions, "cpu")
    )
    eager = BEST.replace(compile="off")  # its kernels run the shapes they are given
    assert compiled_code_key(eager.replace(micro_batch=16, grad_accum=2), "cpu") != (
        compiled_code_key(eager, "cpu")
    )


def test_one_eval_graph_serves_every_micro_batch_of_a_code() -> None:
    key = eval_code_key(BEST)
    assert eval_code_key(BEST.replace(micro_batch=16, grad_accum=2)) == key
    assert eval_code_key(BEST.replace(omp_spin=True).to_dict()) == key
    assert eval_code_key(BEST.replace(precision="fp32")) != key
    assert eval_code_key(BEST.replace(knobs={"attention": "sdpa"})) != key


def _record(number: int, config: TrainConfig, wall: float, compile_s: float | None) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="COMPLETE",
        status="ok",
        config=config.to_dict(),
        ran=True,
        value=100.0,
        wall_s=wall,
        compile_s=compile_s,
    )


def test_a_config_whose_code_is_in_the_cache_fits_where_a_first_compile_does_not() -> None:
    # mu, empty cache: compiled trials took 44-47 s (36-40 s of it compiling); 36 s left
    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    records = {
        0: _record(0, naive, 12.0, None),
        1: _record(1, BEST.replace(knobs={"attention": "sdpa"}), 47.0, 40.0),
        2: _record(2, BEST, 44.0, 36.0),
    }
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 36.0), space=GPU
    )
    assert cached_compile_s(list(records.values())) == CACHED_COMPILE_SHARE * 40.0
    first = BEST.replace(micro_batch=16, grad_accum=2)
    said = will_not_finish(state, state.deadline, first)
    assert "(48 s: the slowest first compile so far)" in said  # 40 s + a median 7.5 s
    cached = BEST.replace(omp_spin=True)  # 8 s of steps after #2's compile, and a cached one
    assert will_not_finish(state, state.deadline, cached) == ""
    state.space = SimpleNamespace(device_kind="cpu")  # one compile serves any micro-batch
    assert will_not_finish(state, state.deadline, first) == ""
    state.deadline.for_trials = lambda: 8.0 + CACHED_COMPILE_SHARE * 40.0 - 1.0
    assert "#2's code from the compile cache" in will_not_finish(state, state.deadline, cached)


def test_the_planner_finds_a_queued_config_that_still_fits() -> None:
    from autotune.study.plan.planner import Planner

    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    records = {0: _record(0, naive, 12.0, None), 2: _record(2, BEST, 44.0, 36.0)}
    space: Any = SimpleNamespace(params_of=lambda c: {"key": repr(c.to_dict())}, device_kind="cuda")
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 36.0), space=space
    )
    planner = Planner(context=state, log=state)
    study = optuna.create_study(direction="maximize")
    first = BEST.replace(micro_batch=16, grad_accum=2)
    cached = BEST.replace(num_workers=2)
    for config in (first, cached):
        study.enqueue_trial(space.params_of(config), skip_if_exists=False)
        planner.queued.append(config)
    assert planner.waiting_that_fits(study) == cached
    planner.queued.remove(cached)
    assert planner.waiting_that_fits(study) is None


def test_a_trial_without_compile_is_held_to_the_quickest_one_without_compile() -> None:
    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    records = {0: _record(0, naive, 30.0, None), 1: _record(1, naive.replace(micro_batch=8,
        grad_accum=4), 14.0, None)}  # fmt: skip
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 13.0), space=GPU
    )
    said = will_not_finish(state, state.deadline, naive.replace(micro_batch=4, grad_accum=8))
    assert "than this trial takes here (14 s: the quickest trial of its model code" in said
    state.deadline.for_trials = lambda: 14.0
    assert will_not_finish(state, state.deadline, naive.replace(micro_batch=4, grad_accum=8)) == ""


def test_a_trial_of_model_code_no_trial_ran_is_held_to_the_median_one_without_compile() -> None:
    # mu on the 2-core EPYC: eager trials of sdpa attention took 7 s, the eager screens of
    # eager attention 15 s; a screen started with 8 s left was stopped, measuring nothing
    sdpa = TrainConfig(micro_batch=8, grad_accum=4, seq_len=128, knobs={"attention": "sdpa"})
    records = {
        0: _record(0, sdpa.replace(micro_batch=1, grad_accum=32), 20.0, None),
        1: _record(1, sdpa, 7.0, None),
        2: _record(2, sdpa.replace(micro_batch=16, grad_accum=2), 16.0, None),
        3: _record(3, BEST, 12.0, 8.0),  # compiled: not a measure of an eager trial
    }
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 8.0), space=GPU
    )
    screen = sdpa.replace(knobs={"attention": "eager"})
    said = will_not_finish(state, state.deadline, screen)
    assert "(16 s: the median trial without compile so far)" in said
    assert will_not_finish(state, state.deadline, sdpa.replace(micro_batch=4, grad_accum=8)) == ""


def test_naive_re_measures_and_the_expert_starts_without_compile_always_run() -> None:
    from autotune.study.trials.trial_cost import held_to_time

    eager, compiled = BEST.replace(compile="off"), BEST
    assert not held_to_time("naive", eager) and not held_to_time("re-measure", compiled)
    assert not held_to_time("hand-tuned", eager) and not held_to_time("playbook-eager", eager)
    assert held_to_time("playbook", compiled) and held_to_time("hand-tuned", compiled)
    assert held_to_time("refine", eager) and held_to_time(None, eager)  # the sampler's


def test_less_time_than_a_typical_burst_stops_the_trials_unless_a_queued_one_fits() -> None:
    import time

    from autotune.study.plan.space import SearchSpace
    from autotune.study.plan.stopping import stop_reason
    from autotune.study.session.context import Limits, SearchContext
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile, toy_spec

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    context = SearchContext.of(
        spec=spec, space=space, budget_bytes=10**9, limits=Limits(None, 100.0),
        started=time.monotonic() - 70.0,
    )  # fmt: skip
    log = TrialLog.of(context)
    log.absorb(_record(0, space.naive(), 40.0, None))
    assert "less than a typical burst (40 s)" in stop_reason(context, log)  # 30 s left
    assert stop_reason(context, log, next_fits=lambda: True) == ""
    assert "less than a typical burst" in stop_reason(context, log, next_fits=lambda: False)


def test_a_first_compile_is_expected_to_take_as_long_as_the_slowest_seen() -> None:
    """mu, 2-core EPYC, an empty cache: first-compile trials of 49, 38 and 47 s; a fourth
    started with 47 s left for trials (the quickest, 38 s, said it fitted) and the limit
    stopped it with nothing measured. The slowest compile (40 s) and a compiled trial's
    median rest (9 s) say 49 s."""
    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    records = {
        0: _record(0, naive, 9.0, None),
        2: _record(2, BEST.replace(knobs={"attention": "sdpa"}), 49.0, 40.0),
        3: _record(3, BEST, 38.0, 30.0),
        8: _record(8, BEST.replace(micro_batch=16, grad_accum=2), 47.0, 37.0),
    }
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 47.0), space=GPU
    )
    first = BEST.replace(micro_batch=4, grad_accum=8)
    assert "(49 s: the slowest first compile so far)" in will_not_finish(
        state, state.deadline, first
    )
    assert (
        will_not_finish(state, state.deadline, BEST.replace(omp_spin=True)) == ""
    )  # 8 s + the cache's
    # compiled trials that did not say how long they compiled: the quickest is all there is
    unsaid = {0: records[0], 3: _record(3, BEST, 38.0, None), 8: _record(8, BEST, 47.0, None)}
    state = SimpleNamespace(
        records=unsaid, deadline=SimpleNamespace(for_trials=lambda: 40.0), space=GPU
    )
    assert will_not_finish(state, state.deadline, first) == ""


def test_the_compile_caches_set_up_in_the_first_compiled_trial_is_not_expected_again() -> None:
    """mu, 2-core Xeon, an empty cache: the playbook's trial took 39.6 s, 25.8 s of it
    compiling and 13.8 s besides (the compile cache's set-up: the CPU's vector ISA checks);
    the first compiles after it took 28.8-31.7 s, 24.1-27.2 s of it compiling. With 33 s
    left for trials the next first compile (about 32 s) fits; the playbook's wall said
    it did not."""
    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    sdpa = BEST.replace(knobs={"attention": "sdpa"})
    records = {
        0: _record(0, naive, 7.3, None),
        2: _record(2, sdpa, 39.6, 25.8),
        3: _record(3, BEST, 28.8, 24.1),
        8: _record(8, BEST.replace(micro_batch=16, grad_accum=2), 31.4, 26.8),
        9: _record(9, BEST.replace(micro_batch=4, grad_accum=8), 31.7, 26.8),
        10: _record(10, BEST.replace(knobs={"attention": "eager", "block_group": 8}), 31.6, 27.2),
        11: _record(11, BEST.replace(omp_spin=True), 5.8, 1.6),
    }
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 33.0), space=GPU
    )
    first = sdpa.replace(micro_batch=16, grad_accum=2, omp_spin=True)
    assert (
        will_not_finish(state, state.deadline, first) == ""
    )  # 27.2 s + a median rest of 4.8 s: 32 s
    state.deadline.for_trials = lambda: 31.0
    assert "(32 s: the slowest first compile so far)" in will_not_finish(
        state, state.deadline, first
    )


def test_the_cache_set_up_of_the_first_compiled_trial_is_not_expected_of_its_variants() -> None:
    """mu on one core of the Xeon, an empty cache: the playbook's trial (the search's first
    compiled one) spent 12.8 s besides its compile and its steps, setting up the compile
    cache; later compiled trials spent 1.4-3.7 s. Its OpenMP-spin variant, served by the
    cache, was expected to take 19 s and skipped with 18 s left; such variants of the other
    codes took 5-6 s."""
    from dataclasses import replace

    from autotune.study.trials.trial_cost import rest_s

    def compiled(number: int, config: TrainConfig, wall: float, compile_s: float,
                 timed: int, step: float) -> TrialRecord:  # fmt: skip
        record = _record(number, config, wall, compile_s)
        return replace(record, timed_steps=timed, step_time_median_s=step)

    naive = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
    sdpa = BEST.replace(knobs={"attention": "sdpa"})
    records = {
        0: _record(0, naive, 10.7, None),
        2: compiled(2, sdpa, 52.3, 35.5, 2, 1.98),
        3: compiled(3, BEST, 35.4, 31.7, 2, 1.17),
        8: compiled(8, BEST.replace(omp_spin=True), 10.0, 1.8, 4, 1.12),
        9: compiled(9, BEST.replace(micro_batch=16, grad_accum=2), 42.0, 38.2, 2, 1.18),
        10: compiled(10, BEST.replace(micro_batch=4, grad_accum=8), 42.8, 38.7, 2, 1.32),
    }
    # its steps (2 x 1.98 s) and the compiled trials' median start-up (1.46 s)
    assert abs(rest_s(records[2], list(records.values())) - (3.96 + 1.46)) < 0.01
    assert rest_s(records[3], list(records.values())) == 35.4 - 31.7  # its own, lower
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 18.0), space=GPU
    )
    variant = sdpa.replace(omp_spin=True)
    assert will_not_finish(state, state.deadline, variant) == ""  # 5.4 s + 1.8 s from the cache
    state.deadline.for_trials = lambda: 6.0
    assert "(7 s: #2's code from the compile cache)" in will_not_finish(
        state, state.deadline, variant
    )
    # without step figures a trial's own rest is all there is
    plain = {n: _record(n, r.train_config(), r.wall_s or 0.0, r.compile_s)
             for n, r in records.items()}  # fmt: skip
    assert rest_s(plain[2], list(plain.values())) == 52.3 - 35.5
