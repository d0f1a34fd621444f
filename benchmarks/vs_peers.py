"""autotune against what a user would reach for instead: the batch finders of other libraries.

For one model, one memory budget and one device, each row is a tool a user who wants faster
training would pick, run as its documentation says (the real library, not a copy of its
policy):

1. **lightning-power** / **lightning-binsearch**: Lightning's
   ``Tuner(trainer).scale_batch_size(module, mode="power" | "binsearch")`` with its defaults
   (``init_val=2``, ``steps_per_trial=3``); the pick is the module's new ``batch_size``, with
   the Trainer's accumulation (1).
2. **hf-trainer**: Hugging Face's ``Trainer`` with ``TrainingArguments(auto_find_batch_size=
   True)``, per-device batch = the user's global batch, no accumulation: it halves the batch
   on an out-of-memory error and trains on (``--peer-steps`` steps here).
3. **accelerate**: the loop of Accelerate's guide under ``@find_executable_batch_size(
   starting_batch_size=global batch)``.
4. **deepspeed**: ``deepspeed --autotuning tune`` with a minimal ``autotuning`` section
   (micro-batch, accumulation and ZeRO stage). CUDA only: on a CPU its row says "needs
   CUDA". The code path is written but has not run on a GPU yet.
5. **autotune**: ``autotune search --model M --budget B --device D --timeout T --output P``.
6. **autotune-2x**: the same search with the ``--timeout`` that ends its whole command
   within twice the fastest peer's time to answer (the limit counts from the command's
   start, and a search may run 10% past it: ``twice_the_fastest``): what autotune answers
   in the time the issue's target allows it (``--no-short-search`` leaves it out).

Each tool runs in its own process, in a session of its own (``benchmarks/_peer_driver.py``
wraps the autotune ``ModelSpec`` as the library expects), under the budget as autotune's
bursts enforce it: on a CPU, the watchdog on the process tree's memory
(``autotune.engine.memory.ProcessTreeSampler``) kills the whole group once it passes the
budget, and the row says "over budget"; on CUDA the driver caps the allocator
(``autotune.engine.memory.cap_cuda_memory``) so the library sees the out-of-memory errors it
is built to catch. A tool still running after ``--peer-timeout`` (default 15 min) is killed
with its group. Everything a tool writes goes in one temporary folder, removed at the end;
the run ends by checking that no process of any group it started and no folder is left.

Then every pick, autotune's included, is measured side by side by ``compare.py``'s
procedure (``measure_rows``: the same steps and sequence length for every row, rounds
interleaved forward and backward, each row's better median of ``--repeats`` bursts, under
the budget). A batch finder that raised the batch changes the training: the table shows
the global batch each pick trains with beside the user's.

Usage (from the repository root; progress on stderr, the report on stdout)::

    python benchmarks/vs_peers.py --model gpt-small --budget 8GB
    python benchmarks/vs_peers.py --model gpt-small --budget 8GB --quick   # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from _common import (
    command_line,
    fmt_float,
    fmt_ratio,
    fmt_seconds,
    hardware_lines,
    load_average,
    render_table,
    utc_now,
)

from autotune.burst.process import kill_group, reap_tree
from autotune.engine.memory import ProcessTreeSampler
from autotune.study.session.deadline import OVERRUN_SHARE

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile

PEERS = ("lightning-power", "lightning-binsearch", "hf-trainer", "accelerate", "deepspeed")
LIBRARIES = {
    "lightning-power": "lightning",
    "lightning-binsearch": "lightning",
    "hf-trainer": "transformers",
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
}
HERE = Path(__file__).resolve().parent
DRIVER, ROOT = HERE / "_peer_driver.py", HERE.parent
TERM_GRACE_S, POLL_S = 3.0, 0.05


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------
# One tool's process: its own session, the budget's watchdog, its whole group ended
# ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ProcessOutcome:
    """How a watched process ended: ``exited`` (on its own), ``budget`` (its tree passed
    the budget and its group was killed) or ``timeout`` (killed at the deadline)."""

    outcome: str
    returncode: int | None
    peak_bytes: int
    wall_s: float
    over_budget_bytes: int | None = None


def run_watched(
    command: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    budget_bytes: int | None,
    timeout_s: float,
    pgids: list[int],
    env: dict[str, str] | None = None,
) -> ProcessOutcome:
    """Run ``command`` in a session of its own, its output in ``log_path``; the tree-RSS
    watchdog of the bursts kills its group past ``budget_bytes`` (None: only measured).
    Its group id is appended to ``pgids`` (for the leftover check); whatever happens, the
    group is SIGKILLed and the tree reaped before this returns."""
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, env=env,
        )  # fmt: skip
    pgids.append(proc.pid)
    sampler = ProcessTreeSampler(
        proc.pid,
        budget_bytes=budget_bytes,
        on_over_budget=lambda _: kill_group(proc.pid, signal.SIGKILL),
    ).start()
    outcome = "exited"
    try:
        while proc.poll() is None:
            if sampler.over_budget_bytes is not None:
                outcome = "budget"
                break
            if time.monotonic() - started > timeout_s:
                outcome = "timeout"
                kill_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=TERM_GRACE_S)
                break
            time.sleep(POLL_S)
        if outcome == "exited" and sampler.over_budget_bytes is not None:
            outcome = "budget"  # killed by the watchdog between two polls
    finally:
        sampler.stop()
        kill_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        reap_tree(sampler)
    return ProcessOutcome(
        outcome=outcome,
        returncode=proc.returncode,
        peak_bytes=max(sampler.peak_bytes, sampler.over_budget_bytes or 0),
        wall_s=time.monotonic() - started,
        over_budget_bytes=sampler.over_budget_bytes,
    )


def leftovers(pgids: Sequence[int], paths: Sequence[Path]) -> list[str]:
    """What a run left behind: live processes of the groups it started, folders it made."""
    found = []
    groups = set(pgids)
    for proc in psutil.process_iter(["pid", "name", "status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.pid) in groups:
                found.append(f"process {proc.pid} ({proc.info['name']}) of group {proc.pid}")
    found.extend(f"folder {p}" for p in paths if p.exists())
    return found


# ------------------------------------------------------------------------------------
# What a tool answered
# ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class PeerRun:
    """One tool's search: how it ended, what it picked, what it tried."""

    peer: str
    status: str  # ok, over budget, timeout, crash, needs CUDA, not installed
    reason: str = ""
    wall_s: float | None = None
    peak_bytes: int | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    tried: tuple[int, ...] = ()  # micro-batch sizes that ran a forward pass, in order
    failed: tuple[int, ...] = ()  # of those, the ones that never finished a step
    config: TrainConfig | None = None  # the pick, as autotune's bench runs it

    @property
    def global_batch(self) -> int | None:
        if self.micro_batch is None or self.grad_accum is None:
            return None
        return self.micro_batch * self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["config"] = None if self.config is None else self.config.to_dict()
        return data


