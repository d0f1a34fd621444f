"""Your own training loop, running exactly what an autotune preset measured: its
DataLoader arguments, compile, AdamW, and the step function (autocast, fp16 scaling,
accumulation, clipping) autotune's bursts and trainer share.

python examples/own_loop.py best.yaml
"""

import sys

import torch
from torch import nn

from autotune import PresetLoop

loop = PresetLoop.from_preset(sys.argv[1], device="cuda" if torch.cuda.is_available() else "cpu")
samples = [{"x": x, "y": x.sum(dim=0, keepdim=True)} for x in torch.randn(512, 16)]
loader = loop.dataloader(samples, shuffle=True)  # micro-batch, workers, pinning, prefetch

model = loop.prepare(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1)))
stepper = loop.stepper(
    model,
    loop.optimizer(model, lr=1e-3),
    loss_fn=lambda model, batch: nn.functional.mse_loss(model(batch["x"]), batch["y"]),
)
for step, micro_batches in enumerate(loop.steps(loader, max_steps=20)):
    out = stepper.step(micro_batches)  # grad_accum micro-batches, one optimizer step
    if step % 5 == 0:
        print(f"step {step}: loss {out.loss_value():.4f}")
