"""What ``search()`` is asked: one keyword-only, frozen record per concern, checked when made.

``SearchScope`` (what is searched), ``SearchMachine`` (where the bursts run),
``SearchLimits`` (how much is measured), ``SearchRace`` (the finalist race),
``SearchStudy`` (the Optuna study) and ``SearchOutput`` (the preset and the progress).
A record that is made wrong raises ``SearchOptionsError`` with every problem at once,
each naming its field (``trials must be a positive integer, got 0``) and carrying that
field's path (``limits.trials``): the CLI, which makes these records from its flags,
shows the flag instead (``autotune.cli.search.flag_of``).
``search_options`` sorts flat keyword arguments (``tune``'s) into the records.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from autotune.core.errors import ConfigError, UsageError
from autotune.core.files import is_text_path, not_ours_problem, output_problem, unwritable_folder
from autotune.core.units import parse_duration
from autotune.core.validator import (
    COUNT,
    PROCESSES,
    SEED,
    SIZE,
    bounded,
    did_you_mean,
    field_bound_problems,
    show,
)
from autotune.study.plan.knob_args import parse_seq_len
from autotune.study.race.finalist_race import DEFAULT_FINALISTS, DEFAULT_ROUNDS
from autotune.study.storage.optuna_glue import PRUNE_MIN_STEPS, check_storage_url

if TYPE_CHECKING:
    from autotune.machine.profile import HardwareProfile
    from autotune.study.session.watch import MachineWatch
    from autotune.study.trials.burst_runner import BurstFn
    from autotune.study.trials.records import SearchEvent

__all__ = [
    "DEFAULT_BURST_TIMEOUT_S",
    "DEFAULT_RUNS_DIR",
    "DEFAULT_STEPS",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_TRIALS",
    "DEFAULT_WARMUP",
    "OBJECTIVES",
    "Objective",
    "Problem",
    "SearchLimits",
    "SearchMachine",
    "SearchOptionsError",
    "SearchOutput",
    "SearchRace",
    "SearchScope",
    "SearchStudy",
    "field_paths",
    "search_options",
]

# With neither trials nor timeout: up to 30 measured trials, and the finalist race,
# within 5 2/3 minutes (the race counts inside the limit), so a default search ends in
# under 6 minutes.
DEFAULT_TRIALS = 30
DEFAULT_TIME_LIMIT_S = 340.0
DEFAULT_STEPS = 4
DEFAULT_WARMUP = None  # 1 on a CPU; 3 on CUDA (compilation, CUDA-graph recording)
DEFAULT_BURST_TIMEOUT_S = 300.0
DEFAULT_RUNS_DIR = "autotune_runs"

Objective = Literal["throughput", "time-to-train"]
OBJECTIVES: tuple[str, ...] = ("throughput", "time-to-train")


class Problem(NamedTuple):
    """One problem of the search options: its text, and the fields the text names by their
    names (``("train_steps",)`` in a record; ``("scope.train_steps",)`` once raised)."""

    text: str
    fields: tuple[str, ...] = ()


class SearchOptionsError(ConfigError):
    """Search options that cannot be used: every problem, each naming its field. One problem
    is the whole message. ``fields`` holds, for each of ``problems``, the paths of the
    fields its text names (``limits.timeout``), for a caller that calls them otherwise."""

    def __init__(
        self, problems: Iterable[str | Problem], *, context: str = "invalid search options"
    ):
        found = [p if isinstance(p, Problem) else Problem(p) for p in problems]
        super().__init__([p.text for p in found], context=context)
        self.fields = [p.fields for p in found]
        if len(self.problems) == 1:
            self.args = (self.problems[0],)

    @property
    def found(self) -> list[Problem]:
        """The problems with the paths of the fields they name."""
        return [
            Problem(text, fields) for text, fields in zip(self.problems, self.fields, strict=True)
        ]


class _Options:
    """Checks a record's fields when it is made, raising every problem with the paths of the
    fields it names: each number against the bound declared with it (``bounded``:
    ``autotune.core.validator``'s seeds, counts, sizes and processes), then the record's own
    ``_problems``."""

    def __post_init__(self) -> None:
        bounds = [Problem(text, (name,)) for name, text in field_bound_problems(self)]
        problems = bounds + self._problems()
        if problems:
            key = _KEYS[type(self)]
            raise SearchOptionsError(
                [Problem(p.text, tuple(f"{key}.{f}" for f in p.fields)) for p in problems],
                context=f"invalid {type(self).__name__}",
            )

    def _problems(self) -> list[Problem]:
        return []


def _refused(check: Callable[[], Any], name: str) -> list[Problem]:
    """The problem of the field ``name`` that ``check()`` raises as a ``UsageError``, if
    any, naming the field where its text does."""
    try:
        check()
    except UsageError as exc:
        text = str(exc)
        return [Problem(text, (name,) if re.search(rf"\b{name}\b", text) else ())]
    return []


def _duration(name: str, value: Any) -> list[Problem]:
    """The problem with a duration (``600``, ``"10m"``), if any."""
    return _refused(lambda: parse_duration(value, what=name), name)


@dataclass(frozen=True, kw_only=True)
class SearchScope(_Options):
    """What is searched, beyond the model and the budget."""

    global_batch: int | None = bounded(None, SIZE)
    """Samples per optimizer step, kept fixed (default: the model's)."""
    seq_len: str | int | Sequence[int] | None = None
    """One length, or a range ``"64-256"`` whose powers of two are searched."""
    knobs: Mapping[str, Sequence[Any]] | Sequence[str] | None = None
    """Restricts the space: ``{"precision": ["bf16"]}`` or ``["precision=bf16",
    "compile=off"]``."""
    objective: str = "throughput"
    """``throughput`` (steady-state) or ``time-to-train`` (compile time charged over
    ``train_steps``)."""
    train_steps: int | None = bounded(None, COUNT)
    """The run's length, for ``time-to-train``."""

    def _problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.seq_len is not None:  # the model's own limit is checked with it later
            problems += _refused(lambda: parse_seq_len(self.seq_len), "seq_len")  # type: ignore[arg-type]
        if isinstance(self.knobs, str):
            problems.append(
                Problem(
                    f"knobs must be a mapping or a list of NAME=VALUE texts, got {self.knobs!r}",
                    ("knobs",),
                )
            )
        if self.objective not in OBJECTIVES:
            shown = ", ".join(OBJECTIVES)
            problems.append(
                Problem(f"objective must be one of {shown}, got {self.objective!r}", ("objective",))
            )
        elif self.objective == "time-to-train" and self.train_steps is None:
            problems.append(
                Problem(
                    "objective time-to-train needs train_steps N (the run's length)",
                    ("objective", "train_steps"),
                )
            )
        return problems


@dataclass(frozen=True, kw_only=True)
class SearchMachine(_Options):
    """Where and how the bursts run."""

    device: str | None = None
    """``cpu``, ``cuda``, ``cuda:1`` (default: the first GPU, else the CPU)."""
    nproc_per_node: int = bounded(1, PROCESSES)
    """Processes per burst: above 1 every burst runs under torchrun and the space adds the
    DDP/FSDP settings (``autotune/config/parallel.py``); the preset records them."""
    hardware: HardwareProfile | None = None
    """The machine (default: ``autotune.machine.hardware.probe()``)."""
    burst_fn: BurstFn | None = None
    """Runs one burst (default: ``autotune.burst.supervisor.run_burst``)."""
    watch: MachineWatch | bool | None = None
    """The machine watch that marks trials measured under outside load: a
    ``MachineWatch``, True, False; None: on with the real burst runner, off with a
    ``burst_fn``, whose figures do not come from this machine."""

    def _problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.device is not None and not isinstance(self.device, str):
            problems.append(
                Problem(
                    f"device must be a device name such as cuda:0, got {self.device!r}", ("device",)
                )
            )
        if self.burst_fn is not None and not callable(self.burst_fn):
            problems.append(
                Problem(f"burst_fn must be callable, got {self.burst_fn!r}", ("burst_fn",))
            )
        from autotune.machine.profile import HardwareProfile

        if self.hardware is not None and not isinstance(self.hardware, HardwareProfile):
            problems.append(
                Problem(
                    "hardware must be a HardwareProfile (autotune.machine.hardware.probe()) or "
                    f"None, got {type(self.hardware).__name__}",
                    ("hardware",),
                )
            )
        watch = self.watch
        is_watch = all(callable(getattr(watch, name, None)) for name in ("burst", "window"))
        if watch is not None and not isinstance(watch, bool) and not is_watch:
            problems.append(
                Problem(
                    f"watch must be true, false, a MachineWatch or None, got {show(self.watch)}",
                    ("watch",),
                )
            )
        return problems


@dataclass(frozen=True, kw_only=True)
class SearchLimits(_Options):
    """How much is measured. With neither ``trials`` nor ``timeout``: ``DEFAULT_TRIALS``
    within ``DEFAULT_TIME_LIMIT_S``. The time limit covers the trials and the race: the
    trials stop when the time left is what the race will need, and a running burst's
    timeout is capped at the time left."""

    trials: int | None = bounded(None, COUNT)
    """Measured trials (those that ran a burst) in the study, earlier runs included."""
    timeout: str | float | None = None
    """The search's time limit (``600``, ``"10m"``)."""
    steps: int = bounded(DEFAULT_STEPS, COUNT.at_least(PRUNE_MIN_STEPS))
    """Timed optimizer steps per burst."""
    warmup: int | None = bounded(DEFAULT_WARMUP, COUNT.at_least(0))
    """Untimed warm-up steps per burst (default: 1 on a CPU, 3 on CUDA)."""
    burst_timeout: str | float = DEFAULT_BURST_TIMEOUT_S
    """The time limit of one burst."""
    since: float | None = None
    """When the time limit started (``time.monotonic()``); None: the ``search`` call. The
    command line passes its process's start, so that ``--timeout`` covers its imports."""

    def _problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.timeout is not None:
            problems += _duration("timeout", self.timeout)
        since = self.since
        if since is not None and (
            isinstance(since, bool)
            or not isinstance(since, int | float)
            or not math.isfinite(since)
        ):  # nan ran no burst ("nothing fit the budget"); inf turned the time limit off
            problems.append(
                Problem(
                    f"since must be a time.monotonic() reading (a finite number) or None, "
                    f"got {show(since)}",
                    ("since",),
                )
            )
        return problems + _duration("burst_timeout", self.burst_timeout)

    @property
    def time_limit_s(self) -> float | None:
        """The search's time limit in seconds; ``DEFAULT_TIME_LIMIT_S`` without a limit of
        trials or time."""
        if self.timeout is not None:
            return parse_duration(self.timeout)
        return DEFAULT_TIME_LIMIT_S if self.trials is None else None

    @property
    def trial_limit(self) -> int | None:
        """The measured trials to run; ``DEFAULT_TRIALS`` without a limit of trials or time."""
        return DEFAULT_TRIALS if self.trials is None and self.timeout is None else self.trials

    @property
    def burst_timeout_s(self) -> float:
        return parse_duration(self.burst_timeout)


@dataclass(frozen=True, kw_only=True)
class SearchRace(_Options):
    """The finalist race: the ``finalists`` best distinct configs, the naive config and the
    expert start, ``race_rounds`` interleaved rounds of ``race_steps`` timed steps each."""

    finalists: int = bounded(DEFAULT_FINALISTS, COUNT)
    race_rounds: int = bounded(DEFAULT_ROUNDS, COUNT)
    race_steps: int | None = bounded(None, COUNT)
    """Timed steps per race burst (default: the trials' ``steps``)."""


@dataclass(frozen=True, kw_only=True)
class SearchStudy(_Options):
    """The Optuna study the trials go in; rerunning a search resumes its study."""

    storage: str | None = None
    """Any Optuna storage URL, or ``journal:PATH`` (default:
    ``sqlite:///<runs_dir>/<study>/study.db``)."""
    study: str | None = None
    """The study's name, also its folder under ``runs_dir`` (default: from the model,
    device, budget, global batch, sequence length and the space)."""
    runs_dir: str | Path = DEFAULT_RUNS_DIR
    """Where the default storage and the compile cache go."""
    seed: int = bounded(0, SEED)
    """Seed of the sampler and of the bursts (numpy's seeding takes 0 to 2**32 - 1)."""
    n_startup_trials: int | None = bounded(None, COUNT.at_least(0))
    """Random trials before TPE models the results (default: from the space's size)."""
    warm_start: str | Path | None = None
    """A preset whose config (and its neighbours) are tried first."""
    worker: bool = False
    """One of several processes searching this study together (other devices, other
    machines, one shared ``storage``; see ``workers.py``): a config is measured by one
    worker only, ``trials`` counts every worker's, and the race and the preset are run by
    the one worker that claims them first; the others return with no race and no preset,
    naming the finisher."""
    finish: bool = False
    """Run no trials: wait for the workers' last bursts, then race the study's trials and
    write the preset (taking over from a finisher that died)."""

    def _problems(self) -> list[Problem]:
        problems: list[Problem] = [
            Problem(f"{flag} must be true or false, got {show(value)}", (flag,))
            for flag, value in (("worker", self.worker), ("finish", self.finish))
            if not isinstance(value, bool)
        ]
        problems += [
            Problem(f"{field} must be a text, got {show(value)}", (field,))
            for field, value in (("study", self.study), ("storage", self.storage))
            if value is not None and not isinstance(value, str)
        ]
        if self.warm_start is not None and not is_text_path(self.warm_start):
            problems.append(
                Problem(
                    f"warm_start must be a preset's path (a str or os.PathLike) or None, got "
                    f"{show(self.warm_start)}",
                    ("warm_start",),
                )
            )
        if problems:
            return problems
        name = self.study
        if name is not None and (
            name.strip() in ("", ".", "..") or any(c in name for c in "/\\\0")
        ):
            problems.append(
                Problem(
                    f"study {name!r}: expected a plain name such as my-search (no path "
                    "separators, not '.' or '..'): the study's files go in a folder of that "
                    "name under the runs folder",
                    ("study",),
                )
            )
        elif name is not None and self.storage is None and len(name) > MAX_STUDY_NAME:
            # the default storage's folder is the name made plain (ASCII, one byte a
            # character at most), which a file system holds to 255 bytes
            problems.append(
                Problem(
                    f"study name of {len(name)} characters: expected at most "
                    f"{MAX_STUDY_NAME}, as it names the study's folder (or give --storage)",
                    ("study",),
                )
            )
        if self.storage is not None:
            storage = self.storage
            problems += _refused(lambda: check_storage_url(storage), "storage")
        return problems + [Problem(p) for p in _runs_dir_problems(self.runs_dir)]

    @property
    def shared(self) -> bool:
        """Whether other processes search this study too."""
        return self.worker or self.finish


@dataclass(frozen=True, kw_only=True)
class SearchOutput(_Options):
    """What the search gives back besides its result."""

    output: str | Path | None = "best.yaml"
    """Where the winner's preset goes (None: not written). Checked when made, not after
    the last trial: its nearest existing folder must be one this process can write in."""
    progress: Callable[[SearchEvent], None] | None = None
    """Receives a ``SearchEvent`` per trial, race round and note."""
    profile: bool = False
    """Profile the naive config once it has run (a separate burst: the trials' figures
    carry no profiler) and refine first the knobs its verdict names (autotune.explain)."""

    def _problems(self) -> list[Problem]:
        if self.output is not None and not is_text_path(self.output):
            return [
                Problem(
                    "output must be a path (a str or os.PathLike) or None, got "
                    f"{show(self.output)}",
                    ("output",),
                )
            ]
        output = [] if self.output is None else _output_problems(self.output)
        problems = [Problem(text, ("output",)) for text in output]
        if not isinstance(self.profile, bool):
            problems.append(
                Problem(f"profile must be true or false, got {self.profile!r}", ("profile",))
            )
        if self.progress is not None and not callable(self.progress):
            problems.append(
                Problem(f"progress must be callable, got {self.progress!r}", ("progress",))
            )
        return problems


MAX_STUDY_NAME = 200  # characters of a study name that names a folder


def _output_problems(output: str | Path) -> list[str]:
    """What keeps the preset from being written at ``output`` (the folders below its
    nearest existing one are made when it is written), or replacing what is there."""
    if problem := output_problem(output, example="best.yaml"):
        return [f"output {problem}"]
    from autotune.preset.io import A_PRESET, looks_like_preset

    target = Path(output).expanduser()
    if problem := not_ours_problem(target, looks_like_preset, what=A_PRESET, by="the search"):
        return [f"output {str(output)!r} {problem}"]
    return []


def _runs_dir_problems(runs_dir: Any) -> list[str]:
    """The runs folder must be one this process can write in: the compile cache, and the
    default study file, go there (a read-only working folder failed in ``mkdir``)."""
    if not isinstance(runs_dir, str | Path):
        return [f"runs_dir must be a path, got {runs_dir!r}"]
    problem = unwritable_folder(Path(runs_dir).expanduser())
    if problem is None:
        return []
    return [
        f"the runs folder {str(runs_dir)!r}: {problem}; the search keeps its compile cache "
        "there, and its study unless --storage names another: run it from a folder you can "
        "write to (in Python: give runs_dir)"
    ]


_RECORDS: dict[str, Any] = {  # the argument of search() -> its record type
    "scope": SearchScope,
    "machine": SearchMachine,
    "limits": SearchLimits,
    "race": SearchRace,
    "study": SearchStudy,
    "output": SearchOutput,
}
_KEYS = {cls: key for key, cls in _RECORDS.items()}  # a record type -> its argument


def field_paths() -> dict[str, str]:
    """The path of every field of the option records, by its name (the names are unique):
    ``{"trials": "limits.trials", ...}``, a path being ``search()``'s argument, then the
    field."""
    return {
        f.name: f"{key}.{f.name}" for key, cls in _RECORDS.items() for f in dataclasses.fields(cls)
    }


def search_options(**options: Any) -> dict[str, Any]:
    """``search()``'s option records from flat keyword arguments in the CLI's names
    (``timeout="2m", trials=20, output=None``), to pass on as
    ``search(model, budget=..., **search_options(...))``: each goes to the record with a
    field of its name; the records get their defaults otherwise. ``UsageError`` for a
    name no record has; every problem of every record at once."""
    owner = {name: path.split(".")[0] for name, path in field_paths().items()}
    unknown = [name for name in options if name not in owner]
    if unknown:
        raise UsageError(
            f"unknown search option {unknown[0]!r}{did_you_mean(unknown[0], list(owner))}"
        )
    fields: dict[str, dict[str, Any]] = {key: {} for key in _RECORDS}
    for name, value in options.items():
        fields[owner[name]][name] = value
    records: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, cls in _RECORDS.items():
        try:
            records[key] = cls(**fields[key])
        except SearchOptionsError as exc:
            problems += exc.found
    if not problems:
        clash = _output_is_storage(records["output"].output, records["study"].storage)
        problems += [Problem(text, ("output.output",)) for text in clash]
    if problems:
        raise SearchOptionsError(problems)
    return records


def _output_is_storage(output: str | Path | None, storage: str | None) -> list[str]:
    """The preset would replace the study it was found in: ``-o study.db`` beside
    ``--storage sqlite:///study.db`` (the SQLite file, its WAL/SHM files or a journal)."""
    from autotune.study.storage.ownership import storage_files

    if output is None or storage is None:
        return []
    if Path(output).expanduser().resolve() in storage_files(storage):
        return [
            f"output {str(output)!r} is the study's own storage file ({storage}): writing the "
            "preset there would destroy the study; give another file such as best.yaml"
        ]
    return []
