"""Pieces the built-in models share: norm, MLP, checkpointed stacks, LM helpers, FLOPs.

FLOPs convention (for MFU): PaLM (Chowdhery et al. 2022), appendix B. Training FLOPs for
one sample of ``T`` tokens::

    6 * N * T  +  12 * L * d_attn * T**2

- ``N``: the parameters that take part in a matmul for every token: all non-embedding
  parameters, plus the output projection when it is tied to the input embedding (the
  embedding lookup costs nothing, the logits matmul does; nanoGPT counts it the same way).
- ``6``: 2 FLOPs per multiply-add, times 3 for forward + backward (the backward pass
  computes gradients of both activations and weights).
- ``12 * L * d_attn * T**2``: the attention scores ``Q K^T`` and ``softmax(.) V`` in each
  of ``L`` layers, where ``d_attn`` is the summed width of every head of every attention
  in one layer; counted over the full ``T x T`` square (the causal mask's unused half is
  not subtracted, as in PaLM).
- Recomputation under activation checkpointing is not counted: MFU measures useful work.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.contract.spec import Batch, Knob, ParamCounts, count_parameters

__all__ = [
    "ATTENTION_IMPLS",
    "ATTENTION_KNOB",
    "IGNORE_INDEX",
    "LOSS_IMPLS",
    "LOSS_KNOB",
    "SDPA_BACKENDS",
    "SDPA_BACKEND_KNOB",
    "CausalSelfAttention",
    "RMSNorm",
    "SwiGLU",
    "TiedCausalLM",
    "causal_attention",
    "check_attention",
    "checkpoint_every_knob",
    "check_layers",
    "check_sizes",
    "generate",
    "init_weights",
    "lm_batch",
    "lm_batch_loss",
    "lm_loss",
    "lm_metric",
    "meta_param_counts",
    "run_layers",
    "sdpa_backend_context",
    "transformer_flops",
    "unwrap",
]

IGNORE_INDEX = -100  # label value that the loss skips (torch's cross_entropy default)


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x.to(dtype) * self.weight


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with the gate and up projections fused."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.hidden, dim=-1)  # (..., hidden) each
        return self.down(F.silu(gate) * up)


ATTENTION_IMPLS = ("sdpa", "eager")
ATTENTION_KNOB = Knob(
    name="attention",
    values=ATTENTION_IMPLS,
    default="sdpa",
    help="attention kernel: fused SDPA, or eager matmul-softmax-matmul (same math; eager "
    "keeps the TxT map, and is faster for small heads in bf16 on some CPUs)",
    # bf16, no compile, 32x1 on the 2-core Xeon (AMX): mu ran 1.51x SDPA with eager, gpt-small
    # 1.01x (BENCHMARKS.md, "the quick start")
    quick_cpu="eager",
)


# Which kernel ``F.scaled_dot_product_attention`` may use: "auto" leaves the choice to
# torch; the others pin one through ``torch.nn.attention.sdpa_kernel``. The math kernel
# runs everywhere; flash and cuDNN need an Ampere GPU or newer, memory-efficient a CUDA one.
SDPA_BACKENDS = ("auto", "math", "flash", "efficient", "cudnn")
SDPA_BACKEND_KNOB = Knob(
    name="sdpa_backend",
    values=SDPA_BACKENDS,
    default="auto",
    help="the kernel of attention=sdpa (torch.nn.attention.sdpa_kernel): torch's own "
    "choice, or pinned to math, flash, memory-efficient or cuDNN; searched on CUDA only",
    cuda_only=True,
    needs_cuda=(("flash", (8, 0)), ("efficient", (5, 0)), ("cudnn", (8, 0))),
)


LOSS_IMPLS = ("full", "chunked")
LOSS_KNOB = Knob(
    name="loss",
    values=LOSS_IMPLS,
    default="full",
    help="the training loss: the whole (tokens x vocab) logits, or the projection and "
    "cross-entropy a chunk of tokens at a time (same math; holds one chunk's logits, "
    "which matters at a large vocabulary)",
    refine_late=True,  # compiled, it ran 0.91-0.94x the full loss (BENCHMARKS.md)
    # bf16, no compile, 32x1 on the 2-core Xeon (AMX): mu ran 1.18x, gpt-small 1.61x the full
    # loss (BENCHMARKS.md, "the quick start")
    quick_cpu="chunked",
)


def checkpoint_every_knob(n_layers: int) -> Knob:
    """Selective activation checkpointing: checkpoint the first of every k layers (1: all),
    for a stack of ``n_layers``; it matters only with activation checkpointing on."""
    return Knob(
        name="checkpoint_every",
        values=tuple(k for k in (1, 2, 4) if k <= max(n_layers, 1)),
        default=1,
        help="with activation checkpointing, checkpoint every k-th layer (1: all; "
        "larger: less recomputed, more memory held)",
        only_with="activation_checkpointing",
    )


def sdpa_backend_context(backend: str) -> contextlib.AbstractContextManager[Any]:
    """The context that pins SDPA to ``backend`` (nothing for ``"auto"``)."""
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend must be one of {SDPA_BACKENDS}, got {backend!r}")
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = {
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[backend]
    ctx: contextlib.AbstractContextManager[Any] = sdpa_kernel(kernel)
    return ctx


# The most layers a built-in model is built with (the deepest trained transformers have a
# few hundred).
MAX_LAYERS = 4096


def check_sizes(**sizes: int | None) -> None:
    """A ValueError naming the first of ``sizes`` (a model's layer count, widths, vocabulary)
    that is not a positive integer, or a layer count above ``MAX_LAYERS``; None passes (a
    size left to its default). A model of ``n_layers=-3`` built, trained and was written
    to a preset as the fastest config; one of ``n_layers=10**12`` built layers for hours."""
    for name, value in sizes.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if name.endswith("layers"):
            check_layers(name, value)


def check_layers(name: str, value: int, *, least: int = 1) -> None:
    """A ValueError where layer count ``name`` is not a whole number from ``least`` to
    ``MAX_LAYERS``: a deeper model is a typo, whose modules would take hours to build."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number of at least {least}, got {value!r}")
    if value > MAX_LAYERS:
        raise ValueError(
            f"{name} must be at most {MAX_LAYERS} (deeper than any trained model: a typo, "
            f"whose modules would take hours to build), got {value}"
        )


