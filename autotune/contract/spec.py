"""The models/ contract: everything the tuner and the trainer need to know about a model.

A ``ModelSpec`` is a typed, immutable description of one named model size. The tuner never
looks inside the module: it builds it, makes batches, computes the loss, and reads what
the spec says it supports. A user's model plugs in by providing a ``ModelSpec`` (or a
zero-argument callable returning one) through ``--model pkg.mod:attr`` or
``--model path/to/file.py:attr``.

Batches are ``dict[str, Tensor]`` whose tensors are all batch-first, so one sample is a
dict of rows and ``torch.utils.data.default_collate`` rebuilds a batch from samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from autotune.core.errors import AutotuneError, ModelLoadError, describe_exception
from autotune.core.units import throughput_label
from autotune.core.validator import SIZE

if TYPE_CHECKING:
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "HF_PREFIX",
    "Batch",
    "Knob",
    "ModelSpec",
    "ParamCounts",
    "builds_our_code",
    "check_built_arguments",
    "count_parameters",
    "data_parts",
    "is_user_code",
    "user_code",
]

Batch = dict[str, torch.Tensor]
# "custom": a model autotune searches (its own data_fn or synthetic batches) but whose
# data `autotune train` cannot read; train it with autotune.train.loop or an exported preset.
Task = Literal["lm", "seq2seq", "regression", "custom"]

# build_fn(**args, activation_checkpointing=bool) -> nn.Module
BuildFn = Callable[..., nn.Module]
# make_batch_fn(args, batch_size, seq_len, generator) -> Batch   (on CPU, seeded)
MakeBatchFn = Callable[[Mapping[str, Any], int, int, torch.Generator], Batch]
# loss_fn(module, batch) -> scalar tensor
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
# flops_fn(args, seq_len) -> training FLOPs (forward + backward) for one sample
FlopsFn = Callable[[Mapping[str, Any], int], float]
# tokens_fn(args, seq_len) -> tokens in one sample, where that is not just seq_len (seq2seq:
# source + target tokens)
TokensFn = Callable[[Mapping[str, Any], int], int]
# data_fn(args, seq_len) -> the real input pipeline: a Dataset of samples (dicts of
# tensors), or a DataLoader whose dataset and collate_fn are used. Bursts build their
# DataLoader over it with the config's arguments instead of using synthetic batches.
DataFn = Callable[[Mapping[str, Any], int], Any]

# What each of a spec's functions must do: the fix a failure's message offers.
_CONTRACTS = {
    "build_fn": "build_fn(**args) must return an nn.Module for the spec's args",
    "make_batch_fn": (
        "make_batch_fn(args, batch_size, seq_len, generator) must return a dict of "
        "batch-first tensors"
    ),
    "loss_fn": "loss_fn(module, batch) must return a scalar tensor",
    "flops_fn": "flops_fn(args, seq_len) must return one sample's training FLOPs",
    "tokens_fn": "tokens_fn(args, seq_len) must return the tokens in one sample",
    "data_fn": (
        "data_fn(args, seq_len) must return a Dataset of samples (dicts of tensors) or a "
        "DataLoader over one"
    ),
    "encode_example": (
        "encode_example(src_words, tgt_words, vocab, *, max_src, max_tgt, vocab_size) must "
        "return one sample's dict of tensors"
    ),
}


@dataclass(frozen=True, kw_only=True)
class Knob:
    """A math-preserving setting of the model's own (e.g. MU's ``block_group``)."""

    name: str
    values: tuple[Any, ...]
    default: Any
    help: str = ""
    # Searched only on a CUDA device; elsewhere it stays at its default and is no
    # dimension of the space (a config may still name a value the device runs).
    cuda_only: bool = False
    # Values that need a CUDA device of at least this compute capability, as
    # ``((value, (major, minor)), ...)``: refused elsewhere, never searched there.
    needs_cuda: tuple[tuple[Any, tuple[int, int]], ...] = ()
    # A TrainConfig knob this one matters only with (e.g. "activation_checkpointing"):
    # where that one is off, a search leaves this one out and a config may not set it.
    only_with: str | None = None
    # The search's refinement moves it after the micro-batch steps, not first among the
    # kernel choices: a knob worth more for memory than for speed (the chunked loss).
    refine_late: bool = False
    # The value a short search's quick start takes on a CPU with bf16 units, in bf16 and
    # without compile (``playbook.quick_start``), where it measured faster there than the
    # default; None: the default.
    quick_cpu: Any = None

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise ValueError(
                f"knob {self.name!r}: default {self.default!r} not in values {self.values!r}"
            )
        if self.quick_cpu is not None and self.quick_cpu not in self.values:
            raise ValueError(
                f"knob {self.name!r}: quick_cpu {self.quick_cpu!r} not in values {self.values!r}"
            )
        unknown = [value for value, _ in self.needs_cuda if value not in self.values]
        if unknown:
            raise ValueError(
                f"knob {self.name!r}: needs_cuda names {unknown}, not among its values"
            )

    def value_problem(self, value: Any, device: DeviceCaps, config: Any = None) -> str | None:
        """Why ``device`` cannot run this knob at ``value`` (None if it can): the one rule
        ``check_config`` and the search space both use. With ``config`` (a TrainConfig),
        also a value that does nothing there (``only_with``'s knob is off)."""
        if (
            config is not None
            and self.only_with is not None
            and value != self.default
            and not getattr(config, self.only_with)
        ):
            return (
                f"{self.name}={value} does nothing without {self.only_with}: turn that on, or "
                "leave this knob out"
            )
        need = dict(self.needs_cuda).get(value)
        if need is None:
            return None
        at_least = "{}.{}".format(*need)
        if device.kind != "cuda":
            return f"{self.name}={value} needs a CUDA device (compute capability {at_least}+)"
        have = device.compute_capability
        if have is not None and tuple(have) < need:
            return (
                f"{self.name}={value} needs compute capability {at_least} or newer and "
                f"{device.name} is {have[0]}.{have[1]}"
            )
        return None

    def searched_on(self, device: DeviceCaps) -> tuple[Any, ...]:
        """The values a search turns on ``device`` (empty: not a dimension there)."""
        if self.cuda_only and device.kind != "cuda":
            return ()
        return tuple(v for v in self.values if self.value_problem(v, device) is None)


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    total: int
    non_embedding: int
    trained: int = 0  # those that require a gradient (the optimizer holds state for them)


def count_parameters(module: nn.Module) -> ParamCounts:
    """Total parameters (shared ones once), those outside ``nn.Embedding`` layers, and
    those that require a gradient."""
    seen: set[int] = set()
    total = trained = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
            trained += p.numel() if p.requires_grad else 0
    embedding = 0
    seen_emb: set[int] = set()
    for m in module.modules():
        if isinstance(m, nn.Embedding) and id(m.weight) not in seen_emb:
            seen_emb.add(id(m.weight))
            embedding += m.weight.numel()
    return ParamCounts(total=total, non_embedding=total - embedding, trained=trained)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One named model size, and how to build, feed and measure it."""

    name: str
    description: str
    task: Task
    build_fn: BuildFn
    make_batch_fn: MakeBatchFn
    loss_fn: LossFn
    flops_fn: FlopsFn
    args: Mapping[str, Any]  # constructor arguments of this size
    seq_len: int  # default sequence length (for seq2seq: the source length)
    max_seq_len: int  # the longest sequence the built model accepts
    global_batch: int  # default global batch, in samples
    supports_checkpointing: bool = False
    knobs: tuple[Knob, ...] = ()
    throughput_unit: Literal["tokens", "samples"] = "tokens"
    family: str = ""
    # How to load this spec again in another process (a trial's subprocess): a built-in
    # name ("mu") or a user reference ("pkg.mod:attr", "path/to/file.py:attr"). Set by
    # the loader; args that differ from the reference's are carried separately.
    source: str = ""
    extras: Mapping[str, Any] = field(default_factory=dict)  # task-specific hooks
    # For "tokens" models whose sample is not seq_len tokens (None: seq_len tokens).
    tokens_fn: TokensFn | None = None
    # The real input pipeline bursts read (None: synthetic batches from make_batch_fn).
    # It matters where loading costs time (decoding images, reading files, augmenting):
    # DataLoader workers, pinning and prefetch only show their worth on real data.
    data_fn: DataFn | None = None
    # What seq_len means for this model, in output: "seq" (tokens), "image" (side in
    # pixels), "nodes", ... The config field stays seq_len.
    size_name: str = "seq"
    # The model is convolutional (images in NCHW): on CUDA the search turns
    # ``cudnn_benchmark`` and ``channels_last`` for it; no other model runs channels_last.
    convolutional: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not self.name:
            problems.append("name must not be empty")
        if self.seq_len <= 0 or self.seq_len > self.max_seq_len:
            problems.append(f"seq_len must be in [1, {self.max_seq_len}], got {self.seq_len}")
        if wanted := SIZE.wanted(self.global_batch):  # the bound of every batch
            problems.append(f"global_batch must be {wanted}, got {self.global_batch!r}")
        if not isinstance(self.size_name, str) or not self.size_name.isidentifier():
            problems.append(
                f"size_name must be a short name such as 'seq' or 'image', got {self.size_name!r}"
            )
        if problems:
            raise ValueError(f"invalid ModelSpec {self.name!r}: " + "; ".join(problems))

    # -- building ---------------------------------------------------------------------
    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        known = ", ".join(k.name for k in self.knobs) or "none"
        raise KeyError(f"model {self.name!r} has no knob {name!r} (its knobs: {known})")

    def build(
        self,
        *,
        activation_checkpointing: bool = False,
        knobs: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> nn.Module:
        """Build the module: this size's args, then ``overrides``, then ``knobs``."""
        if activation_checkpointing and not self.supports_checkpointing:
            raise ValueError(f"model {self.name!r} does not support activation checkpointing")
        knob_values = {k.name: k.default for k in self.knobs}
        for name, value in (knobs or {}).items():
            allowed = self.knob(name).values
            if value not in allowed:
                raise ValueError(f"knob {name!r} of {self.name!r}: {value!r} not in {allowed}")
            knob_values[name] = value
        kwargs = {**self.args, **overrides, **knob_values}
        if self.supports_checkpointing:
            kwargs["activation_checkpointing"] = activation_checkpointing
        return self.build_fn(**kwargs)

    def with_args(self, **args: Any) -> ModelSpec:
        """The same model with some constructor arguments changed (e.g. a tiny test size).

        A spec whose other fields follow from its args (a Hugging Face architecture: its
        length limit, knobs and head come from the config) makes itself again through its
        ``extras["with_args"](spec, args)``; a built-in model's ``max_seq_len`` arg is the
        spec's limit too (a user's may mean something else, such as a cache's size)."""
        merged = {**self.args, **args}
        remake = self.extras.get("with_args")
        if callable(remake):
            remade: ModelSpec = remake(self, merged)
            return remade
        longest = args.get("max_seq_len")
        ours = builds_our_code(self)  # a user's max_seq_len may mean something else
        if ours and "max_seq_len" in self.args and type(longest) is int and longest > 0:
            # the built model's limit is the spec's (a search of mu with max_seq_len=64 ran
            # every trial at its default 128, which the model refused), and so is the
            # default length where it no longer fits
            return dataclasses.replace(self, args=merged, max_seq_len=longest,
                                       seq_len=min(self.seq_len, longest))  # fmt: skip
        return dataclasses.replace(self, args=merged)

    # -- data and loss ----------------------------------------------------------------
    def make_batch(
        self,
        *,
        batch_size: int,
        seq_len: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ) -> Batch:
        """A synthetic batch of the right shapes and value ranges, made on CPU then moved."""
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        batch = self.make_batch_fn(self.args, batch_size, seq_len or self.seq_len, gen)
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"make_batch_fn of {self.name!r} returned a {type(batch).__name__}, "
                "not a dict of tensors"
            )
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"make_batch_fn of {self.name!r} returned a dict whose {key!r} is a "
                    f"{type(value).__name__}, not a tensor"
                )
        return {k: v.to(device) for k, v in batch.items()}

    def dataset(self, seq_len: int | None = None) -> tuple[Any, Callable[[list[Any]], Any] | None]:
        """The real pipeline's (dataset, collate_fn or None), from ``data_fn``; ``None``
        dataset where the spec has none (synthetic batches)."""
        if self.data_fn is None:
            return None, None
        return data_parts(self.data_fn(self.args, seq_len or self.seq_len), self.name)

    def size_label(self, seq_len: int | None = None) -> str:
        """``"seq 128"``, ``"image 64"``: this model's sample size as output shows it."""
        return f"{self.size_name} {seq_len or self.seq_len}"

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self.loss_fn(model, batch)

    # -- measuring --------------------------------------------------------------------
    def flops_per_sample(self, seq_len: int | None = None) -> float:
        """Training FLOPs (forward and backward) for one sample, for MFU."""
        return self.flops_fn(self.args, seq_len or self.seq_len)

    def tokens_per_sample(self, seq_len: int | None = None) -> int:
        """What one sample counts in the throughput unit (1 for samples/s models)."""
        if self.throughput_unit != "tokens":
            return 1
        length = seq_len or self.seq_len
        return self.tokens_fn(self.args, length) if self.tokens_fn is not None else length

    @property
    def throughput_label(self) -> str:
        """How this model's throughput reads: ``"tokens/s"`` or ``"samples/s"``."""
        return throughput_label(self.throughput_unit)

    def pick_throughput(
        self, tokens_per_s: float | None, samples_per_s: float | None
    ) -> float | None:
        """Of a pair of rates, the one this model is measured in."""
        return tokens_per_s if self.throughput_unit == "tokens" else samples_per_s

    def param_counts(self) -> ParamCounts:
        """Parameter counts, built on the meta device (no memory, no time)."""
        with torch.device("meta"):
            module = self.build()
        return count_parameters(module)