def read_events(path: Path) -> list[dict[str, Any]]:
    """The driver's JSON lines; a partial last line (the process was killed) is dropped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            item = json.loads(line)
            if isinstance(item, dict):
                events.append(item)
    return events


def classify(
    peer: str, outcome: ProcessOutcome, events: Sequence[dict[str, Any]], *, log_tail: str = ""
) -> PeerRun:
    """A tool's row from how its process ended and what its driver wrote."""
    tried = tuple(dict.fromkeys(int(e["size"]) for e in events if e.get("event") == "start"))
    done = {int(e["size"]) for e in events if e.get("event") == "done"}
    failed = tuple(s for s in tried if s not in done)
    result = next((e for e in reversed(events) if e.get("event") == "result"), None)
    run = PeerRun(
        peer=peer, status="ok", wall_s=outcome.wall_s, peak_bytes=outcome.peak_bytes or None,
        tried=tried, failed=failed,
    )  # fmt: skip
    if result is not None and result.get("peak_cuda_bytes"):
        run.peak_bytes = int(result["peak_cuda_bytes"])
    if outcome.outcome == "budget":
        from autotune.core.units import format_bytes

        run.status = "over budget"
        run.reason = f"its processes reached {format_bytes(outcome.over_budget_bytes)}"
    elif outcome.outcome == "timeout":
        run.status, run.reason = "timeout", f"still searching after {outcome.wall_s:.0f} s"
    elif result is None or outcome.returncode != 0:
        run.status = "crash"
        run.reason = f"exit {outcome.returncode}" + (f": {log_tail}" if log_tail else "")
    else:
        run.micro_batch = int(result["micro_batch"])
        run.grad_accum = int(result.get("grad_accum", 1))
        run.settings = dict(result.get("settings") or {})
    return run


