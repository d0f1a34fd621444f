"""Which config runs next: the starts, refinement around each new best, and the configs
ruled out without a run.

The order of the first trials: under a short time limit (``QUICK_LIMIT_S``) the quick start
(``playbook.quick_start``: no compile, the whole batch at once), then the naive config
(fp32, the smallest micro-batch, no compile, no workers; never pruned), so the speedup over
naive is measured in the same study; if it does not fit, the smallest config (to tell a
too-small budget, exit code 2); else the expert starts (``autotune/study/plan/playbook.py``: the
model guide's hand-tuned config and the playbook's; the playbook's without compile when its
compile gives no result), or a warm start's preset config and its neighbours. Each time a
trial becomes the best, its neighbours (one knob moved, the discrete kernel choices first)
are queued next, and one that does not fit the budget once more with activation
checkpointing; while expert starts wait, they wait too, so the best of the starts is the
first refined. Between these, the sampler (TPE) proposes; a proposal that a known OOM
dominates, or that the memory model predicts over the budget, is ruled out without a burst.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.units import format_bytes
from autotune.study.plan.stopping import stop_reason
from autotune.study.race.finalist_race import DEFAULT_FINALISTS, behind_the_best
from autotune.study.trials.records import (
    SearchEvent,
    TrialRecord,
    distinct_best,
    summarize_config,
)
from autotune.study.trials.trial_cost import compiled_code_key, will_not_finish

if TYPE_CHECKING:
    import optuna

    from autotune.config.train_config import TrainConfig
    from autotune.core.device_caps import DeviceCaps
    from autotune.explain.verdict import StepVerdict
    from autotune.preset.sections import Fingerprint
    from autotune.study.plan.memory_model import MemoryModel, MemoryVerdict
    from autotune.study.session.context import SearchContext
    from autotune.study.trials.trial_log import TrialLog

__all__ = ["OUTDATED_MARGIN", "Planner"]

# A queued refinement of a trial is skipped once a later best beats that trial by more
# than this (within it, the two are within a burst's noise: its neighbours still count).
# One config's fresh bursts spread 1.10-1.36x on the 2-core dev VM (OpenMP's idle threads
# spin or sleep per process: BENCHMARKS.md); at 10%, mu's search skipped eager attention
# (2x in bf16 there) after a neighbour led by 12%.
OUTDATED_MARGIN = 0.25

# A compiled refinement whose eager twin ran below this share of the eager twin of the
# config it refines is not compiled (``Planner.screen_compiles``): compile moves configs
# apart by more than eager runs show (mu's eager attention: 1.48-1.54x with compile and
# bf16), so the screen drops only what is clearly behind.
SCREEN_KEEP = 0.85
# Knobs whose gain shows only in compiled code: float8 linears run slower than bf16 eager
# (torchao's scaling is fused only by torch.compile), so an eager screen of a refinement
# that turns one on says nothing of it, and would drop it. Such a refinement is compiled
# without a screen.
COMPILED_ONLY_GAINS = ("fp8_linears",)

# The roles of the expert starts (``playbook.expert_starts``).
EXPERT_ROLES = ("hand-tuned", "playbook")

# A time limit at or under this opens the search with the quick start (``playbook.
# quick_start``: no compile, the whole batch at once) before naive. A first compile takes
# 18-66 s on a 2-core CPU and naive's trial (32 micro-batches a step) 12-15 s, so under
# two minutes a search measured naive and the eager starts, or naive alone: given 16 s
# (twice a batch finder's time) mu's answered naive, 0.60x the finder's pick.
QUICK_LIMIT_S = 120.0


@dataclass(kw_only=True)
class Planner:
    """Queues the configs the search runs before the sampler's own proposals, and stops
    the search when it has reason to."""

    context: SearchContext
    log: TrialLog  # written here alone: ``after_trial``, ``absorb_others``
    caps: DeviceCaps | None = None  # the device (for the guides' configs); None: the guess
    here: Fingerprint | None = None  # this device's, for a shipped preset measured on one alike
    use_experts: bool = False  # no warm start: queue the expert starts after naive
    experts_enqueued: bool = False
    smallest_enqueued: bool = False
    experts: list[TrainConfig] = field(default_factory=list)  # the expert starts, in order
    refine_due: bool = False  # a new best came while expert starts waited: refine after
    remeasure: list[TrainConfig] = field(default_factory=list)  # disturbed, not yet queued
    # With a profiled search: the naive config's verdict (autotune.explain), asked once the
    # naive trial ran; the knobs it names are refined first around every new best.
    explain: Callable[[TrainConfig], StepVerdict | None] | None = None
    first_knobs: tuple[str, ...] = ()
    queued: list[TrainConfig] = field(default_factory=list)  # every config it queued
    # compiled refinements waiting on their screen (``screen_compiles``): the eager
    # twin's key -> (the compiled config, the trial it refines)
    screened: dict[tuple[Any, ...], tuple[TrainConfig, int]] = field(default_factory=dict)
    budget_problem: str = ""  # why even the smallest config does not fit ("": it may)

    def ruled_out(self, config: TrainConfig) -> MemoryVerdict | None:
        """Why ``config`` is not worth a burst (dominated by a known OOM, predicted over
        the budget), or None to run it."""
        return self.log.memory.verdict(config)

    # -- the starts --------------------------------------------------------------------
    def enqueue_starts(self, study: optuna.Study, warm_start: str | Path | None) -> None:
        """The naive config first (once per study), then a warm start's config and its
        neighbours; without a warm start, the expert starts once the naive config fits.
        Under a short time limit (``QUICK_LIMIT_S``) the quick start runs before naive."""
        if warm_start is None:
            self.enqueue_quick_start(study)
        self._queue(study, self.context.space.naive(), role="naive")
        if warm_start is None:
            self.use_experts = True
            self.enqueue_experts(study)
        else:
            self._enqueue_warm_start(study, warm_start)
        self.measure_timed_out_again(study)

    def enqueue_quick_start(self, study: optuna.Study) -> None:
        """Under a time limit of ``QUICK_LIMIT_S`` or less, queue the quick start first
        (``playbook.quick_start``), saying why in one line: in such a limit the first
        trial is often the only one besides naive, and naive (micro-batch 1) is what a
        user would not train with. Not on a resume that measured anything already."""
        context, log = self.context, self.log
        limit = context.limits.time_limit_s
        if self.caps is None or limit is None or limit > QUICK_LIMIT_S or log.records:
            return
        from autotune.study.plan.playbook import quick_start

        config = quick_start(context.space, context.spec, memory=log.memory)
        naive = context.space.key(config) == context.space.key(context.space.naive())
        if (
            context.space.contains(config)
            and not naive
            and self._queue(study, config, role="quick-start")
        ):
            shown = summarize_config(config.to_dict(), context.spec.size_name)
            context.note(
                f"a time limit of {limit:g} s leaves no time for a first compile: the quick "
                f"start ({shown}) runs first, then naive"
            )

    def _enqueue_warm_start(self, study: optuna.Study, warm_start: str | Path) -> None:
        from autotune.preset import load_preset
        from autotune.study.plan.playbook import warm_start_config

        space = self.context.space
        config = warm_start_config(space, load_preset(warm_start).config)
        if not space.contains(config):
            shown = summarize_config(config.to_dict(), self.context.spec.size_name)
            self.context.note(
                f"warm start: the config of {str(warm_start)!r} ({shown}) is outside this "
                "search space (restricted knobs, another device or model); starting without it"
            )
            return
        queued = 0
        for i, cand in enumerate([config, *space.neighbours(config)]):
            if self._queue(study, cand, role="warm-start" if i == 0 else ""):
                queued += 1
        self.context.note(f"warm start from {str(warm_start)!r}: {queued} configs queued first")

    def measure_timed_out_again(self, study: optuna.Study) -> None:
        """On a resume with a longer ``--burst-timeout``: queue the configs whose bursts ran
        out a shorter one and that have no result since (``TrialLog.timed_out_sooner``),
        each in its trial's role, and say so in one line. Their timeouts told nothing of
        them under the longer limit; other failures (OOM, over budget, crash) stand. So do
        the timeouts of trials that did not record their limit (an older autotune's): the
        line says so."""
        context, log = self.context, self.log
        again: dict[tuple[Any, ...], TrialRecord] = {}
        unknown = 0
        for record in log.trials_in_order():
            config = _timed_out_config(record)
            if config is None or not context.space.contains(config):
                continue
            standing = log.record_of(config)
            if standing is None and log.timed_out_sooner(record):
                again.setdefault(context.space.key(config), record)
            elif record.burst_timeout_s is None and standing is record:  # its limit unknown
                unknown += 1
        for record in again.values():
            self._queue(study, record.train_config(), role=record.role)
        if again and context.burst_limit_s is not None:
            context.note(_timed_out_note(list(again.values()), context.burst_limit_s))
        if unknown:
            context.note(
                f"{unknown} config{'s' if unknown > 1 else ''} timed out in trials that did "
                "not record their --burst-timeout (an older autotune ran them): those "
                "timeouts stand whatever this search's limit; --study NAME measures them anew"
            )

    def enqueue_experts(self, study: optuna.Study) -> None:
        """Queue the expert starts once the naive config has run within the budget (when
        it did not, the smallest config goes next instead: see ``check_budget``): the
        guide's hand-tuned config and the playbook's, or the space's guess when the device
        is not known."""
        if not self.use_experts or self.experts_enqueued:
            return
        context, log = self.context, self.log
        naive = log.record_of(context.space.naive())
        if naive is None or not naive.feasible:
            return
        self.experts_enqueued = True
        starts: list[tuple[str, TrainConfig, list[str]]]
        if self.caps is None:
            starts = [("guess", context.space.guess(), [])]
        else:
            from autotune.study.plan.playbook import expert_starts

            starts = expert_starts(context.space, context.spec, self.caps, memory=log.memory)
        if self.caps is not None:  # the quick start's values, eager, before any compile
            starts = _quick_start_among(starts, context, log.memory)
        if self.caps is not None and self.here is not None:
            starts = _shipped_among(starts, context, self.caps, self.here)
        for role, config, notes in starts:
            for message in notes:
                context.note(message)
            self.experts.append(config)
            self._queue(study, config, role=role)

    def expert(self) -> TrialRecord | None:
        """The expert start the race measures against: the first expert start (the
        hand-tuned config, else the playbook's) that has a result within the budget."""
        for config in self.experts:
            record = self.log.record_of(config)
            if record is not None and record.feasible and record.ran:
                return record
        return None

    # -- after each trial ----------------------------------------------------------------
    def absorb_others(self, records: list[TrialRecord]) -> None:
        """Trials that other workers of a shared study finished (``Workers``) into the log."""
        for record in records:
            self.log.absorb(record)

    def after_trial(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        """Optuna's callback: learn from the trial and queue what follows from it (whether
        the search stops after it: ``stop_reason``)."""
        record = TrialRecord.from_trial(frozen)
        self.log.record_trial(record)
        self.context.emit(
            SearchEvent(
                kind="trial",
                trial=record,
                best=self.log.best(),
                elapsed_s=self.context.deadline.elapsed(),
                time_left_s=self.context.deadline.left(),
                trials_left=self.log.trials_left(),
                unit=self.context.unit,
            )
        )
        self.explain_naive(record)
        self.check_budget(study)
        self.enqueue_experts(study)
        self.without_compile(study, record)
        self.measure_again(study, record)  # before the refinements queued now
        self.confirm_screened(study)
        self.refine(study, record)
        self.fit_with_checkpointing(study, record, frozen.user_attrs.get("refines"))
        self.vary_the_finalists(study)

    def stop_reason(self, study: optuna.Study | None) -> str:
        """Why the search stops (after the trial just learnt from), or "" to go on: the
        budget too small for any config (``budget_problem``), else ``stopping.stop_reason``,
        where a queued config of ``study`` that is expected to finish in the time left for
        trials is reason to go on (``next_that_fits``; None: before the first trial)."""
        if self.budget_problem:
            return "budget too small"
        fits = None if study is None else (lambda: self.next_that_fits(study) is not None)
        return stop_reason(self.context, self.log, next_fits=fits)

    def explain_naive(self, record: TrialRecord) -> None:
        """Once the naive trial ran, ask where its step's time goes (``explain``: a
        profiling burst) and keep the knobs its verdict names, saying why in the output."""
        if self.explain is None or self.first_knobs or record.role != "naive":
            return
        verdict = self.explain(record.train_config()) if record.ran else None
        if verdict is None or not verdict.knobs:
            self.context.note(
                "the naive config gave no profile: knobs are refined in their usual order"
            )
            return
        self.first_knobs = verdict.knobs
        self.context.note(
            f"the naive config is {verdict.kind} ({verdict.evidence}): "
            f"{', '.join(verdict.knobs)} are refined first"
        )

    def without_compile(self, study: optuna.Study, record: TrialRecord) -> None:
        """When a compiled expert start (the playbook's, or the guide's hand-tuned config
        where it compiles) gives no result because of its compile (still compiling at its
        cap, a compile error or crash), queue the same config without compile as one more
        expert start: its other choices (precision, micro-batch, workers) are then
        measured all the same. pointer-gen on the 2-core CPU: its compile outlasted a
        whole default search, and bf16 without compile was never tried. gpt-small, whose
        guide's config is the playbook's (so it runs once, as ``hand-tuned``), in a
        30-second search: its compile was stopped at its cap, and the sampler's fp32
        proposal ran instead of its bf16 config."""
        config = record.train_config()
        failed = record.status in ("stopped", "timeout", "crash", "error")
        expert = record.role in EXPERT_ROLES
        if not expert or config.compile == "off" or not (record.ran and failed):
            return
        eager = config.replace(compile="off")
        role = f"{record.role}-eager"
        if self.context.space.contains(eager) and self._queue(study, eager, role=role):
            self.experts.append(eager)
            self.context.note(
                f"trial #{record.number} (the {record.role} start) gave no result with "
                f"compile={config.compile}: its config without compile is queued next"
            )

    def starts_waiting(self, study: optuna.Study) -> bool:
        """Whether an expert start is still queued in the study."""
        space = self.context.space
        return any(_waiting(study, space.params_of(config)) for config in self.experts)

    def _starts_to_come(self) -> bool:
        """Whether the expert starts are still to be queued: they follow naive, which has
        not run yet (the quick start ran before it). Its refinement waits for them."""
        naive_ran = self.log.record_of(self.context.space.naive()) is not None
        return self.use_experts and not self.experts_enqueued and not naive_ran

    def refine(self, study: optuna.Study, record: TrialRecord) -> None:
        """When a measured trial becomes the best, queue its neighbours that have no
        result yet, one knob moved at a time: the discrete kernel choices first (compile
        turned on, each categorical model knob: MU's eager attention moved it 1.48-1.54x,
        but only together with bf16 and compile), then the micro-batch (x2, /2), then the
        numeric model knobs and the switches (``SearchSpace.neighbours``). TPE, sampling
        around its model, can take many trials to land on the one step next to the best,
        and a short search has few to spare: on a CPU with an empty compile cache, mu's
        default search has time for one refinement of the playbook's compiled start. OOM
        neighbours cost nothing (the memory model skips them). While expert starts wait,
        the neighbours wait too: the best of the starts is refined once they have run, and
        no refinement of a start that a later start beats takes a trial."""
        best = self.log.best()
        if best is None or not (best.number == record.number or self.refine_due):
            return
        self.refine_due = self.starts_waiting(study) or self._starts_to_come()
        if self.refine_due or not best.ran or best.role == "naive":
            return
        space, config = self.context.space, best.train_config()
        workers = "num_workers" in self.first_knobs  # an input-bound naive: its workers too
        cands = space.neighbours(config, workers=workers, kernels=True)
        ordered = _cheap_after_the_first(
            config, cands, self._verdict_rank, self.context.space.device_kind
        )
        for cand, role in self.screen_compiles(config, ordered, refines=best.number):
            self._queue(study, cand, role=role, refines=best.number)
        self.confirm_screened(study)  # twins measured before need no trial

    def screen_compiles(
        self, config: TrainConfig, cands: list[TrainConfig], *, refines: int
    ) -> list[tuple[TrainConfig, str]]:
        """Screen cheap, confirm dear: ``cands`` (the neighbours of the best ``config``) to
        queue, each with its role. Where ``config`` is compiled, those that need a first
        compile are measured first without compile (their eager twin, role ``screen``,
        after ``config``'s own eager twin and after the neighbours the compile cache
        serves); the twins within ``SCREEN_KEEP`` of that baseline are then compiled, best
        twin first (``confirm_screened``). A first compile took 52-57 s of a 70-76 s trial
        on the 2-core EPYC, an eager trial 7-17 s: refining mu's compiled best there
        measured one neighbour in a default search. A twin measured already (or a config
        that differs from it only outside the model) is not measured again."""
        if config.compile == "off":
            return [(cand, "refine") for cand in cands]
        space = self.context.space
        code = compiled_code_key(config, space.device_kind)
        now: list[tuple[TrainConfig, str]] = []
        screens: list[TrainConfig] = []
        for cand in cands:
            twin = cand.replace(compile="off")
            if (
                compiled_code_key(cand, space.device_kind) == code
                or cand.compile == "off"
                or not space.contains(twin)
                or _gains_only_compiled(config, cand)
            ):
                now.append((cand, "refine"))
                continue
            self.screened[space.key(twin)] = (cand, refines)
            screens.append(twin)
        for twin in [config.replace(compile="off"), *screens] if screens else []:
            if space.contains(twin) and self._eager_record(twin) is None:
                now.append((twin, "screen"))
        return now

    def confirm_screened(self, study: optuna.Study) -> None:
        """Once every screen of a refined trial has run (``screen_compiles``), queue its
        compiled refinements whose eager twin came within ``SCREEN_KEEP`` of the eager
        twin of the trial they refine, the best twin first: a short search has time for
        the first one or two. A twin that did not run within the budget, or failed,
        drops its refinement."""
        groups: dict[int, list[tuple[tuple[Any, ...], TrainConfig]]] = {}
        for key, (cand, refines) in self.screened.items():
            groups.setdefault(refines, []).append((key, cand))
        for refines, members in groups.items():
            parent = self.log.records.get(refines)
            base = None if parent is None else self._eager_record(parent.train_config())
            twins = [self._eager_record(cand) for _, cand in members]
            if base is None or any(t is None for t in twins):
                continue  # a screen still to run
            kept = []
            for (key, cand), twin in zip(members, twins, strict=True):
                del self.screened[key]
                ratio = (twin.value or 0.0) / (base.value or 1.0) if twin is not None else 0.0
                if twin is not None and twin.feasible and base.feasible and ratio >= SCREEN_KEEP:
                    kept.append((ratio, cand))
            for _, cand in sorted(kept, key=lambda item: -item[0]):
                self._queue(study, cand, role="refine", refines=refines)

    def _eager_record(self, config: TrainConfig) -> TrialRecord | None:
        """The finished trial of ``config`` without compile, or of a config that differs
        from that one only outside the model (OpenMP's policy, the workers: the same
        kernels), or None."""
        eager = config.replace(compile="off")
        record = self.log.record_of(eager)
        if record is not None and record.finished:
            return record
        kind = self.context.space.device_kind
        code = compiled_code_key(eager, kind)
        for r in self.log.trials_in_order():
            eager_too = r.finished and r.ran and r.config.get("compile", "off") == "off"
            if eager_too and compiled_code_key(r.config, kind) == code:
                return r
        return None

    def vary_the_finalists(self, study: optuna.Study, *, queued_or_not: bool = False) -> None:
        """Once nothing is queued (the best's neighbours have all run; ``queued_or_not``:
        even so), queue the neighbours of the race's likely finalists that run the code
        those finalists compiled: one knob moved outside the model (OpenMP's wait policy;
        DataLoader workers where the naive config was input-bound, as ``refine`` does),
        another micro-batch where one compile serves every one (a CPU), a compile the
        cache serves. Before the sampler's own proposals, nearly all of them new code: mu
        on the 2-core Xeon, once the best's four neighbours had run, got a micro-batch of
        32 and fp32 with compile from TPE, 30 s each, 0.85x and 0.50x the best; a
        finalist's variant costs a trial's steps (5-8 s), and OpenMP's spin moved mu's
        configs 0.92-1.09x. A finalist whose trial came far behind the best
        (``behind_the_best``), that a later best outdated, or that runs without compile
        where its compiled config ran faster (its variants run the slower code) is not
        varied."""
        if _waiting_params(study) and not queued_or_not:
            return
        workers = "num_workers" in self.first_knobs
        for record in self._likely_finalists():
            if self._compiled_beats(record):
                continue
            config = record.train_config()
            kind = self.context.space.device_kind
            code = compiled_code_key(config, kind)
            for cand in self.context.space.neighbours(config, workers=workers, kernels=True):
                if compiled_code_key(cand, kind) == code:
                    self._queue(study, cand, role="refine", refines=record.number)

    def _likely_finalists(self) -> list[TrialRecord]:
        """The race's likely finalists worth a trial more: the top distinct configs but
        naive, those whose trial came far behind the best (``behind_the_best``) and those
        a later best outdated."""
        top = distinct_best(list(self.log.records.values()))[:DEFAULT_FINALISTS]
        behind = behind_the_best(top)
        return [
            r
            for r in top
            if r.number not in behind and r.role != "naive" and not self.outdated(r.number)
        ]

    def _compiled_beats(self, record: TrialRecord) -> bool:
        """Whether ``record`` ran without compile and a compiled config of the same choices
        otherwise (its compiled twin, or one that differs from that only outside the
        model) ran faster."""
        config = record.train_config()
        if config.compile != "off":
            return False
        kind = self.context.space.device_kind
        return any(
            r.ran
            and r.feasible
            and r.config.get("compile", "off") != "off"
            and compiled_code_key(r.train_config().replace(compile="off"), kind)
            == compiled_code_key(config, kind)
            and (r.value or 0.0) > (record.value or 0.0)
            for r in self.log.records.values()
        )

    def _verdict_rank(self, config: TrainConfig, cand: TrainConfig) -> int:
        """Where ``cand`` (one knob moved from ``config``) stands in the naive verdict's
        order: the position of the knob it moves, else after all of them (a stable sort
        keeps the space's own order within each)."""
        moved = [f.name for f in fields(config) if getattr(config, f.name) != getattr(cand, f.name)]
        ranks = [self.first_knobs.index(k) for k in moved if k in self.first_knobs]
        return min(ranks, default=len(self.first_knobs))

    def fit_with_checkpointing(
        self, study: optuna.Study, record: TrialRecord, refines: Any
    ) -> None:
        """A refinement that does not fit the budget (the best's micro-batch doubled, most
        often: out of memory, or predicted or known to be) is queued once more with
        activation checkpointing, which trades recomputation for the memory to fit it: what
        an engineer tries next at the edge of memory, one step that TPE, proposing each
        knob from its own model, takes many trials to land on. A screen (an eager twin,
        ``screen_compiles``) that does not fit is screened once more so, and its compiled
        refinement with checkpointing waits on that screen."""
        config = record.train_config()
        roles = ("refine", "screen")
        if record.role not in roles or not record.infeasible or config.activation_checkpointing:
            return
        fitted = config.replace(activation_checkpointing=True)
        if not self.context.space.contains(fitted):
            return
        parent = self.log.records.get(refines) if isinstance(refines, int) else None
        if record.role == "screen" and parent is not None:
            compiled = fitted.replace(compile=parent.train_config().compile)
            if compiled.compile != "off" and self.context.space.contains(compiled):
                self.screened[self.context.space.key(fitted)] = (compiled, refines)
        self._queue(study, fitted, role=record.role, refines=refines)

    def outdated(self, refines: Any) -> str:
        """Why a queued refinement of trial ``refines`` is not worth its burst any more:
        a later best beats that trial by more than ``OUTDATED_MARGIN`` (its neighbours
        were queued when it led; the new best's come after them, and a short search runs
        out of time in between). "" to run it."""
        best = self.log.best()
        parent = self.log.records.get(refines) if isinstance(refines, int) else None
        if best is None or parent is None or best.number == parent.number:
            return ""
        if (best.value or 0.0) <= (parent.value or 0.0) * (1 + OUTDATED_MARGIN):
            return ""
        gain = (best.value or 0.0) / (parent.value or 1.0) - 1
        return f"a refinement of #{parent.number}, which #{best.number} now beats by {gain:.0%}"

    def measure_again(self, study: optuna.Study, record: TrialRecord) -> None:
        """Queue the configs whose measurement was disturbed (outside load, erratic steps)
        once more, as soon as the machine is quiet: a loaded machine makes a config look
        slow, and a pruned one has no figure at all. Once per config and search run, and
        ahead of the refinements the same trial queues: a disturbed figure is low, and the
        config it belongs to may be the best."""
        retry = record.ran and record.status in ("ok", "pruned") and record.role != "re-measure"
        if record.disturbed and retry:
            self.remeasure.append(record.train_config())
        if not self.remeasure or self.context.busy_now():
            return
        for config in self.remeasure:
            self._queue(study, config, role="re-measure", again=True)
        self.remeasure.clear()

    def check_budget(self, study: optuna.Study) -> None:
        """After the naive config (and, if it did not fit, the smallest) ran: stop when
        even the smallest config does not fit the budget."""
        context, log = self.context, self.log
        if any(r.feasible for r in log.records.values()):
            return
        naive = context.space.naive()
        smallest = context.space.smallest()
        naive_rec = log.record_of(naive)
        if naive_rec is None or not naive_rec.infeasible:
            return
        same = context.space.key(naive) == context.space.key(smallest)
        small_rec = naive_rec if same else log.record_of(smallest)
        if small_rec is None:
            if not self.smallest_enqueued:
                self.smallest_enqueued = self._queue(study, smallest, role="smallest")
            return
        if not small_rec.infeasible:
            return
        self.budget_problem = (
            f"the budget {format_bytes(context.budget_bytes)} is too small for model "
            f"{context.spec.name!r} on {context.device}: even the smallest config "
            f"({small_rec.summary()}) {self._needed(small_rec)}"
            + (
                ""
                if same
                else f", and the naive config ({naive_rec.summary()}) {self._needed(naive_rec)}"
            )
            + ". Give a larger --budget, or a shorter --seq-len"
        )

    # -- helpers ---------------------------------------------------------------------------
    def _queue(
        self,
        study: optuna.Study,
        config: TrainConfig,
        *,
        role: str,
        again: bool = False,
        refines: int | None = None,
    ) -> bool:
        """Queue ``config`` unless it has a result (``again``: even so), is queued
        already, or was passed over as too long for the time left for trials and still
        is (``will_not_finish``: the time left only shrinks; its screen's confirmation
        would otherwise queue it again, to be passed over again); whether it was."""
        params = self.context.space.params_of(config)
        known = self.log.record_of(config) is not None and not again
        if known or _waiting(study, params) or (not again and self._still_too_long(config)):
            return False
        attrs: dict[str, Any] = {"role": role}
        if refines is not None:
            attrs["refines"] = refines
        study.enqueue_trial(params, user_attrs=attrs)
        self.queued.append(config)
        return True

    def _still_too_long(self, config: TrainConfig) -> bool:
        """Whether a trial of ``config`` was skipped and would not finish in the time left
        for trials now."""
        key = self.context.space.key(config)
        skipped = any(
            r.status == "skipped"
            and (known := r.known_config()) is not None
            and self.context.space.key(known) == key
            for r in self.log.records.values()
        )
        return skipped and bool(will_not_finish(self.log, self.context.deadline, config))

    def next_that_fits(self, study: optuna.Study) -> TrainConfig | None:
        """A queued config whose trial would finish in the time left for trials
        (``waiting_that_fits``), or None. Where none does (a refinement's first compile no
        longer fits), the finalists' variants that the compile cache serves are queued
        (``vary_the_finalists``, which otherwise waits for the queue to empty) and asked
        again: mu on the 2-core EPYC stopped its trials with 27 s left for them (147 s of
        its limit, the race's reserve 120 s) and its best's refinement waiting on a 75 s
        first compile, where a finalist's neighbour on its cached code took 12-19 s."""
        fits = self.waiting_that_fits(study)
        if fits is None:
            self.vary_the_finalists(study, queued_or_not=True)
            fits = self.waiting_that_fits(study)
        if fits is None:
            self.screen_the_finalists(study)
            fits = self.waiting_that_fits(study)
        return fits

    def screen_the_finalists(self, study: optuna.Study) -> None:
        """Where not even a finalist's cached variant fits the time left for trials, queue
        the screens of the compiled finalists' neighbours that need a first compile
        (``screen_compiles``: their eager twins, a trial's steps each) that have not run:
        what a longer search (``--resume``) would compile next is then known. mu on the
        2-core EPYC stopped its trials with 15 s left, its next refinement a 72 s first
        compile, where an eager screen took 7-8 s. A finalist far behind the best, or that
        a later best outdated, is not screened (as in ``vary_the_finalists``)."""
        workers = "num_workers" in self.first_knobs
        for record in self._likely_finalists():
            config = record.train_config()
            if config.compile == "off":
                continue
            cands = self.context.space.neighbours(config, workers=workers, kernels=True)
            for cand, role in self.screen_compiles(config, cands, refines=record.number):
                if role == "screen":
                    self._queue(study, cand, role=role, refines=record.number)

    def waiting_that_fits(self, study: optuna.Study) -> TrainConfig | None:
        """A config still queued whose trial would finish in the time left for trials
        (``trial_cost.will_not_finish``), or None: where a refinement's first compile no
        longer fits, one whose code the compile cache holds may (mu with an empty cache:
        36 s left, a first compile 44 s, a cached one 3 s)."""
        waiting = _waiting_params(study)
        for config in self.queued:
            if self.context.space.params_of(config) in waiting and not will_not_finish(
                self.log, self.context.deadline, config
            ):
                return config
        return None

    def _needed(self, record: TrialRecord) -> str:
        """What an infeasible config needed, for the too-small-budget message."""
        source = record
        if record.status == "dominated" and record.duplicate_of is None:
            match = re.search(r"#(\d+)", record.reason)
            dominated_by = self.log.records.get(int(match[1])) if match else None
            if dominated_by is not None:
                source = dominated_by
        peak = source.peak_memory_bytes
        if source.status == "over-budget" and peak is not None:
            return f"needed {format_bytes(peak)}"
        if peak is not None:
            return f"ran out of memory at {format_bytes(peak)} (it needs more than that)"
        return f"ran out of memory ({source.reason or source.status})"


def _quick_start_among(
    starts: list[tuple[str, TrainConfig, list[str]]],
    context: SearchContext,
    memory: MemoryModel,
) -> list[tuple[str, TrainConfig, list[str]]]:
    """The expert ``starts`` with the quick start (``playbook.quick_start``: no compile,
    the largest micro-batch predicted to fit, each model knob at its ``quick_cpu`` value
    on a bf16 CPU) among them, after the starts that run without compile and before the
    first that compiles: an eager trial costs its steps, a first compile tens of seconds
    on a CPU. Only where it sets a model knob the other starts leave at its default (the
    knob values measured on bf16 CPUs: eager attention, the chunked loss, which mu's
    default search on the AVX-512 EPYC never tried); its micro-batch alone is the
    refinement's to find (mu's fp32 quick start on the AVX2 EPYC measured 918 tokens/s in
    one search, 0.65x the best, and 1,439 in another: a figure not yet explained). Left
    out where it is naive, outside the space, or one of the starts; under a short time
    limit it ran first already (``enqueue_quick_start``)."""
    from autotune.study.plan.playbook import quick_start

    space = context.space
    config = quick_start(space, context.spec, memory=memory)
    keys = {space.key(c) for _, c, _ in starts} | {space.key(space.naive())}
    if not space.contains(config) or space.key(config) in keys:
        return starts
    if dict(config.knobs) == dict(space.guess().knobs):
        return starts
    at = next((i for i, (_, c, _) in enumerate(starts) if c.compile != "off"), len(starts))
    return [*starts[:at], ("quick-start", config, []), *starts[at:]]


def _shipped_among(
    starts: list[tuple[str, TrainConfig, list[str]]],
    context: SearchContext,
    caps: DeviceCaps,
    here: Fingerprint,
) -> list[tuple[str, TrainConfig, list[str]]]:
    """The expert ``starts`` with the config of a preset shipped for this model and this
    kind of device (``playbook.shipped_start``) before the first compiled start, as a
    warm start would run it; unchanged where there is none or it is a start already."""
    from autotune.study.plan.playbook import shipped_start

    found = shipped_start(context.space, context.spec, caps, here)
    if found is None:
        return starts
    config, path = found
    space = context.space
    if any(space.key(c) == space.key(config) for _, c, _ in starts):
        return starts
    note = f"a preset shipped for this model and device is among the starts ({path.name})"
    at = next((i for i, (_, c, _) in enumerate(starts) if c.compile != "off"), len(starts))
    return [*starts[:at], ("shipped-preset", config, [note]), *starts[at:]]


def _cheap_after_the_first(
    config: TrainConfig,
    cands: list[TrainConfig],
    rank: Callable[[TrainConfig, TrainConfig], int],
    device_kind: str,
) -> list[TrainConfig]:
    """``cands`` (``config``'s neighbours) in the order they are refined: by ``rank``, but
    those that run ``config``'s compiled code (a knob outside the model moved: a trial's
    steps, 5-8 s for mu on the 2-core Xeon) right after the first, before the other new
    code (a first compile each, 30-40 s there). mu beside a busy core: the best's three
    new-code neighbours took the time for trials, and its OpenMP-spin variant, queued last,
    never ran. Without compile every neighbour costs a trial's steps, so ``rank`` alone
    decides: gpt-small's 60-second search ran its eager best's OpenMP-spin variant second,
    and the kernel choices after it never ran."""
    ordered = sorted(cands, key=lambda c: rank(config, c))
    if config.compile == "off":
        return ordered
    code = compiled_code_key(config, device_kind)
    cheap = [c for c in ordered[1:] if compiled_code_key(c, device_kind) == code]
    return [*ordered[:1], *cheap, *(c for c in ordered[1:] if c not in cheap)]


def _timed_out_config(record: TrialRecord) -> TrainConfig | None:
    """The config of a trial whose burst ran out its limit (None for any other trial, or
    one from an older, different space)."""
    if not record.ran or record.status != "timeout":
        return None
    return record.known_config()


def _timed_out_note(records: list[TrialRecord], limit_s: float) -> str:
    """``3 configs timed out under a shorter --burst-timeout than this search's (60 s):
    #1, #5 under 10 s; #9 under 5 s; queued to be measured again under it``."""
    under: dict[str, list[str]] = {}  # the limit each ran out -> its trials
    for record in records:
        under.setdefault(f"{record.burst_timeout_s:g} s", []).append(f"#{record.number}")
    shown = "; ".join(f"{', '.join(numbers)} under {s}" for s, numbers in under.items())
    return (
        f"{len(records)} config{'s' if len(records) > 1 else ''} timed out under a shorter "
        f"--burst-timeout than this search's ({limit_s:g} s): {shown}; queued to be "
        "measured again under it"
    )


def _waiting(study: optuna.Study, params: Mapping[str, Any]) -> bool:
    """Whether the config with these ``params`` is queued in the study already (WAITING)."""
    return params in _waiting_params(study)


def _waiting_params(study: optuna.Study) -> list[Any]:
    """The parameters of every config queued in the study (WAITING), read once."""
    from optuna.trial import TrialState

    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return [t.system_attrs.get("fixed_params") for t in waiting]


def _gains_only_compiled(config: TrainConfig, cand: TrainConfig) -> bool:
    """Whether ``cand`` turns on a knob of ``COMPILED_ONLY_GAINS`` that ``config`` has off:
    its eager screen would say nothing of its compiled figure."""
    return any(
        getattr(cand, name, False) and not getattr(config, name, False)
        for name in COMPILED_ONLY_GAINS
    )
