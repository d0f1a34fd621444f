"""GPT: a decoder-only LM, nanoGPT-style, with a fused QKV projection and a SwiGLU MLP.

Pre-norm (RMSNorm) blocks, learned positions, the output projection tied to the token
embedding, ``F.scaled_dot_product_attention(is_causal=True)`` (flash or memory-efficient
kernels where the device has them), optional label smoothing in the loss, and generation
with top-p sampling under ``torch.inference_mode`` with the context cropped to
``max_seq_len`` (``extras["generate"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._common import (
    RMSNorm,
    SwiGLU,
    generate,
    init_weights,
    lm_batch,
    lm_loss,
    lm_metric,
    meta_param_counts,
    run_layers,
    swiglu_hidden,
    transformer_flops,
)
from .registry import register
from .spec import Batch, ModelSpec

__all__ = ["GPT", "Block", "CausalSelfAttention", "gpt_spec"]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # fused Q, K, V
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))  # (B,nh,T,hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_hidden: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.norm2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
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
        label_smoothing: float = 0.0,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing=}")
        self.max_seq_len = max_seq_len
        self.label_smoothing = label_smoothing
        self.activation_checkpointing = activation_checkpointing
        hidden = mlp_hidden or swiglu_hidden(d_model)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, hidden) for _ in range(n_layers))
        self.norm_f = RMSNorm(d_model)
        init_weights(self)
        residual_std = 0.02 / (2 * n_layers) ** 0.5  # GPT-2's scaled residual projections
        for m in self.modules():
            if isinstance(m, CausalSelfAttention):
                nn.init.normal_(m.proj.weight, std=residual_std)
            elif isinstance(m, SwiGLU):
                nn.init.normal_(m.down.weight, std=residual_std)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len {self.max_seq_len}")
        pos = torch.arange(seq_len, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)  # (B, T, C)
        x = run_layers(self.blocks, x, checkpointing=self.activation_checkpointing)
        logits = F.linear(self.norm_f(x), self.tok_emb.weight)  # (B, T, V), tied
        if labels is None:
            return logits
        return lm_loss(logits, labels, label_smoothing=self.label_smoothing)


def _loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    return module(batch["input_ids"], labels=batch["labels"])


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
        loss_fn=_loss,
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