def log_tail(path: Path, limit: int = 160) -> str:
    """The last non-empty line of a log, shortened."""
    with contextlib.suppress(OSError):
        lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
        if lines:
            return lines[-1][:limit]
    return ""


# ------------------------------------------------------------------------------------
# Running the tools
# ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Task:
    spec: ModelSpec
    profile: HardwareProfile
    caps: DeviceCaps
    budget: int
    budget_text: str
    global_batch: int
    seq_len: int
    peer_steps: int
    peer_timeout_s: float
    search_timeout: str
    search_steps: int | None
    tmp: Path
    pgids: list[int]


def child_env(tmp: Path | None = None) -> dict[str, str]:
    """This environment, with this checkout importable (the driver runs from a file) and,
    with ``tmp``, every temporary file of the tool (its bursts' folders included) in it."""
    env = dict(os.environ)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return env


def driver_command(task: Task, peer: str, events: Path, root: Path) -> list[str]:
    return [
        sys.executable, str(DRIVER), "--peer", peer, "--model", task.spec.name,
        "--seq-len", str(task.seq_len), "--global-batch", str(task.global_batch),
        "--device", task.caps.device, "--steps", str(task.peer_steps),
        "--budget-bytes", str(task.budget), "--events", str(events), "--root", str(root),
    ]  # fmt: skip


def run_peer(task: Task, peer: str) -> PeerRun:
    """Run one tool under the budget in its own folder and say what it answered."""
    if importlib.util.find_spec(LIBRARIES[peer]) is None:
        return PeerRun(peer=peer, status="not installed", reason=f"no {LIBRARIES[peer]} here")
    if peer == "deepspeed" and task.caps.kind != "cuda":
        return PeerRun(peer=peer, status="needs CUDA", reason="DeepSpeed's autotuner is CUDA only")
    folder = task.tmp / peer
    folder.mkdir()
    events = folder / "events.jsonl"
    if peer == "deepspeed":
        from _ds_autotuning import deepspeed_command

        command = deepspeed_command(task, driver_command(task, "deepspeed-train", events, folder))
    else:
        command = driver_command(task, peer, events, folder)
    _log(f"[{peer}] running (timeout {task.peer_timeout_s:.0f} s)")
    outcome = run_watched(
        command, cwd=folder, log_path=folder / "log.txt",
        budget_bytes=None if task.caps.kind == "cuda" else task.budget,
        timeout_s=task.peer_timeout_s, pgids=task.pgids, env=child_env(task.tmp),
    )  # fmt: skip
    run = classify(peer, outcome, read_events(events), log_tail=log_tail(folder / "log.txt"))
    if peer == "deepspeed" and run.status == "ok":
        from _ds_autotuning import read_optimal

        run.micro_batch, run.grad_accum, run.settings = read_optimal(folder)
        if run.micro_batch is None:
            run.status, run.reason = "crash", "the autotuner wrote no optimal config"
    _log(f"[{peer}] {run.status} {run.reason} pick {pick_text(run)} tried {list(run.tried)}")
    return run


def search_command(task: Task, preset: Path, *, timeout: str | None = None) -> list[str]:
    """``autotune search`` with the run's model, budget, device, batch and length (and
    ``--timeout``: ``timeout``, else the run's ``--search-timeout``)."""
    return [
        sys.executable, "-m", "autotune", "search", "--model", task.spec.name,
        "--budget", task.budget_text, "--device", task.caps.device,
        "--timeout", timeout or task.search_timeout, "--output", str(preset),
        "--global-batch", str(task.global_batch), "--seq-len", str(task.seq_len),
        *(["--steps", str(task.search_steps)] if task.search_steps else []),
    ]  # fmt: skip


