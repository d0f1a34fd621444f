"""Which config runs next: the naive baseline first, the expert starts, refinement around
the best, a warm start, configs ruled out by dominance or the memory model, a too-small budget."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from virtual_clock import VirtualClock

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import Knob, ModelSpec
from autotune.core.errors import BudgetError
from autotune.study.trials.records import summarize_config
from autotune.study.trials.trial_cost import compiled_code_key
from autotune.testing.burst import GB, MB, FakeBurst, run, toy_spec

# -- the naive baseline -----------------------------------------------------------------


def test_naive_config_is_trial_0_and_the_speedup_is_measured_against_it(
    tmp_path: Path,
) -> None:
    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8)
    first = burst.calls[0]
    assert (first.precision, first.micro_batch, first.compile, first.num_workers) == (
        "fp32",
        1,
        "off",
        0,
    )
    assert not first.activation_checkpointing
    assert result.trials[0].role == "naive" and result.naive is not None
    assert result.naive.number == 0
    # then the playbook's start (the toy model has no guide, so no hand-tuned config): on
    # a CPU a quarter of the global batch per micro-batch, compiled
    assert result.trials[1].role == "playbook"
    assert (burst.calls[1].micro_batch, burst.calls[1].compile) == (8, "default")
    # it became the best: its neighbours come next, those that run its compiled code
    # first (no first compile): on a CPU one compile serves every micro-batch
    # (``TrainConfig.any_micro_batch``), so micro-batch x2 and /2, then OpenMP's spin
    playbook = burst.calls[1]
    assert [c.micro_batch for c in burst.calls[2:4]] == [16, 4]
    assert all(c.replace(micro_batch=8, grad_accum=4) == playbook for c in burst.calls[2:4])
    assert burst.calls[4] == playbook.replace(omp_spin=True)
    assert [t.role for t in result.trials[2:5]] == ["refine"] * 3
    # the speedup is the race's: paired rounds of the winner against naive
    assert result.best is not None and result.verified is not None
    expected = burst.speed(result.best.train_config()) / burst.speed(first)
    assert result.speedup == pytest.approx(expected)
    assert result.speedup > 1.5


def test_refinement_moves_each_model_knob_one_at_a_time(tmp_path: Path) -> None:
    # A kernel choice that doubles the speed (as MU's eager attention does in bf16 on a
    # CPU): after the playbook's start becomes the best, its neighbours come next, one
    # knob moved each: the categorical knob to its other value first (a short search may
    # have time for one refinement), then micro-batch x2 and /2, then the numeric knob one
    # value down (8 is its top). Compile is on already (the playbook's).
    knobs = (
        Knob(name="kernel", values=("fused", "plain"), default="fused"),
        Knob(name="group", values=(1, 2, 4, 8), default=8),
    )

    @dataclass
    class KernelBurst(FakeBurst):
        def speed(self, c: TrainConfig) -> float:
            return super().speed(c) * (2.0 if c.knobs["kernel"] == "plain" else 1.0)

    burst = KernelBurst()
    result = run(tmp_path, burst, spec=toy_spec(knobs=knobs), trials=10, knobs=["omp_spin=false"])
    guess = burst.calls[1]
    assert result.trials[1].role == "playbook" and guess.compile == "default"
    # the playbook's start is compiled: its neighbours that run its code come first (the
    # micro-batch x2 and /2 on a CPU), then those that need a first compile, screened
    # without compile: its own eager twin, then the categorical knob to its other value
    # (a short search may have time for one refinement)
    screens = [t for t in result.trials if t.role == "screen"]
    assert all(t.role == "refine" for t in result.trials[2 : screens[0].number])

    def moved(config: TrainConfig) -> set[str]:
        return {
            name
            for name in ("micro_batch", "compile", "precision", "activation_checkpointing")
            if getattr(config, name) != getattr(guess, name)
        } | {f"knobs.{k}" for k, v in config.knobs.items() if v != guess.knobs[k]}

    assert [moved(t.train_config()) for t in screens[:2]] == [
        {"compile"},
        {"compile", "knobs.kernel"},
    ]
    first = screens[1].train_config()
    assert first.knobs["kernel"] == "plain" and screens[1].ran and first in burst.calls
    # the plain kernel doubled the eager speed, past the compiled start: the playbook's
    # other screen (the group one value down) is skipped without a burst (a refinement of
    # a trial the best clearly beats), and the new best's first neighbour, compile turned
    # on, is the next to run
    after = result.trials[screens[1].number + 1 :]
    assert after[0].status == "skipped" and after[0].role == "screen"
    assert moved(after[0].train_config()) == {"compile", "knobs.group"}
    assert after[0].train_config().knobs["group"] == 4
    assert next(t for t in after if t.ran).train_config() == first.replace(compile="default")
    # the kernel and compile together win, within ten trials
    assert result.best is not None
    best = result.best.train_config()
    assert best.knobs["kernel"] == "plain" and best.compile == "default"


# -- infeasible region: found, and dominated configs never run ---------------------------


def test_infeasible_region_is_found_and_no_dominated_config_is_run(tmp_path: Path) -> None:
    # fp32 only, no compile, no workers: micro_batch x seq_len x checkpointing (36 configs);
    # no peaks from successful bursts, so only OOMs (dominance) can rule configs out.
    burst = FakeBurst(per_token=1 * MB, base=100 * MB, report_peaks=False)  # mb*seq > 900
    result = run(
        tmp_path,
        burst,
        trials=14,
        seq_len="64-256",
        knobs=["precision=fp32", "compile=off", "num_workers=0"],
        n_startup_trials=4,
    )
    statuses = [t.status for t in result.trials]
    assert "oom" in statuses, statuses
    dominated = [t for t in result.trials if t.status == "dominated"]
    assert dominated, statuses
    by_number = {t.number: t for t in result.trials}
    for t in dominated:
        assert not t.ran
        k = int(t.reason.rsplit("#", 1)[1])
        assert t.reason == f"dominated by OOM trial #{k}"
        assert by_number[k].status == "oom"
    # The core property: no config handed to the burst dominates an earlier OOM.
    ooms: list[TrainConfig] = []
    for config in burst.calls:
        for oom in ooms:
            same = oom.activation_checkpointing == config.activation_checkpointing
            assert not (
                same and config.micro_batch >= oom.micro_batch and config.seq_len >= oom.seq_len
            ), f"{config} was run although OOM {oom} dominates it"
        if burst.peak(config) > GB:
            ooms.append(config)
    # What fits was found, and the winner fits.
    assert result.best is not None
    assert burst.peak(result.best.train_config()) <= GB
    assert result.skipped  # dominated trials are reported with their reason
    assert any(reason.startswith("dominated by OOM trial #") for reason in result.skipped)


def test_the_fitted_memory_model_skips_configs_predicted_over_budget(tmp_path: Path) -> None:
    burst = FakeBurst(per_token=1 * MB, base=100 * MB)  # linear, as the model assumes
    result = run(
        tmp_path,
        burst,
        trials=14,
        seq_len="64-256",
        knobs=["precision=fp32", "compile=off", "num_workers=0"],
        n_startup_trials=4,
    )
    predicted = [t for t in result.trials if t.status == "predicted" and t.duplicate_of is None]
    assert predicted
    for t in predicted:
        assert not t.ran and t.reason.startswith("predicted over budget")
        assert burst.peak(t.train_config()) > GB  # really over the budget
    # and a config predicted over budget is never handed to the burst
    assert not any(t.train_config() in burst.calls for t in predicted)


# -- too small a budget ------------------------------------------------------------------


def test_budget_below_the_smallest_config_is_a_budget_error(tmp_path: Path) -> None:
    burst = FakeBurst(base=2 * GB)
    with pytest.raises(BudgetError) as info:
        run(tmp_path, burst, budget="1GB")
    message = str(info.value)
    assert "too small" in message and "smallest config" in message
    assert "953.67 MiB" in message  # the peak the smallest config reached before its OOM
    assert info.value.exit_code == 2
    # naive, then the smallest (checkpointing on, shortest sequences); nothing else
    assert len(burst.calls) == 2
    assert burst.calls[1].activation_checkpointing
    assert not (tmp_path / "best.yaml").exists()


def test_budget_fitting_only_with_checkpointing_goes_on(tmp_path: Path) -> None:
    # naive (mb 1, seq 128, no ckpt) needs 100 + 128 MB; ckpt halves activations
    burst = FakeBurst(base=100 * MB, per_token=1 * MB)
    result = run(tmp_path, burst, budget="200MB", seq_len=128, trials=6)
    assert result.trials[0].status == "oom"
    assert result.trials[1].role == "smallest" and result.trials[1].status == "ok"
    assert result.best is not None and result.speedup is None  # naive did not fit


def test_warm_start_runs_the_preset_config_and_its_neighbours_first(tmp_path: Path) -> None:
    first = run(tmp_path / "a", FakeBurst(), trials=8)
    assert first.preset_path is not None and first.best is not None
    burst = FakeBurst()
    run(tmp_path / "b", burst, trials=5, warm_start=first.preset_path)
    warm = first.best.train_config()
    assert burst.calls[1] == warm  # right after the naive baseline
    for neighbour in burst.calls[2:4]:
        assert (neighbour.micro_batch, neighbour.num_workers) != (
            warm.micro_batch,
            warm.num_workers,
        )
        diff = {k for k, v in neighbour.to_dict().items() if warm.to_dict()[k] != v}
        assert diff <= {"micro_batch", "grad_accum", "num_workers"}


@pytest.mark.parametrize("compile_", ["on", "off"])
def test_a_refinement_out_of_memory_is_tried_again_with_checkpointing(
    tmp_path: Path, compile_: str
) -> None:
    # 1 GB budget, 50 MB + 1 MB per token: the playbook's mb 8 fits, its refinement mb 16
    # runs out of memory; mb 16 with activation checkpointing (a fifth of the activations
    # here) fits, and is queued as a refinement of the same trial. With compile, on a CPU,
    # the refinement runs the playbook's compiled code (one compile serves every
    # micro-batch): it is compiled at once, not screened
    import optuna

    burst = FakeBurst(per_token=1 * MB, base=50 * MB)
    knobs = ["omp_spin=false", *(["compile=off"] if compile_ == "off" else [])]
    result = run(tmp_path, burst, trials=10, knobs=knobs)
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    trials = {t.number: t for t in study.trials}
    role = "refine"
    oom = next(t for t in result.trials if t.role == role and t.status == "oom")
    assert (oom.train_config().compile != "off") == (compile_ == "on")
    fitted = oom.train_config().replace(activation_checkpointing=True)
    again = [t for t in result.trials if t.train_config() == fitted]
    assert again and again[0].role == role and again[0].number > oom.number
    assert trials[again[0].number].user_attrs["refines"] == trials[oom.number].user_attrs["refines"]
    assert again[0].status == "ok" and again[0].ran
    # and never the other way round: a refinement with checkpointing that does not fit
    assert not any(
        t.role == role and t.config["activation_checkpointing"] and t.number < oom.number
        for t in result.trials
    )


def test_refinements_of_a_trial_a_later_best_clearly_beats_are_skipped(tmp_path: Path) -> None:
    # The playbook's start (mb 8, without compile here: with it, its neighbours are cheap
    # screens first) leads and its neighbours are queued; the first of them, mb 16, beats
    # it by 30% (the fake's speed grows with the micro-batch): the rest of mb 8's
    # neighbours are skipped without a burst, and mb 16's come next.
    burst = FakeBurst()
    knobs = ["omp_spin=false", "compile=off"]
    result = run(tmp_path, burst, trials=8, budget="8GB", knobs=knobs)
    skipped = [t for t in result.trials if t.status == "skipped"]
    assert skipped and all(t.state == "PRUNED" and not t.ran for t in skipped)
    assert all(t.reason.startswith("a refinement of #1, which #") for t in skipped)
    burst_configs = {repr(c) for c in burst.calls}
    assert all(repr(t.train_config()) not in burst_configs for t in skipped)
    later = [
        t for t in result.trials if t.role == "refine" and t.ran and t.number > skipped[0].number
    ]
    assert later, "the new best's neighbours ran after the skip"


# -- a short time limit: the quick start before naive -----------------------------------


def test_a_short_time_limit_runs_the_quick_start_first_and_refines_after_the_starts(
    tmp_path: Path,
) -> None:
    spec = replace(toy_spec(), family="mu")
    notes: list[str] = []
    result = run(
        tmp_path,
        FakeBurst(),
        spec=spec,
        budget="4GB",
        trials=6,
        timeout="100s",
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    roles = [t.role for t in result.trials]
    assert roles[:4] == ["quick-start", "naive", "hand-tuned", "playbook"], roles
    quick = result.trials[0].train_config()
    assert (quick.micro_batch, quick.compile) == (spec.global_batch, "off")
    assert any(
        n.startswith("a time limit of 100 s leaves no time for a first compile") for n in notes
    )
    assert result.naive is not None and result.naive.number == 1


@pytest.mark.parametrize("timeout", [None, "121s"])
def test_without_a_short_time_limit_naive_runs_first(tmp_path: Path, timeout: str | None) -> None:
    result = run(tmp_path, FakeBurst(), budget="4GB", trials=3, timeout=timeout)
    assert [t.role for t in result.trials[:2]] == ["naive", "playbook"]


def test_a_resumed_short_search_adds_no_quick_start(tmp_path: Path) -> None:
    first = run(tmp_path, FakeBurst(), budget="4GB", trials=2, study="s", output=None)
    assert [t.role for t in first.trials] == ["naive", "playbook"]
    again = run(tmp_path, FakeBurst(), budget="4GB", trials=4, study="s", timeout="60s")
    assert "quick-start" not in [t.role for t in again.trials]


# -- the expert starts come before any refinement ------------------------------------------


def test_the_best_of_the_expert_starts_is_refined_once_they_have_all_run(
    tmp_path: Path,
) -> None:
    # With the MU guide (hand-tuned mb 8 fp32, no compile; the playbook: the same with
    # compile), the hand-tuned config leads after trial 1, but the playbook's start is
    # still queued: no neighbour of #1 is queued, and those of the playbook's (faster,
    # compiled) start come first after it.
    import optuna

    spec = replace(toy_spec(), family="mu")
    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8, spec=spec)
    assert [t.role for t in result.trials[:3]] == ["naive", "hand-tuned", "playbook"]
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    refines = [t.user_attrs.get("refines") for t in study.trials if t.number >= 3]
    assert refines[:2] == [2, 2], refines  # mb 4 and 16, compiled (compile is on already)
    assert 1 not in refines


def test_the_playbooks_start_without_compile_runs_next_when_its_compile_fails(
    tmp_path: Path,
) -> None:
    # A model whose compile fails on this device: the playbook's other choices are still
    # measured, right after it, and the race's expert is that config.
    burst = FakeBurst(fail=lambda c: "error" if c.compile != "off" else None)
    notes: list[str] = []
    result = run(
        tmp_path,
        burst,
        trials=6,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert [t.role for t in result.trials[:3]] == ["naive", "playbook", "playbook-eager"]
    assert result.trials[1].status == "error" and result.trials[2].status == "ok"
    assert burst.calls[2] == burst.calls[1].replace(compile="off")
    assert any("its config without compile is queued next" in n for n in notes)
    assert result.race is not None
    expert = next(e for e in result.race.entrants if "expert" in e.roles)
    assert expert.record.role == "playbook-eager"
    # a compile that works: no such trial
    plain = run(tmp_path / "b", FakeBurst(), trials=6)
    assert all(t.role != "playbook-eager" for t in plain.trials)


def test_the_guides_compiled_start_without_compile_runs_next_when_its_compile_fails(
    tmp_path: Path,
) -> None:
    # gpt's guide ends compiled in bf16, which is the playbook's config on a CPU too: the
    # one start runs as "hand-tuned", and its config without compile must follow it as
    # the playbook's does (gpt-small in a 30-second search: its compile was stopped, and
    # the sampler's fp32 proposal ran instead of its bf16 config).
    spec = replace(toy_spec(), family="gpt")
    burst = FakeBurst(fail=lambda c: "error" if c.compile != "off" else None)
    result = run(tmp_path, burst, trials=6, spec=spec)
    assert [t.role for t in result.trials[:3]] == ["naive", "hand-tuned", "hand-tuned-eager"]
    assert burst.calls[1].compile != "off"
    assert burst.calls[2] == burst.calls[1].replace(compile="off")
    assert result.race is not None
    expert = next(e for e in result.race.entrants if "expert" in e.roles)
    assert expert.record.role == "hand-tuned-eager"


def test_cached_neighbours_come_early_only_where_the_best_compiles() -> None:
    from autotune.study.plan.planner import _cheap_after_the_first

    def order(config: TrainConfig) -> list[TrainConfig]:
        cands = [
            config.replace(micro_batch=16, grad_accum=2),  # new code
            config.replace(precision="bf16"),  # new code
            config.replace(omp_spin=True),  # the same compiled code
        ]
        return _cheap_after_the_first(config, cands, lambda _c, _cand: 0, "cuda")

    compiled = TrainConfig(micro_batch=8, grad_accum=4, seq_len=64, compile="default")
    assert [c.omp_spin for c in order(compiled)] == [False, True, False]
    eager = compiled.replace(compile="off")
    assert [c.omp_spin for c in order(eager)] == [False, False, True]
    # on a CPU another micro-batch of compiled code is served by the cache as well
    cands = [
        compiled.replace(precision="bf16"),
        compiled.replace(activation_checkpointing=True),
        compiled.replace(micro_batch=16, grad_accum=2),
    ]
    on_cpu = _cheap_after_the_first(compiled, cands, lambda _c, _cand: 0, "cpu")
    assert on_cpu == [cands[0], cands[2], cands[1]]


@dataclass
class PeakAtEight(FakeBurst):
    """Micro-batch 8 fastest, 16 at 0.95x, any other at 0.6x; compile 1.5x on each."""

    def speed(self, c: TrainConfig) -> float:
        shape = {8: 1.0, 16: 0.95}.get(c.micro_batch, 0.6)
        return 10_000.0 * shape * (1.5 if c.compile != "off" else 1.0)


def test_a_finalist_the_refinements_left_out_gets_its_cached_variant_before_the_sampler(
    tmp_path: Path,
) -> None:
    # The playbook's micro-batch 8 stays the best; its neighbour at micro-batch 16 comes
    # close (0.95x) but is not refined (it never led). Once the best's neighbours have run
    # and nothing is queued, the finalists' neighbours on their own compiled code (here
    # OpenMP's spin) run before the sampler's own proposals: a trial's steps each, where
    # TPE's are new code.
    burst = PeakAtEight()
    result = run(tmp_path, burst, trials=12, budget="4GB")
    roles = [t.role for t in result.trials]
    sampled = roles.index("") if "" in roles else len(roles)
    before_sampler = [t.train_config() for t in result.trials[:sampled]]
    near = next(
        c for c in before_sampler if c.micro_batch == 16 and not c.omp_spin and c.compile != "off"
    )
    assert result.best is not None and result.best.train_config().micro_batch == 8
    assert near.replace(omp_spin=True) in before_sampler[before_sampler.index(near) :]
    varied = next(t for t in result.trials if t.train_config() == near.replace(omp_spin=True))
    assert varied.role == "refine"


@dataclass
class FirstCompiles(PeakAtEight):
    """PeakAtEight's speeds, the model's kernel "plain" at 0.97x "fused", and time on the
    search's clock: 3 s a burst, and a compile 60 s where its code is new to the search
    (``compiled_code_key``: on a CPU one compile serves every micro-batch) or 1 s from
    the cache."""

    clock: VirtualClock | None = None
    compiled: set[Any] = field(default_factory=set)

    def speed(self, c: TrainConfig) -> float:
        return super().speed(c) * (0.97 if c.knobs.get("kernel") == "plain" else 1.0)

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        assert self.clock is not None
        compile_s = None
        if config.compile != "off":
            key = compiled_code_key(config, "cpu")
            compile_s = 1.0 if key in self.compiled else 60.0
            self.compiled.add(key)
            self.clock.sleep(compile_s)
        self.clock.sleep(3.0)
        result = super().__call__(spec, config, **kw)
        return replace(result, compile_s=compile_s) if result.ok else result


def test_where_a_first_compile_no_longer_fits_cached_variants_then_eager_screens_run(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # mu on the 2-core EPYC: its best's compiled refinement (a model knob, a first compile
    # of 75 s) did not fit the 27 s left for trials, and the search stopped there, where a
    # finalist's variant on its cached code took 12-19 s. Here the refinement with kernel
    # "plain" (a 60 s first compile) does not fit: it is passed over, and the finalists'
    # variants that the cache serves run in the time left; once none is left, the eager
    # screens of the finalists' new-code neighbours (a trial's steps each) run, where the
    # search stopped before with 15 s left.
    spec = toy_spec(knobs=(Knob(name="kernel", values=("fused", "plain"), default="fused"),))
    burst = FirstCompiles(clock=clock)
    result = run(tmp_path, burst, spec=spec, trials=None, timeout="150s", budget="4GB")
    passed = next(t for t in result.trials if t.status == "skipped")
    assert passed.config["knobs"] == {"kernel": "plain"} and passed.config["compile"] != "off"
    assert passed.reason.startswith("the time left for trials")
    after = [t for t in result.trials if t.number > passed.number and t.ran]
    assert after and result.stopped != passed.reason
    before = {compiled_code_key(t.config, "cpu") for t in result.trials[: passed.number] if t.ran}
    cached = [t for t in after if t.config["compile"] != "off"]
    screens = [t for t in after if t.config["compile"] == "off"]
    for trial in cached:  # each runs compiled code the search compiled before
        assert trial.role == "refine" and compiled_code_key(trial.config, "cpu") in before
    assert cached and screens, [(t.role, t.config["compile"]) for t in after]
    assert all(t.role == "screen" for t in screens)
    # a screen only once no cached variant was left: each finalist's cached variants first
    assert max(t.number for t in cached) < min(t.number for t in screens)
    screened = {(t.config["micro_batch"], t.config["knobs"]["kernel"]) for t in screens}
    assert len(screened) == len(screens)  # each screen a new config
    earlier = {
        (t.config["micro_batch"], t.config["knobs"]["kernel"])
        for t in result.trials[: passed.number]
        if t.ran and t.config["compile"] == "off"
    }
    assert not screened & earlier
    # a config passed over for time is not queued again while it still does not fit
    skipped = [summarize_config(t.config) for t in result.trials if t.status == "skipped"]
    assert len(skipped) == len(set(skipped)), skipped


def test_an_uncompiled_finalist_that_its_compiled_twin_beats_is_not_varied() -> None:
    import optuna

    from autotune.study.plan.planner import Planner
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.context import Limits, SearchContext
    from autotune.study.trials.records import TrialRecord
    from autotune.study.trials.trial_log import TrialLog
    from autotune.testing.burst import cpu_profile

    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    context = SearchContext.of(
        spec=spec, space=space, budget_bytes=4 * GB, limits=Limits(None, None)
    )
    log = TrialLog.of(context)
    eager = TrainConfig(micro_batch=8, grad_accum=4, seq_len=64)
    compiled = eager.replace(compile="default")
    for number, (config, value) in enumerate(
        [(eager, 120.0), (compiled, 150.0), (compiled.replace(micro_batch=16, grad_accum=2), 140.0)]
    ):
        log.absorb(TrialRecord(
            number=number, state="COMPLETE", status="ok", config=config.to_dict(), ran=True,
            value=value, wall_s=5.0, role="refine",
        ))  # fmt: skip
    planner = Planner(context=context, log=log)
    study = optuna.create_study(direction="maximize")
    planner.vary_the_finalists(study)
    assert planner.queued and all(c.compile != "off" for c in planner.queued), planner.queued
    log.absorb(
        TrialRecord(
            number=1,
            state="COMPLETE",
            status="ok",
            config=compiled.to_dict(),
            ran=True,
            value=110.0,
            wall_s=5.0,
            role="refine",
        )
    )  # fmt: skip  (the compiled twin now runs slower: the eager finalist is varied)
    planner.vary_the_finalists(study, queued_or_not=True)
    assert any(c.compile == "off" for c in planner.queued)


# -- screen cheap, confirm dear ---------------------------------------------------------------

KERNELS = {"fused": 1.0, "plain": 0.95, "slow": 0.6}


@dataclass
class ThreeKernels(FakeBurst):
    """The model's kernel "fused" fastest, "plain" at 0.95x, "slow" at 0.6x; compile 1.5x."""

    def speed(self, c: TrainConfig) -> float:
        return 10_000.0 * KERNELS[c.knobs["kernel"]] * (1.5 if c.compile != "off" else 1.0)