def check_attention(impl: str) -> str:
    """``impl`` if it names an attention kernel, else a ValueError naming the kernels."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {impl!r}")
    return impl


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, impl: str = "sdpa"
) -> torch.Tensor:
    """Causal ``softmax(q k^T / sqrt(hs)) v`` over (..., T, hs) tensors, by one of two kernels.

    - ``sdpa``: ``F.scaled_dot_product_attention``, the fused kernels (flash or
      memory-efficient) that never keep the (T, T) map where the device has them.
    - ``eager``: the three steps written out, two batched matmuls around a softmax, which
      keeps the (..., T, T) map for the backward pass.

    The math is the same. Which one is faster depends on the device, the precision and the
    head size (on a CPU, the fused kernel's bf16 backward is several times slower than two
    bf16 matmuls for 16- to 64-wide heads), so models expose it as a knob that a search
    measures rather than a choice made here.
    """
    if check_attention(impl) == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (..., T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
    return att @ v  # (..., T, hs)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with a fused QKV projection; ``attention`` picks the
    kernel (``causal_attention``)."""

    def __init__(self, d_model: int, n_heads: int, *, attention: str = "sdpa") -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.attention = check_attention(attention)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # fused Q, K, V
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))  # (B,nh,T,hs)
        y = causal_attention(q, k, v, impl=self.attention)  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def swiglu_hidden(dim: int, multiple_of: int = 64) -> int:
    """The usual SwiGLU width: 8/3 * dim rounded up, so 3 matrices cost what 2 of 4*dim do."""
    return multiple_of * math.ceil(8 * dim / 3 / multiple_of)


