"""The GPU suite's gpt2-124m steps (issue 55): the default search on the whole card, the
knobs that decide a small transformer on Hopper side by side against its winner, and
``autotune train`` on that winner.

``search-gpt2`` writes the winning preset into the suite's output folder; ``knobs-gpt2``
and ``train-gpt2`` read it there (or the one ``--winner`` names, from an earlier run).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from _common import fmt_float, fmt_ratio, fmt_seconds, render_table
from _gpu_steps import (
    ROOT,
    SEARCH_WANT_S,
    Completed,
    Context,
    NotReady,
    Report,
    Step,
    StepFailed,
    _gb,
    _json,
    _preset_tokens_per_s,
    _summary,
    memory_model_rows,
    read_preset,
    search_limit,
)

from autotune.core.files import atomic_write_text

MODEL = "gpt2-124m"
SEQ_LEN = 1024
BUDGET = "0.9"  # a fraction of the card's memory (autotune search's --budget reads it)
MFU_TARGET = 0.50
HAND_TUNED_TARGET = 1.2
WITHIN_LIMIT = 1.10  # the default search within its limit (+10%)
KNOBS_MARGIN_S = 25.0  # model_knobs.py's start (imports, probe) and its table, after --within
KNOBS_ROUNDS = 3
# The least worth starting the knobs with: the winner and one variant, each a process start,
# a compile (17.8 s for the hand-tuned config on the H200) and its steps (about 30 s), after
# the margin. With less, model_knobs.py measures the winner alone, which says nothing.
KNOBS_MIN_S = 120.0
KNOBS_STEPS = 10
TRAIN_STEPS = 200
TRAIN_TARGET = 0.95
# the gpt models' knobs at their defaults (a preset lists only those it sets)
MODEL_KNOB_DEFAULTS: Mapping[str, Any] = {
    "attention": "sdpa",
    "sdpa_backend": "auto",
    "loss": "full",
    "checkpoint_every": 1,
}
SDPA_BACKENDS = ("cudnn", "flash", "efficient")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")


# -- (a) the default search on the whole card -------------------------------------------------
def _search_commands(ctx: Context) -> list[list[str]]:
    limit_s, shrunk = search_limit(ctx.granted_s)
    return [
        ctx.autotune(
            "search", "--model", MODEL, "--seq-len", str(SEQ_LEN), "--budget", BUDGET,
            "--device", "cuda", "--json", "--output", str(ctx.winner),
            "--storage", f"sqlite:///{ctx.work / 'gpt2-124m.db'}",
            *(["--timeout", f"{limit_s:.0f}s"] if shrunk else []),
        )
    ]  # fmt: skip


def _race_median(race: Mapping[str, Any], label: Any) -> float | None:
    entry = next((e for e in race.get("entries") or [] if e.get("label") == label), None)
    return None if entry is None else entry.get("median")


def vs_hand_tuned(found: Mapping[str, Any]) -> tuple[float | None, str]:
    """The winner over the guide's hand-tuned config, both from the race's rounds (side by
    side), and how it was found; None with the reason where the race has no such figure."""
    race = found.get("race") or {}
    hand = {t.get("number") for t in found.get("trials") or [] if t.get("role") == "hand-tuned"}
    if not hand:
        return None, "no hand-tuned trial (no guide for this model and device)"
    entry = next((e for e in race.get("entries") or [] if e.get("trial") in hand), None)
    if entry is None:
        return None, "the hand-tuned config was not in the race"
    if entry.get("label") == race.get("winner"):
        return 1.0, "the winner is the hand-tuned config"
    winner = _race_median(race, race.get("winner"))
    ratio = winner / entry["median"] if winner and entry.get("median") else None
    return ratio, f"race medians, {entry.get('label')}"


def _target(value: float | None, target: float, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    shown = f"{value:.1%}" if percent else fmt_ratio(value)
    if value >= target:
        return f"{shown}: met"
    short = f"{(target - value) * 100:.1f} points" if percent else f"{1 - value / target:.1%}"
    return f"{shown}: {short} short of it"


def _ledger_table(ledger: Mapping[str, Any] | None) -> str:
    """The search's time, part by part, with each part's share of the whole."""
    if not ledger:
        return "The search's JSON has no ledger of its time."
    from autotune.study.trials.ledger import LEDGER_PARTS

    total = ledger.get("total_s") or 0.0
    rows = []
    for name, label in LEDGER_PARTS:
        seconds = ledger.get(name) or 0.0
        if name == "first_compiles_s" and ledger.get("first_compiles"):
            label = f"{label} ({ledger['first_compiles']})"
        rows.append([label, fmt_seconds(seconds), f"{seconds / total:.0%}" if total else "-"])
    rows.append(["total", fmt_seconds(total), f"{ledger.get('configs')} configs"])
    return render_table(["where the search's time went", "time", "share"], rows, align="lrr")


def _search_report(ctx: Context, runs: list[Completed]) -> Report:
    ctx.bring_back(ctx.winner)
    run = runs[0]
    found = _json(run.stdout)
    atomic_write_text(ctx.out / "search-gpt2.json", json.dumps(found, indent=1) + "\n")
    best = found.get("best") or {}
    if not best:
        raise StepFailed(f"the search found no winner: {found.get('stopped') or 'no reason'}")
    race = found.get("race") or {}
    tps = _race_median(race, race.get("winner")) or best.get("throughput")
    mfu = (read_preset(ctx.winner).get("measured") or {}).get("mfu") or best.get("mfu")
    counts = found.get("counts") or {}
    limit_s, shrunk = search_limit(ctx.granted_s)
    wall = found.get("wall_s") or run.wall_s
    hand, how = vs_hand_tuned(found)
    interval = (race.get("speedup_interval") or [None, None])[:2]
    speedup = fmt_ratio(found.get("speedup"))
    if interval[0] is not None:
        speedup += f" (95% {interval[0]:.2f}-{interval[1]:.2f})"
    within = "within" if wall <= limit_s * WITHIN_LIMIT else "OVER"
    limit = f"{'shrunk to fit the suite: ' if shrunk else 'default '}{fmt_seconds(limit_s)}"
    trials = "{measured} / {infeasible} / {pruned} / {failed}".format_map(
        {k: counts.get(k, "-") for k in ("measured", "infeasible", "pruned", "failed")}
    )
    rows = [
        ["time limit", limit],
        ["wall time (search + race)", f"{fmt_seconds(wall)}: {within} the limit +10%"],
        ["stopped", str(found.get("stopped") or "-")],
        ["budget", f"{_gb(found.get('budget_bytes'))} ({BUDGET} of the card)"],
        ["trials measured / infeasible / pruned / failed", trials],
        ["configs measured (distinct)", str((found.get("ledger") or {}).get("configs", "-"))],
        ["winner", _summary(best.get("config") or {})],
        [f"winner {found.get('unit', 'tokens/s')} (race median)", fmt_float(tps)],
        ["winner's peak", _gb(best.get("peak_memory_bytes"))],
        [f"winner's MFU (target {MFU_TARGET:.0%})", _target(mfu, MFU_TARGET, percent=True)],
        ["speedup over naive (race)", speedup],
        [f"over the hand-tuned config (target {HAND_TUNED_TARGET}x)",
         f"{_target(hand, HAND_TUNED_TARGET)} ({how})"],
        *memory_model_rows(found.get("memory_model") or {}),
    ]  # fmt: skip
    table = render_table([f"autotune search --model {MODEL} --seq-len {SEQ_LEN}", "figure"], rows)
    configs = (found.get("ledger") or {}).get("configs", counts.get("measured"))
    figures = {
        "limit_s": limit_s, "limit_shrunk": shrunk, "wall_s": wall, "counts": counts,
        "configs": configs, "winner": best.get("config"),
        "tokens_per_s": tps, "mfu": mfu, "speedup": found.get("speedup"),
        "vs_hand_tuned": hand, "memory_model": found.get("memory_model"),
        "ledger": found.get("ledger"), "stopped": found.get("stopped"),
    }  # fmt: skip
    mfu_text = "-" if mfu is None else f"{mfu:.1%}"
    result = (
        f"{configs} configs in {fmt_seconds(wall)}; winner "
        f"{_summary(best.get('config') or {})}, {fmt_float(tps)} tokens/s, MFU {mfu_text}"
    )
    return Report(result, table + "\n\n" + _ledger_table(found.get("ledger")), figures)


# -- (b) the knobs against the winner, side by side ---------------------------------------------
def _value(config: Mapping[str, Any], name: str) -> Any:
    if name in config and name != "knobs":
        return config[name]
    return (config.get("knobs") or {}).get(name, MODEL_KNOB_DEFAULTS.get(name))


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def fp8_capable(capability: str | None) -> bool:
    """Whether a card of compute ``capability`` (a preset's ``"9.0"``) has FP8 tensor cores."""
    from autotune.core.device_caps import FP8_CAPABILITY

    try:
        major, minor = (int(part) for part in str(capability).split("."))
    except ValueError:
        return False
    return (major, minor) >= FP8_CAPABILITY


def knob_variants(config: Mapping[str, Any], capability: str | None = None) -> list[str]:
    """The ``--variant``s of ``model_knobs.py`` against a winner's ``config``, cheapest
    first (a burst each; the compile modes last): each SDPA backend, fused against foreach
    AdamW, expandable segments, larger micro-batches with the chunked loss (the largest
    also with selective checkpointing), float8 linear layers where the card's compute
    ``capability`` has FP8 tensor cores (compiled: eager float8 is slow; torchao must be
    on the machine, else model_knobs.py names the variant refused), the other compile
    modes. What the winner already has is left out of a variant; a variant that changes
    nothing is dropped."""
    variants: list[str] = []

    def add(**changes: Any) -> None:
        changed = {k: v for k, v in changes.items() if _value(config, k) != v}
        text = ",".join(f"{k}={_text(v)}" for k, v in changed.items())
        if text and text not in variants:
            variants.append(text)

    for backend in SDPA_BACKENDS:
        add(attention="sdpa", sdpa_backend=backend)
    add(fused_optimizer=not config.get("fused_optimizer", False))
    add(expandable_segments=not config.get("expandable_segments", False))
    micro = int(config.get("micro_batch") or 1)
    batch = micro * int(config.get("grad_accum") or 1)
    for larger in sorted({min(2 * micro, batch), batch}):
        if larger > micro:
            add(micro_batch=larger, loss="chunked")
    ckpt = {"activation_checkpointing": True, "checkpoint_every": 2}
    add(micro_batch=batch, loss="chunked", **ckpt)
    if fp8_capable(capability):
        on = not config.get("fp8_linears", False)
        compiled = config.get("compile") or "off"
        add(fp8_linears=on, compile="default" if on and compiled == "off" else compiled)
    for mode in COMPILE_MODES:
        add(compile=mode)
    return variants


def _knobs_commands(ctx: Context) -> list[list[str]]:
    preset = read_preset(ctx.winner)
    config = preset.get("config")
    if not config:
        raise NotReady(f"no winner preset at {ctx.winner} (search-gpt2 writes it, or --winner)")
    within = max(10.0, (ctx.granted_s or 900.0) - KNOBS_MARGIN_S)
    capability = (preset.get("fingerprint") or {}).get("compute_capability")
    variants = [arg for v in knob_variants(config, capability) for arg in ("--variant", v)]
    return [[
        ctx.python, str(ROOT / "benchmarks" / "model_knobs.py"), "--device", "cuda",
        "--preset", str(ctx.winner), "--rounds", str(KNOBS_ROUNDS), "--steps", str(KNOBS_STEPS),
        "--within", f"{within:.0f}s", *variants,
    ]]  # fmt: skip


def knobs_rows(stdout: str) -> list[dict[str, str]]:
    """model_knobs.py's table as rows keyed by its headers (the second ``vs base``, the
    peak's, as ``peak vs base``)."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    if len(lines) < 3:
        return []
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    headers = cells[0]
    if headers.count("vs base") == 2:
        headers[len(headers) - 1 - headers[::-1].index("vs base")] = "peak vs base"
    return [dict(zip(headers, row, strict=False)) for row in cells[2:]]


def _ratio(text: str) -> float | None:
    try:
        return float(text.removesuffix("x"))
    except ValueError:
        return None


def _knobs_report(ctx: Context, runs: list[Completed]) -> Report:
    run = runs[0]
    rows = knobs_rows(run.stdout)
    if run.returncode not in (0, 143) or not rows:
        raise StepFailed(f"model_knobs.py exit {run.returncode}, {len(rows)} rows in its table")
    variants = [r for r in rows if r.get("config") != "winner"]
    ratios = [(r, _ratio(r.get("vs base", ""))) for r in variants]
    measured = [(r, x) for r, x in ratios if x is not None]
    best = max(measured, key=lambda p: p[1], default=None)
    if best is None:
        result = f"{len(variants)} variants, none measured against the winner"
    elif best[1] > 1.0:
        result = f"fastest: {best[0]['config']} at {fmt_ratio(best[1])} the winner"
    else:
        result = f"{len(measured)} variants measured, none faster than the winner"
    lines = [line for line in run.stdout.strip().splitlines() if not line.startswith("  round ")]
    figures = {"rows": [
        {"config": r.get("config"), "median": r.get("median"),
         "ratio": _ratio(r.get("vs base", "")), "peak": r.get("peak"),
         "peak_ratio": _ratio(r.get("peak vs base", ""))}
        for r in rows
    ]}  # fmt: skip
    return Report(result, "\n".join(lines), figures)


# -- (c) autotune train on the winner ------------------------------------------------------------
def _train_commands(ctx: Context) -> list[list[str]]:
    if not ctx.winner.is_file():
        raise NotReady(f"no winner preset at {ctx.winner} (search-gpt2 writes it, or --winner)")
    return [
        ctx.autotune(
            "train", "--preset", str(ctx.winner), "--max-steps", str(TRAIN_STEPS),
            "--out", str(ctx.work / "train-gpt2"), "--device", "cuda",
        )
    ]  # fmt: skip


def _train_report(ctx: Context, runs: list[Completed]) -> Report:
    run = runs[0]
    path = ctx.work / "train-gpt2" / "summary.json"
    if not path.is_file():
        raise StepFailed(f"autotune train exit {run.returncode}, no summary.json")
    summary = json.loads(path.read_text())
    preset_tps = _preset_tokens_per_s(ctx.winner)
    steady = summary.get("steady_tokens_per_s")
    ratio = steady / preset_tps if steady and preset_tps else None
    mfu = summary.get("mfu")
    rows = [[
        f"{summary.get('steps')} of {TRAIN_STEPS}", fmt_float(preset_tps), fmt_float(steady),
        fmt_float(summary.get("median_tokens_per_s")), _target(ratio, TRAIN_TARGET),
        "-" if mfu is None else f"{mfu:.1%}", fmt_seconds(run.wall_s),
    ]]  # fmt: skip
    headers = ["steps", "preset tokens/s", "train steady tokens/s", "train median tokens/s",
               f"train / preset (target {TRAIN_TARGET}x)", "MFU", "wall"]  # fmt: skip
    table = render_table(headers, rows, align="rrrrrrr")
    figures = {"steps": summary.get("steps"), "preset_tokens_per_s": preset_tps,
               "steady_tokens_per_s": steady, "median_tokens_per_s":
               summary.get("median_tokens_per_s"), "ratio": ratio, "mfu": mfu,
               "passed": ratio is not None and ratio >= TRAIN_TARGET}  # fmt: skip
    if ratio is None:
        raise StepFailed(f"no steady tokens/s to compare (exit {run.returncode})\n\n{table}")
    if ratio < TRAIN_TARGET:
        raise StepFailed(f"train / preset {fmt_ratio(ratio)}: below {TRAIN_TARGET}x\n\n{table}")
    return Report(f"train / preset {fmt_ratio(ratio)}: at least {TRAIN_TARGET}x", table, figures)


GPT2_STEPS: tuple[Step, ...] = (
    Step(name="search-gpt2",
         title=f"autotune search --model {MODEL} --seq-len {SEQ_LEN} --budget {BUDGET} "
               "(its default time limit)",
         want_s=SEARCH_WANT_S, min_s=150,
         priority=1, commands=_search_commands, report=_search_report),
    Step(name="knobs-gpt2", title="The knobs against the winner, side by side (model_knobs.py)",
         want_s=900, min_s=KNOBS_MIN_S, priority=3, commands=_knobs_commands,
         report=_knobs_report),
    Step(name="train-gpt2", title=f"{TRAIN_STEPS} steps of autotune train on the winner",
         want_s=110, min_s=60, priority=2, commands=_train_commands, report=_train_report),
)  # fmt: skip
