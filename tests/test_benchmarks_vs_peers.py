"""benchmarks/vs_peers.py's pure parts: reading a tool's answer, the over-budget watchdog on
a fake tool, the leftover check and the table. No training, except the ``slow`` test that
runs a real peer library."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from benchmark_modules import load_benchmark

vs = load_benchmark("vs_peers")
ds = load_benchmark("_ds_autotuning")

MB = 1024 * 1024


def _outcome(outcome: str = "exited", returncode: int | None = 0, **kw: object) -> object:
    return vs.ProcessOutcome(
        outcome=outcome, returncode=returncode, peak_bytes=3 * MB, wall_s=1.5, **kw
    )


def _events(*items: tuple[str, int]) -> list[dict[str, object]]:
    return [{"event": e, "size": s} for e, s in items]


# -- reading a tool's answer --------------------------------------------------------------
def test_read_events_drops_a_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "start", "size": 2}\n{"event": "done", "si')
    assert vs.read_events(path) == [{"event": "start", "size": 2}]
    assert vs.read_events(tmp_path / "missing.jsonl") == []


def test_a_tool_that_answered_gives_its_pick_and_its_caught_ooms() -> None:
    events = [
        *_events(("start", 32), ("start", 16), ("done", 16)),
        {"event": "result", "micro_batch": 16, "grad_accum": 1, "settings": {}},
    ]
    run = vs.classify("hf-trainer", _outcome(), events)
    assert (run.status, run.micro_batch, run.grad_accum) == ("ok", 16, 1)
    assert run.tried == (32, 16) and run.failed == (32,)
    assert run.global_batch == 16
    assert vs.kept_text(run, 32) == "no: 16 (asked 32)"
    assert vs.failures_text(run) == "1 OOM (32)"
    assert vs.pick_text(run) == "16 x 1, fp32"


def test_a_tool_killed_over_the_budget_has_no_pick_and_says_where() -> None:
    events = _events(("start", 2), ("done", 2), ("start", 4), ("done", 4), ("start", 8))
    run = vs.classify("lightning-power", _outcome("budget", -9, over_budget_bytes=9 * MB), events)
    assert run.status == "over budget" and run.micro_batch is None
    assert run.reason == "its processes reached 9.00 MiB"
    assert vs.failures_text(run) == "killed over the budget at micro-batch 8"
    assert vs.kept_text(run, 32) == "-"


def test_a_tool_that_died_or_ran_out_of_time_is_a_crash_or_a_timeout() -> None:
    crash = vs.classify("accelerate", _outcome("exited", 1), [], log_tail="ImportError: x")
    assert crash.status == "crash" and "exit 1: ImportError: x" in crash.reason
    assert vs.failures_text(crash) == "crash"
    late = vs.classify("accelerate", _outcome("timeout", -15), _events(("start", 32)))
    assert late.status == "timeout" and vs.failures_text(late) == "1 OOM (32); timeout"


def test_deepspeed_config_keeps_the_global_batch_and_reads_the_optimum(tmp_path: Path) -> None:
    task = type("T", (), {"global_batch": 32})()
    command = ds.deepspeed_command(task, [sys.executable, "drv.py", "--root", str(tmp_path)])
    assert command[1:5] == ["--autotuning", "tune", "--num_gpus", "1"]
    config = json.loads((tmp_path / "ds_config.json").read_text())
    assert config["train_batch_size"] == 32 and config["autotuning"]["enabled"]
    assert ds.read_optimal(tmp_path) == (None, None, {})
    (tmp_path / "autotuning_results").mkdir()
    (tmp_path / "autotuning_results" / ds.OPTIMAL).write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 8,
                "gradient_accumulation_steps": 4,
                "zero_optimization": {"stage": 1},
            }
        )
    )
    assert ds.read_optimal(tmp_path) == (8, 4, {"ZeRO stage": 1})


# -- the watchdog and the leftover check --------------------------------------------------
HOG = textwrap.dedent(
    """
    import os, subprocess, sys, time
    # a child in the same group, as a DataLoader worker would be
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    chunks = []
    while True:
        chunks.append(b"\\x01" * (8 * 1024 * 1024))  # written: resident at once
        time.sleep(0.02)
    """
)


def test_a_fake_tool_past_a_tiny_budget_is_stopped_with_its_whole_group(tmp_path: Path) -> None:
    pgids: list[int] = []
    budget = 120 * MB
    outcome = vs.run_watched(
        [sys.executable, "-c", HOG],
        cwd=tmp_path,
        log_path=tmp_path / "log.txt",
        budget_bytes=budget,
        timeout_s=60,
        pgids=pgids,
    )
    assert outcome.outcome == "budget", (tmp_path / "log.txt").read_text()
    assert outcome.over_budget_bytes is not None and outcome.over_budget_bytes > budget
    assert outcome.wall_s < 60
    assert len(pgids) == 1 and not psutil.pid_exists(pgids[0])
    assert vs.leftovers(pgids, [tmp_path / "gone"]) == []
    run = vs.classify("fake", outcome, [])
    assert run.status == "over budget"


def test_a_fake_tool_past_its_timeout_is_killed(tmp_path: Path) -> None:
    pgids: list[int] = []
    outcome = vs.run_watched(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        cwd=tmp_path,
        log_path=tmp_path / "log.txt",
        budget_bytes=None,
        timeout_s=0.5,
        pgids=pgids,
    )
    assert outcome.outcome == "timeout" and outcome.wall_s < 10
    assert vs.leftovers(pgids, []) == []


def test_leftovers_names_a_live_process_of_a_started_group_and_a_folder(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        found = vs.leftovers([proc.pid], [tmp_path])
        assert any(f"process {proc.pid}" in f for f in found)
        assert f"folder {tmp_path}" in found
        assert vs.leftovers([os.getpgid(0) + 10**7], []) == []
    finally:
        proc.kill()
        proc.wait()


# -- the table ----------------------------------------------------------------------------
def test_the_table_shows_every_row_its_ratio_and_why_a_row_has_no_figure() -> None:
    ok = vs.PeerRun(
        peer="accelerate",
        status="ok",
        wall_s=4.0,
        peak_bytes=900 * MB,
        micro_batch=32,
        grad_accum=1,
        tried=(32,),
    )
    auto = vs.PeerRun(
        peer="autotune", status="ok", wall_s=60.0, peak_bytes=2000 * MB, micro_batch=8, grad_accum=4
    )
    over = vs.PeerRun(
        peer="lightning-power",
        status="over budget",
        reason="its processes reached 8.1 GB",
        wall_s=90.0,
        tried=(2, 4, 8),
    )
    cuda = vs.PeerRun(peer="deepspeed", status="needs CUDA", reason="CUDA only")
    text = vs.render(
        [over, ok, cuda, auto],
        {"accelerate": 500.0, "autotune": 1000.0},
        unit="tokens/s",
        global_batch=32,
    )
    lines = text.splitlines()
    assert lines[0].startswith("| peer ") and "tokens/s of the pick" in lines[0]
    row = {line.split("|")[1].strip(): line for line in lines[2:6]}
    assert "0.50x" in row["accelerate"] and "yes (32)" in row["accelerate"]
    assert "1.00x" in row["autotune"] and "no: 32" not in row["autotune"]
    assert (
        "over budget" in row["lightning-power"]
        and "killed over the budget at" in (row["lightning-power"])
    )
    assert "needs CUDA" in row["deepspeed"]
    assert "- lightning-power: micro-batches tried, in order: [2, 4, 8]" in text


@pytest.mark.slow
def test_a_real_peer_library_answers_under_the_budget(tmp_path: Path) -> None:
    pgids: list[int] = []
    events = tmp_path / "events.jsonl"
    command = [
        sys.executable,
        str(vs.DRIVER),
        "--peer",
        "accelerate",
        "--model",
        "gpt-small",
        "--seq-len",
        "32",
        "--global-batch",
        "4",
        "--steps",
        "1",
        "--events",
        str(events),
        "--root",
        str(tmp_path),
    ]
    outcome = vs.run_watched(
        command,
        cwd=tmp_path,
        log_path=tmp_path / "log.txt",
        budget_bytes=4 * 1024 * MB,
        timeout_s=300,
        pgids=pgids,
        env=vs.child_env(),
    )
    run = vs.classify("accelerate", outcome, vs.read_events(events))
    log = (tmp_path / "log.txt").read_text()
    assert (run.status, run.micro_batch, run.grad_accum) == ("ok", 4, 1), log
    assert vs.leftovers(pgids, []) == []


def test_quick_runs_the_search_as_the_cli_accepts_it(tmp_path: Path) -> None:
    from autotune.models.registry import get_model
    from autotune.study.storage.optuna_glue import PRUNE_MIN_STEPS
    from autotune.testing.fake_caps import cpu_caps

    args = vs._parser().parse_args(["--model", "gpt-small", "--budget", "8GB", "--quick"])
    vs.apply_quick(args)
    assert args.search_steps >= PRUNE_MIN_STEPS and args.peer_steps == 1
    task = vs.Task(
        spec=get_model("gpt-small"),
        profile=None,
        caps=cpu_caps(),
        budget=8 * 10**9,
        budget_text="8GB",
        global_batch=32,
        seq_len=256,
        peer_steps=1,
        peer_timeout_s=60,
        search_timeout=args.search_timeout,
        search_steps=args.search_steps,
        tmp=tmp_path,
        pgids=[],
    )
    command = vs.search_command(task, tmp_path / "p.yaml")
    assert command[1:4] == ["-m", "autotune", "search"]
    flags = dict(zip(command[4::2], command[5::2], strict=True))
    assert flags["--steps"] == str(PRUNE_MIN_STEPS) and flags["--timeout"] == "2m"
    assert flags["--output"] == str(tmp_path / "p.yaml") and flags["--global-batch"] == "32"


def test_the_short_search_gets_twice_the_fastest_answering_peers_time(tmp_path: Path) -> None:
    runs = [
        vs.PeerRun(peer="lightning-power", status="over budget", wall_s=3.0),  # no answer
        vs.PeerRun(peer="hf-trainer", status="ok", wall_s=8.7, micro_batch=32, grad_accum=1),
        vs.PeerRun(peer="accelerate", status="ok", wall_s=6.21, micro_batch=32, grad_accum=1),
        vs.PeerRun(peer="autotune", status="ok", wall_s=1.0, micro_batch=8, grad_accum=4),
    ]
    limit = vs.twice_the_fastest(runs)
    # 12.42 s less the 10% a search may run past its limit: 11.29 s, rounded down
    assert limit is not None and limit[0] == "11.2s" and limit[1].peer == "accelerate"
    assert vs.twice_the_fastest(runs[:1] + runs[3:]) is None  # autotune is not a peer
    skipped = vs.run_short_search(None, runs[:1])  # type: ignore[arg-type]
    assert skipped.status == "skipped" and "no peer answered" in skipped.reason
    table = vs.render([*runs, skipped], {"autotune": 1.0}, unit="tokens/s", global_batch=32)
    assert "| autotune-2x " in table and "skipped: no peer answered" in table


def test_the_short_search_runs_with_its_own_timeout(tmp_path: Path) -> None:
    from autotune.models.registry import get_model
    from autotune.testing.fake_caps import cpu_caps

    task = vs.Task(
        spec=get_model("gpt-small"), profile=None, caps=cpu_caps(), budget=8 * 10**9,
        budget_text="8GB", global_batch=32, seq_len=256, peer_steps=1, peer_timeout_s=60,
        search_timeout="4m", search_steps=None, tmp=tmp_path, pgids=[],
    )  # fmt: skip
    command = vs.search_command(task, tmp_path / "p.yaml", timeout="13s")
    flags = dict(zip(command[4::2], command[5::2], strict=True))
    assert flags["--timeout"] == "13s"
    assert vs._parser().parse_args(["--model", "mu", "--budget", "1GB"]).short_search
    off = vs._parser().parse_args(["--model", "mu", "--budget", "1GB", "--no-short-search"])
    assert not off.short_search
