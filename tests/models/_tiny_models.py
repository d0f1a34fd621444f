"""Tiny sizes of every built-in model family, small enough for CPU tests in milliseconds."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.models import ModelSpec, get_model


@dataclass(frozen=True)
class Tiny:
    spec: ModelSpec
    seq_len: int
    batch_size: int = 4


def tiny_specs() -> dict[str, Tiny]:
    return {
        "mu": Tiny(
            get_model("mu").with_args(
                vocab_size=64, n_layers=2, cell_dim=1, n_heads=2, mlp_hidden=48, max_seq_len=32
            ),
            seq_len=16,
        ),
        "gpt": Tiny(
            get_model("gpt-small").with_args(
                vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_seq_len=32
            ),
            seq_len=16,
        ),
        "pointer-gen": Tiny(
            get_model("pointer-gen").with_args(
                vocab_size=40, emb_dim=16, hidden=16, chunk_len=8, max_chunks=3, tgt_len=6
            ),
            seq_len=20,  # three chunks, the last one partial
        ),
        "text-regressor": Tiny(
            get_model("text-regressor").with_args(
                vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_seq_len=32, n_numeric=3
            ),
            seq_len=24,
        ),
    }


TINY = tiny_specs()
