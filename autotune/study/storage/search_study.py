"""The study a search opens: its default name and storage, the set-up it records (a study
resumed with other settings is refused), and the trials it already holds.

Alone, a search's study is named for its model, device, budget, global batch, sequence
length(s) and space; the workers of a shared search name it without the device's index,
each searching on a device of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import UsageError
from autotune.core.units import format_bytes
from autotune.study.storage.optuna_glue import (
    SlowConfigPruner,
    missing_storage,
    open_storage,
    open_study,
    redact,
)
from autotune.study.trials.records import SearchEvent, TrialRecord
from autotune.study.trials.trial_log import TrialLog

if TYPE_CHECKING:
    import optuna

    from autotune.contract.spec import ModelSpec
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.context import SearchContext
    from autotune.study.trials.burst_runner import BurstRunner, Goal

__all__ = [
    "default_study_name",
    "made_folder",
    "model_name",
    "open_search_study",
    "require_study",
    "studies_in",
    "study_database",
    "study_folder",
    "study_name_for",
]


def model_name(spec: ModelSpec) -> str:
    """How the search names the model: the reference it was loaded from, or its name."""
    return spec.source or spec.name


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
        f"{_slug(model)}-{device.replace(':', '')}-{_budget_tag(budget_bytes)}"
        f"-gb{space.global_batch}-seq{seq}"
    )
    if objective == "time-to-train":
        name += f"-ttt{train_steps}"
    return f"{name}-{space.fingerprint()}"


def _budget_tag(budget_bytes: int) -> str:
    """The budget in a study's name: whole MB (``8000MB``), or bytes below 1 MB, which
    would round to a misleading ``0MB``."""
    return f"{round(budget_bytes / 1e6)}MB" if budget_bytes >= 1_000_000 else f"{budget_bytes}B"


def study_name_for(context: SearchContext, goal: Goal, *, shared: bool = False) -> str:
    """The default name of the study of this search (``default_study_name``); for the
    workers of a shared search, one every worker gives, whatever its device's index."""
    name = default_study_name(
        model=_study_model(context.spec),
        device=_study_device(context, shared=shared),
        budget_bytes=context.budget_bytes,
        space=context.space,
        objective=goal.objective,
        train_steps=goal.train_steps,
    )
    if not shared:
        return name
    text = json.dumps(_space_setup(context, shared=True), sort_keys=True)
    return f"{name.rsplit('-', 1)[0]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _study_model(spec: ModelSpec) -> str:
    """The model as a study's name gives it: with the fingerprint of its code where it was
    given as functions (``autotune.tune``), so that changed code gets a study of its own."""
    fingerprint = spec.extras.get("fingerprint")
    name = model_name(spec)
    return f"{name}-{fingerprint}" if isinstance(fingerprint, str) and fingerprint else name


def _space_setup(context: SearchContext, *, shared: bool) -> dict[str, Any]:
    """The space as a study records it; a shared study's, without the device's index."""
    space = context.space.describe()
    return {**space, "device": _study_device(context, shared=True)} if shared else space


