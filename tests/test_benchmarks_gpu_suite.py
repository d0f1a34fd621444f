"""benchmarks/gpu_suite.py's orchestration on a CPU: its steps run by a fake command runner
that answers as the real commands would on a GPU, and the Markdown it writes. The real
commands need a GPU; without one the suite refuses, which is tested here too."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from benchmark_modules import load_benchmark

suite = load_benchmark("gpu_suite")
GB = 10**9


class FakeRunner:
    """Answers each step's command as it would end on a GPU; ``override`` changes one
    step's answer: a (returncode, stdout) pair, or None for a command killed at its limit."""

    def __init__(self, **override: Any) -> None:
        self.override = override
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Any:
        argv = list(argv)
        self.calls.append(argv)
        assert timeout_s > 0
        name, answer = self._answer(argv)
        if name in self.override:
            answer = self.override[name]
        if answer is None:
            return suite.Completed(None, "", "killed", timeout_s)
        code, out = answer
        return suite.Completed(code, out, "some progress on stderr\nthe last line", 1.5)

    def _answer(self, argv: list[str]) -> tuple[str, tuple[int, str]]:
        def after(flag: str) -> str:
            return argv[argv.index(flag) + 1]

        if "probe" in argv:
            gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": 85 * GB,
                   "compute_capability": [9, 0], "driver_version": "580.159.04"}  # fmt: skip
            software = {"torch_version": "2.11.0+cu130", "torch_cuda_version": "13.0"}
            return "probe", (0, json.dumps({"gpus": [gpu], "software": software}))
        if "pytest" in argv:
            return "gpu-tests", (0, "....\n===== 9 passed, 1 skipped in 42.0s =====\n")
        if "bench" in argv:
            if "gpt2-124m" in argv:
                burst = {"status": "oom", "reason": "CUDA out of memory", "peak_memory_bytes": 8e9}
                return "oom-big", (1, json.dumps(burst))
            return "oom-small", (0, json.dumps({"status": "ok", "peak_memory_bytes": 1.2e9}))
        if "search" in argv:
            Path(after("--output")).write_text("measured:\n  tokens_per_s: 200000.0\n")
            found = {
                "unit": "tokens/s",
                "best": {"throughput": 201000.0, "peak_memory_bytes": 6.5e9,
                         "config": {"micro_batch": 16, "grad_accum": 2, "seq_len": 128,
                                    "precision": "bf16", "compile": "default"}},
                "counts": {"measured": 30, "infeasible": 4, "pruned": 6},
                "speedup": 3.1,
                "memory_model": {"predictions": 20, "mean_abs_error_pct": 4.25,
                                 "ooms_executed": {"bf16": 1}, "at_edge": [17]},
            }  # fmt: skip
            return "search", (0, "progress\n" + json.dumps(found))
        if "train" in argv:
            out = Path(after("--out"))
            out.mkdir(parents=True)
            (out / "summary.json").write_text(
                json.dumps({"steps": 300, "steady_tokens_per_s": 190000.0})
            )
            return "train", (0, "")
        if any(a.endswith("model_knobs.py") for a in argv):
            table = (
                "- date: today\n\n| model | config | median | peak | vs base |\n"
                "|--|--|--:|--:|--:|\n"
                "| gpt2-124m | base | 400,000 | 20.00 GiB | 1.00x |\n"
                "| gpt2-124m | loss=chunked | 410,000 | 14.00 GiB | 0.70x |\n"
            )
            return "knobs", (0, table)
        if any(a.endswith("compare.py") for a in argv):
            out = Path(after("--out"))
            out.mkdir(parents=True)
            model = after("--model")
            table = f"# compare: {model}\n\n| policy | tokens/s | MFU (bf16 peak) |\n|--|--:|--:|\n"
            (out / "compare.md").write_text(table + "| autotune | 1 | 40% |\n")
            return f"compare-{model}", (0, "")
        raise AssertionError(f"unexpected command {argv}")


def _statuses(text: str) -> dict[str, str]:
    """The steps table: step name -> status."""
    names = {s.name for s in suite.STEPS}
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    return {row[0]: row[1] for row in cells if len(row) == 4 and row[0] in names}


def _main(tmp_path: Path, runner: FakeRunner, *extra: str) -> tuple[int, str]:
    out = tmp_path / "suite.md"
    code = suite.main(
        ["--out", str(out), "--work", str(tmp_path / "work"), *extra],
        runner=runner,
        has_cuda=lambda: True,
        find=lambda module: object(),
    )
    return code, out.read_text()


