"""What a search records: each trial (``TrialRecord``) and its progress (``SearchEvent``),
with the summaries built from the records (the best configs, why configs were skipped,
how the memory model did). What a search found is ``SearchResult``
(``autotune.study.session.search_result``), made of these.

A ``TrialRecord`` is rebuilt from the study alone (the ``config`` and ``outcome`` user
attributes each trial stores), so a resumed search knows what an earlier run measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from autotune.config.knobs import switch_knobs
from autotune.config.train_config import TrainConfig
from autotune.core.plain import to_plain

if TYPE_CHECKING:
    import optuna

    from autotune.burst.result import BurstResult

__all__ = [
    "FAILED_STATUSES",
    "INFEASIBLE_STATUSES",
    "SearchEvent",
    "TrialRecord",
    "distinct_best",
    "memory_class",
    "memory_model_note",
    "memory_model_summary",
    "skipped_reasons",
    "summarize_config",
]

INFEASIBLE_STATUSES = ("oom", "over-budget", "dominated", "predicted")
FAILED_STATUSES = ("timeout", "crash", "nan", "error", "interrupted")


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial of the study, as the search stored it."""

    number: int
    state: str  # Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    status: str  # ok | oom | over-budget | dominated | predicted | pruned | timeout | ...
    config: Mapping[str, Any] = field(default_factory=dict)
    value: float | None = None
    throughput: float | None = None  # tokens/s, or samples/s for samples-unit models
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    compile_s: float | None = None
    timed_steps: int | None = None  # the timed steps its burst ran (fewer once stable)
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    cuda_context_bytes: int | None = None  # the CUDA context inside that peak
    time_to_train_s: float | None = None
    reason: str = ""
    role: str = ""  # naive | hand-tuned | playbook | refine | re-measure | smallest | ...
    ran: bool = False  # whether a burst ran for this trial
    duplicate_of: int | None = None
    wall_s: float | None = None
    # where the burst's wall time went (the search's time ledger): process start, imports,
    # model build and data set-up; the warm-up steps (their compile included); the timed
    # steps. None for a trial recorded by an older autotune, or that ran no burst
    overhead_s: float | None = None
    warmup_s: float | None = None
    timed_s: float | None = None
    disturbed: str = ""  # why its measurement is suspect (outside load, erratic steps)
    cores_left: int | None = None  # it ran on the cores outside load left it (None: all)
    # the search's --burst-timeout when its burst ran (None: no burst, or an older autotune
    # that did not record it); a burst the time limit capped had less
    burst_timeout_s: float | None = None
    size_name: str = "seq"  # what seq_len is for the model: seq, image, nodes (its spec's)
    # the memory model, before the burst: its peak and largest micro-batch for the config
    predicted_peak_bytes: int | None = None
    predicted_edge_micro_batch: int | None = None
    prediction_error_pct: float | None = None  # (predicted - measured) / measured, ok only
    alloc_retries: int | None = None  # CUDA allocator retries during the burst
    at_edge: str = ""  # why it fits only narrowly (allocator retries, peak near the budget)

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.status == "ok"

    @property
    def infeasible(self) -> bool:
        return self.status in INFEASIBLE_STATUSES

    @property
    def failed(self) -> bool:
        """The burst failed (timeout, crash, nan, error) or was interrupted."""
        return self.state == "FAIL" or self.status in FAILED_STATUSES

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETE", "PRUNED", "FAIL")

    def train_config(self) -> TrainConfig:
        return TrainConfig.from_mapping(self.config)

    def known_config(self) -> TrainConfig | None:
        """Its config, or None for a trial from an older, different space (its config no
        longer reads)."""
        try:
            return self.train_config()
        except Exception:  # whatever the older config's fields make of the reader
            return None

    def summary(self) -> str:
        """``mb 8x4 seq 128 bf16 ckpt compile=default workers=2 block_group=4``."""
        return summarize_config(self.config, self.size_name)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_trial(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord:
        attrs = {**trial.user_attrs, **(trial.user_attrs.get("outcome") or {})}
        state = trial.state.name
        status = attrs.get("status")
        if status is None:
            status = {"RUNNING": "running", "WAITING": "waiting", "PRUNED": "pruned"}.get(
                state, "error" if state == "FAIL" else "unknown"
            )
        value = trial.value if state == "COMPLETE" else None
        return cls(
            number=trial.number,
            state=state,
            status=str(status),
            config=dict(attrs.get("config") or {}),
            value=value,
            throughput=attrs.get("throughput"),
            tokens_per_s=attrs.get("tokens_per_s"),
            samples_per_s=attrs.get("samples_per_s"),
            step_time_median_s=attrs.get("step_time_median_s"),
            step_time_p90_s=attrs.get("step_time_p90_s"),
            compile_s=attrs.get("compile_s"),
            timed_steps=attrs.get("timed_steps"),
            mfu=attrs.get("mfu"),
            peak_memory_bytes=attrs.get("peak_memory_bytes"),
            cuda_context_bytes=attrs.get("cuda_context_bytes"),
            time_to_train_s=attrs.get("time_to_train_s"),
            reason=str(attrs.get("reason") or ""),
            role=str(attrs.get("role") or ""),
            ran=bool(attrs.get("ran", False)),
            duplicate_of=attrs.get("duplicate_of"),
            wall_s=attrs.get("wall_s"),
            overhead_s=attrs.get("overhead_s"),
            warmup_s=attrs.get("warmup_s"),
            timed_s=attrs.get("timed_s"),
            disturbed=str(attrs.get("disturbed") or ""),
            cores_left=attrs.get("cores_left"),
            burst_timeout_s=attrs.get("burst_timeout_s"),
            size_name=str(attrs.get("size_name") or "seq"),
            predicted_peak_bytes=attrs.get("predicted_peak_bytes"),
            predicted_edge_micro_batch=attrs.get("predicted_edge_micro_batch"),
            prediction_error_pct=attrs.get("prediction_error_pct"),
            alloc_retries=attrs.get("alloc_retries"),
            at_edge=str(attrs.get("at_edge") or ""),
        )


def summarize_config(
    config: Mapping[str, Any], size_name: str = "seq", *, config_type: type | None = None
) -> str:
    """A one-line summary of a config mapping for tables; ``size_name`` names the sample
    size (``seq``, ``image``, ...: the model spec's); each switch that is on is shown by
    its registry entry's label (of ``config_type``, default ``TrainConfig``)."""
    if not config:
        return "-"
    parts = [f"mb {config.get('micro_batch')}x{config.get('grad_accum')}"]
    parts.append(f"{size_name} {config.get('seq_len')}")
    parts.append(str(config.get("precision")))
    if config.get("activation_checkpointing"):
        parts.append("ckpt")
    if config.get("compile", "off") != "off":
        parts.append(f"compile={config.get('compile')}")
        if config.get("compile_regions"):
            parts.append("per-block")
    workers = config.get("num_workers") or 0
    if workers:
        extra = "+pin" if config.get("pin_memory") else ""
        prefetch = config.get("prefetch_factor")
        extra += f" pf{prefetch}" if prefetch else ""
        parts.append(f"workers={workers}{extra}")
    for k in switch_knobs(config_type):  # set only on the device kind they are for
        if config.get(k.name):
            parts.append(k.short)
    for name, value in (config.get("knobs") or {}).items():
        parts.append(f"{name}={value}")
    if config.get("parallel"):
        from autotune.config.parallel import summarize

        parts.append(summarize(config["parallel"]))
    return " ".join(parts)


@dataclass(frozen=True, kw_only=True)
class SearchEvent:
    """Progress of a search, for a live display (``progress=`` callback)."""

    kind: Literal["start", "trial", "verify", "note"]
    message: str = ""
    trial: TrialRecord | None = None
    best: TrialRecord | None = None
    elapsed_s: float = 0.0
    time_left_s: float | None = None
    trials_left: int | None = None
    verify: BurstResult | None = None
    unit: str = "tokens/s"


def distinct_best(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Feasible trials that ran, best value first, one per config."""
    seen: set[str] = set()
    out: list[TrialRecord] = []
    for r in sorted(
        (r for r in records if r.feasible and r.ran and r.value is not None),
        key=lambda r: (-(r.value or 0.0), r.number),
    ):
        key = repr(sorted(r.config.items()))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def memory_class(config: Mapping[str, Any]) -> str:
    """A config's memory class for reports: ``fp32 ckpt compile=default seq 256``."""
    parts = [str(config.get("precision"))]
    if config.get("activation_checkpointing"):
        parts.append("ckpt")
    if config.get("compile", "off") != "off":
        parts.append(f"compile={config.get('compile')}")
    parts.extend(f"{name}={value}" for name, value in (config.get("knobs") or {}).items())
    parts.append(f"seq {config.get('seq_len')}")
    return " ".join(parts)


def memory_model_summary(records: Sequence[TrialRecord]) -> dict[str, Any]:
    """How the memory model did over the trials that ran: predictions checked against the
    measured peak, their mean and largest absolute error in %, the latest predicted edge
    (largest micro-batch) per class, the trials at the edge and the OOMs executed per
    class."""
    from autotune.study.plan.memory_model import mean_abs_error_pct

    ran = [r for r in records if r.ran and r.duplicate_of is None]
    errors = [r.prediction_error_pct for r in ran if r.prediction_error_pct is not None]
    edges: dict[str, int] = {}
    ooms: dict[str, int] = {}
    for r in sorted(ran, key=lambda r: r.number):
        if r.predicted_edge_micro_batch is not None:
            edges[memory_class(r.config)] = r.predicted_edge_micro_batch
        if r.status in ("oom", "over-budget"):
            label = memory_class({**r.config, "seq_len": None, "knobs": None}).removesuffix(
                " seq None"
            )
            ooms[label] = ooms.get(label, 0) + 1
    mean = mean_abs_error_pct(errors)
    return {
        "predictions": len(errors),
        "mean_abs_error_pct": None if mean is None else round(mean, 2),
        "max_abs_error_pct": round(max(abs(e) for e in errors), 2) if errors else None,
        "edges": edges,
        "at_edge": [r.number for r in ran if r.at_edge],
        "ooms_executed": ooms,
    }


def memory_model_note(records: Sequence[TrialRecord]) -> str | None:
    """One line for the search's notes: the model's error and its predicted edges."""
    summary = memory_model_summary(records)
    if not summary["predictions"] and not summary["edges"]:
        return None
    parts = []
    if summary["predictions"]:
        parts.append(
            f"{summary['predictions']} prediction{'s' if summary['predictions'] > 1 else ''} "
            "checked against the measured peak, mean |error| "
            f"{summary['mean_abs_error_pct']:.1f}% (max {summary['max_abs_error_pct']:.1f}%)"
        )
    if summary["edges"]:
        edges = ", ".join(f"{label}: {mb}" for label, mb in summary["edges"].items())
        parts.append(f"largest micro-batch predicted to fit: {edges}")
    if summary["at_edge"]:
        parts.append("at the edge of the budget: " + ", ".join(f"#{n}" for n in summary["at_edge"]))
    return "memory model: " + "; ".join(parts)


def trial_counts(records: Sequence[TrialRecord]) -> dict[str, int]:
    """trials (all finished), ran (a burst ran), measured (a burst ran and gave a figure:
    not one stopped before its first timed step, out of memory or failed), infeasible,
    pruned (by the pruner or the time limit), skipped (the outdated refinements passed
    over without a burst), failed, duplicates (replays of a config measured before). The
    search's summary and the report both count with this."""
    done = [t for t in records if t.finished]
    return {
        "trials": len(done),
        "ran": sum(1 for t in done if t.ran),
        "measured": sum(1 for t in done if t.ran and t.throughput is not None),
        "infeasible": sum(1 for t in done if t.infeasible),
        "pruned": sum(1 for t in done if t.state == "PRUNED" and t.status != "skipped"),
        "skipped": sum(1 for t in done if t.status == "skipped"),
        "failed": sum(1 for t in done if t.failed),
        "duplicates": sum(1 for t in done if t.duplicate_of is not None),
    }


def counts_text(counts: dict[str, int]) -> str:
    """``28 trials ran, 27 measured, 0 infeasible, 1 pruned, 0 failed, 0 repeats``."""
    return (
        f"{counts['ran']} trials ran, {counts['measured']} measured, {counts['infeasible']} "
        f"infeasible, {counts['pruned']} pruned, {counts['failed']} failed, "
        f"{counts['duplicates']} repeats"
    )


def skipped_reasons(records: Sequence[TrialRecord]) -> dict[str, int]:
    """Why configs were not kept, grouped: 'dominated by OOM trial #3' -> 4, ..."""
    out: dict[str, int] = {}
    for r in records:
        if not r.finished or r.duplicate_of is not None or r.status == "ok":
            continue
        if r.status == "predicted":
            reason = "predicted over budget by the memory model"
        elif r.status == "pruned":
            reason = "pruned: clearly slower than the best so far"
        elif r.status == "stopped":
            reason = r.reason
        else:
            reason = r.reason if r.status == "dominated" else f"{r.status}: {r.reason}"
        out[reason] = out.get(reason, 0) + 1
    return out
