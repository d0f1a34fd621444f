"""The GPU suite: one command that measures autotune on one CUDA GPU in at most 25 minutes
and writes one Markdown file of tables ready for BENCHMARKS.md.

Steps, in order, each a subprocess with its own time limit (the suite keeps going when one
fails, and its table says so; a step that would start past the suite's limit is skipped):

1. ``probe``: ``autotune probe --json``: the card, the driver, torch.
2. ``gpu-tests``: the ``gpu``-marked tests (``pytest -m gpu``).
3. ``oom``: the budget is enforced inside a trial: a burst of gpt2-124m at micro-batch 64,
   sequence 1024 under an 8 GB budget must end as ``oom`` in its own process, and a burst
   right after it on the same device must run (the device was not taken down).
4. ``search``: ``autotune search --model mu --budget 8GB`` with its defaults, timed; the
   budget check: the winner's measured peak at most 8 GB; the memory model's error and the
   OOMs executed per class.
5. ``train``: 300 steps of ``autotune train`` on that search's preset, its steady tokens/s
   against the preset's.
6. ``compare-gpt2``: ``benchmarks/compare.py`` for gpt2-124m, sequence 1024, 24 GB (its table
   has the MFU column on a GPU whose peak is known); the search and the grid are capped
   (``--search-timeout 2m --grid-max 0``) to fit the suite's limit.
7. ``compare-mu``: ``benchmarks/compare.py`` for mu, 8 GB, capped the same way.
8. ``knobs``: ``benchmarks/model_knobs.py`` for gpt2-124m at 24 GB, one round: the chunked
   loss and selective checkpointing against the base config, tokens/s and peak memory.

Usage (from the repository root)::

    python benchmarks/gpu_suite.py --out gpu_suite.md
    python benchmarks/gpu_suite.py --out gpu_suite.md --steps probe,oom,search,train
    python benchmarks/gpu_suite.py --dry-run          # the commands, nothing run

**A short lease.** The whole suite takes up to 25 minutes. On 2026-11-26 an H200 lent for
15 minutes (its start included) ran, in one 10-minute call::

    python benchmarks/gpu_suite.py --out $OUT/gpu_suite.md --work /tmp/gw --limit 9 \\
        --search-timeout 2m --compare-search-timeout 45s \\
        --compare-args '--policies naive,hand-tuned,autotune --repeats 1' \\
        --steps probe,gpu-tests,oom,search,train,compare-gpt2

(probe 6 s, gpu tests 2 min 12 s in 6 processes, oom 33 s, search 2 min 06 s, train 31 s,
compare-gpt2 3 min 04 s), and a 3-minute search of gpt2-124m on the warm machine after it.
Keep the gpu tests in one process (``--test-workers 1``) where memory figures matter:
BENCHMARKS.md says why.

Without a CUDA device the suite refuses (exit 2: "no CUDA device: the GPU suite needs
one"); it never writes CPU figures in a GPU table.

**A machine with no network.** The suite needs torch with CUDA and autotune's
dependencies; it checks them first and, when some are missing, prints which wheels to
carry and exits 2. On a machine where only torch and the usual scientific stack (numpy,
PyYAML, rich, typer, psutil, ...) are installed, the missing ones are typically optuna and
its dependencies: ``optuna alembic SQLAlchemy Mako colorlog`` (plus any of ``PyYAML tqdm
packaging MarkupSafe typing-extensions`` that is absent). Fetch them on a machine with
network, for Python 3.12 on x86-64 Linux, into ``.whl/`` of the repository::

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_28_x86_64 \\
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \\
        optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0

(``--no-deps`` fetches nothing else: every missing package must be named; pure-Python
wheels such as optuna's match any platform. If pip finds no SQLAlchemy wheel, add
``--platform manylinux_2_N_x86_64`` for another N: pip matches N exactly.) On the GPU
machine, install them beside the system's packages and run the suite::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_suite.py --out gpu_suite.md

The versions are the ones autotune is tested with; the suite prints the exact command for
whatever is missing where it runs.
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Any, Protocol

from _common import fmt_float, fmt_ratio, fmt_seconds, render_table, utc_now

ROOT = Path(__file__).resolve().parent.parent
SUITE_LIMIT_S = 25 * 60
BUDGET_BYTES = 8 * 10**9  # the budget check's 8 GB (autotune's GB are 10^9 bytes)
TRAIN_STEPS = 300
NO_CUDA = "no CUDA device: the GPU suite needs one"

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
    ("typer", "typer", "0.29.2"),
    ("click", "click", "8.5.1"),
    ("shellingham", "shellingham", "1.5.4"),
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
)
PIP_DOWNLOAD = (
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 "
    "--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 "
    "--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "
    "--platform manylinux1_x86_64 -d .whl"
)


# -- running a command ------------------------------------------------------------------
@dataclass(frozen=True)
class Completed:
    """How one step's command ended."""

    returncode: int | None  # None: killed at its time limit
    stdout: str
    stderr: str
    wall_s: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Completed: ...