def run_autotune(
    task: Task, out: Path | None, *, name: str = "autotune", timeout: str | None = None
) -> PeerRun:
    """``autotune search`` as a user types it, in its own session and folder (``name``),
    with ``--timeout`` ``timeout`` (default: the run's ``--search-timeout``)."""
    from autotune.core.units import parse_duration

    folder = task.tmp / name
    folder.mkdir()
    preset = folder / "preset.yaml"
    command = search_command(task, preset, timeout=timeout)
    _log(f"[{name}] {' '.join(command[2:])}")
    timeout_s = parse_duration(timeout or task.search_timeout, what="--search-timeout") * 2 + 300
    outcome = run_watched(
        command, cwd=folder, log_path=folder / "log.txt", budget_bytes=None,
        timeout_s=timeout_s, pgids=task.pgids, env=child_env(task.tmp),
    )  # fmt: skip
    run = _search_answer(name, outcome, folder, preset)
    if out is not None and run.status == "ok":
        out.write_bytes(preset.read_bytes())
    return run


def _search_answer(name: str, outcome: ProcessOutcome, folder: Path, preset: Path) -> PeerRun:
    """What a search answered: its preset's config, or why there is none."""
    from autotune.preset.io import load_preset

    if outcome.outcome != "exited" or outcome.returncode != 0 or not preset.exists():
        run = classify(name, outcome, [], log_tail=log_tail(folder / "log.txt"))
        if outcome.outcome == "exited" and "error:" in run.reason:
            run.status = "no pick"  # the search ended cleanly without a winner
        _log(f"[{name}] {run.status}: {run.reason}")
        return run
    config = load_preset(preset).config
    _log(f"[{name}] picked {config.micro_batch} x {config.grad_accum} in {outcome.wall_s:.0f} s")
    return PeerRun(
        peer=name, status="ok", wall_s=outcome.wall_s, peak_bytes=outcome.peak_bytes,
        micro_batch=config.micro_batch, grad_accum=config.grad_accum, config=config,
    )  # fmt: skip


def twice_the_fastest(runs: Sequence[PeerRun]) -> tuple[str, PeerRun] | None:
    """The ``--timeout`` whose whole command ends within twice the fastest answering
    peer's time, and that peer; None when no peer answered. The limit counts from the
    command's start, and a search may run ``OVERRUN_SHARE`` past it (killing a cut burst,
    writing the preset): twice the peer's time less that share, in tenths of a second
    rounded down."""
    answered = [r for r in runs if r.peer in PEERS and r.status == "ok" and r.wall_s]
    if not answered:
        return None
    fastest = min(answered, key=lambda r: r.wall_s or 0.0)
    limit = 2 * (fastest.wall_s or 0.0) / (1 + OVERRUN_SHARE)
    return f"{math.floor(10 * limit) / 10:g}s", fastest


def run_short_search(task: Task, runs: Sequence[PeerRun]) -> PeerRun:
    """autotune's search given twice the fastest peer's time to answer."""
    name = "autotune-2x"
    limit = twice_the_fastest(runs)
    if limit is None:
        return PeerRun(peer=name, status="skipped", reason="no peer answered: no time to match")
    timeout, fastest = limit
    run = run_autotune(task, None, name=name, timeout=timeout)
    why = f"--timeout {timeout}: the command within twice the fastest peer's time "
    why += f"({fastest.peer}, {fmt_seconds(fastest.wall_s)})"
    run.reason = why + (f"; {run.reason}" if run.reason else "")
    return run


def pick_config(task: Task, run: PeerRun) -> TrainConfig | None:
    """A tool's pick as autotune's bench runs it: the naive config (fp32, no compile, no
    workers: every peer's default) at the picked micro-batch and accumulation."""
    if run.config is not None or run.micro_batch is None or run.grad_accum is None:
        return run.config
    from autotune.study.plan.playbook import naive_config

    base = naive_config(task.spec, global_batch=task.global_batch, seq_len=task.seq_len).config
    assert base is not None  # naive_config always gives one
    return base.replace(micro_batch=run.micro_batch, grad_accum=run.grad_accum)


# ------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------


def pick_text(run: PeerRun) -> str:
    """``256 x 1, fp32`` for a batch finder; autotune's config summary for autotune."""
    if run.micro_batch is None or run.grad_accum is None:
        return "-"
    if run.config is not None and run.peer.startswith("autotune"):
        from autotune.study import summarize_config

        return summarize_config(run.config.to_dict())
    extra = [f"{k} {v}" for k, v in sorted(run.settings.items())]
    return ", ".join([f"{run.micro_batch} x {run.grad_accum}", "fp32", *extra])


