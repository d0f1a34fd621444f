"""GPT: a decoder-only LM, nanoGPT-style, with a fused QKV projection and a SwiGLU MLP.

Pre-norm (RMSNorm) blocks, learned positions, the output projection tied to the token
embedding, ``F.scaled_dot_product_attention(is_causal=True)`` (flash or memory-efficient
kernels where the device has them) or, with the knob ``attention=eager``, the same
attention written out (``causal_attention``: faster for small heads in bf16 on some CPUs),
optional label smoothing in the loss, and generation
with top-p sampling under ``torch.inference_mode`` with the context cropped to
``max_seq_len`` (``extras["generate"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import ModelSpec

from ._common import (
    ATTENTION_KNOB,
    LOSS_KNOB,
    SDPA_BACKEND_KNOB,
    CausalSelfAttention,
    RMSNorm,
    SwiGLU,
    TiedCausalLM,
    check_sizes,
    checkpoint_every_knob,
    generate,
    init_weights,
    lm_batch,
    lm_batch_loss,
    lm_metric,
    meta_param_counts,
    swiglu_hidden,
    transformer_flops,
)
from .registry import register

__all__ = ["GPT", "Block", "CausalSelfAttention", "gpt_spec"]


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_hidden: int, *, attention: str) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, attention=attention)
        self.norm2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(TiedCausalLM):
    """``forward(input_ids)`` -> logits (B, T, V); with ``labels`` -> the mean loss."""

    def __init__(
        self,
        *,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        max_seq_len: int,
        mlp_hidden: int | None = None,
        attention: str = "sdpa",
        sdpa_backend: str = "auto",
        label_smoothing: float = 0.0,
        activation_checkpointing: bool = False,
        checkpoint_every: int = 1,
        loss: str = "full",
    ) -> None:
        check_sizes(n_layers=n_layers, n_heads=n_heads, mlp_hidden=mlp_hidden)
        super().__init__(
            vocab_size=vocab_size,
            d_model=d_model,
            max_seq_len=max_seq_len,
            label_smoothing=label_smoothing,
            activation_checkpointing=activation_checkpointing,
            sdpa_backend=sdpa_backend,
            checkpoint_every=checkpoint_every,
            loss=loss,
        )
        hidden = mlp_hidden or swiglu_hidden(d_model)
        self.layers = nn.ModuleList(
            Block(d_model, n_heads, hidden, attention=attention) for _ in range(n_layers)
        )
        init_weights(self)
        residual_std = 0.02 / (2 * n_layers) ** 0.5  # GPT-2's scaled residual projections
        for m in self.modules():
            if isinstance(m, CausalSelfAttention):
                nn.init.normal_(m.proj.weight, std=residual_std)
            elif isinstance(m, SwiGLU):
                nn.init.normal_(m.down.weight, std=residual_std)


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    d_model = int(args["d_model"])
    head = int(args["vocab_size"]) * d_model  # the tied output projection
    n = meta_param_counts(GPT, args).non_embedding + head
    return transformer_flops(
        matmul_params=n, n_layers=int(args["n_layers"]), d_attn=d_model, seq_len=seq_len
    )


def gpt_spec(
    name: str,
    *,
    vocab_size: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    seq_len: int,
    max_seq_len: int,
    global_batch: int,
    description: str,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        description=description,
        task="lm",
        family="gpt",
        build_fn=GPT,
        make_batch_fn=lm_batch,
        loss_fn=lm_batch_loss,
        flops_fn=_flops,
        args={
            "vocab_size": vocab_size,
            "d_model": d_model,
            "n_layers": n_layers,
            "n_heads": n_heads,
            "max_seq_len": max_seq_len,
            "label_smoothing": 0.0,
        },
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        global_batch=global_batch,
        supports_checkpointing=True,
        knobs=(ATTENTION_KNOB, SDPA_BACKEND_KNOB, checkpoint_every_knob(n_layers), LOSS_KNOB),
        throughput_unit="tokens",
        extras={"metric": lm_metric, "generate": generate},
    )


register(
    "gpt-small",
    lambda: gpt_spec(
        "gpt-small",
        vocab_size=10_000,
        d_model=256,
        n_layers=2,
        n_heads=4,
        seq_len=256,
        max_seq_len=512,
        global_batch=32,
        description="GPT decoder, 256 dim, 2 layers, 10k vocab",
    ),
)
register(
    "gpt-large",
    lambda: gpt_spec(
        "gpt-large",
        vocab_size=50_000,
        d_model=512,
        n_layers=6,
        n_heads=8,
        seq_len=512,
        max_seq_len=1024,
        global_batch=32,
        description="GPT decoder, 512 dim, 6 layers, 50k vocab",
    ),
)
register(
    "gpt2-124m",
    lambda: gpt_spec(
        "gpt2-124m",
        vocab_size=50_304,
        d_model=768,
        n_layers=12,
        n_heads=12,
        seq_len=1024,
        max_seq_len=1024,
        global_batch=64,
        description="GPT-2 small shape (124M), 1024 context: the size for GPU MFU figures",
    ),
)