def _slug(text: str) -> str:
    text = text.rsplit("/", 1)[-1].replace(".py:", "-").replace(":", "-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"


def study_database(runs_dir: str | Path, study_name: str) -> Path:
    """The default SQLite file of study ``study_name``: ``<runs_dir>/<folder>/study.db``
    (``~`` expanded), the folder named by ``study_folder``. Nothing is made here:
    ``made_folder`` makes it for a search that writes."""
    runs = Path(runs_dir).expanduser()
    return runs / study_folder(runs, study_name) / "study.db"


def study_folder(runs_dir: str | Path, study_name: str) -> str:
    """The folder of study ``study_name`` under ``runs_dir``: the name itself where it is
    a plain file name, else its slug and a hash of the name, so that names that differ
    only in what the slug drops (``café`` and ``cafè``; ``my study`` and ``my-study``) get
    folders of their own. A folder of the older layout (the slug alone) is kept where its
    study file holds a study of this very name, so that an earlier search of it resumes;
    a study named as the slug itself is another study, and keeps its folder to itself."""
    slug = _slug(study_name)
    if slug == study_name:
        return slug
    runs = Path(runs_dir).expanduser()
    hashed = f"{slug}-{hashlib.sha256(study_name.encode()).hexdigest()[:8]}"
    if not (runs / hashed).exists() and study_name in studies_in(runs / slug / "study.db"):
        return slug
    return hashed


def studies_in(database: Path) -> list[str]:
    """The names of the studies a SQLite study file holds, read without writing to it
    (none where it is missing or cannot be read)."""
    import sqlite3

    if not database.is_file():
        return []
    try:
        with contextlib.closing(
            sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            return [row[0] for row in db.execute("SELECT study_name FROM studies")]
    except sqlite3.Error:
        return []


@contextlib.contextmanager
def made_folder(folder: Path) -> Iterator[None]:
    """``folder`` (a study's, ``study_folder``), made with its parents where missing, and
    taken away again if what runs inside fails while they are still empty: a study that
    could not be opened leaves no folder behind."""
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for empty in made:  # the innermost first
            if not empty.is_dir() or any(empty.iterdir()):
                break
            empty.rmdir()
        raise


def require_study(storage: str, name: str) -> None:
    """A search that finishes study ``name`` (``--finish``) needs it there already: racing
    a study's trials never makes one. ``UsageError`` naming the storage (redacted), the
    studies it holds, and what to do; nothing is created."""
    import optuna

    problem = missing_storage(storage)
    if problem is None:
        names = sorted(optuna.study.get_all_study_names(open_storage(storage, create=False)))
        if name in names:
            return
        held = ", ".join(repr(n) for n in names[:10]) if names else "no study"
        problem = f"the study storage {redact(storage)!r} holds {held}"
    raise UsageError(
        f"no study named {name!r} to finish: {problem}. --finish races the trials of a "
        "study that its workers made (autotune search --worker --study NAME, with the same "
        "--storage): start them first, or give the name and --storage they use"
    )


def _study_device(context: SearchContext, *, shared: bool) -> str:
    """The device a study is for: ``cuda:1``; for workers of a shared study, which each
    search on a device of their own, the kind (``cuda``: the space's device capabilities,
    also in the study's set-up, tell one GPU model from another)."""
    return re.sub(r":\d+$", "", context.device) if shared else context.device


def _measured_by(bursts: BurstRunner) -> dict[str, Any]:
    """How a study's trials are measured, beside the model, device, budget and space: a
    search that measured otherwise would rank its figures against the study's as if alike,
    so resuming the study with another of these is refused (``check_study_setup``).

    ``steps``: the timed steps whose median is a trial's figure (and that the pruner
    sees). ``warmup``: the untimed steps before them (as run: the default is 1 on a CPU,
    3 on CUDA), which decide how much of compilation, cache and allocator warm-up a figure
    still holds. ``seed``: the model's initial weights and a burst's samples (synthetic,
    or the order a real data set is read in): where a step's time depends on its data
    (lengths, routing), another seed runs other steps.

    Left out, as they change which trials run, not how one is measured: the limits of
    trials and time; the burst timeout (a figure is its steps' median whatever the cap;
    a burst that the cap cut has none: each trial records the cap it ran under, and a
    resume with a longer one measures its config again,
    ``Planner.measure_timed_out_again``); the race's settings (the race measures its
    entrants anew, side by side); the warm start and the startup trials (which configs
    come first; the sampler's seed moves on with the trials anyway); ``--profile`` (a
    burst of its own); the machine watch (it flags a disturbed trial, which is measured
    again)."""
    return {"steps": bursts.steps, "warmup": bursts.warmup, "seed": bursts.seed}


def _study_setup(
    context: SearchContext, goal: Goal, bursts: BurstRunner, *, shared: bool = False
) -> dict[str, Any]:
    """What a study is made for: resuming it with other settings is refused."""
    spec = context.spec
    return {
        "model": model_name(spec),
        "model_args": {k: repr(v) for k, v in spec.args.items()},
        "device": _study_device(context, shared=shared),
        "budget_bytes": context.budget_bytes,
        "global_batch": context.space.global_batch,
        "objective": goal.objective,
        "train_steps": goal.train_steps,
        "space": _space_setup(context, shared=shared),
        **_measured_by(bursts),
    }


def open_search_study(
    context: SearchContext,
    goal: Goal,
    storage: str,
    name: str,
    *,
    bursts: BurstRunner,
    n_startup_trials: int | None,
    joining: bool = False,
) -> tuple[optuna.Study, TrialLog]:
    """The study, the search's trial log holding its trials so far (a resumed search goes
    on from them), and the start announced. ``bursts``: how its trials are measured (and
    their seed, the sampler's too)."""
    study = open_study(
        storage,
        name,
        setup=_study_setup(context, goal, bursts, shared=joining),
        # the pruner asks once a trial runs, when the log below is made
        pruner=SlowConfigPruner(lambda: log.best_throughput()),
        seed=bursts.seed,
        n_startup_trials=n_startup_trials,
        space_size=context.space.size(),
        trials=context.limits.trials,
        joining=joining,
        note=context.note,
    )
    earlier = study.get_trials(deepcopy=False)
    log = TrialLog.of(context, [TrialRecord.from_trial(frozen) for frozen in earlier])
    resumed = sum(1 for r in log.records.values() if r.finished)
    context.emit(
        SearchEvent(
            kind="start",
            message=(
                f"study {name!r} in {redact(storage)}; space of {context.space.size()} "
                f"configs; budget {format_bytes(context.budget_bytes)} on {context.device}"
                + (f"; resuming with {resumed} finished trials" if resumed else "")
            ),
            best=log.best(),
            unit=context.unit,
            trials_left=log.trials_left(),
            time_left_s=context.deadline.left(),
        )
    )
    return study, log
