"""Text regressor: a price-style model from a text description plus numeric features.

A pre-norm transformer encoder (bidirectional, padding masked, max length 384) reads the
text; its output is mean-pooled over the real tokens. A small MLP reads the numeric
features (standardised by the data pipeline). A regression head on both predicts the
target, e.g. ``log1p(price)``.

Loss: Huber (smooth L1, ``huber_delta`` = 1.0) on the target. On a log-price target it
behaves like MSE for the usual errors (< 1, i.e. within a factor of e) and like L1 for the
few badly mispriced items, so outliers do not dominate the gradient.

Metric: SMAPE in percent (0 to 200), on the original scale (``expm1`` of prediction and
target when ``log_target`` is true): ``100 * mean(2 |p - t| / (|p| + |t|))``.

Batch: ``input_ids`` (B, L) long (PAD = 0), ``attention_mask`` (B, L) bool (True = token),
``numeric`` (B, F) float, ``target`` (B,) float.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autotune.contract.spec import Batch, ModelSpec

from ._common import (
    RMSNorm,
    SwiGLU,
    check_layers,
    check_sizes,
    init_weights,
    meta_param_counts,
    run_layers,
    swiglu_hidden,
    transformer_flops,
    unwrap,
)
from .registry import register

__all__ = ["PAD_ID", "TextRegressor", "smape", "text_regressor_spec"]

PAD_ID = 0


def smape(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Symmetric mean absolute percentage error, in percent (0 to 200); 0/0 counts as 0."""
    if pred.shape != target.shape:
        raise ValueError(
            f"pred and target shapes differ: {tuple(pred.shape)} vs {tuple(target.shape)}"
        )
    pred, target = pred.float(), target.float()
    denom = pred.abs() + target.abs()
    ratio = torch.where(denom > 0, 2.0 * (pred - target).abs() / denom.clamp_min(1e-12), 0.0)
    return 100.0 * ratio.mean()


class EncoderBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_hidden: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.norm1 = RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.norm2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, mlp_hidden)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(C, dim=-1)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))  # (B,nh,T,hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # (B, nh, T, hs)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.norm2(x))


class TextRegressor(nn.Module):
    """``forward(input_ids, attention_mask, numeric)`` -> predictions (B,); with ``target``
    -> the Huber loss."""

    def __init__(
        self,
        *,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        max_seq_len: int,
        n_numeric: int,
        numeric_hidden: int = 64,
        huber_delta: float = 1.0,
        log_target: bool = True,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, d_model=d_model, n_heads=n_heads,
                    max_seq_len=max_seq_len, n_numeric=n_numeric,
                    numeric_hidden=numeric_hidden)  # fmt: skip
        # 0 is a size: pooled embeddings and the numeric path (_flops counts it so)
        check_layers("n_layers", n_layers, least=0)
        self.max_seq_len = max_seq_len
        self.huber_delta = huber_delta
        self.log_target = log_target
        self.activation_checkpointing = activation_checkpointing
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, swiglu_hidden(d_model)) for _ in range(n_layers)
        )
        self.norm_f = RMSNorm(d_model)
        self.numeric = nn.Sequential(
            nn.Linear(n_numeric, numeric_hidden),
            nn.GELU(),
            nn.Linear(numeric_hidden, numeric_hidden),
        )
        self.head = nn.Sequential(
            nn.Linear(d_model + numeric_hidden, d_model), nn.GELU(), nn.Linear(d_model, 1)
        )
        init_weights(self)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The mean of the encoder's outputs over real tokens: (B, d_model)."""
        seq_len = input_ids.shape[1]
        if seq_len > self.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len {self.max_seq_len}")
        pos = torch.arange(seq_len, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)  # (B, T, C)
        key_mask = attention_mask[:, None, None, :]  # (B, 1, 1, T): True = attend
        x = run_layers(self.blocks, x, key_mask, checkpointing=self.activation_checkpointing)
        x = self.norm_f(x)
        weights = attention_mask.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        return (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)  # (B, C)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        numeric: torch.Tensor,
        target: torch.Tensor | None = None,
    ) -> torch.Tensor:
        text = self.encode(input_ids, attention_mask)  # (B, C)
        num = self.numeric(numeric.to(text.dtype))  # (B, H)
        pred = self.head(torch.cat([text, num], dim=-1)).squeeze(-1)  # (B,)
        if target is None:
            return pred
        return F.huber_loss(pred.float(), target.float(), delta=self.huber_delta)


