"""The search space: every knob a search may turn, pruned by the hardware and the model.

``SearchSpace.for_model`` builds the space for one model on one device: micro-batches are
the powers of two that divide the global batch (the global batch stays fixed, so
``grad_accum = global_batch // micro_batch`` and the training math does not change),
precisions are those the device runs, activation checkpointing only where the model has
it, compile modes only where ``torch.compile`` works, DataLoader workers up to
``min(4, cpu count)``, pinning and prefetch only on CUDA with workers, and the model's own
knobs. On CUDA only, the ``CUDA_KNOBS`` too: fused AdamW, the allocator's expandable
segments, and for a convolutional model cuDNN autotuning and channels-last; and a model
knob marked ``cuda_only`` (the SDPA backend). Elsewhere these stay off and are no
dimension. On a CPU with more than one core, the ``CPU_KNOBS``: ``omp_spin``, torch's
OpenMP threads spinning between operations instead of sleeping (on CUDA it stays off).
``--knob NAME=V1,V2`` restrictions narrow it (``parse_knob_args`` reads them).

It also names the search's starting points: ``naive()`` (the untuned baseline),
``smallest()`` (the least memory), ``guess()`` (a hand-tuner's first try) and
``neighbours()``. Numeric knobs reach Optuna as an index into their sorted values, so
TPE sees their order.

Every config the space yields passes ``check_config`` for that model and device.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.config import parallel as par
from autotune.config.train_config import COMPILE_MODES, PRECISIONS, TrainConfig, did_you_mean
from autotune.core.errors import UsageError

if TYPE_CHECKING:
    import optuna

    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps

__all__ = [
    "BUILTIN_KNOBS",
    "CPU_KNOBS",
    "CUDA_KNOBS",
    "SWITCHES",
    "SearchSpace",
    "parse_knob_args",
    "parse_seq_len",
]

# The knobs of TrainConfig a search turns, in the order they are suggested.
BUILTIN_KNOBS = (
    "micro_batch",
    "seq_len",
    "precision",
    "activation_checkpointing",
    "compile",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
)
# On/off knobs of TrainConfig searched on a CUDA device only (where the model has a use
# for them). Where a space holds only ``False`` for one, it is no dimension of the space.
CUDA_KNOBS = (
    "fused_optimizer",
    "expandable_segments",
    "cudnn_benchmark",
    "channels_last",
)
# On/off knobs searched on a CPU device only (with more than one core): OpenMP threads
# spinning between parallel regions (OMP_WAIT_POLICY=ACTIVE). On the 2-core dev VM, mu's
# micro-batch 1 in plain torch: 1.38x with it; through bursts 0.92-1.09x of the default
# policy, by config (BENCHMARKS.md, the 3,839 vs 2,904 gap): measured, not assumed.
CPU_KNOBS = ("omp_spin",)
SWITCHES = (*CUDA_KNOBS, *CPU_KNOBS)  # every on/off knob that is one device kind's
_DERIVED = {
    "grad_accum": "grad_accum is derived (global batch / micro_batch); restrict micro_batch "
    "or change --global-batch instead",
    "global_batch": "the global batch is fixed during a search; use --global-batch",
}
MAX_WORKERS = 4
PREFETCH_CHOICES = (2, 4)
_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def _powers_of_two(lo: int, hi: int) -> list[int]:
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p *= 2
    return out


def parse_seq_len(text: str | int | Sequence[int], *, max_seq_len: int | None = None) -> list[int]:
    """``"128"`` -> [128]; ``"64-256"`` -> the powers of two in [64, 256]: [64, 128, 256].

    A list of ints is taken as given. Lengths above ``max_seq_len`` are a usage error.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        values = [text]
    elif isinstance(text, str):
        raw = text.strip()
        try:
            if "-" in raw:
                lo_s, _, hi_s = raw.partition("-")
                lo, hi = int(lo_s), int(hi_s)
                if lo < 1 or hi < lo:
                    raise ValueError
                values = _powers_of_two(lo, hi)
                if not values:
                    raise UsageError(
                        f"--seq-len {text!r}: the range holds no power of two; give one "
                        "length (e.g. 100) or a range that contains a power of two"
                    )
            else:
                values = [int(raw)]
        except ValueError:
            raise UsageError(
                f"cannot read --seq-len {text!r}: expected one length such as 128 or a "
                "range such as 64-256 (the powers of two within it are searched)"
            ) from None
    elif isinstance(text, bool):
        raise UsageError(f"--seq-len must be a length, got {text!r}")
    else:
        values = [int(v) for v in text]
    if not values or any(v < 1 for v in values):
        raise UsageError(f"--seq-len {text!r}: lengths must be positive integers")
    if max_seq_len is not None:
        too_long = [v for v in values if v > max_seq_len]
        if too_long == values:
            raise UsageError(f"--seq-len {text!r}: the model accepts at most {max_seq_len} tokens")
        values = [v for v in values if v <= max_seq_len]
    return sorted(set(values))


