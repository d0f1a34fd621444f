"""benchmarks/gpu_suite.py's orchestration on a CPU: its plan within a time limit, its steps
run by a fake command runner that answers as the real commands would on a GPU, and the
files it writes after every step. The real commands need a GPU; without one the suite
refuses, which is tested here too."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fake_gpu_suite import FakeRunner, run_main, statuses, suite

OLDER_PLAN = "probe,gpu-tests,oom,search,train,compare-gpt2,compare-mu,knobs"


def _step(name: str) -> Any:
    return next(s for s in suite.STEPS if s.name == name)


def test_every_older_step_runs_and_the_markdown_has_its_tables(tmp_path: Path) -> None:
    runner = FakeRunner()
    code, text = run_main(tmp_path, runner, "--steps", OLDER_PLAN)
    assert code == 0
    assert statuses(text) == dict.fromkeys(OLDER_PLAN.split(","), "ok")
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
    assert "| gpt2-124m | loss=chunked | 410,000 | 14.00 GiB | 0.70x |" in text  # knobs
    assert "loss=chunked peak 0.70x the base's" in text
    knobs = next(c for c in runner.calls if c[1].endswith("model_knobs.py"))
    assert knobs[knobs.index("--device") + 1] == "cuda" and "gpt2-124m" in knobs
    assert (tmp_path / "out" / "mu-8GB.yaml").exists()  # the search's preset comes back


def test_the_warm_start_step_gives_warm_over_fresh_on_cuda(tmp_path: Path) -> None:
    runner = FakeRunner()
    code, text = run_main(tmp_path, runner, "--steps", "warm-start")
    assert code == 0 and statuses(text) == {"warm-start": "ok"}
    argv = next(c for c in runner.calls if c[1].endswith("warm_start.py"))
    assert argv[argv.index("--device") + 1] == "cuda"
    assert "wall warm / fresh: mu naive 0.30x, mu compiled 0.40x" in text
    assert "| mu compiled | warm / fresh |" in text  # its table, below the step's heading
    figures = json.loads((tmp_path / "out" / "suite.json").read_text())
    (step,) = figures["steps"]
    assert step["figures"]["wall_warm_over_fresh"] == {"mu naive": "0.30x", "mu compiled": "0.40x"}


def test_a_warm_start_step_that_printed_no_ratio_failed(tmp_path: Path) -> None:
    runner = FakeRunner(**{"warm-start": (1, "- date: today\n")})
    code, text = run_main(tmp_path, runner, "--steps", "warm-start")
    assert code != 0 and statuses(text) == {"warm-start": "failed"}
    assert "warm_start.py exit 1, no warm / fresh row" in text


def test_the_default_plan_is_the_issues_order(tmp_path: Path) -> None:
    runner = FakeRunner()
    code, text = run_main(tmp_path, runner, "--within", "1h")
    assert code == 0
    assert list(statuses(text)) == list(suite.LEASE_PLAN)
    assert set(statuses(text).values()) == {"ok"}
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "gpt2-124m.yaml",
        "mu-8GB.yaml",
        "search-gpt2.json",
        "steps.log",
        "suite.json",
        "suite.md",
    ]  # fmt: skip  (a lent machine returns at most 8 files from its output folder)
    figures = json.loads((out / "suite.json").read_text())
    assert [s["name"] for s in figures["steps"]] == list(suite.LEASE_PLAN)
    assert figures["not_run_yet"] == [] and figures["within_s"] == 3600
    by_name = {s["name"]: s for s in figures["steps"]}
    assert by_name["search-gpt2"]["figures"]["mfu"] == pytest.approx(0.512)
    assert by_name["train-gpt2"]["figures"]["passed"] is True


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
    code, text = run_main(tmp_path, runner, "--steps", "probe,gpu-tests,oom,search,compare-mu")
    assert code == 1
    assert statuses(text) == {
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


# -- the plan within a time limit ------------------------------------------------------------
def test_the_plan_gives_time_by_priority_and_fits_the_limit() -> None:
    steps = [_step(n) for n in suite.LEASE_PLAN]
    nine = {p.step.name: p.share_s for p in suite.plan(steps, 540)}
    assert sum(nine.values()) <= 540
    assert nine["search-gpt2"] >= 340 * 1.05 + 15  # the search's default limit fits
    assert nine["probe"] and nine["train-gpt2"]
    assert nine["knobs-gpt2"] == nine["search"] == nine["gpu-tests"] == 0  # what is left
    hour = {p.step.name: p.share_s for p in suite.plan(steps, 3600)}
    assert all(hour.values()) and sum(hour.values()) <= 3600
    short = {p.step.name: p.share_s for p in suite.plan(steps, 200)}
    assert short["search-gpt2"] == 200 - short["probe"]  # shrunk to what is there


def test_each_step_runs_within_what_is_left_and_the_run_ends_in_time(tmp_path: Path) -> None:
    """A 9-minute run on a fake clock: the search takes 5 minutes, the others
    what they are given; no step's limit reaches past the suite's, the knobs get what the
    search left beyond the training run's share, and the steps that cannot fit are
    skipped with the reason."""
    seconds = {"probe": 6, "search-gpt2": 300, "knobs-gpt2": 1e9, "train-gpt2": 80}
    runner = FakeRunner(seconds=seconds)
    steps = [_step(n) for n in suite.LEASE_PLAN]
    outcomes = suite.run_suite(
        steps, suite.Context(work=tmp_path), runner=runner, limit_s=540, log=lambda line: None,
        clock=runner.clock,
    )  # fmt: skip
    by_name = {o.step.name: o for o in outcomes}
    assert runner.now <= 540
    assert [by_name[n].status for n in suite.LEASE_PLAN] == [
        "ok", "ok", "timeout", "ok", "skipped", "skipped",
    ]  # fmt: skip
    knobs = by_name["knobs-gpt2"]
    assert knobs.limit_s == pytest.approx(540 - 6 - 300 - 110)  # train's 110 s kept aside
    argv = next(c for c in runner.calls if c[1].endswith("model_knobs.py"))
    assert argv[argv.index("--within") + 1] == f"{knobs.limit_s - 25:.0f}s"
    assert "sdpa_backend=cudnn" in knobs.section  # the table it printed before it stopped
    search = next(c for c in runner.calls if "search" in c)
    assert "--timeout" not in search  # the default limit, not a shrunk one
    assert re.search(r"left: under the 2 min 30 s it needs", by_name["search"].result)


def test_a_search_that_cannot_get_its_default_limit_gets_a_shorter_one(tmp_path: Path) -> None:
    runner = FakeRunner()
    code, text = run_main(tmp_path, runner, "--within", "4m", "--steps", "probe,search-gpt2")
    assert code == 0
    search = next(c for c in runner.calls if "search" in c)
    limit = float(search[search.index("--timeout") + 1].removesuffix("s"))
    assert limit > 150 and limit * 1.05 + 20 <= 240  # within what the probe left
    assert "shrunk to fit the suite" in text


def test_steps_past_the_suite_limit_are_skipped(tmp_path: Path) -> None:
    runner = FakeRunner(seconds={"probe": 20, "gpu-tests": 130})
    outcomes = suite.run_suite(
        [_step("probe"), _step("gpu-tests"), _step("oom")], suite.Context(work=tmp_path),
        runner=runner, limit_s=200, log=lambda line: None, clock=runner.clock,
    )  # fmt: skip
    assert [o.status for o in outcomes] == ["ok", "ok", "skipped"]
    assert outcomes[2].result == "50 s left: under the 60 s it needs"
    assert len(runner.calls) == 2


# -- what is written, and when ------------------------------------------------------------------
class Cut(BaseException):
    """The suite killed from outside (SIGKILL): nothing after it runs."""


def test_a_run_cut_after_two_steps_keeps_them(tmp_path: Path) -> None:
    class Cutting(FakeRunner):
        def __call__(self, argv: Sequence[str], **kwargs: Any) -> Any:
            if len(self.calls) == 2:
                raise Cut
            return super().__call__(argv, **kwargs)

    with pytest.raises(Cut):
        run_main(tmp_path, Cutting(), "--within", "1h")
    out = tmp_path / "out"
    text = (out / "suite.md").read_text()
    assert statuses(text) == {"probe": "ok", "search-gpt2": "ok"}
    assert "(4 of 6 not run yet: knobs-gpt2, train-gpt2, search, gpu-tests)" in text
    assert "winner's MFU" in text  # the search's section is there
    figures = json.loads((out / "suite.json").read_text())
    assert [s["name"] for s in figures["steps"]] == ["probe", "search-gpt2"]
    assert figures["not_run_yet"] == ["knobs-gpt2", "train-gpt2", "search", "gpu-tests"]
    assert (out / "gpt2-124m.yaml").exists() and (out / "search-gpt2.json").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # atomic writes


def test_a_suite_stopped_by_sigterm_records_the_step_and_exits_143(tmp_path: Path) -> None:
    class Stopping(FakeRunner):
        def __call__(self, argv: Sequence[str], **kwargs: Any) -> Any:
            if "search" in argv:
                raise KeyboardInterrupt(143)  # what the suite's SIGTERM handler raises
            return super().__call__(argv, **kwargs)

    code, text = run_main(tmp_path, Stopping(), "--within", "1h")
    assert code == 143
    assert statuses(text) == {"probe": "ok", "search-gpt2": "interrupted"}


def test_the_file_is_written_after_each_step_with_each_commands_log(tmp_path: Path) -> None:
    out, work = tmp_path / "suite.md", tmp_path / "work"
    seen: list[str] = []

    class Watching(FakeRunner):
        def __call__(self, argv: Sequence[str], **kwargs: Any) -> Any:
            seen.append(out.read_text() if out.exists() else "")
            return super().__call__(argv, **kwargs)

    argv = ["--out", str(out), "--work", str(work), "--steps", "probe,oom"]
    suite.main(argv, runner=Watching(), has_cuda=lambda: True, check_imports=list)
    assert seen[0] == ""  # nothing before the first step
    assert "| probe | ok " in seen[1] and "(1 of 2 not run yet: oom)" in seen[1]
    assert "not run yet" not in out.read_text()
    # beside the suite's files, which come back from a lent machine: one file for all
    log = (tmp_path / "steps.log").read_text()
    names = [line[5:] for line in log.splitlines() if line.startswith("==== ")]
    assert names == ["probe-1", "oom-1", "oom-2"]
    oom = log.split("==== oom-1\n", 1)[1]
    assert oom.startswith("$ ") and "gpt2-124m" in oom and "## stderr\nsome progress" in oom


def test_a_failed_pytest_shows_its_failures_not_its_warnings(tmp_path: Path) -> None:
    """Found on an H200: the failing test's section showed pytest-benchmark's warnings
    (stderr) and not which test failed (stdout)."""
    out = "..F.\nE       AssertionError: assert 82 <= 2\nFAILED tests/test_gpu.py::test_peak\n"
    out += "===== 1 failed, 3 passed in 9.0s =====\n"
    runner = FakeRunner(**{"gpu-tests": (1, out)})
    code, text = run_main(tmp_path, runner, "--steps", "gpu-tests")
    assert code == 1
    assert "FAILED tests/test_gpu.py::test_peak" in text and "AssertionError" in text
    assert "the last line" not in text  # stderr's progress is not the tail shown


def test_a_command_past_its_limit_gets_sigterm_then_sigkill(tmp_path: Path) -> None:
    """The real runner: a command that prints what it has on SIGTERM keeps its output; one
    that ignores SIGTERM is killed at the limit."""
    import sys

    polite = "import signal,sys,time\nsignal.signal(signal.SIGTERM, lambda *a: (print('table'), sys.exit(143)))\ntime.sleep(30)"  # noqa: E501
    deaf = "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(30)"
    # SIGTERM at 3 s: a bare interpreter has its handler set long before (0.25 s at most
    # on a loaded 2-core machine, where 0.75 s left a margin of three)
    done = suite.run_command([sys.executable, "-c", polite], timeout_s=4.0, cwd=tmp_path)
    assert done.stopped and done.returncode == 143 and done.stdout == "table\n"
    done = suite.run_command([sys.executable, "-c", deaf], timeout_s=4.0, cwd=tmp_path)
    assert done.timed_out and done.returncode is None and done.wall_s < 7


# -- the command line ------------------------------------------------------------------------
def test_without_cuda_the_suite_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner = FakeRunner()
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=runner,
        has_cuda=lambda: False,
        check_imports=list,
    )
    assert code == 2 and not runner.calls and not (tmp_path / "suite.md").exists()
    assert "no CUDA device: the GPU suite needs one" in capsys.readouterr().err


def test_the_real_check_finds_no_cuda_on_a_cpu_machine() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert suite.cuda_available() is False


def test_dry_run_prints_the_plan_with_each_steps_share(capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--dry-run", "--within", "9m", "--out", "/nonexistent/s.md"]) == 0
    out = capsys.readouterr().out
    assert "Plan within 9 min 00 s" in out
    assert re.search(r"\| search-gpt2 \| +6 min 39 s \|", out)
    assert re.search(r"\| knobs-gpt2 +\| +- \|.*if time is left", out)
    assert "search --model gpt2-124m --seq-len 1024 --budget 0.9 --device cuda" in out
    assert "[knobs-gpt2] built when it starts: no winner preset" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "probe,nope"], "unknown step(s) nope"),
        (["--steps", "train"], "train needs search"),
        (["--steps", "knobs-gpt2"], "knobs-gpt2 needs search-gpt2 or --winner"),
        (["--steps", "train-gpt2,search-gpt2"], "train-gpt2 runs on search-gpt2's preset"),
        (["--within", "soon"], "cannot read --within 'soon'"),
        (["--winner", "/nonexistent.yaml"], "--winner '/nonexistent.yaml': no such file"),
        (["--compare-args", "'--policies naive"], "No closing quotation"),
        (["--test-workers", "0"], "--test-workers must be at least 1"),
    ],
)
def test_bad_arguments_are_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        suite.main(["--dry-run", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_winner_from_an_earlier_run_replaces_the_search(tmp_path: Path) -> None:
    from tests.fake_gpu_suite import write_winner

    winner = write_winner(tmp_path / "earlier" / "gpt2-124m.yaml")
    runner = FakeRunner()
    code, text = run_main(tmp_path, runner, "--within", "1h", "--winner", str(winner),
                          "--steps", "probe,search-gpt2,knobs-gpt2,train-gpt2")  # fmt: skip
    assert code == 0 and list(statuses(text)) == ["probe", "knobs-gpt2", "train-gpt2"]
    assert not any("search" in c for c in runner.calls)
    knobs = next(c for c in runner.calls if c[1].endswith("model_knobs.py"))
    assert knobs[knobs.index("--preset") + 1] == str(winner)


def test_the_options_reach_the_commands(tmp_path: Path) -> None:
    runner = FakeRunner()
    options = ["--search-timeout", "3m", "--compare-search-timeout", "90s", "--test-workers", "4"]
    options += ["--compare-args", "--policies naive,autotune --repeats 1"]
    code, _ = run_main(tmp_path, runner, "--steps", "gpu-tests,search,compare-mu", *options)
    assert code == 0
    tests = next(c for c in runner.calls if "pytest" in c)
    assert tests[tests.index("-n") + 1] == "4"
    search = next(c for c in runner.calls if "search" in c)
    assert search[search.index("--timeout") + 1] == "3m"
    compare = next(c for c in runner.calls if c[1].endswith("compare.py"))
    assert compare[compare.index("--search-timeout") + 1] == "90s"
    assert compare[-4:] == ["--policies", "naive,autotune", "--repeats", "1"]
    default = FakeRunner()
    run_main(tmp_path / "default", default, "--steps", "gpu-tests,search")
    assert "-n" not in next(c for c in default.calls if "pytest" in c)
    assert "--timeout" not in next(c for c in default.calls if "search" in c)


def test_the_suite_runs_every_test_file_that_has_gpu_tests() -> None:
    tests = Path(__file__).resolve().parent
    marked = {
        f"tests/{path.relative_to(tests)}"
        for path in tests.rglob("test_*.py")
        if "pytest.mark.gpu" in path.read_text(encoding="utf-8") and path != Path(__file__)
    }
    assert marked and marked == set(suite.GPU_TEST_FILES)


def test_the_gpu_tests_command_runs_where_pytest_xdist_is_missing(tmp_path: Path) -> None:
    """The gpu-tests step's command as built, run here with xdist blocked (a lent machine
    may lack it): pyproject's addopts name its -n and the tests' conftest its hook, and
    either made pytest refuse to start. Without a GPU every selected test skips."""
    import subprocess
    import sys

    (step,) = [s for s in suite.STEPS if s.name == "gpu-tests"]
    (argv,) = step.commands(suite.Context(work=tmp_path, python=sys.executable))
    # collected only: on a machine with a GPU the tests would run (and take minutes)
    done = subprocess.run([*argv[:3], "-p", "no:xdist", *argv[3:], "--collect-only"],
                          cwd=suite.ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests collected" in done.stdout and "test_gpu.py" in done.stdout
