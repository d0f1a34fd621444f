"""MU: a causal LM whose per-token hidden state is an 8x8 grid of cells in 16 named blocks.

Each token's hidden vector (``d_model = 64 * cell_dim``) is an 8x8 grid of cells of
``cell_dim`` features, partitioned into 16 semantic blocks of 2x2 cells::

    I  S  C1 C2        block k covers grid rows 2*(k // 4) .. +1
    R1 R2 T  K         and grid columns 2*(k % 4) .. +1
    G  M  D  F
    P  E  A  X

The vector is stored block-major (block k owns features ``k*4*cell_dim`` up to
``(k+1)*4*cell_dim``); ``to_grid`` shows it as the (8, 8, cell_dim) grid. Each layer, pre-norm:

1. learned, input-dependent sensitivity gates, one per block: ``sigmoid(W_g h)`` (B, T, 16);
2. 16 block-wise causal attentions: block k attends over the sequence inside its own
   subspace, with its own Q/K/V/O projections; its update is scaled by its gate;
3. one cross-block causal attention over the full width (information flows between
   blocks), whose update to each block is scaled by that block's gate;
4. a SwiGLU MLP.

That is 17 attentions per layer. The knob ``block_group`` (1, 2, 4, 8 or 16) sets how many
block attentions run at once: the blocks of a group go through one batched
attention call. Fewer at once keeps fewer attention maps alive (less
memory where the kernel materialises them) at the cost of more, smaller kernel launches;
the math is the same. The knob ``attention`` (``sdpa`` or ``eager``) picks the kernel of all
17 (``causal_attention`` in ``_common``): same math again, and which is faster depends on the
device and precision. Output projection tied to the token embedding; learned positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import Knob, ModelSpec

from ._common import (
    ATTENTION_KNOB,
    LOSS_KNOB,
    SDPA_BACKEND_KNOB,
    CausalSelfAttention,
    RMSNorm,
    SwiGLU,
    TiedCausalLM,
    causal_attention,
    check_attention,
    check_sizes,
    checkpoint_every_knob,
    generate,
    init_weights,
    lm_batch,
    lm_batch_loss,
    lm_metric,
    meta_param_counts,
    transformer_flops,
)
from .registry import register

__all__ = ["BLOCK_NAMES", "MU", "MULayer", "mu_spec", "to_grid"]

BLOCK_NAMES = ("I", "S", "C1", "C2", "R1", "R2", "T", "K", "G", "M", "D", "F", "P", "E", "A", "X")
N_BLOCKS = len(BLOCK_NAMES)  # 16 blocks of 2x2 cells on an 8x8 grid
CELLS_PER_BLOCK = 4
BLOCK_GROUPS = (1, 2, 4, 8, 16)


def to_grid(h: torch.Tensor, cell_dim: int) -> torch.Tensor:
    """A block-major hidden state (..., 64*cell_dim) as its grid (..., 8, 8, cell_dim)."""
    lead = h.shape[:-1]
    x = h.reshape(*lead, 4, 4, 2, 2, cell_dim)  # (..., block row, block col, r, c, cell)
    x = x.movedim(-3, -4)  # (..., block row, r, block col, c, cell)
    return x.reshape(*lead, 8, 8, cell_dim)


class BlockAttention(nn.Module):
    """16 causal single-head attentions, block k inside its own ``4*cell_dim`` subspace."""

    def __init__(self, block_dim: int, block_group: int, *, attention: str = "sdpa") -> None:
        super().__init__()
        if block_group not in BLOCK_GROUPS:
            raise ValueError(f"block_group must be one of {BLOCK_GROUPS}, got {block_group!r}")
        self.block_dim = block_dim
        self.block_group = block_group
        self.attention = check_attention(attention)
        self.qkv = nn.Parameter(torch.empty(N_BLOCKS, block_dim, 3 * block_dim))
        self.proj = nn.Parameter(torch.empty(N_BLOCKS, block_dim, block_dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, _ = h.shape
        xb = h.view(B, T, N_BLOCKS, self.block_dim)  # (B, T, 16, bd)
        outs = []
        for start in range(0, N_BLOCKS, self.block_group):
            stop = start + self.block_group
            xs = xb[:, :, start:stop]  # (B, T, g, bd)
            qkv = torch.einsum("btgi,gio->bgto", xs, self.qkv[start:stop])  # (B, g, T, 3bd)
            q, k, v = qkv.split(self.block_dim, dim=-1)  # (B, g, T, bd) each
            y = causal_attention(q, k, v, impl=self.attention)  # (B, g, T, bd)
            outs.append(torch.einsum("bgti,gio->btgo", y, self.proj[start:stop]))  # (B,T,g,bd)
        return torch.cat(outs, dim=2)  # (B, T, 16, bd)


class MULayer(nn.Module):
    """Gates, 16 block attentions, one cross-block attention, MLP; all pre-norm residual."""

    def __init__(
        self, *, cell_dim: int, n_heads: int, mlp_hidden: int, block_group: int, attention: str
    ) -> None:
        super().__init__()
        d_model = 64 * cell_dim
        self.block_dim = CELLS_PER_BLOCK * cell_dim
        self.norm1 = RMSNorm(d_model)
        self.gate = nn.Linear(d_model, N_BLOCKS)
        self.block_attn = BlockAttention(self.block_dim, block_group, attention=attention)
        self.norm2 = RMSNorm(d_model)
        self.cross_attn = CausalSelfAttention(d_model, n_heads, attention=attention)  # all blocks
        self.norm3 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.norm1(x)
        sens = torch.sigmoid(self.gate(h)).unsqueeze(-1)  # (B, T, 16, 1)
        x = x + (self.block_attn(h) * sens).reshape(B, T, C)
        cross = self.cross_attn(self.norm2(x)).view(B, T, N_BLOCKS, self.block_dim)
        x = x + (cross * sens).reshape(B, T, C)
        return x + self.mlp(self.norm3(x))


class MU(TiedCausalLM):
    """The MU language model. ``forward(input_ids)`` -> logits; with ``labels`` -> loss."""

    def __init__(
        self,
        *,
        vocab_size: int,
        n_layers: int,
        cell_dim: int,
        n_heads: int,
        mlp_hidden: int,
        max_seq_len: int,
        block_group: int = 16,
        attention: str = "sdpa",
        sdpa_backend: str = "auto",
        label_smoothing: float = 0.0,
        activation_checkpointing: bool = False,
        checkpoint_every: int = 1,
        loss: str = "full",
    ) -> None:
        check_sizes(n_layers=n_layers, cell_dim=cell_dim, n_heads=n_heads, mlp_hidden=mlp_hidden)
        super().__init__(
            vocab_size=vocab_size,
            d_model=64 * cell_dim,
            max_seq_len=max_seq_len,
            label_smoothing=label_smoothing,
            activation_checkpointing=activation_checkpointing,
            sdpa_backend=sdpa_backend,
            checkpoint_every=checkpoint_every,
            loss=loss,
        )
        self.layers = nn.ModuleList(
            MULayer(
                cell_dim=cell_dim,
                n_heads=n_heads,
                mlp_hidden=mlp_hidden,
                block_group=block_group,
                attention=attention,
            )
            for _ in range(n_layers)
        )
        self._init(n_layers)

    def _init(self, n_layers: int) -> None:
        init_weights(self)
        residual_std = 0.02 / (2 * n_layers) ** 0.5  # GPT-2's scaled residual projections
        for m in self.modules():
            if isinstance(m, BlockAttention):
                nn.init.normal_(m.qkv, std=0.02)
                nn.init.normal_(m.proj, std=residual_std)
            elif isinstance(m, CausalSelfAttention):
                nn.init.normal_(m.proj.weight, std=residual_std)
            elif isinstance(m, SwiGLU):
                nn.init.normal_(m.down.weight, std=residual_std)


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    d_model = 64 * int(args["cell_dim"])
    head = int(args["vocab_size"]) * d_model  # the tied output projection
    n = meta_param_counts(MU, args).non_embedding + head
    # per layer: 16 block attentions of width d_model/16 plus one cross-block of d_model
    return transformer_flops(
        matmul_params=n, n_layers=int(args["n_layers"]), d_attn=2 * d_model, seq_len=seq_len
    )


def mu_spec(
    name: str, *, n_layers: int, seq_len: int, max_seq_len: int, description: str
) -> ModelSpec:
    return ModelSpec(
        name=name,
        description=description,
        task="lm",
        family="mu",
        build_fn=MU,
        make_batch_fn=lm_batch,
        loss_fn=lm_batch_loss,
        flops_fn=_flops,
        args={
            "vocab_size": 8192,
            "n_layers": n_layers,
            "cell_dim": 4,  # d_model 256, blocks of 16 features
            "n_heads": 4,  # of the cross-block attention
            "mlp_hidden": 1088,  # 4.25 * d_model: the reference configs' parameter counts
            "max_seq_len": max_seq_len,
            "label_smoothing": 0.0,
        },
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        global_batch=32,
        supports_checkpointing=True,
        knobs=(
            Knob(
                name="block_group",
                values=BLOCK_GROUPS,
                default=16,
                help="block attentions run at once (fewer: less memory, more kernel launches)",
            ),
            ATTENTION_KNOB,
            SDPA_BACKEND_KNOB,
            checkpoint_every_knob(n_layers),
            LOSS_KNOB,
        ),
        throughput_unit="tokens",
        extras={"metric": lm_metric, "generate": generate},
    )


register(
    "mu",
    lambda: mu_spec(
        "mu",
        n_layers=6,
        seq_len=128,
        max_seq_len=512,
        description="MU 8x8-cell LM, 6 layers (the testing config), ~6.7M non-embedding params",
    ),
)
register(
    "mu-24",
    lambda: mu_spec(
        "mu-24",
        n_layers=24,
        seq_len=256,
        max_seq_len=1024,
        description="MU 8x8-cell LM, 24 layers, ~26.9M non-embedding params",
    ),
)