def test_a_compiled_refinement_is_compiled_only_when_its_eager_screen_keeps_it(
    tmp_path: Path,
) -> None:
    # The compiled playbook's start (kernel "fused") is the best; its neighbours that need
    # a first compile (the model's kernel) are screened without compile first. "plain"
    # runs 0.95x "fused" eager: within SCREEN_KEEP, so it is compiled; "slow" runs 0.6x:
    # never compiled.
    from autotune.study.plan.planner import SCREEN_KEEP

    assert 0.6 < SCREEN_KEEP <= 0.95
    burst = ThreeKernels()
    spec = toy_spec(knobs=(Knob(name="kernel", values=tuple(KERNELS), default="fused"),))
    result = run(tmp_path, burst, spec=spec, trials=8, budget="4GB", knobs=["omp_spin=false"])
    screens = [t.train_config() for t in result.trials if t.role == "screen"]
    assert [c.knobs["kernel"] for c in screens[:3]] == ["fused", "plain", "slow"]
    assert all(c.compile == "off" for c in screens)
    compiled = [c.knobs["kernel"] for c in burst.calls if c.compile != "off"]
    assert "plain" in compiled and "slow" not in compiled, compiled
    # the screen ran before its compile: a first compile is spent on what can still win
    order = [(c.knobs["kernel"], c.compile) for c in burst.calls]
    assert order.index(("plain", "off")) < order.index(("plain", "default"))


