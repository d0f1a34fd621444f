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

Which key each knob is in a format, and what to do where a format has none, come from the
knob registry (``export_names``, each entry's ``export_hint``): the mappers name no knob,
so a knob added to the registry is exported, or listed as not mapped, with no code here.
The DataLoader arguments come from ``autotune.data.loader.loader_kwargs`` and the per-process
accumulation from ``autotune.engine.distributed.per_rank_config``, the rules the burst and the
trainer use, so an export says what was measured.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.config.knobs import describe_value, export_names, registry
from autotune.core.errors import UsageError
from autotune.core.text import control_problem, one_line
from autotune.core.validator import PROCESSES, show

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.preset.sections import Preset

__all__ = [
    "EXPORT_FORMATS",
    "Exported",
    "adamw_kwargs",
    "dataloader_kwargs",
    "export_preset",
    "torchrun_command",
]

EXPORT_FORMATS = ("json", "yaml", "hf", "lightning", "accelerate", "deepspeed", "torchrun")

# Which knob maps to which key of each format is the knob registry's (``export_names``):
# a dotted name is a nested key, ``a / b`` one boolean key per value (true for the value the
# config holds). What follows are value translations only: a value in another trainer's words.
_LIGHTNING_PRECISION = {
    "fp32": "32-true",
    "tf32": "32-true",
    "bf16": "bf16-mixed",
    "fp16": "16-mixed",
}
_ACCELERATE_PRECISION = {"fp32": "no", "tf32": "no", "bf16": "bf16", "fp16": "fp16"}
_SETS_NO_FLAGS = ("accelerate", "deepspeed")  # formats that set no torch flag: notes say them

# autotune's AdamW (autotune.engine.step.make_optimizer): these betas, decay on matrices only.
ADAM_BETAS = (0.9, 0.95)


def _compile_mode(mode: str) -> str | None:
    """``torch.compile``'s ``mode`` for a compile knob that is on (None: its default)."""
    return None if mode == "default" else mode


def _hf_compile(mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {"torch_compile": mode != "off"}
    if mode not in ("off", "default"):
        out["torch_compile_mode"] = mode
    return out


def _lightning_precision(precision: str) -> dict[str, Any]:
    matmul = "high" if precision == "tf32" else "highest"
    return {
        "trainer.precision": _LIGHTNING_PRECISION[precision],
        "float32_matmul_precision": matmul,
    }


def _dynamo(mode: str) -> dict[str, Any]:
    if mode == "off":
        return {}
    return {"dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": mode}}


# (format, the registry's export name) -> the keys a value sets there.
_TRANSLATIONS: dict[tuple[str, str], Callable[[Any], dict[str, Any]]] = {
    ("hf", "torch_compile"): _hf_compile,
    ("hf", "optim"): lambda fused: {"optim": "adamw_torch_fused" if fused else "adamw_torch"},
    ("lightning", "trainer.precision"): _lightning_precision,
    ("lightning", "compile.mode"): lambda mode: {
        "compile": None if mode == "off" else {"mode": _compile_mode(mode)}
    },
    ("lightning", "optimizer.fused"): lambda fused: {"optimizer.fused": True} if fused else {},
    ("accelerate", "mixed_precision"): lambda p: {"mixed_precision": _ACCELERATE_PRECISION[p]},
    ("accelerate", "dynamo_config.dynamo_mode"): _dynamo,
    # accelerate's torchao float8 recipe (AORecipeKwargs): the rest of the step under bf16
    # autocast, and it keeps the first linear layer in bf16 as well as the last.
    ("accelerate", "fp8_config.backend"): lambda on: (
        {"mixed_precision": "fp8", "fp8_config.backend": "AO"} if on else {}
    ),
}


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
    if nproc is not None and format in ("json", "yaml"):
        raise UsageError(
            f"nproc: the {format} format writes the preset as it is, for the processes its "
            "config.parallel names; give nproc with hf, lightning, accelerate, deepspeed or "
            "torchrun"
        )
    if nproc is None:
        nproc = preset.config.parallel.nproc_per_node if preset.config.parallel else 1
    if (wanted := PROCESSES.wanted(nproc)) is not None:
        raise UsageError(f"nproc: expected {wanted}, got {show(nproc)}")
    if format in ("json", "yaml"):  # the preset as it is: its own processes, if any
        return _plain(preset, format)
    from autotune.engine.distributed import per_rank_config

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
    for k in registry(type(preset.config)):  # the knobs that are AdamW's arguments
        value = getattr(preset.config, k.name)
        if k.optimizer_arg is not None and value != k.default:
            kwargs[k.optimizer_arg] = value
    return kwargs


def _describe(preset: Preset, config: TrainConfig, nproc: int) -> str:
    world = f" x {nproc} processes" if nproc > 1 else ""
    return (
        f"autotune preset {preset.name!r} (model {preset.model.name}, measured on "
        f"{preset.fingerprint.device_name}): global batch {preset.config.global_batch} = "
        f"micro-batch {config.micro_batch} x accumulation {config.grad_accum}{world}"
    )


def _knob_values(config: TrainConfig) -> dict[str, Any]:
    """Each knob's value as the run applies it: a DataLoader knob as ``loader_kwargs``
    passes it (left out where the DataLoader is not given it)."""
    loader = dataloader_kwargs(config)
    out: dict[str, Any] = {}
    for k in registry(type(config)):
        if k.loader_arg is None:
            out[k.name] = getattr(config, k.name)
        elif k.loader_arg in loader:
            out[k.name] = loader[k.loader_arg]
    return out


def _loader_extras(config: TrainConfig) -> dict[str, Any]:
    """The DataLoader arguments no knob is (``drop_last``)."""
    knob_args = {k.loader_arg for k in registry(type(config))}
    return {key: v for key, v in dataloader_kwargs(config).items() if key not in knob_args}


def _put(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``data[a][b] = value`` for ``dotted`` ``a.b`` (a missing or null section made)."""
    *sections, last = dotted.split(".")
    for name in sections:
        if not isinstance(data.get(name), dict):
            data[name] = {}
        data = data[name]
    data[last] = value


def _mapped(framework: str, config: TrainConfig, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each knob ``framework`` carries put under its registry name."""
    values = _knob_values(config)
    for name, key in export_names(framework, type(config)).items():
        if key is None or name not in values:
            continue
        value = values[name]
        if (framework, key) in _TRANSLATIONS:
            items = _TRANSLATIONS[framework, key](value)
        elif " / " in key:  # one boolean key per value
            items = {part: value == part.split(".")[0] for part in key.split(" / ")}
        else:
            items = {key: value}
        for dotted, item in items.items():
            _put(data, dotted, item)
    return data


def _shown(value: Any) -> str:
    label = getattr(value, "label", None)
    return label() if callable(label) else describe_value(value)


def _knob_notes(framework: str, config: TrainConfig, *, covered: bool = False) -> list[str]:
    """A line for each knob off its default that ``framework`` cannot carry (the entry's
    hint says what to do instead), and for each torch flag a format that sets none would
    need. ``covered``: the DataLoader and optimizer knobs are listed by other lines."""
    names = export_names(framework, type(config))
    lines: list[str] = []
    for k in registry(type(config)):
        value = getattr(config, k.name)
        if names[k.name] is not None:
            flags = [f.statement() for f in k.backend if f.setting(value) != f.off]
            if framework in _SETS_NO_FLAGS and flags:
                lines.append(f"config.{k.name}={_shown(value)}: {'; '.join(flags)}")
            continue
        hint = k.hint()
        skip = covered and (k.loader_arg is not None or k.optimizer_arg is not None)
        if hint is None or skip or value == k.default:
            continue
        if isinstance(value, Mapping):
            lines += [f"config.{k.name}.{n}={v!r}: {hint}" for n, v in value.items()]
        else:
            lines.append(f"config.{k.name}={_shown(value)}: {hint}")
    return lines


def _common_unmapped(
    framework: str, preset: Preset, config: TrainConfig, *, covered: bool = False
) -> list[str]:
    """What ``framework``'s settings do not carry: the model, the data's length, the
    knobs it has no name for (the registry's), the budget."""
    lines = [
        _model_line(preset),
        f"task.seq_len={preset.task.seq_len}: the searched sample size "
        f"({preset.task.size_label()}); make your data this size (tokenize/pack/crop)",
        *_knob_notes(framework, config, covered=covered),
    ]
    if preset.budget_bytes is not None:
        from autotune.core.units import format_bytes

        lines.append(
            f"budget_bytes={preset.budget_bytes}: measured under a memory budget of "
            f"{format_bytes(preset.budget_bytes)}; no trainer enforces it"
        )
    return lines


def _model_line(preset: Preset) -> str:
    """What the export says of the model: a Hugging Face architecture in transformers'
    words (``models/hf.py``), any other by its reference and args."""
    from autotune.models.registry import HF_PREFIX

    name, args = preset.model.name, dict(preset.model.args)
    if name.startswith(HF_PREFIX):
        from autotune.models.hf import build_recipe

        return build_recipe(name, args, preset.config.knobs)
    return (
        f"model {name!r}"
        + (f" with args {args}" if args else "")
        + ": build it in your script (this file configures training, not the model)"
    )


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
    args = _mapped("hf", config, {})
    args["use_cpu"] = preset.fingerprint.device_kind == "cpu"  # as measured: on the CPU
    for key, value in _loader_extras(config).items():  # drop_last
        args[f"dataloader_{key}"] = value
    args["learning_rate"] = t.lr
    args["weight_decay"] = t.weight_decay
    args["adam_beta1"], args["adam_beta2"] = ADAM_BETAS
    args["max_grad_norm"] = 0.0 if t.grad_clip is None else t.grad_clip
    args["warmup_steps"] = t.warmup_steps
    unmapped = _common_unmapped("hf", preset, config)
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
    if args.get("gradient_checkpointing"):  # the Trainer's own call, with a caveat
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
        "gradient_clip_val": t.grad_clip,
        "gradient_clip_algorithm": "norm",
        "max_steps": _steps(t.max_steps),
        "log_every_n_steps": t.log_interval,
    }
    if t.epochs is not None:
        trainer["max_epochs"] = t.epochs
    if nproc > 1:
        trainer["strategy"] = "ddp"
    data: dict[str, Any] = {
        "trainer": trainer,
        "dataloader": {},
        "optimizer": adamw_kwargs(preset),
        "compile": None,
    }
    _mapped("lightning", config, data)
    data["dataloader"].update(_loader_extras(config))
    unmapped = _common_unmapped("lightning", preset, config)
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
        "use_cpu": not cuda,
        "num_processes": nproc,
        "num_machines": 1,
        "machine_rank": 0,
        "downcast_bf16": "no",
        "debug": False,
    }
    _mapped("accelerate", config, data)
    unmapped = [
        f"DataLoader arguments: {dataloader_kwargs(config)}",
        f"optimizer: torch.optim.AdamW(params, **{adamw_kwargs(preset)})",
    ]
    if preset.training.grad_clip is not None:
        unmapped.append(
            f"accelerator.clip_grad_norm_(model.parameters(), {preset.training.grad_clip}) "
            "when accelerator.sync_gradients"
        )
    unmapped += _common_unmapped("accelerate", preset, config, covered=True)
    usage = "accelerate launch --config_file this_file your_script.py"
    return _yaml_exported("accelerate", preset, config, nproc, data, unmapped, usage=usage)


def to_deepspeed(preset: Preset, config: TrainConfig, nproc: int) -> Exported:
    """A DeepSpeed config (JSON has no comments: what does not map is only listed)."""
    t = preset.training
    data: dict[str, Any] = {
        "train_batch_size": config.global_batch * nproc,
        "gradient_clipping": 0.0 if t.grad_clip is None else t.grad_clip,
        "bf16": {"enabled": False},
        # Dynamic loss scaling from 2**16, as torch's GradScaler (autotune's fp16 path).
        "fp16": {
            "enabled": False,
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 2000,
        },
        "zero_optimization": {"stage": 0},
        "steps_per_print": t.log_interval,
    }
    _mapped("deepspeed", config, data)
    unmapped = [
        f"DataLoader arguments: {dataloader_kwargs(config)}",
        f"optimizer: torch.optim.AdamW(params, **{adamw_kwargs(preset)}), passed to "
        "deepspeed.initialize",
    ]
    unmapped += _common_unmapped("deepspeed", preset, config, covered=True)
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
