"""The search space: pruned by the device and the model, restricted by the knobs option."""

from __future__ import annotations

import optuna
import pytest

from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import Knob, ModelSpec
from autotune.core.device_caps import DeviceCaps
from autotune.core.errors import ConfigError, UsageError
from autotune.study.plan.space import SearchSpace, parse_knob_args, parse_seq_len
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.toy import toy_spec


def _spec(
    *, checkpointing: bool = True, knobs: tuple[Knob, ...] = (), global_batch: int = 32
) -> ModelSpec:
    return toy_spec(checkpointing=checkpointing, knobs=knobs, global_batch=global_batch)


BLOCK = Knob(name="block_group", values=(1, 2, 4), default=1)


def test_cpu_space_is_pruned_by_the_device() -> None:
    space = SearchSpace.for_model(_spec(knobs=(BLOCK,)), cpu_caps(), cpu_count=2)
    assert space.precision == ("fp32", "bf16")  # no fp16 (CUDA only), no tf32
    assert space.compile == ("off", "default")
    assert space.num_workers == (0, 1, 2)
    assert space.pin_memory == (False,) and space.prefetch_factor == (None,)
    assert space.activation_checkpointing == (False, True)
    assert space.knobs == {"block_group": (1, 2, 4)}
    assert space.micro_batch == (1, 2, 4, 8, 16, 32)


def test_cuda_space_has_every_precision_and_compile_mode() -> None:
    space = SearchSpace.for_model(_spec(), cuda_caps(), cpu_count=16)
    assert space.precision == ("fp32", "tf32", "bf16", "fp16")
    assert space.compile == (
        "off",
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    )
    assert space.num_workers == (0, 1, 2, 3, 4)  # capped at 4
    assert space.pin_memory == (False, True)
    older = SearchSpace.for_model(_spec(), cuda_caps(ampere=False), cpu_count=16)
    assert older.precision == ("fp32", "fp16")


def test_no_compile_and_no_checkpointing_where_unavailable() -> None:
    space = SearchSpace.for_model(_spec(checkpointing=False), cpu_caps(compile=False))
    assert space.compile == ("off",)
    assert space.activation_checkpointing == (False,)


def test_micro_batches_divide_the_global_batch_which_stays_fixed() -> None:
    space = SearchSpace.for_model(_spec(global_batch=24), cpu_caps())
    assert space.micro_batch == (1, 2, 4, 8)
    for config in space.grid():
        assert config.micro_batch * config.grad_accum == 24


@pytest.mark.parametrize("caps", [cpu_caps(), cuda_caps(), cuda_caps(ampere=False)])
def test_every_config_of_the_grid_passes_check_config(caps: DeviceCaps) -> None:
    spec = _spec(knobs=(BLOCK,), global_batch=8)
    space = SearchSpace.for_model(spec, caps, seq_len=[64, 128], cpu_count=2)
    configs = list(space.grid())
    assert len(configs) == space.size()
    assert len({space.key(c) for c in configs}) == len(configs)  # all distinct
    for config in configs:
        check_config(config, spec=spec, device=caps)
        assert space.contains(config)


def test_sampled_configs_are_in_the_space_and_pass_check_config() -> None:
    spec = _spec(knobs=(BLOCK,))
    caps = cuda_caps()
    space = SearchSpace.for_model(spec, caps, cpu_count=8)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(40):
        trial = study.ask()
        config = space.suggest(trial)
        check_config(config, spec=spec, device=caps)
        assert space.contains(config)
        if config.num_workers == 0:
            assert not config.pin_memory and config.prefetch_factor is None
        study.tell(trial, 1.0)


def test_enqueued_params_give_back_the_same_config() -> None:
    space = SearchSpace.for_model(_spec(knobs=(BLOCK,)), cuda_caps(), cpu_count=8)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    for config in (space.naive(), space.smallest(), *list(space.grid())[-3:]):
        study.enqueue_trial(space.params_of(config))
        trial = study.ask()
        assert space.suggest(trial) == config
        study.tell(trial, 1.0)


