"""autotune against naive, hand-tuned and batch-finder configs: one model, one machine, one run.

For the same model, global batch and sequence length, each row is a policy for choosing
the training config:

1. **naive** (the *guide's* naive, shown as "vs guide naive"): where the model's training
   guide started (MU at micro-batch 4; pointer-gen at 1 x accumulation 16; text-regressor
   at 8; GPT at 2; fp32, no compile, no workers). It is not the *search's* naive, the
   baseline of a preset's speedup (micro-batch 1, the whole global batch in accumulation:
   GPT 1 x 32 there, 2 x 16 here); the autotune row's notes give the search's own speedup
   over the search's naive, named so.
2. **hand-tuned**: where the guide ended (MU 8 x 4; GPT with bf16 autocast, SDPA and
   torch.compile at nanoGPT's micro-batch 12, rounded down to a divisor of the global
   batch; pointer-gen 4 x 4 with 2 workers; text-regressor with TF32, activation
   checkpointing and 2 workers). A change the device cannot run (``check_config``; bf16
   on a CPU without bf16 units) is dropped, and the table's notes say which.
3. **largest batch**: the policy of Lightning's ``scale_batch_size`` (power mode: double the
   micro-batch until it no longer fits) or Accelerate's ``find_executable_batch_size``
   (halve on OOM); fp32, micro-batches from 1 to the global batch. The real Accelerate
   decorator drives the bursts when ``accelerate`` is installed (``--batch-finder auto``);
   otherwise the policy is reimplemented here (Lightning's tuner needs its own Trainer and
   LightningModule, so it is always reimplemented). Each probe is a 3-step burst (Lightning's
   ``steps_per_trial``) under the budget; its time is the row's search time.
4. **autotune**: ``autotune.study.search`` with the same budget (a fresh SQLite study in a
   temporary folder; the preset goes to ``--out``); its wall time is the search time.
   **autotune-held** (asked for by name, with ``--hold``): the same search with the model
   knobs ``--hold`` names kept at their defaults, so the search with a knob and without it
   are measured side by side (``--hold loss,checkpoint_every``).
5. **grid best**: every config of the same ``SearchSpace`` the search explores, one burst
   each with the search's burst settings, when it holds at most ``--grid-max`` configs.

How a row is measured: once every policy has chosen its config, the configs are measured
in ``--repeats`` rounds (default 2); a round runs one burst (a fresh process: ``--warmup``
untimed and ``--steps`` timed optimizer steps, under the budget) of every distinct config,
forward in even rounds and backward in odd ones, so a change of load on the machine falls on
every row alike. A row's figure is the better of its bursts' median step times (interference
from other work only ever slows a step down, so the faster median is the less disturbed
one); the spread between its bursts is shown beside it. Rows whose policies chose the same
config share one measurement. Peak memory is the largest over the bursts. Compilation is
excluded from throughput and shown on its own (the first step's excess over the median;
torch's on-disk compile cache can make it shorter than a cold compile). The search's winner
is measured again like every other row, in this same run, so all rows are comparable. A
naive or hand-tuned config that does not fit the budget is measured without the cap instead,
and marked as not fitting.

Usage (from the repository root; progress goes to stderr, the report to stdout and to
``--out``/compare.md, all rows to ``--json``)::

    python benchmarks/compare.py --model mu --device cpu --budget 8GB
    python benchmarks/compare.py --model gpt-small --device cpu --budget 8GB \\
        --steps 3 --search-trials 4 --grid-max 0            # a quick smoke run
    python benchmarks/compare.py --model pointer-gen --device cpu --budget 8GB --seq-len 256
    python benchmarks/compare.py --model gpt2-124m --device cuda --budget 24GB --json out.json
    python benchmarks/compare.py --model gpt-small --device cpu --budget 8GB \\
        --policies naive,autotune,autotune-held --hold loss,checkpoint_every

``--seq-len`` sets one sequence length for every row (for pointer-gen: the source article
length; its target stays 192 tokens); ``--global-batch`` changes the samples per optimizer
step for every row; ``--policies`` runs a subset of the rows; ``--knob`` restricts the
search and the grid exactly as ``autotune search --knob`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

from autotune.core.files import atomic_write_text
from autotune.engine.mfu import mfu

# the guides' configs: one owner, the search uses them too
from autotune.study.plan.playbook import (
    hand_tuned_config,
    model_family,
    naive_config,
)

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile
    from autotune.study import SearchResult
    from autotune.study.session.watch import MachineWatch
    from autotune.study.trials.burst_runner import BurstFn

POLICIES = ("naive", "hand-tuned", "largest-batch", "autotune", "autotune-held", "grid")
BATCH_FINDERS = ("auto", "power", "halve", "accelerate")
PROBE_STEPS, PROBE_WARMUP = 2, 1  # 3 optimizer steps per probe: Lightning's steps_per_trial
DEFAULT_GRID_MAX = 48

Log = Callable[[str], None]


# ------------------------------------------------------------------------------------
# The largest batch that fits (Lightning's power mode / Accelerate's halving)
# ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One try of a batch finder: did this micro-batch run within the budget?"""

    micro_batch: int
    fits: bool
    detail: str = ""
    peak_memory_bytes: int | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class FinderResult:
    policy: str
    micro_batch: int | None  # None: not even the smallest fits
    probes: tuple[Probe, ...]

    @property
    def wall_s(self) -> float:
        return sum(p.wall_s for p in self.probes)