def run_layers(
    layers: Iterable[nn.Module],
    x: torch.Tensor,
    *extra: Any,
    checkpointing: bool,
    every: int = 1,
    sdpa_backend: str = "auto",
) -> torch.Tensor:
    """Run ``x = layer(x, *extra)`` through a stack, checkpointing layers if asked: every
    one, or with ``every=k`` the first of each ``k`` (selective checkpointing: the others
    keep their activations, so less is recomputed and more is held).

    Checkpointing only applies while gradients are being recorded (not under
    ``torch.no_grad`` / ``inference_mode``), and is non-reentrant as PyTorch recommends.
    A checkpointed layer is recomputed in the backward pass, outside the caller's
    ``sdpa_backend_context``: a pinned ``sdpa_backend`` is pinned inside it too, or the
    recompute picks another SDPA kernel, which saves other tensors, and checkpoint
    refuses the step (``CheckpointError``: a pinned math kernel on a CPU, cuDNN on a GPU).
    """
    use_ckpt = checkpointing and torch.is_grad_enabled()
    for i, layer in enumerate(layers):
        if use_ckpt and i % every == 0:
            run = layer if sdpa_backend == "auto" else _with_sdpa_backend(layer, sdpa_backend)
            x = checkpoint(run, x, *extra, use_reentrant=False)
        else:
            x = layer(x, *extra)
    return x


def _with_sdpa_backend(layer: nn.Module, backend: str) -> Callable[..., torch.Tensor]:
    """``layer`` run under ``sdpa_backend_context(backend)``, each time it is called."""

    def run(*args: Any) -> torch.Tensor:
        with sdpa_backend_context(backend):
            out: torch.Tensor = layer(*args)
        return out

    return run


class TiedCausalLM(nn.Module):
    """The frame MU and GPT share: token plus learned position embeddings, a stack of
    pre-norm layers (``self.layers``, set by the subclass), a final RMSNorm and the output
    projection tied to the token embedding. The layers run under ``sdpa_backend``'s
    kernel choice (``sdpa_backend_context``); with activation checkpointing, the first of
    every ``checkpoint_every`` layers is checkpointed (``run_layers``). ``loss="chunked"``
    computes the training loss without the whole logits (``chunked_linear_cross_entropy``).

    ``forward(input_ids)`` -> logits (B, T, V); with ``labels`` -> the mean LM loss.
    """

    layers: nn.ModuleList

    def __init__(
        self,
        *,
        vocab_size: int,
        d_model: int,
        max_seq_len: int,
        label_smoothing: float,
        activation_checkpointing: bool,
        sdpa_backend: str = "auto",
        checkpoint_every: int = 1,
        loss: str = "full",
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, d_model=d_model, max_seq_len=max_seq_len)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing=}")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
            raise ValueError(f"checkpoint_every must be an int, got {checkpoint_every!r}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        if loss not in LOSS_IMPLS:
            raise ValueError(f"loss must be one of {LOSS_IMPLS}, got {loss!r}")
        sdpa_backend_context(sdpa_backend)  # a bad name fails here, not in the first step
        self.sdpa_backend = sdpa_backend
        self.max_seq_len = max_seq_len
        self.label_smoothing = label_smoothing
        self.activation_checkpointing = activation_checkpointing
        self.checkpoint_every = checkpoint_every
        self.loss_impl = loss
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.norm_f = RMSNorm(d_model)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len {self.max_seq_len}")
        pos = torch.arange(seq_len, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)  # (B, T, C)
        with sdpa_backend_context(self.sdpa_backend):  # every layer's SDPA call
            x = run_layers(
                self.layers,
                x,
                checkpointing=self.activation_checkpointing,
                every=self.checkpoint_every,
                sdpa_backend=self.sdpa_backend,
            )
        x = self.norm_f(x)
        if labels is not None and self.loss_impl == "chunked":
            # imported here: its torch.compiler.disable imports torch._dynamo (1.7-2.6 s),
            # which a process that resolves a model but never runs it need not pay
            from ._chunked_loss import chunked_linear_cross_entropy

            return chunked_linear_cross_entropy(
                x,
                self.tok_emb.weight,
                labels,
                ignore_index=IGNORE_INDEX,
                label_smoothing=self.label_smoothing,
            )
        logits = F.linear(x, self.tok_emb.weight)  # (B, T, V), tied
        if labels is None:
            return logits
        return lm_loss(logits, labels, label_smoothing=self.label_smoothing)


def init_weights(module: nn.Module, *, std: float = 0.02) -> None:
    """GPT-2 style: normal(0, std) for linear and embedding weights, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=std)


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside ``torch.compile`` and DistributedDataParallel wrappers."""
    while True:
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            module = module.module
        elif isinstance(getattr(module, "_orig_mod", None), nn.Module):  # torch.compile
            module = module._orig_mod  # type: ignore[assignment]
        else:
            return module


def transformer_flops(*, matmul_params: int, n_layers: int, d_attn: int, seq_len: int) -> float:
    """Training FLOPs of one sample: ``6 N T + 12 L d_attn T^2`` (see the module docstring)."""
    return 6.0 * matmul_params * seq_len + 12.0 * n_layers * d_attn * seq_len**2


@functools.lru_cache(maxsize=64)
def _cached_counts(build_fn: Callable[..., nn.Module], frozen: tuple[Any, ...]) -> ParamCounts:
    return _counts(build_fn, dict(frozen))


def _counts(build_fn: Callable[..., nn.Module], args: Mapping[str, Any]) -> ParamCounts:
    with torch.device("meta"):
        module = build_fn(**args)
    return count_parameters(module)


def meta_param_counts(build_fn: Callable[..., nn.Module], args: Mapping[str, Any]) -> ParamCounts:
    """Parameter counts of ``build_fn(**args)``, built on the meta device (and cached)."""
    frozen = tuple(sorted(args.items()))
    try:
        hash(frozen)
    except TypeError:
        return _counts(build_fn, args)
    return _cached_counts(build_fn, frozen)


# -- language-model helpers (MU and GPT share them) ------------------------------------------


def lm_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> Batch:
    """Random tokens; ``labels`` are the next tokens (the LM batch contract)."""
    tokens = torch.randint(
        0, int(args["vocab_size"]), (batch_size, seq_len + 1), generator=generator
    )  # (B, T+1)
    return {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}


def lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, *, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean next-token cross-entropy over labels that are not ``IGNORE_INDEX``."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),  # (B*T, V)
        labels.flatten(),
        ignore_index=IGNORE_INDEX,
        label_smoothing=label_smoothing,
    )


