"""The GPU suite: one command that measures autotune on one CUDA GPU within a time limit
and writes, after every step, a Markdown file of tables ready for BENCHMARKS.md and a JSON
file of the figures.

**A plan that fits a time limit** (``--within 9m``; what a lease of a GPU, or an hour of a
rented one, gives). The steps run in this order (issue 55)::

    probe        autotune probe --json: the card, the driver, torch
    search-gpt2  autotune search --model gpt2-124m --seq-len 1024 --budget 0.9 (90% of the
                 card) with its default time limit: the configs measured, the winner, its
                 MFU (target 50%), the winner over the guide's hand-tuned config (target
                 1.2x), the ledger of the search's time, the memory model's error
    knobs-gpt2   benchmarks/model_knobs.py against that winner, in one interleaved run
                 (rotated order each round, medians, ratios to the winner): the SDPA
                 backends (cuDNN, flash, memory-efficient), fused against foreach AdamW,
                 expandable segments, larger micro-batches with the chunked loss (the
                 largest with selective checkpointing), float8 linear layers where the
                 card has FP8 tensor cores (torchao's wheel carried in .whl/), the other
                 compile modes
    train-gpt2   200 steps of autotune train on the winner: steady tokens/s at least 0.95x
                 the preset's
    search       mu's default search at 8 GB (the budget check on its winner)
    gpu-tests    the gpu-marked tests, in one process

Each step has the time it needs in full and the least worth starting it with. The plan
gives time in priority order: probe, the search, train, then the knobs (all the time
left, up to 15 minutes), and mu's search and the tests only what is left after them; a
step runs with its share plus what earlier steps left unused, its command's own limit
sized to it (the knobs' ``--within``; the search's ``--timeout`` only where its default
cannot fit), and a step whose time cannot reach its minimum is skipped, and the table
says why. ``--dry-run`` prints the plan and its commands. A command still running at its
step's limit gets SIGTERM (a search, the knobs and a training run stop cleanly and keep
what they measured), then SIGKILL.

A run cut short keeps what finished: after every step the suite writes, atomically, ``OUT``
(the Markdown) and ``OUT`` with ``.json`` (the figures), and the search writes its preset
(``gpt2-124m.yaml``, ``mu-8GB.yaml``) and its JSON (``search-gpt2.json``) beside them, and
each command's output is appended to ``steps.log`` there: six files at most, where a lent
machine returns eight. ``--winner PATH`` takes gpt2-124m's winner from an earlier run (its
``gpt2-124m.yaml``): the search is left out and the other steps get its time. ``--steps``
runs named steps, among them the older plan's (``oom``, ``train``, ``compare-gpt2``,
``compare-mu``, ``knobs``: the steps of the first run on an H200) and ``warm-start``
(``warm_start.py --device cuda``: a CUDA trial forked by a zygote against one started
fresh, side by side; for a second lease: ``--steps gpu-tests,warm-start``).

Usage (from the repository root)::

    python benchmarks/gpu_suite.py --within 9m --out gpu/gpu_suite.md
    python benchmarks/gpu_suite.py --within 9m --dry-run       # the plan, nothing run
    python benchmarks/gpu_suite.py --within 9m --winner gpu/gpt2-124m.yaml --out gpu2/suite.md
    python benchmarks/gpu_suite.py --within 25m --steps probe,gpu-tests,oom,search,train

**On a lent GPU** (a 15-minute lease, at most 10 minutes a command, whose Python has torch
with CUDA but not optuna): carry the wheels in ``.whl/`` (see below) and run, as one
command with carry ``[".whl"]`` and a 600-second limit::

    bash benchmarks/gpu_lease.sh

It installs the carried wheels whose distribution the machine lacks
(``benchmarks/_lease_wheels.py``) into ``/tmp/site``, first on ``PYTHONPATH``, and runs the
suite within 9 minutes, its files under ``$OUT`` (the commands' output in ``steps.log``). In 9
minutes the default search (its 340 s limit, up to 374 s with the race and the preset) and
the training run take nearly all the time, so the knobs, mu's search and the tests are
skipped, each with the reason. With the machine still warm and 4 minutes of the lease
left, a second call runs the tests: ``bash benchmarks/gpu_lease.sh 3m --steps gpu-tests``.
A second lease runs the rest: ``bash benchmarks/gpu_lease.sh 9m --winner PATH`` with the
first lease's ``gpt2-124m.yaml`` carried in, or ``--steps gpu-tests,warm-start``.

Without a CUDA device the suite refuses (exit 2: "no CUDA device: the GPU suite needs
one"); it never writes CPU figures in a GPU table.

**A machine with no network.** The suite needs torch with CUDA and autotune's
dependencies. Before any step it imports, in a fresh interpreter, what its commands import
(``CHECKED_MODULES``, and optuna's SQLite storage); where one fails it names the packages
to carry and exits 2. The one GPU run so far lacked optuna and its dependencies (alembic,
SQLAlchemy, Mako, colorlog). Carry them all: on a machine with network,

    python benchmarks/gpu_suite.py --fetch-wheels

downloads into ``.whl/`` of the repository (ignored by git) the wheel of every package the
suite names (``WHEELS``, at the versions autotune is tested with, and torchao for the
float8 variant) for CPython 3.12 on x86-64 Linux, about 31 MB; ``gpu_lease.sh`` installs
only those the machine lacks. The command it runs::

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_28_x86_64 \\
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \\
        optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0 ...

(``--no-deps`` fetches nothing else: every package must be named; pure-Python wheels
match any platform. If pip finds no wheel of a binary package, add ``--platform
manylinux_2_N_x86_64`` for another N: pip matches N exactly.) Without torchao the float8
variant and its GPU tests say "refused".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, the steps (a script's)
sys.path.append(str(Path(__file__).resolve().parent.parent))  # autotune, where not installed

from _common import fmt_seconds, render_table, utc_now
from _gpu_gpt2 import GPT2_STEPS
from _gpu_steps import (
    GPU_TEST_FILES,
    OLDER_STEPS,
    ROOT,
    STOP_GRACE_S,
    Completed,
    Context,
    NotReady,
    Runner,
    Step,
    StepFailed,
)

from autotune.core.errors import UsageError
from autotune.core.files import atomic_write_text
from autotune.core.units import parse_duration

__all__ = ["GPU_TEST_FILES", "STEPS", "Completed", "Context", "main", "plan", "run_suite"]

DEFAULT_WITHIN = "25m"
NO_CUDA = "no CUDA device: the GPU suite needs one"
STEPS: tuple[Step, ...] = (*OLDER_STEPS, *GPT2_STEPS)  # every step --steps can name
LEASE_PLAN = ("probe", "search-gpt2", "knobs-gpt2", "train-gpt2", "search", "gpu-tests")
NEEDS = {"train": "search", "knobs-gpt2": "search-gpt2", "train-gpt2": "search-gpt2"}

# (module, distribution, version autotune is tested with): what the suite needs besides torch.
WHEELS: tuple[tuple[str, str, str], ...] = (
    ("optuna", "optuna", "5.0.0"),
    ("alembic", "alembic", "1.20.1"),
    ("sqlalchemy", "SQLAlchemy", "2.1.9"),
    ("mako", "Mako", "1.4.3"),
    ("colorlog", "colorlog", "6.12.0"),
    ("yaml", "PyYAML", "6.0.3"),
    ("tqdm", "tqdm", "4.70.1"),
    ("packaging", "packaging", "26.3"),
    ("markupsafe", "MarkupSafe", "3.0.4"),
    ("typing_extensions", "typing-extensions", "4.16.0"),
    ("typer", "typer", "0.29.2"),  # needs no click (the README-only install has none)
    ("shellingham", "shellingham", "1.5.4"),
    ("annotated_doc", "annotated-doc", "0.0.7"),
    ("pydantic", "pydantic", "2.13.4"),
    ("pydantic_core", "pydantic-core", "2.46.4"),
    ("annotated_types", "annotated-types", "0.7.0"),
    ("typing_inspection", "typing-inspection", "0.4.2"),
    ("rich", "rich", "15.0.0"),
    ("markdown_it", "markdown-it-py", "4.3.0"),
    ("mdurl", "mdurl", "0.1.2"),
    ("pygments", "Pygments", "2.21.0"),
    ("psutil", "psutil", "7.2.2"),
    ("cloudpickle", "cloudpickle", "3.1.2"),
    ("pynvml", "nvidia-ml-py", "13.615.71"),
    ("numpy", "numpy", "2.4.6"),
    ("pytest", "pytest", "9.2.0"),
    ("pluggy", "pluggy", "1.7.0"),
    ("iniconfig", "iniconfig", "2.3.1"),
    ("xdist", "pytest-xdist", "3.8.0"),  # the tests' --test-workers above 1
    ("execnet", "execnet", "2.1.2"),
)
PIP_DOWNLOAD = (
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 "
    "--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 "
    "--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "
    "--platform manylinux1_x86_64 -d .whl"
)


# -- running a command ------------------------------------------------------------------
def _with_root_on_path() -> dict[str, str]:
    """This environment, the repository last on PYTHONPATH (autotune without an install)."""
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))
    return {**os.environ, "PYTHONPATH": path}


def run_command(argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Completed:
    """Run ``argv`` in its own process group. At ``timeout_s`` less a grace the group gets
    SIGTERM (a search, a burst series and a training run stop cleanly and print what they
    have), at ``timeout_s`` SIGKILL (a search's trials included). Stopped from outside
    (Ctrl-C, SIGTERM to the suite), the group is killed and the stop goes on."""
    env = _with_root_on_path()
    grace = min(STOP_GRACE_S, timeout_s / 4)
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stopped = False
    try:
        try:
            out, err = proc.communicate(timeout=timeout_s - grace)
        except subprocess.TimeoutExpired:
            stopped = True
            _signal_group(proc, signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                out, err = proc.communicate()
                return Completed(None, out or "", err or "", time.monotonic() - started, True)
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return Completed(proc.returncode, out or "", err or "", time.monotonic() - started, stopped)


def _signal_group(proc: subprocess.Popen[str], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


# -- the plan -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    """A step and the time the plan keeps for it (0: none; it runs on what is left)."""

    step: Step
    share_s: float


def plan(steps: Sequence[Step], limit_s: float) -> list[Planned]:
    """Each step's share of ``limit_s``: in priority order, as much as it wants of what is
    left, or none where that is under its minimum; in the order the steps run."""
    left = limit_s
    shares: dict[str, float] = {}
    for step in sorted(steps, key=lambda s: s.priority):
        give = min(step.want_s, left)
        shares[step.name] = give if give >= step.min_s else 0.0
        left -= shares[step.name]
    return [Planned(step, shares[step.name]) for step in steps]


def granted(planned: Sequence[Planned], index: int, left_s: float) -> tuple[float, str]:
    """The time step ``index`` gets with ``left_s`` left: what later planned steps keep
    aside, up to what it wants; with the reason it cannot run, where that is under its
    minimum ("" where it can)."""
    step = planned[index].step
    later = [p for p in planned[index + 1 :] if p.share_s > 0]
    kept = sum(p.share_s for p in later)
    give = min(step.want_s, left_s - kept)
    if give >= step.min_s:
        return give, ""
    if left_s <= 0:
        return 0.0, "the suite's time limit had passed"
    names = ", ".join(p.step.name for p in later)
    kept_text = f", {fmt_seconds(kept)} of it kept for {names}" if later else ""
    return 0.0, (
        f"{fmt_seconds(left_s)} left{kept_text}: under the {fmt_seconds(step.min_s)} it needs"
    )


def render_plan(planned: Sequence[Planned], limit_s: float) -> str:
    rows = []
    for p in planned:
        share = fmt_seconds(p.share_s) if p.share_s else "-"
        when = "its share, and what earlier steps leave" if p.share_s else "if time is left"
        rows.append([p.step.name, share, fmt_seconds(p.step.min_s), fmt_seconds(p.step.want_s),
                     when])  # fmt: skip
    table = render_table(["step", "share", "at least", "at most", "runs on"], rows,
                         align="lrrrl")  # fmt: skip
    return f"Plan within {fmt_seconds(limit_s)}, in the order the steps run:\n\n{table}"


# -- the suite ---------------------------------------------------------------------------
@dataclass(kw_only=True)
class Outcome:
    step: Step
    status: str  # ok | failed | timeout | skipped | interrupted
    limit_s: float = 0.0
    wall_s: float = 0.0
    result: str = ""
    section: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    runs: list[Completed] = field(default_factory=list)


def run_suite(
    steps: Sequence[Step],
    ctx: Context,
    *,
    runner: Runner = run_command,
    limit_s: float,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    clock: Callable[[], float] = time.monotonic,
    after_step: Callable[[list[Outcome]], None] = lambda outcomes: None,
) -> list[Outcome]:
    """Run ``steps`` in order within ``limit_s``, each with the time ``plan`` and
    ``granted`` give it; a failure is recorded and the next step runs. Each command's
    output is appended to ``steps.log`` beside the suite's files (the work folder where
    there are none), and ``after_step`` sees the outcomes so far after every step (the
    suite writes its files then, so a suite stopped from outside still leaves the steps
    it finished). Stopped from outside (KeyboardInterrupt), the step is recorded as
    interrupted and the stop goes on."""
    planned = plan(steps, limit_s)
    started = clock()
    outcomes: list[Outcome] = []
    for index, item in enumerate(planned):
        step = item.step
        give, why_not = granted(planned, index, limit_s - (clock() - started))
        outcome = Outcome(step=step, status="ok", limit_s=give)
        outcomes.append(outcome)
        if why_not:
            outcome.status, outcome.result = "skipped", why_not
        else:
            try:
                _run_step(outcome, dataclasses.replace(ctx, granted_s=give), runner, log)
            except KeyboardInterrupt:
                outcome.status, outcome.result = "interrupted", "the suite was stopped"
                _after(after_step, outcomes, log, step)
                raise
        log(f"[{step.name}] {outcome.status} in {fmt_seconds(outcome.wall_s)}: {outcome.result}")
        _after(after_step, outcomes, log, step)
    return outcomes


def _after(
    after_step: Callable[[list[Outcome]], None],
    outcomes: list[Outcome],
    log: Callable[[str], None],
    step: Step,
) -> None:
    try:
        after_step(outcomes)
    except OSError as exc:  # the files are written again at the end: the steps go on
        log(f"[{step.name}] could not write the results so far: {exc}")


def _run_step(outcome: Outcome, ctx: Context, runner: Runner, log: Callable[[str], None]) -> None:
    """One step's commands, each with what is left of its time, then its report (also of
    a step stopped at its limit: what it printed before it stopped may hold figures)."""
    step, left = outcome.step, outcome.limit_s
    try:
        commands = step.commands(ctx)
    except NotReady as exc:
        outcome.status, outcome.result = "skipped", str(exc)
        return
    for argv in commands:
        log(f"[{step.name}] $ {shlex.join(argv)}")
        done = runner(argv, timeout_s=max(left, 1.0), cwd=ROOT)
        outcome.runs.append(done)
        _keep_log(_log_path(ctx), f"{step.name}-{len(outcome.runs)}", argv, done)
        outcome.wall_s += done.wall_s
        left -= done.wall_s
        if done.timed_out:
            outcome.status = "timeout"
            outcome.result = f"stopped at its limit of {fmt_seconds(outcome.limit_s)}"
            break
    try:
        if outcome.status == "timeout" and len(outcome.runs) < len(commands):
            raise StepFailed(outcome.result)
        report = step.report(ctx, outcome.runs)
        outcome.section, outcome.figures = report.section, dict(report.figures)
        outcome.result = (
            f"{outcome.result}; {report.result}" if outcome.status == "timeout" else report.result
        )
    except Exception as exc:  # a failed check, or output the step could not parse
        text = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
        if outcome.status == "ok":
            outcome.status = "failed"
            outcome.result, _, outcome.section = text.partition("\n\n")
    if outcome.status in ("failed", "timeout") and outcome.runs:
        tail = _failure_tail(outcome.runs[-1])
        if tail:
            outcome.section += "\n\n```\n" + "\n".join(tail) + "\n```"


def _failure_tail(run: Completed, lines: int = 8) -> list[str]:
    """The end of a failed command's output: pytest's failure lines on stdout (its
    ``FAILED``/``ERROR`` summary and ``E`` lines; its warnings go to stderr), else the
    last lines of stderr (of stdout when stderr is empty)."""
    marked = [
        line
        for line in run.stdout.strip().splitlines()
        if line.startswith(("FAILED ", "ERROR ", "E "))
    ]
    return (marked or (run.stderr or run.stdout).strip().splitlines())[-lines:]


STEPS_LOG = "steps.log"  # every command's output, one file (a lent machine returns 8)
LOG_TAIL_CHARS = 200_000  # of each stream of each command: the end, where a failure is


def _log_path(ctx: Context) -> Path:
    """Where the commands' output goes: ``steps.log`` beside the suite's files, which come
    back from a lent machine (a failure read there, not found again on the next lease),
    in the work folder where there are none. One file: a lent machine returns at most 8
    from its output folder, which the suite's own (at most 5) leave room for."""
    return (ctx.work if ctx.out_dir is None else ctx.out_dir) / STEPS_LOG


