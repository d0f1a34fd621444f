"""The knob registry (autotune/config/knobs.py): every TrainConfig field is one entry, and
the checks, the search space, the bench flags, the docs table and the export names come
from the entries, so a knob added to a config class needs no other code."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

from autotune.cli.bench import config_options
from autotune.config.checks import check_config
from autotune.config.knobs import (
    EXPORT_FRAMEWORKS,
    BackendFlag,
    EnvSetting,
    Search,
    backend_settings,
    docs_table,
    export_names,
    knob,
    on_cuda,
    registry,
    searched_knobs,
)
from autotune.config.train_config import KNOBS, TrainConfig
from autotune.core.errors import ConfigError, UsageError
from autotune.study.plan.space import BUILTIN_KNOBS, CPU_KNOBS, CUDA_KNOBS, SWITCHES, SearchSpace
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.toy import toy_spec

DOCS = Path(__file__).resolve().parent.parent / "docs" / "preset-format.md"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TurboConfig(TrainConfig):
    """TrainConfig and one made-up CUDA switch, declared only here."""

    turbo: bool = knob(
        default=False,
        runs=(on_cuda("a turbo needs a CUDA device, not {device}"),),
        search=Search(order=13, switch=True, only=(on_cuda("{name} is only searched on CUDA"),)),
        env=EnvSetting("TURBO_MODE", "on"),  # read when torch loads: a restart
        backend=(BackendFlag("backends.cudnn.deterministic", cuda=True),),
        label="turbo!",
        help="The made-up turbo.",
        exports={"hf": "turbo_mode"},
        doc="a made-up switch",
        example="`true`",
    )


def test_every_field_is_one_entry_in_field_order() -> None:
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    assert [k.name for k in KNOBS] == fields
    for k in KNOBS:
        assert k.doc and k.example, f"{k.name} has no docs line"
        assert k.applier, f"{k.name} does not say what applies it"
    defaults = TrainConfig(micro_batch=1, seq_len=8).to_dict()
    assert {k.name: k.default for k in KNOBS if k.name in defaults and not k.required} == {
        name: value for name, value in defaults.items() if name not in ("micro_batch", "seq_len")
    }


def test_a_field_without_an_entry_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bare(TrainConfig):
        bare: int = 0

    with pytest.raises(TypeError, match=r"Bare\.bare is not declared with knob\(\)"):
        registry(Bare)


def test_the_searched_knobs_are_read_once_per_class() -> None:
    # A space asks for them for every config it makes: sorted again each time, they were
    # most of a grid's check (355,000 calls, 7 of 11 s, in test_space's CUDA grid).
    assert searched_knobs(TrainConfig) is searched_knobs(TrainConfig)
    assert [k.name for k in searched_knobs(TrainConfig)][:2] == ["micro_batch", "seq_len"]


def test_the_searched_knobs_keep_their_order() -> None:
    assert BUILTIN_KNOBS == (
        "micro_batch",
        "seq_len",
        "precision",
        "activation_checkpointing",
        "compile",
        "num_workers",
        "pin_memory",
        "prefetch_factor",
    )
    assert CUDA_KNOBS == (
        "fused_optimizer",
        "expandable_segments",
        "cudnn_benchmark",
        "channels_last",
        "fp8_linears",
    )
    assert CPU_KNOBS == ("omp_spin",)
    assert sorted((*CUDA_KNOBS, *CPU_KNOBS)) == sorted(SWITCHES)  # no space holds both


def test_the_committed_docs_table_is_the_generated_one() -> None:
    text = DOCS.read_text()
    section = text[text.index("### `config`") :]
    start = section.index("| field | type | meaning | example |")
    end = section.index("\n\n", start)
    committed = section[start:end] + "\n"
    assert committed == docs_table(), (
        "docs/preset-format.md's config table differs from the registry: paste "
        "autotune.config.knobs.docs_table() there"
    )


def test_field_checks_report_every_problem_with_a_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig(micro_batch=0, seq_len=8, compile="max-autotun", omp_spin=1, knobs=[])
    problems = info.value.problems
    assert "config.micro_batch: expected a positive integer, got 0" in problems
    assert any(
        p.startswith("config.compile: expected one of off, default") and "max-autotune'?" in p
        for p in problems
    )
    assert "config.omp_spin: expected true or false, got 1" in problems
    assert "config.knobs: expected a mapping, got list" in problems


def test_a_config_file_gets_its_unknown_keys_and_its_bad_values_in_one_error() -> None:
    data = {"micro_batch": 0, "precison": "bf16", "precision": "fp8", "seq_len": 8}
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_mapping(data, path="preset.config")
    assert info.value.problems == [
        "preset.config.precison: unknown field (did you mean 'precision'?)",
        "preset.config.micro_batch: expected a positive integer, got 0",
        "preset.config.precision: expected one of fp32, tf32, bf16, fp16; got 'fp8'",
    ]
    with pytest.raises(ConfigError) as missing:
        TrainConfig.from_mapping({"precision": "bf16"})
    assert missing.value.problems == [
        "config.micro_batch: missing required field",
        "config.seq_len: missing required field",
    ]


def test_export_names_come_from_the_entries() -> None:
    hf = export_names("hf")
    assert list(hf) == [k.name for k in KNOBS]
    assert hf["micro_batch"] == "per_device_train_batch_size"
    assert hf["num_workers"] == "dataloader_num_workers"
    assert hf["omp_spin"] is None  # no trainer's settings carry it
    assert export_names("lightning")["cudnn_benchmark"] == "trainer.benchmark"
    assert export_names("accelerate")["precision"] == "mixed_precision"
    assert set(EXPORT_FRAMEWORKS) == {"hf", "lightning", "accelerate", "deepspeed"}
    with pytest.raises(ValueError, match="framework: expected one of"):
        export_names("keras")


# -- a knob added to a copy of the registry (a subclass) appears everywhere ---------------------


def test_an_added_knob_is_checked_on_its_own_and_against_the_device() -> None:
    with pytest.raises(ConfigError, match=r"config\.turbo: expected true or false, got 'yes'"):
        TurboConfig(micro_batch=1, seq_len=8, turbo="yes")
    on = TurboConfig(micro_batch=1, seq_len=8, turbo=True)
    assert on.to_dict()["turbo"] is True
    check_config(on, spec=toy_spec(), device=cuda_caps())
    with pytest.raises(ConfigError, match=r"config\.turbo: a turbo needs a CUDA device, not cpu"):
        check_config(on, spec=toy_spec(), device=cpu_caps())


def test_an_added_knob_is_a_dimension_of_the_space_where_it_applies() -> None:
    cuda = SearchSpace.for_model(toy_spec(), cuda_caps(), config_type=TurboConfig)
    assert cuda.dimensions()[-1] == ("turbo", (False, True))
    assert cuda.turbo == (False, True)
    configs = list(cuda.grid())
    assert {c.turbo for c in configs} == {False, True}
    assert all(isinstance(c, TurboConfig) and cuda.contains(c) for c in configs[:50])
    assert len(configs) == cuda.size()
    assert any(c.turbo for c in cuda.neighbours(cuda.guess(), kernels=True))
    cpu = SearchSpace.for_model(toy_spec(), cpu_caps(), config_type=TurboConfig)
    assert "turbo" not in dict(cpu.dimensions())
    assert not any(c.turbo for c in cpu.grid())
    with pytest.raises(UsageError, match="turbo is only searched on CUDA"):
        SearchSpace.for_model(
            toy_spec(), cpu_caps(), config_type=TurboConfig, restrict={"turbo": ["on"]}
        )


def test_an_added_knob_gets_a_bench_flag_a_docs_line_and_its_export_names() -> None:
    options = {p.name: p for p in config_options(TurboConfig)}
    assert list(options)[-1] == "turbo"
    base, option = typing.get_args(options["turbo"].annotation)
    assert base is bool and option.default == "--turbo" and option.help == "The made-up turbo."
    assert options["turbo"].default is False
    assert options["turbo"].kind is inspect.Parameter.KEYWORD_ONLY
    assert (
        "| `turbo` | true/false; default false | a made-up switch; `TURBO_MODE=on` in the "
        "environment of the burst's process and of `autotune train`, which starts itself "
        "again with it: it is read once, when torch loads | `true` |"
    ) in docs_table(TurboConfig)
    assert export_names("hf", TurboConfig)["turbo"] == "turbo_mode"
    assert export_names("lightning", TurboConfig)["turbo"] is None


def test_the_bench_flags_are_the_knobs_with_help() -> None:
    options = {p.name: typing.get_args(p.annotation)[1].default for p in config_options()}
    assert options["num_workers"] == "--workers"
    assert options["compile"] == "--compile"
    assert options["omp_spin"] == "--omp-spin"
    assert "knobs" not in options and "parallel" not in options
    assert [p.default for p in config_options() if p.name in ("micro_batch", "seq_len")] == [
        8,
        None,
    ]


def test_an_added_knob_sets_its_environment_and_its_torch_flags() -> None:
    from autotune.machine import omp

    on = TurboConfig(micro_batch=1, seq_len=8, turbo=True)
    off = TurboConfig(micro_batch=1, seq_len=8)
    assert omp.environment_for(on, {"A": "1"}) == {"A": "1", "TURBO_MODE": "on"}
    assert omp.environment_for(off, {"A": "1"}) == {"A": "1"}
    assert omp.restart_needed(on, {}) and not omp.restart_needed(on, {"TURBO_MODE": "on"})
    problem = omp.mismatch(on, {})
    assert problem is not None and problem.startswith("config.turbo:")
    assert "TURBO_MODE=on python" in problem
    assert TurboConfig.__dataclass_fields__["turbo"].metadata["knob"].env.restart
    flags = {flag.target: value for flag, value in backend_settings(on, cuda=True)}
    assert flags["backends.cudnn.deterministic"] is True
    assert (
        flags["backends.cudnn.benchmark"] is False and flags["backends.cudnn.allow_tf32"] is False
    )
    cpu = {flag.target for flag, _ in backend_settings(on, cuda=False)}
    assert cpu == {"set_float32_matmul_precision"}  # the CUDA-only flags stay unset on a CPU


def test_an_added_switch_is_shown_by_its_label() -> None:
    from autotune.study.trials.records import summarize_config

    on = TurboConfig(micro_batch=1, seq_len=8, turbo=True).to_dict()
    assert summarize_config(on, config_type=TurboConfig).split()[-1] == "turbo!"
    assert "turbo!" not in summarize_config({**on, "turbo": False}, config_type=TurboConfig)


def test_an_added_knob_is_exported_under_its_names_and_listed_where_it_has_none() -> None:
    from fake_presets import make_preset

    from autotune.preset.export import export_preset

    config = TurboConfig(micro_batch=8, seq_len=64, grad_accum=4, turbo=True)
    preset = dataclasses.replace(make_preset(), config=config)
    hf = export_preset(preset, "hf")
    assert hf.data is not None and hf.data["turbo_mode"] is True
    assert not any(line.startswith("config.turbo") for line in hf.unmapped)
    lightning = export_preset(preset, "lightning")
    assert "config.turbo=true: TURBO_MODE=on in the environment before the script starts " in (
        "\n".join(lightning.unmapped)
    )
    assert "turbo" not in str(lightning.data)
    off = dataclasses.replace(preset, config=config.replace(turbo=False))
    assert not any("turbo" in line for line in export_preset(off, "lightning").unmapped)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderConfig(TrainConfig):
    """TrainConfig and one made-up DataLoader argument, declared only here."""

    loader_timeout: int = knob(
        default=0,
        low=0,
        needs="num_workers",
        loader_arg="timeout",
        help="The made-up loader timeout.",
        doc="a made-up DataLoader argument",
    )


def test_an_added_loader_knob_reaches_the_dataloader_without_other_code() -> None:
    from autotune.data.loader import loader_kwargs

    with_workers = loader_kwargs(
        LoaderConfig(micro_batch=2, seq_len=8, num_workers=1, loader_timeout=5)
    )
    assert with_workers["timeout"] == 5 and with_workers["batch_size"] == 2
    without = loader_kwargs(LoaderConfig(micro_batch=2, seq_len=8))
    assert "timeout" not in without  # it needs workers, as prefetch_factor does
    plain = loader_kwargs(TrainConfig(micro_batch=2, seq_len=8, num_workers=1, prefetch_factor=3))
    assert plain == {
        "drop_last": True,
        "batch_size": 2,
        "num_workers": 1,
        "pin_memory": False,
        "prefetch_factor": 3,
        "persistent_workers": False,
        "worker_init_fn": plain["worker_init_fn"],
    }