def kept_text(run: PeerRun, global_batch: int) -> str:
    gb = run.global_batch
    if gb is None:
        return "-"
    return f"yes ({gb})" if gb == global_batch else f"no: {gb} (asked {global_batch})"


def failures_text(run: PeerRun) -> str:
    """What went wrong during a tool's own search: the sizes that never finished a step,
    and how the process ended if not on its own."""
    if run.status in ("needs CUDA", "not installed", "skipped"):
        return "-"
    parts = []
    if run.status == "over budget":
        last = run.tried[-1] if run.tried else None
        earlier = [s for s in run.failed if s != last]
        if earlier:
            parts.append(f"{len(earlier)} OOM ({', '.join(map(str, earlier))})")
        parts.append(f"killed over the budget at micro-batch {last if last else '?'}")
    else:
        if run.failed:
            parts.append(f"{len(run.failed)} OOM ({', '.join(map(str, run.failed))})")
        if run.status != "ok":
            parts.append(run.status)
    return "; ".join(parts) or "none"


def render(runs: Sequence[PeerRun], throughputs: dict[str, float | None], *, unit: str,
           global_batch: int) -> str:  # fmt: skip
    """The Markdown table, then a note for every row that has no figure."""
    from autotune.core.units import format_bytes

    base = throughputs.get("autotune")
    headers = [
        "peer", "time to answer", "peak memory during its search", "the pick",
        "global batch kept?", f"{unit} of the pick", "vs autotune's pick",
        "OOMs or crashes during the search",
    ]  # fmt: skip
    body, notes = [], []
    for run in runs:
        tp = throughputs.get(run.peer)
        answered = run.status == "ok"
        figure = fmt_float(tp) if tp is not None else run.status if not answered else "-"
        body.append([
            run.peer,
            fmt_seconds(run.wall_s) if answered or run.wall_s is None
            else f"no answer ({fmt_seconds(run.wall_s)})",
            format_bytes(run.peak_bytes) if run.peak_bytes else "-",
            pick_text(run),
            kept_text(run, global_batch),
            figure,
            fmt_ratio(tp / base if tp and base else None),
            failures_text(run),
        ])  # fmt: skip
        if run.reason:
            notes.append(f"{run.peer}: {run.status}: {run.reason}")
        if run.tried:
            notes.append(f"{run.peer}: micro-batches tried, in order: {list(run.tried)}")
    table = render_table(headers, body, align="lrrllrrl")
    return table + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")


def machine_header(
    task: Task, argv: Sequence[str] | None, *, started: str, load_before: str
) -> list[str]:
    """The date, the command, the machine and its software (torch's version among them)."""
    return [
        f"## vs_peers: {task.spec.name}, budget {task.budget_text}, {started}",
        "",
        f"- command: `{command_line(argv, script=__file__)}`",
        *(f"- {line}" for line in hardware_lines(task.profile, task.caps.device)),
        f"- task: global batch {task.global_batch}, sequence length {task.seq_len}",
        f"- load average before: {load_before}",
    ]


# ------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/vs_peers.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a built-in model name (gpt-small, mu, ...)")
    p.add_argument("--budget", required=True, help="memory budget: 8GB, 8GiB or 0.5")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the best)")
    p.add_argument("--global-batch", type=int, default=None, help="default: the model's")
    p.add_argument("--seq-len", type=int, default=None, help="default: the model's")
    p.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset")
    p.add_argument("--peer-timeout", default="15m", help="per tool, e.g. 15m")
    p.add_argument("--peer-steps", type=int, default=3, help="steps per size a tool tries")
    p.add_argument("--search-timeout", default="4m", help="autotune search's --timeout")
    p.add_argument("--search-steps", type=int, default=None, help="autotune search's --steps")
    p.add_argument("--steps", type=int, default=None, help="timed steps per burst (CPU 5, CUDA 20)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (CPU 2, CUDA 3)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of bursts")
    p.add_argument("--burst-timeout", type=float, default=600.0)
    p.add_argument(
        "--no-short-search", dest="short_search", action="store_false",
        help="leave out the row of autotune's search given twice the fastest peer's time",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="copy autotune's preset here")
    p.add_argument("--json", type=Path, default=None, help="write every row here as JSON")
    p.add_argument(
        "--quick", action="store_true",
        help="a smoke run: 1 step per size tried, --peer-timeout 5m, a 2m search of 2-step "
        "bursts, 2 rounds of 1 warm-up + 2 timed steps",
    )  # fmt: skip
    return p


