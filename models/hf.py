"""Hugging Face architectures by name: ``--model hf:<model_type>`` (``hf:llama``,
``hf:gpt2``, ``hf:bert``) or ``hf:path/to/config.json``, built by transformers from a
config with random weights. Nothing is downloaded: no hub, no ``from_pretrained``, no code
but transformers' own (a preset of such a model is data, loaded with no ``--trust-model``).

The spec's ``args`` are the config's fields the user set (``--model-arg hidden_size=256``,
or a ``config.json``'s fields) plus the vocabulary size, which the batches and the
trainer's tokenizer read; ``head`` picks the model class when the architecture's default
is not wanted:

- ``causal-lm`` (``AutoModelForCausalLM``): task ``lm``, trained on text by ``autotune
  train``. The loss is the next-token cross-entropy of the model's logits against
  autotune's labels (already the next tokens): passed as the model's ``labels`` they would
  be shifted a second time. The math is transformers' own loss (float logits, mean over
  labels not ``-100``).
- ``masked-lm`` (``AutoModelForMaskedLM``, the default of encoders such as BERT): random
  tokens with 15% of positions hidden behind other random tokens; the loss is the model's
  own (its ``labels`` path). Task ``custom``: searched and benchmarked, not trained on text.
- ``sequence-classification``: random tokens and random labels; the model's own loss.
  Task ``custom`` as well.

The knobs are those the model class has: ``attn_implementation`` (``sdpa``, ``eager``,
``flash_attention_2`` where the flash-attn package is installed and the class supports
it), activation checkpointing through the model's own switch, and ``checkpoint_every``
where that switch takes ``every_n_layers``. FLOPs per sample follow the built-ins'
convention (``models/_common.py``): ``6 N T + 12 L d_attn T^2``, ``N`` counted on the
meta device (every non-embedding weight, the output projection when it is tied to the
input embedding; a mixture of experts counts every expert).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import HF_PREFIX, Batch, Knob, ModelSpec, count_parameters
from autotune.core.errors import ModelLoadError, describe_exception
from autotune.core.validator import did_you_mean

from ._common import IGNORE_INDEX, checkpoint_every_knob, lm_batch, lm_loss, transformer_flops

__all__ = [
    "HEADS",
    "HEAD_ARG",
    "HF_PREFIX",
    "MISSING_TRANSFORMERS",
    "build_recipe",
    "hf_model",
]

HEAD_ARG = "head"  # not a config field: which model class to build
HEADS = ("causal-lm", "masked-lm", "sequence-classification")
_AUTO_CLASS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
}
_MAPPING = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING",
}
# A config.json's class names, by the head each one is.
_HEAD_SUFFIXES = (
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForSequenceClassification", "sequence-classification"),
)
# The task's sample size, not the model's: the user's flags change it (--seq-len,
# --global-batch); capped by the config's max_position_embeddings.
DEFAULT_SEQ_LEN = 256
DEFAULT_GLOBAL_BATCH = 16
NO_LENGTH_LIMIT = 65_536  # a config with no max_position_embeddings (relative positions)
MASK_FRACTION = 0.15
MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few kB; no FIFO or device is read

MISSING_TRANSFORMERS = (
    "model {ref!r} is a Hugging Face architecture, which the transformers library builds, "
    "and transformers cannot be imported here ({why}). Install autotune's hf extra: pip "
    'install "autotune-train[hf]" (or pip install "transformers>=4.41"), then run again; nothing '
    "is downloaded at run time, the model is built from its config with random weights"
)
# Names a config could take that are autotune's to set, and what to do instead.
_RESERVED = {
    "attn_implementation": "it is a knob of the model: --knob attn_implementation=eager",
    "_attn_implementation": "it is a knob of the model: --knob attn_implementation=eager",
    "dtype": "the weights are built in fp32 and the precision is a knob of the search "
    "(--knob precision=bf16)",
    "torch_dtype": "the weights are built in fp32 and the precision is a knob of the search "
    "(--knob precision=bf16)",
    "use_cache": "autotune trains, so the KV cache is always off",
}
# What a config.json holds about the checkpoint it came with, not about the architecture.
_FILE_METADATA = frozenset(
    {"architectures", "auto_map", "dtype", "model_type", "torch_dtype", "transformers_version"}
)


def _transformers(ref: str = "hf:") -> Any:
    """The transformers module, imported with the hub offline; ``ModelLoadError`` (exit 2)
    saying which extra to install where it cannot be imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by huggingface_hub at import
    try:
        import transformers
    except ImportError as exc:
        raise ModelLoadError(MISSING_TRANSFORMERS.format(ref=ref, why=exc)) from None
    return transformers


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """transformers' warnings about a config the user chose (a tiny vocabulary that leaves
    GPT-2's bos id outside it), said again in every trial otherwise, silenced; errors stay."""
    logging = transformers.utils.logging
    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


