"""Tune a model defined right here (a script or a notebook): no spec file.

python examples/tune_in_a_script.py
"""

import torch
from torch import nn

import autotune


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


if __name__ == "__main__":  # the trials get Net and the loss by value: nothing here reruns
    x = torch.randn(256, 16)
    result = autotune.tune(
        build=Net,
        loss=lambda model, batch: nn.functional.mse_loss(model(batch["x"]), batch["y"]),
        batch={"x": x, "y": x.sum(dim=1, keepdim=True)},  # rows are drawn for each batch
        budget="2GB",
        device="cpu",
        global_batch=32,
        trials=3,
        output="tuned.yaml",
    )
    print(result.config)
    # None where the race measured no clean round (its speedup_reason says why)
    speedup = "not measured" if result.speedup is None else f"{result.speedup:.2f}x"
    print(f"{speedup} the naive config; preset in {result.search.preset_path}")
