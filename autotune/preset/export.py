"""A preset in the words of the trainer people already use: Hugging Face, Lightning,
Accelerate, DeepSpeed, torchrun (or plain JSON/YAML).

Each mapper is a pure function of the preset (and the process count): it returns the
file's text, the mapping it holds, and the settings that format cannot carry (a model
knob, the budget, the sequence length the data must have...), which the file lists as
comments where the format allows them and the CLI prints as notes. Nothing is dropped in
silence. Exporting is reading data: no model code is imported.

A preset is hostile input, so every file is built by its format's serializer, never by
pasting preset strings into text: the mapping by ``yaml.safe_dump`` or ``json.dumps``, the
``torchrun`` command by ``shlex.quote`` of each word, and each comment line from
``autotune.core.text.one_line`` (one line, printable characters only), so no string of
the preset can end a comment, add a key or run a command.

The DataLoader arguments come from ``autotune.data.loader.loader_kwargs`` and the per-process
accumulation from ``autotune.train.distributed.per_rank_config``, the rules the burst and the
trainer use, so an export says what was measured.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.errors import UsageError
from autotune.core.text import control_problem, one_line

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.preset.schema import Preset

__all__ = [
    "EXPORT_FORMATS",
    "KNOB_EXPORT_TABLES",
    "Exported",
    "adamw_kwargs",
    "dataloader_kwargs",
    "export_preset",
    "torchrun_command",
]

EXPORT_FORMATS = ("json", "yaml", "hf", "lightning", "accelerate", "deepspeed", "torchrun")

# -- per-knob mapping tables: a knob's value in another trainer's words --------------------
# (the knob registry will provide these; until then they live here, and only here)

KNOB_EXPORT_TABLES: dict[str, dict[str, str]] = {
    # config.precision -> lightning.Trainer(precision=...)
    "lightning.precision": {
        "fp32": "32-true",
        "tf32": "32-true",
        "bf16": "bf16-mixed",
        "fp16": "16-mixed",
    },
    # config.precision -> accelerate's mixed_precision
    "accelerate.mixed_precision": {"fp32": "no", "tf32": "no", "bf16": "bf16", "fp16": "fp16"},
}

# autotune's AdamW (autotune.engine.step.make_optimizer): these betas, decay on matrices only.
ADAM_BETAS = (0.9, 0.95)
_LIGHTNING_PRECISION = KNOB_EXPORT_TABLES["lightning.precision"]
_ACCELERATE_PRECISION = KNOB_EXPORT_TABLES["accelerate.mixed_precision"]


@dataclass(frozen=True, kw_only=True)
class Exported:
    """One export: the text to write, the mapping it holds (None for ``torchrun``), and
    what the format cannot carry (each line says what to do instead)."""

    format: str
    text: str
    data: dict[str, Any] | None
    unmapped: tuple[str, ...]


def export_preset(
    preset: Preset, format: str, *, nproc: int | None = None, preset_ref: str | None = None
) -> Exported:
    """``preset`` as ``format`` (one of ``EXPORT_FORMATS``) for ``nproc`` processes
    (default: the preset's own count, ``config.parallel.nproc_per_node``, else 1).
    ``preset_ref``: how the ``torchrun`` command names the preset (default its name).

    The global batch stays the preset's: each process runs the micro-batch and
    ``grad_accum / nproc`` accumulation steps (``ConfigError`` where that does not divide).
    """
    if format not in EXPORT_FORMATS:
        raise UsageError(f"format: expected one of {', '.join(EXPORT_FORMATS)}; got {format!r}")
    if nproc is None:
        nproc = preset.config.parallel.nproc_per_node if preset.config.parallel else 1
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise UsageError(f"nproc: expected a positive number of processes, got {nproc!r}")
    if format in ("json", "yaml"):
        return _plain(preset, format)
    from autotune.train.distributed import per_rank_config

    rank_config = per_rank_config(preset.config, nproc)
    if format == "torchrun":
        return to_torchrun(preset, rank_config, nproc, preset_ref=preset_ref or preset.name)
    return _MAPPERS[format](preset, rank_config, nproc)


# -- rules the mappers share ---------------------------------------------------------------


def dataloader_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The DataLoader arguments ``config`` decides, as plain data (``loader_kwargs`` less
    its ``worker_init_fn``, which only makes workers leave Ctrl-C to the main process)."""
    from autotune.data.loader import loader_kwargs

    return {k: v for k, v in loader_kwargs(config).items() if k != "worker_init_fn"}


def adamw_kwargs(preset: Preset) -> dict[str, Any]:
    """``torch.optim.AdamW`` arguments of the preset's training (autotune decays matrices
    only; a single parameter group with these arguments decays everything)."""
    kwargs: dict[str, Any] = {
        "lr": preset.training.lr,
        "betas": list(ADAM_BETAS),
        "weight_decay": preset.training.weight_decay,
    }
    if preset.config.fused_optimizer:
        kwargs["fused"] = True
    return kwargs


def compile_kwargs(config: TrainConfig) -> dict[str, Any] | None:
    """``torch.compile`` arguments (None: not compiled), as ``engine.step.compile_model``."""
    if config.compile == "off":
        return None
    return {"mode": None if config.compile == "default" else config.compile}


def _describe(preset: Preset, config: TrainConfig, nproc: int) -> str:
    world = f" x {nproc} processes" if nproc > 1 else ""
    return (
        f"autotune preset {preset.name!r} (model {preset.model.name}, measured on "
        f"{preset.fingerprint.device_name}): global batch {preset.config.global_batch} = "
        f"micro-batch {config.micro_batch} x accumulation {config.grad_accum}{world}"
    )


def _common_unmapped(preset: Preset, config: TrainConfig) -> list[str]:
    """What no trainer's settings carry: the model, its knobs, the data's length, the budget."""
    lines = [
        f"model {preset.model.name!r}"
        + (f" with args {dict(preset.model.args)}" if preset.model.args else "")
        + ": build it in your script (this file configures training, not the model)",
        f"task.seq_len={preset.task.seq_len}: the searched sample size "
        f"({preset.task.size_label()}); make your data this size (tokenize/pack/crop)",
    ]
    for name, value in config.knobs.items():
        lines.append(f"config.knobs.{name}={value!r}: a model knob; pass it to the model")
    if config.parallel is not None:
        lines.append(
            f"config.parallel={config.parallel.label()}: the DDP/FSDP settings measured "
            "(docs/preset-format.md); set them in your own wrapping of the model"
        )
    if config.activation_checkpointing:
        lines.append(
            "config.activation_checkpointing=true: enable your model's own checkpointing "
            "(autotune builds the model with activation_checkpointing=True)"
        )
    if config.channels_last:
        lines.append(
            "config.channels_last=true: model.to(memory_format=torch.channels_last), and "
            "each 4-D image batch .contiguous(memory_format=torch.channels_last)"
        )
    if config.expandable_segments:
        lines.append(
            "config.expandable_segments=true: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "in the environment before the script starts"
        )
    if config.omp_spin:
        lines.append(
            "config.omp_spin=true: OMP_WAIT_POLICY=ACTIVE in the environment before the "
            "script starts (torch's CPU threads spin between operations)"
        )
    if preset.budget_bytes is not None:
        from autotune.core.units import format_bytes

        lines.append(
            f"budget_bytes={preset.budget_bytes}: measured under a memory budget of "
            f"{format_bytes(preset.budget_bytes)}; no trainer enforces it"
        )
    return lines


def _yaml_exported(
    format: str,
    preset: Preset,
    config: TrainConfig,
    nproc: int,
    data: dict[str, Any],
    unmapped: list[str],
    *,
    usage: str,
) -> Exported:
    """A YAML export: the preset described, what does not map and how to use it as
    comments, then ``data``."""
    header = _describe(preset, config, nproc)
    return Exported(
        format=format,
        text=_commented(header, unmapped, _yaml(data), usage=usage),
        data=data,
        unmapped=_notes(unmapped),
    )


def _comments(lines: Iterable[str], *, bullet: str = "") -> str:
    """Comment lines (``# {bullet}...``), each one line of printable text whatever it holds."""
    return "".join(f"# {bullet}{one_line(line)}\n" for line in lines)


def _notes(unmapped: Iterable[str]) -> tuple[str, ...]:
    """What a format cannot carry, each a single printable line (a comment, a CLI note)."""
    return tuple(one_line(line) for line in unmapped)


def _commented(header: str, unmapped: Iterable[str], body: str, *, usage: str) -> str:
    text = _comments([header, f"Use: {usage}"])
    notes = _notes(unmapped)
    if notes:
        text += _comments(["Not mapped (apply these yourself):"])
        text += _comments(notes, bullet="  - ")
    return text + body


def _yaml(data: dict[str, Any]) -> str:
    """YAML for ``data``, every non-ASCII character escaped (PyYAML's allow_unicode mode
    emits some line breaks, U+0085, raw, and reads them back changed)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=False)


def _json(data: dict[str, Any]) -> str:
    """JSON for ``data``, every non-ASCII character escaped."""
    return json.dumps(data, indent=2, ensure_ascii=True) + "\n"


def _steps(value: int | None) -> int:
    return -1 if value is None else value


# -- formats -----------------------------------------------------------------------------


def _plain(preset: Preset, format: str) -> Exported:
    from autotune.preset.io import dump_preset, preset_to_dict

    data = preset_to_dict(preset)
    text = _json(data) if format == "json" else dump_preset(preset)
    return Exported(format=format, text=text, data=data, unmapped=())


def to_hf(preset: Preset, config: TrainConfig, nproc: int) -> Exported:
    """Keyword arguments of ``transformers.TrainingArguments``."""
    t = preset.training
    loader = dataloader_kwargs(config)
    args: dict[str, Any] = {
        "per_device_train_batch_size": loader.pop("batch_size"),
        "gradient_accumulation_steps": config.grad_accum,
        "bf16": config.precision == "bf16",
        "fp16": config.precision == "fp16",
        "tf32": config.precision == "tf32",
        "gradient_checkpointing": config.activation_checkpointing,
        "torch_compile": config.compile != "off",
        "use_cpu": preset.fingerprint.device_kind == "cpu",  # as measured: on the CPU
    }
    if config.compile not in ("off", "default"):
        args["torch_compile_mode"] = config.compile
    args["dataloader_drop_last"] = loader.pop("drop_last")
    for key, value in loader.items():  # num_workers, pin_memory, persistent_workers, prefetch
        args[f"dataloader_{key}"] = value
    args["optim"] = "adamw_torch_fused" if config.fused_optimizer else "adamw_torch"
    args["learning_rate"] = t.lr
    args["weight_decay"] = t.weight_decay
    args["adam_beta1"], args["adam_beta2"] = ADAM_BETAS
    args["max_grad_norm"] = 0.0 if t.grad_clip is None else t.grad_clip
    args["warmup_steps"] = t.warmup_steps
    unmapped = _common_unmapped(preset, config)
    if t.schedule == "cosine" and t.min_lr_ratio > 0:
        args["lr_scheduler_type"] = "cosine_with_min_lr"
        args["lr_scheduler_kwargs"] = {"min_lr_rate": t.min_lr_ratio}
    elif t.schedule == "constant":
        args["lr_scheduler_type"] = "constant_with_warmup"
    else:
        args["lr_scheduler_type"] = t.schedule
        if t.min_lr_ratio > 0:
            unmapped.append(
                f"training.min_lr_ratio={t.min_lr_ratio}: Hugging Face's {t.schedule} "
                "schedule decays to 0"
            )
    args["max_steps"] = _steps(t.max_steps)
    if t.epochs is not None:
        args["num_train_epochs"] = t.epochs
    args["label_smoothing_factor"] = t.label_smoothing
    args["logging_steps"] = t.log_interval
    args["save_steps"] = t.checkpoint_interval
    args["save_total_limit"] = t.keep_last
    args["seed"] = t.seed
    unmapped.append(
        f"training.eval_interval={t.eval_interval}: with an eval dataset, add "
        f"eval_strategy: steps and eval_steps: {t.eval_interval}"
    )
    if config.cudnn_benchmark:
        unmapped.append("config.cudnn_benchmark=true: torch.backends.cudnn.benchmark = True")
    if config.activation_checkpointing:  # gradient_checkpointing carries it, with a caveat
        unmapped = [line for line in unmapped if not line.startswith("config.activation_")]
        unmapped.append(
            "gradient_checkpointing: true calls model.gradient_checkpointing_enable() (a "
            "PreTrainedModel); for another module, enable its own and set it false"
        )
    unmapped.append(
        "the Trainer decays every weight but biases and norms (autotune: matrices only)"
    )
    usage = "TrainingArguments(output_dir=..., **yaml.safe_load(open(this_file)))"
    if nproc > 1:
        usage += f", launched as torchrun --nproc-per-node {nproc} your_script.py"
    return _yaml_exported("hf", preset, config, nproc, args, unmapped, usage=usage)


def to_lightning(preset: Preset, config: TrainConfig, nproc: int) -> Exported:
    """``lightning.Trainer`` arguments (``trainer``), plus the ``DataLoader``, ``AdamW``
    and ``torch.compile`` arguments a LightningModule uses."""
    t = preset.training
    cuda = preset.fingerprint.device_kind == "cuda"
    trainer: dict[str, Any] = {
        "accelerator": "gpu" if cuda else "cpu",
        "devices": nproc,
        "precision": _LIGHTNING_PRECISION[config.precision],
        "accumulate_grad_batches": config.grad_accum,
        "gradient_clip_val": t.grad_clip,
        "gradient_clip_algorithm": "norm",
        "max_steps": _steps(t.max_steps),
        "log_every_n_steps": t.log_interval,
        "benchmark": config.cudnn_benchmark,
    }
    if t.epochs is not None:
        trainer["max_epochs"] = t.epochs
    if nproc > 1:
        trainer["strategy"] = "ddp"
    data: dict[str, Any] = {
        "trainer": trainer,
        "dataloader": dataloader_kwargs(config),
        "optimizer": adamw_kwargs(preset),
        "compile": compile_kwargs(config),
        "float32_matmul_precision": "high" if config.precision == "tf32" else "highest",
    }
    unmapped = _common_unmapped(preset, config)
    unmapped.append(
        f"training: {t.schedule} schedule, {t.warmup_steps} warm-up steps, decay to "
        f"{t.min_lr_ratio} of the peak rate: return it from configure_optimizers"
    )
    usage = (
        'Trainer(**cfg["trainer"]); DataLoader(ds, **cfg["dataloader"]); '
        'AdamW(params, **cfg["optimizer"]); torch.compile(model, **cfg["compile"]) unless '
        'it is null; torch.set_float32_matmul_precision(cfg["float32_matmul_precision"])'
    )
    return _yaml_exported("lightning", preset, config, nproc, data, unmapped, usage=usage)


def to_accelerate(preset: Preset, config: TrainConfig, nproc: int) -> Exported:
    """An ``accelerate launch --config_file`` file; accumulation, DataLoader and optimizer
    arguments belong to the script (``Accelerator(...)``), listed as comments."""
    cuda = preset.fingerprint.device_kind == "cuda"
    if nproc == 1:
        distributed = "NO"
    else:
        distributed = "MULTI_GPU" if cuda else "MULTI_CPU"
    data: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed,
        "mixed_precision": _ACCELERATE_PRECISION[config.precision],
        "use_cpu": not cuda,
        "num_processes": nproc,
        "num_machines": 1,
        "machine_rank": 0,
        "downcast_bf16": "no",
        "debug": False,
    }
    compile_ = compile_kwargs(config)
    if compile_ is not None:
        data["dynamo_config"] = {
            "dynamo_backend": "INDUCTOR",
            "dynamo_mode": compile_["mode"] or "default",
        }
    unmapped = [
        f"gradient accumulation: Accelerator(gradient_accumulation_steps={config.grad_accum}) "
        "and `with accelerator.accumulate(model):` (a config file cannot carry it)",
        f"DataLoader arguments: {dataloader_kwargs(config)}",
        f"optimizer: torch.optim.AdamW(params, **{adamw_kwargs(preset)})",
    ]
    if preset.training.grad_clip is not None:
        unmapped.append(
            f"accelerator.clip_grad_norm_(model.parameters(), {preset.training.grad_clip}) "
            "when accelerator.sync_gradients"
        )
    if config.precision == "tf32":
        unmapped.append('precision tf32: torch.set_float32_matmul_precision("high")')
    if config.cudnn_benchmark:
        unmapped.append("config.cudnn_benchmark=true: torch.backends.cudnn.benchmark = True")
    unmapped += _common_unmapped(preset, config)
    usage = "accelerate launch --config_file this_file your_script.py"
    return _yaml_exported("accelerate", preset, config, nproc, data, unmapped, usage=usage)


def to_deepspeed(preset: Preset, config: TrainConfig, nproc: int) -> Exported:
    """A DeepSpeed config (JSON has no comments: what does not map is only listed)."""
    t = preset.training
    data: dict[str, Any] = {
        "train_batch_size": config.micro_batch * config.grad_accum * nproc,
        "train_micro_batch_size_per_gpu": config.micro_batch,
        "gradient_accumulation_steps": config.grad_accum,
        "gradient_clipping": 0.0 if t.grad_clip is None else t.grad_clip,
        "bf16": {"enabled": config.precision == "bf16"},
        # Dynamic loss scaling from 2**16, as torch's GradScaler (autotune's fp16 path).
        "fp16": {
            "enabled": config.precision == "fp16",
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 2000,
        },
        "zero_optimization": {"stage": 0},
        "steps_per_print": t.log_interval,
    }
    unmapped = [
        f"DataLoader arguments: {dataloader_kwargs(config)}",
        f"optimizer: torch.optim.AdamW(params, **{adamw_kwargs(preset)}), passed to "
        "deepspeed.initialize",
    ]
    compile_ = compile_kwargs(config)
    if compile_ is not None:
        unmapped.append(f"compile: model_engine.compile(compile_kwargs={compile_})")
    if config.precision == "tf32":
        unmapped.append('precision tf32: torch.set_float32_matmul_precision("high")')
    if config.cudnn_benchmark:
        unmapped.append("config.cudnn_benchmark=true: torch.backends.cudnn.benchmark = True")
    unmapped += _common_unmapped(preset, config)
    return Exported(format="deepspeed", text=_json(data), data=data, unmapped=_notes(unmapped))


def torchrun_command(preset: Preset, nproc: int, *, preset_ref: str) -> list[str]:
    """The words of the ``torchrun`` command that trains with the preset, unquoted
    (``UsageError`` for a ``preset_ref`` that is not one line of printable text)."""
    from autotune.models.registry import is_user_code

    problem = control_problem(preset_ref)
    if problem:
        raise UsageError(f"preset reference {preset_ref!r}: {problem}")
    words = ["torchrun", "--standalone", "--nproc-per-node", str(nproc), "-m", "autotune"]
    words += ["train", "--preset", preset_ref]
    if is_user_code(preset.model.name):
        words.append("--trust-model")
    return words


def to_torchrun(preset: Preset, config: TrainConfig, nproc: int, *, preset_ref: str) -> Exported:
    """The ``torchrun`` command that trains with the preset on ``nproc`` processes
    (``autotune train`` divides the accumulation by the world size itself): a bash script
    of comment lines and one command, each of its words quoted by ``shlex.quote``."""
    from autotune.models.registry import is_user_code

    words = torchrun_command(preset, nproc, preset_ref=preset_ref)
    comments = [
        _describe(preset, config, nproc),
        f"per process: micro-batch {config.micro_batch}, accumulation {config.grad_accum} "
        f"({config.micro_batch * config.grad_accum} samples per step per process)",
        *_parallel_comment(preset, nproc),
    ]
    if is_user_code(preset.model.name):
        comments.append(f"the model is user code ({preset.model.name}): read it before running")
    text = "#!/usr/bin/env bash\n" + _comments(comments) + shlex.join(words) + "\n"
    return Exported(format="torchrun", text=text, data=None, unmapped=())


def _parallel_comment(preset: Preset, nproc: int) -> list[str]:
    """What the torchrun command runs of the preset's DDP/FSDP settings."""
    par = preset.config.parallel
    if par is None:
        return []
    line = f"{par.label()} (the preset's parallel settings; autotune train applies them)"
    if nproc != par.nproc_per_node:
        line += f"; measured on {par.nproc_per_node} processes, not {nproc}"
    return [line]


_MAPPERS: dict[str, Callable[[Preset, TrainConfig, int], Exported]] = {
    "hf": to_hf,
    "lightning": to_lightning,
    "accelerate": to_accelerate,
    "deepspeed": to_deepspeed,
}
