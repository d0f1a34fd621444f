"""A toy ``ModelSpec`` (one linear layer) for tests that need a spec's shape (batch,
sequence, knobs, checkpointing) but never train it: the space and the search tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import Knob, ModelSpec

__all__ = ["toy_spec"]


def toy_spec(
    *,
    global_batch: int = 32,
    knobs: tuple[Knob, ...] = (),
    checkpointing: bool = True,
    seq_len: int = 128,
    max_seq_len: int = 512,
) -> ModelSpec:
    def build(**kwargs: Any) -> nn.Module:
        return nn.Linear(4, 4)

    def batch(args: Mapping[str, Any], b: int, t: int, g: torch.Generator) -> dict[str, Any]:
        return {"x": torch.zeros(b, t)}

    return ModelSpec(
        name="toy",
        description="a toy",
        task="lm",
        build_fn=build,
        make_batch_fn=batch,
        loss_fn=lambda m, b: m(b["x"]).sum(),
        flops_fn=lambda a, s: 1.0,
        args={},
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        global_batch=global_batch,
        supports_checkpointing=checkpointing,
        knobs=knobs,
    )
