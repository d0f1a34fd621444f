"""What a report shows, gathered from a study, a preset, or both (``ReportData``).

``load_report_data(source)`` takes a study's name or a preset (a path, or a preset's name).
A preset names its study (``search.study_name`` in ``search.storage``); a study is found
in its storage (default ``sqlite:///<runs_dir>/<study>/study.db``). The trials are read
through ``TrialRecord.from_trial``, the search's own reader. A preset is data: reading it
for a report never imports the model it names (principle 6).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import AutotuneError, PresetError, UsageError
from autotune.study.trials.ledger import TimeLedger
from autotune.study.trials.records import TrialRecord, distinct_best

if TYPE_CHECKING:
    import optuna

    from autotune.explain.breakdown import Breakdown
    from autotune.explain.verdict import StepVerdict
    from autotune.preset import Preset

__all__ = [
    "MIN_TRIALS_FOR_IMPORTANCE",
    "ProfiledConfig",
    "ReportData",
    "load_report_data",
    "study_data",
]

# Optuna's importances need a handful of measured configs that differ; fewer says nothing.
MIN_TRIALS_FOR_IMPORTANCE = 5
DEFAULT_RUNS_DIR = "autotune_runs"  # the search's default (autotune/study/session/api.py)


@dataclass(frozen=True, kw_only=True)
class ProfiledConfig:
    """One config ``autotune search --profile`` profiled: its label (naive or winner, with
    its config), where its step's time went, and the limit it hits."""

    label: str
    breakdown: Breakdown
    verdict: StepVerdict


@dataclass(frozen=True, kw_only=True)
class ReportData:
    """Everything one report page shows. Either side may be missing: a study without a
    preset (a search that wrote none yet), or a preset whose study is gone."""

    title: str
    study_name: str | None = None
    storage: str | None = None  # redacted
    setup: Mapping[str, Any] = field(default_factory=dict)  # the study's "autotune" attrs
    trials: tuple[TrialRecord, ...] = ()
    verify: tuple[Mapping[str, Any], ...] = ()  # the study's verify.<trial> attrs
    importances: Mapping[str, float] | None = None
    importance_note: str = ""
    preset: Preset | None = None
    preset_path: str | None = None
    race: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    profile: tuple[ProfiledConfig, ...] = ()  # the study's "profile" attr (search --profile)
    ledger: TimeLedger | None = None  # where its last search's time went (the study's attr)

    # -- what the sections ask --------------------------------------------------------

    @property
    def unit(self) -> str:
        """tokens/s or samples/s: the preset's, else the trials'."""
        if self.preset is not None and self.preset.measured.throughput is not None:
            return self.preset.measured.throughput[1]
        if self.race and isinstance(self.race.get("unit"), str):
            return str(self.race["unit"])
        for t in self.trials:
            if t.throughput is not None and t.samples_per_s is not None:
                if t.tokens_per_s is None or not math.isclose(t.throughput, t.tokens_per_s):
                    return "samples/s"
                return "tokens/s"
        return "tokens/s"

    @property
    def budget_bytes(self) -> int | None:
        if self.preset is not None and self.preset.budget_bytes:
            return self.preset.budget_bytes
        value = self.setup.get("budget_bytes")
        return value if isinstance(value, int) else None

    @property
    def model(self) -> str:
        if self.preset is not None:
            return self.preset.model.name
        return str(self.setup.get("model") or "?")

    @property
    def device(self) -> str:
        if self.setup.get("device"):
            return str(self.setup["device"])
        if self.preset is not None:
            return self.preset.fingerprint.device_kind
        return "?"

    def finished(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.finished]

    def by_role(self, role: str) -> TrialRecord | None:
        """The first finished trial the planner queued as ``role`` (naive, guess, ...)."""
        return next((t for t in self.finished() if t.role == role), None)

    def winner(self) -> TrialRecord | None:
        """The preset's trial where a preset names one, else the best measured trial."""
        if self.preset is not None:
            config = self.preset.config.to_dict()
            for t in self.finished():
                if t.feasible and dict(t.config) == config:
                    return t
        best = distinct_best(self.trials)
        return best[0] if best else None

    def winner_config(self) -> Mapping[str, Any] | None:
        if self.preset is not None:
            return self.preset.config.to_dict()
        best = self.winner()
        return None if best is None else dict(best.config)

    def naive_config(self) -> Mapping[str, Any] | None:
        if self.preset is not None and self.preset.baseline is not None:
            return self.preset.baseline.config.to_dict()
        naive = self.by_role("naive")
        return None if naive is None else dict(naive.config)


