"""One peer's batch finder, run the way its documentation says, on an autotune model.

``benchmarks/vs_peers.py`` starts this script once per peer, each in a process (and
session) of its own, and watches its memory; this side only runs the library. The model
is an autotune ``ModelSpec`` wrapped as the library expects: a ``LightningModule`` for
Lightning's ``Tuner.scale_batch_size``, an ``nn.Module`` returning ``{"loss": ...}`` with a
``Dataset`` of synthetic samples for Hugging Face's ``Trainer(auto_find_batch_size=True)``,
a plain loop under Accelerate's ``find_executable_batch_size``, and a training script for
DeepSpeed's autotuner (``deepspeed --autotuning tune``, CUDA only: written, not tested
here). Every peer trains fp32 AdamW (lr 3e-4), no DataLoader workers: each library's default.

What happened is written as JSON lines to ``--events`` as it happens (so a peer killed
over the budget still tells which sizes it tried): ``{"event": "start", "size": N}`` when a
micro-batch size first runs a forward pass, ``{"event": "done", "size": N}`` when a step at
that size first completes, and at the end ``{"event": "result", "micro_batch": M,
"grad_accum": A, "settings": {...}, "peak_cuda_bytes": P}``.

    python benchmarks/_peer_driver.py --peer hf-trainer --model gpt-small --seq-len 256 \\
        --global-batch 32 --device cpu --steps 3 --events events.jsonl --root TMP
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

PEERS = ("lightning-power", "lightning-binsearch", "hf-trainer", "accelerate", "deepspeed-train")
POOL = 64  # distinct synthetic samples, served round-robin
LENGTH = 1_000_000  # the dataset's length: a real corpus never bounds a batch finder
LR = 3e-4


class Events:
    """The JSON-lines record the parent reads (line-buffered: a SIGKILL loses nothing
    written before it)."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
        self._started: set[int] = set()
        self._done: set[int] = set()

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, **fields}) + "\n")

    def start(self, size: int) -> None:
        if size not in self._started:
            self._started.add(size)
            self.write("start", size=size)

    def done(self, size: int) -> None:
        if size not in self._done:
            self._done.add(size)
            self.write("done", size=size)


class Samples(Dataset[dict[str, torch.Tensor]]):
    """``LENGTH`` samples cycling over ``POOL`` synthetic ones from the spec."""

    def __init__(self, spec: Any, seq_len: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.pool = spec.make_batch(batch_size=POOL, seq_len=seq_len, generator=gen)

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[index % POOL] for k, v in self.pool.items()}


class SpecModule(nn.Module):
    """The spec's model behind ``forward(**batch) -> {"loss": ...}`` (what HF's Trainer
    calls); records each new batch size it sees."""

    def __init__(self, spec: Any, keys: Sequence[str], events: Events) -> None:
        super().__init__()
        self.inner = spec.build()
        self.spec = spec
        self.keys = tuple(keys)
        self.events = events
        self.last_size = 0

    def forward(self, **inputs: Any) -> dict[str, torch.Tensor]:
        batch = {k: inputs[k] for k in self.keys}  # Trainer adds num_items_in_batch
        self.last_size = int(next(iter(batch.values())).shape[0])
        self.events.start(self.last_size)
        return {"loss": self.spec.loss(self.inner, batch)}


def _cap_cuda(device: str, budget_bytes: int | None) -> None:
    """On CUDA, the burst's rule: the allocator may not pass the budget minus the context."""
    if not device.startswith("cuda") or budget_bytes is None:
        return
    from autotune.engine.memory import cap_cuda_memory, measure_cuda_context

    dev = torch.device(device)
    torch.ones(1, device=dev) @ torch.ones(1, 1, device=dev)  # the context, cuBLAS loaded
    context = measure_cuda_context(dev).bytes
    cap_cuda_memory(budget_bytes, device=dev, context_bytes=context)


def run_lightning(args: argparse.Namespace, spec: Any, data: Samples, events: Events) -> int:
    """``Tuner(trainer).scale_batch_size(module, mode=...)`` with its defaults
    (``init_val=2``, ``steps_per_trial=3`` unless ``--steps``)."""
    import lightning.pytorch as pl
    from lightning.pytorch.tuner import Tuner

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = SpecModule(spec, list(data.pool), events)
            self.batch_size = 2

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.model(**batch)["loss"]

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            events.done(self.model.last_size)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=LR)

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(data, batch_size=self.batch_size)

    trainer = pl.Trainer(
        accelerator="gpu" if args.device.startswith("cuda") else "cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.root,
    )
    mode = args.peer.removeprefix("lightning-")
    found = Tuner(trainer).scale_batch_size(Module(), mode=mode, steps_per_trial=args.steps)
    if found is None:
        raise RuntimeError("scale_batch_size returned no batch size")
    return int(found)


