"""The training config: every knob a search may turn, each declared once as a registry entry.

Each field of ``TrainConfig`` is a ``knob(...)`` (autotune/config/knobs.py). ``__post_init__``
checks each field, ``check_config`` against a model, a device and this machine (at most
``WORKERS_PER_CORE`` workers per usable core); both report every problem at once, each
with its path (``config.precision: expected one of ...; got 'fp8'``). ``TrainingDefaults``:
a full run's optimisation settings; ``apply_overrides`` applies ``--set section.field=value``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from autotune.config.knobs import (
    Applies,
    BackendFlag,
    EnvSetting,
    Search,
    Where,
    checkpointing,
    convolutional,
    default_config,
    field_problems,
    knob,
    mapping_rule,
    micro_batches,
    on_cpu,
    on_cuda,
    registry,
)
from autotune.config.machine_limits import WORKERS_PER_CORE, worker_limit
from autotune.config.parallel import ParallelConfig
from autotune.config.parallel import coerce as coerce_parallel
from autotune.core.device_caps import PRECISIONS
from autotune.core.errors import ConfigError, PresetError
from autotune.core.validator import (
    MAX_PROCESSES,
    MAX_SIZE,
    SEED,
    Rule,
    Section,
    below_one,
    did_you_mean,
    fraction,
    key_problems,
    non_negative,
    positive,
)

__all__ = [
    "COMPILE_MODES",
    "KNOBS",
    "MAX_NUM_WORKERS",
    "PRECISIONS",
    "PREFETCH_CHOICES",
    "SEARCHED_WORKERS",
    "WORKERS_PER_CORE",
    "TrainConfig",
    "TrainingDefaults",
    "did_you_mean",
    "worker_limit",
]

# The last three (CUDA graphs, Triton autotuning) are searched on CUDA only.
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# DataLoader workers are processes, each a copy of the dataset's state: a few per core can
# help (they wait on I/O), more only contend (a typo such as 100000 forks until the machine
# stalls). ``machine_problems`` (machine_limits.py) applies a machine's limit;
# MAX_NUM_WORKERS caps any config. The bounds of the sizes (micro_batch, grad_accum,
# seq_len, prefetch_factor: MAX_SIZE) and of processes come from autotune.core.validator.
MAX_NUM_WORKERS = MAX_PROCESSES
SEARCHED_WORKERS = 4  # a search tries 0 to min(this, the cores) DataLoader workers
PREFETCH_CHOICES = (2, 4)  # batches per worker a search tries (CUDA)


# -- what a search tries, and why a value does not run here (the registry entries' rules) -------


def _compile_modes(where: Where) -> tuple[str, ...]:
    if not where.device.compile:
        return ("off",)
    return COMPILE_MODES if where.device.kind == "cuda" else ("off", "default")


def _compile_cannot_run(where: Where) -> str:
    device = where.device
    problem = f": {device.compile_problem}" if device.compile_problem else ""
    return f"torch.compile cannot run on {device.device} ({device.name}) here{problem}"


def _compile_why_not(mode: str, where: Where) -> str:
    if not where.device.compile:
        return _compile_cannot_run(where)
    return f"compile mode {mode!r} needs a CUDA device (CUDA graphs / Triton autotuning)"


_SWITCH_ON_CUDA = on_cuda("{name} is only searched on a CUDA device")
_CONV_ON_CUDA = convolutional(
    "{name} is only searched for a convolutional model (ModelSpec.convolutional) and "
    "{model!r} is not one"
)

_ON_SEVERAL_CPU_CORES = (
    on_cpu("{name} is only searched on a CPU device"),
    Applies(
        lambda w: w.cores > 1, "{name} is only searched on a CPU device with more than one core"
    ),
)


# float8 linear layers: the device's rule (FP8 tensor cores, torchao), and a search turns
# them only where torch.compile runs: eager, torchao's scaling and casts are separate
# kernels and a float8 step is slower than a bf16 one.
def _fp8_cannot_run(where: Where) -> str:
    return where.device.fp8_problem() or ""


def _fp8_not_compiled(where: Where) -> str:
    return (
        "fp8_linears is only searched where torch.compile runs (float8 training is fast only "
        f"compiled), and {_compile_cannot_run(where)}"
    )


_FP8_RUNS = Applies(lambda w: w.device.fp8_problem() is None, _fp8_cannot_run)
_FP8_COMPILED = Applies(lambda w: w.device.compile, _fp8_not_compiled)


@default_config
@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One point of the search space: how a training step is run. Each field is one
    knob of the registry (autotune/config/knobs.py): its checks, search values, CLI flag,
    export names and docs line are declared with it."""

    micro_batch: int = knob(
        low=1,
        high=MAX_SIZE,
        search=Search(order=0, values=micro_batches),
        loader_arg="batch_size",
        help="Samples per forward.",
        cli_default=8,
        exports={
            "hf": "per_device_train_batch_size",
            "lightning": "dataloader.batch_size",
            "deepspeed": "train_micro_batch_size_per_gpu",
        },
        doc="samples per forward/backward pass",
        example="`16`",
    )
    grad_accum: int = knob(
        default=1,
        low=1,
        high=MAX_SIZE,
        help="Micro-batches per optimizer step.",
        export_hint="Accelerator(gradient_accumulation_steps=...) and `with "
        "accelerator.accumulate(model):` around each micro-batch",
        exports={
            "hf": "gradient_accumulation_steps",
            "lightning": "trainer.accumulate_grad_batches",
            "deepspeed": "gradient_accumulation_steps",
        },
        doc="micro-batches accumulated per optimizer step",
        example="`2`",
    )
    seq_len: int = knob(
        low=1,
        high=MAX_SIZE,
        search=Search(order=1, values=lambda w: w.seq_lens),  # the model's limit: model_problems
        applied_by="the data",
        help="Sequence length (default: the model's).",
        export_hint=None,  # an export's line for the task's sample size says it
        doc="sequence length the config runs at",
        example="`256`",
    )
    precision: str = knob(
        default="fp32",
        choices=PRECISIONS,
        value_problem=lambda value, w: w.device.precision_problem(value),
        search=Search(
            order=2,
            values=lambda w: w.device.precisions,
            why_not=lambda value, w: w.device.precision_problem(value),
        ),
        backend=(  # TF32 matmuls: only the tf32 precision allows them
            BackendFlag("set_float32_matmul_precision", "tf32", "high", "highest", call=True),
            BackendFlag("backends.cuda.matmul.allow_tf32", "tf32", cuda=True),
            BackendFlag("backends.cudnn.allow_tf32", "tf32", cuda=True),
        ),
        help="fp32, tf32, bf16 or fp16.",
        exports={
            "hf": "bf16 / fp16 / tf32",
            "lightning": "trainer.precision",
            "accelerate": "mixed_precision",
            "deepspeed": "bf16.enabled / fp16.enabled",
        },
        doc="numerics: fp32; fp32 with TF32 matmuls (Ampere+); bf16 autocast; fp16 autocast "
        "with a loss scaler (CUDA only)",
        example="`bf16`",
    )
    activation_checkpointing: bool = knob(
        default=False,
        runs=(checkpointing("model {model!r} does not support it"),),
        search=Search(
            order=3,
            only=(checkpointing("model {model!r} does not support activation checkpointing"),),
            smallest=True,
        ),
        applied_by="the model (built with activation_checkpointing=True)",
        help="Recompute activations.",
        export_hint="enable your model's own activation checkpointing",
        exports={"hf": "gradient_checkpointing"},
        doc="recompute activations in the backward pass (only models that support it)",
        example="`false`",
    )
    compile: str = knob(
        default="off",
        choices=COMPILE_MODES,
        runs=(Applies(lambda w: w.device.compile, _compile_cannot_run),),
        search=Search(order=4, values=_compile_modes, why_not=_compile_why_not),
        export_hint="torch.compile(model, mode=...) (DeepSpeed: model_engine.compile)",
        help="torch.compile: off, default, reduce-overhead, max-autotune, "
        "max-autotune-no-cudagraphs.",
        flag="--compile",
        exports={
            "hf": "torch_compile",
            "lightning": "compile.mode",
            "accelerate": "dynamo_config.dynamo_mode",
        },
        doc="`torch.compile` mode (the last three are searched on CUDA only: CUDA graphs, "
        "Triton autotuning)",
        example="`default`",
    )
    # Not searched: per block, mu's compile 0.62x, its steps 0.78x as fast (BENCHMARKS.md).
    compile_regions: bool = knob(
        default=False,
        needs="compile",
        applied_by="the step (each repeated block compiled on its own: block.compile())",
        label="compile-per-block",
        help="Compile each repeated block (the model's layers) once instead of the whole "
        "model: a shorter compile (needs --compile).",
        export_hint="compile each repeated block instead of the model: "
        "for block in model.layers: block.compile(mode=...)",
        doc="compile each repeated block (the largest `nn.ModuleList` of one module class) "
        "on its own instead of the whole model: one block's code is compiled once and "
        "reused, a shorter compile where the steps may be slower (only with `compile` on)",
        example="`false`",
    )
    num_workers: int = knob(
        default=0,
        low=0,
        high=MAX_NUM_WORKERS,
        search=Search(
            order=5, values=lambda w: tuple(range(min(SEARCHED_WORKERS, max(w.cores, 0)) + 1))
        ),
        applied_by="the DataLoader",
        loader_arg="num_workers",
        help="DataLoader worker processes.",
        flag="--workers",
        exports={"hf": "dataloader_num_workers", "lightning": "dataloader.num_workers"},
        doc="DataLoader worker processes; a run refuses more than 4 per usable core of its machine",
        example="`2`",
    )
    pin_memory: bool = knob(
        default=False,
        runs=(on_cuda("only useful with a CUDA device"),),
        search=Search(
            order=6,
            only=(on_cuda("pinned memory only helps a CUDA device"),),
            only_with="num_workers",
            guess=True,
        ),
        applied_by="the DataLoader",
        loader_arg="pin_memory",
        help="Pinned host memory (CUDA only).",
        exports={"hf": "dataloader_pin_memory", "lightning": "dataloader.pin_memory"},
        doc="pinned host memory for batches (CUDA only)",
        example="`true`",
    )
    prefetch_factor: int | None = knob(
        default=None,
        low=1,
        high=MAX_SIZE,
        needs="num_workers",  # torch's default: 2
        search=Search(
            order=7,
            values=lambda w: PREFETCH_CHOICES,
            only=(on_cuda("prefetch is only searched on a CUDA device"),),
            only_with="num_workers",
            domain=PREFETCH_CHOICES,
        ),
        applied_by="the DataLoader",
        loader_arg="prefetch_factor",
        help="Batches each worker loads ahead.",
        exports={"hf": "dataloader_prefetch_factor", "lightning": "dataloader.prefetch_factor"},
        doc="batches prefetched per worker (only with `num_workers > 0`)",
        example="`2`",
    )
    persistent_workers: bool = knob(
        default=False,
        needs="num_workers",
        applied_by="the DataLoader",
        loader_arg="persistent_workers",
        help="Keep DataLoader workers alive.",
        exports={
            "hf": "dataloader_persistent_workers",
            "lightning": "dataloader.persistent_workers",
        },
        doc="keep workers between epochs (only with `num_workers > 0`)",
        example="`false`",
    )
    fused_optimizer: bool = knob(
        default=False,
        search=Search(order=8, switch=True, only=(_SWITCH_ON_CUDA,), guess=True),
        applied_by="the optimizer (torch.optim.AdamW(fused=True))",
        optimizer_arg="fused",
        label="fused-adamw",
        help="The fused AdamW kernel.",
        exports={"hf": "optim", "lightning": "optimizer.fused"},
        doc="fused AdamW kernel (searched on CUDA only)",
        example="`true`",
    )
    cudnn_benchmark: bool = knob(
        default=False,
        runs=(on_cuda("only available on a CUDA device"),),
        search=Search(order=10, switch=True, only=(_SWITCH_ON_CUDA, _CONV_ON_CUDA), guess=True),
        backend=(BackendFlag("backends.cudnn.benchmark", cuda=True),),
        help="cuDNN autotuning (CUDA only).",
        exports={"lightning": "trainer.benchmark"},
        doc="cuDNN autotuning (CUDA only; searched for convolutional models)",
        example="`false`",
    )
    channels_last: bool = knob(
        default=False,
        runs=(
            convolutional(
                "model {model!r} is not declared convolutional (ModelSpec.convolutional), so it "
                "has no NCHW images to lay out channels-last"
            ),
        ),
        search=Search(order=11, switch=True, only=(_SWITCH_ON_CUDA, _CONV_ON_CUDA), guess=True),
        applied_by="the step (model and 4-D inputs in NHWC)",
        export_hint="model.to(memory_format=torch.channels_last), and each 4-D image batch "
        ".contiguous(memory_format=torch.channels_last)",
        help="Model and image inputs channels-last (convolutional models).",
        doc="model weights and 4-D image inputs in channels-last (NHWC) layout; only models "
        "whose spec declares `convolutional=True` (searched on CUDA only)",
        example="`true`",
    )
    expandable_segments: bool = knob(
        default=False,
        runs=(
            on_cuda("a setting of the CUDA caching allocator; needs a CUDA device, not {device}"),
        ),
        search=Search(order=9, switch=True, only=(_SWITCH_ON_CUDA,)),
        env=EnvSetting(
            "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", item=True, read="CUDA starts"
        ),
        help="The CUDA caching allocator's expandable segments (CUDA only).",
        doc="the CUDA caching allocator's expandable segments: less fragmentation, so a "
        "micro-batch near the limit may fit (CUDA only)",
        example="`false`",
    )
    # On the 2-core dev VM, mu's micro-batch 1 in plain torch: 1.38x with it; through bursts
    # 0.92-1.09x of the default policy, by config (BENCHMARKS.md): measured, not assumed.
    omp_spin: bool = knob(
        default=False,
        runs=(
            on_cpu(
                "how torch's OpenMP threads wait between CPU operations; searched and set for a "
                "CPU device only, not {device}"
            ),
        ),
        search=Search(order=12, switch=True, only=_ON_SEVERAL_CPU_CORES),
        env=EnvSetting("OMP_WAIT_POLICY", "ACTIVE"),
        help="torch's CPU threads spin between operations: OMP_WAIT_POLICY=ACTIVE (CPU only).",
        doc="torch's OpenMP threads spin between CPU operations instead of sleeping: a step "
        "of many small operations stops waiting on a sleeping thread's wake-up at each (CPU "
        "only, more than one core)",
        example="`false`",
    )
    # Published figures: torchao's table (H100) 0.80x for a linear of M, K, N = 1024, 2048,
    # 1024 and 1.39x for 4096, 8192, 16384; nanochat's d12 (GPT-2 124M's size) ran slower
    # with FP8. Not measured here yet: the GPU suite (benchmarks/gpu_suite.py) measures it.
    fp8_linears: bool = knob(
        default=False,
        runs=(_FP8_RUNS,),
        search=Search(order=13, switch=True, only=(_SWITCH_ON_CUDA, _FP8_RUNS, _FP8_COMPILED)),
        applied_by="the model (torchao.float8.convert_to_float8_training, before compile)",
        label="fp8",
        help="Linear layers in float8 with torchao (CUDA, compute capability 8.9+; fast "
        "only with --compile).",
        exports={"accelerate": "fp8_config.backend"},
        export_hint="convert the model before compiling it: torchao.float8."
        "convert_to_float8_training(model, module_filter_fn=...), skipping the output head "
        "and the linear layers whose sizes are not multiples of 16",
        doc="the linear layers in float8 (torchao's float8 training; `pip install "
        "'autotune-train[fp8]'`): each `nn.Linear` whose sizes are multiples of 16 but the output "
        "head, on a CUDA device of compute capability 8.9+ (L4, RTX 4090, H100, H200). Fast "
        "only with `compile` on (eager, slower than bf16); published figures find small "
        "layers slower (torchao on an H100: 0.80x for a 1024x2048 input to a 2048x1024 "
        "linear, 1.39x for 4096x8192 to 8192x16384), so it pays on large models only "
        "(searched on such a device where torch.compile runs)",
        example="`false`",
    )
    knobs: Mapping[str, Any] = knob(
        default={},
        rule=mapping_rule,
        applied_by="the model (its own knobs, checked against its spec)",
        export_hint="a model knob; pass it to the model",
        doc_type="mapping of name → string, number, true/false or null; default `{}`",
        doc="the model's own math-preserving knobs (`autotune models show MODEL`); e.g. "
        "gpt's and mu's `sdpa_backend` (`auto`, `math`, `flash`, `efficient`, `cudnn`: the "
        "kernel of `attention: sdpa`, pinned with `torch.nn.attention.sdpa_kernel`; flash "
        "and cudnn need compute capability 8.0+, efficient a CUDA device; searched on CUDA "
        "only)",
        example="`{block_group: 2}`",
    )
    parallel: ParallelConfig | None = knob(  # noqa: RUF009 (knob is a field specifier)
        default=None,
        applied_by="torchrun and the model's wrapping (DDP/FSDP)",
        export_hint="the DDP/FSDP settings measured; set them in your own wrapping of the model",
        doc_type="mapping (below), or absent; default absent",
        doc="several processes under torchrun: their count and the DDP/FSDP knobs the search "
        "chose (absent: one process; a preset without it loads as before)",
        example="`{nproc_per_node: 2, strategy: ddp}`",
    )

    def __post_init__(self) -> None:
        problems = field_problems(self, path="config")
        parallel, parallel_issues = coerce_parallel(self.parallel)
        problems += parallel_issues
        if problems:
            raise ConfigError(problems)
        object.__setattr__(self, "knobs", dict(self.knobs))
        object.__setattr__(self, "parallel", parallel)

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step on one process (times the world size under DDP)."""
        return self.micro_batch * self.grad_accum

    def any_micro_batch(self, device_kind: str) -> bool:
        """Whether this config's compiled code serves every micro-batch: compiled whole
        (not ``compile_regions``) on a CPU, where the step marks its inputs' batch
        dimension dynamic (``Stepper``) and a compile of one micro-batch then serves the
        others from the cache (mu on the 2-core EPYC: the next micro-batch in 5 s instead
        of a 42-second first compile; ``benchmarks/dynamic_batch.py``). On a GPU each
        micro-batch is compiled for its own shapes: dynamic shapes there are not measured.
        A compiled region sees the block's inputs, not the batch's, so its code stays
        shape-bound."""
        return self.compile != "off" and not self.compile_regions and device_kind == "cpu"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["knobs"] = dict(self.knobs)
        if self.parallel is None:  # a single process: the record is as it always was
            del data["parallel"]
        return data

    @classmethod
    def from_mapping(cls, data: Any, *, path: str = "config") -> TrainConfig:
        """Build from plain data (YAML/JSON), reporting every bad key and value at once."""
        if not isinstance(data, Mapping):
            raise ConfigError([f"{path}: expected a mapping, got {type(data).__name__}"])
        problems = key_problems(cls, data, path)
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            config = cls(**{k: v for k, v in data.items() if k in names})
        except ConfigError as exc:
            problems += [p.replace("config", path, 1) for p in exc.problems]
        except TypeError:  # a required field is missing: key_problems says which
            pass
        if problems:
            raise ConfigError(problems)
        return config

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


# -- the optimisation settings of a full run ---------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrainingDefaults(Section):
    """The optimisation settings of the full run (``autotune train`` flags override them)."""

    lr: float = 3e-4
    weight_decay: float = 0.1
    warmup_steps: int = 100
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0
    label_smoothing: float = 0.0
    max_steps: int | None = 1000
    epochs: int | None = None
    eval_interval: int = 100
    eval_batches: int = 10
    log_interval: int = 10
    checkpoint_interval: int = 200
    keep_last: int = 3
    seed: int = 0

    _path: ClassVar[str] = "training"
    _error: ClassVar[type[ConfigError]] = PresetError  # a preset's section, wherever it is built
    _record: ClassVar[str] = "preset"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "lr": positive,
        "weight_decay": non_negative,
        "warmup_steps": non_negative,
        "min_lr_ratio": fraction,
        "grad_clip": positive,
        "label_smoothing": below_one,
        "max_steps": positive,
        "epochs": positive,
        "eval_interval": positive,
        "eval_batches": positive,
        "log_interval": positive,
        "checkpoint_interval": positive,
        "keep_last": positive,
        "seed": SEED,
    }

    @classmethod
    def _prepare(cls, data: Mapping[Any, Any]) -> Mapping[Any, Any]:
        # `epochs: 3` alone means three epochs, not "three epochs or 1000 steps".
        if data.get("epochs") is not None and "max_steps" not in data:
            return {**data, "max_steps": None}
        return data

    def _cross_problems(self) -> list[str]:
        if self.max_steps is None and self.epochs is None:
            return ["training: set max_steps or epochs (or both: whichever ends first)"]
        return []


KNOBS = registry(TrainConfig)  # the registry: one entry per field, in field order
