"""A tiny convolutional ``ModelSpec`` (declared ``convolutional``) that can write down, from
inside a trial's process, what the step really ran with: the layout of its input and of
its convolution's weight, the allocator setting and the OpenMP wait policy in its
environment and, on CUDA, the allocator's reserved peak so far (written at every forward;
the last one wins). The knob tests load it by reference (``tests/fake_conv.py:conv_spec``)
so that a burst's child process builds it itself."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import Batch, ModelSpec

__all__ = ["CONV", "ConvNet", "conv_spec"]

CONV = str(Path(__file__).resolve())


class ConvNet(nn.Module):
    """conv -> ReLU -> global average -> linear, over (B, 3, S, S) images."""

    def __init__(self, *, width: int = 8, classes: int = 4, record_file: str = "") -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, width, kernel_size=3, padding=1)
        self.head = nn.Linear(width, classes)
        self.record_file = record_file

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # images: (B, 3, S, S)
        if self.record_file:
            last = torch.channels_last
            cuda = images.is_cuda
            Path(self.record_file).write_text(
                json.dumps(
                    {
                        "input_channels_last": images.is_contiguous(memory_format=last),
                        "weight_channels_last": self.conv.weight.is_contiguous(memory_format=last),
                        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                        "max_reserved": torch.cuda.max_memory_reserved() if cuda else None,
                    }
                )
            )
        x = torch.relu(self.conv(images))  # (B, width, S, S)
        return self.head(x.mean(dim=(2, 3)))  # (B, classes)


def _build(*, process_file: str = "", **kwargs: Any) -> nn.Module:
    if process_file:  # the trial's process: who started it, and what it had loaded
        import sys

        facts = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "sid": os.getsid(0),
            "inductor_loaded": "torch._inductor.compile_fx" in sys.modules,
            "mark": os.environ.get("AUTOTUNE_TEST_MARK"),
            "tmpdir": os.environ.get("TMPDIR"),
            "sigint_ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
        }
        Path(process_file).write_text(json.dumps(facts))
    return ConvNet(**kwargs)


def _make_batch(args: Mapping[str, Any], batch_size: int, side: int, gen: torch.Generator) -> Batch:
    classes = int(args.get("classes", 4))
    return {
        "images": torch.randn(batch_size, 3, side, side, generator=gen),
        "labels": torch.randint(0, classes, (batch_size,), generator=gen),
    }


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch["images"]).float(), batch["labels"])


conv_spec = ModelSpec(
    name="fake-conv",
    description="a tiny CNN that records what its step ran with",
    task="custom",
    build_fn=_build,
    make_batch_fn=_make_batch,
    loss_fn=_loss,
    flops_fn=lambda args, side: 1.0,
    args={"width": 8, "classes": 4, "record_file": "", "process_file": ""},
    seq_len=8,
    max_seq_len=32,
    global_batch=4,
    throughput_unit="samples",
    size_name="image",
    convolutional=True,
)
