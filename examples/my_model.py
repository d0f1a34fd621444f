"""A user model for autotune: a tiny causal convolutional language model over bytes.

autotune models show examples/my_model.py:spec
autotune search --model examples/my_model.py:spec --budget 2GB
"""

import torch
import torch.nn.functional as F
from torch import nn

from autotune import ModelSpec


class ConvLM(nn.Module):
    def __init__(self, vocab_size: int, dim: int, layers: int, kernel: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, dim, kernel) for _ in range(layers))
        self.head = nn.Linear(dim, vocab_size)
        self.pad = kernel - 1  # pad on the left only: position t never sees t+1

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids).transpose(1, 2)  # (B, dim, T)
        for conv in self.convs:
            x = x + F.gelu(conv(F.pad(x, (self.pad, 0))))
        logits = self.head(x.transpose(1, 2))  # (B, T, vocab)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def make_batch(args, batch_size, seq_len, generator):  # random bytes; labels = next byte
    ids = torch.randint(0, args["vocab_size"], (batch_size, seq_len + 1), generator=generator)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}


def flops(args, seq_len):  # 6 x (weights used per token) x tokens
    d, v, k = args["dim"], args["vocab_size"], args.get("kernel", 4)
    return 6.0 * (args["layers"] * k * d * d + d * v) * seq_len


spec = ModelSpec(
    name="conv-lm",
    description="tiny causal conv LM over bytes",
    task="lm",
    build_fn=ConvLM,
    make_batch_fn=make_batch,
    loss_fn=lambda model, batch: model(**batch),
    flops_fn=flops,
    args={"vocab_size": 260, "dim": 128, "layers": 4},
    seq_len=256,
    max_seq_len=4096,
    global_batch=32,
)
