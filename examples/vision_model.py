"""A vision model for autotune: a small residual CNN over square images, fed by its own
Dataset (the real input pipeline bursts measure), its size named "image", not "seq".

autotune models show examples/vision_model.py:spec
autotune search --model examples/vision_model.py:spec --budget 2GB --seq-len 32-64
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune import ModelSpec


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class SmallResNet(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, stride=2, padding=1)  # (B, width, H/2, W/2)
        self.blocks = nn.Sequential(*(Block(width) for _ in range(blocks)))
        self.head = nn.Linear(width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.stem(images)))
        return self.head(x.mean(dim=(2, 3)))  # global average pool: (B, classes)


class Pictures(Dataset):
    """Stands in for a folder of images: each sample is decoded and augmented on the fly,
    the CPU work that DataLoader workers take off the training loop."""

    def __init__(self, side: int, classes: int, size: int = 512) -> None:
        self.side, self.classes, self.size = side, classes, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.side + 8, self.side + 8, generator=g)  # "decode"
        top, left = torch.randint(0, 9, (2,), generator=g).tolist()  # random crop
        image = image[:, top : top + self.side, left : left + self.side]
        if index % 2:
            image = image.flip(-1)  # horizontal flip
        return {"images": image, "labels": torch.tensor(index % self.classes)}


def make_batch(args, batch_size, side, generator):  # synthetic: evaluation and memory probes
    images = torch.rand(batch_size, 3, side, side, generator=generator)
    labels = torch.randint(0, args["classes"], (batch_size,), generator=generator)
    return {"images": images, "labels": labels}


def data(args, side):  # the real pipeline: bursts read it through the config's DataLoader
    return Pictures(side, args["classes"])


def loss(model, batch):
    return F.cross_entropy(model(batch["images"]), batch["labels"])


def flops(args, side):  # 6 x multiply-adds of the convolutions (stem stride 2)
    w, pixels = args["width"], (side // 2) ** 2
    return 6.0 * pixels * (27 * w + args["blocks"] * 2 * 9 * w * w)


spec = ModelSpec(
    name="small-resnet",
    description="a small residual CNN over square RGB images",
    task="custom",  # autotune searches it; train it with autotune.PresetLoop or an export
    build_fn=SmallResNet,
    make_batch_fn=make_batch,
    loss_fn=loss,
    flops_fn=flops,
    data_fn=data,
    args={"width": 32, "blocks": 2, "classes": 10},
    seq_len=64,  # the image side; size_name says so in the output
    max_seq_len=256,
    size_name="image",
    global_batch=32,
    throughput_unit="samples",
    convolutional=True,  # on CUDA the search turns cudnn_benchmark and channels_last
)
