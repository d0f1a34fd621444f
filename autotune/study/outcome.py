"""The final measurement and the preset: the best configs run again, longer, with an eval
step and a checkpoint save; the first that passes wins and is written as a preset."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError
from autotune.study.records import SearchEvent, TrialRecord, distinct_best
from autotune.units import format_bytes

if TYPE_CHECKING:
    import optuna

    from autotune.burst import BurstResult
    from autotune.config import TrainConfig
    from autotune.hardware import HardwareProfile
    from autotune.models.spec import ModelSpec
    from autotune.study.objective import BurstRunner
    from autotune.study.records import SearchResult
    from autotune.study.state import SearchState

__all__ = [
    "MAX_VERIFY_CANDIDATES",
    "VERIFY_AGREEMENT",
    "Verification",
    "speedup_over",
    "verify_best",
    "write_preset",
]

MAX_VERIFY_CANDIDATES = 3
VERIFY_AGREEMENT = 0.5  # a verification under this share of the search's figure is re-run


@dataclass(frozen=True, kw_only=True)
class Verification:
    """The winner: its trial, its verification burst, and every candidate's attempt."""

    trial: TrialRecord
    burst: BurstResult
    attempts: tuple[dict[str, Any], ...]


def verify_best(
    state: SearchState,
    bursts: BurstRunner,
    study: optuna.Study,
    *,
    verify_steps: int | None = None,
) -> Verification:
    """Run the best configs again, longer (``verify_steps``, by default twice the search's
    steps and at least 10), with an eval step and a checkpoint save; the first that passes
    (ok, within the budget) wins (``AutotuneError`` when none passes, or when nothing ran
    successfully).

    A verification far slower than the search measured (under ``VERIFY_AGREEMENT`` of it)
    says the machine was busier than during the search: it is run once more and the
    faster of the two kept (load only ever slows a burst down), with a note."""
    candidates = distinct_best(list(state.records.values()))
    if not candidates:
        raise _nothing_ran(state, study)
    if verify_steps is None:
        verify_steps = max(2 * bursts.steps, 10)
    attempts: list[dict[str, Any]] = []
    for cand in candidates[:MAX_VERIFY_CANDIDATES]:
        state.note(f"verifying trial #{cand.number} ({cand.summary()}) with {verify_steps} steps")
        result, problem = _verify_candidate(state, bursts, cand, verify_steps)
        attempt = {
            "trial": cand.number,
            "status": "ok" if not problem else "failed",
            "problem": problem,
            "tokens_per_s": result.tokens_per_s,
            "samples_per_s": result.samples_per_s,
            "peak_memory_bytes": result.peak_memory_bytes,
            "eval_loss": result.eval_loss,
            "checkpoint_bytes": result.checkpoint_bytes,
        }
        attempts.append(attempt)
        with contextlib.suppress(Exception):
            study.set_user_attr(f"verify.{cand.number}", attempt)
        state.emit(
            SearchEvent(
                kind="verify",
                trial=cand,
                verify=result,
                message=problem,
                elapsed_s=state.elapsed(),
                unit=state.unit,
            )
        )
        if not problem:
            return Verification(trial=cand, burst=result, attempts=tuple(attempts))
    tried = "; ".join(f"trial #{a['trial']}: {a['problem']}" for a in attempts)
    raise AutotuneError(
        f"verification failed for the {len(attempts)} best configs ({tried}); no preset was written"
    )


def _nothing_ran(state: SearchState, study: optuna.Study) -> AutotuneError:
    statuses: dict[str, int] = {}
    for r in state.records.values():
        if r.finished:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no trials"
    return AutotuneError(
        f"no config ran successfully within the budget ({shown}); see the trials in "
        f"study {study.study_name!r} for the reasons"
    )


def _verify_candidate(
    state: SearchState, bursts: BurstRunner, cand: TrialRecord, verify_steps: int
) -> tuple[BurstResult, str]:
    """Verify one candidate, measuring once more when the machine seems busy."""
    config = cand.train_config()
    result, problem = _verify_once(bursts, config, verify_steps)
    measured = bursts.throughput(result)
    if not problem and cand.throughput and measured < VERIFY_AGREEMENT * cand.throughput:
        state.note(
            f"the verification measured {measured:,.4g} {state.unit}, under "
            f"{VERIFY_AGREEMENT:.0%} of the search's {cand.throughput:,.4g}: the machine "
            "may be busy; measuring once more"
        )
        again, again_problem = _verify_once(bursts, config, verify_steps)
        if not again_problem and bursts.throughput(again) > measured:
            result = again
    return result, problem