def test_every_step_runs_and_the_markdown_has_its_tables(tmp_path: Path) -> None:
    runner = FakeRunner()
    code, text = _main(tmp_path, runner)
    assert code == 0
    assert _statuses(text) == {s.name: "ok" for s in suite.STEPS}
    assert "| NVIDIA H100 80GB HBM3 | 85.00 GB | 9.0 |" in text  # probe
    assert "9 passed, 1 skipped in 42.0s" in text  # the gpu-marked tests
    assert "| oom " in text and "| ok " in text  # the oom burst, then one that runs
    assert "6.50 GB: within" in text  # the budget check of the search's winner
    assert "mb 16x2 seq 128 bf16 compile=default" in text
    assert "| 20, 4.25% " in text  # the memory model's predictions and error
    assert "|   300 |         200,000 |               190,000 |          0.95x |" in text
    assert "#### compare: gpt2-124m" in text and "MFU (bf16 peak)" in text  # one level down
    assert "#### compare: mu" in text
    compare = next(c for c in runner.calls if "gpt2-124m" in c and c[1].endswith("compare.py"))
    assert compare[compare.index("--seq-len") + 1] == "1024"
    assert compare[compare.index("--budget") + 1] == "24GB"
    assert (tmp_path / "suite.md").exists()
    assert "| gpt2-124m | loss=chunked | 410,000 | 14.00 GiB | 0.70x |" in text  # knobs
    assert "loss=chunked peak 0.70x the base's" in text
    knobs = next(c for c in runner.calls if c[1].endswith("model_knobs.py"))
    assert knobs[knobs.index("--device") + 1] == "cuda" and "gpt2-124m" in knobs


def test_a_knobs_run_without_its_table_fails_its_step(tmp_path: Path) -> None:
    runner = FakeRunner(knobs=(0, "- date: today\n"))
    code, text = _main(tmp_path, runner, "--steps", "probe,knobs")
    assert code == 1 and _statuses(text) == {"probe": "ok", "knobs": "failed"}
    assert "printed no table" in text


def test_a_failing_step_is_recorded_and_the_suite_goes_on(tmp_path: Path) -> None:
    over = {"best": {"peak_memory_bytes": 9e9, "throughput": 1.0}, "counts": {}}
    runner = FakeRunner(
        **{
            "gpu-tests": (1, "===== 1 failed, 8 passed in 40.0s =====\n"),
            "search": (0, json.dumps(over)),
            "oom-big": (0, json.dumps({"status": "ok", "peak_memory_bytes": 9e9})),
            "compare-mu": None,  # killed at its time limit
        }
    )
    code, text = _main(tmp_path, runner, "--steps", "probe,gpu-tests,oom,search,compare-mu")
    assert code == 1
    assert _statuses(text) == {
        "probe": "ok",
        "gpu-tests": "failed",
        "oom": "failed",
        "search": "failed",
        "compare-mu": "timeout",
    }
    assert "1 failed, 8 passed" in text
    assert "expected oom then ok, got ok then ok" in text
    assert "9.00 GB is over the 8 GB budget" in text
    assert "the last line" in text  # a failed step shows the end of its output
    assert not any("train" in c for c in runner.calls)


def test_steps_past_the_suite_limit_are_skipped(tmp_path: Path) -> None:
    ticks = iter(range(0, 10_000, 60))  # each clock reading is a minute later
    outcomes = suite.run_suite(
        suite.STEPS[:3],
        suite.Context(work=tmp_path),
        runner=FakeRunner(),
        limit_s=150,
        log=lambda line: None,
        clock=lambda: float(next(ticks)),
    )
    assert [o.status for o in outcomes] == ["ok", "ok", "skipped"]


def test_without_cuda_the_suite_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner = FakeRunner()
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=runner,
        has_cuda=lambda: False,
        find=lambda module: object(),
    )
    assert code == 2 and not runner.calls and not (tmp_path / "suite.md").exists()
    assert "no CUDA device: the GPU suite needs one" in capsys.readouterr().err


def test_the_real_check_finds_no_cuda_on_a_cpu_machine() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert suite.cuda_available() is False


def test_missing_wheels_are_named_with_the_download_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = {"optuna", "alembic", "sqlalchemy", "mako", "colorlog"}
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=FakeRunner(),
        has_cuda=lambda: True,
        find=lambda module: None if module in absent else object(),
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "missing Python packages: optuna, alembic, SQLAlchemy, Mako, colorlog." in err
    assert "--only-binary=:all: --python-version 3.12" in err
    assert "optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0" in err
    assert "--no-index --no-deps" in err


