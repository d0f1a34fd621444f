"""Model wrapping for several processes per step: the config's DDP/FSDP2 knobs applied to a
model, and the whole (unsharded) state of a sharded one.

``wrap_model`` is the one function that applies ``TrainConfig.parallel``
(``autotune/config/parallel.py`` holds the record and its checks): the burst child and the
trainer (``autotune train`` under torchrun) both call it, so what was measured is what
trains. ``is_sharded`` says when evaluation and checkpoints are collectives (FSDP), and
``full_state`` and the ``load_full_*`` functions gather and scatter a sharded model's
state for a checkpoint (one written by a one-process or DDP run included).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.config.parallel import ParallelConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autotune.config.train_config import TrainConfig

__all__ = [
    "full_state",
    "is_sharded",
    "keyed_by_name",
    "load_full_model_state",
    "load_full_optimizer_state",
    "sharded_blocks",
    "wrap_model",
]


def wrap_model(
    model: nn.Module, config: TrainConfig, device: torch.device, *, world_size: int
) -> nn.Module:
    """``model`` ready for a step on this rank: DDP with the config's knobs, or sharded in
    place by FSDP2; unchanged on one process. Build the optimizer after this (FSDP2
    replaces the parameters with sharded ones)."""
    if world_size <= 1:
        return model
    from torch import nn

    par = config.parallel or ParallelConfig(nproc_per_node=world_size)
    if par.strategy == "ddp":
        return nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=par.bucket_cap_mb,
            gradient_as_bucket_view=par.gradient_as_bucket_view,
            static_graph=par.static_graph,
        )
    return _fully_shard(model, par)


def _fully_shard(model: nn.Module, par: ParallelConfig) -> nn.Module:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if par.mixed_precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs: dict[str, Any] = {
        "reshard_after_forward": par.reshard_after_forward,
        "mp_policy": policy,
    }
    for block in sharded_blocks(model):  # each its own unit: its all-gather overlaps
        fully_shard(block, **kwargs)  # the previous one's compute
    sharded: nn.Module = fully_shard(model, **kwargs)  # type: ignore[assignment]
    return sharded


def sharded_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP shards as units of their own: the blocks of the model's outermost
    ``ModuleList``s that have parameters and a forward (the repeated layers, as
    torchtitan shards them; a block that is itself a list or a dict of modules is looked
    into). The rest (embeddings, norms, a head) is the root's unit, and so is what a
    block holds (a mixture's experts, which not every rank runs: units of their own
    would be gathered on some ranks only). A child sharded on its own is sharded again
    after its forward where ``reshard_after_forward`` (the default), and the output
    projection tied to the token embedding, read in the root's forward, then met a
    sharded weight; and ``fully_shard`` refuses a ``ModuleList`` itself (it has no
    forward): every built-in model failed under FSDP."""
    from torch import nn

    blocks: list[nn.Module] = []
    taken: list[str] = []  # the chosen blocks' names: what lies under them is theirs
    for name, holder in model.named_modules():  # outer modules first
        if not isinstance(holder, nn.ModuleList) or _under(name, taken):
            continue
        for index, block in enumerate(holder):
            forward = type(block).forward is not nn.Module.forward
            trained = any(p.requires_grad for p in block.parameters())
            if forward and trained and all(block is not b for b in blocks):
                blocks.append(block)
                taken.append(f"{name}.{index}" if name else str(index))
    return blocks


def _under(name: str, taken: list[str]) -> bool:
    return any(name == t or name.startswith(t + ".") for t in taken)


def is_sharded(config: TrainConfig, world_size: int) -> bool:
    """Whether ``config`` shards its parameters on ``world_size`` processes (FSDP): then
    evaluation and checkpoints are collectives."""
    return world_size > 1 and config.parallel is not None and config.parallel.strategy == "fsdp"


def full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and the optimizer's whole (unsharded) state on CPU: a collective, every
    rank must call it; rank 0 writes what it returns."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return dict(model_state), dict(optim_state)


def load_full_model_state(model: nn.Module, model_state: Mapping[str, Any]) -> None:
    """``full_state``'s model state (or a one-process model's ``state_dict()``: the same
    names and whole tensors) into a sharded model: every rank takes its shards of it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(model_state), options=StateDictOptions(full_state_dict=True))


def load_full_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, optim_state: Mapping[str, Any]
) -> None:
    """``full_state``'s optimizer state into the optimizer of a sharded model (every rank).
    The state of a one-process or DDP run (``optimizer.state_dict()``: keyed by the
    parameters' places in the optimizer) is keyed by their names first, as torch wants it
    here: such a checkpoint resumes under FSDP."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_optimizer_state_dict,
    )

    set_optimizer_state_dict(
        model,
        optimizer,
        optim_state_dict=keyed_by_name(model, optimizer, optim_state),
        options=StateDictOptions(full_state_dict=True),
    )


def keyed_by_name(
    model: nn.Module, optimizer: torch.optim.Optimizer, optim_state: Mapping[str, Any]
) -> dict[str, Any]:
    """``optim_state`` with its parameters named: an ``optimizer.state_dict()`` numbers
    them in the order of its groups, which this run's ``optimizer`` (built the same way)
    holds them in. A state already keyed by name is returned as it is; a ``ValueError``
    where the counts differ (another model, or another optimizer)."""
    groups = list(optim_state.get("param_groups") or [])
    saved = [p for group in groups for p in group.get("params", [])]
    if not saved or not all(isinstance(p, int) for p in saved):
        return dict(optim_state)
    names = {id(p): name for name, p in model.named_parameters()}
    ours = [names.get(id(p)) for group in optimizer.param_groups for p in group["params"]]
    if len(saved) != len(ours) or None in ours:
        raise ValueError(
            f"it holds the state of {len(saved)} parameters, this run's optimizer "
            f"{len(ours)} of the model's"
        )
    name_of = dict(zip(saved, ours, strict=True))
    state = optim_state.get("state") or {}
    return {
        "state": {name_of[index]: value for index, value in state.items()},
        "param_groups": [
            {**group, "params": [name_of[p] for p in group["params"]]} for group in groups
        ],
    }
