"""What ``autotune search --profile`` adds after the race: a profiling burst of the naive
config and of the winner (separate bursts: the trials' and the race's figures never carry
the profiler), their breakdowns and verdicts as lines of the preset's ``notes``, and
each one's Chrome trace in the run's folder. The breakdowns and verdicts are also kept, as
JSON, in the study's ``profile`` user attribute, where the report page reads them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.contract.spec import ModelSpec
    from autotune.explain.breakdown import Breakdown
    from autotune.explain.verdict import StepVerdict
    from autotune.study.session.search_result import SearchResult
    from autotune.study.trials.records import TrialRecord

__all__ = [
    "PROFILE_ATTR",
    "Profiled",
    "add_notes",
    "profile_found",
    "profile_into_preset",
    "record_profile",
    "run_folder",
]

Profiled = tuple[str, "Breakdown", "StepVerdict"]
PROFILE_ATTR = "profile"  # the study's user attribute: a list of explain_to_dict + "config"


def run_folder(result: SearchResult) -> Path | None:
    """The search's folder: the study file's (SQLite or journal), else the preset's; None
    if neither."""
    from autotune.study.storage.ownership import storage_file

    stored = storage_file(result.storage)
    if stored is not None:
        return stored.resolve().parent
    if result.preset_path:
        return Path(result.preset_path).parent
    return None


def profile_found(
    result: SearchResult,
    spec: ModelSpec,
    *,
    steps: int = 3,
    warmup: int = 2,
    timeout_s: float = 300.0,
    seed: int = 0,
    traces: bool = True,
) -> tuple[list[Profiled], list[str]]:
    """Profile the naive config and the winner, each in its own burst: (label, breakdown,
    verdict) per config that ran, and one note per config (why not, where one failed)."""
    from autotune.burst import supervisor
    from autotune.explain.render import compact, explain_result

    rows: list[tuple[str, TrialRecord | None]] = [("naive", result.naive), ("winner", result.best)]
    profiled: list[Profiled] = []
    notes: list[str] = []
    folder = run_folder(result) if traces else None
    for label, record in rows:
        if record is None:
            notes.append(f"profile of {label}: no such config in this search")
            continue
        trace = str(folder / f"profile-{label}.trace.json") if folder is not None else None
        burst = supervisor.run_burst(
            spec,
            record.train_config(),
            steps=steps,
            warmup=warmup,
            budget_bytes=result.budget_bytes,
            timeout_s=timeout_s,
            device=result.device,
            seed=seed,
            profile=True,
            trace_path=trace,
        )
        explained = explain_result(burst, budget_bytes=result.budget_bytes)
        if explained is None:
            notes.append(f"profile of {label}: burst {burst.status} ({burst.reason})")
            continue
        breakdown, verdict = explained
        if trace is not None and not Path(trace).exists():
            breakdown = replace(breakdown, trace_path=None)
        name = f"{label} ({record.summary()})"
        profiled.append((name, breakdown, verdict))
        notes.append(compact(name, breakdown, verdict))
    return profiled, notes


def profile_into_preset(
    result: SearchResult, model: str | ModelSpec, *, console: Console
) -> list[dict[str, Any]]:
    """``autotune search --profile``: the naive config's and the winner's breakdowns and
    verdicts (as JSON), added to the preset's notes, kept in the study (``record_profile``)
    and printed on ``console``."""
    from rich.markup import escape

    from autotune.explain.render import explain_to_dict
    from autotune.models.registry import load_model

    with console.status("profiling the naive config and the winner", spinner="dots"):
        spec = load_model(model) if isinstance(model, str) else model
        profiled, notes = profile_found(result, spec)
    explained = [{"config": label, **explain_to_dict(b, v)} for label, b, v in profiled]
    if result.preset_path:
        add_notes(result.preset_path, notes)
    problem = record_profile(result, explained)
    for line in [*notes, *([problem] if problem else [])]:
        console.print(escape(line))
    return explained


def record_profile(result: SearchResult, explained: list[dict[str, Any]]) -> str | None:
    """Keep ``explained`` in the study's ``PROFILE_ATTR`` user attribute (the report reads
    it there); None when kept or nothing to keep, else a note on why it was not (the
    search's results stand either way)."""
    import optuna

    from autotune.core.errors import AutotuneError
    from autotune.core.redact import redact
    from autotune.study.storage.optuna_glue import open_storage, quiet_optuna

    if not explained:
        return None
    try:
        with quiet_optuna():
            storage = open_storage(result.storage, create=False)  # the search made it
            study = optuna.load_study(study_name=result.study_name, storage=storage)
            study.set_user_attr(PROFILE_ATTR, explained)
    except (AutotuneError, KeyError) as exc:
        return f"profile not kept in the study {redact(result.storage)!r}: {exc}"
    return None


def add_notes(preset_path: str | Path, lines: list[str]) -> None:
    """Append ``lines`` to the preset's free-text ``notes`` (its schema unchanged)."""
    from autotune.preset.io import load_preset, save_preset

    if not lines:
        return
    preset = load_preset(preset_path)
    text = "\n".join([preset.notes, *lines] if preset.notes else lines)
    save_preset(replace(preset, notes=text), preset_path)
