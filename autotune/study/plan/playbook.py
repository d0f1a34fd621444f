"""Where experienced people start: the models' guides and the expert playbook.

A search that begins from scratch can lose to a careful engineer's first guess, because a
short search has few trials to spare. So the first trials after the naive config are the
configs people would try first, and the best of them races the search's finalists
(``autotune/study/race/finalist_race.py``): the search can lose to them only by measurement
noise, and the race says by how much.

* **The guides** (``NAIVE``, ``HAND_TUNED``): for each built-in model family, where its
  training guide started and where it ended. ``benchmarks/compare.py`` measures the same
  configs as its naive and hand-tuned rows, so the search always has the benchmark's
  hand-tuned config among its candidates.
* **The playbook** (``playbook_config``): what experienced people try first on a device
  class, for any model:

  - half precision where the device runs it natively (bf16; fp16 with a scaler on a CUDA
    device without bf16; else TF32 matmuls on CUDA), fp32 otherwise;
  - ``torch.compile`` (its first mode in the space); when the compile gives no result
    (an error, or still compiling at its cap), the same config without it runs next
    (``Planner.without_compile``);
  - the micro-batch: on CUDA the largest one the memory model predicts to fit (the whole
    global batch when it knows nothing yet); on a CPU the guide's hand-tuned micro-batch,
    else a quarter of the global batch (a CPU gains little from a larger batch and pays in
    cache misses: MU at 32 x 1 measured 0.71x of 4 x 8 on the 2-core Xeon; in bf16 without
    compile, though, 32 x 1 ran 1.14x (mu) and 1.19x (gpt-small) of 8 x 4 there, and
    ``quick_start`` takes the whole batch);
  - on CUDA two DataLoader workers with pinned memory, none on a CPU (the workers would
    take the cores the step runs on);
  - on CUDA fused AdamW (one kernel for the whole update), and for a convolutional model
    cuDNN autotuning and channels-last; the allocator's expandable segments stay off (the
    search tries them where fragmentation decides whether a micro-batch fits);
  - OpenMP's wait policy as the user has it (``omp_spin`` off): spinning threads
    (``OMP_WAIT_POLICY=ACTIVE``) measured 1.38x at MU's micro-batch 1 in plain torch on
    the 2-core EPYC, but through bursts 0.92-1.09x of the default policy, config by
    config (``benchmarks/omp_policy.py``), so the search's refinement tries it rather
    than the playbook assuming it;
  - no activation checkpointing (it trades about a third more compute for memory; the
    search tries it where memory is what limits the batch);
  - each model knob at its default (the search's refinement moves them one at a time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.study.plan.space import SearchSpace, first_allowed

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.preset.sections import Fingerprint
    from autotune.study.plan.memory_model import MemoryModel

__all__ = [
    "HAND_TUNED",
    "NAIVE",
    "Guide",
    "Recipe",
    "device_refusal",
    "expert_starts",
    "fit_global_batch",
    "hand_tuned_config",
    "model_family",
    "naive_config",
    "playbook_config",
    "project",
    "quick_start",
]


@dataclass(frozen=True, kw_only=True)
class Guide:
    """A guide's config for one model family: micro-batch x accumulation (None: whatever
    keeps the global batch), and the changes it makes, each with a label."""

    source: str
    micro_batch: int
    grad_accum: int | None = None
    changes: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    remarks: tuple[str, ...] = ()


NAIVE: dict[str, Guide] = {
    "mu": Guide(source="MU guide, start", micro_batch=4),
    "gpt": Guide(source="GPT guide, start", micro_batch=2),
    "pointer-gen": Guide(source="pointer-gen guide, start", micro_batch=1, grad_accum=16),
    "text-regressor": Guide(source="text-regressor guide, start", micro_batch=8),
}
HAND_TUNED: dict[str, Guide] = {
    "mu": Guide(source="MU guide, end", micro_batch=8, grad_accum=4),
    "gpt": Guide(
        source="GPT guide, end (nanoGPT's train.py recipe)",
        micro_batch=12,
        changes=(
            ("bf16 autocast", {"precision": "bf16"}),
            ("torch.compile", {"compile": "default"}),
        ),
        remarks=("SDPA attention: always on in autotune's GPT",),
    ),
    "pointer-gen": Guide(
        source="pointer-gen guide, end",
        micro_batch=4,
        grad_accum=4,
        changes=(("2 DataLoader workers", {"num_workers": 2}),),
    ),
    "text-regressor": Guide(
        source="text-regressor guide, end",
        micro_batch=8,
        changes=(
            ("TF32", {"precision": "tf32"}),
            ("activation checkpointing", {"activation_checkpointing": True}),
            ("2 DataLoader workers", {"num_workers": 2}),
        ),
    ),
}


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A policy's config and what to say about it (what was dropped or adjusted)."""

    config: TrainConfig | None
    notes: tuple[str, ...] = ()


