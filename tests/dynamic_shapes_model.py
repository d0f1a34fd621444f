import itertools

import torch
from torch import nn

from autotune.contract.spec import ModelSpec

_lengths = itertools.count(8)


class Tiny(nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, x):  # x: (B, T)
        return self.out(self.emb(x))  # (B, T, V)


def build(vocab=32, dim=16):
    return Tiny(vocab, dim)


def make_batch(args, batch_size, seq_len, generator):
    x = torch.randint(0, args["vocab"], (batch_size, seq_len + 1), generator=generator)
    return {"input": x[:, :-1], "target": x[:, 1:]}


def loss(model, batch):
    n = next(_lengths)  # a new length on every call: the compiled model sees a new shape
    logits = model(batch["input"][:, :n])
    return nn.functional.cross_entropy(logits.flatten(0, 1), batch["target"][:, :n].flatten())


spec = ModelSpec(
    name="dyn",
    description="a model whose shapes change every step",
    task="lm",
    build_fn=build,
    make_batch_fn=make_batch,
    loss_fn=loss,
    flops_fn=lambda a, s: 1.0,
    args={"vocab": 32, "dim": 16},
    seq_len=16,
    max_seq_len=64,
    global_batch=4,
)
