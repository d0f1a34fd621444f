"""The search's outcome: the race's winner written as a preset, with the naive config's
figures and the race beside it (the race itself is ``autotune/study/race/finalist_race.py``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.units import format_bytes

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.machine.profile import HardwareProfile
    from autotune.study.race.race_records import Entrant, RaceResult
    from autotune.study.session.search_result import SearchResult

__all__ = ["model_ref", "write_preset"]


def write_preset(
    result: SearchResult,
    race: RaceResult,
    *,
    spec: ModelSpec,
    hardware: HardwareProfile,
    path: Path,
) -> Path:
    """Write the race's winner as a preset at ``path``: its figures from the race burst
    nearest its median, the naive config's beside them, and the race itself."""
    from autotune.models.registry import source_sha256
    from autotune.preset import (
        Baseline,
        Fingerprint,
        Measured,
        ModelRef,
        Preset,
        Race,
        SearchSummary,
        Task,
        save_preset,
    )

    winner = race.winner
    config = winner.record.train_config()
    typical = winner.typical_burst()
    assert typical is not None  # an eligible entrant has a figure
    name, args = model_ref(spec)
    counts = result.counts()
    memory = result.memory_model()
    preset = Preset(
        name=path.stem,
        model=ModelRef(name=name, args=args, sha256=source_sha256(name)),
        task=Task(
            seq_len=config.seq_len, global_batch=config.global_batch, size_name=spec.size_name
        ),
        config=config,
        budget_bytes=result.budget_bytes,
        fingerprint=Fingerprint.from_profile(hardware, result.device),
        measured=Measured.from_burst(typical),
        baseline=_baseline(race, Baseline),
        search=SearchSummary(
            trials_run=counts["ran"],
            infeasible=counts["infeasible"],
            pruned=counts["pruned"],
            failed=counts["failed"],
            wall_s=round(result.wall_s, 1),
            study_name=result.study_name,
            storage=result.storage,
            objective=result.objective,
            sampler="tpe",
            memory_predictions=memory["predictions"],
            memory_error_pct=memory["mean_abs_error_pct"],
        ),
        race=_race_section(race, Race),
        notes=_preset_notes(winner, race, result.objective),
    )
    return save_preset(preset, path)


def _baseline(race: RaceResult, baseline_type: Any) -> Any:
    """The naive config and its race figures (None when naive was not in the race)."""
    naive = race.naive
    burst = None if naive is None else naive.typical_burst()
    if naive is None or burst is None:
        return None
    return baseline_type(
        config=naive.record.train_config(),
        tokens_per_s=burst.tokens_per_s,
        samples_per_s=burst.samples_per_s,
        speedup=None if race.speedup is None else round(race.speedup.estimate, 4),
    )


def _race_section(race: RaceResult, race_type: Any) -> Any:
    """The preset's ``race`` section, validated like every other section."""
    from autotune.core.errors import PresetError
    from autotune.core.validator import BAD, build

    problems: list[str] = []
    section = build(race_type, race.to_dict(), "race", problems)
    if section is BAD:
        raise PresetError(problems, context="the race's record does not validate")
    return section


def _preset_notes(winner: Entrant, race: RaceResult, objective: str) -> str:
    best, verified = winner.record, winner.verify_burst()
    extras = []
    if verified is not None and verified.eval_loss is not None:
        extras.append(f"eval loss {verified.eval_loss:.4g}")
    if verified is not None and verified.checkpoint_bytes is not None:
        extras.append(f"checkpoint {format_bytes(verified.checkpoint_bytes)}")
    warning = ""
    if winner.at_edge:  # every finalist was at the edge (finalist_race.py prefers headroom)
        warning = (
            f"; warning: at the edge of the memory budget ({winner.at_edge}), keep headroom "
            "for a long run (a smaller micro-batch, more accumulation)"
        )
    configs = f"{len(race.entrants)} config{'s' if len(race.entrants) != 1 else ''}"
    if winner.stand_in is not None:  # the deadline cut, or load mixed, every round
        raced = f"not raced: no round of the race of {configs} counted, its figures are its trial's"
    else:
        rounds = f"{race.rounds} interleaved round{'s' if race.rounds != 1 else ''}"
        raced = f"won a race of {configs} over {rounds}"
    return (
        f"found by autotune search (trial #{best.number}, {objective}); {raced}"
        + (f"; {', '.join(extras)}" if extras else "")
        + warning
    )


def model_ref(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """The preset's model reference: the loader's name and the args that differ from it."""
    name = spec.source or spec.name
    args = dict(spec.args)
    if spec.source:
        from autotune.models.registry import load_model

        with contextlib.suppress(Exception):
            reference = load_model(spec.source)
            args = {k: v for k, v in spec.args.items() if reference.args.get(k, object()) != v}
    return name, args