def model_family(spec: ModelSpec) -> str:
    return spec.family or spec.name


def fit_global_batch(
    micro_batch: int, grad_accum: int | None, global_batch: int, *, what: str
) -> tuple[int, int, list[str]]:
    """The guide's micro-batch (or the largest divisor of the global batch below it) and
    the accumulation that keeps ``micro x accum == global_batch``, with notes."""
    notes: list[str] = []
    micro = min(micro_batch, global_batch)
    while global_batch % micro:
        micro -= 1
    if micro != micro_batch:
        notes.append(
            f"{what}: micro-batch {micro_batch} does not divide the global batch "
            f"{global_batch}; used {micro}"
        )
    accum = global_batch // micro
    if grad_accum is not None and micro_batch * grad_accum != global_batch:
        notes.append(
            f"{what}: the guide's {micro_batch} x {grad_accum} = {micro_batch * grad_accum} "
            f"samples per step; kept the global batch {global_batch} ({micro} x {accum})"
        )
    return micro, accum, notes


def _default_knobs(spec: ModelSpec) -> dict[str, Any]:
    return {k.name: k.default for k in spec.knobs}


def naive_config(spec: ModelSpec, *, global_batch: int, seq_len: int) -> Recipe:
    """Where the model's guide started: fp32, no compile, no workers."""
    from autotune.config.train_config import TrainConfig

    guide = NAIVE.get(model_family(spec))
    notes: list[str] = []
    if guide is None:
        micro, accum = 1, global_batch
        notes.append(f"naive: no guide for {spec.name!r}; micro-batch 1 (the search's naive)")
    else:
        micro, accum, notes = fit_global_batch(
            guide.micro_batch, guide.grad_accum, global_batch, what="naive"
        )
    config = TrainConfig(
        micro_batch=micro, grad_accum=accum, seq_len=seq_len, knobs=_default_knobs(spec)
    )
    return Recipe(config=config, notes=tuple(notes))


def device_refusal(config: TrainConfig, spec: ModelSpec, caps: DeviceCaps) -> str | None:
    """Why ``config`` cannot (or should not) run on the device; None if it can."""
    from autotune.config.checks import check_config
    from autotune.core.errors import ConfigError

    try:
        check_config(config, spec=spec, device=caps)
    except ConfigError as exc:
        return "; ".join(p.removeprefix("config.") for p in exc.problems)
    if config.precision == "bf16" and caps.kind == "cpu" and not caps.bf16_native:
        return f"precision: {caps.name} has no bf16 units (emulated bf16 is many times slower)"
    return None


def hand_tuned_config(
    spec: ModelSpec, caps: DeviceCaps, *, global_batch: int, seq_len: int
) -> Recipe:
    """Where the model's guide ended, each change kept only where the device runs it."""
    guide = HAND_TUNED.get(model_family(spec))
    if guide is None:
        return Recipe(config=None, notes=(f"hand-tuned: no guide for {spec.name!r}",))
    base = naive_config(spec, global_batch=global_batch, seq_len=seq_len).config
    assert base is not None  # naive_config always returns a config
    micro, accum, notes = fit_global_batch(
        guide.micro_batch, guide.grad_accum, global_batch, what="hand-tuned"
    )
    config = base.replace(micro_batch=micro, grad_accum=accum)
    for label, change in guide.changes:
        candidate = config.replace(**change)
        refusal = device_refusal(candidate, spec, caps)
        if refusal is None:
            config = candidate
        else:
            notes.append(f"hand-tuned: dropped {label} on {caps.device} ({refusal})")
    notes.extend(f"hand-tuned: {remark}" for remark in guide.remarks)
    return Recipe(config=config, notes=tuple(notes))


# ------------------------------------------------------------------------------------
# The playbook and the search's expert starts
# ------------------------------------------------------------------------------------

_PRECISIONS_CUDA = ("bf16", "fp16", "tf32", "fp32")
CPU_MICRO_BATCH_SHARE = 4  # no guide on a CPU: a quarter of the global batch per micro-batch