def _keep_log(path: Path, name: str, argv: Sequence[str], done: Completed) -> None:
    """Append one command's output (the end of each stream) to the log, under ``name``."""
    code = "stopped at its limit, " if done.timed_out else ""
    code += "killed" if done.returncode is None else f"exit {done.returncode}"
    text = (
        f"==== {name}\n$ {shlex.join(argv)}\n# {code} after {done.wall_s:.1f} s\n"
        f"## stdout\n{done.stdout[-LOG_TAIL_CHARS:]}\n"
        f"## stderr\n{done.stderr[-LOG_TAIL_CHARS:]}\n"
    )
    with contextlib.suppress(OSError):  # a log helps read a failure, never causes one
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(text)


# -- what the suite writes -----------------------------------------------------------------
def render(
    outcomes: Sequence[Outcome],
    *,
    command: str,
    total_s: float,
    planned: Sequence[str] = (),
    limit_s: float | None = None,
) -> str:
    """The suite's Markdown: the steps table, then each step's section. ``planned``: the
    names of all the steps asked for, when the file is written before all have run."""
    rows = []
    for o in outcomes:
        wall = fmt_seconds(o.wall_s) if o.runs else "-"
        limit = fmt_seconds(o.limit_s) if o.limit_s else "-"
        result = o.result.splitlines()[0] if o.result else ""
        rows.append([o.step.name, o.status, limit, wall, result])
    waiting = [name for name in planned if name not in {o.step.name for o in outcomes}]
    within = f" within {fmt_seconds(limit_s)}" if limit_s else ""
    parts = [
        f"## GPU suite, {utc_now()}",
        f"`{command}`: {len(outcomes)} steps in {fmt_seconds(total_s)}{within}, "
        f"{sum(o.status == 'ok' for o in outcomes)} ok"
        + (
            f" ({len(waiting)} of {len(planned)} not run yet: {', '.join(waiting)})."
            if waiting
            else "."
        ),
        render_table(["step", "status", "limit", "wall", "result"], rows),
    ]
    for o in outcomes:
        if o.section.strip():
            parts.append(f"### {o.step.title}\n\n{o.section.strip()}")
    return "\n\n".join(parts) + "\n"