# -- the reference ---------------------------------------------------------------------------


def hf_model(ref: str, args: Mapping[str, Any] | None = None) -> ModelSpec:
    """The spec ``ref`` names (``hf:<model_type>`` or ``hf:path/to/config.json``) with the
    config fields ``args`` set (``head`` picks the model class). ``ModelLoadError`` for an
    unknown architecture, a field its config does not have, a bad file, or transformers
    missing."""
    target = ref[len(HF_PREFIX) :]
    transformers = _transformers(ref)
    if target.endswith(".json") or "/" in target or os.sep in target:
        model_type, fields = _read_config_file(Path(target).expanduser(), ref)
    else:
        model_type, fields = target, {}
    _check_model_type(transformers, model_type, ref)
    given = dict(args or {})
    _check_names(transformers, model_type, given, also=fields)
    return hf_spec(model_type, {**fields, **given})


def _check_model_type(transformers: Any, model_type: str, ref: str) -> None:
    known = list(transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES)
    if model_type not in known:
        examples = ", ".join(f"hf:{t}" for t in ("gpt2", "llama", "qwen2", "bert", "roberta"))
        raise ModelLoadError(
            f"unknown Hugging Face architecture {model_type!r} (from {ref!r})"
            f"{did_you_mean(model_type, known)}: name a model_type transformers knows, "
            f"e.g. {examples}, or a config.json file (hf:path/to/config.json)"
        )