def _verify_once(
    bursts: BurstRunner, config: TrainConfig, verify_steps: int
) -> tuple[BurstResult, str]:
    """One verification burst of ``config``: its result and what is wrong with it ("")."""
    result = bursts.run(config, steps=verify_steps, timeout_s=2 * bursts.timeout_s, verify=True)
    if not result.ok:
        return result, f"{result.status}: {result.reason}"
    if result.peak_memory_bytes is not None and result.peak_memory_bytes > bursts.budget_bytes:
        return result, (
            f"peak {format_bytes(result.peak_memory_bytes)} over the budget "
            f"{format_bytes(bursts.budget_bytes)} with eval and checkpointing"
        )
    return result, ""


def speedup_over(
    naive: TrialRecord | None, verified: BurstResult | None, spec: ModelSpec
) -> float | None:
    """The verified throughput over the naive config's, both measured in this study."""
    if verified is None or naive is None or not naive.feasible or not naive.throughput:
        return None
    measured = spec.pick_throughput(verified.tokens_per_s, verified.samples_per_s)
    return measured / naive.throughput if measured else None


def write_preset(
    result: SearchResult,
    found: Verification,
    *,
    spec: ModelSpec,
    hardware: HardwareProfile,
    path: Path,
) -> Path:
    """Write the search's verified winner as a preset at ``path``, with the naive config's
    figures beside it."""
    from autotune.models.registry import source_sha256
    from autotune.preset import (
        Baseline,
        Fingerprint,
        Measured,
        ModelRef,
        Preset,
        SearchSummary,
        Task,
        save_preset,
    )

    best, verified, naive = found.trial, found.burst, result.naive
    config = best.train_config()
    name, args = _model_ref(spec)
    baseline = None
    if naive is not None and naive.feasible:
        baseline = Baseline(
            config=naive.train_config(),
            tokens_per_s=naive.tokens_per_s,
            samples_per_s=naive.samples_per_s,
            speedup=result.speedup,
        )
    counts = result.counts()
    preset = Preset(
        name=path.stem,
        model=ModelRef(name=name, args=args, sha256=source_sha256(name)),
        task=Task(seq_len=config.seq_len, global_batch=config.global_batch),
        config=config,
        budget_bytes=result.budget_bytes,
        fingerprint=Fingerprint.from_profile(hardware, result.device),
        measured=Measured.from_burst(verified),
        baseline=baseline,
        search=SearchSummary(
            trials_run=counts["measured"],
            infeasible=counts["infeasible"],
            pruned=counts["pruned"],
            failed=counts["failed"],
            wall_s=round(result.wall_s, 1),
            study_name=result.study_name,
            storage=result.storage,
            objective=result.objective,
            sampler="tpe",
        ),
        notes=_preset_notes(best, verified, result.objective),
    )
    return save_preset(preset, path)


def _preset_notes(best: TrialRecord, verified: BurstResult, objective: str) -> str:
    extras = []
    if verified.eval_loss is not None:
        extras.append(f"eval loss {verified.eval_loss:.4g}")
    if verified.checkpoint_bytes is not None:
        extras.append(f"checkpoint {format_bytes(verified.checkpoint_bytes)}")
    return (
        f"found by autotune search (trial #{best.number}, {objective}); "
        f"verified with {verified.timed_steps} timed steps"
        + (f", {', '.join(extras)}" if extras else "")
    )


def _model_ref(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """The preset's model reference: the loader's name and the args that differ from it."""
    name = spec.source or spec.name
    args = dict(spec.args)
    if spec.source:
        from autotune.models.registry import load_model

        with contextlib.suppress(Exception):
            reference = load_model(spec.source)
            args = {k: v for k, v in spec.args.items() if reference.args.get(k, object()) != v}
    return name, args