EVERY = Knob(
    name="checkpoint_every", values=(1, 2, 4), default=1, only_with="activation_checkpointing"
)


def test_a_knob_that_needs_checkpointing_is_turned_only_with_it() -> None:
    spec = _spec(knobs=(BLOCK, EVERY), global_batch=8)
    space = SearchSpace.for_model(spec, cpu_caps(), cpu_count=2)
    plain = SearchSpace.for_model(_spec(knobs=(BLOCK,), global_batch=8), cpu_caps(), cpu_count=2)
    configs = list(space.grid())
    on = [c for c in configs if c.activation_checkpointing]
    assert len(configs) == space.size() == plain.size() + len(on) * 2 // 3
    assert len({space.key(c) for c in configs}) == len(configs)  # all distinct
    assert not any("checkpoint_every" in c.knobs for c in configs if not c.activation_checkpointing)
    assert {c.knobs["checkpoint_every"] for c in on} == {1, 2, 4}
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    sampled = []
    for _ in range(60):
        trial = study.ask()
        config = space.suggest(trial)
        assert space.contains(config)
        assert config.activation_checkpointing == ("checkpoint_every" in config.knobs)
        assert ("knobs.checkpoint_every.idx" in trial.params) == config.activation_checkpointing
        study.enqueue_trial(space.params_of(config))
        again = study.ask()
        assert space.suggest(again) == config
        study.tell(again, 1.0)
        study.tell(trial, 1.0)
        sampled.append(config.knobs.get("checkpoint_every", 1))
    assert set(sampled) == {1, 2, 4}
    off = space.make_config({**space.values_of(space.naive()), "knobs.checkpoint_every": 4})
    assert off == space.naive()  # without checkpointing, the knob is left out: its default


def test_naive_and_smallest() -> None:
    space = SearchSpace.for_model(_spec(knobs=(BLOCK,)), cuda_caps(), seq_len=[64, 128, 256])
    naive = space.naive()
    assert naive.precision == "fp32" and naive.micro_batch == 1 and naive.grad_accum == 32
    assert naive.compile == "off" and naive.num_workers == 0
    assert not naive.activation_checkpointing and naive.knobs == {"block_group": 1}
    assert naive.seq_len == 128  # the model's default length
    small = space.smallest()
    assert small.activation_checkpointing and small.micro_batch == 1 and small.seq_len == 64
    assert small.precision == "fp16"  # half precision saves memory on CUDA
    cpu_small = SearchSpace.for_model(_spec(), cpu_caps()).smallest()
    assert cpu_small.precision == "fp32"  # emulated bf16 is no memory win worth its cost


def test_guess_is_a_hand_tuners_first_try() -> None:
    cpu = SearchSpace.for_model(_spec(), cpu_caps(), cpu_count=2).guess()
    assert (cpu.micro_batch, cpu.precision, cpu.num_workers) == (8, "fp32", 0)
    native = SearchSpace.for_model(_spec(), cpu_caps(bf16_native=True), cpu_count=2).guess()
    assert native.precision == "bf16" and not native.activation_checkpointing
    gpu = SearchSpace.for_model(_spec(), cuda_caps(ampere=False), cpu_count=8).guess()
    assert (gpu.precision, gpu.num_workers, gpu.pin_memory) == ("fp16", 2, True)
    assert gpu.compile == "off"


def test_naive_follows_restrictions() -> None:
    space = SearchSpace.for_model(
        _spec(), cpu_caps(), restrict={"precision": ["bf16"], "micro_batch": ["4", "8"]}
    )
    assert space.naive().precision == "bf16"
    assert space.naive().micro_batch == 4