def test_the_pinned_versions_meet_autotunes_requirements() -> None:
    """The wheels the suite names for a machine without network must satisfy autotune's
    own requirements. Not the versions installed here: those follow the registry (PyYAML
    6.0.3 -> 6.0.4 between two CI runs failed an equality check) and each environment
    (a development machine's cloudpickle 2.1, CI's fresh 3.1)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted = {}
    for line in requires("autotune") or []:
        req = Requirement(line)
        if req.marker is None:  # the core requirements, not an extra's
            wanted[canonicalize_name(req.name)] = req.specifier
    named = {canonicalize_name(dist) for _module, dist, _pinned in suite.WHEELS}
    assert {"optuna", "pyyaml", "typer", "rich", "cloudpickle"} <= named & set(wanted)
    for _module, dist, pinned in suite.WHEELS:
        spec = wanted.get(canonicalize_name(dist))
        assert spec is None or spec.contains(pinned), f"{dist}: {pinned} is outside {spec}"


def test_dry_run_and_bad_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--dry-run", "--steps", "probe,search"]) == 0
    out = capsys.readouterr().out
    assert "autotune probe --json" in out and "search --model mu --budget 8GB" in out
    with pytest.raises(SystemExit, match="unknown step"):
        suite.main(["--dry-run", "--steps", "probe,nope"])
    with pytest.raises(SystemExit, match="train needs search"):
        suite.main(["--dry-run", "--steps", "train"])
    with pytest.raises(SystemExit, match=r"--compare-args .*No closing quotation"):
        suite.main(["--dry-run", "--compare-args", "'--policies naive"])


def test_the_suite_runs_every_test_file_that_has_gpu_tests() -> None:
    tests = Path(__file__).resolve().parent
    marked = {
        f"tests/{path.relative_to(tests)}"
        for path in tests.rglob("test_*.py")
        if "pytest.mark.gpu" in path.read_text(encoding="utf-8") and path != Path(__file__)
    }
    assert marked and marked == set(suite.GPU_TEST_FILES)


def test_the_options_reach_the_commands(tmp_path: Path) -> None:
    runner = FakeRunner()
    options = ["--search-timeout", "3m", "--compare-search-timeout", "90s", "--test-workers", "4"]
    options += ["--compare-args", "--policies naive,autotune --repeats 1"]
    code, _ = _main(tmp_path, runner, "--steps", "gpu-tests,search,compare-mu", *options)
    assert code == 0
    tests = next(c for c in runner.calls if "pytest" in c)
    assert tests[tests.index("-n") + 1] == "4"
    search = next(c for c in runner.calls if "search" in c)
    assert search[search.index("--timeout") + 1] == "3m"
    compare = next(c for c in runner.calls if c[1].endswith("compare.py"))
    assert compare[compare.index("--search-timeout") + 1] == "90s"
    assert compare[-4:] == ["--policies", "naive,autotune", "--repeats", "1"]
    default = FakeRunner()
    _main(tmp_path / "default", default, "--steps", "gpu-tests,search")
    assert "-n" not in next(c for c in default.calls if "pytest" in c)
    assert "--timeout" not in next(c for c in default.calls if "search" in c)


def test_the_file_is_written_after_each_step_with_each_commands_log(tmp_path: Path) -> None:
    out, work = tmp_path / "suite.md", tmp_path / "work"
    seen: list[str] = []

    class Watching(FakeRunner):
        def __call__(self, argv: Sequence[str], **kwargs: Any) -> Any:
            seen.append(out.read_text() if out.exists() else "")
            return super().__call__(argv, **kwargs)

    argv = ["--out", str(out), "--work", str(work), "--steps", "probe,oom"]
    suite.main(argv, runner=Watching(), has_cuda=lambda: True, find=lambda module: object())
    assert seen[0] == ""  # nothing before the first step
    assert "| probe | ok " in seen[1] and "(1 of 2 not run yet)" in seen[1]
    assert "not run yet" not in out.read_text()
    log = (work / "oom-1.log").read_text()
    assert log.startswith("$ ") and "gpt2-124m" in log and "## stderr\nsome progress" in log
    assert (work / "oom-2.log").exists() and (work / "probe-1.log").exists()


def test_a_failed_pytest_shows_its_failures_not_its_warnings(tmp_path: Path) -> None:
    """Found on an H200: the failing test's section showed pytest-benchmark's warnings
    (stderr) and not which test failed (stdout)."""
    out = "..F.\nE       AssertionError: assert 82 <= 2\nFAILED tests/test_gpu.py::test_peak\n"
    out += "===== 1 failed, 3 passed in 9.0s =====\n"
    runner = FakeRunner(**{"gpu-tests": (1, out)})
    code, text = _main(tmp_path, runner, "--steps", "gpu-tests")
    assert code == 1
    assert "FAILED tests/test_gpu.py::test_peak" in text and "AssertionError" in text
    assert "the last line" not in text  # stderr's progress is not the tail shown