def load_report_data(
    source: str | Path,
    *,
    storage: str | None = None,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
) -> ReportData:
    """The report's data for ``source``: a preset (a ``.yaml`` path, or a preset's name) or
    a study's name (found in ``storage``, default the runs folder's SQLite file).

    ``UsageError`` (exit code 2) when neither a preset nor a study of that name exists.
    A preset whose study is gone gives a report of the preset alone, with a note."""
    text = str(source)
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml") or (os.path.lexists(path) and not path.is_dir()):
        return preset_data(path, storage=storage)  # a FIFO or a device is refused, named
    url = storage if storage is not None else _default_url(runs_dir, text)
    if url is not None:
        return study_data(text, url)
    from autotune.preset import resolve_preset

    try:
        found = resolve_preset(text)
    except PresetError:
        from autotune.study.storage.search_study import study_database

        raise UsageError(
            f"no study named {text!r} in {str(runs_dir)!r} (looked for "
            f"{str(study_database(runs_dir, text))!r}) and no preset of that name: give a "
            "preset file (best.yaml), a study's name with --runs-dir DIR, or --storage URL"
            + _known_studies(runs_dir)
        ) from None
    return preset_data(found, storage=storage)


def _default_url(runs_dir: str | Path, study: str) -> str | None:
    """The search's default SQLite file for ``study``, where it exists (a report never
    creates a study file)."""
    if any(c in study for c in "/\\\0") or study.strip() in ("", ".", ".."):
        return None
    from autotune.study.storage.search_study import study_database

    db = study_database(runs_dir, study)
    return f"sqlite:///{db}" if db.is_file() else None


def _known_studies(runs_dir: str | Path) -> str:
    """The names of the studies in the runs folder's study files (a folder's name is not
    always its study's: ``my study`` lives in ``my-study-<hash>``)."""
    from autotune.study.storage.search_study import studies_in

    folder = Path(runs_dir).expanduser()
    files = folder.glob("*/study.db") if folder.is_dir() else ()
    names = sorted({name for db in files for name in studies_in(db)})
    return f" (studies there: {', '.join(repr(n) for n in names[:10])})" if names else ""


# -- a preset -------------------------------------------------------------------------------


def preset_data(path: Path, *, storage: str | None = None) -> ReportData:
    """A preset's report: the preset, its race where it has one, and its study's trials
    where the study still exists (``storage`` overrides the one the preset names)."""
    from autotune.preset.io import read_yaml

    raw = read_yaml(path)
    preset = _preset_from_raw(raw, path)
    race = raw.get("race") if isinstance(raw.get("race"), Mapping) else None
    summary = preset.search
    title = f"autotune report: {preset.name}"
    if summary is None:
        return ReportData(
            title=title,
            preset=preset,
            preset_path=str(path),
            race=race,
            notes=("this preset records no search, so there are no trials to show",),
        )
    from autotune.core.redact import redact

    url = storage if storage is not None else summary.storage
    # A preset is data: the storage it names is followed only where it is a study file
    # here; a server (a connection that would carry this machine's credentials, such as
    # PGPASSWORD) or any other file (which opening would change) needs --storage.
    problem = None if storage is not None else untrusted_storage(summary.storage)
    try:
        if problem is not None:
            raise UsageError(problem)
        found = study_data(summary.study_name, url)
    except AutotuneError as exc:
        if storage is not None:  # the user's own --storage: their mistake, said as one
            raise
        problem = str(exc)
    else:
        return dataclasses.replace(
            found, title=title, preset=preset, preset_path=str(path), race=race
        )
    return ReportData(
        title=title,
        study_name=summary.study_name,
        storage=redact(summary.storage),
        preset=preset,
        preset_path=str(path),
        race=race,
        notes=(
            f"the study {summary.study_name!r} that found this preset could not be read "
            f"({problem}); this page shows the preset alone. Give --storage URL if the "
            "study has moved",
        ),
    )


def untrusted_storage(url: str) -> str | None:
    """Why a report does not open the storage a preset names (None: it may). A preset is
    data and may be someone else's: its storage is opened only where it is a journal file
    or an SQLite file here that already holds an Optuna study. Never a database server
    (connecting would send this machine's user name and any password libpq or a driver
    finds, ``PGPASSWORD`` or ``~/.pgpass``, to a host the preset chose) and never another
    SQLite file (Optuna would add its tables to it and switch it to WAL mode)."""
    import sqlite3

    from autotune.core.redact import redact

    shown = repr(redact(url))
    if url.startswith("journal:"):
        return None  # read only; a missing file is refused by the reader
    if not url.startswith("sqlite:"):
        return (
            f"the preset names the database server {shown}; a report connects to a server "
            "only when you give it with --storage URL"
        )
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # unparsable: not a study file
        return f"the preset's storage {shown} is not a study file"
    database = parsed.database or ""
    path = Path(database).expanduser()
    if parsed.query or database.startswith("file:"):
        return f"the preset's storage {shown} is not a study file"
    if not path.is_file():
        return None  # not there: the reader says so, and makes none
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error:
        tables = set()
    if not {"studies", "trials", "version_info"} <= tables:
        return (
            f"the preset's storage {shown} is not an Optuna study database; a report opens "
            "another file only when you give it with --storage URL"
        )
    return None


def _preset_from_raw(raw: Any, path: Path) -> Preset:
    """The validated preset. A ``race`` section is read from the raw mapping by the report,
    so a preset schema that does not know the field yet still loads."""
    from autotune.preset import Preset, preset_from_dict

    data = raw
    known = {f.name for f in dataclasses.fields(Preset)}
    if isinstance(raw, Mapping) and "race" in raw and "race" not in known:
        data = {k: v for k, v in raw.items() if k != "race"}
    return preset_from_dict(data, source=str(path))


