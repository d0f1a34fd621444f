"""The trainer's evaluation: validation loss (and the model's own metric) without
gradients, and a short sample of text from a language model.

Rank 0 alone evaluates (the trainer broadcasts the result); the model is put in eval
mode for the pass and given back in the mode it was in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.data.tokenizer import ByteTokenizer
from autotune.engine.step import autocast_context, to_device

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec
    from autotune.data.train_data import TrainData

__all__ = ["eval_metrics", "evaluate_model", "improves", "sample_text"]

SAMPLE_PROMPT_TOKENS = 32
SAMPLE_NEW_TOKENS = 64


def eval_metrics(
    model: nn.Module,
    batches: Iterable[Batch],
    *,
    spec: ModelSpec,
    config: TrainConfig,
    device: torch.device,
    max_batches: int,
) -> dict[str, Any]:
    """Validation loss (and the model's metric) averaged over samples of at most
    ``max_batches`` batches; language models add the perplexity, ``samples`` the count."""
    metric_fn = spec.extras.get("metric")
    was_training = model.training
    model.eval()
    totals: dict[str, float] = {}
    n = 0
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                if i >= max_batches:
                    break
                batch = to_device(batch, device)
                size = int(next(iter(batch.values())).shape[0])
                with autocast_context(config, device):
                    values: dict[str, float] = {}
                    if metric_fn is not None:
                        values = {k: float(v) for k, v in metric_fn(model, batch).items()}
                    if "loss" not in values:
                        values["loss"] = float(spec.loss_fn(model, batch).item())
                for k, v in values.items():
                    totals[k] = totals.get(k, 0.0) + v * size
                n += size
    finally:
        model.train(was_training)
    out: dict[str, Any] = {k: v / max(n, 1) for k, v in totals.items()}
    if spec.task == "lm":
        out["perplexity"] = math.exp(min(out["loss"], 50.0))
    out["samples"] = n
    return out


def improves(loss: float, best: float | None) -> bool:
    """Whether a validation ``loss`` is the run's new best (best.pt): finite, and below
    ``best`` (None: none yet). NaN or infinity never is: a diverged first evaluation held
    the best at nan, and no later loss was ever below it."""
    return math.isfinite(loss) and (best is None or loss < best)


def sample_text(
    model: nn.Module,
    data: TrainData,
    *,
    spec: ModelSpec,
    config: TrainConfig,
    device: torch.device,
    seed: int,
) -> tuple[str, str] | None:
    """A short continuation of the first validation chunk's start (language models with a
    ``generate`` extra and a byte tokenizer): the prompt and the new text."""
    generate = spec.extras.get("generate")
    tokenizer = data.tokenizer
    if spec.task != "lm" or generate is None or not isinstance(tokenizer, ByteTokenizer):
        return None
    first = data.val[0]
    prompt = first["input_ids"][:SAMPLE_PROMPT_TOKENS].unsqueeze(0).to(device)  # (1, P)
    gen = torch.Generator(device=device).manual_seed(seed)
    with autocast_context(config, device):
        out = generate(model, prompt, SAMPLE_NEW_TOKENS, 0.9, gen)
    prompt_text = tokenizer.decode(prompt[0].tolist())
    new_text = tokenizer.decode(out[0, prompt.shape[1] :].tolist())
    return prompt_text, new_text


def evaluate_model(
    model: nn.Module,
    batches: Iterable[Batch],
    data: TrainData,
    *,
    spec: ModelSpec,
    config: TrainConfig,
    device: torch.device,
    max_batches: int,
    seed: int,
) -> dict[str, Any]:
    """``eval_metrics`` over ``batches``, with ``prompt`` and ``sample`` (``sample_text``)
    where the model writes text; the sample too is written in eval mode (no dropout), so
    that evaluating leaves the training's random stream as it was."""
    out = eval_metrics(
        model, batches, spec=spec, config=config, device=device, max_batches=max_batches
    )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            sample = sample_text(model, data, spec=spec, config=config, device=device, seed=seed)
    finally:
        model.train(was_training)
    if sample is not None:
        out["prompt"], out["sample"] = sample
    return out
