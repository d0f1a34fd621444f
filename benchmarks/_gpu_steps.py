"""The GPU suite's steps (``benchmarks/gpu_suite.py``): what a step is, what the steps share,
and the steps of the older plan (``--steps``), each a command line and how its output
becomes a one-line result, a Markdown section and the figures of the suite's JSON.

The steps import no autotune code that needs optuna or torch: the suite checks first that
the packages are there, and says which wheels to carry where they are not.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from _common import fmt_float, fmt_ratio, fmt_seconds, render_table

ROOT = Path(__file__).resolve().parent.parent
BUDGET_BYTES = 8 * 10**9  # the budget check's 8 GB (autotune's GB are 10^9 bytes)
TRAIN_STEPS = 300
# autotune.study.session.options.DEFAULT_TIME_LIMIT_S, the default search's limit (a test checks
# the two agree; the suite imports nothing that needs optuna before its wheel check)
SEARCH_DEFAULT_LIMIT_S = 340.0
# A search ends by its limit plus 10% (autotune.study.session.deadline.OVERRUN_SHARE: bursts
# and race rounds run to +5%, killing a cut burst and writing the preset take the rest).
SEARCH_OVERRUN = 1.10
STOP_GRACE_S = 20.0  # a step's command gets SIGTERM this long before its limit, SIGKILL at it
# What a search step needs beyond the search's own end: SIGTERM must come after it (at 360 s
# of a 380 s step, the default search still ran bursts to 357 s and wrote its preset later)
SEARCH_END_S = STOP_GRACE_S + 5.0
SEARCH_WANT_S = SEARCH_DEFAULT_LIMIT_S * SEARCH_OVERRUN + SEARCH_END_S  # 6 min 39 s


# -- what a step is ------------------------------------------------------------------------
@dataclass(frozen=True)
class Completed:
    """How one step's command ended. ``stopped``: it was still running at its time limit
    and was sent SIGTERM (``returncode`` is then how it ended, None where it had to be
    killed)."""

    returncode: int | None  # None: killed at its time limit
    stdout: str
    stderr: str
    wall_s: float
    stopped: bool = False

    @property
    def timed_out(self) -> bool:
        return self.returncode is None or self.stopped


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Completed: ...


@dataclass(frozen=True, kw_only=True)
class Context:
    """What the steps share: where they write, the interpreter, earlier steps' files, and
    the time the step about to run was given (``granted_s``)."""

    work: Path  # a folder for the steps' files and studies (not brought back)
    out_dir: Path | None = None  # the suite's output folder: the presets, the search's JSON
    python: str = sys.executable
    search_timeout: str | None = None  # the mu search step's --timeout (None: its default)
    compare_search_timeout: str = "2m"  # compare.py's --search-timeout
    compare_args: tuple[str, ...] = ()  # more of compare.py's options (--policies, --repeats)
    test_workers: int = 1  # pytest processes for the gpu-marked tests (-n, pytest-xdist)
    winner_path: Path | None = None  # --winner: a gpt2-124m preset from an earlier run
    granted_s: float | None = None  # the time limit of the step about to run

    def autotune(self, *args: str) -> list[str]:
        return [self.python, "-m", "autotune", *args]

    @property
    def out(self) -> Path:
        return self.out_dir if self.out_dir is not None else self.work

    @property
    def preset(self) -> Path:
        """mu's search's preset (the older plan's ``search`` and ``train``): in the work
        folder, so that only this run's search makes one; its report copies it to ``out``."""
        return self.work / "mu-8GB.yaml"

    @property
    def winner(self) -> Path:
        """gpt2-124m's winning preset: ``--winner``, else the one ``search-gpt2`` writes."""
        return self.winner_path if self.winner_path is not None else self.work / "gpt2-124m.yaml"

    def bring_back(self, path: Path) -> None:
        """A file a step wrote, copied into the output folder (which comes back from a
        lent machine) where there is one; a step that failed after writing it still
        brings it back."""
        if self.out_dir is not None and path.is_file():
            shutil.copyfile(path, self.out_dir / path.name)


@dataclass(frozen=True)
class Report:
    """What a step's output says: a one-line result, a Markdown section, its figures."""

    result: str
    section: str
    figures: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step: its commands (run in order, within the time the plan gives it) and how
    their output becomes a ``Report``. ``want_s`` is the time it needs to run in full,
    ``min_s`` the least worth starting it with; the plan gives time to the steps in
    ``priority`` order (lowest first), and runs them in the order of the plan."""

    name: str
    title: str
    want_s: float
    min_s: float
    priority: int
    commands: Callable[[Context], list[list[str]]]
    report: Callable[[Context, list[Completed]], Report]


class StepFailed(Exception):
    """A step ran but its output says it did not do what it checks."""


class NotReady(Exception):
    """A step cannot start: what it needs from an earlier step is not there."""


# -- what the steps share -------------------------------------------------------------------
def _json(text: str) -> Any:
    """The last JSON document a command printed on stdout (progress may precede it)."""
    start = text.find("{")
    if start < 0:
        raise StepFailed("no JSON on stdout")
    return json.loads(text[start:])


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f} GB"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "none"


def _summary(config: Mapping[str, Any]) -> str:
    """``mb 8x4 seq 128 bf16 ckpt compile=default`` (the suite imports no autotune)."""
    if not config:
        return "-"
    parts = [f"mb {config.get('micro_batch')}x{config.get('grad_accum')}"]
    parts += [f"seq {config.get('seq_len')}", str(config.get("precision"))]
    parts += ["ckpt"] if config.get("activation_checkpointing") else []
    parts += [f"compile={config['compile']}"] if config.get("compile", "off") != "off" else []
    parts += [f"workers={config['num_workers']}"] if config.get("num_workers") else []
    parts += ["fused-adamw"] if config.get("fused_optimizer") else []
    parts += ["expandable-segments"] if config.get("expandable_segments") else []
    parts += ["fp8"] if config.get("fp8_linears") else []
    parts += [f"{k}={v}" for k, v in (config.get("knobs") or {}).items()]
    return " ".join(parts)


def read_preset(path: Path) -> dict[str, Any]:
    """A preset file as plain data ({} where it is absent or no mapping)."""
    import yaml

    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def _preset_tokens_per_s(path: Path) -> float | None:
    return (read_preset(path).get("measured") or {}).get("tokens_per_s")


def search_limit(granted_s: float | None) -> tuple[float, bool]:
    """A search's time limit in a step given ``granted_s``: its default, or less where the
    step cannot hold that (then ``True``: the command passes ``--timeout``)."""
    if granted_s is None or granted_s >= SEARCH_DEFAULT_LIMIT_S * SEARCH_OVERRUN + SEARCH_END_S:
        return SEARCH_DEFAULT_LIMIT_S, False
    return max(30.0, float(int((granted_s - SEARCH_END_S) / SEARCH_OVERRUN))), True


def memory_model_rows(memory: Mapping[str, Any]) -> list[list[str]]:
    """The memory model's rows of a search's table: its error, the OOMs it let through."""
    error = f"{memory.get('predictions', 0)}, {fmt_float(memory.get('mean_abs_error_pct'))}%"
    edge = ", ".join(f"#{n}" for n in memory.get("at_edge") or []) or "none"
    return [
        ["memory model: predictions, mean abs error", error],
        ["executed OOMs per class (target: at most 1)", _counts(memory.get("ooms_executed") or {})],
        ["trials at the edge of the budget", edge],
    ]


# -- the older plan's steps -------------------------------------------------------------------
# 1. probe
def _probe_report(ctx: Context, runs: list[Completed]) -> Report:
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
    first = gpus[0]
    figures = {
        "gpu": first.get("name"),
        "memory_bytes": first.get("total_memory_bytes"),
        "compute_capability": first.get("compute_capability"),
        "driver": first.get("driver_version"),
        "torch": sw.get("torch_version"),
        "cuda": sw.get("torch_cuda_version"),
    }
    return Report(f"{first.get('name')}, {_gb(first.get('total_memory_bytes'))}", table, figures)


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


def _tests_commands(ctx: Context) -> list[list[str]]:
    # pyproject's addopts name pytest-xdist's -n: replaced, so that a machine without
    # xdist runs the tests in one process (-n only where more are asked for)
    return [[ctx.python, "-m", "pytest", "-o", "addopts=--strict-markers -ra", "-m", "gpu",
             "-q", "-p", "no:cacheprovider", *_workers(ctx), *GPU_TEST_FILES]]  # fmt: skip


def _tests_report(ctx: Context, runs: list[Completed]) -> Report:
    run = runs[0]
    summary = next(
        (line.strip("= ") for line in reversed(run.stdout.splitlines()) if " in " in line), ""
    )
    if run.returncode != 0:
        raise StepFailed(f"pytest exit {run.returncode}: {summary or 'no summary'}")
    section = f"`pytest -m gpu {' '.join(GPU_TEST_FILES)}`: {summary}"
    return Report(summary, section, {"summary": summary})


# 3. an over-budget config ends as oom in its own trial; the device still runs the next
def _oom_commands(ctx: Context) -> list[list[str]]:
    big = ["--model", "gpt2-124m", "--micro-batch", "64", "--seq-len", "1024"]
    small = ["--model", "mu", "--micro-batch", "4"]
    common = ["--device", "cuda", "--budget", "8GB", "--steps", "3", "--warmup", "1", "--json"]
    return [ctx.autotune("bench", *big, *common), ctx.autotune("bench", *small, *common)]


def _oom_report(ctx: Context, runs: list[Completed]) -> Report:
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
    figures = {"over_budget": big.get("status"), "after_it": small.get("status")}
    return Report("oom in its own trial; the next burst ran", table, figures)


# 4. mu's search with defaults, and the budget check on its winner
def _search_commands(ctx: Context) -> list[list[str]]:
    limit_s, shrunk = search_limit(ctx.granted_s)
    timeout = ctx.search_timeout or (f"{limit_s:.0f}s" if shrunk else None)
    return [
        ctx.autotune(
            "search", "--model", "mu", "--budget", "8GB", "--device", "cuda", "--json",
            "--output", str(ctx.preset), "--storage", f"sqlite:///{ctx.work / 'mu-8GB.db'}",
            *(["--timeout", timeout] if timeout else []),
        )
    ]  # fmt: skip


def _search_report(ctx: Context, runs: list[Completed]) -> Report:
    ctx.bring_back(ctx.preset)
    run = runs[0]
    found = _json(run.stdout)
    best = found.get("best") or {}
    counts = found.get("counts") or {}
    peak = best.get("peak_memory_bytes")
    within = peak is not None and peak <= BUDGET_BYTES
    measured = f"{counts.get('measured')} / {counts.get('infeasible')} / {counts.get('pruned')}"
    rows = [
        ["wall time (search + race)", fmt_seconds(run.wall_s)],
        ["trials measured / infeasible / pruned", measured],
        ["winner", _summary(best.get("config") or {})],
        [f"winner {found.get('unit', 'tokens/s')}", fmt_float(best.get("throughput"))],
        ["speedup over naive (race)", fmt_ratio(found.get("speedup"))],
        ["winner's peak (budget 8 GB)", f"{_gb(peak)}: {'within' if within else 'OVER'}"],
        *memory_model_rows(found.get("memory_model") or {}),
    ]
    table = render_table(["autotune search --model mu --budget 8GB", "figure"], rows)
    if not within:
        raise StepFailed(f"the winner's peak {_gb(peak)} is over the 8 GB budget\n\n{table}")
    winner = fmt_float(best.get("throughput"))
    figures = {
        "wall_s": run.wall_s,
        "counts": counts,
        "winner": best.get("config"),
        "throughput": best.get("throughput"),
        "peak_memory_bytes": peak,
        "speedup": found.get("speedup"),
        "memory_model": found.get("memory_model"),
    }
    return Report(f"{fmt_seconds(run.wall_s)}, winner {winner} {found.get('unit')}", table, figures)


# 5. the full run against the preset's figure
def _train_commands(ctx: Context) -> list[list[str]]:
    return [
        ctx.autotune(
            "train", "--preset", str(ctx.preset), "--max-steps", str(TRAIN_STEPS),
            "--out", str(ctx.work / "train-mu"), "--device", "cuda",
        )
    ]  # fmt: skip


def _train_report(ctx: Context, runs: list[Completed]) -> Report:
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
    table = render_table(headers, rows, align="rrrrr")
    figures = {"steps": summary.get("steps"), "preset_tokens_per_s": preset_tps,
               "train_tokens_per_s": train_tps, "ratio": ratio}  # fmt: skip
    return Report(f"train / preset {fmt_ratio(ratio)}", table, figures)


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


def _compare_report(model: str) -> Callable[[Context, list[Completed]], Report]:
    def report(ctx: Context, runs: list[Completed]) -> Report:
        path = ctx.work / f"compare-{model}" / "compare.md"
        if runs[0].returncode != 0 or not path.exists():
            raise StepFailed(f"compare.py exit {runs[0].returncode}, no {path.name}")
        text = path.read_text().strip()
        # compare.md starts with its own title: below the step's heading in the suite's file
        text = "\n".join(
            "###" + line if line.startswith("#") else line for line in text.splitlines()
        )
        return Report(f"{fmt_seconds(runs[0].wall_s)}", text)

    return report


# 8. the model knobs against gpt2-124m's base: the chunked loss's memory at a 50k vocabulary
KNOB_VARIANTS = "base,loss=chunked,checkpointing,checkpointing+every=2"


def _knobs_commands(ctx: Context) -> list[list[str]]:
    return [[
        ctx.python, str(ROOT / "benchmarks" / "model_knobs.py"), "--device", "cuda",
        "--models", "gpt2-124m", "--budget", "24GB", "--rounds", "1", "--steps", "10",
        "--variants", KNOB_VARIANTS,
    ]]  # fmt: skip


def _knobs_report(ctx: Context, runs: list[Completed]) -> Report:
    run = runs[0]
    if run.returncode != 0:
        raise StepFailed(f"model_knobs.py exit {run.returncode}")
    lines = run.stdout.strip().splitlines()
    table = [line for line in lines if line.startswith("|")]
    if not table:
        raise StepFailed("model_knobs.py printed no table")
    chunked = next((line for line in table if "| loss=chunked" in line), "")
    peak_ratio = chunked.rstrip(" |").rsplit("|", 1)[-1].strip() if chunked else "-"
    return Report(f"loss=chunked peak {peak_ratio} the base's", "\n".join(lines))


# 9. warm start on CUDA: a trial forked by a zygote that never started CUDA, or fresh
def _warm_start_commands(ctx: Context) -> list[list[str]]:
    return [[ctx.python, str(ROOT / "benchmarks" / "warm_start.py"), "--device", "cuda",
             "--rounds", "2"]]  # fmt: skip


def _warm_start_report(ctx: Context, runs: list[Completed]) -> Report:
    """warm_start.py's table; the result, each burst's median wall warm over fresh."""
    lines = runs[0].stdout.strip().splitlines()
    ratios = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in lines
        if line.startswith("|") and "warm / fresh" in line
    ]
    if not ratios:
        raise StepFailed(f"warm_start.py exit {runs[0].returncode}, no warm / fresh row")
    walls = {row[0]: row[3] for row in ratios}
    result = "wall warm / fresh: " + ", ".join(f"{case} {wall}" for case, wall in walls.items())
    return Report(result, "\n".join(lines), {"wall_warm_over_fresh": walls})


OLDER_STEPS: tuple[Step, ...] = (
    Step(name="probe", title="autotune probe", want_s=30, min_s=10, priority=0,
         commands=lambda ctx: [ctx.autotune("probe", "--json")], report=_probe_report),
    Step(name="gpu-tests", title="gpu-marked tests", want_s=360, min_s=90, priority=5,
         commands=_tests_commands, report=_tests_report),
    Step(name="oom", title="Budget check: an over-budget config ends as oom in its own trial",
         want_s=150, min_s=60, priority=6, commands=_oom_commands, report=_oom_report),
    Step(name="search", title="autotune search --model mu --budget 8GB (defaults), timed",
         want_s=SEARCH_WANT_S, min_s=150, priority=4, commands=_search_commands,
         report=_search_report),
    Step(name="train", title=f"{TRAIN_STEPS} steps of autotune train on the winning preset",
         want_s=180, min_s=60, priority=6, commands=_train_commands, report=_train_report),
    Step(name="compare-gpt2", title="compare.py gpt2-124m, sequence 1024, 24 GB",
         want_s=300, min_s=120, priority=7, commands=_compare("gpt2-124m", "24GB", "--seq-len",
                                                               "1024"),
         report=_compare_report("gpt2-124m")),
    Step(name="compare-mu", title="compare.py mu, 8 GB", want_s=180, min_s=90, priority=7,
         commands=_compare("mu", "8GB"), report=_compare_report("mu")),
    Step(name="knobs", title="model_knobs.py gpt2-124m, sequence 1024, 24 GB", want_s=240,
         min_s=90, priority=7, commands=_knobs_commands, report=_knobs_report),
    Step(name="warm-start", title="warm_start.py on CUDA: a trial forked by a zygote, or fresh",
         want_s=300, min_s=150, priority=7, commands=_warm_start_commands,
         report=_warm_start_report),
)  # fmt: skip