def project(space: SearchSpace, config: TrainConfig) -> tuple[TrainConfig, list[str]]:
    """``config`` moved into ``space``: each knob the space does not allow takes the
    space's guess instead (the micro-batch: the largest allowed one not above it), with a
    note for each change. The global batch is the space's."""
    from autotune.study.plan.space import SWITCHES

    values = space.values_of(config)
    fallback = space.values_of(space.guess())
    notes: list[str] = []
    fixed = [(n, space.choices(n)) for n in SWITCHES if n not in space.switches()]
    for name, allowed in [*space.dimensions(), *fixed]:  # a switch off where not searched
        if name in ("pin_memory", "prefetch_factor") and values.get("num_workers", 0) == 0:
            continue
        if values[name] in allowed:
            continue
        if name == "micro_batch":
            below = [m for m in allowed if m <= values[name]]
            new = below[-1] if below else allowed[0]
        else:
            new = fallback[name]
        notes.append(f"{name} {values[name]!r} is outside this search's space: {new!r} instead")
        values[name] = new
    return space.make_config(values), notes


def playbook_config(
    space: SearchSpace,
    spec: ModelSpec,
    *,
    memory: MemoryModel | None = None,
    guide_micro_batch: int | None = None,
) -> TrainConfig:
    """The playbook's config for this space (the rules are in the module docstring)."""
    cuda = space.device_kind == "cuda"
    if cuda:
        precision = first_allowed(space.precision, _PRECISIONS_CUDA)
    elif space.low_precision_saves_memory:  # a CPU with bf16 units
        precision = first_allowed(space.precision, ("bf16", "fp32"))
    else:
        precision = first_allowed(space.precision, ("fp32",))
    modes = [m for m in space.compile if m != "off"]
    # The space's guess holds the rest: the workers, checkpointing off, and each switch as
    # its registry entry's ``Search.guess`` prefers (fused AdamW, cuDNN autotuning and
    # channels-last on where searched; expandable segments and omp_spin at their defaults).
    values = space.values_of(space.guess())
    values.update(precision=precision, compile=modes[0] if modes else "off")
    values["micro_batch"] = _playbook_micro_batch(space, spec, values, memory, guide_micro_batch)
    return space.make_config(values)


def quick_start(
    space: SearchSpace, spec: ModelSpec, *, memory: MemoryModel | None = None
) -> TrainConfig:
    """The first config of a search whose time limit is short (``QUICK_LIMIT_S``), run
    before naive: the playbook's precision without compile (a first compile takes 18-66 s
    on a 2-core CPU, more than such a limit leaves), at the largest micro-batch predicted
    to fit (without compile the step's per-operation overhead decides, and the whole
    global batch at once spreads it widest: in bf16 on the 2-core Xeon 32x1 ran 1.14x
    (mu) and 1.19x (gpt-small) 8x4), and on a CPU in bf16 each model knob at its
    ``quick_cpu`` value (eager attention, the chunked loss) where the space holds it. A
    peer's batch finder answers such a limit with the global batch in fp32; this start ran
    1.68x (mu) and 2.51x (gpt-small) that (BENCHMARKS.md, "the quick start")."""
    config = playbook_config(space, spec, memory=memory).replace(compile="off")
    values = space.values_of(config)
    values["micro_batch"] = _largest_predicted(space, spec, values, memory)
    if space.device_kind == "cpu" and values["precision"] == "bf16":
        for knob in spec.knobs:
            if knob.quick_cpu is not None and knob.quick_cpu in space.knobs.get(knob.name, ()):
                values[f"knobs.{knob.name}"] = knob.quick_cpu
    return space.make_config(values)