def test_knob_restrictions_narrow_the_space() -> None:
    spec = _spec(knobs=(BLOCK,))
    space = SearchSpace.for_model(
        spec,
        cuda_caps(),
        cpu_count=8,
        restrict=parse_knob_args(
            [
                "precision=fp16,bf16",
                "compile=off",
                "block_group=4,2",
                "activation_checkpointing=on",
                "num_workers=0",
            ]
        ),
    )
    assert space.precision == ("bf16", "fp16")  # the space's own order
    assert space.compile == ("off",)
    assert space.knobs["block_group"] == (2, 4)
    assert space.activation_checkpointing == (True,)
    assert space.size() == 6 * 2 * 2 * 2 * 2  # x fused AdamW x expandable segments (CUDA)
    also = SearchSpace.for_model(spec, cuda_caps(), restrict={"knobs.block_group": ["1"]})
    assert also.knobs["block_group"] == (1,)


def test_unknown_knob_is_a_usage_error_listing_the_knobs() -> None:
    with pytest.raises(UsageError) as info:
        SearchSpace.for_model(_spec(knobs=(BLOCK,)), cpu_caps(), restrict={"precison": ["bf16"]})
    message = str(info.value)
    assert "unknown knob 'precison'" in message and "did you mean 'precision'" in message
    assert "block_group" in message and "micro_batch" in message


def test_unknown_value_is_a_usage_error_listing_the_values() -> None:
    with pytest.raises(UsageError, match=r"unknown value 'fp8'.*fp32, bf16"):
        SearchSpace.for_model(_spec(), cpu_caps(), restrict={"precision": ["fp8"]})
    with pytest.raises(UsageError, match=r"micro_batch.*unknown value '3'"):
        SearchSpace.for_model(_spec(), cpu_caps(), restrict={"micro_batch": ["3"]})
    with pytest.raises(UsageError, match=r"block_group.*unknown value '3'.*1, 2, 4"):
        SearchSpace.for_model(_spec(knobs=(BLOCK,)), cpu_caps(), restrict={"block_group": ["3"]})
    # True == 1 in Python: [True] was taken as micro_batch 1
    with pytest.raises(UsageError, match=r"micro_batch: unknown value True"):
        SearchSpace.for_model(_spec(), cpu_caps(), restrict={"micro_batch": [True]})
    assert SearchSpace.for_model(_spec(), cpu_caps(), restrict={"micro_batch": [1]}).micro_batch


def test_a_value_this_device_cannot_run_says_why() -> None:
    with pytest.raises(UsageError, match="fp16 needs a CUDA device"):
        SearchSpace.for_model(_spec(), cpu_caps(), restrict={"precision": ["fp16"]})
    with pytest.raises(UsageError, match="does not support activation checkpointing"):
        SearchSpace.for_model(
            _spec(checkpointing=False), cpu_caps(), restrict={"activation_checkpointing": ["true"]}
        )
    with pytest.raises(UsageError, match="grad_accum is derived"):
        SearchSpace.for_model(_spec(), cpu_caps(), restrict={"grad_accum": ["2"]})


@pytest.mark.parametrize("caps", [cpu_caps(), cuda_caps(ampere=False)], ids=["cpu", "pre-ampere"])
def test_the_space_and_check_config_use_the_devices_precision_rule(caps: DeviceCaps) -> None:
    assert SearchSpace.for_model(_spec(), caps).precision == caps.precisions
    for precision in ("tf32", "bf16", "fp16"):
        problem = caps.precision_problem(precision)
        if problem is None:
            continue
        with pytest.raises(UsageError) as info:
            SearchSpace.for_model(_spec(), caps, restrict={"precision": [precision]})
        assert problem in str(info.value)
        with pytest.raises(ConfigError) as refused:
            check_config(
                TrainConfig(micro_batch=1, seq_len=8, precision=precision),
                spec=_spec(),
                device=caps,
            )
        assert f"config.precision: {problem}" in refused.value.problems


@pytest.mark.parametrize("bad", ["precision", "precision=", "=bf16", "precision:bf16"])
def test_malformed_knob_args(bad: str) -> None:
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_knob_args([bad])