def apply_quick(args: argparse.Namespace) -> None:
    """``--quick``: the smoke run's settings (the search's bursts at their least steps)."""
    if args.quick:
        from autotune.study.storage.optuna_glue import PRUNE_MIN_STEPS

        args.peer_steps, args.search_timeout, args.peer_timeout = 1, "2m", "5m"
        args.search_steps = PRUNE_MIN_STEPS
        args.steps, args.warmup, args.repeats = 2, 1, 2


def _task(args: argparse.Namespace, tmp: Path, pgids: list[int]) -> Task:
    from autotune.core.errors import UsageError
    from autotune.core.units import parse_budget, parse_duration
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model

    spec = load_model(args.model)
    profile = probe()
    caps = profile.device(args.device)
    apply_quick(args)
    for name in ("peer_steps", "repeats", "search_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return Task(
        spec=spec, profile=profile, caps=caps,
        budget=parse_budget(args.budget, device_memory_bytes=caps.total_memory_bytes),
        budget_text=args.budget, global_batch=args.global_batch or spec.global_batch,
        seq_len=args.seq_len or spec.seq_len, peer_steps=args.peer_steps,
        peer_timeout_s=parse_duration(args.peer_timeout, what="--peer-timeout"),
        search_timeout=args.search_timeout, search_steps=args.search_steps, tmp=tmp, pgids=pgids,
    )  # fmt: skip


def _measure(task: Task, args: argparse.Namespace, runs: Sequence[PeerRun]) -> dict[str, Any]:
    """Every pick measured side by side by compare.py's procedure; tokens/s per tool."""
    from compare import MeasureSettings, Row, measure_rows

    from autotune.burst.supervisor import run_burst

    cuda = task.caps.kind == "cuda"
    settings = MeasureSettings(
        steps=args.steps or (20 if cuda else 5),
        warmup=args.warmup if args.warmup is not None else (3 if cuda else 2),
        repeats=args.repeats, device=task.caps.device, seed=0,
        timeout_s=args.burst_timeout, caps=task.caps,
    )  # fmt: skip
    rows = [Row(policy=r.peer, config=pick_config(task, r)) for r in runs if r.status == "ok"]
    _log(f"[measure] {settings.repeats} interleaved rounds of {len(rows)} picks")
    measure_rows(
        task.spec, rows, burst_fn=run_burst, settings=settings, budget_bytes=task.budget, log=_log
    )
    out: dict[str, Any] = {}
    for row in rows:
        m = row.measurement
        out[row.policy] = m.throughput if m is not None and m.ok else None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from autotune.core.errors import AutotuneError, UsageError

    load_before, started = load_average(), utc_now()
    pgids: list[int] = []
    try:
        peers = [p.strip() for p in args.peers.split(",") if p.strip()]
        if not peers or any(p not in PEERS for p in peers):
            raise UsageError(f"--peers {args.peers!r}: expected some of {', '.join(PEERS)}")
        with tempfile.TemporaryDirectory(prefix="vs-peers-") as name:
            tmp = Path(name)
            task = _task(args, tmp, pgids)
            runs = [run_peer(task, p) for p in PEERS if p in peers]
            runs.append(run_autotune(task, args.out))
            if args.short_search:
                runs.append(run_short_search(task, runs))
            throughputs = _measure(task, args, runs)
    except AutotuneError as exc:
        _log(f"error: {exc}")
        return 2
    left = leftovers(pgids, [tmp])
    header = machine_header(task, argv, started=started, load_before=load_before)
    header.append(f"- load average after: {load_average()}")
    if args.quick:
        header.append("- **--quick: a smoke run, not a figure**")
    header.append(f"- left behind: {'; '.join(left) if left else 'nothing'}")
    report = (
        "\n".join(header)
        + "\n\n"
        + render(runs, throughputs, unit=task.spec.throughput_label, global_batch=task.global_batch)
    )
    print(report)
    if args.json is not None:
        data = {"header": header, "runs": [r.to_dict() for r in runs], "throughputs": throughputs}
        args.json.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