def figures_json(
    outcomes: Sequence[Outcome],
    *,
    command: str,
    total_s: float,
    planned: Sequence[str],
    limit_s: float,
) -> str:
    """The suite's figures as JSON: each step's status, limit, wall time, result and the
    figures its report read; the steps not run yet."""
    done = {o.step.name for o in outcomes}
    data = {
        "command": command,
        "written": utc_now(),
        "within_s": limit_s,
        "elapsed_s": round(total_s, 1),
        "steps": [
            {
                "name": o.step.name,
                "status": o.status,
                "limit_s": round(o.limit_s, 1),
                "wall_s": round(o.wall_s, 1),
                "result": o.result,
                "figures": o.figures,
            }
            for o in outcomes
        ],
        "not_run_yet": [name for name in planned if name not in done],
    }
    return json.dumps(data, indent=1, default=str) + "\n"


def write_results(
    out: Path,
    outcomes: Sequence[Outcome],
    *,
    command: str,
    total_s: float,
    planned: Sequence[str],
    limit_s: float,
) -> str:
    """``out`` (Markdown) and ``out`` with ``.json``, each written atomically; the text."""
    text = render(outcomes, command=command, total_s=total_s, planned=planned, limit_s=limit_s)
    atomic_write_text(out, text)
    figures = figures_json(
        outcomes, command=command, total_s=total_s, planned=planned, limit_s=limit_s
    )
    atomic_write_text(out.with_suffix(".json"), figures)
    return text