def run_hf_trainer(args: argparse.Namespace, spec: Any, data: Samples, events: Events) -> int:
    """``Trainer(args=TrainingArguments(auto_find_batch_size=True, ...))`` starting at the
    user's global batch (per-device batch = global batch, no accumulation); it halves the
    batch on an out-of-memory error and keeps training (here: ``--steps`` steps)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    model = SpecModule(spec, list(data.pool), events)

    class Done(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            events.done(model.last_size)

    training_args = TrainingArguments(
        output_dir=args.root,
        per_device_train_batch_size=args.global_batch,
        gradient_accumulation_steps=1,
        auto_find_batch_size=True,
        max_steps=args.steps,
        learning_rate=LR,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        use_cpu=not args.device.startswith("cuda"),
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=data, callbacks=[Done()])
    trainer.train()
    return int(trainer._train_batch_size)  # the size auto_find_batch_size settled on


def run_accelerate(args: argparse.Namespace, spec: Any, data: Samples, events: Events) -> int:
    """The loop of Accelerate's guide: ``@find_executable_batch_size(starting_batch_size=
    global batch)`` around building the model, optimizer and loader, freeing memory first."""
    from accelerate import Accelerator
    from accelerate.utils import find_executable_batch_size

    accelerator = Accelerator(cpu=not args.device.startswith("cuda"))

    @find_executable_batch_size(starting_batch_size=args.global_batch)
    def inner_training_loop(batch_size: int) -> int:
        accelerator.free_memory()
        model = SpecModule(spec, list(data.pool), events)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        loader = DataLoader(data, batch_size=batch_size)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for _, batch in zip(range(args.steps), loader, strict=False):
            loss = model(**batch)["loss"]
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            events.done(batch_size)
        return batch_size

    return int(inner_training_loop())


def run_deepspeed_train(args: argparse.Namespace, spec: Any, data: Samples, events: Events) -> int:
    """The training script DeepSpeed's autotuner launches once per experiment: it reads
    the micro-batch and accumulation from the config the autotuner hands it
    (``--deepspeed_config``) and trains until the autotuner's profiling steps are done.
    CUDA only; not run on the machines this benchmark has been tested on."""
    import deepspeed

    model = SpecModule(spec, list(data.pool), events)
    engine, _, loader, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=data
    )
    for _, batch in zip(range(max(args.steps, 10)), loader, strict=False):
        batch = {k: v.to(engine.device) for k, v in batch.items()}
        loss = engine(**batch)["loss"]
        engine.backward(loss)
        engine.step()
        events.done(int(engine.train_micro_batch_size_per_gpu()))
    return int(engine.train_micro_batch_size_per_gpu())


RUNNERS: dict[str, Callable[[argparse.Namespace, Any, Samples, Events], int]] = {
    "lightning-power": run_lightning,
    "lightning-binsearch": run_lightning,
    "hf-trainer": run_hf_trainer,
    "accelerate": run_accelerate,
    "deepspeed-train": run_deepspeed_train,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/_peer_driver.py", description=__doc__)
    p.add_argument("--peer", required=True, choices=PEERS)
    p.add_argument("--model", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=3, help="steps per size tried")
    p.add_argument("--budget-bytes", type=int, default=None, help="CUDA: the allocator's cap")
    p.add_argument("--events", type=Path, required=True)
    p.add_argument("--root", default=".", help="the library's output folder")
    p.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    if "--deepspeed_config" in sys.argv or "--deepspeed" in sys.argv:
        import deepspeed

        p = deepspeed.add_config_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from autotune.models.registry import load_model

    events = Events(args.events)
    spec = load_model(args.model)
    torch.manual_seed(0)
    _cap_cuda(args.device, args.budget_bytes)
    micro = RUNNERS[args.peer](args, spec, Samples(spec, args.seq_len), events)
    peak = None
    if args.device.startswith("cuda"):
        peak = int(torch.cuda.max_memory_reserved(torch.device(args.device)))
    events.write("result", micro_batch=micro, grad_accum=1, settings={}, peak_cuda_bytes=peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