def _loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    return module(
        batch["input_ids"], batch["attention_mask"], batch["numeric"], target=batch["target"]
    )


def _metric(module: nn.Module, batch: Batch) -> dict[str, float]:
    model = unwrap(module)
    with torch.no_grad():
        pred = model(batch["input_ids"], batch["attention_mask"], batch["numeric"]).float()
        target = batch["target"].float()
        loss = F.huber_loss(pred, target, delta=float(getattr(model, "huber_delta", 1.0)))
        mae = (pred - target).abs().mean()
        if getattr(model, "log_target", True):
            pred, target = torch.expm1(pred.clamp(max=30.0)), torch.expm1(target)
        return {
            "loss": float(loss.item()),
            "smape": float(smape(pred, target).item()),
            "mae": float(mae.item()),
        }


def _make_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> Batch:
    """Texts of random lengths (the first one full), standard-normal numeric features and a
    log-price that depends on them, so there is something to learn."""
    vocab, n_numeric = int(args["vocab_size"]), int(args["n_numeric"])
    lengths = torch.randint(max(seq_len // 2, 1), seq_len + 1, (batch_size,), generator=generator)
    lengths[0] = seq_len  # one full row: the padded shape is what costs memory and time
    mask = torch.arange(seq_len)[None, :] < lengths[:, None]  # (B, L)
    ids = torch.randint(1, vocab, (batch_size, seq_len), generator=generator)
    ids = ids.masked_fill(~mask, PAD_ID)
    numeric = torch.randn(batch_size, n_numeric, generator=generator)
    noise = 0.1 * torch.randn(batch_size, generator=generator)
    target = 3.0 + 0.5 * numeric[:, 0] + (ids[:, 0] % 7).float() / 7.0 + noise
    return {"input_ids": ids, "attention_mask": mask, "numeric": numeric, "target": target}


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    """Encoder blocks on every token (PaLM formula over the text length); the numeric MLP
    and the head once per sample."""
    d_model, n_layers = int(args["d_model"]), int(args["n_layers"])
    total = meta_param_counts(TextRegressor, args).non_embedding
    per_sample = meta_param_counts(TextRegressor, {**args, "n_layers": 0}).non_embedding
    per_token = total - per_sample  # the encoder blocks
    return (
        transformer_flops(
            matmul_params=per_token, n_layers=n_layers, d_attn=d_model, seq_len=seq_len
        )
        + 6.0 * per_sample
    )


def text_regressor_spec() -> ModelSpec:
    return ModelSpec(
        name="text-regressor",
        description="price-style regressor: transformer text encoder + numeric MLP (SMAPE)",
        task="regression",
        family="text-regressor",
        build_fn=TextRegressor,
        make_batch_fn=_make_batch,
        loss_fn=_loss,
        flops_fn=_flops,
        args={
            "vocab_size": 8192,
            "d_model": 256,
            "n_layers": 4,
            "n_heads": 4,
            "max_seq_len": 384,
            "n_numeric": 8,
            "numeric_hidden": 64,
            "huber_delta": 1.0,
            "log_target": True,
        },
        seq_len=384,
        max_seq_len=384,
        global_batch=32,
        supports_checkpointing=True,
        throughput_unit="samples",
        extras={"metric": _metric, "smape": smape},
    )


register("text-regressor", text_regressor_spec)