def test_knob_given_twice() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_knob_args(["compile=off", "compile=default"])


def test_parse_seq_len() -> None:
    assert parse_seq_len("128") == [128]
    assert parse_seq_len("64-256") == [64, 128, 256]
    assert parse_seq_len("100-300") == [128, 256]
    assert parse_seq_len("64-1024", max_seq_len=256) == [64, 128, 256]
    for bad in ("abc", "64-", "256-64", "0", "100-120"):
        with pytest.raises(UsageError, match="seq_len"):  # the option's field, not a flag
            parse_seq_len(bad)
    with pytest.raises(UsageError, match="at most 256"):
        parse_seq_len("512", max_seq_len=256)
    # lengths given outright are not dropped in silence: a range alone is cut at the limit
    with pytest.raises(UsageError, match=r"seq_len \[128, 1024\]: the model accepts at most 256"):
        parse_seq_len([128, 1024], max_seq_len=256)


def test_seq_len_above_the_model_limit() -> None:
    with pytest.raises(UsageError, match="at most 512"):
        SearchSpace.for_model(_spec(), cpu_caps(), seq_len=[1024])


# micro-batch 4, fp32, nothing else turned on: where the neighbour tests start
PLAIN_MB4 = {
    "micro_batch": 4,
    "seq_len": 128,
    "precision": "fp32",
    "activation_checkpointing": False,
    "compile": "off",
    "num_workers": 0,
}


def test_neighbours_stay_in_the_space() -> None:
    space = SearchSpace.for_model(_spec(), cpu_caps(), cpu_count=2)
    config = space.make_config(PLAIN_MB4)
    found = {(c.micro_batch, c.num_workers) for c in space.neighbours(config)}
    assert found == {(8, 0), (2, 0), (4, 1)}


def test_kernel_neighbours_put_the_discrete_choices_before_the_steps() -> None:
    knobs = (
        Knob(name="kernel", values=("fused", "plain", "tiled"), default="fused"),
        Knob(name="group", values=(1, 2, 4, 8), default=8),
        Knob(name="loss", values=("full", "chunked"), default="full", refine_late=True),
    )
    space = SearchSpace.for_model(_spec(knobs=knobs), cpu_caps(), cpu_count=2)
    values = {**PLAIN_MB4, "knobs.kernel": "plain", "knobs.group": 2, "knobs.loss": "full"}
    config = space.make_config(values)
    assert space.neighbours(config) == space.neighbours(config, kernels=False)
    found = space.neighbours(config, workers=False, kernels=True)
    moved = [
        {k: v for k, v in space.values_of(c).items() if v != space.values_of(config)[k]}
        for c in found
    ]
    assert moved == [
        # the discrete kernel choices first: a short search may have time for one or two
        {"compile": "default"},
        {"knobs.kernel": "fused"},
        {"knobs.kernel": "tiled"},
        {"micro_batch": 8},
        {"micro_batch": 2},
        {"knobs.group": 1},  # a numeric knob: one value up and down
        {"knobs.group": 4},
        {"knobs.loss": "chunked"},  # refined late: after the steps, with the numeric ones
        {"omp_spin": True},  # a switch: flipped on its own, last
    ]
    compiled = space.make_config({**values, "compile": "default"})
    assert not any(c.compile == "off" for c in space.neighbours(compiled, kernels=True))
    no_compile = SearchSpace.for_model(
        _spec(knobs=knobs), cpu_caps(), restrict={"compile": ["off"]}
    )
    assert all(c.compile == "off" for c in no_compile.neighbours(config, kernels=True))


def test_fingerprint_changes_with_the_space() -> None:
    a = SearchSpace.for_model(_spec(), cpu_caps())
    b = SearchSpace.for_model(_spec(), cpu_caps(), restrict={"compile": ["off"]})
    assert a.fingerprint() == SearchSpace.for_model(_spec(), cpu_caps()).fingerprint()
    assert a.fingerprint() != b.fingerprint()
