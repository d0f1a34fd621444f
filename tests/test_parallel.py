"""Multi-process configs (autotune/config/parallel.py): the knobs, their checks, the search space,
presets and export; real 2-process gloo bursts and ``autotune train`` runs (slow); NCCL
on GPUs (gpu)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from fake_lm import FAKE_LM
from typer.testing import CliRunner

from autotune.burst.supervisor import run_burst
from autotune.config.checks import check_config
from autotune.config.overrides import apply_overrides
from autotune.config.parallel import ParallelConfig, parse_label, space_choices
from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core.errors import ConfigError, UsageError
from autotune.machine.hardware import probe
from autotune.models.registry import load_model
from autotune.preset import (
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    Task,
    load_preset,
    save_preset,
)
from autotune.preset.export import export_preset
from autotune.study.plan.space import SearchSpace
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.train.checkpoint import list_checkpoints

gloo = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="this torch build has no gloo backend",
)
DDP_KNOBS = {
    "nproc_per_node": 2,
    "bucket_cap_mb": 100,
    "gradient_as_bucket_view": True,
    "static_graph": True,
}
FSDP_KNOBS = {"nproc_per_node": 2, "strategy": "fsdp", "reshard_after_forward": False}


def config(**changes: Any) -> TrainConfig:
    return TrainConfig(**{"micro_batch": 1, "grad_accum": 4, "seq_len": 16, **changes})


def fake_lm() -> Any:
    return load_model(f"{FAKE_LM}:spec")


# -- the knobs ------------------------------------------------------------------------------


@pytest.mark.parametrize("ampere", [False, True])
def test_every_searched_label_reads_back_as_its_config(ampere: bool) -> None:
    labels = space_choices(cuda_caps(ampere=ampere))
    assert labels[0] == "ddp-b25"  # plain DDP, torch's defaults, first
    assert ("fsdp-bf16" in labels) is ampere  # bf16 only where the device runs it
    for label in labels:
        assert parse_label(label, 2).label() == label
    with pytest.raises(UsageError, match="cannot read the parallel setting 'zero3'"):
        parse_label("zero3", 2)


def test_a_config_without_parallel_is_todays_single_process_record() -> None:
    single = config()
    assert single.parallel is None and "parallel" not in single.to_dict()
    multi = config(parallel=DDP_KNOBS)
    assert multi.parallel == ParallelConfig(**DDP_KNOBS)
    assert TrainConfig.from_mapping(multi.to_dict()) == multi


@pytest.mark.parametrize(
    ("parallel", "match"),
    [
        ({"nproc_per_node": 1}, "nproc_per_node: expected an integer from 2"),
        ({"nproc_per_node": 2, "strategy": "zero"}, "strategy: expected one of ddp, fsdp"),
        ({**FSDP_KNOBS, "static_graph": True}, "static_graph: not a knob of strategy 'fsdp'"),
        ({"nproc_per_node": 2, "reshard_after_forward": False}, "not a knob of strategy 'ddp'"),
        ({"nproc_per_node": 2, "mixed_precision": "fp8"}, "mixed_precision: expected one of"),
        ({"nproc_per_node": 2, "bucket": 5}, r"parallel.bucket: unknown field \(did you mean"),
        ({"strategy": "ddp"}, "nproc_per_node: missing"),
        (3, "config.parallel: expected a mapping"),
    ],
)
def test_bad_parallel_fields_are_refused_with_their_path(parallel: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config(parallel=parallel)


def test_check_config_refuses_what_the_device_or_the_batch_cannot_run() -> None:
    spec = fake_lm()
    check_config(config(parallel=FSDP_KNOBS), spec=spec, device=cpu_caps())
    cases = [
        (config(grad_accum=3, parallel=DDP_KNOBS), cpu_caps(), "3 does not split over"),
        (
            config(parallel={**FSDP_KNOBS, "mixed_precision": "bf16"}),
            cuda_caps(ampere=False),
            "mixed_precision: bf16 on cuda:0",
        ),
        (
            config(precision="fp16", parallel=FSDP_KNOBS),
            cuda_caps(),
            "fsdp runs with fp32 or bf16",
        ),
    ]
    for cfg, caps, match in cases:
        with pytest.raises(ConfigError, match=match):
            check_config(cfg, spec=spec, device=caps)


def test_set_overrides_reach_the_parallel_knobs() -> None:
    cfg, _ = apply_overrides(
        config(parallel=DDP_KNOBS),
        TrainingDefaults(),
        ["config.parallel.bucket_cap_mb=25", "config.parallel.static_graph=false"],
    )
    assert cfg.parallel is not None and cfg.parallel.label() == "ddp-b25-view"
    single, _ = apply_overrides(cfg, TrainingDefaults(), ["config.parallel=null"])
    assert single.parallel is None
    with pytest.raises(ConfigError, match="this config has no parallel section"):
        apply_overrides(config(), TrainingDefaults(), ["config.parallel.strategy=fsdp"])


def test_set_to_the_other_strategy_puts_the_knobs_it_left_back_at_their_defaults() -> None:
    """``--set config.parallel.strategy=fsdp`` on a DDP preset was refused until the three
    DDP knobs were set back by hand too."""
    cfg, _ = apply_overrides(
        config(parallel=DDP_KNOBS), TrainingDefaults(), ["config.parallel.strategy=fsdp"]
    )
    assert cfg.parallel == ParallelConfig(nproc_per_node=2, strategy="fsdp")
    back, _ = apply_overrides(
        config(parallel={**FSDP_KNOBS, "mixed_precision": "bf16"}),
        TrainingDefaults(),
        ["config.parallel.strategy=ddp", "config.parallel.bucket_cap_mb=50"],
    )
    assert back.parallel == ParallelConfig(nproc_per_node=2, bucket_cap_mb=50)
    # a knob of the strategy left that the same overrides set is checked as it was given
    with pytest.raises(ConfigError, match="bucket_cap_mb: not a knob of strategy 'fsdp'"):
        apply_overrides(
            config(parallel=DDP_KNOBS),
            TrainingDefaults(),
            ["config.parallel.bucket_cap_mb=50", "config.parallel.strategy=fsdp"],
        )


# -- the space ------------------------------------------------------------------------------


def test_the_space_adds_the_parallel_dimension_only_with_several_processes() -> None:
    spec, caps = fake_lm(), cpu_caps()
    single = SearchSpace.for_model(spec, caps, global_batch=8)
    assert single == SearchSpace.for_model(spec, caps, global_batch=8, nproc_per_node=1)
    assert "parallel" not in dict(single.dimensions())
    assert single.naive().parallel is None
    multi = SearchSpace.for_model(spec, caps, global_batch=8, nproc_per_node=2)
    dims = dict(multi.dimensions())
    assert dims["parallel"] == space_choices(caps)
    assert multi.micro_batch == (1, 2, 4)  # 8 would leave one micro-batch for 2 processes
    assert multi.fingerprint() != single.fingerprint()
    naive = multi.naive()
    assert naive.parallel == ParallelConfig(nproc_per_node=2)  # plain DDP
    assert multi.contains(naive) and not single.contains(naive)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        cfg = multi.suggest(study.ask())
        assert cfg.parallel is not None and cfg.parallel.nproc_per_node == 2
        assert cfg.global_batch == 8 and cfg.grad_accum % 2 == 0
        check_config(cfg, spec=spec, device=caps)
        assert multi.contains(cfg)


def test_knob_restricts_the_parallel_settings() -> None:
    spec, caps = fake_lm(), cpu_caps()
    space = SearchSpace.for_model(
        spec, caps, nproc_per_node=2, restrict={"parallel": ["fsdp-keep", "ddp-b100"]}
    )
    assert space.parallel == ("ddp-b100", "fsdp-keep")
    with pytest.raises(UsageError, match="unknown knob 'parallel'"):
        SearchSpace.for_model(spec, caps, restrict={"parallel": ["fsdp"]})
    # the knob that holds the strategy is named where another name was given for it
    with pytest.raises(UsageError, match=r"unknown knob 'strategy'.*: .*\bparallel\b"):
        SearchSpace.for_model(spec, caps, nproc_per_node=2, restrict={"strategy": ["fsdp"]})
    with pytest.raises(UsageError, match="nproc_per_node: expected a positive integer"):
        SearchSpace.for_model(spec, caps, nproc_per_node=0)
    with pytest.raises(UsageError, match="does not split into whole micro-batches"):
        SearchSpace.for_model(spec, caps, global_batch=3, nproc_per_node=2)


# -- presets and export ---------------------------------------------------------------------


def write_preset(path: Path, parallel: Any, **training: Any) -> Path:
    preset = Preset(
        name="tiny-parallel",
        model=ModelRef(name=f"{FAKE_LM}:spec", args={"dim": 8}),
        task=Task(seq_len=16, global_batch=4),
        config=config(parallel=parallel),
        fingerprint=Fingerprint.from_profile(probe(), "cpu"),
        measured=Measured(tokens_per_s=1000.0, peak_memory_bytes=2**28),
        training=TrainingDefaults(
            **{"max_steps": 2, "eval_interval": 2, "eval_batches": 1, **training}
        ),
    )
    return save_preset(preset, path)


def test_a_preset_round_trips_its_process_count_and_knobs(tmp_path: Path) -> None:
    path = write_preset(tmp_path / "p.yaml", FSDP_KNOBS)
    text = path.read_text()
    assert "parallel:\n    nproc_per_node: 2\n    strategy: fsdp" in text
    loaded = load_preset(path)
    assert loaded.config.parallel == ParallelConfig(**FSDP_KNOBS)
    single = write_preset(tmp_path / "one.yaml", None)  # as every preset before it
    assert "  parallel:" not in single.read_text()
    assert load_preset(single).config.parallel is None


def test_torchrun_export_uses_the_presets_process_count(tmp_path: Path) -> None:
    loaded = load_preset(write_preset(tmp_path / "p.yaml", DDP_KNOBS))
    text = export_preset(loaded, "torchrun", preset_ref="p.yaml").text
    assert "--nproc-per-node 2 -m autotune train --preset p.yaml" in text
    assert "# ddp-b100-view-static" in text
    four = export_preset(loaded, "torchrun", nproc=4, preset_ref="p.yaml").text
    assert "--nproc-per-node 4" in four and "measured on 2 processes, not 4" in four
    hf = export_preset(loaded, "hf")
    assert any("config.parallel=ddp-b100-view-static" in line for line in hf.unmapped)


def test_search_refuses_a_bad_process_count_with_exit_2(tmp_path: Path) -> None:
    from autotune.cli.main import app

    result = CliRunner().invoke(
        app,
        [
            "search", "--model", f"{FAKE_LM}:spec", "--budget", "1GB", "--global-batch", "3",
            "--nproc-per-node", "2", "--output", str(tmp_path / "x.yaml"),
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "does not split into whole micro-batches over 2 processes" in result.output
    assert "Traceback" not in result.output


# -- real processes -------------------------------------------------------------------------


@gloo
@pytest.mark.slow
@pytest.mark.parametrize("parallel", [DDP_KNOBS, FSDP_KNOBS], ids=["ddp", "fsdp"])
def test_a_two_process_burst_reports_all_ranks(parallel: dict[str, Any]) -> None:
    cfg = config(micro_batch=2, grad_accum=2, parallel=parallel)
    result = run_burst(fake_lm(), cfg, steps=2, warmup=1, timeout_s=180, verify=True)
    assert result.status == "ok", result.reason
    assert result.tokens_per_s is not None and result.tokens_per_s > 0
    # all ranks' tokens: the config's global batch (2 x 2) per median step
    assert result.step_time_median_s is not None
    assert result.tokens_per_s == pytest.approx(4 * 16 / result.step_time_median_s)
    assert result.peak_memory_bytes and result.host_peak_bytes
    assert result.peak_memory_bytes < result.host_peak_bytes  # one rank's, not the tree's
    assert "busiest of 2 ranks" in result.memory_source
    assert result.checkpoint_bytes and result.eval_loss is not None


@gloo
@pytest.mark.slow
@pytest.mark.parametrize("parallel", [DDP_KNOBS, FSDP_KNOBS], ids=["ddp", "fsdp"])
def test_train_launches_torchrun_for_a_preset_of_two_processes(
    tmp_path: Path, parallel: dict[str, Any]
) -> None:
    preset = write_preset(tmp_path / "p.yaml", parallel, log_interval=1, checkpoint_interval=2)
    temp = tmp_path / "tmp"  # the temporary folder: torchrun left a torchelastic_* folder there
    temp.mkdir()
    env = {
        **os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
        "TMPDIR": str(temp),
    }  # fmt: skip
    env.pop("WORLD_SIZE", None)
    cmd = [
        sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
        "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the preset runs on 2 processes" in proc.stderr
    assert f"x 2 processes ({ParallelConfig(**parallel).label()})" in proc.stdout
    assert "micro_batch 1 x grad_accum 2 x world 2 = global batch 4" in proc.stdout
    assert proc.stdout.count("saved ") == 1  # rank 0 alone writes
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [2]
    # resuming continues from the checkpoint (FSDP: the whole state, loaded into shards)
    more = [*cmd, "--resume", "auto", "--max-steps", "3"]
    proc = subprocess.run(more, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and "step 3/3" in proc.stdout
    assert not list(temp.glob("torchelastic_*")), "torchrun's folder left in the temporary one"
    assert len(list((tmp_path / "run" / "torchrun").iterdir())) == 2  # one per launch


@gloo
@pytest.mark.slow
def test_a_ddp_checkpoint_resumes_under_an_fsdp_preset(tmp_path: Path) -> None:
    """A run trained with DDP goes on sharded: FSDP's loader refused the optimizer state of
    a DDP (or one-process) checkpoint, numbered where FSDP's is named, and the resume
    failed with exit 2, blaming the model's arguments."""
    env = _train_env(tmp_path)
    out = tmp_path / "run"
    for knobs, more in ((DDP_KNOBS, []), (FSDP_KNOBS, ["--resume", "auto", "--max-steps", "3"])):
        preset = write_preset(tmp_path / "p.yaml", knobs, log_interval=1, checkpoint_interval=2)
        cmd = [
            sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
            "--out", str(out), *more,
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and "step 3/3" in proc.stdout
    assert "fsdp" in proc.stdout


def _train_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    return env


def _start_training(tmp_path: Path, stderr: Any) -> tuple[subprocess.Popen[str], Path, Path]:
    """A two-process ``autotune train`` of many steps, its stdout in a file; returned once
    its ranks train (the process, the log, the run folder)."""
    preset = write_preset(tmp_path / "p.yaml", DDP_KNOBS, log_interval=1, max_steps=100_000)
    out, log = tmp_path / "run", tmp_path / "stdout.txt"
    cmd = [
        sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
        "--out", str(out),
    ]  # fmt: skip
    with log.open("w") as stdout:
        proc = subprocess.Popen(
            cmd, env=_train_env(tmp_path), stdout=stdout, stderr=stderr or stdout, text=True
        )
    deadline = time.monotonic() + 240
    while "step 3/" not in log.read_text() and proc.poll() is None:
        assert time.monotonic() < deadline, "the ranks never trained"
        time.sleep(0.2)
    return proc, log, out


@gloo
@pytest.mark.slow
def test_sigterm_stops_a_run_of_two_processes_with_a_checkpoint_and_exit_143(
    tmp_path: Path,
) -> None:
    """A scheduler's SIGTERM to ``autotune train``: the ranks stop after their step with a
    checkpoint and the command says so (exit 143), where torchrun, run as its own program,
    ended in its ``SignalException`` traceback and exit 1."""
    proc, log, out = _start_training(tmp_path, subprocess.PIPE)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.rstrip().endswith("stopped by SIGTERM"), err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert "continue with --resume auto" in log.read_text()
    assert list_checkpoints(out)
    leftover = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert leftover.stdout == ""


@gloo
@pytest.mark.slow
def test_ranks_whose_launcher_was_killed_stop_with_a_checkpoint(tmp_path: Path) -> None:
    """SIGKILL to the launcher (an out-of-memory killer, a second Ctrl-C in torchrun's
    wait): torchrun starts its ranks in sessions of their own, so nothing else reached
    them and they trained on, orphans. Each now gets SIGTERM as its parent dies."""
    proc, log, out = _start_training(tmp_path, None)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 120
    while subprocess.run(["pgrep", "-f", str(out)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the ranks outlived their launcher"
        time.sleep(0.2)
    assert "SIGTERM: stopped at step" in log.read_text()
    assert list_checkpoints(out)


@gloo
@pytest.mark.slow
def test_a_failure_of_rank_zero_is_one_paragraph_per_rank_and_its_exit_code(
    tmp_path: Path,
) -> None:
    """Rank 0 cannot load the data while rank 1 waits for it: rank 0 says why, rank 1 that
    rank 0 failed, the launcher which ranks ended how (exit 2, bad input), and no
    traceback: not gloo's "Connection closed by peer" on rank 1, not torchrun's
    ``ChildFailedError`` and its table. (Rank 1 may be gone before it speaks: torchrun
    stops the other ranks as soon as it sees one fail, every 0.1 s.)"""
    preset = write_preset(tmp_path / "p.yaml", DDP_KNOBS)
    empty = tmp_path / "empty.txt"  # there (checked before the ranks start), but no text
    empty.touch()
    cmd = [
        sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
        "--out", str(tmp_path / "run"), "--data", str(empty),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_train_env(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "Traceback" not in err and "ChildFailedError" not in err, err[-3000:]
    assert err.count("holds no text") == 1, err[-3000:]  # rank 0 alone loads it first
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("the run failed on 2 processes: rank 0 exited with 2"), err[-3000:]
    if "rank 1 exited with 2" in last:
        assert "error: rank 0 failed to load the data; its error says why" in err


def test_a_data_path_that_is_not_there_is_said_once_before_the_ranks_start(
    tmp_path: Path,
) -> None:
    """Every rank said it (the same paragraph twice) and left an empty run folder."""
    preset = write_preset(tmp_path / "p.yaml", DDP_KNOBS)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
        "--out", str(out), "--data", str(tmp_path / "none"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_train_env(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("does not exist") == 1, proc.stderr[-3000:]
    assert "the preset runs on 2 processes" not in proc.stderr
    assert not out.exists()


def test_a_world_size_left_in_the_shell_is_said_where_it_differs_from_the_preset(
    tmp_path: Path,
) -> None:
    """``WORLD_SIZE=1`` in the environment: autotune starts no processes and trains on one,
    which a two-process preset did without a word."""
    preset = write_preset(tmp_path / "p.yaml", DDP_KNOBS, max_steps=1, eval_interval=1)
    cmd = [
        sys.executable, "-m", "autotune", "train", "--preset", str(preset), "--trust-model",
        "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    env = {**_train_env(tmp_path), "WORLD_SIZE": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "warning: WORLD_SIZE=1 in the environment: training on 1 process(es), where the "
        "preset ran on 2" in proc.stderr
    ), proc.stderr[-3000:]
    assert "the preset runs on 2 processes" not in proc.stderr
    assert "step 1/1" in proc.stdout


@gloo
def test_a_run_folder_torchrun_cannot_use_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process (a fresh interpreter was 6-16 s of imports on the 2-core CPU): the
    relaunch under autotune's torchrun launcher replaces the process (``os.execv``), here
    refused."""
    from autotune.cli.main import app

    def no_relaunch(path: str, args: list[str]) -> None:
        raise AssertionError(f"relaunched before the run folder was checked: {args}")

    preset = write_preset(tmp_path / "p.yaml", DDP_KNOBS, log_interval=1, checkpoint_interval=2)
    taken = tmp_path / "a-file"
    taken.write_text("mine\n")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(os, "execv", no_relaunch)
    args = ["train", "--preset", str(preset), "--trust-model", "--out", str(taken)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output[-2000:], result.exception)
    assert "cannot use" in result.output and "it is a file" in result.output
    assert "Traceback" not in result.output and "torch.distributed.run" not in result.output
    assert taken.read_text() == "mine\n"


@gloo
@pytest.mark.slow
def test_a_failure_on_another_rank_is_that_ranks_outcome(tmp_path: Path) -> None:
    """Rank 1 runs out of memory building the model while rank 0 waits for it: the
    burst says so (rank 1 reports its own failure), and no process is left."""
    model = tmp_path / "rank1_oom.py"
    model.write_text(
        "import dataclasses, os\n"
        "from autotune.models.registry import load_model\n"
        f"base = load_model({FAKE_LM!r} + ':spec')\n"
        "def build(**args):\n"
        "    if os.environ.get('RANK') == '1':\n"
        "        raise MemoryError('rank 1 is out of memory')\n"
        "    return base.build_fn(**args)\n"
        "spec = dataclasses.replace(base, build_fn=build)\n"
    )
    spec = load_model(f"{model}:spec")
    result = run_burst(spec, config(parallel=DDP_KNOBS), steps=1, warmup=0, timeout_s=180)
    assert result.status == "oom", result.reason
    assert result.reason.startswith("rank 1: ") and "rank 1 is out of memory" in result.reason
    leftover = subprocess.run(
        ["pgrep", "-f", f"autotune-burst-{os.getpid()}-"], capture_output=True, text=True
    )
    assert leftover.stdout == ""


needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"
)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize(
    "parallel",
    [DDP_KNOBS, {**FSDP_KNOBS, "mixed_precision": "bf16"}],
    ids=["ddp", "fsdp-bf16"],
)
def test_a_two_gpu_nccl_burst(parallel: dict[str, Any]) -> None:
    cfg = config(micro_batch=2, grad_accum=2, parallel=parallel)
    result = run_burst(fake_lm(), cfg, steps=3, warmup=1, timeout_s=300, device="cuda")
    assert result.status == "ok", result.reason
    assert result.tokens_per_s and result.peak_memory_bytes


@pytest.mark.parametrize(
    ("nproc", "cores", "refused"), [(512, 2, True), (3, 2, True), (2, 2, False)]
)
def test_a_cpu_runs_at_most_one_process_per_usable_core(
    nproc: int, cores: int, refused: bool
) -> None:
    cfg = config(grad_accum=nproc * 2, parallel={"nproc_per_node": nproc})
    if refused:
        with pytest.raises(ConfigError, match=f"{nproc} processes on a CPU need as many usable"):
            check_config(cfg, spec=fake_lm(), device=cpu_caps(), cores=cores)
    else:
        check_config(cfg, spec=fake_lm(), device=cpu_caps(), cores=cores)


def test_parallel_problems_come_all_at_once_in_the_house_format() -> None:
    with pytest.raises(ConfigError) as info:
        ParallelConfig.from_mapping({"nproc_per_node": 1, "strategy": "zero", "bucket": 5})
    text = str(info.value)
    for part in (
        "config.parallel.bucket: unknown field",
        "config.parallel.nproc_per_node: expected an integer from 2",
        "config.parallel.strategy: expected one of ddp, fsdp; got 'zero'",
    ):
        assert part in text


def test_a_set_word_yaml_reads_as_a_boolean_is_the_word_where_the_field_holds_text() -> None:
    # YAML 1.1 reads `off` as false; compile holds text ("off", "default", ...)
    cfg = TrainConfig(micro_batch=4, grad_accum=1, seq_len=64, compile="default")
    off, _ = apply_overrides(cfg, TrainingDefaults(), ["config.compile=off"])
    assert off.compile == "off"
    spin, _ = apply_overrides(cfg, TrainingDefaults(), ["config.omp_spin=on"])
    assert spin.omp_spin is True  # a boolean field keeps YAML's reading
    knobs = cfg.replace(knobs={"mode": "fast"})
    word, _ = apply_overrides(knobs, TrainingDefaults(), ["config.knobs.mode=no"])
    assert word.knobs["mode"] == "no"