def data_parts(source: Any, name: str) -> tuple[Any, Callable[[list[Any]], Any] | None]:
    """(dataset, collate_fn or None) of what a ``data_fn`` returned: a Dataset (anything
    with ``__getitem__`` and ``__len__``), or a DataLoader whose dataset and collate_fn are
    used (its batch size and workers are the config's business, not its own)."""
    from torch.utils.data import DataLoader

    if isinstance(source, DataLoader):
        return source.dataset, source.collate_fn
    if not (hasattr(source, "__getitem__") and hasattr(source, "__len__")):
        raise TypeError(
            f"data_fn of {name!r} returned a {type(source).__name__}, not a Dataset (with "
            "__getitem__ and __len__) or a DataLoader"
        )
    return source, None


HF_PREFIX = "hf:"  # a Hugging Face architecture by name: hf:llama


def is_user_code(ref: str) -> bool:
    """Whether the model reference ``ref`` names user code (``pkg.mod:attr``,
    ``file.py:attr``) rather than a built-in model or a Hugging Face architecture
    (``hf:llama``: transformers' own code, built from a config, which is data). Neither
    of those reaches a file or a module outside autotune and transformers."""
    return ":" in ref and not ref.startswith(HF_PREFIX)


def builds_our_code(spec: ModelSpec) -> bool:
    """Whether ``spec`` is a built-in model (``mu``, the loader's source) or a Hugging Face
    architecture: code of ours or of transformers, built from arguments the user gives.
    A spec made in Python (``autotune.tune``) has no source and is the user's."""
    return bool(spec.source) and not is_user_code(spec.source)