def test_a_screen_measured_before_is_not_run_again(tmp_path: Path) -> None:
    # Each new best queues its screens; an eager twin measured for an earlier best (or a
    # config that differs from it only outside the model) answers for it: no config of
    # the search is handed to a burst twice.
    burst = FakeBurst()
    knobs = (
        Knob(name="kernel", values=("fused", "plain"), default="fused"),
        Knob(name="group", values=(1, 2, 4, 8), default=8),
    )
    spec = toy_spec(knobs=knobs)
    result = run(tmp_path, burst, spec=spec, trials=8, budget="4GB", knobs=["omp_spin=false"])
    configs = [repr(c) for c in burst.calls]
    assert len(configs) == len(set(configs)), "a config ran twice"
    assert any(t.role == "screen" for t in result.trials)


def test_a_refinement_that_gains_only_compiled_is_compiled_without_an_eager_screen() -> None:
    # float8 linears run slower than bf16 eager: screened eager, the fp8 refinement of a
    # compiled best would fall below SCREEN_KEEP and never be compiled.
    from types import SimpleNamespace

    from autotune.study.plan.planner import Planner

    best = TrainConfig(micro_batch=8, grad_accum=4, seq_len=64, precision="bf16", compile="default")
    space: Any = SimpleNamespace(
        contains=lambda c: True, key=lambda c: repr(c.to_dict()), device_kind="cuda"
    )
    state: Any = SimpleNamespace(space=space, record_of=lambda c: None, trials_in_order=list)
    planner = Planner(context=state, log=state)
    fp8 = best.replace(fp8_linears=True)
    bigger = best.replace(micro_batch=16, grad_accum=2)
    queued = planner.screen_compiles(best, [fp8, bigger], refines=3)
    assert (fp8, "refine") in queued  # compiled at once
    assert (bigger.replace(compile="off"), "screen") in queued  # screened first, as before
    assert (bigger, "refine") not in queued
    space.device_kind = "cpu"  # where one compile serves every micro-batch: compiled at once
    assert (bigger, "refine") in planner.screen_compiles(best, [bigger], refines=5)
    # turning fp8 off again is screened like any other change
    queued = planner.screen_compiles(fp8, [best], refines=4)
    assert (best, "refine") not in queued
