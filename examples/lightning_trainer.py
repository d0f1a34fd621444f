"""Train a Lightning module with the settings an autotune preset measured.

autotune presets export best.yaml --format lightning --output lightning.yaml
python examples/lightning_trainer.py lightning.yaml
"""

import sys
from pathlib import Path

import lightning
import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

cfg = yaml.safe_load(Path(sys.argv[1]).read_text())
torch.set_float32_matmul_precision(cfg["float32_matmul_precision"])


class Regressor(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), **cfg["optimizer"])


model = Regressor()
if cfg["compile"] is not None:
    model = torch.compile(model, **cfg["compile"])
x = torch.randn(512, 16)
loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), **cfg["dataloader"])
trainer = lightning.Trainer(**cfg["trainer"], logger=False, enable_checkpointing=False)
trainer.fit(model, loader)
