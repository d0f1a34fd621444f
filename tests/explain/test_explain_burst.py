"""The profiling burst end to end: the trial's profiled steps come after its timed ones,
``autotune bench --profile`` shows them, and ``autotune search --profile`` profiles the
naive config and the winner in bursts of their own, never its trials."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_models import FAKES
from sleepy_spec import SLEEPY
from typer.testing import CliRunner

import autotune.burst.supervisor
import autotune.machine.hardware
from autotune.burst.result import BurstResult
from autotune.burst.supervisor import run_burst
from autotune.cli.main import app
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model
from autotune.testing.burst import FakeBurst, cpu_profile


class _Profiler:
    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_text('{"schemaVersion": 1, "traceEvents": []}')


def test_the_trace_is_renamed_into_place_not_written_through_the_path(tmp_path: Path) -> None:
    """The profiler wrote through a link to its target, and replaced /dev/null (as root)
    with a file: the trace is written beside the path and renamed over it."""
    from autotune.core.errors import UsageError
    from autotune.explain.breakdown import _export_trace, is_chrome_trace

    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    link = tmp_path / "trace.json"
    link.symlink_to(precious)
    _export_trace(_Profiler(), link)
    assert precious.read_text() == "mine" and not link.is_symlink() and is_chrome_trace(link)
    assert not is_chrome_trace(precious)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt", "trace.json"]
    # torch writes gzip for a name ending .gz: a rerun replaces its own trace
    import gzip

    zipped = tmp_path / "t.json.gz"
    zipped.write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEvents": []}'))
    assert is_chrome_trace(zipped)
    long_name = tmp_path / ("t" * 200 + ".json")  # its temporary name held it twice
    _export_trace(_Profiler(), long_name)
    assert is_chrome_trace(long_name)
    device = tmp_path / "device"
    device.symlink_to("/dev/null")
    with pytest.raises(UsageError, match="character device"):
        _export_trace(_Profiler(), device)
    assert Path("/dev/null").is_char_device()


def test_the_profiled_steps_come_after_the_timed_ones(tmp_path: Path) -> None:
    spec = load_model(f"{FAKES}:fake_spec")
    config = TrainConfig(micro_batch=2, grad_accum=2, seq_len=8)
    trace = tmp_path / "trace.json"
    result = run_burst(
        spec, config, steps=3, warmup=1, timeout_s=120, profile=True, trace_path=str(trace)
    )
    assert result.ok, result.reason
    assert result.timed_steps == 3 and len(result.step_times_s) == 3  # no profiled step
    assert result.breakdown is not None and result.breakdown["steps"] == 3
    assert set(result.breakdown["parts"]) >= {"data_wait", "forward", "backward", "rest"}
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "autotune.backward" for e in events)
    assert BurstResult.from_dict(result.to_dict()).breakdown == result.breakdown
    plain = run_burst(spec, config, steps=1, warmup=0, timeout_s=120)
    assert plain.ok and plain.breakdown is None


def test_bench_profile_prints_the_breakdown_and_an_input_bound_verdict() -> None:
    args = ["bench", "--model", f"{SLEEPY}:spec", "--steps", "2", "--warmup", "1"]
    out = CliRunner().invoke(app, [*args, "--profile", "--json"])
    assert out.exit_code == 0, out.output
    explained = json.loads(out.stdout)["explain"]
    assert explained["verdict"]["kind"] == "input-bound"
    assert explained["verdict"]["knobs"][0] == "num_workers"
    assert explained["breakdown"]["parts"]["data_wait"] > 0
    table = CliRunner().invoke(app, [*args, "--profile"])
    assert table.exit_code == 0, table.output
    assert "where a step's time goes" in table.stdout and "input-bound" in table.stdout
    assert "explain" not in json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)


MODEL_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn
    from autotune.contract.spec import ModelSpec

    spec = ModelSpec(name="toy", description="a toy", task="lm",
                     build_fn=lambda **kw: nn.Linear(4, 4),
                     make_batch_fn=lambda a, b, t, g: {"x": torch.zeros(b, t, 4)},
                     loss_fn=lambda m, b: m(b["x"]).pow(2).mean(), flops_fn=lambda a, s: 1.0,
                     args={}, seq_len=64, max_seq_len=256, global_batch=32)
    """
)