# -- what must be there first ------------------------------------------------------------
# What the steps' commands import, tried in a fresh interpreter before any step runs, so
# that a package the machine lacks (or has in a version autotune cannot use) stops the
# suite at once rather than a step in the middle of a lease. Not each module of WHEELS:
# typer 0.29 needs pydantic, an older typer on the machine may not, and it works too.
IMPORT_CHECK = """
import importlib, json, sys
problems = []
def attempt(what, run):
    try:
        run()
    except ModuleNotFoundError as exc:
        problems.append({"in": what, "module": exc.name})
    except Exception as exc:
        problems.append({"in": what, "error": f"{type(exc).__name__}: {exc}"})
for name in sys.argv[1:]:
    attempt(name, lambda: importlib.import_module(name))
attempt("optuna's SQLite storage",
        lambda: importlib.import_module("optuna").storages.RDBStorage("sqlite:///:memory:"))
print(json.dumps(problems))
"""
CHECKED_MODULES = ("autotune.cli.main", "optuna", "yaml", "rich", "psutil", "pynvml", "numpy",
                   "cloudpickle", "pytest")  # fmt: skip
TORCHAO = ("torchao", "torchao", "0.17.0")  # optional: the float8 variant and its tests
IMPORT_CHECK_TIMEOUT_S = 120.0  # its imports (no torch among them) on a loaded machine