ProbeFn = Callable[[int], Probe]


def batch_candidates(global_batch: int) -> list[int]:
    """Micro-batches a finder may pick: powers of two dividing the global batch, ascending."""
    out, m = [], 1
    while m <= global_batch:
        if global_batch % m == 0:
            out.append(m)
        m *= 2
    return out


def find_largest_power(probe: ProbeFn, global_batch: int) -> FinderResult:
    """Lightning's ``scale_batch_size(mode="power")``: double from 1 while it fits; the
    last size that fitted wins."""
    probes: list[Probe] = []
    best = None
    for micro in batch_candidates(global_batch):
        result = probe(micro)
        probes.append(result)
        if not result.fits:
            break
        best = micro
    return FinderResult(
        policy="power mode (Lightning's scale_batch_size), reimplemented",
        micro_batch=best,
        probes=tuple(probes),
    )


def find_largest_halving(probe: ProbeFn, global_batch: int) -> FinderResult:
    """Accelerate's ``find_executable_batch_size``: start at the global batch and halve
    on every OOM; the first size that fits wins."""
    probes: list[Probe] = []
    for micro in reversed(batch_candidates(global_batch)):
        result = probe(micro)
        probes.append(result)
        if result.fits:
            return FinderResult(
                policy="halving (Accelerate's find_executable_batch_size), reimplemented",
                micro_batch=micro,
                probes=tuple(probes),
            )
    return FinderResult(
        policy="halving (Accelerate's find_executable_batch_size), reimplemented",
        micro_batch=None,
        probes=tuple(probes),
    )


def find_largest_accelerate(probe: ProbeFn, global_batch: int, *, device_kind: str) -> FinderResult:
    """Accelerate's own ``find_executable_batch_size`` deciding, our bursts answering.

    A probe that does not fit raises the out-of-memory ``RuntimeError`` Accelerate
    recognises (``should_reduce_batch_size``), so the library's own reduction rule picks
    the next size; a size that does not divide the global batch is rounded down to one that
    does (the global batch is fixed)."""
    from accelerate.utils import find_executable_batch_size

    probes: list[Probe] = []
    message = (
        "CUDA out of memory."
        if device_kind == "cuda"
        else "DefaultCPUAllocator: can't allocate memory"
    )

    @find_executable_batch_size(starting_batch_size=global_batch)
    def attempt(batch_size: int) -> int:
        micro = max(m for m in batch_candidates(global_batch) if m <= max(batch_size, 1))
        result = next((p for p in probes if p.micro_batch == micro), None)
        if result is None:
            result = probe(micro)
            probes.append(result)
        if not result.fits:
            raise RuntimeError(
                f"{message} (autotune burst at micro-batch {micro}: {result.detail})"
            )
        return micro

    try:
        micro: int | None = attempt()
    except RuntimeError as exc:
        if "batch size" not in str(exc).lower():  # "No executable batch size found"
            raise
        micro = None
    return FinderResult(
        policy="Accelerate's find_executable_batch_size (the installed library)",
        micro_batch=micro,
        probes=tuple(probes),
    )


def choose_finder(name: str) -> tuple[str, list[str]]:
    """Which finder ``--batch-finder`` means here, and what to say about the libraries."""
    have = {
        lib: importlib.util.find_spec(lib) is not None
        for lib in ("lightning", "pytorch_lightning", "accelerate")
    }
    notes = [
        "installed: " + ", ".join(f"{lib} {'yes' if ok else 'no'}" for lib, ok in have.items())
    ]
    if name == "auto":
        name = "accelerate" if have["accelerate"] else "power"
    if name == "accelerate" and not have["accelerate"]:
        from autotune.core.errors import UsageError

        raise UsageError(
            "--batch-finder accelerate: the accelerate package is not installed here; "
            "use --batch-finder power or halve (the same policies, reimplemented)"
        )
    if have["lightning"] or have["pytorch_lightning"]:
        notes.append(
            "Lightning's tuner runs its own Trainer on a LightningModule in-process, so its "
            "power-mode policy is reimplemented over isolated bursts"
        )
    return name, notes