@dataclass
class Recorder:
    """The fake burst, plus what each call asked for profiling; a profiling call gets a
    breakdown back."""

    fake: FakeBurst = field(default_factory=FakeBurst)
    profiled: list[TrainConfig] = field(default_factory=list)
    trial_profile_flags: list[bool] = field(default_factory=list)
    stderr: str = ""

    def __call__(self, spec: Any, config: TrainConfig, **kwargs: Any) -> BurstResult:
        profile = kwargs.pop("profile", False)
        kwargs.pop("trace_path", None)
        if kwargs.get("on_step") is not None:  # a trial
            self.trial_profile_flags.append(profile)
        result = self.fake(spec, config, **kwargs)
        if not profile:
            return result
        self.profiled.append(config)
        parts = {"data_wait": 0.004, "h2d": 0.0, "forward": 0.002, "backward": 0.003,
                 "optimizer": 0.0005, "rest": 0.0005}  # fmt: skip
        breakdown = {"device": "cpu", "steps": 3, "step_s": 0.01, "parts": parts,
                     "op_s": 0.005, "ops_per_step": 20.0}  # fmt: skip
        return BurstResult(**{**result.to_dict(), "breakdown": breakdown})


def _search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[Any, Recorder]:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "toy_model.py").write_text(MODEL_FILE)
    monkeypatch.chdir(tmp_path)
    recorder = Recorder()
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", recorder)
    monkeypatch.setattr(autotune.machine.hardware, "probe", lambda: cpu_profile(ram=16 * 10**9))
    args = ["search", "--model", f"{tmp_path / 'toy_model.py'}:spec", "--budget", "1GB"]
    out = CliRunner().invoke(app, [*args, "--trials", "4", "--steps", "2", "--json", *extra])
    assert out.exit_code == 0, out.output
    recorder.stderr = out.stderr  # the live output
    return json.loads(out.stdout), recorder


def _figures(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(t["config"], t["status"], t["throughput"]) for t in data["trials"]]


def test_search_profile_notes_both_configs_and_records_the_same_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.preset import load_preset

    plain, plain_bursts = _search(tmp_path / "plain", monkeypatch)
    profiled, bursts = _search(tmp_path / "profiled", monkeypatch, "--profile")
    # Profiling changes no recorded figure: a config both searches measured has the same
    # figure in each, and no trial's burst ran the profiler.
    plain_figures = {json.dumps(c, sort_keys=True): f for c, _, f in _figures(plain)}
    both = [
        (c, f) for c, _, f in _figures(profiled) if json.dumps(c, sort_keys=True) in plain_figures
    ]
    assert len(both) >= 2 and all(
        plain_figures[json.dumps(c, sort_keys=True)] == f for c, f in both
    )
    assert bursts.trial_profile_flags and not any(bursts.trial_profile_flags)
    # the naive config once it ran (its verdict orders the refinement), then after the
    # race the naive config and the winner
    assert not plain_bursts.profiled and len(bursts.profiled) == 3
    assert [p["config"].split(" ")[0] for p in profiled["profile"]] == ["naive", "winner"]
    assert profiled["profile"][0]["verdict"]["kind"] == "input-bound"
    notes = load_preset(tmp_path / "profiled" / "best.yaml").notes
    assert "profile of naive" in notes and "profile of winner" in notes
    assert "input-bound" in notes and "num_workers" in notes
    assert "profile of" not in load_preset(tmp_path / "plain" / "best.yaml").notes


def test_a_profiled_search_refines_first_the_knobs_the_naive_verdict_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The naive config is input-bound (the recorder's breakdown: 40% data wait): the
    first refinement moves num_workers, which the plain search's refinement never moves,
    and the search says why."""
    plain, _ = _search(tmp_path / "plain", monkeypatch)
    profiled, bursts = _search(tmp_path / "profiled", monkeypatch, "--profile")

    def refinements(data: dict[str, Any]) -> list[dict[str, Any]]:
        return [t["config"] for t in data["trials"] if t.get("role") == "refine"]

    assert refinements(profiled), profiled["trials"]
    assert refinements(profiled)[0]["num_workers"] > 0
    assert all(c["num_workers"] == 0 for c in refinements(plain))
    live = " ".join(bursts.stderr.split())
    assert "the naive config is input-bound" in live and "are refined first" in live
