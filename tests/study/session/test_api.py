"""search(): the Python API, its arguments, and a run with the real burst runner."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from autotune.core.errors import AutotuneError, BudgetError, UsageError
from autotune.core.units import parse_duration
from autotune.study import (
    SearchLimits,
    SearchMachine,
    SearchOutput,
    SearchScope,
    SearchStudy,
    search,
)
from autotune.testing.burst import GB, FakeBurst, cpu_profile, run, toy_spec


def test_autotune_search_is_the_python_api(tmp_path: Path) -> None:
    import autotune

    assert autotune.search is search and "search" in autotune.__all__
    result = autotune.search(
        toy_spec(),
        budget="1GB",
        machine=SearchMachine(hardware=cpu_profile(), burst_fn=FakeBurst()),
        limits=SearchLimits(trials=3, steps=4, warmup=1),
        study=SearchStudy(runs_dir=tmp_path / "runs"),
        output=SearchOutput(output=tmp_path / "best.yaml"),
    )
    assert isinstance(result, autotune.SearchResult)
    assert result.best is not None and result.preset_path == str(tmp_path / "best.yaml")


def test_importing_autotune_loads_neither_torch_nor_optuna() -> None:
    # what keeps `autotune --help` instant, now that the package binds autotune.search
    code = "import sys, autotune; print(sorted({'torch', 'optuna'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_autotune_search_is_a_function_not_a_module() -> None:
    # the search lives in the package autotune.study; no module shadows the function
    import autotune

    assert not isinstance(autotune.search, types.ModuleType)
    assert autotune.search.__module__ == "autotune.study.session.api"


# -- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"timeout": "soon"}, "cannot read timeout 'soon'"),
        ({"timeout": 0}, "timeout must be a positive duration"),
        ({"burst_timeout": "long"}, "cannot read burst_timeout 'long'"),
    ],
)
def test_a_bad_duration_names_the_parameter(
    tmp_path: Path, kwargs: dict[str, Any], expected: str
) -> None:
    burst = FakeBurst()
    with pytest.raises(UsageError, match=expected):
        run(tmp_path, burst, **kwargs)
    assert not burst.calls


@pytest.mark.parametrize(
    ("text", "seconds"), [("600", 600.0), ("600s", 600.0), ("10m", 600.0), ("1.5h", 5400.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(seconds) == seconds
    with pytest.raises(UsageError, match="cannot read --timeout 'soon'"):
        parse_duration("soon", what="--timeout")


@pytest.mark.parametrize("name", ["..", ".", "", "../elsewhere", "a/b", "a\\b", "/tmp/x"])
def test_a_study_name_must_be_a_plain_name(tmp_path: Path, name: str) -> None:
    """The default storage puts the study in <runs>/<name>/: a path would leave the runs
    folder (``..`` wrote <runs>/../study.db)."""
    burst = FakeBurst()
    with pytest.raises(UsageError, match=r"^study .*: expected a plain name"):
        run(tmp_path / "in", burst, study=name, output=None)
    assert not burst.calls
    assert not list(tmp_path.rglob("study.db"))  # nothing written, inside or outside


def test_names_the_folder_slug_would_merge_get_folders_of_their_own(tmp_path: Path) -> None:
    first = run(tmp_path, FakeBurst(), trials=2, study="café", output=None)
    second = run(tmp_path, FakeBurst(), trials=2, study="cafè", output=None)
    plain = run(tmp_path, FakeBurst(), trials=2, study="caf-plain", output=None)
    folders = {Path(r.storage.removeprefix("sqlite:///")).parent for r in (first, second, plain)}
    assert len(folders) == 3
    assert {f.name for f in folders} >= {"caf-plain"}  # a plain name is its own folder
    assert all(f.parent == tmp_path / "runs" for f in folders)


def test_a_study_in_the_older_folder_layout_is_resumed_there(tmp_path: Path) -> None:
    from autotune.study.storage.search_study import study_folder

    runs = tmp_path / "runs"
    assert study_folder(runs, "my study") != "my-study"
    import optuna

    old = run(tmp_path, FakeBurst(), trials=2, study="my-study", output=None)
    optuna.create_study(study_name="my study", storage=old.storage)  # as searches once wrote
    assert study_folder(runs, "my study") == "my-study"


def test_a_study_named_as_another_s_slug_never_takes_its_folder(tmp_path: Path) -> None:
    """'my study' (in my-study-<hash>), then a study named 'my-study' (in my-study): a
    rerun of 'my study' went to the second's file and started over there."""
    first = run(tmp_path, FakeBurst(), trials=2, study="my study", output=None)
    run(tmp_path, FakeBurst(), trials=2, study="my-study", output=None)
    again = run(tmp_path, FakeBurst(), trials=3, study="my study", output=None)
    assert again.storage == first.storage  # resumed in its own file, not begun in the other