def import_problems() -> list[dict[str, str]]:
    """What fails to import here, as ``IMPORT_CHECK`` finds it: each a dict of ``in`` (the
    import tried) and ``module`` (the one missing) or ``error`` (any other failure)."""
    env = _with_root_on_path()
    try:
        done = subprocess.run([sys.executable, "-c", IMPORT_CHECK, *CHECKED_MODULES],
                              capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=IMPORT_CHECK_TIMEOUT_S, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return [{"in": "the import check",
                 "error": f"no answer within {IMPORT_CHECK_TIMEOUT_S:.0f} s"}]  # fmt: skip
    try:
        return list(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        return [{"in": "the import check", "error": (done.stderr.strip() or "no output")[-500:]}]


def missing_wheels(
    problems: Sequence[dict[str, str]],
    find: Callable[[str], object] = importlib.util.find_spec,
) -> list[tuple[str, str]]:
    """The (distribution, version) of each wheel to carry: those of the modules the import
    check found missing, then every other module of ``WHEELS`` not installed here."""
    pins = {module: (dist, version) for module, dist, version in WHEELS}
    named = [p["module"].split(".")[0] for p in problems if p.get("module")]
    wanted = dict.fromkeys(pins.get(m, (m, "")) for m in named)
    wanted.update(dict.fromkeys(pins[m] for m, _d, _v in WHEELS if find(m) is None))
    return list(wanted)


def _pins(wheels: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{dist}=={version}" if version else dist for dist, version in wheels)


def missing_message(problems: Sequence[dict[str, str]], missing: Sequence[tuple[str, str]]) -> str:
    failed = "; ".join(
        f"{p['in']}: " + (f"no module {p['module']!r}" if p.get("module") else p["error"])
        for p in problems
    )
    text = (
        f"the suite's commands cannot run here ({failed}). The packages to carry: "
        f"{', '.join(d for d, _ in missing) or 'none is missing; see the error'}. On a "
        f"machine with network, fetch every wheel the suite names into .whl/ of this "
        f"repository:\n\n    python benchmarks/gpu_suite.py --fetch-wheels\n\n(or only "
        f"these: {PIP_DOWNLOAD} {_pins(missing)})\n\nthen here:\n\n    bash "
        "benchmarks/gpu_lease.sh\n\n(which installs the carried wheels this machine "
        "lacks; the module docstring of benchmarks/gpu_suite.py says more)"
    )
    if any(p.get("error") for p in problems):  # there, but too old or broken
        text += (
            ". A package this machine has but cannot use is not replaced by gpu_lease.sh: "
            "install its carried wheel in front of it, python3 -m pip install -q "
            "--no-index --no-deps --upgrade --target /tmp/site .whl/NAME-*.whl"
        )
    return text


def fetch_wheels(
    run: Callable[[list[str]], int] = lambda argv: subprocess.call(argv, cwd=ROOT),
) -> int:
    """Download the wheel of every package the suite names (``WHEELS``, torchao too) for
    the lent machine's Python into .whl/: a lease installs those it lacks."""
    argv = [*shlex.split(PIP_DOWNLOAD), *shlex.split(_pins([(d, v) for _m, d, v in
                                                             (*WHEELS, TORCHAO)]))]  # fmt: skip
    print(shlex.join(argv), file=sys.stderr)
    return run(argv)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0


# -- the command line ----------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("gpu_suite.md"),
        help="the Markdown file; its .json and the presets are written beside it",
    )  # fmt: skip
    parser.add_argument(
        "--within", default=DEFAULT_WITHIN,
        help=f"the time limit of the whole suite: 9m, 540s, 1h ({DEFAULT_WITHIN})",
    )  # fmt: skip
    parser.add_argument(
        "--steps", default=None,
        help="a comma-separated choice, in the order they run (default: "
        + ",".join(LEASE_PLAN) + "); of " + ",".join(s.name for s in STEPS),
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument(
        "--fetch-wheels", action="store_true",
        help="download into .whl/ the wheels of every package the suite needs besides "
        "torch, for a lent machine's Python 3.12 (needs network), and exit",
    )  # fmt: skip
    parser.add_argument(
        "--winner", type=Path, default=None,
        help="gpt2-124m's winning preset from an earlier run: no search-gpt2 this time",
    )  # fmt: skip
    parser.add_argument(
        "--work", type=Path, default=None,
        help="folder for the steps' studies, files and logs (default: temporary, removed); "
        "give a fresh one: a search resumes a study it finds there",
    )  # fmt: skip
    parser.add_argument(
        "--search-timeout", default=None,
        help="mu's search step's --timeout, e.g. 3m (default: the search's own default)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-search-timeout", default="2m", help="compare.py's --search-timeout (2m)"
    )
    parser.add_argument(
        "--compare-args", default="",
        help="more options for compare.py, one string: '--policies naive,autotune --repeats 1'",
    )  # fmt: skip
    parser.add_argument(
        "--test-workers", type=int, default=1,
        help="processes for the gpu-marked tests (pytest-xdist's -n; 1: one process). "
        "Where NVML lists no process (a VM), a trial's CUDA context is the device-wide "
        "delta, which other tests' processes inflate: the memory tests need 1",
    )  # fmt: skip
    return parser


def _select(parser: argparse.ArgumentParser, names: str | None, winner: Path | None) -> list[Step]:
    """The steps asked for, in the order they run; usage errors exit 2."""
    known = {s.name: s for s in STEPS}
    wanted = [n.strip() for n in (names or ",".join(LEASE_PLAN)).split(",") if n.strip()]
    bad = [n for n in wanted if n not in known]
    if bad or not wanted:
        parser.error(
            f"--steps: unknown step(s) {', '.join(bad) or 'none given'}; the steps are "
            f"{', '.join(known)}"
        )
    if winner is not None:
        if not winner.is_file():
            parser.error(f"--winner {str(winner)!r}: no such file")
        wanted = [n for n in wanted if n != "search-gpt2"]
    for step, needed in NEEDS.items():
        given = needed in wanted or (needed == "search-gpt2" and winner is not None)
        if step in wanted and not given:
            extra = " or --winner" if needed == "search-gpt2" else ""
            parser.error(f"--steps: {step} needs {needed}{extra} (it uses that search's preset)")
        if step in wanted and needed in wanted and wanted.index(needed) > wanted.index(step):
            parser.error(f"--steps: {step} runs on {needed}'s preset, so it comes after it")
    return [known[n] for n in dict.fromkeys(wanted)]


def _options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    if args.test_workers < 1:
        parser.error(f"--test-workers must be at least 1, got {args.test_workers}")
    try:
        compare_args = tuple(shlex.split(args.compare_args))
    except ValueError as exc:  # an unclosed quote
        parser.error(f"--compare-args {args.compare_args!r}: {exc}")
    return {
        "search_timeout": args.search_timeout,
        "compare_search_timeout": args.compare_search_timeout,
        "compare_args": compare_args,
        "test_workers": args.test_workers,
        "winner_path": args.winner,
    }


def _dry_run(steps: Sequence[Step], ctx: Context, limit_s: float) -> int:
    planned = plan(steps, limit_s)
    print(render_plan(planned, limit_s) + "\n")
    for p in planned:
        give = p.share_s or p.step.min_s
        try:
            commands = p.step.commands(dataclasses.replace(ctx, granted_s=give))
        except NotReady as exc:
            print(f"[{p.step.name}] built when it starts: {exc}")
            continue
        for command in commands:
            print(f"[{p.step.name}, {fmt_seconds(give)}] {shlex.join(command)}")
    return 0


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner = run_command,
    has_cuda: Callable[[], bool] = cuda_available,
    find: Callable[[str], object] = importlib.util.find_spec,
    check_imports: Callable[[], list[dict[str, str]]] = import_problems,
) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels()
    try:
        limit_s = parse_duration(args.within, what="--within")
    except UsageError as exc:
        parser.error(str(exc))
    steps = _select(parser, args.steps, args.winner)
    options = _options(parser, args)
    out_dir = args.out.parent
    if args.dry_run:
        return _dry_run(steps, Context(work=args.work or Path("<work>"), out_dir=out_dir,
                                       **options), limit_s)  # fmt: skip
    problems = check_imports()
    if problems:
        print(missing_message(problems, missing_wheels(problems, find)), file=sys.stderr)
        return 2
    if not has_cuda():
        print(
            f"{NO_CUDA} (torch.cuda.is_available() is False here); nothing was run", file=sys.stderr
        )
        return 2
    command = shlex.join(
        ["python", "benchmarks/gpu_suite.py", *(argv if argv is not None else sys.argv[1:])]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        ctx = Context(work=work, out_dir=out_dir, **options)
        return _run(steps, ctx, runner=runner, out=args.out, command=command, limit_s=limit_s)


def _run(
    steps: Sequence[Step], ctx: Context, *, runner: Runner, out: Path, command: str,
    limit_s: float,
) -> int:  # fmt: skip
    """The suite, its files written after every step and at the end; SIGTERM stops it as
    Ctrl-C does (the running command killed, the files kept): exit 143 or 130."""
    started = time.monotonic()
    names = [s.name for s in steps]

    def text(outcomes: Sequence[Outcome]) -> str:
        return write_results(out, outcomes, command=command, total_s=time.monotonic() - started,
                             planned=names, limit_s=limit_s)  # fmt: skip

    def write(outcomes: list[Outcome]) -> None:
        text(outcomes)

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(128 + signum)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcomes = run_suite(steps, ctx, runner=runner, limit_s=limit_s, after_step=write)
    except KeyboardInterrupt as stop:
        print(f"the suite was stopped; what finished is in {out}", file=sys.stderr)
        return int(stop.args[0]) if stop.args else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(text(outcomes))
    print(f"written to {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