def parse_knob_args(items: Sequence[str]) -> dict[str, list[str]]:
    """``["precision=bf16,fp16", "compile=off"]`` -> ``{"precision": ["bf16", "fp16"], ...}``.

    Values stay strings here; ``SearchSpace.for_model`` checks names and values against the
    model and the device, where the allowed ones are known.
    """
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not vals:
            raise UsageError(
                f"cannot read --knob {item!r}: expected NAME=VALUE[,VALUE...], e.g. "
                "--knob precision=bf16,fp32 or --knob compile=off"
            )
        if name in out:
            raise UsageError(f"--knob {name} is given twice ({out[name]} and {vals}); merge them")
        out[name] = vals
    return out


def _format_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _match_value(text: str, allowed: Sequence[Any]) -> tuple[bool, Any]:
    """Find the allowed value that ``text`` names (``"true"`` -> True, ``"8"`` -> 8)."""
    low = text.lower()
    for value in allowed:
        if isinstance(value, bool):
            if (value and low in _TRUE) or (not value and low in _FALSE):
                return True, value
        elif value is None:
            if low in ("none", "null", "default"):
                return True, value
        elif _format_value(value).lower() == low:
            return True, value
    return False, None


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """The knobs x ranges one search explores. Each tuple is the allowed values, in order."""

    model: str
    device: str
    device_kind: str
    global_batch: int
    micro_batch: tuple[int, ...]
    seq_len: tuple[int, ...]
    precision: tuple[str, ...]
    activation_checkpointing: tuple[bool, ...]
    compile: tuple[str, ...]
    num_workers: tuple[int, ...]
    pin_memory: tuple[bool, ...] = (False,)  # only with num_workers > 0
    prefetch_factor: tuple[int | None, ...] = (None,)  # only with num_workers > 0
    fused_optimizer: tuple[bool, ...] = (False,)  # the CUDA_KNOBS
    expandable_segments: tuple[bool, ...] = (False,)
    cudnn_benchmark: tuple[bool, ...] = (False,)
    channels_last: tuple[bool, ...] = (False,)
    omp_spin: tuple[bool, ...] = (False,)  # the CPU_KNOBS
    knobs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    knob_defaults: Mapping[str, Any] = field(default_factory=dict)
    default_seq_len: int | None = None
    low_precision_saves_memory: bool = False  # whether "smallest" prefers bf16/fp16
    # Several processes (autotune/config/parallel.py): their count and the DDP/FSDP settings
    # searched, as labels (one categorical dimension, "parallel"; none on one process).
    nproc_per_node: int = 1
    parallel: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = [
            f"search space: {name} has no allowed value"
            for name in (*BUILTIN_KNOBS, *SWITCHES, *self.knobs)
            if not self.choices(name)
        ]
        bad_mb = [m for m in self.micro_batch if self.global_batch % m]
        if bad_mb:
            problems.append(
                f"search space: micro_batch {bad_mb} do not divide the global batch "
                f"{self.global_batch}"
            )
        if problems:
            raise UsageError("; ".join(problems))
        object.__setattr__(self, "knobs", {k: tuple(v) for k, v in self.knobs.items()})
        object.__setattr__(self, "knob_defaults", dict(self.knob_defaults))

    # -- building -------------------------------------------------------------------------
    @classmethod
    def for_model(
        cls,
        spec: ModelSpec,
        device: DeviceCaps,
        *,
        global_batch: int | None = None,
        seq_len: Sequence[int] | None = None,
        cpu_count: int = 1,
        restrict: Mapping[str, Sequence[Any]] | None = None,
        nproc_per_node: int = 1,
    ) -> SearchSpace:
        """The full space for ``spec`` on ``device``, narrowed by ``restrict``.

        ``restrict`` maps a knob name (a TrainConfig field or one of the model's knobs,
        also as ``knobs.NAME``) to the values to keep, as strings (``"bf16"``, ``"true"``,
        ``"8"``) or as values. An unknown name or a value not allowed here is a
        ``UsageError`` naming the allowed ones.
        """
        gb = _global_batch(spec, global_batch)
        full = _builtin_choices(spec, device, gb, _seq_lens(spec, seq_len), cpu_count)
        full.update(_parallel_choices(device, gb, full["micro_batch"], nproc_per_node))
        model_knobs = {k.name: k.searched_on(device) for k in spec.knobs if k.searched_on(device)}
        chosen, knobs = _restrict(full, model_knobs, restrict or {}, spec, device)
        return cls(
            model=spec.name,
            device=device.device,
            device_kind=device.kind,
            global_batch=gb,
            micro_batch=chosen["micro_batch"],
            seq_len=chosen["seq_len"],
            precision=chosen["precision"],
            activation_checkpointing=chosen["activation_checkpointing"],
            compile=chosen["compile"],
            num_workers=chosen["num_workers"],
            pin_memory=chosen["pin_memory"],
            prefetch_factor=chosen["prefetch_factor"],
            **{name: chosen[name] for name in SWITCHES},
            knobs=knobs,
            knob_defaults={k.name: k.default for k in spec.knobs},
            default_seq_len=spec.seq_len,
            low_precision_saves_memory=device.kind == "cuda" or device.bf16_native,
            nproc_per_node=nproc_per_node,
            parallel=chosen.get("parallel", ()),
        )

    # -- the dimensions -------------------------------------------------------------------
    def choices(self, name: str) -> tuple[Any, ...]:
        """Allowed values of a built-in knob or of a model knob (``knobs.NAME`` or ``NAME``)."""
        if name in BUILTIN_KNOBS or name in SWITCHES:
            values: tuple[Any, ...] = getattr(self, name)
            return values
        if name == "parallel" and self.parallel:
            return self.parallel
        key = name.removeprefix("knobs.")
        if key in self.knobs:
            return self.knobs[key]
        raise KeyError(f"no knob {name!r} in this search space")

    def dimensions(self) -> list[tuple[str, tuple[Any, ...]]]:
        """(parameter name, choices) for every knob; model knobs as ``knobs.NAME``. A CUDA
        or CPU switch is one only where the space holds more than ``False`` for it."""
        dims = [(name, self.choices(name)) for name in BUILTIN_KNOBS]
        dims += [(name, self.choices(name)) for name in self.switches()]
        dims += [(f"knobs.{name}", values) for name, values in self.knobs.items()]
        if self.parallel:
            dims.append(("parallel", self.parallel))
        return dims

    def cuda_knobs(self) -> tuple[str, ...]:
        """The ``CUDA_KNOBS`` this space turns (the others stay off)."""
        return tuple(name for name in CUDA_KNOBS if self.choices(name) != (False,))

    def switches(self) -> tuple[str, ...]:
        """The ``SWITCHES`` (CUDA's and the CPU's) this space turns (the others stay off)."""
        return tuple(name for name in SWITCHES if self.choices(name) != (False,))

    def size(self) -> int:
        """How many distinct configs the space holds (pin/prefetch only with workers)."""
        n = 1
        for name, values in self.dimensions():
            if name not in ("num_workers", "pin_memory", "prefetch_factor"):
                n *= len(values)
        per_worker_setting = len(self.pin_memory) * len(self.prefetch_factor)
        workers = sum(1 if w == 0 else per_worker_setting for w in self.num_workers)
        return n * workers

    def describe(self) -> dict[str, Any]:
        """Plain data naming the space (stored with the study; JSON-safe)."""
        return {
            "encoding": 2,  # how knobs reach Optuna (numeric ones as ".idx"); bump on change
            "model": self.model,
            "device": self.device,
            "global_batch": self.global_batch,
            **{name: [_jsonable(v) for v in values] for name, values in self.dimensions()},
            **({"nproc_per_node": self.nproc_per_node} if self.nproc_per_node > 1 else {}),
        }

    def fingerprint(self) -> str:
        """A short stable hash of ``describe()``: differs whenever the space differs."""
        text = json.dumps(self.describe(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    # -- configs --------------------------------------------------------------------------
    def make_config(self, values: Mapping[str, Any]) -> TrainConfig:
        """A TrainConfig from knob values (``knobs.NAME`` for model knobs)."""
        mb = int(values["micro_batch"])
        workers = int(values.get("num_workers", 0))
        return TrainConfig(
            micro_batch=mb,
            grad_accum=self.global_batch // mb,
            seq_len=int(values["seq_len"]),
            precision=values["precision"],
            activation_checkpointing=bool(values["activation_checkpointing"]),
            compile=values["compile"],
            num_workers=workers,
            pin_memory=bool(values.get("pin_memory", False)) if workers > 0 else False,
            prefetch_factor=values.get("prefetch_factor") if workers > 0 else None,
            **{name: bool(values.get(name, False)) for name in SWITCHES},
            knobs={name: values[f"knobs.{name}"] for name in self.knobs},
            parallel=self._parallel_of(values),
        )

    def values_of(self, config: TrainConfig) -> dict[str, Any]:
        """The knob values of ``config`` (the inverse of ``make_config``)."""
        out: dict[str, Any] = {name: getattr(config, name) for name in (*BUILTIN_KNOBS, *SWITCHES)}
        for name in self.knobs:
            out[f"knobs.{name}"] = config.knobs.get(name, self.knob_defaults.get(name))
        if self.parallel:
            out["parallel"] = None if config.parallel is None else config.parallel.label()
        return out

    def contains(self, config: TrainConfig) -> bool:
        if config.global_batch != self.global_batch:
            return False
        nproc = config.parallel.nproc_per_node if config.parallel is not None else 1
        if nproc != self.nproc_per_node:
            return False
        values = self.values_of(config)
        for name, allowed in self.dimensions():
            if name in ("pin_memory", "prefetch_factor") and config.num_workers == 0:
                continue
            if values[name] not in allowed:
                return False
        if any(values[name] not in self.choices(name) for name in SWITCHES):
            return False
        return all(  # a model knob this space does not turn stays at its default
            name in self.knobs or value == self.knob_defaults.get(name)
            for name, value in config.knobs.items()
        )

    def key(self, config: TrainConfig) -> tuple[Any, ...]:
        """A hashable identity of a config within this space (for duplicates)."""
        values = self.values_of(config)
        return tuple(_jsonable(values[name]) for name, _ in self.dimensions())

    def params_of(self, config: TrainConfig) -> dict[str, Any]:
        """Optuna parameters for ``config`` (for ``study.enqueue_trial``): the knobs with
        more than one allowed value, pin/prefetch only when there are workers."""
        values = self.values_of(config)
        params: dict[str, Any] = {}
        for name, allowed in self.dimensions():
            if len(allowed) < 2:
                continue
            if name in ("pin_memory", "prefetch_factor") and config.num_workers == 0:
                continue
            if _ordinal(allowed):
                params[f"{name}.idx"] = sorted(allowed).index(values[name])
            else:
                params[name] = values[name]
        return params

    def suggest(self, trial: optuna.Trial) -> TrainConfig:
        """Sample a config through ``trial`` (fixed knobs are not suggested).

        Numeric knobs (micro-batch, length, workers, prefetch, numeric model knobs) are
        suggested as an integer index into their sorted values (``micro_batch.idx``), so
        TPE sees their order: after micro-batches 2 and 8 did well, it tries 4. Other
        knobs are categorical.
        """
        values: dict[str, Any] = {}
        for name, allowed in self.dimensions():
            if name in ("pin_memory", "prefetch_factor") and values["num_workers"] == 0:
                continue
            if len(allowed) == 1:
                values[name] = allowed[0]
            elif _ordinal(allowed):
                ordered = sorted(allowed)
                values[name] = ordered[trial.suggest_int(f"{name}.idx", 0, len(ordered) - 1)]
            else:
                values[name] = trial.suggest_categorical(name, list(allowed))
        return self.make_config(values)

    def grid(self) -> Iterator[TrainConfig]:
        """Every config of the space, once (for an exhaustive baseline)."""
        names = [n for n, _ in self.dimensions() if n not in ("pin_memory", "prefetch_factor")]
        pools = [self.choices(n) for n in names]
        for combo in itertools.product(*pools):
            values = dict(zip(names, combo, strict=True))
            if values["num_workers"] == 0:
                yield self.make_config(values)
                continue
            for pin, pre in itertools.product(self.pin_memory, self.prefetch_factor):
                yield self.make_config({**values, "pin_memory": pin, "prefetch_factor": pre})

    def naive(self) -> TrainConfig:
        """What an untuned run does: fp32, the smallest micro-batch, no compile, no
        workers, no checkpointing, the model's default knobs (as far as the space allows)."""
        return self.make_config(
            {
                "micro_batch": self.micro_batch[0],
                "seq_len": self._default_seq_len(),
                "precision": _prefer(self.precision, ("fp32", "tf32", "bf16", "fp16")),
                "activation_checkpointing": _prefer(self.activation_checkpointing, (False,)),
                "compile": _prefer(self.compile, ("off",)),
                "num_workers": self.num_workers[0],
                "pin_memory": _prefer(self.pin_memory, (False,)),
                "prefetch_factor": self.prefetch_factor[0],
                **self._switch_values(on=()),
                **self._default_knobs(),
            }
        )

    def smallest(self) -> TrainConfig:
        """The config with the smallest memory footprint the space has: the smallest
        micro-batch and length, checkpointing on where available, half precision where
        it saves memory (CUDA, or a CPU with native bf16), no compile, no workers."""
        order = ("fp16", "bf16", "fp32", "tf32")
        if not self.low_precision_saves_memory:
            order = ("fp32", "tf32", "bf16", "fp16")
        return self.make_config(
            {
                "micro_batch": self.micro_batch[0],
                "seq_len": self.seq_len[0],
                "precision": _prefer(self.precision, order),
                "activation_checkpointing": _prefer(self.activation_checkpointing, (True,)),
                "compile": _prefer(self.compile, ("off",)),
                "num_workers": self.num_workers[0],
                "pin_memory": _prefer(self.pin_memory, (False,)),
                "prefetch_factor": self.prefetch_factor[0],
                **self._switch_values(on=()),
                **self._default_knobs(),
            }
        )

    def guess(self) -> TrainConfig:
        """A hand-tuner's first guess, tried right after the naive config so that a short
        search starts near the usual answer: a quarter of the global batch per
        micro-batch, half precision where the device runs it natively (bf16, else fp16 on
        CUDA), no checkpointing, no compile; on CUDA two pinned DataLoader workers, fused
        AdamW, and for a convolutional model cuDNN autotuning and channels-last."""
        target = max(1, self.global_batch // 4)
        fitting = [m for m in self.micro_batch if m <= target]
        cuda = self.device_kind == "cuda"
        order = ("bf16", "fp16", "tf32", "fp32") if self.low_precision_saves_memory else ("fp32",)
        workers = _prefer(self.num_workers, (2, 1, 0) if cuda else (0,))
        return self.make_config(
            {
                "micro_batch": fitting[-1] if fitting else self.micro_batch[0],
                "seq_len": self._default_seq_len(),
                "precision": _prefer(self.precision, order),
                "activation_checkpointing": _prefer(self.activation_checkpointing, (False,)),
                "compile": _prefer(self.compile, ("off",)),
                "num_workers": workers,
                "pin_memory": _prefer(self.pin_memory, (True,)),
                "prefetch_factor": self.prefetch_factor[0],
                **self._switch_values(on=("fused_optimizer", "cudnn_benchmark", "channels_last")),
                **self._default_knobs(),
            }
        )

    def neighbours(
        self, config: TrainConfig, *, workers: bool = True, kernels: bool = False
    ) -> list[TrainConfig]:
        """Configs one step away that the space holds: micro-batch x2 and /2; with
        ``workers``, one DataLoader worker more or fewer. A warm start's second guesses.

        With ``kernels`` (the search's refinement around a new best), also the choices
        that change which kernels run but not the batch, the discrete ones first: compile
        turned on (its first mode) when it is off, and each categorical model knob to each
        of its other values; then the micro-batch and worker steps; then each numeric model
        knob to the next value up and down; each switch the space turns (CUDA's, the CPU's)
        flipped on its own last. A short search runs these in order, and on a CPU whose
        compile cache is empty it has time for one or two: a kernel choice moved mu
        1.48-1.54x in bf16 with compile (eager attention), a micro-batch step 0.98-1.17x,
        block_group 0.80x, the CPU's omp_spin 0.92-1.09x (BENCHMARKS.md)."""
        values = self.values_of(config)
        steps: list[dict[str, Any]] = [
            {"micro_batch": config.micro_batch * 2},
            {"micro_batch": config.micro_batch // 2},
        ]
        if workers:
            steps += [
                {"num_workers": config.num_workers + 1},
                {"num_workers": config.num_workers - 1},
            ]
        if not kernels:
            changes = steps
        else:
            discrete: list[dict[str, Any]] = []
            numeric: list[dict[str, Any]] = []
            modes = [m for m in self.compile if m != "off"]
            if config.compile == "off" and modes:
                discrete.append({"compile": modes[0]})
            for name, allowed in self.knobs.items():
                current = values[f"knobs.{name}"]
                if not _ordinal(allowed):
                    discrete += [{f"knobs.{name}": v} for v in allowed if v != current]
                elif current in allowed:
                    ordered = sorted(allowed)
                    at = ordered.index(current)
                    nearby = ordered[max(at - 1, 0) : at + 2]
                    numeric += [{f"knobs.{name}": v} for v in nearby if v != current]
            switches = [{name: not values[name]} for name in self.switches()]
            changes = [*discrete, *steps, *numeric, *switches]
        out: list[TrainConfig] = []
        for change in changes:
            new = {**values, **change}
            if new["micro_batch"] < 1 or new["num_workers"] < 0:
                continue
            if new["num_workers"] > 0 and new.get("prefetch_factor") is None:
                new["prefetch_factor"] = self.prefetch_factor[0]
                new["pin_memory"] = _prefer(self.pin_memory, (False,))
            try:
                cand = self.make_config(new)
            except Exception:
                continue
            if self.contains(cand) and cand not in out and cand != config:
                out.append(cand)
        return out

    def _parallel_of(self, values: Mapping[str, Any]) -> par.ParallelConfig | None:
        """The ``parallel`` value's config on this space's processes (default: the first
        choice, plain DDP); None on one process."""
        if not self.parallel:
            return None
        label = values.get("parallel") or self.parallel[0]  # None: a single-process config's
        return par.parse_label(str(label), self.nproc_per_node)

    def _switch_values(self, *, on: Sequence[str]) -> dict[str, bool]:
        """Each switch off, or on where it is named in ``on`` (as far as the space allows)."""
        return {
            name: _prefer(self.choices(name), (True, False) if name in on else (False, True))
            for name in SWITCHES
        }

    def _default_seq_len(self) -> int:
        target = self.default_seq_len or self.seq_len[0]
        return min(self.seq_len, key=lambda s: (abs(s - target), s))

    def _default_knobs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, values in self.knobs.items():
            default = self.knob_defaults.get(name)
            out[f"knobs.{name}"] = default if default in values else values[0]
        return out


def _ordinal(values: Sequence[Any]) -> bool:
    """Whether a knob's values are numbers (ordered), not categories."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _prefer(allowed: Sequence[Any], order: Sequence[Any]) -> Any:
    for value in order:
        if value in allowed:
            return value
    return allowed[0]


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


# -- building the space (SearchSpace.for_model) -------------------------------------------


def _global_batch(spec: ModelSpec, global_batch: int | None) -> int:
    gb = spec.global_batch if global_batch is None else global_batch
    if not isinstance(gb, int) or gb < 1:
        raise UsageError(f"--global-batch must be a positive integer, got {gb!r}")
    return gb


def _seq_lens(spec: ModelSpec, seq_len: Sequence[int] | None) -> tuple[int, ...]:
    """The lengths asked for (default: the model's), each within the model's limit."""
    seqs = tuple(sorted(set(seq_len))) if seq_len else (spec.seq_len,)
    over = [s for s in seqs if s > spec.max_seq_len]
    if over:
        raise UsageError(
            f"--seq-len {over}: model {spec.name!r} accepts at most {spec.max_seq_len}"
        )
    return seqs


def _micro_batches(global_batch: int) -> tuple[int, ...]:
    """The powers of two that divide the global batch (so grad_accum is a whole number)."""
    return tuple(m for m in _powers_of_two(1, global_batch) if global_batch % m == 0)


def _compile_modes(device: DeviceCaps) -> tuple[str, ...]:
    if not device.compile:
        return ("off",)
    if device.kind == "cuda":
        return COMPILE_MODES
    return ("off", "default")  # CUDA graphs and Triton autotuning are CUDA-only


def _worker_counts(cpu_count: int) -> tuple[int, ...]:
    return tuple(range(0, min(MAX_WORKERS, max(cpu_count, 0)) + 1))


def _builtin_choices(
    spec: ModelSpec, device: DeviceCaps, global_batch: int, seqs: tuple[int, ...], cpu_count: int
) -> dict[str, tuple[Any, ...]]:
    """Every built-in knob's values this model runs on this device, in search order."""
    cuda = device.kind == "cuda"
    both = (False, True)
    return {
        "micro_batch": _micro_batches(global_batch),
        "seq_len": seqs,
        "precision": device.precisions,
        "activation_checkpointing": (False, True) if spec.supports_checkpointing else (False,),
        "compile": _compile_modes(device),
        "num_workers": _worker_counts(cpu_count),
        "pin_memory": (False, True) if cuda else (False,),
        "prefetch_factor": PREFETCH_CHOICES if cuda else (None,),
        "fused_optimizer": both if cuda else (False,),
        "expandable_segments": both if cuda else (False,),
        "cudnn_benchmark": both if cuda and spec.convolutional else (False,),
        "channels_last": both if cuda and spec.convolutional else (False,),
        "omp_spin": both if device.kind == "cpu" and cpu_count > 1 else (False,),
    }


def _parallel_choices(
    device: DeviceCaps, global_batch: int, micro_batches: tuple[int, ...], nproc: int
) -> dict[str, tuple[Any, ...]]:
    """On several processes: the micro-batches whose accumulation splits over them, and
    the DDP/FSDP settings (autotune/config/parallel.py); nothing on one process."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise UsageError(f"--nproc-per-node: expected a positive integer, got {nproc!r}")
    if nproc == 1:
        return {}
    fitting = tuple(m for m in micro_batches if (global_batch // m) % nproc == 0)
    if not fitting:
        raise UsageError(
            f"--nproc-per-node {nproc}: the global batch {global_batch} does not split "
            f"into whole micro-batches over {nproc} processes; use a --global-batch that "
            f"is a multiple of {nproc}"
        )
    return {"micro_batch": fitting, "parallel": par.space_choices(device)}


def _restrict(
    full: Mapping[str, tuple[Any, ...]],
    model_knobs: Mapping[str, tuple[Any, ...]],
    restrict: Mapping[str, Sequence[Any]],
    spec: ModelSpec,
    device: DeviceCaps,
) -> tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]]:
    """The built-in and model knob values left after ``--knob`` restrictions."""
    # Everything a user may name, with the values that exist at all (for messages).
    domain: dict[str, tuple[Any, ...]] = {
        **full,
        "precision": PRECISIONS,
        "activation_checkpointing": (False, True),
        "compile": COMPILE_MODES,
        "pin_memory": (False, True),
        "prefetch_factor": PREFETCH_CHOICES,
        **{name: (False, True) for name in SWITCHES},
    }
    why_not = _unavailable_reasons(spec, device)
    chosen = dict(full)
    knobs = dict(model_knobs)
    for raw_name, values in restrict.items():
        name = raw_name.removeprefix("knobs.").removeprefix("model.")
        if raw_name in _DERIVED:
            raise UsageError(f"--knob {raw_name}: {_DERIVED[raw_name]}")
        is_model_knob = name in model_knobs and (raw_name != name or name not in BUILTIN_KNOBS)
        unsearched = {k.name: k for k in spec.knobs if k.name not in model_knobs}
        if not is_model_knob and name in unsearched and name not in full:
            raise UsageError(
                f"--knob {raw_name}: model knob {name!r} is searched on a CUDA device only; "
                f"on {device.device} it stays at {_format_value(unsearched[name].default)}"
            )
        if not is_model_knob and name not in full:
            turned = [n for n in SWITCHES if full[n] != (False,)]
            allowed_names = [*BUILTIN_KNOBS, *turned, *model_knobs]
            raise UsageError(
                f"unknown knob {raw_name!r}{did_you_mean(raw_name, allowed_names)}; "
                f"knobs of {spec.name!r} on {device.device}: {', '.join(allowed_names)}"
            )
        if is_model_knob:
            knob = spec.knob(name)
            here, exists = model_knobs[name], knob.values
            reasons = {v: why for v in exists if (why := knob.value_problem(v, device))}
        else:
            here, exists = full[name], domain[name]
            reasons = {value: why for (knob, value), why in why_not.items() if knob == name}
        picked = _pick_values(raw_name, values, here, exists, reasons)
        if is_model_knob:
            knobs[name] = picked
        else:
            chosen[name] = picked
    return chosen, knobs


def _pick_values(
    raw_name: str,
    values: Sequence[Any],
    here: tuple[Any, ...],
    exists: tuple[Any, ...],
    why_not: Mapping[Any, str],
) -> tuple[Any, ...]:
    """The values of ``here`` that ``--knob raw_name=values`` names, in the space's order.

    A value that does not exist at all (not in ``exists``), or that exists but not here
    (``why_not`` may say why), is a ``UsageError`` listing what is allowed here.
    """
    shown = ", ".join(_format_value(v) for v in here)
    picked: list[Any] = []
    for text in values:
        ok, value = _match_value(text, exists) if isinstance(text, str) else (text in exists, text)
        if not ok:
            raise UsageError(f"--knob {raw_name}: unknown value {text!r}; allowed here: {shown}")
        if value not in here:
            reason = why_not.get(value, "not available here")
            raise UsageError(f"--knob {raw_name}={text}: {reason}; allowed here: {shown}")
        if value not in picked:
            picked.append(value)
    return tuple(v for v in here if v in picked)  # the space's own order


def _unavailable_reasons(spec: ModelSpec, device: DeviceCaps) -> dict[tuple[str, Any], str]:
    """Why a value that exists is not searched on this device or model."""
    where = f"{device.device} ({device.name})"
    reasons: dict[tuple[str, Any], str] = {
        ("activation_checkpointing", True): f"model {spec.name!r} does not support "
        "activation checkpointing",
        ("pin_memory", True): "pinned memory only helps a CUDA device",
    }
    for precision in PRECISIONS:
        problem = device.precision_problem(precision)
        if problem is not None:
            reasons[("precision", precision)] = problem
    for mode in COMPILE_MODES[1:]:
        reasons[("compile", mode)] = (
            f"torch.compile cannot run on {where} here"
            if not device.compile
            else f"compile mode {mode!r} needs a CUDA device (CUDA graphs / Triton autotuning)"
        )
    for pf in PREFETCH_CHOICES:
        reasons[("prefetch_factor", pf)] = "prefetch is only searched on a CUDA device"
    for name in CUDA_KNOBS:
        reasons[(name, True)] = f"{name} is only searched on a CUDA device"
    for name in CPU_KNOBS:
        reasons[(name, True)] = (
            f"{name} is only searched on a CPU device with more than one core"
            if device.kind == "cpu"
            else f"{name} is only searched on a CPU device"
        )
    if device.kind == "cuda":
        for name in ("cudnn_benchmark", "channels_last"):
            reasons[(name, True)] = (
                f"{name} is only searched for a convolutional model (ModelSpec.convolutional) "
                f"and {spec.name!r} is not one"
            )
    return reasons