def burst_probe(
    spec: ModelSpec,
    base: TrainConfig,
    *,
    burst_fn: BurstFn,
    budget_bytes: int,
    device: str,
    caps: DeviceCaps | None,
    seed: int,
    timeout_s: float,
    log: Log,
) -> ProbeFn:
    """A probe that runs ``base`` at a micro-batch (accumulation keeps the global batch)
    for 3 optimizer steps under the budget: it fits if the burst is ok within the budget."""
    from autotune.core.units import format_bytes

    def probe(micro: int) -> Probe:
        config = base.replace(micro_batch=micro, grad_accum=base.global_batch // micro)
        t0 = time.monotonic()
        result = burst_fn(
            spec,
            config,
            steps=PROBE_STEPS,
            warmup=PROBE_WARMUP,
            budget_bytes=budget_bytes,
            timeout_s=timeout_s,
            device=device,
            seed=seed,
            device_caps=caps,
        )
        wall = result.wall_s if result.wall_s is not None else time.monotonic() - t0
        peak = result.peak_memory_bytes
        fits = result.ok and (peak is None or peak <= budget_bytes)
        if result.ok and not fits:
            detail = f"peak {format_bytes(peak)} over the budget"
        elif result.ok:
            detail = f"ok, peak {format_bytes(peak)}"
        else:
            detail = f"{result.status}: {result.reason}"
        log(f"  probe micro-batch {micro}: {'fits' if fits else 'does not fit'} ({detail})")
        return Probe(
            micro_batch=micro, fits=fits, detail=detail, peak_memory_bytes=peak, wall_s=wall
        )

    return probe


# ------------------------------------------------------------------------------------
# Measuring a row
# ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MeasureSettings:
    steps: int
    warmup: int
    repeats: int
    device: str
    seed: int
    timeout_s: float
    caps: DeviceCaps | None = None


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """A config measured by ``repeats`` bursts: the better median, the largest peak."""

    status: str
    reason: str = ""
    throughput: float | None = None  # the better of the repeats' throughputs
    throughputs: tuple[float, ...] = ()  # every ok repeat's
    step_time_median_s: float | None = None
    compile_s: float | None = None
    peak_memory_bytes: int | None = None
    mfu: float | None = None  # against the peak of the config's precision (burst's figure)
    mfu_bf16: float | None = None  # against the device's dense bf16 peak (None: unknown)
    capped: bool = True  # measured under the budget (False: without the cap)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def spread(self) -> float | None:
        """(best - worst) / best over the repeats."""
        if len(self.throughputs) < 2 or not max(self.throughputs):
            return None
        return (max(self.throughputs) - min(self.throughputs)) / max(self.throughputs)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["throughputs"] = list(self.throughputs)
        data["spread"] = self.spread
        return data


def summarize(
    results: Sequence[BurstResult],
    *,
    spec: ModelSpec,
    config: TrainConfig,
    caps: DeviceCaps | None,
    capped: bool,
    wall_s: float = 0.0,
) -> Measurement:
    """One row's figures from its bursts: the better throughput (with its median step
    time), the largest peak and compile time; the first failure, if any, is the status."""
    oks = [r for r in results if r.ok and r.throughput is not None]
    failed = next((r for r in results if not r.ok), None)
    peaks = [r.peak_memory_bytes for r in results if r.peak_memory_bytes is not None]
    compiles = [r.compile_s for r in results if r.compile_s is not None]
    best = max(oks, key=lambda r: r.throughput or 0.0, default=None)
    if failed is not None:
        status, reason = failed.status, failed.reason
    else:
        status, reason = ("ok", "") if oks else ("error", "no burst reported a throughput")
    return Measurement(
        status=status,
        reason=reason,
        throughput=None if best is None else best.throughput,
        throughputs=tuple(r.throughput for r in oks if r.throughput is not None),
        step_time_median_s=None if best is None else best.step_time_median_s,
        compile_s=max(compiles) if compiles else None,
        peak_memory_bytes=max(peaks) if peaks else None,
        mfu=None if best is None else best.mfu,
        mfu_bf16=_mfu_bf16(spec, config, best, caps),
        capped=capped,
        wall_s=wall_s,
    )


@dataclass
class _Pending:
    """A distinct config to measure and the rows that show it."""

    config: TrainConfig
    rows: list[Row]
    results: list[BurstResult] = field(default_factory=list)
    capped: bool = True
    failed: bool = False
    wall_s: float = 0.0
    started: float = 0.0  # the last burst's start, on the machine watch's clock

    @property
    def uncap_if_over(self) -> bool:
        return any(row.uncap_if_over for row in self.rows)


def _outside_load(watch: MachineWatch, item: _Pending) -> str:
    """The log line's note on what else ran during ``item``'s last burst; a row note when
    the machine was busy."""
    load = watch.window(item.started)
    if load.busy:
        for row in item.rows:
            row.notes.append(f"a burst ran while {load.describe()}")
    return f" [outside load {load.outside_cores_mean:.2f} cores]"


def measure_rows(
    spec: ModelSpec,
    rows: Sequence[Row],
    *,
    burst_fn: BurstFn,
    settings: MeasureSettings,
    budget_bytes: int,
    log: Log,
    watch: MachineWatch | None = None,
) -> None:
    """Measure every row's config, in rounds: each round runs one burst of every distinct
    config, forward on even rounds and backward on odd ones, so a change of load on the
    machine falls on every row alike. Rows with the same config share one measurement. A
    config of a row with ``uncap_if_over`` that runs out of the budget is measured without
    the cap from then on; any other failure ends that config's measurement. With a machine
    ``watch``, each burst's log line says how many cores other processes used during it,
    and a row measured under such load says so in its notes."""
    pending: dict[str, _Pending] = {}
    for row in rows:
        if row.config is None or row.skipped:
            continue
        key = json.dumps(row.config.to_dict(), sort_keys=True, default=str)
        if key in pending:
            first = pending[key].rows[0].policy
            row.notes.append(f"the same config as {first}: measured once, shown for both")
            pending[key].rows.append(row)
        else:
            pending[key] = _Pending(config=row.config, rows=[row])
    order = list(pending.values())

    def burst(item: _Pending, budget: int | None) -> BurstResult:
        t0 = time.monotonic()
        item.started = watch.now() if watch is not None else 0.0
        # marked as ours: the GPU's utilization while it runs is our own (where NVML lists
        # no process, as in a VM, unmarked bursts read as another job's load)
        with watch.burst() if watch is not None else contextlib.nullcontext():
            result = burst_fn(
                spec,
                item.config,
                steps=settings.steps,
                warmup=settings.warmup,
                budget_bytes=budget,
                timeout_s=settings.timeout_s,
                device=settings.device,
                seed=settings.seed,
                device_caps=settings.caps,
            )
        item.wall_s += time.monotonic() - t0
        return result

    for round_ in range(settings.repeats):
        for item in order if round_ % 2 == 0 else reversed(order):
            if item.failed:
                continue
            names = "/".join(row.policy for row in item.rows)
            result = burst(item, budget_bytes if item.capped else None)
            if result.status == "oom" and item.capped and item.uncap_if_over:
                log(f"  {names}: out of the budget ({result.reason}); again without the cap")
                for row in item.rows:
                    row.notes.append(
                        f"does not fit the budget ({result.reason}); measured without the cap"
                    )
                item.capped = False
                item.results.clear()
                result = burst(item, None)
            item.results.append(result)
            shown = (
                fmt_float(result.throughput) if result.ok else f"{result.status}: {result.reason}"
            )
            where = f"round {round_ + 1}/{settings.repeats} {names}"
            load = "" if watch is None else _outside_load(watch, item)
            log(f"  {where} ({_summary(item.config)}): {shown}{load}")
            item.failed = not result.ok
    for item in order:
        m = summarize(
            item.results,
            spec=spec,
            config=item.config,
            caps=settings.caps,
            capped=item.capped,
            wall_s=item.wall_s,
        )
        for row in item.rows:
            row.measurement = m


def _mfu_bf16(
    spec: ModelSpec, config: TrainConfig, best: BurstResult | None, caps: DeviceCaps | None
) -> float | None:
    """Model FLOPs utilisation against the device's dense bf16 peak, whatever the
    config's precision (one yardstick for every row)."""
    if best is None:
        return None
    bf16 = config.replace(precision="bf16")  # the bf16 peak, not the config's own
    return mfu(spec, bf16, caps, samples_per_s=best.samples_per_s)


# ------------------------------------------------------------------------------------
# Rows and the table
# ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Row:
    policy: str
    config: TrainConfig | None = None
    measurement: Measurement | None = None
    search_s: float | None = None  # time spent choosing the config (finder, search, grid)
    skipped: str = ""  # why the row has no figure
    uncap_if_over: bool = False  # over the budget: measure without the cap (naive, hand-tuned)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # for --json

    def fits(self, budget_bytes: int) -> bool | None:
        m = self.measurement
        if m is None or m.peak_memory_bytes is None:
            return None
        return m.ok and m.capped and m.peak_memory_bytes <= budget_bytes

    def to_dict(self, budget_bytes: int, naive: float | None) -> dict[str, Any]:
        tp = self.measurement.throughput if self.measurement else None
        return {
            "policy": self.policy,
            "config": None if self.config is None else self.config.to_dict(),
            "config_summary": _summary(self.config),
            "measurement": None if self.measurement is None else self.measurement.to_dict(),
            "ratio_to_naive": tp / naive if tp and naive else None,
            "fits_budget": self.fits(budget_bytes),
            "search_s": self.search_s,
            "skipped": self.skipped,
            "notes": list(self.notes),
            **self.details,
        }


def _summary(config: TrainConfig | None) -> str:
    if config is None:
        return "-"
    from autotune.study import summarize_config

    return summarize_config(config.to_dict())


def naive_throughput(rows: Sequence[Row]) -> float | None:
    for row in rows:
        if row.policy == "naive" and row.measurement is not None and row.measurement.ok:
            return row.measurement.throughput
    return None


def render_rows(rows: Sequence[Row], *, unit: str, budget_bytes: int) -> str:
    """The comparison table (Markdown), then each row's notes. An MFU column (against the
    device's dense bf16 peak) appears where the device's peak is known."""
    from autotune.core.units import format_bytes

    base = naive_throughput(rows)
    with_mfu = any(r.measurement is not None and r.measurement.mfu_bf16 for r in rows)
    headers = [
        "policy",
        "config",
        unit,
        "spread",
        "vs guide naive",
        *(["MFU (bf16 peak)"] if with_mfu else []),
        "step",
        "compile",
        "peak memory",
        f"fits {format_bytes(budget_bytes)}",
        "search time",
    ]
    body: list[list[str]] = []
    notes: list[str] = []
    for row in rows:
        m = row.measurement
        fits = row.fits(budget_bytes)
        fits_text = "-" if fits is None else "yes" if fits else "no"
        if m is None or not m.ok or m.throughput is None:
            status = row.skipped or (f"{m.status}: {m.reason}" if m else "not measured")
            if len(status) > 60:
                notes.append(f"{row.policy}: {status}")
                status = status[:57] + "..."
            figures = [status, "-", "-", *(["-"] if with_mfu else []), "-", "-"]
        else:
            spread = m.spread
            if fits is False and not m.capped:
                fits_text = "no (measured uncapped)"
            mfu = [] if not with_mfu else ["-" if m.mfu_bf16 is None else f"{m.mfu_bf16:.1%}"]
            figures = [
                fmt_float(m.throughput),
                "-" if spread is None else f"{spread:.1%}",
                fmt_ratio(m.throughput / base if base else None),
                *mfu,
                fmt_seconds(m.step_time_median_s),
                fmt_seconds(m.compile_s),
            ]
        body.append(
            [
                row.policy,
                _summary(row.config),
                *figures,
                format_bytes(m.peak_memory_bytes) if m else "-",
                fits_text,
                fmt_seconds(row.search_s),
            ]
        )
        notes.extend(n if n.startswith(row.policy) else f"{row.policy}: {n}" for n in row.notes)
    align = "llrrr" + ("r" if with_mfu else "") + "rrrll"
    table = render_table(headers, body, align=align)
    if notes:
        table += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return table


# ------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchmarks/compare.py",
        description="autotune against naive, hand-tuned and largest-batch configs, one run.",
    )
    p.add_argument(
        "--model", required=True, help="a built-in model name, hf:<architecture> or pkg.mod:attr"
    )
    p.add_argument(
        "--model-arg",
        action="append",
        default=[],
        help="KEY=VALUE for the model's build (hf:llama: num_hidden_layers=4), repeatable",
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the best)")
    p.add_argument("--budget", required=True, help="memory budget: 8GB, 8GiB, 8000MB or 0.5")
    p.add_argument("--global-batch", type=int, default=None, help="default: the model's")
    p.add_argument(
        "--seq-len", default=None, help="one length for every row (default: the model's)"
    )
    p.add_argument("--steps", type=int, default=None, help="timed steps per burst (CPU 5, CUDA 20)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (CPU 2, CUDA 3)")
    p.add_argument("--repeats", type=int, default=2, help="bursts per measured row")
    p.add_argument("--search-trials", type=int, default=None, help="the search's --trials")
    p.add_argument("--search-timeout", default=None, help="the search's --timeout (e.g. 10m)")
    p.add_argument("--search-steps", type=int, default=None, help="timed steps per search trial")
    p.add_argument(
        "--search-race-steps",
        type=int,
        default=None,
        help="timed steps of each of the search race's bursts (default: --search-steps)",
    )
    p.add_argument("--knob", action="append", default=[], help="NAME=V1,V2 (search and grid)")
    p.add_argument(
        "--hold",
        default="",
        help="model knobs the autotune-held row's search keeps at their defaults "
        "(comma-separated, e.g. loss,checkpoint_every): the search with and without them",
    )
    p.add_argument("--grid-max", type=int, default=DEFAULT_GRID_MAX, help="largest grid to run")
    p.add_argument("--batch-finder", choices=BATCH_FINDERS, default="auto")
    p.add_argument(
        "--policies",
        default=",".join(p for p in POLICIES if p != "autotune-held"),
        help="rows to run, comma-separated (autotune-held only when named, with --hold)",
    )
    p.add_argument("--burst-timeout", type=float, default=600.0, help="seconds per burst")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="folder for the preset and report")
    p.add_argument("--json", type=Path, default=None, help="write every row here as JSON")
    return p


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_args(args: argparse.Namespace) -> list[str]:
    from autotune.core.errors import UsageError

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise UsageError(f"--policies {args.policies!r}: expected some of {', '.join(POLICIES)}")
    for name in (
        "steps",
        "warmup",
        "repeats",
        "search_trials",
        "search_steps",
        "search_race_steps",
        "global_batch",
    ):
        value = getattr(args, name)
        low = 0 if name == "warmup" else 1
        if value is not None and value < low:
            raise UsageError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if args.grid_max < 0:
        raise UsageError(f"--grid-max must be >= 0, got {args.grid_max}")
    if args.burst_timeout <= 0:
        raise UsageError(f"--burst-timeout must be positive, got {args.burst_timeout}")
    if ("autotune-held" in policies) != bool(args.hold.strip()):
        raise UsageError("--hold names the knobs of the autotune-held row: give both or neither")
    return [p for p in POLICIES if p in policies]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from autotune.core.errors import AutotuneError, UsageError

    rows: list[Row] = []
    try:
        return run(args, rows, argv=argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _log("interrupted; rows measured so far:")
        for row in rows:
            m = row.measurement
            _log(f"  {row.policy}: {_summary(row.config)}: {m.throughput if m else row.skipped}")
        return 130


@dataclass(frozen=True, kw_only=True)
class Task:
    """What every row is chosen for: one model on one device, under one budget, at one
    global batch and sequence length (and the command line's other settings)."""

    args: argparse.Namespace
    spec: ModelSpec
    profile: HardwareProfile
    caps: DeviceCaps
    budget: int
    global_batch: int
    seq_len: int
    out: Path


def run(args: argparse.Namespace, rows: list[Row], *, argv: Sequence[str] | None = None) -> int:
    from autotune.burst.supervisor import run_burst

    policies = _check_args(args)
    task = _task(args)
    settings = _measure_settings(args, task.caps)
    header = _header(task, settings, argv)
    for line in header:
        _log(line)

    # Phase 1: each policy chooses its config (the finder, the search and the grid run
    # their own bursts here). Phase 2 measures them all, interleaved.
    _choose_configs(task, policies, rows)
    _log(f"[measure] {settings.repeats} rounds over the rows' configs")
    from autotune.study.session.watch import MachineWatch

    with MachineWatch(device=task.caps.device) as watch:
        measure_rows(
            task.spec, rows, burst_fn=run_burst, settings=settings, budget_bytes=task.budget,
            log=_log, watch=watch,
        )  # fmt: skip
        header.append(f"- outside load during the measurements: {watch.total().describe()}")

    header.append(f"- load average at the end: {load_average()}")
    _write_report(task, settings, header, rows)
    return 0


def _task(args: argparse.Namespace) -> Task:
    """The model, device, budget, global batch and sequence length the arguments name,
    and the output folder (made here)."""
    from autotune.core.errors import UsageError
    from autotune.core.units import parse_budget
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model, parse_model_args
    from autotune.study.plan.space import parse_seq_len

    spec = load_model(args.model, parse_model_args(args.model_arg))
    profile = probe()
    caps = profile.device(args.device)
    budget = parse_budget(args.budget, device_memory_bytes=caps.total_memory_bytes)
    seqs = parse_seq_len(args.seq_len, max_seq_len=spec.max_seq_len) if args.seq_len else None
    if seqs is not None and len(seqs) != 1:
        raise UsageError(f"--seq-len {args.seq_len!r}: give one length (every row uses it)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = (
        args.out
        or Path("autotune_runs") / "compare" / f"{spec.name}-{caps.device.replace(':', '')}-{stamp}"
    )
    out.mkdir(parents=True, exist_ok=True)
    return Task(
        args=args,
        spec=spec,
        profile=profile,
        caps=caps,
        budget=budget,
        global_batch=args.global_batch or spec.global_batch,
        seq_len=seqs[0] if seqs else spec.seq_len,
        out=out,
    )


def _measure_settings(args: argparse.Namespace, caps: DeviceCaps) -> MeasureSettings:
    cuda = caps.kind == "cuda"
    return MeasureSettings(
        steps=args.steps or (20 if cuda else 5),
        warmup=args.warmup if args.warmup is not None else (3 if cuda else 2),
        repeats=args.repeats,
        device=caps.device,
        seed=args.seed,
        timeout_s=args.burst_timeout,
        caps=caps,
    )


def _header(task: Task, settings: MeasureSettings, argv: Sequence[str] | None) -> list[str]:
    """The report's opening lines: what was run, where, and how it is measured."""
    import torch

    from autotune.core.units import format_bytes

    spec, caps = task.spec, task.caps
    cmd = command_line(argv, script=__file__) if argv is not None else command_line()
    return [
        f"## compare: {spec.name} on {caps.device}, budget {task.args.budget} "
        f"({format_bytes(task.budget)})",
        "",
        f"- date: {utc_now()}",
        f"- command: `{cmd}`",
        *(f"- {line}" for line in hardware_lines(task.profile, caps.device)),
        f"- torch {torch.__version__}, {torch.get_num_threads()} intra-op threads",
        f"- task: global batch {task.global_batch}, sequence length {task.seq_len}"
        + (" (source; target 192)" if model_family(spec) == "pointer-gen" else "")
        + f"; throughput in {spec.throughput_label}",
        f"- measurement: {settings.repeats} interleaved rounds of one burst per config "
        f"({settings.warmup} warm-up + {settings.steps} timed optimizer steps, under the "
        "budget); a row shows its better median; spread = (best - worst) / best of its bursts",
        f"- load average at start: {load_average()}",
    ]


def _choose_configs(task: Task, policies: Sequence[str], rows: list[Row]) -> None:
    """Append a row per policy, each with the config its policy chose (or why none)."""
    spec, gb, seq = task.spec, task.global_batch, task.seq_len
    held = held_knobs(spec, task.args) if "autotune-held" in policies else None  # checked first
    if "naive" in policies:
        recipe = naive_config(spec, global_batch=gb, seq_len=seq)
        rows.append(
            Row(policy="naive", config=recipe.config, uncap_if_over=True, notes=list(recipe.notes))
        )
    if "hand-tuned" in policies:
        recipe = hand_tuned_config(spec, task.caps, global_batch=gb, seq_len=seq)
        rows.append(
            Row(
                policy="hand-tuned",
                config=recipe.config,
                skipped="" if recipe.config is not None else "no guide for this model",
                uncap_if_over=True,
                notes=list(recipe.notes),
            )
        )
    if "largest-batch" in policies:
        rows.append(_largest_batch_row(task))
    if "autotune" in policies:
        rows.append(_autotune_row(task))
    if held is not None:
        rows.append(_autotune_row(task, held=held))
    if "grid" in policies:
        rows.append(_grid_row(task))


def _write_report(
    task: Task, settings: MeasureSettings, header: Sequence[str], rows: Sequence[Row]
) -> None:
    """Print the report and write it to the output folder, with every row as JSON."""
    unit, budget, out = task.spec.throughput_label, task.budget, task.out
    report = "\n".join(header) + "\n\n" + render_rows(rows, unit=unit, budget_bytes=budget) + "\n"
    print(report)
    atomic_write_text(out / "compare.md", report)
    naive_tp = naive_throughput(rows)
    data = {
        "model": task.spec.name,
        "device": task.caps.device,
        "budget_bytes": budget,
        "global_batch": task.global_batch,
        "seq_len": task.seq_len,
        "unit": unit,
        "header": list(header),
        "settings": dataclasses.asdict(dataclasses.replace(settings, caps=None)),
        "rows": [row.to_dict(budget, naive_tp) for row in rows],
    }
    text = json.dumps(data, indent=2, default=str) + "\n"
    atomic_write_text(out / "compare.json", text)
    if task.args.json is not None:
        atomic_write_text(task.args.json, text)
    _log(f"report and rows written to {out}/compare.md and compare.json")


def _largest_batch_row(task: Task) -> Row:
    from autotune.burst.supervisor import run_burst

    args, spec, caps, budget = task.args, task.spec, task.caps, task.budget
    gb, seq = task.global_batch, task.seq_len
    finder, finder_notes = choose_finder(args.batch_finder)
    base = naive_config(spec, global_batch=gb, seq_len=seq).config
    assert base is not None  # naive_config always gives one
    _log(f"[largest-batch] finder: {finder}; {'; '.join(finder_notes)}")
    probe_fn = burst_probe(
        spec, base, burst_fn=run_burst, budget_bytes=budget, device=caps.device,
        caps=caps, seed=args.seed, timeout_s=args.burst_timeout, log=_log,
    )  # fmt: skip
    if finder == "accelerate":
        found = find_largest_accelerate(probe_fn, gb, device_kind=caps.kind)
    elif finder == "halve":
        found = find_largest_halving(probe_fn, gb)
    else:
        found = find_largest_power(probe_fn, gb)
    notes = [
        f"policy: {found.policy}; {'; '.join(finder_notes)}",
        "probes (3 optimizer steps each): "
        + ", ".join(f"{p.micro_batch} {'fits' if p.fits else 'no'}" for p in found.probes),
    ]
    row = Row(
        policy="largest-batch",
        search_s=found.wall_s,
        notes=notes,
        details={"finder": found.policy, "probes": [p.to_dict() for p in found.probes]},
    )
    if found.micro_batch is None:
        row.skipped = "no micro-batch fits"
    else:
        row.config = base.replace(micro_batch=found.micro_batch, grad_accum=gb // found.micro_batch)
    return row


def held_knobs(spec: ModelSpec, args: argparse.Namespace) -> dict[str, Any]:
    """``--hold``'s model knobs at their defaults; a name the model has not, or one that
    ``--knob`` sets too, is an error (before any row's search runs)."""
    from autotune.core.errors import UsageError

    held: dict[str, Any] = {}
    knob_names = {k.partition("=")[0].strip().removeprefix("knobs.") for k in args.knob}
    for name in (n.strip() for n in args.hold.split(",") if n.strip()):
        try:
            held[name] = spec.knob(name).default
        except KeyError as exc:
            raise UsageError(f"--hold: {exc.args[0]}") from None
        if name in knob_names:
            raise UsageError(f"--hold {name}: --knob sets it too; hold it or restrict it, not both")
    return held


def _autotune_row(task: Task, *, held: Mapping[str, Any] | None = None) -> Row:
    """The search's pick; with ``held``, a search whose model knobs ``held`` stay at
    those values (the ``autotune-held`` row: what the search finds without them)."""
    from autotune.core.errors import AutotuneError
    from autotune.study import DEFAULT_STEPS, SearchEvent, search, search_options

    args = task.args
    policy = "autotune" if held is None else "autotune-held"
    knobs = [*args.knob, *(f"{name}={value}" for name, value in (held or {}).items())]
    _log(f"[{policy}] searching" + (f", holding {_held_text(held)}" if held else ""))

    def progress(event: SearchEvent) -> None:
        if event.kind == "trial" and event.trial is not None:
            t = event.trial
            figure = fmt_float(t.throughput) if t.status == "ok" else t.reason[:80]
            _log(f"  trial #{t.number} {t.status}: {t.summary()}: {figure}")
        elif event.message:
            _log(f"  {event.message}")

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compare-study-") as tmp:
        try:
            result: SearchResult = search(
                task.spec,
                budget=task.budget,
                **search_options(
                    device=task.caps.device,
                    global_batch=task.global_batch,
                    seq_len=[task.seq_len],
                    trials=args.search_trials,
                    timeout=args.search_timeout,
                    steps=args.search_steps or DEFAULT_STEPS,
                    race_steps=args.search_race_steps,
                    storage=f"sqlite:///{Path(tmp) / 'study.db'}",
                    output=task.out / ("preset.yaml" if held is None else "preset-held.yaml"),
                    seed=args.seed,
                    knobs=knobs,
                    burst_timeout=args.burst_timeout,
                    hardware=task.profile,
                    progress=progress,
                    runs_dir=tmp,
                ),
            )
        except AutotuneError as exc:
            return Row(
                policy=policy,
                skipped=f"search failed: {exc}",
                search_s=time.monotonic() - t0,
            )
    counts = result.counts()
    notes = [f"held at their defaults: {_held_text(held)}"] if held else []
    notes += [
        f"search: {counts['ran']} trials ran, {counts['measured']} measured "
        f"({counts['infeasible']} infeasible, "
        f"{counts['pruned']} pruned, {counts['failed']} failed) of a space of "
        f"{result.space_size}; stopped: {result.stopped}; preset {result.preset_path}",
    ]
    if result.race is not None and result.naive is not None:
        notes.append(
            f"the search's own speedup over the search's naive ({result.naive.summary()}; "
            f"not the guide naive of this table), same study: {result.race.qualified_speedup()}"
        )
    details = {"search": result.to_dict()}
    config = result.best_config
    if config is None:
        return Row(
            policy=policy, skipped="the search found nothing", search_s=result.wall_s,
            notes=notes, details=details,
        )  # fmt: skip
    return Row(policy=policy, config=config, search_s=result.wall_s, notes=notes, details=details)


def _held_text(held: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{name}={value}" for name, value in (held or {}).items())


def _grid_row(task: Task) -> Row:
    from autotune.burst.supervisor import run_burst
    from autotune.study import DEFAULT_STEPS
    from autotune.study.plan.space import SearchSpace, parse_knob_args

    args, spec, caps, budget = task.args, task.spec, task.caps, task.budget
    space = SearchSpace.for_model(
        spec,
        caps,
        global_batch=task.global_batch,
        seq_len=[task.seq_len],
        cpu_count=task.profile.cpu.logical_cores,
        restrict=parse_knob_args(args.knob),
    )
    n = space.size()
    if n > args.grid_max:
        return Row(policy="grid", skipped=f"skipped: {n} configs (--grid-max {args.grid_max})")
    _log(f"[grid] {n} configs")
    steps = args.search_steps or DEFAULT_STEPS
    warmup = 3 if caps.kind == "cuda" else 1  # the search's default
    trials: list[dict[str, Any]] = []
    best: tuple[float, TrainConfig] | None = None
    total = 0.0
    for i, config in enumerate(space.grid()):
        t0 = time.monotonic()
        result = run_burst(
            spec, config, steps=steps, warmup=warmup, budget_bytes=budget,
            timeout_s=args.burst_timeout, device=caps.device, seed=args.seed, device_caps=caps,
        )  # fmt: skip
        wall = result.wall_s if result.wall_s is not None else time.monotonic() - t0
        total += wall
        peak = result.peak_memory_bytes
        ok = result.ok and result.throughput is not None and (peak is None or peak <= budget)
        trials.append(
            {"config": config.to_dict(), "status": result.status, "throughput": result.throughput,
             "peak_memory_bytes": peak, "wall_s": wall}
        )  # fmt: skip
        shown = fmt_float(result.throughput) if ok else f"{result.status}: {result.reason[:60]}"
        _log(f"  {i + 1}/{n} {_summary(config)}: {shown}")
        if ok and result.throughput is not None and (best is None or result.throughput > best[0]):
            best = (result.throughput, config)
    ran_ok = sum(1 for t in trials if t["status"] == "ok")
    notes = [f"grid: {n} configs, {ran_ok} ran ok; {steps} timed steps per trial, no pruning"]
    details = {"grid": trials}
    if best is None:
        return Row(
            policy="grid", skipped="no config fits", search_s=total, notes=notes, details=details
        )
    notes.append(f"its best in the grid's own burst: {fmt_float(best[0])}")
    return Row(policy="grid", config=best[1], search_s=total, notes=notes, details=details)


if __name__ == "__main__":
    sys.exit(main())