# -- a study --------------------------------------------------------------------------------


def study_data(name: str, url: str) -> ReportData:
    """A study's report: its trials (as the search records them), the verification attempts
    and, with enough measured trials, Optuna's parameter importances."""
    from autotune.core.redact import redact
    from autotune.study.storage.optuna_glue import quiet_optuna

    with quiet_optuna():
        study = _load_study(name, url)
        if len(study.directions) != 1:  # trial.value raised RuntimeError, a traceback
            raise UsageError(
                f"study {name!r} has {len(study.directions)} objectives: a multi-objective "
                "Optuna study, which autotune search does not make; a report shows a study "
                "of one objective"
            )
        frozen = study.get_trials(deepcopy=False)
        trials = tuple(TrialRecord.from_trial(t) for t in frozen)
        attrs = dict(study.user_attrs)
        importances, note = _importances(frozen, trials)
    verify = tuple(
        attrs[key]
        for key in sorted(attrs, key=_verify_order)
        if key.startswith("verify.") and isinstance(attrs[key], Mapping)
    )
    setup = attrs.get("autotune")
    notes: list[str] = []
    if not isinstance(setup, Mapping):
        setup = {}
        notes.append(f"study {name!r} was not made by autotune search: its trials may lack figures")
    profile = _profile(attrs.get("profile"), notes)
    return ReportData(
        title=f"autotune report: {name}",
        study_name=name,
        storage=redact(url),
        setup=setup,
        trials=trials,
        verify=verify,
        importances=importances,
        importance_note=note,
        profile=profile,
        ledger=TimeLedger.from_dict(attrs.get("ledger")),
        notes=tuple(notes),
    )


def _profile(raw: Any, notes: list[str]) -> tuple[ProfiledConfig, ...]:
    """The profiled configs the search kept in the study (none without ``--profile``); an
    entry that does not read is left out, with a note."""
    from autotune.core.plain import from_plain
    from autotune.explain.breakdown import Breakdown
    from autotune.explain.verdict import StepVerdict

    if raw is None:
        return ()
    out = []
    for i, entry in enumerate(raw if isinstance(raw, list) else [raw]):
        try:
            if not isinstance(entry, Mapping):
                raise ValueError(f"expected a mapping, got {type(entry).__name__}")
            out.append(
                ProfiledConfig(
                    label=str(entry.get("config") or "?"),
                    breakdown=Breakdown.from_dict(entry.get("breakdown") or {}),
                    verdict=from_plain(StepVerdict, entry.get("verdict"), path="verdict"),
                )
            )
        except (AutotuneError, ValueError) as exc:
            notes.append(f"the study's profile entry {i} could not be read ({exc}): not shown")
    return tuple(out)


def _verify_order(key: str) -> tuple[int, str]:
    tail = key.removeprefix("verify.")
    return (int(tail), key) if tail.isascii() and tail.isdecimal() else (10**9, key)


def _load_study(name: str, url: str) -> optuna.Study:
    import optuna

    from autotune.core.redact import redact
    from autotune.study.storage.optuna_glue import open_storage

    storage = open_storage(url, create=False)  # a reader never makes a study file
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        known = f" (it holds: {', '.join(sorted(names)[:10])})" if names else " (it holds none)"
        raise UsageError(f"no study named {name!r} in {redact(url)!r}{known}") from None


def _importances(
    frozen: Sequence[optuna.trial.FrozenTrial], records: Sequence[TrialRecord]
) -> tuple[dict[str, float] | None, str]:
    """Optuna's parameter importances over the measured, feasible trials (an infeasible
    trial's 0 would measure the budget, not the knob), or None and why not."""
    import optuna

    ok = {r.number for r in records if r.feasible and r.ran and r.duplicate_of is None}
    chosen = [t for t in frozen if t.number in ok and t.params and t.value is not None]
    varied = {name for name in {p for t in chosen for p in t.params} if _distinct(chosen, name) > 1}
    if len(chosen) < MIN_TRIALS_FOR_IMPORTANCE or not varied:
        return None, (
            f"parameter importances need at least {MIN_TRIALS_FOR_IMPORTANCE} measured "
            f"configs within the budget, with knobs that vary; this study has {len(chosen)}, "
            "so they are skipped"
        )
    scratch = optuna.create_study(direction="maximize")
    scratch.add_trials(
        [
            optuna.trial.create_trial(
                params={k: v for k, v in t.params.items() if k in t.distributions},
                distributions=dict(t.distributions),
                value=t.value,
            )
            for t in chosen
        ]
    )
    try:
        found = optuna.importance.get_param_importances(scratch, params=sorted(varied))
    except Exception as exc:  # Optuna declines odd spaces: say so, do not fail the page
        return None, f"Optuna could not compute parameter importances here ({exc})"
    return dict(found), (
        f"Optuna's fANOVA importances over {len(chosen)} measured configs within the budget"
    )


def _distinct(trials: Sequence[optuna.trial.FrozenTrial], name: str) -> int:
    return len({repr(t.params.get(name)) for t in trials if name in t.params})
