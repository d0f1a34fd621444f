"""Multi-process training configs: the distributed knobs, their search values and checks.

A config that runs on ``nproc_per_node`` > 1 processes carries a ``ParallelConfig``
(``TrainConfig.parallel``; None is a single process, as before): the process count, the
strategy and its knobs.

- ``ddp``: ``DistributedDataParallel`` with ``bucket_cap_mb`` (gradients all-reduced per
  bucket of that size), ``gradient_as_bucket_view`` (gradients are views into the
  buckets: one copy less) and ``static_graph`` (the graph is the same every step, which
  lets DDP skip its per-step bookkeeping).
- ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) on each top-level child module
  and on the root, with ``reshard_after_forward`` (free the gathered parameters after the
  forward, gather them again for the backward: less memory, more communication) and
  ``mixed_precision`` (``bf16``: parameters gathered in bf16, gradients reduced in fp32;
  ``none``: as the parameters are).

The config's ``micro_batch`` is per process and ``grad_accum`` is the whole run's, so
``micro_batch x grad_accum`` stays the global batch; each process accumulates
``grad_accum / nproc_per_node`` micro-batches (``autotune.engine.distributed.per_rank_config``).

This module is the record and the checks of the record alone.
The knobs are applied by ``autotune.engine.wrapping.wrap_model`` (the burst child and the
trainer both call it, so what was measured is what trains), and processes are started by
``autotune.engine.distributed.torchrun_command``. ``space_choices`` names the values a
search tries (``SearchSpace`` holds them as one categorical dimension, ``parallel``, whose
values are ``ParallelConfig.label()`` texts such as ``ddp-b100-view`` or
``fsdp-keep-bf16``); ``autotune.config.checks.parallel_problems`` holds a config's record
to a device and this machine.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from autotune.core.errors import ConfigError, UsageError
from autotune.core.plain import from_plain, to_plain
from autotune.core.validator import MAX_PROCESSES, Rule, Section, positive

if TYPE_CHECKING:
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "BUCKET_CAP_CHOICES",
    "MIXED_PRECISIONS",
    "STRATEGIES",
    "ParallelConfig",
    "coerce",
    "parse_label",
    "space_choices",
    "split_problems",
    "summarize",
    "with_strategy_knobs_reset",
]

STRATEGIES = ("ddp", "fsdp")
MIXED_PRECISIONS: tuple[Literal["none", "bf16"], ...] = ("none", "bf16")
BUCKET_CAP_CHOICES = (25, 100)  # MB; 25 is DistributedDataParallel's default
MAX_NPROC = MAX_PROCESSES  # autotune.core.validator's bound of one config's processes
_DDP_DEFAULTS = {"bucket_cap_mb": 25, "gradient_as_bucket_view": False, "static_graph": False}
_FSDP_DEFAULTS = {"reshard_after_forward": True, "mixed_precision": "none"}


def with_strategy_knobs_reset(
    before: Mapping[str, Any], after: Mapping[str, Any], given: Collection[str]
) -> dict[str, Any]:
    """``after``, a parallel section that overrides moved to another strategy than
    ``before``'s, with the knobs of the strategy it left back at their defaults (they
    are not the new one's), but for those in ``given`` (set by the same overrides: they
    are checked as they were given)."""
    left = before.get("strategy", "ddp")
    if after.get("strategy", "ddp") == left:
        return dict(after)
    defaults = _DDP_DEFAULTS if left == "ddp" else _FSDP_DEFAULTS
    return {**after, **{k: v for k, v in defaults.items() if k not in given}}


def _nproc(value: int) -> str | None:
    if 2 <= value <= MAX_NPROC:
        return None
    return (
        f"expected an integer from 2 to {MAX_NPROC} (one process needs no parallel section: "
        f"leave it out); got {value!r}"
    )


@dataclass(frozen=True, kw_only=True)
class ParallelConfig(Section):
    """How one config runs over several processes (defaults: plain DDP, as torch has it)."""

    nproc_per_node: int
    strategy: Literal["ddp", "fsdp"] = "ddp"
    bucket_cap_mb: int = 25  # ddp only
    gradient_as_bucket_view: bool = False  # ddp only
    static_graph: bool = False  # ddp only
    reshard_after_forward: bool = True  # fsdp only
    mixed_precision: Literal["none", "bf16"] = "none"  # fsdp only: "bf16" gathers bf16

    _path: ClassVar[str] = "config.parallel"
    _rules: ClassVar[Mapping[str, Rule]] = {"nproc_per_node": _nproc, "bucket_cap_mb": positive}

    def _cross_problems(self) -> list[str]:
        """A knob of the other strategy must stay at its default."""
        other, own = (_FSDP_DEFAULTS, "ddp") if self.strategy == "ddp" else (_DDP_DEFAULTS, "fsdp")
        return [
            f"{self._path}.{name}: not a knob of strategy {own!r} (leave it at {default!r})"
            for name, default in other.items()
            if getattr(self, name) != default
        ]

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_mapping(cls, data: Any, *, path: str = "config.parallel") -> ParallelConfig:
        """From plain data (or a ``ParallelConfig``); a ``ConfigError`` lists every problem
        (unknown and missing fields, types, ranges), each with its path."""
        if isinstance(data, ParallelConfig):
            return data
        return from_plain(
            cls, data, path=path, ignore_unknown=False, context="invalid parallel section"
        )

    def label(self) -> str:
        """A short name of the knobs (not of the process count): ``ddp-b25``,
        ``ddp-b100-view-static``, ``fsdp``, ``fsdp-keep-bf16`` (keep: no resharding)."""
        if self.strategy == "ddp":
            parts = [f"ddp-b{self.bucket_cap_mb}"]
            parts += ["view"] if self.gradient_as_bucket_view else []
            parts += ["static"] if self.static_graph else []
        else:
            parts = ["fsdp"]
            parts += [] if self.reshard_after_forward else ["keep"]
            parts += ["bf16"] if self.mixed_precision == "bf16" else []
        return "-".join(parts)

    def describe(self) -> str:
        return f"{self.label()} x {self.nproc_per_node} processes"


def coerce(value: Any, path: str = "config.parallel") -> tuple[ParallelConfig | None, list[str]]:
    """``TrainConfig.parallel`` from a ``ParallelConfig``, a mapping or None, with every
    problem (each with its path); the config is None where there are problems."""
    if value is None:
        return None, []
    try:
        return ParallelConfig.from_mapping(value, path=path), []
    except ConfigError as exc:
        return None, exc.problems


def split_problems(grad_accum: int, processes: int, micro_batch: int) -> list[str]:
    """The whole run's accumulation must split evenly over the processes, so that the
    global batch stays the config's: each process accumulates ``grad_accum / processes``
    micro-batches (``per_rank_config``). The one rule and wording for a config that names
    its processes (``config.parallel``) and for the world a run was started in."""
    if processes <= 1 or grad_accum % processes == 0:
        return []
    return [
        f"config.grad_accum: {grad_accum} does not split over {processes} processes, so the "
        f"global batch of {micro_batch * grad_accum} samples (micro_batch {micro_batch} x "
        f"grad_accum {grad_accum}) cannot be kept: each process accumulates grad_accum / "
        f"{processes} micro-batches; use a process count that divides {grad_accum}, or a "
        f"grad_accum that {processes} divides with micro_batch x grad_accum kept (autotune "
        "train: --set config.grad_accum=... --set config.micro_batch=...)"
    ]


def summarize(data: Any) -> str:
    """``ddp-b100-view x2`` for a ``parallel`` mapping in a table (``parallel?`` if bad)."""
    try:
        par = ParallelConfig.from_mapping(data)
    except ConfigError:
        return "parallel?"
    return f"{par.label()} x{par.nproc_per_node}"


def parse_label(label: str, nproc_per_node: int) -> ParallelConfig:
    """The ``ParallelConfig`` a ``label()`` names, on ``nproc_per_node`` processes."""
    parts = label.strip().lower().split("-")
    head, flags = parts[0], parts[1:]
    fields: dict[str, Any] = {"nproc_per_node": nproc_per_node, "strategy": head}
    bad = head not in STRATEGIES
    for flag in flags:
        if head == "ddp" and flag.startswith("b") and flag[1:].isascii() and flag[1:].isdecimal():
            fields["bucket_cap_mb"] = int(flag[1:])
        elif head == "ddp" and flag in ("view", "static"):
            fields["gradient_as_bucket_view" if flag == "view" else "static_graph"] = True
        elif head == "fsdp" and flag == "keep":
            fields["reshard_after_forward"] = False
        elif head == "fsdp" and flag == "bf16":
            fields["mixed_precision"] = "bf16"
        else:
            bad = True
    if bad:
        raise UsageError(
            f"cannot read the parallel setting {label!r}: expected ddp-bMB[-view][-static] "
            "(e.g. ddp-b25, ddp-b100-view-static) or fsdp[-keep][-bf16]"
        )
    return ParallelConfig(**fields)


def space_choices(device: DeviceCaps) -> tuple[str, ...]:
    """The labels a search on ``device`` tries, the plain-DDP default first: every DDP
    bucket size x bucket view x static graph, FSDP2 with and without resharding, and
    its bf16 policy where the device runs bf16."""
    out = [
        ParallelConfig(
            nproc_per_node=2, bucket_cap_mb=b, gradient_as_bucket_view=v, static_graph=s
        ).label()
        for b in BUCKET_CAP_CHOICES
        for v in (False, True)
        for s in (False, True)
    ]
    bf16 = device.precision_problem("bf16") is None
    policies: tuple[Literal["none", "bf16"], ...] = MIXED_PRECISIONS if bf16 else ("none",)
    out += [
        ParallelConfig(
            nproc_per_node=2, strategy="fsdp", reshard_after_forward=r, mixed_precision=m
        ).label()
        for m in policies
        for r in (True, False)
    ]
    return tuple(out)