def _playbook_micro_batch(
    space: SearchSpace,
    spec: ModelSpec,
    values: Mapping[str, Any],
    memory: MemoryModel | None,
    guide_micro_batch: int | None,
) -> int:
    if space.device_kind != "cuda":
        target = guide_micro_batch or max(1, space.global_batch // CPU_MICRO_BATCH_SHARE)
        below = [m for m in space.micro_batch if m <= target]
        return below[-1] if below else space.micro_batch[0]
    return _largest_predicted(space, spec, values, memory)


def _largest_predicted(
    space: SearchSpace, spec: ModelSpec, values: Mapping[str, Any], memory: MemoryModel | None
) -> int:
    """The largest micro-batch of the space that ``memory`` predicts to fit with the other
    ``values`` (the largest of all without a memory model, or when it knows nothing)."""
    params = _params(spec)
    for micro in sorted(space.micro_batch, reverse=True):  # the largest predicted to fit
        config = space.make_config({**values, "micro_batch": micro})
        if memory is None:
            return micro
        if memory.predicted_to_fit(config, params=params):  # no benefit of doubt
            return micro
    return space.micro_batch[0]


def _params(spec: ModelSpec) -> tuple[int, int] | None:
    """The model's parameters, all and trained (those AdamW holds state for); None where
    it cannot be built on the meta device."""
    try:
        counts = spec.param_counts()
    except Exception:  # a user's model that needs real tensors to build: no scaling
        return None
    return counts.total, counts.trained


def expert_starts(
    space: SearchSpace,
    spec: ModelSpec,
    caps: DeviceCaps,
    *,
    memory: MemoryModel | None = None,
) -> list[tuple[str, TrainConfig, list[str]]]:
    """The search's expert starts, each ``(role, config, notes)``: the guide's hand-tuned
    config (role ``hand-tuned``, for built-in model families) and the playbook's (role
    ``playbook``), both moved into the space; the playbook's is left out when it is the
    hand-tuned one."""
    starts: list[tuple[str, TrainConfig, list[str]]] = []
    seq_len = space.default_seq_len or space.seq_len[-1]
    if seq_len not in space.seq_len:
        seq_len = space.seq_len[-1]
    recipe = hand_tuned_config(spec, caps, global_batch=space.global_batch, seq_len=seq_len)
    guide_mb = None
    if recipe.config is not None:
        config, notes = project(space, recipe.config)
        starts.append(("hand-tuned", config, [*recipe.notes, *notes]))
        guide_mb = config.micro_batch
    playbook = playbook_config(space, spec, memory=memory, guide_micro_batch=guide_mb)
    if all(space.key(playbook) != space.key(c) for _, c, _ in starts):
        starts.append(("playbook", playbook, []))
    return starts


def warm_start_config(space: SearchSpace, config: TrainConfig) -> TrainConfig:
    """A preset's ``config`` moved into ``space`` as a warm start makes it: its
    micro-batch at the space's global batch (where it divides it), its sequence length
    the space's nearest. The caller checks that the space contains the result."""
    gb = space.global_batch
    if config.micro_batch in space.micro_batch and gb % config.micro_batch == 0:
        config = config.replace(grad_accum=gb // config.micro_batch)
    if config.seq_len not in space.seq_len:
        nearest = min(space.seq_len, key=lambda s: abs(s - config.seq_len))
        config = config.replace(seq_len=nearest)
    return config


def shipped_start(
    space: SearchSpace,
    spec: ModelSpec,
    caps: DeviceCaps,
    here: Fingerprint,
    *,
    presets: Iterable[Path] | None = None,
) -> tuple[TrainConfig, Path] | None:
    """The config of a preset shipped with autotune (``presets``: default the built-in
    ones) for this model (its name and arguments) that was measured on this kind of
    device (the same GPU model, or the same CPU model and core count:
    ``portability.same_device``), moved into the space (``warm_start_config``), with its
    file; None where none is. A bf16 preset is passed over on a CPU without bf16 units:
    a fingerprint names the CPU model, not its instruction sets (an AMD EPYC with AVX2
    only and one with AVX-512 bf16 look alike, and bf16 emulated compiles for minutes).
    On the 2-core AVX-512 EPYC the shipped ``cpu/mu-epyc`` preset (eager attention)
    measured 3,572 tokens/s, where a default search that never tried eager attention
    picked a config at 1,969."""
    from autotune.core.errors import AutotuneError
    from autotune.preset import load_preset
    from autotune.preset.library import find_presets
    from autotune.preset.portability import same_device
    from autotune.study.session.outcome import model_ref

    if presets is None:
        presets = [path for origin, path in find_presets() if origin == "builtin"]
    name, args = model_ref(spec)
    cuda = space.device_kind == "cuda"
    for path in sorted(presets):
        try:
            preset = load_preset(path)
        except AutotuneError:  # one unreadable file does not stop a search
            continue
        there = preset.fingerprint
        if (preset.model.name, dict(preset.model.args)) != (name, args):
            continue
        if there.device_kind != space.device_kind or not same_device(there, here, on_gpu=cuda):
            continue
        config = warm_start_config(space, preset.config)
        emulated = config.precision == "bf16" and caps.kind == "cpu" and not caps.bf16_native
        if space.contains(config) and not emulated:
            return config, path
    return None
