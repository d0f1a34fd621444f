"""The step's hook between micro-batches (``Stepper.step(after_micro_batch=...)``): a
trial on a CPU reads its clock there to see whether a step's micro-batches ran evenly."""

from __future__ import annotations

import torch
from torch import nn

from autotune.config.train_config import TrainConfig
from autotune.engine.step import Stepper


def test_the_hook_runs_after_each_micro_batch_s_backward_and_before_the_update() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    before = model.weight.detach().clone()
    config = TrainConfig(micro_batch=2, grad_accum=3, seq_len=8)
    stepper = Stepper(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        config=config,
        device=torch.device("cpu"),
        loss_fn=lambda m, batch: (m(batch["x"]) - batch["y"]).pow(2).mean(),
        grad_clip=None,
    )
    seen: list[tuple[int, float, bool]] = []

    def after(i: int) -> None:
        grad = model.weight.grad
        assert grad is not None  # this micro-batch's backward has run
        unchanged = torch.equal(model.weight.detach(), before)
        seen.append((i, float(grad.abs().sum()), unchanged))

    batches = [{"x": torch.randn(2, 4), "y": torch.randn(2, 1)} for _ in range(3)]
    stepper.step(batches, after_micro_batch=after)
    assert [i for i, _, _ in seen] == [0, 1, 2]
    assert all(unchanged for _, _, unchanged in seen)  # the optimizer steps after them all
    assert seen[0][1] != seen[1][1] != seen[2][1]  # gradients accumulate micro-batch by micro-batch
    assert not torch.equal(model.weight.detach(), before)
