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
the ``knobs`` restrictions (``NAME=V1,V2``) narrow it (autotune/study/plan/knob_args.py reads them).
Each built-in knob's values and pruning come from its registry entry
(autotune/config/knobs.py): the space names no knob of TrainConfig itself.

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
from autotune.config.knobs import (
    NO_PREFERENCE,
    KnobDef,
    Where,
    searched_knobs,
    searched_only_on,
    seq_len_problem,
)
from autotune.config.train_config import TrainConfig
from autotune.core.errors import UsageError
from autotune.study.plan.knob_args import narrow, parse_knob_args, parse_seq_len

if TYPE_CHECKING:
    import optuna

    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "BUILTIN_KNOBS",
    "CPU_KNOBS",
    "CUDA_KNOBS",
    "SWITCHES",
    "SearchSpace",
    "first_allowed",
    "parse_knob_args",
    "parse_seq_len",
]


# The knobs of TrainConfig a search always turns, in the order they are suggested; then
# the on/off switches of one device kind (the registry's ``switch`` entries), which are a
# dimension only where the space holds more than ``False`` for them.
_SEARCHED = searched_knobs(TrainConfig)
BUILTIN_KNOBS = tuple(k.name for k in _SEARCHED if k.search and not k.search.switch)
SWITCHES = tuple(k.name for k in _SEARCHED if k.search and k.search.switch)
CUDA_KNOBS = tuple(k.name for k in _SEARCHED if searched_only_on(k) == "cuda")
CPU_KNOBS = tuple(k.name for k in _SEARCHED if searched_only_on(k) == "cpu")


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """The knobs x ranges one search explores: each searched knob of the registry (the
    fields of ``config_type``) with its allowed values, in order (``space.precision``),
    and the model's own knobs."""

    model: str
    device: str
    device_kind: str
    global_batch: int
    builtin: Mapping[str, tuple[Any, ...]]  # each searched TrainConfig knob's values
    knobs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    knob_defaults: Mapping[str, Any] = field(default_factory=dict)
    # A model knob that matters only with a TrainConfig knob on: its name -> that knob's.
    knob_parents: Mapping[str, str] = field(default_factory=dict)
    late_knobs: tuple[str, ...] = ()  # model knobs refined after the micro-batch steps
    default_seq_len: int | None = None
    low_precision_saves_memory: bool = False  # whether "smallest" prefers bf16/fp16
    # Several processes (autotune/config/parallel.py): their count and the DDP/FSDP settings
    # searched, as labels (one categorical dimension, "parallel"; none on one process).
    nproc_per_node: int = 1
    parallel: tuple[str, ...] = ()
    config_type: type[TrainConfig] = TrainConfig  # a subclass adds knobs (the registry's)

    def __post_init__(self) -> None:
        builtin = {k.name: tuple(self.builtin.get(k.name, (k.default,))) for k in self._knobs}
        object.__setattr__(self, "builtin", builtin)
        problems = [
            f"search space: {name} has no allowed value"
            for name in (*builtin, *self.knobs)
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
        object.__setattr__(self, "knob_parents", dict(self.knob_parents))

    def __getattr__(self, name: str) -> tuple[Any, ...]:
        """A searched knob's allowed values as an attribute (``space.precision``)."""
        builtin = self.__dict__.get("builtin", {})
        if name in builtin:
            values: tuple[Any, ...] = builtin[name]
            return values
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _knobs(self) -> tuple[KnobDef, ...]:
        return searched_knobs(self.config_type)

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
        config_type: type[TrainConfig] = TrainConfig,
    ) -> SearchSpace:
        """The full space for ``spec`` on ``device``, narrowed by ``restrict``.

        ``restrict`` maps a knob name (a TrainConfig field or one of the model's knobs,
        also as ``knobs.NAME``) to the values to keep, as strings (``"bf16"``, ``"true"``,
        ``"8"``) or as values. An unknown name or a value not allowed here is a
        ``UsageError`` naming the allowed ones.
        """
        gb = _global_batch(spec, global_batch)
        where = Where(
            spec=spec,
            device=device,
            cores=cpu_count,
            global_batch=gb,
            seq_lens=_seq_lens(spec, seq_len),
        )
        full = {k.name: k.searched(where) for k in searched_knobs(config_type)}
        full.update(_parallel_choices(device, gb, full["micro_batch"], nproc_per_node))
        model_knobs = {k.name: k.searched_on(device) for k in spec.knobs if k.searched_on(device)}
        chosen, knobs = narrow(full, model_knobs, restrict or {}, where, config_type)
        return cls(
            model=spec.name,
            device=device.device,
            device_kind=device.kind,
            global_batch=gb,
            builtin={name: v for name, v in chosen.items() if name != "parallel"},
            knobs=knobs,
            knob_defaults={k.name: k.default for k in spec.knobs},
            knob_parents={k.name: k.only_with for k in spec.knobs if k.only_with},
            late_knobs=tuple(k.name for k in spec.knobs if k.refine_late),
            default_seq_len=spec.seq_len,
            low_precision_saves_memory=device.kind == "cuda" or device.bf16_native,
            nproc_per_node=nproc_per_node,
            parallel=chosen.get("parallel", ()),
            config_type=config_type,
        )

    # -- the dimensions -------------------------------------------------------------------
    def choices(self, name: str) -> tuple[Any, ...]:
        """Allowed values of a built-in knob or of a model knob (``knobs.NAME`` or ``NAME``)."""
        if name in self.builtin:
            return self.builtin[name]
        if name == "parallel" and self.parallel:
            return self.parallel
        key = name.removeprefix("knobs.")
        if key in self.knobs:
            return self.knobs[key]
        raise KeyError(f"no knob {name!r} in this search space")

    def dimensions(self) -> list[tuple[str, tuple[Any, ...]]]:
        """(parameter name, choices) for every knob; model knobs as ``knobs.NAME``. A CUDA
        or CPU switch is one only where the space holds more than ``False`` for it."""
        switches = self.switches()
        dims = [
            (k.name, self.builtin[k.name])
            for k in self._knobs
            if k.search and (not k.search.switch or k.name in switches)
        ]
        dims += [(f"knobs.{name}", values) for name, values in self.knobs.items()]
        if self.parallel:
            dims.append(("parallel", self.parallel))
        return dims

    def cuda_knobs(self) -> tuple[str, ...]:
        """The ``CUDA_KNOBS`` this space turns (the others stay off)."""
        return tuple(name for name in self.switches() if name in CUDA_KNOBS)

    def switches(self) -> tuple[str, ...]:
        """The switches (CUDA's and the CPU's) this space turns (the others stay off)."""
        return tuple(
            k.name
            for k in self._knobs
            if k.search and k.search.switch and self.builtin[k.name] != (k.default,)
        )

    def _dependents(self) -> dict[str, str]:
        """The knobs set only where another is above 0 (pinning, prefetch: workers; a
        model knob such as ``checkpoint_every``: activation checkpointing)."""
        out = {k.name: k.search.only_with for k in self._knobs if k.search and k.search.only_with}
        out.update({f"knobs.{name}": parent for name, parent in self.knob_parents.items()})
        return out

    def size(self) -> int:
        """How many distinct configs the space holds (pin/prefetch only with workers)."""
        dependents = self._dependents()
        n, per_parent = 1, dict.fromkeys(dependents.values(), 1)
        for name, values in self.dimensions():
            if name in dependents:
                per_parent[dependents[name]] *= len(values)
            elif name not in dependents.values():
                n *= len(values)
        for parent, inner in per_parent.items():
            n *= sum(1 if not v else inner for v in self.builtin[parent])
        return n

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
        """A TrainConfig from knob values (``knobs.NAME`` for model knobs); a knob set only
        with another (pin/prefetch with workers) stays at its default where that one is 0,
        and a model knob that matters only with one (``checkpoint_every``) is left out."""
        settings: dict[str, Any] = {}
        for k in self._knobs:
            assert k.search is not None
            value = values.get(k.name, k.default)
            parent = k.search.only_with
            if parent is not None and not values.get(parent, 0):
                value = k.default
            elif value is not None and k.type in (int, bool):
                value = k.type(value)
            settings[k.name] = value
        knobs = {
            name: values.get(f"knobs.{name}", self.knob_defaults.get(name)) for name in self.knobs
        }
        for name, parent in self.knob_parents.items():
            if not settings.get(parent):  # it would change nothing: left out (the default)
                knobs.pop(name, None)
        return self.config_type(
            **settings,
            grad_accum=self.global_batch // settings["micro_batch"],
            knobs=knobs,
            parallel=self._parallel_of(values),
        )

    def values_of(self, config: TrainConfig) -> dict[str, Any]:
        """The knob values of ``config`` (the inverse of ``make_config``)."""
        out: dict[str, Any] = {name: getattr(config, name) for name in self.builtin}
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
        dependents = self._dependents()
        for name, allowed in [*self.dimensions(), *self.builtin.items()]:  # switches off too
            if name in dependents and not values[dependents[name]]:
                continue
            if values[name] not in allowed:
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
        dependents = self._dependents()
        params: dict[str, Any] = {}
        for name, allowed in self.dimensions():
            if len(allowed) < 2 or (name in dependents and not values[dependents[name]]):
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
        dependents = self._dependents()
        for name, allowed in self.dimensions():
            if name in dependents and not values[dependents[name]]:
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
        dependents = self._dependents()
        names = [n for n, _ in self.dimensions() if n not in dependents]
        for combo in itertools.product(*(self.choices(n) for n in names)):
            values = dict(zip(names, combo, strict=True))
            inner = [n for n, _ in self.dimensions() if values.get(dependents.get(n, ""))]
            if not inner:
                yield self.make_config(values)
                continue
            for sub in itertools.product(*(self.choices(n) for n in inner)):
                yield self.make_config({**values, **dict(zip(inner, sub, strict=True))})

    def _start(self, prefer: str) -> dict[str, Any]:
        """Each knob at the value a starting point prefers (``prefer``: the entries'
        ``guess`` or ``smallest``; else the default), as far as the space allows; the
        model's knobs at their defaults."""
        out: dict[str, Any] = {}
        for k in self._knobs:
            wanted = getattr(k.search, prefer, NO_PREFERENCE) if prefer else NO_PREFERENCE
            order = (k.default,) if wanted is NO_PREFERENCE else (wanted, k.default)
            out[k.name] = first_allowed(self.builtin[k.name], order)
        for name, values in self.knobs.items():
            default = self.knob_defaults.get(name)
            out[f"knobs.{name}"] = default if default in values else values[0]
        return out

    def naive(self) -> TrainConfig:
        """What an untuned run does: fp32, the smallest micro-batch, no compile, no
        workers, no checkpointing, the model's default knobs (as far as the space allows):
        each knob at its default, else its first value."""
        return self.make_config({**self._start(""), "seq_len": self._default_seq_len()})

    def smallest(self) -> TrainConfig:
        """The config with the smallest memory footprint the space has: the smallest
        micro-batch and length, checkpointing on where available, half precision where
        it saves memory (CUDA, or a CPU with native bf16), no compile, no workers."""
        order = ("fp16", "bf16", "fp32", "tf32")
        if not self.low_precision_saves_memory:
            order = ("fp32", "tf32", "bf16", "fp16")
        return self.make_config(
            {
                **self._start("smallest"),
                "seq_len": self.seq_len[0],
                "precision": first_allowed(self.precision, order),
            }
        )

    def guess(self) -> TrainConfig:
        """A hand-tuner's first guess, tried right after the naive config so that a short
        search starts near the usual answer: a quarter of the global batch per
        micro-batch, half precision where the device runs it natively (bf16, else fp16 on
        CUDA), no checkpointing, no compile; on CUDA two pinned DataLoader workers, and the
        switches whose entries say a hand-tuner turns them on (fused AdamW, and for a
        convolutional model cuDNN autotuning and channels-last)."""
        target = max(1, self.global_batch // 4)
        fitting = [m for m in self.micro_batch if m <= target]
        cuda = self.device_kind == "cuda"
        order = ("bf16", "fp16", "tf32", "fp32") if self.low_precision_saves_memory else ("fp32",)
        return self.make_config(
            {
                **self._start("guess"),
                "micro_batch": fitting[-1] if fitting else self.micro_batch[0],
                "seq_len": self._default_seq_len(),
                "precision": first_allowed(self.precision, order),
                "num_workers": first_allowed(self.num_workers, (2, 1, 0) if cuda else (0,)),
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
        knob to the next value up and down, and the categorical ones marked ``refine_late``
        (the chunked loss: a memory knob that ran 0.91-0.94x compiled on a CPU); each
        switch the space turns (CUDA's, the CPU's) flipped on its own last. A short search
        runs these in order, and on a CPU whose compile cache is empty it has time for one
        or two: a kernel choice moved mu
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
                    moves = [{f"knobs.{name}": v} for v in allowed if v != current]
                    (numeric if name in self.late_knobs else discrete).extend(moves)
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
                new["pin_memory"] = first_allowed(self.pin_memory, (False,))
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

    def _default_seq_len(self) -> int:
        target = self.default_seq_len or self.seq_len[0]
        return min(self.seq_len, key=lambda s: (abs(s - target), s))


def _ordinal(values: Sequence[Any]) -> bool:
    """Whether a knob's values are numbers (ordered), not categories."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def first_allowed(allowed: Sequence[Any], order: Sequence[Any]) -> Any:
    """The first of ``order`` that ``allowed`` holds, else ``allowed[0]``: a guess kept
    within the space."""
    return next((v for v in order if v in allowed), allowed[0])


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


# -- building the space (SearchSpace.for_model) -------------------------------------------


def _global_batch(spec: ModelSpec, global_batch: int | None) -> int:
    gb = spec.global_batch if global_batch is None else global_batch
    if not isinstance(gb, int) or gb < 1:
        raise UsageError(f"global_batch must be a positive integer, got {gb!r}")
    return gb


def _seq_lens(spec: ModelSpec, seq_len: Sequence[int] | None) -> tuple[int, ...]:
    """The lengths asked for (default: the model's), each within the model's limit."""
    seqs = tuple(sorted(set(seq_len))) if seq_len else (spec.seq_len,)
    if (too_long := seq_len_problem(seqs[-1], spec)) is not None:
        raise UsageError(f"seq_len: {too_long}")
    return seqs


def _parallel_choices(
    device: DeviceCaps, global_batch: int, micro_batches: tuple[int, ...], nproc: int
) -> dict[str, tuple[Any, ...]]:
    """On several processes: the micro-batches whose accumulation splits over them, and
    the DDP/FSDP settings (autotune/config/parallel.py); nothing on one process."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise UsageError(f"nproc_per_node: expected a positive integer, got {nproc!r}")
    if nproc == 1:
        return {}
    fitting = tuple(m for m in micro_batches if (global_batch // m) % nproc == 0)
    if not fitting:
        raise UsageError(
            f"nproc_per_node {nproc}: the global batch {global_batch} does not split "
            f"into whole micro-batches over {nproc} processes; use a global_batch that "
            f"is a multiple of {nproc}"
        )
    return {"micro_batch": fitting, "parallel": par.space_choices(device)}