def _read_config_file(path: Path, ref: str) -> tuple[str, dict[str, Any]]:
    """The model type and the architecture's fields of a ``config.json`` (its checkpoint's
    metadata left out; its class name, where it gives one, as the ``head``)."""
    if not path.exists():
        raise ModelLoadError(f"config file {str(path)!r} does not exist (from {ref!r})")
    if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelLoadError(
            f"config file {str(path)!r} (from {ref!r}) is not a transformers config.json: "
            f"expected a regular JSON file of at most {MAX_CONFIG_BYTES // 2**20} MiB"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(
            f"cannot read {str(path)!r} as a transformers config.json: {describe_exception(exc)}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelLoadError(
            f'{str(path)!r} is no transformers config.json: it has no "model_type" (such as '
            '"llama"), which names the architecture'
        )
    fields = {k: v for k, v in data.items() if k not in _FILE_METADATA and not k.startswith("_")}
    fields.pop("use_cache", None)
    head = _head_of_classes(data.get("architectures"))
    if head is not None:
        fields[HEAD_ARG] = head
    return data["model_type"], fields


def _head_of_classes(classes: Any) -> str | None:
    if not isinstance(classes, list) or not classes or not isinstance(classes[0], str):
        return None
    for suffix, head in _HEAD_SUFFIXES:
        if classes[0].endswith(suffix):
            return head
    return None


def _check_names(
    transformers: Any, model_type: str, given: Mapping[str, Any], *, also: Mapping[str, Any]
) -> None:
    """Every name the user gave is a field of the architecture's config (transformers
    would keep a misspelt one as an attribute nobody reads)."""
    with _quiet(transformers):
        config = transformers.AutoConfig.for_model(model_type)
    known = {*config.to_dict(), *getattr(config, "attribute_map", {}), *also, HEAD_ARG}
    known = {name for name in known - set(_RESERVED) - _FILE_METADATA if not name.startswith("_")}
    reserved = [f"{name}: {_RESERVED[name]}" for name in given if name in _RESERVED]
    unknown = [name for name in given if name not in known and name not in _RESERVED]
    problems = reserved + [
        f"{name}: not a field of the {model_type!r} config{did_you_mean(name, sorted(known))}"
        for name in unknown
    ]
    if problems:
        fields = f" (the fields of {type(config).__name__}: {', '.join(sorted(known))})"
        raise ModelLoadError(f"model hf:{model_type}: " + "; ".join(problems) + (
            fields if unknown else ""
        ))  # fmt: skip


def build_recipe(name: str, args: Mapping[str, Any], knobs: Mapping[str, Any] | None = None) -> str:
    """How a script of the user's builds the model a preset names (``hf:llama``, its
    ``model.args`` and its ``config.knobs``), in transformers' words: for an export's
    notes. It reads data only; transformers, where installed, names the default head."""
    model_type = name[len(HF_PREFIX) :]
    fields = {k: v for k, v in args.items() if k != HEAD_ARG}
    head = args.get(HEAD_ARG)
    if head is None:
        try:
            head = _head(_transformers(name), model_type, None)
        except ModelLoadError:
            head = None
    auto = _AUTO_CLASS.get(str(head), "AutoModelForCausalLM (or the head you searched)")
    attn = (knobs or {}).get("attn_implementation")
    attn_arg = f", attn_implementation={attn!r}" if isinstance(attn, str) else ""
    return (
        f"model {name!r}: build it in your script with transformers, "
        f"{auto}.from_config(AutoConfig.for_model({model_type!r}, **{fields!r}){attn_arg}) "
        "(random weights; from_pretrained for a checkpoint of that architecture)"
    )


# -- the spec --------------------------------------------------------------------------------


def hf_spec(model_type: str, args: Mapping[str, Any]) -> ModelSpec:
    """The spec of ``model_type`` with the config fields ``args`` (and ``head``)."""
    transformers = _transformers(f"hf:{model_type}")
    fields = dict(args)
    head = _head(transformers, model_type, fields.pop(HEAD_ARG, None))
    reserved = sorted(set(fields) & set(_RESERVED))
    if reserved:
        raise ModelLoadError(
            f"model hf:{model_type}: " + "; ".join(f"{n}: {_RESERVED[n]}" for n in reserved)
        )
    config = _config(transformers, model_type, fields)
    model_class = _model_class(transformers, config, head, model_type)
    vocab_size = getattr(config, "vocab_size", None)
    if not isinstance(vocab_size, int):
        raise ModelLoadError(f"model hf:{model_type}: its config has no integer vocab_size")
    max_len = getattr(config, "max_position_embeddings", None)
    max_len = max_len if isinstance(max_len, int) and max_len > 0 else NO_LENGTH_LIMIT
    spec_args = {"vocab_size": vocab_size, **args}
    return ModelSpec(
        name=f"hf:{model_type}",
        description=_description(model_class, config, head),
        task="lm" if head == "causal-lm" else "custom",
        family="hf",
        build_fn=functools.partial(_build, model_type),
        make_batch_fn=_batch_fn(head, config, model_type),
        loss_fn=_causal_loss if head == "causal-lm" else _labels_loss,
        flops_fn=functools.partial(_flops, model_type),
        args=spec_args,
        seq_len=min(DEFAULT_SEQ_LEN, max_len),
        max_seq_len=max_len,
        global_batch=DEFAULT_GLOBAL_BATCH,
        supports_checkpointing=bool(getattr(model_class, "supports_gradient_checkpointing", 0)),
        knobs=_knobs(model_class, config),
        throughput_unit="tokens",
        source=f"hf:{model_type}",
        extras={
            "with_args": functools.partial(_with_args, model_type),
            # the study's name tells one size of an architecture from another
            "fingerprint": _digest(spec_args),
            "hf": {"model_type": model_type, "head": head, "class": model_class.__name__},
        },
    )


def _with_args(model_type: str, spec: ModelSpec, args: Mapping[str, Any]) -> ModelSpec:
    """``spec.with_args``: the spec made again from the new fields (its length limit, head
    and knobs follow the config), keeping where it comes from and its task's batch."""
    remade = hf_spec(model_type, args)
    return dataclasses.replace(
        remade,
        source=spec.source or remade.source,
        global_batch=spec.global_batch,
        seq_len=min(spec.seq_len, remade.max_seq_len),
    )


def _digest(args: Mapping[str, Any]) -> str:
    text = json.dumps(args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _head(transformers: Any, model_type: str, head: Any) -> str:
    """The head asked for, or the architecture's own: masked LM where transformers has a
    ``...ForMaskedLM`` class for it (encoders such as BERT), else causal LM, else sequence
    classification."""
    if head is not None:
        if head not in HEADS:
            raise ModelLoadError(
                f"model hf:{model_type}: head must be one of {', '.join(HEADS)}, got {head!r}"
            )
        return str(head)
    names = transformers.models.auto.modeling_auto
    masked = names.MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(model_type)
    if isinstance(masked, str) and masked.endswith("ForMaskedLM"):
        return "masked-lm"
    for candidate in HEADS:
        if model_type in getattr(names, _MAPPING[candidate] + "_NAMES"):
            return candidate
    raise ModelLoadError(
        f"transformers has no causal-LM, masked-LM or sequence-classification model for "
        f"{model_type!r}, the heads autotune can train"
    )


def _config(transformers: Any, model_type: str, fields: Mapping[str, Any]) -> Any:
    try:
        with _quiet(transformers):
            return transformers.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:
        raise ModelLoadError(
            f"transformers cannot make a {model_type!r} config with {dict(fields)}: "
            f"{type(exc).__name__}: {_one_line(exc)}"
        ) from None


def _one_line(exc: BaseException, limit: int = 400) -> str:
    """The whole of an exception's message on one line (transformers' validators say what
    is wrong on its second line)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _model_class(transformers: Any, config: Any, head: str, model_type: str) -> type[nn.Module]:
    mapping = getattr(transformers.models.auto.modeling_auto, _MAPPING[head])
    try:
        model_class: type[nn.Module] = mapping[type(config)]
    except KeyError:
        have = [h for h in HEADS if type(config) in getattr(
            transformers.models.auto.modeling_auto, _MAPPING[h]
        )]  # fmt: skip
        raise ModelLoadError(
            f"transformers has no {head} model for {model_type!r} (it has: "
            f"{', '.join(have) or 'none of the heads autotune trains'}); choose one with "
            f"--model-arg {HEAD_ARG}=NAME"
        ) from None
    return model_class


def _description(model_class: type[nn.Module], config: Any, head: str) -> str:
    sizes = [
        f"{label} {value}"
        for label, name in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"))
        if isinstance(value := getattr(config, name, None), int)
    ]
    sizes.append(f"vocab {config.vocab_size}")
    return f"transformers {model_class.__name__} ({head}), {', '.join(sizes)}, random weights"


def _knobs(model_class: type[nn.Module], config: Any) -> tuple[Knob, ...]:
    """The model class's own knobs: its attention implementations, and selective
    checkpointing where its checkpointing switch takes ``every_n_layers``."""
    knobs = []
    impls = ["eager"]
    if getattr(model_class, "_supports_sdpa", False):
        impls.insert(0, "sdpa")
    flash = getattr(model_class, "_supports_flash_attn", False) or getattr(
        model_class, "_supports_flash_attn_2", False
    )
    if flash and importlib.util.find_spec("flash_attn") is not None:
        impls.append("flash_attention_2")
    if len(impls) > 1:
        knobs.append(
            Knob(
                name="attn_implementation",
                values=tuple(impls),
                default=impls[0],
                help="the model's attention kernel (transformers' attn_implementation): "
                "torch's fused SDPA, the eager matmul-softmax-matmul, or flash-attn 2 "
                "(CUDA 8.0+, bf16/fp16 only)",
                needs_cuda=(("flash_attention_2", (8, 0)),) if "flash_attention_2" in impls else (),
            )
        )
    enable = _checkpointing_switch(model_class)
    layers = getattr(config, "num_hidden_layers", None)
    if (
        enable is not None
        and "every_n_layers" in inspect.signature(enable).parameters
        and isinstance(layers, int)
        and layers > 1
    ):
        knobs.append(checkpoint_every_knob(layers))
    return tuple(knobs)


def _checkpointing_switch(model: Any) -> Any:
    """The model's own checkpointing switch: ``activation_checkpointing_enable`` (newer
    transformers) or ``gradient_checkpointing_enable``; None where it has neither."""
    for name in ("activation_checkpointing_enable", "gradient_checkpointing_enable"):
        switch = getattr(model, name, None)
        if switch is not None:
            return switch
    return None


# -- build, batches, loss --------------------------------------------------------------------


def _build(
    model_type: str,
    *,
    head: str | None = None,
    activation_checkpointing: bool = False,
    attn_implementation: str | None = None,
    checkpoint_every: int = 1,
    **fields: Any,
) -> nn.Module:
    """The model, random weights in fp32, with no KV cache (it trains)."""
    transformers = _transformers(f"hf:{model_type}")
    head = _head(transformers, model_type, head)
    config = _config(transformers, model_type, {**fields, "use_cache": False})
    auto = getattr(transformers, _AUTO_CLASS[head])
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    with _quiet(transformers):
        model: nn.Module = auto.from_config(config, **kwargs)
    if activation_checkpointing:
        switch = _checkpointing_switch(model)
        every = {"every_n_layers": checkpoint_every} if checkpoint_every != 1 else {}
        switch({"use_reentrant": False}, **every)  # the recommended, non-reentrant kind
    return model


def _batch_fn(head: str, config: Any, model_type: str) -> Any:
    if head == "causal-lm":
        return lm_batch
    if head == "masked-lm":
        return _masked_batch
    num_labels = int(getattr(config, "num_labels", 2))
    if getattr(config, "pad_token_id", None) is None:
        raise ModelLoadError(
            f"model hf:{model_type} (sequence classification): its config has no "
            "pad_token_id, which the classification head needs to find each sample's last "
            "token in a batch of more than one: give one, e.g. --model-arg pad_token_id=0"
        )
    return functools.partial(_classification_batch, num_labels)


def _masked_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> Batch:
    """Random tokens, 15% of them hidden behind other random tokens and to be predicted
    (at least one per sample); ``labels`` are ``-100`` elsewhere."""
    vocab = int(args["vocab_size"])
    tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)  # (B, T)
    hidden = torch.rand((batch_size, seq_len), generator=generator) < MASK_FRACTION
    hidden[:, 0] |= ~hidden.any(dim=1)
    shown = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
    return {
        "input_ids": torch.where(hidden, shown, tokens),
        "labels": torch.where(hidden, tokens, torch.full_like(tokens, IGNORE_INDEX)),
    }


def _classification_batch(
    num_labels: int,
    args: Mapping[str, Any],
    batch_size: int,
    seq_len: int,
    generator: torch.Generator,
) -> Batch:
    """Random tokens and a random class per sample (a score for ``num_labels=1``)."""
    tokens = torch.randint(0, int(args["vocab_size"]), (batch_size, seq_len), generator=generator)
    if num_labels == 1:  # transformers' regression
        return {"input_ids": tokens, "labels": torch.randn(batch_size, generator=generator)}
    return {
        "input_ids": tokens,
        "labels": torch.randint(0, num_labels, (batch_size,), generator=generator),
    }


def _causal_loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    """Next-token cross-entropy of the logits: ``labels`` are already the next tokens."""
    logits = module(input_ids=batch["input_ids"]).logits  # (B, T, V)
    return lm_loss(logits, batch["labels"])


def _labels_loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    """The model's own loss, through its ``labels`` argument."""
    loss: torch.Tensor = module(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    return loss


# -- FLOPs -----------------------------------------------------------------------------------


def _flops(model_type: str, args: Mapping[str, Any], seq_len: int) -> float:
    """Training FLOPs of one sample of ``seq_len`` tokens (the module docstring)."""
    matmul_params, layers, d_attn = _shape(model_type, json.dumps(dict(args), sort_keys=True))
    return transformer_flops(
        matmul_params=matmul_params, n_layers=layers, d_attn=d_attn, seq_len=seq_len
    )


@functools.lru_cache(maxsize=32)
def _shape(model_type: str, args_json: str) -> tuple[int, int, int]:
    """(matmul parameters, layers, summed head width) of the model built on the meta device."""
    with torch.device("meta"):
        module = _build(model_type, **json.loads(args_json))
    matmul = count_parameters(module).non_embedding
    out, inputs = _embeddings(module)
    if out is not None and inputs is not None and out.weight is inputs.weight:
        matmul += out.weight.numel()  # the tied output projection is a matmul per token
    config: Any = module.config
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    if not isinstance(layers, int) or not isinstance(heads, int):
        return matmul, 0, 0  # no attention the formula knows: 6 N T alone
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return matmul, layers, heads * int(head_dim)


def _embeddings(module: nn.Module) -> tuple[Any, Any]:
    """The model's output and input embeddings (None where it has none)."""
    found = []
    for name in ("get_output_embeddings", "get_input_embeddings"):
        try:
            found.append(getattr(module, name)())
        except (AttributeError, NotImplementedError):
            found.append(None)
    return found[0], found[1]