def test_the_runs_folder_may_start_with_a_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.report.data import load_report_data

    monkeypatch.setenv("HOME", str(tmp_path))
    result = run(tmp_path, FakeBurst(), trials=2, study="s1", runs_dir="~/runs", output=None)
    assert result.storage == f"sqlite:///{tmp_path / 'runs' / 's1' / 'study.db'}"
    assert load_report_data("s1", runs_dir="~/runs").study_name == "s1"


def test_a_study_that_cannot_be_opened_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.study.session import api

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise UsageError("the storage refused")

    monkeypatch.setattr(api, "open_search_study", refused)
    with pytest.raises(UsageError, match="the storage refused"):
        run(tmp_path, FakeBurst(), study="gone", output=None)
    assert not (tmp_path / "runs").exists()
    (tmp_path / "runs").mkdir()  # a runs folder the user had stays
    with pytest.raises(UsageError, match="the storage refused"):
        run(tmp_path, FakeBurst(), study="gone", output=None)
    assert (tmp_path / "runs").is_dir() and not any((tmp_path / "runs").iterdir())


def test_a_budget_below_a_megabyte_is_not_named_0mb() -> None:
    from autotune.study.storage.search_study import default_study_name

    space: Any = types.SimpleNamespace(seq_len=(128,), global_batch=32, fingerprint=lambda: "f")
    named = {b: default_study_name(model="mu", device="cpu", budget_bytes=b, space=space)
             for b in (1000, 8_000_000_000)}  # fmt: skip
    assert "-1000B-" in named[1000] and "-8000MB-" in named[8_000_000_000]


def test_a_model_that_waits_at_import_is_stopped_at_the_search_s_time_limit(
    tmp_path: Path,
) -> None:
    """A user's module that slept at import outlasted --timeout 60s by minutes, and the
    search then said finished trials were saved, though none had run."""
    model = tmp_path / "sleepy.py"  # unbounded, it loads after 2 minutes and has no spec
    model.write_text("import time\ntime.sleep(120)\n", encoding="utf-8")
    burst = FakeBurst()
    with pytest.raises(AutotuneError, match=r"did not load within the search's time limit"):
        run(tmp_path, burst, spec=f"{model}:spec", timeout="2s")
    assert not burst.calls
    assert not (tmp_path / "runs").exists()


def test_an_output_that_cannot_be_written_is_refused_before_any_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    burst = FakeBurst()
    with pytest.raises(UsageError, match=r"^output '/dev/null/best.yaml': '/dev/null' is not"):
        run(tmp_path, burst, output="/dev/null/best.yaml")
    (tmp_path / "locked").mkdir()

    def read_only(**kwargs: Any) -> Any:  # what a read-only folder does (even for root)
        raise PermissionError(13, "Permission denied", str(kwargs["dir"]))

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    for output in (tmp_path / "locked" / "best.yaml", tmp_path / "locked" / "new" / "best.yaml"):
        with pytest.raises(UsageError) as info:
            run(tmp_path, burst, output=output)
        assert f"cannot write in {str(tmp_path / 'locked')!r} (Permission denied)" in str(
            info.value
        )
    assert not burst.calls and not list((tmp_path / "locked").iterdir())


