"""A tiny causal LM spec with the LM batch contract, for the trainer's tests.

It has dropout (so resuming must restore the RNG state to reproduce the loss curve),
``label_smoothing`` as a constructor argument, a metric and a greedy ``generate``. The CLI
tests load it by file reference: ``f"{FAKE_LM}:spec"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autotune.contract.spec import Batch, ModelSpec

FAKE_LM = str(Path(__file__).resolve())

__all__ = ["FAKE_LM", "TinyLM", "make_spec", "spec"]


class TinyLM(nn.Module):
    """Embedding + positions, one causal mixing layer (a masked mean), MLP, tied head."""

    def __init__(
        self,
        *,
        vocab_size: int = 260,
        dim: int = 16,
        max_seq_len: int = 64,
        dropout: float = 0.1,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.label_smoothing = label_smoothing
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_seq_len, dim)
        self.mix = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        _, T = input_ids.shape
        x = self.tok(input_ids) + self.pos(torch.arange(T, device=input_ids.device))  # (B, T, C)
        weights = torch.tril(torch.ones(T, T, device=x.device))
        weights = weights / weights.sum(-1, keepdim=True)  # (T, T) causal mean
        x = x + self.drop(self.mix(weights @ x))
        x = x + self.drop(self.mlp(self.norm(x)))
        logits = F.linear(self.norm(x), self.tok.weight)  # (B, T, V)
        if labels is None:
            return logits
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            labels.flatten(),
            ignore_index=-100,
            label_smoothing=self.label_smoothing,
        )


def _batch(args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator) -> Batch:
    tokens = torch.randint(0, int(args["vocab_size"]), (batch_size, seq_len + 1), generator=gen)
    return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}


def _loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    loss: torch.Tensor = module(batch["input_ids"], labels=batch["labels"])
    return loss


def _metric(module: nn.Module, batch: Batch) -> dict[str, float]:
    with torch.no_grad():
        logits = module(batch["input_ids"])
        loss = float(F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten()).item())
    return {"loss": loss, "perplexity": math.exp(loss)}


def _generate(
    module: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    top_p: float = 0.9,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Greedy, and cheap: one forward pass, its last prediction repeated."""
    with torch.no_grad():
        logits = module(prompt[:, -int(module.max_seq_len) :])[:, -1]  # type: ignore[arg-type]
    new = logits.argmax(-1, keepdim=True).expand(-1, max_new_tokens)  # (B, n)
    return torch.cat([prompt, new], dim=1)


def make_spec(**args: Any) -> ModelSpec:
    base = {"vocab_size": 260, "dim": 16, "max_seq_len": 64, "dropout": 0.1}
    base["label_smoothing"] = 0.0
    return ModelSpec(
        name="fake-lm",
        description="a tiny causal LM for tests",
        task="lm",
        build_fn=TinyLM,
        make_batch_fn=_batch,
        loss_fn=_loss,
        flops_fn=lambda a, s: 6.0 * 10_000 * s,
        args={**base, **args},
        seq_len=16,
        max_seq_len=64,
        global_batch=4,
        throughput_unit="tokens",
        extras={"metric": _metric, "generate": _generate},
    )


spec = make_spec()