def run_command(argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Completed:
    """Run ``argv`` in its own process group; at ``timeout_s`` the whole group is killed
    (a search's trials included)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])),
    }
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
    try:
        out, err = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Completed(code, out or "", err or "", time.monotonic() - started)


# -- the steps ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Context:
    """What the steps share: where they write, the interpreter, and earlier steps' files."""

    work: Path  # a folder for the steps' files
    python: str = sys.executable
    search_timeout: str | None = None  # the search step's --timeout (None: its default)
    compare_search_timeout: str = "2m"  # compare.py's --search-timeout
    compare_args: tuple[str, ...] = ()  # more of compare.py's options (--policies, --repeats)
    test_workers: int = 1  # pytest processes for the gpu-marked tests (-n, pytest-xdist)

    def autotune(self, *args: str) -> list[str]:
        return [self.python, "-m", "autotune", *args]

    @property
    def preset(self) -> Path:
        return self.work / "mu-8GB.yaml"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step: its commands (run in order, each with the step's time limit left) and how
    their output becomes a Markdown section (and a one-line result for the steps table)."""

    name: str
    title: str
    timeout_s: float
    commands: Callable[[Context], list[list[str]]]
    report: Callable[[Context, list[Completed]], tuple[str, str]]  # (result line, section)


@dataclass(kw_only=True)
class Outcome:
    step: Step
    status: str  # ok | failed | timeout | skipped
    wall_s: float = 0.0
    result: str = ""
    section: str = ""
    runs: list[Completed] = field(default_factory=list)


class StepFailed(Exception):
    """A step ran but its output says it did not do what it checks."""


def _json(text: str) -> Any:
    """The last JSON document a command printed on stdout (progress may precede it)."""
    start = text.find("{")
    if start < 0:
        raise StepFailed("no JSON on stdout")
    return json.loads(text[start:])


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f} GB"


# 1. probe
def _probe_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    profile = _json(runs[0].stdout)
    gpus = profile.get("gpus") or []
    if not gpus:
        raise StepFailed("autotune probe found no GPU")
    sw = profile.get("software") or {}
    rows = [
        [
            f"cuda:{g.get('index', 0)}",
            str(g.get("name")),
            _gb(g.get("total_memory_bytes")),
            ".".join(map(str, g.get("compute_capability") or [])),
            str(g.get("driver_version") or "-"),
            str(sw.get("torch_version")),
            str(sw.get("torch_cuda_version") or "-"),
        ]
        for g in gpus
    ]
    table = render_table(["device", "GPU", "memory", "CC", "driver", "torch", "CUDA"], rows)
    return f"{gpus[0].get('name')}, {_gb(gpus[0].get('total_memory_bytes'))}", table


# 2. the gpu-marked tests
# every test file with a gpu-marked test (named: the device may lack the packages some
# other test files import, such as transformers or lightning)
GPU_TEST_FILES = (
    "tests/test_burst.py",
    "tests/test_gpu.py",
    "tests/test_hardware.py",
    "tests/test_parallel.py",
    "tests/test_train.py",
)


def _workers(ctx: Context) -> list[str]:
    """``-n N`` when the tests are spread over N processes (each burst is a process of its
    own already; the tests check behaviour, not speed, so they may share the card)."""
    return ["-n", str(ctx.test_workers)] if ctx.test_workers > 1 else []


def _tests_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    run = runs[0]
    summary = next(
        (line.strip("= ") for line in reversed(run.stdout.splitlines()) if " in " in line), ""
    )
    if run.returncode != 0:
        raise StepFailed(f"pytest exit {run.returncode}: {summary or 'no summary'}")
    return summary, f"`pytest -m gpu {' '.join(GPU_TEST_FILES)}`: {summary}"


# 3. an over-budget config ends as oom in its own trial; the device still runs the next
def _oom_commands(ctx: Context) -> list[list[str]]:
    big = ["--model", "gpt2-124m", "--micro-batch", "64", "--seq-len", "1024"]
    small = ["--model", "mu", "--micro-batch", "4"]
    common = ["--device", "cuda", "--budget", "8GB", "--steps", "3", "--warmup", "1", "--json"]
    return [ctx.autotune("bench", *big, *common), ctx.autotune("bench", *small, *common)]


def _oom_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    big, small = (_json(r.stdout) for r in runs)
    rows = [
        ["gpt2-124m mb 64 x seq 1024, 8 GB", "oom", str(big.get("status")),
         _gb(big.get("peak_memory_bytes")), str(big.get("reason") or "")[:80]],
        ["mu mb 4 right after it, 8 GB", "ok", str(small.get("status")),
         _gb(small.get("peak_memory_bytes")), str(small.get("reason") or "")[:80]],
    ]  # fmt: skip
    table = render_table(["burst", "expected", "status", "peak", "reason"], rows)
    if big.get("status") != "oom" or small.get("status") != "ok":
        raise StepFailed(
            f"expected oom then ok, got {big.get('status')} then {small.get('status')}\n\n{table}"
        )
    return "oom in its own trial; the next burst ran", table


# 4. the search with defaults, and the budget check on its winner
def _search_commands(ctx: Context) -> list[list[str]]:
    return [
        ctx.autotune(
            "search", "--model", "mu", "--budget", "8GB", "--device", "cuda", "--json",
            "--output", str(ctx.preset), "--storage", f"sqlite:///{ctx.work / 'mu-8GB.db'}",
            *(["--timeout", ctx.search_timeout] if ctx.search_timeout else []),
        )
    ]  # fmt: skip


def _search_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    run = runs[0]
    found = _json(run.stdout)
    best = found.get("best") or {}
    counts = found.get("counts") or {}
    memory = found.get("memory_model") or {}
    peak = best.get("peak_memory_bytes")
    within = peak is not None and peak <= BUDGET_BYTES
    ooms = memory.get("ooms_executed") or {}
    edge = ", ".join(f"#{n}" for n in memory.get("at_edge") or []) or "none"
    measured = f"{counts.get('measured')} / {counts.get('infeasible')} / {counts.get('pruned')}"
    error = f"{memory.get('predictions', 0)}, {fmt_float(memory.get('mean_abs_error_pct'))}%"
    rows = [
        ["wall time (search + race)", fmt_seconds(run.wall_s)],
        ["trials measured / infeasible / pruned", measured],
        ["winner", _summary(best.get("config") or {})],
        [f"winner {found.get('unit', 'tokens/s')}", fmt_float(best.get("throughput"))],
        ["speedup over naive (race)", fmt_ratio(found.get("speedup"))],
        ["winner's peak (budget 8 GB)", f"{_gb(peak)}: {'within' if within else 'OVER'}"],
        ["memory model: predictions, mean abs error", error],
        ["executed OOMs per class (target: at most 1)", _counts(ooms)],
        ["trials at the edge of the budget", edge],
    ]
    table = render_table(["autotune search --model mu --budget 8GB", "figure"], rows)
    if not within:
        raise StepFailed(f"the winner's peak {_gb(peak)} is over the 8 GB budget\n\n{table}")
    winner = fmt_float(best.get("throughput"))
    return f"{fmt_seconds(run.wall_s)}, winner {winner} {found.get('unit')}", table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "none"


def _summary(config: dict[str, Any]) -> str:
    """``mb 8x4 seq 128 bf16 ckpt compile=default`` (the suite imports no autotune)."""
    if not config:
        return "-"
    parts = [f"mb {config.get('micro_batch')}x{config.get('grad_accum')}"]
    parts += [f"seq {config.get('seq_len')}", str(config.get("precision"))]
    parts += ["ckpt"] if config.get("activation_checkpointing") else []
    parts += [f"compile={config['compile']}"] if config.get("compile", "off") != "off" else []
    parts += [f"workers={config['num_workers']}"] if config.get("num_workers") else []
    parts += [f"{k}={v}" for k, v in (config.get("knobs") or {}).items()]
    return " ".join(parts)


# 5. the full run against the preset's figure
def _train_commands(ctx: Context) -> list[list[str]]:
    return [
        ctx.autotune(
            "train", "--preset", str(ctx.preset), "--max-steps", str(TRAIN_STEPS),
            "--out", str(ctx.work / "train-mu"), "--device", "cuda",
        )
    ]  # fmt: skip


def _train_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    if runs[0].returncode != 0:
        raise StepFailed(f"autotune train exit {runs[0].returncode}")
    summary = json.loads((ctx.work / "train-mu" / "summary.json").read_text())
    preset_tps = _preset_tokens_per_s(ctx.preset)
    train_tps = summary.get("steady_tokens_per_s")
    ratio = train_tps / preset_tps if train_tps and preset_tps else None
    rows = [[
        str(summary.get("steps")), fmt_float(preset_tps), fmt_float(train_tps), fmt_ratio(ratio),
        fmt_seconds(runs[0].wall_s),
    ]]  # fmt: skip
    headers = ["steps", "preset tokens/s", "train steady tokens/s", "train / preset", "wall"]
    return f"train / preset {fmt_ratio(ratio)}", render_table(headers, rows, align="rrrrr")


def _preset_tokens_per_s(path: Path) -> float | None:
    import yaml

    data = yaml.safe_load(path.read_text())
    return (data.get("measured") or {}).get("tokens_per_s")


# 6, 7. compare.py
def _compare(model: str, budget: str, *extra: str) -> Callable[[Context], list[list[str]]]:
    def commands(ctx: Context) -> list[list[str]]:
        return [[
            ctx.python, str(ROOT / "benchmarks" / "compare.py"), "--model", model, "--device",
            "cuda", "--budget", budget, "--search-timeout", ctx.compare_search_timeout,
            "--grid-max", "0", "--out",
            str(ctx.work / f"compare-{model}"), *extra, *ctx.compare_args,
        ]]  # fmt: skip

    return commands


def _compare_report(model: str) -> Callable[[Context, list[Completed]], tuple[str, str]]:
    def report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
        path = ctx.work / f"compare-{model}" / "compare.md"
        if runs[0].returncode != 0 or not path.exists():
            raise StepFailed(f"compare.py exit {runs[0].returncode}, no {path.name}")
        text = path.read_text().strip()
        # compare.md starts with its own title: below the step's heading in the suite's file
        text = "\n".join(
            "###" + line if line.startswith("#") else line for line in text.splitlines()
        )
        return f"{fmt_seconds(runs[0].wall_s)}", text

    return report


# 8. the model knobs against gpt2-124m's base: the chunked loss's memory at a 50k vocabulary
KNOB_VARIANTS = "base,loss=chunked,checkpointing,checkpointing+every=2"


def _knobs_commands(ctx: Context) -> list[list[str]]:
    return [[
        ctx.python, str(ROOT / "benchmarks" / "model_knobs.py"), "--device", "cuda",
        "--models", "gpt2-124m", "--budget", "24GB", "--rounds", "1", "--steps", "10",
        "--variants", KNOB_VARIANTS,
    ]]  # fmt: skip


def _knobs_report(ctx: Context, runs: list[Completed]) -> tuple[str, str]:
    run = runs[0]
    if run.returncode != 0:
        raise StepFailed(f"model_knobs.py exit {run.returncode}")
    lines = run.stdout.strip().splitlines()
    table = [line for line in lines if line.startswith("|")]
    if not table:
        raise StepFailed("model_knobs.py printed no table")
    chunked = next((line for line in table if "| loss=chunked" in line), "")
    peak_ratio = chunked.rstrip(" |").rsplit("|", 1)[-1].strip() if chunked else "-"
    return f"loss=chunked peak {peak_ratio} the base's", "\n".join(lines)


STEPS: tuple[Step, ...] = (
    Step(name="probe", title="autotune probe", timeout_s=60,
         commands=lambda ctx: [ctx.autotune("probe", "--json")], report=_probe_report),
    Step(name="gpu-tests", title="gpu-marked tests", timeout_s=180,
         commands=lambda ctx: [[ctx.python, "-m", "pytest", "-m", "gpu", "-q", "-p",
                                "no:cacheprovider", *_workers(ctx), *GPU_TEST_FILES]],
         report=_tests_report),
    Step(name="oom", title="Budget check: an over-budget config ends as oom in its own trial",
         timeout_s=150, commands=_oom_commands, report=_oom_report),
    Step(name="search", title="autotune search --model mu --budget 8GB (defaults), timed",
         timeout_s=540, commands=_search_commands, report=_search_report),
    Step(name="train", title=f"{TRAIN_STEPS} steps of autotune train on the winning preset",
         timeout_s=180, commands=_train_commands, report=_train_report),
    Step(name="compare-gpt2", title="compare.py gpt2-124m, sequence 1024, 24 GB",
         timeout_s=300, commands=_compare("gpt2-124m", "24GB", "--seq-len", "1024"),
         report=_compare_report("gpt2-124m")),
    Step(name="compare-mu", title="compare.py mu, 8 GB", timeout_s=180,
         commands=_compare("mu", "8GB"), report=_compare_report("mu")),
    Step(name="knobs", title="model_knobs.py gpt2-124m, sequence 1024, 24 GB", timeout_s=240,
         commands=_knobs_commands, report=_knobs_report),
)  # fmt: skip


# -- the suite ---------------------------------------------------------------------------
def run_suite(
    steps: Sequence[Step],
    ctx: Context,
    *,
    runner: Runner = run_command,
    limit_s: float = SUITE_LIMIT_S,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    clock: Callable[[], float] = time.monotonic,
    after_step: Callable[[list[Outcome]], None] = lambda outcomes: None,
) -> list[Outcome]:
    """Run ``steps`` in order; a failure is recorded and the next step runs. A step's
    commands share its time limit, capped by what is left of the suite's ``limit_s``.
    Each command's output is kept in the work folder (``<step>-<n>.log``), and
    ``after_step`` sees the outcomes so far after every step (the suite writes its file
    then, so a suite stopped from outside still leaves the steps it finished)."""
    started = clock()
    outcomes = []
    for step in steps:
        left = limit_s - (clock() - started)
        outcome = Outcome(step=step, status="ok")
        outcomes.append(outcome)
        if left <= 0:
            outcome.status, outcome.result = "skipped", "the suite's time limit had passed"
            log(f"[{step.name}] skipped: {outcome.result}")
            continue
        step_left = min(step.timeout_s, left)
        for argv in step.commands(ctx):
            log(f"[{step.name}] $ {shlex.join(argv)}")
            done = runner(argv, timeout_s=max(step_left, 1.0), cwd=ROOT)
            outcome.runs.append(done)
            _keep_log(ctx.work / f"{step.name}-{len(outcome.runs)}.log", argv, done)
            outcome.wall_s += done.wall_s
            step_left -= done.wall_s
            if done.timed_out:
                outcome.status = "timeout"
                outcome.result = f"killed at its limit of {fmt_seconds(min(step.timeout_s, left))}"
                break
        if outcome.status == "ok":
            try:
                outcome.result, outcome.section = step.report(ctx, outcome.runs)
            except Exception as exc:  # a failed check, or output the step could not parse
                outcome.status = "failed"
                text = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
                outcome.result, _, outcome.section = text.partition("\n\n")
        if outcome.status in ("failed", "timeout") and outcome.runs:
            tail = _failure_tail(outcome.runs[-1])
            if tail:
                outcome.section += "\n\n```\n" + "\n".join(tail) + "\n```"
        log(f"[{step.name}] {outcome.status} in {fmt_seconds(outcome.wall_s)}: {outcome.result}")
        try:
            after_step(outcomes)
        except OSError as exc:  # the file is written again at the end: the steps go on
            log(f"[{step.name}] could not write the results so far: {exc}")
    return outcomes


def _compare_args(text: str) -> tuple[str, ...]:
    """``--compare-args`` split as a shell would; one clear error where it cannot be."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:  # an unclosed quote
        raise SystemExit(f"error: --compare-args {text!r}: {exc}") from None


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


def _keep_log(path: Path, argv: Sequence[str], done: Completed) -> None:
    code = "killed at its limit" if done.timed_out else f"exit {done.returncode}"
    text = (
        f"$ {shlex.join(argv)}\n# {code} after {done.wall_s:.1f} s\n"
        f"## stdout\n{done.stdout}\n## stderr\n{done.stderr}\n"
    )
    with contextlib.suppress(OSError):  # a log helps read a failure, never causes one
        path.write_text(text)


def render(
    outcomes: Sequence[Outcome], *, command: str, total_s: float, planned: int | None = None
) -> str:
    """The suite's Markdown: the steps table, then each step's section. ``planned``: the
    number of steps asked for, when the file is written before all have run."""
    rows = []
    for o in outcomes:
        wall = fmt_seconds(o.wall_s) if o.runs else "-"
        rows.append([o.step.name, o.status, wall, o.result.splitlines()[0] if o.result else ""])
    parts = [
        f"## GPU suite, {utc_now()}",
        f"`{command}`: {len(outcomes)} steps in {fmt_seconds(total_s)}, "
        f"{sum(o.status == 'ok' for o in outcomes)} ok"
        + (
            f" ({planned - len(outcomes)} of {planned} not run yet)."
            if planned and planned > len(outcomes)
            else "."
        ),
        render_table(["step", "status", "wall", "result"], rows),
    ]
    for o in outcomes:
        if o.section.strip():
            parts.append(f"### {o.step.title}\n\n{o.section.strip()}")
    return "\n\n".join(parts) + "\n"


# -- what must be there first ------------------------------------------------------------
def missing_wheels(
    find: Callable[[str], object] = importlib.util.find_spec,
) -> list[tuple[str, str]]:
    """The (distribution, version) of every needed module that is not installed."""
    return [(dist, version) for module, dist, version in WHEELS if find(module) is None]


def missing_message(missing: Sequence[tuple[str, str]]) -> str:
    names = " ".join(f"{dist}=={version}" for dist, version in missing)
    return (
        f"missing Python packages: {', '.join(d for d, _ in missing)}. On a machine with "
        f"network, fetch their wheels into .whl/ of this repository:\n\n    {PIP_DOWNLOAD} "
        f"{names}\n\nthen here:\n\n    python3 -m pip install -q --no-index --no-deps "
        "--no-compile --target /tmp/site .whl/*.whl\n    PYTHONPATH=/tmp/site:. python3 "
        "benchmarks/gpu_suite.py ...\n\n(the module docstring of benchmarks/gpu_suite.py "
        "says more)"
    )


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0


def _select(names: str | None) -> list[Step]:
    if not names:
        return list(STEPS)
    known = {s.name: s for s in STEPS}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in wanted if n not in known]
    if bad:
        raise SystemExit(
            f"error: --steps: unknown step(s) {', '.join(bad)}; the steps are {', '.join(known)}"
        )
    if "train" in wanted and "search" not in wanted:
        raise SystemExit("error: --steps: train needs search (it trains the search's preset)")
    return [s for s in STEPS if s.name in wanted]


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner = run_command,
    has_cuda: Callable[[], bool] = cuda_available,
    find: Callable[[str], object] = importlib.util.find_spec,
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_suite.md"), help="the Markdown file")
    parser.add_argument(
        "--steps", default=None, help="a comma-separated subset: " + ",".join(s.name for s in STEPS)
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--limit", type=float, default=SUITE_LIMIT_S / 60, help="minutes for the whole suite"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="folder for the steps' files and each command's log (default: temporary, removed)",
    )
    parser.add_argument(
        "--search-timeout",
        default=None,
        help="the search step's --timeout, e.g. 3m (default: the search's own default)",
    )
    parser.add_argument(
        "--compare-search-timeout", default="2m", help="compare.py's --search-timeout (2m)"
    )
    parser.add_argument(
        "--compare-args",
        default="",
        help="more options for compare.py, one string: '--policies naive,autotune --repeats 1'",
    )
    parser.add_argument(
        "--test-workers",
        type=int,
        default=1,
        help="processes for the gpu-marked tests (pytest-xdist's -n; 1: one process). "
        "Where NVML lists no process (a VM), a trial's CUDA context is the device-wide "
        "delta, which other tests' processes inflate: the memory tests need 1",
    )
    args = parser.parse_args(argv)
    steps = _select(args.steps)
    if args.limit <= 0:
        raise SystemExit(f"error: --limit must be positive minutes, got {args.limit}")

    if args.test_workers < 1:
        raise SystemExit(f"error: --test-workers must be at least 1, got {args.test_workers}")
    options = {
        "search_timeout": args.search_timeout,
        "compare_search_timeout": args.compare_search_timeout,
        "compare_args": _compare_args(args.compare_args),
        "test_workers": args.test_workers,
    }
    if args.dry_run:
        ctx = Context(work=args.work or Path("<work>"), **options)
        for step in steps:
            for command in step.commands(ctx):
                print(f"[{step.name}, {fmt_seconds(step.timeout_s)}] {shlex.join(command)}")
        return 0
    missing = missing_wheels(find)
    if missing:
        print(missing_message(missing), file=sys.stderr)
        return 2
    if not has_cuda():
        print(
            f"{NO_CUDA} (torch.cuda.is_available() is False here); nothing was run", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        command = shlex.join(
            ["python", "benchmarks/gpu_suite.py", *(argv if argv is not None else sys.argv[1:])]
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)

        def write(outcomes: list[Outcome]) -> None:
            total_s = time.monotonic() - started
            args.out.write_text(render(outcomes, command=command, total_s=total_s,
                                       planned=len(steps)))  # fmt: skip

        outcomes = run_suite(
            steps, Context(work=work, **options), runner=runner, limit_s=args.limit * 60,
            after_step=write,
        )  # fmt: skip
        text = render(outcomes, command=command, total_s=time.monotonic() - started)
    args.out.write_text(text)
    print(text)
    print(f"written to {args.out}", file=sys.stderr)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
