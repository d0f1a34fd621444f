"""A sharded model's state from a checkpoint (autotune/engine/wrapping.py): an optimizer
state numbered by a one-process or DDP run, named for FSDP, and loaded into shards."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from autotune.engine.wrapping import keyed_by_name, sharded_blocks
from autotune.models.registry import load_model


def _model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2))
    decay = [p for p in model.parameters() if p.dim() > 1]
    other = [p for p in model.parameters() if p.dim() <= 1]  # another group, as AdamW's are
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": other, "weight_decay": 0.0}])
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_a_numbered_optimizer_state_is_keyed_by_the_parameters_names() -> None:
    model, optimizer = _model_and_optimizer()
    numbered = optimizer.state_dict()
    named = keyed_by_name(model, optimizer, numbered)

    # the groups' order, not the model's: weights first, then biases and the norm
    assert [g["params"] for g in named["param_groups"]] == [
        ["0.weight", "2.weight"],
        ["0.bias", "1.weight", "1.bias", "2.bias"],
    ]
    assert named["param_groups"][1]["weight_decay"] == 0.0
    params = dict(model.named_parameters())
    for name, moments in named["state"].items():
        assert moments["exp_avg"].shape == params[name].shape
        assert torch.equal(moments["exp_avg"], optimizer.state[params[name]]["exp_avg"])
    assert keyed_by_name(model, optimizer, named) == named  # already named: as it is


def test_a_state_of_another_parameter_count_is_refused() -> None:
    model, optimizer = _model_and_optimizer()
    numbered = optimizer.state_dict()
    numbered["param_groups"][1]["params"].append(6)
    with pytest.raises(ValueError, match="the state of 7 parameters, this run's optimizer 6"):
        keyed_by_name(model, optimizer, numbered)


# One process of FSDP2 on gloo, in a process of its own (a process group stays joined to
# the end of the process: see autotune.engine.distributed).
_FSDP_RESUME = textwrap.dedent(
    """
    import copy, os, torch, torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from autotune.engine.wrapping import (
        full_state, load_full_model_state, load_full_optimizer_state,
    )

    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2))
        return model

    def step(model, optimizer, seed):
        torch.manual_seed(seed)
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    plain = build()
    opt = torch.optim.AdamW(plain.parameters(), lr=0.1)
    step(plain, opt, 1)
    # as a checkpoint holds them: copies (state_dict() returns the live tensors)
    model_state, optim_state = copy.deepcopy((plain.state_dict(), opt.state_dict()))

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                            rank=0, world_size=1)
    sharded = build()
    for child in sharded.children():
        fully_shard(child)
    fully_shard(sharded)
    with torch.no_grad():
        for p in sharded.parameters():
            p.zero_()  # nothing of the model as built survives the load
    opt2 = torch.optim.AdamW(sharded.parameters(), lr=0.1)
    load_full_model_state(sharded, model_state)
    load_full_optimizer_state(sharded, opt2, optim_state)
    step(plain, opt, 2)
    step(sharded, opt2, 2)
    weights, moments = full_state(sharded, opt2)
    for name, value in plain.state_dict().items():
        assert torch.allclose(weights[name], value, atol=1e-6), name
    assert moments["state"]["0.weight"]["step"] == 2
    print("same after a step")
    os._exit(0)
    """
)


@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="this torch build has no gloo backend",
)
def test_a_one_process_checkpoint_resumes_into_fsdp_shards() -> None:
    """Where FSDP's loader refused an optimizer state numbered by ``optimizer.state_dict()``
    (a checkpoint of one process or of DDP), and the resume failed blaming the model."""
    from test_ddp import free_port

    env = {**os.environ, "PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _FSDP_RESUME],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same after a step" in proc.stdout


def test_fsdp_shards_the_repeated_blocks_and_leaves_the_rest_to_the_root() -> None:
    model = load_model("mu").build()
    blocks = sharded_blocks(model)
    assert blocks and all(any(b is layer for layer in model.layers) for b in blocks)
    assert len(blocks) == len(model.layers)  # not the embeddings (the head is tied to one)

    class Nested(nn.Module):  # layers of [attention, mlp] pairs, each mlp with experts
        def __init__(self) -> None:
            super().__init__()
            experts = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
            mlp = nn.Sequential(nn.Linear(2, 2))
            mlp.experts = experts
            self.layers = nn.ModuleList([nn.ModuleList([nn.Linear(2, 2), mlp])])
            self.shared = nn.ModuleList([self.layers[0][0]])  # listed twice

    nested = Nested()
    attention, mlp = nested.layers[0]
    # the pair is looked into (fully_shard refuses a list); the experts stay the mlp's
    # (not every rank runs every expert); the block listed twice is one unit
    assert sharded_blocks(nested) == [attention, mlp]


# Every built-in model failed under FSDP: ``fully_shard`` refused their ModuleList of
# layers, and, that aside, the head tied to the token embedding (sharded on its own) met a
# sharded weight in the root's forward once the embedding had resharded after its own.
_FSDP_STEPS = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist
    from autotune.config.parallel import ParallelConfig
    from autotune.config.train_config import TrainConfig
    from autotune.engine.wrapping import wrap_model
    from autotune.models.registry import load_model

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                            rank=0, world_size=1)
    for name in sys.argv[1:]:
        for reshard in (True, False):
            spec = load_model(name)
            parallel = ParallelConfig(nproc_per_node=2, strategy="fsdp",
                                      reshard_after_forward=reshard)
            config = TrainConfig(micro_batch=2, seq_len=16, parallel=parallel)
            model = wrap_model(spec.build(), config, torch.device("cpu"), world_size=2)
            batch = spec.make_batch(batch_size=2, seq_len=16,
                                    generator=torch.Generator().manual_seed(0))
            for _ in range(2):
                spec.loss(model, batch).backward()
            print(name, reshard, "stepped", flush=True)
    os._exit(0)
    """
)


@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="this torch build has no gloo backend",
)
def test_the_built_in_models_and_a_tied_head_run_under_fsdp() -> None:
    from fake_lm import FAKE_LM
    from test_ddp import free_port

    names = ["mu", "gpt-small", f"{FAKE_LM}:spec"]
    env = {**os.environ, "PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _FSDP_STEPS, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("stepped") == 2 * len(names), proc.stdout