def lm_batch_loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    """The LM spec's loss: ``module(input_ids, labels=labels)``."""
    loss: torch.Tensor = module(batch["input_ids"], labels=batch["labels"])
    return loss


def lm_metric(module: nn.Module, batch: Batch) -> dict[str, float]:
    """Eval metrics of an LM on one batch: plain (unsmoothed) loss, perplexity, accuracy."""
    model = unwrap(module)
    with torch.no_grad():
        logits = model(batch["input_ids"])  # (B, T, V)
        loss = float(lm_loss(logits, batch["labels"]).item())
        labels = batch["labels"]
        valid = labels != IGNORE_INDEX
        correct = (logits.argmax(-1) == labels) & valid
        accuracy = float(correct.sum().item()) / max(int(valid.sum().item()), 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "accuracy": accuracy}


def generate(
    module: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    top_p: float = 0.9,
    generator: torch.Generator | None = None,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Sample ``max_new_tokens`` after ``prompt`` (B, T) with nucleus (top-p) sampling.

    The model sees at most its ``max_seq_len`` last tokens (the context is cropped), runs
    under ``torch.inference_mode`` in eval mode, and is put back in its previous mode.
    Returns the prompt followed by the new tokens: (B, T + max_new_tokens).
    """
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p=}")
    if temperature <= 0.0:
        raise ValueError(f"temperature must be positive, got {temperature=}")
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(
            f"prompt must be a non-empty (B, T) tensor, got shape {tuple(prompt.shape)}"
        )
    model = unwrap(module)
    max_len = int(model.max_seq_len)  # type: ignore[arg-type]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            idx = prompt
            for _ in range(max_new_tokens):
                context = idx[:, -max_len:]  # (B, <= max_seq_len)
                logits = model(context)[:, -1, :].float() / temperature  # (B, V)
                next_ids = _sample_top_p(torch.softmax(logits, dim=-1), top_p, generator)
                idx = torch.cat([idx, next_ids.to(idx.device)], dim=1)  # (B, T+1)
    finally:
        model.train(was_training)
    return idx


def _sample_top_p(
    probs: torch.Tensor, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row from the smallest set of tokens whose mass reaches ``top_p``."""
    if generator is not None and generator.device != probs.device:
        probs = probs.to(generator.device)
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the tokens ranked above
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)  # the top token always stays
    choice = torch.multinomial(sorted_probs, 1, generator=generator)  # (B, 1)
    return order.gather(-1, choice)