def check_built_arguments(spec: ModelSpec) -> None:
    """A built-in or hf: model's arguments, built once on the meta device (no memory, no
    time): a size its code refuses fails here, in one paragraph, not in every burst (a
    search's n_layers=0 ran 108 trials to "no config ran successfully within the budget";
    bench blamed its burst, exit 1). Not a user's model: its build may need real tensors
    (an ``.item()``, a ``.to()``), which the bursts give it."""
    if builds_our_code(spec):
        with user_code(spec, "build_fn"):
            spec.param_counts()


@contextmanager
def user_code(spec: ModelSpec, function: str) -> Iterator[None]:
    """Run one of a model's own functions (``"build_fn"``, ``"make_batch_fn"``, ...):
    whatever it raises, ``sys.exit`` included, becomes a ``ModelLoadError`` (exit code 2)
    naming the model's file or module, the function, where it failed and what it must do.

    The one rule for a user model's failures outside a trial (``models show``, the
    trainer's set-up); a trial reports the same ``describe_exception`` line. Ctrl-C,
    autotune's own errors and running out of memory pass through unchanged.
    """
    try:
        yield
    except (KeyboardInterrupt, AutotuneError, MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except BaseException as exc:
        ref = spec.source or spec.name
        # our code refusing a value (not a device's or a library's failure in the same
        # set-up, such as a missing torchao): the arguments the user gave it are wrong
        refused = isinstance(exc, (ValueError, TypeError))
        if function == "build_fn" and refused and builds_our_code(spec):
            raise ModelLoadError(
                f"model {ref!r} refused its arguments: {describe_exception(exc)}; check the "
                "--model-arg values or the preset's model.args (autotune models show "
                f"{ref} lists its arguments)"
            ) from exc
        contract = _CONTRACTS.get(function, "")
        raise ModelLoadError(
            f"model {ref!r}: its {function} failed: "
            f"{describe_exception(exc)}; fix {function}" + (f" ({contract})" if contract else "")
        ) from exc