def test_checking_the_output_leaves_no_file_behind(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    run(tmp_path, FakeBurst(), trials=2, output=tmp_path / "out" / "new" / "best.yaml")
    assert [p.name for p in (tmp_path / "out").rglob("*")] == ["new", "best.yaml"]


# -- budget strings ----------------------------------------------------------------------


def test_budget_strings(tmp_path: Path) -> None:
    burst = FakeBurst()
    ram = 4 * GB
    result = run(tmp_path, burst, budget="0.5", hardware=cpu_profile(ram=ram), trials=2)
    assert result.budget_bytes == ram // 2
    for text, expected in (("1GB", GB), ("1GiB", 2**30), ("1000MB", GB)):
        r = run(tmp_path / text, FakeBurst(), budget=text, trials=1, output=None)
        assert r.budget_bytes == expected
    with pytest.raises(BudgetError, match="cannot read budget"):
        run(tmp_path, burst, budget="lots")
    notes: list[str] = []
    r = run(
        tmp_path / "big",
        FakeBurst(),
        budget="64GB",
        trials=1,
        output=None,
        hardware=cpu_profile(ram=8 * GB),
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert any("above the memory" in n for n in notes) and r.notes


def test_a_machine_that_cannot_compile_says_why_compile_is_not_searched(tmp_path: Path) -> None:
    """Without g++ (a slim container) Inductor's CPU backend cannot build, and the search
    left compile out without a word: on the 2-core CPUs that is the 2.5-3x of the best
    configs, gone unsaid."""
    import dataclasses

    profile = cpu_profile()
    reason = "no C++ compiler for the CPU backend (looked for g++); install g++ or set CXX"
    software = dataclasses.replace(
        profile.software, compile_cpu_available=False, compile_cpu_reason=reason
    )
    notes: list[str] = []
    burst = FakeBurst()
    run(
        tmp_path,
        burst,
        trials=2,
        output=None,
        hardware=dataclasses.replace(profile, software=software),
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert f"warning: torch.compile is not searched: {reason}" in notes
    assert all(config.compile == "off" for config in burst.calls)
    notes.clear()
    run(
        tmp_path / "can",
        FakeBurst(),
        trials=2,
        output=None,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert not any("torch.compile is not searched" in n for n in notes)


# -- the real burst runner, end to end ---------------------------------------------------

_TINY_MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn
    from autotune.contract.spec import ModelSpec

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
        logits = model(batch["input"])
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch["target"].flatten())

    def flops(args, seq_len):
        return 6.0 * (args["vocab"] * args["dim"] * 2) * seq_len

    spec = ModelSpec(name="tiny", description="tiny LM", task="lm", build_fn=build,
                     make_batch_fn=make_batch, loss_fn=loss, flops_fn=flops,
                     args={"vocab": 32, "dim": 16}, seq_len=16, max_seq_len=64,
                     global_batch=8)
    """
)


def _real_burst_available() -> bool:
    from autotune.burst.supervisor import run_burst

    try:
        run_burst(toy_spec(), toy_spec_config(), steps=1, timeout_s=1.0)
    except NotImplementedError:
        return False
    except Exception:
        return True
    return True


def toy_spec_config() -> TrainConfig:
    return TrainConfig(micro_batch=1, grad_accum=1, seq_len=8)


@pytest.mark.slow
def test_end_to_end_with_the_real_burst_runner(tmp_path: Path) -> None:
    if not _real_burst_available():
        pytest.skip("autotune.burst.supervisor.run_burst is not implemented yet")
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model
    from autotune.preset import load_preset

    model_file = tmp_path / "tiny_model.py"
    model_file.write_text(_TINY_MODEL)
    spec = load_model(f"{model_file}:spec")
    result = search(
        spec,
        budget="4GB",
        scope=SearchScope(knobs=["compile=off", "num_workers=0", "precision=fp32"]),
        machine=SearchMachine(device="cpu", hardware=probe()),
        limits=SearchLimits(trials=4, steps=3, warmup=1, burst_timeout=120),
        study=SearchStudy(runs_dir=tmp_path / "runs"),
        output=SearchOutput(output=tmp_path / "tiny.yaml"),
    )
    assert result.best is not None and result.verified is not None and result.verified.ok
    assert result.verified.eval_loss is not None
    assert result.naive is not None and result.naive.status == "ok"
    # a machine loaded by something else marks the race's rounds busy: then no speedup is
    # published, and the reason says so (the race's rule), which is no failure of the search
    race = result.race
    assert race is not None
    if result.speedup is None:
        assert "quiet" in race.speedup_reason, race.speedup_reason
    else:
        assert result.speedup > 0 and race.paired
    preset = load_preset(tmp_path / "tiny.yaml")
    assert preset.config == result.best.train_config()
    assert preset.measured.peak_memory_bytes is not None


def test_the_space_counts_the_cores_this_process_may_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under taskset the machine has more cores than the search may use: the space is
    built for the usable ones (as check_config counts them), not the machine's count."""
    import autotune.config.machine_limits as limits
    from autotune.study.session import api

    monkeypatch.setattr(api, "_probe", lambda: cpu_profile(cores=2))
    sizes = {}
    for usable in (1, 2):
        monkeypatch.setattr(limits, "usable_cores", lambda usable=usable: usable)
        result = run(tmp_path / str(usable), FakeBurst(), hardware=None, trials=1, output=None)
        sizes[usable] = result.space_size
    assert sizes[1] < sizes[2]


def test_a_process_count_above_the_usable_cores_is_refused_before_any_burst(
    tmp_path: Path,
) -> None:
    """--nproc-per-node 512 on a 2-core machine started 512 ranks; the search now refuses
    it before its first burst, naming the bound."""
    burst = FakeBurst()
    with pytest.raises(UsageError, match="512 processes on a CPU need as many usable cores"):
        run(tmp_path, burst, nproc_per_node=512, global_batch=512)
    assert burst.calls == []
