"""benchmarks/gpu_suite.py's gpt2-124m steps (benchmarks/_gpu_gpt2.py) on a CPU: each
report read from output that autotune's own records write (the search's ``--json``, the
training run's ``summary.json``, model_knobs.py's table), the knobs' variants and command,
the 0.95x training check."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_gpu_suite import (
    KNOB_ROWS,
    WINNER,
    FakeRunner,
    gpt2_search_json,
    knobs_stdout,
    run_main,
    statuses,
    suite,
    train_summary,
    write_winner,
)

# the modules gpu_suite imported (one StepFailed class for both)
gpt2 = importlib.import_module("_gpu_gpt2")
steps = importlib.import_module("_gpu_steps")


def _ctx(tmp_path: Path, **changes: Any) -> Any:
    return steps.Context(work=tmp_path / "work", out_dir=tmp_path, **changes)


def _completed(stdout: str, code: int = 0, **changes: Any) -> Any:
    return steps.Completed(code, stdout, "", 352.0, **changes)


# -- (a) the search -------------------------------------------------------------------------
def test_the_search_report_reads_the_searchs_json(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    write_winner(ctx.winner)
    found = gpt2_search_json()
    report = gpt2._search_report(ctx, [_completed(json.dumps(found))])
    figures = report.figures
    assert figures["tokens_per_s"] == 505_000.0  # the race's median, not the trial's figure
    assert figures["mfu"] == pytest.approx(0.512)  # the preset's (the race's typical burst)
    assert figures["vs_hand_tuned"] == pytest.approx(505_000 / 402_000)
    assert figures["configs"] == 9 and figures["limit_shrunk"] is False
    assert figures["counts"]["infeasible"] == 1
    assert "51.2%: met" in report.section and "1.26x: met" in report.section
    assert "5 min 52 s: within the limit +10%" in report.section
    assert "| first compiles (4)           |       88 s |       25% |" in report.section
    assert "bf16: 1" in report.section  # the OOMs executed, per class
    assert report.result.startswith("9 configs in 5 min 52 s; winner mb 16x4 seq 1024 bf16")
    saved = json.loads((tmp_path / "search-gpt2.json").read_text())
    assert saved["ledger"]["configs"] == 9  # the whole JSON comes back for later reading
    assert (tmp_path / "gpt2-124m.yaml").read_text() == ctx.winner.read_text()  # so does the preset


def test_the_search_report_says_what_missed_its_target(tmp_path: Path) -> None:
    found = gpt2_search_json(wall_s=400.0, ledger=None)
    found["race"]["winner"] = found["race"]["entries"][1]["label"]  # the hand-tuned won
    found["best"]["mfu"] = 0.395
    report = gpt2._search_report(_ctx(tmp_path), [_completed(json.dumps(found))])
    assert "39.5%: 10.5 points short of it" in report.section
    assert "1.00x: 16.7% short of it (the winner is the hand-tuned config)" in report.section
    assert "6 min 40 s: OVER the limit +10%" in report.section
    assert "no ledger" in report.section


def test_a_search_with_no_winner_fails_its_step(tmp_path: Path) -> None:
    found = gpt2_search_json(best=None, stopped="no config fit the budget")
    with pytest.raises(steps.StepFailed, match="no winner: no config fit the budget"):
        gpt2._search_report(_ctx(tmp_path), [_completed(json.dumps(found))])


def test_the_hand_tuned_ratio_needs_both_in_the_race() -> None:
    found = gpt2_search_json()
    found["race"]["entries"] = found["race"]["entries"][:1]
    assert gpt2.vs_hand_tuned(found) == (None, "the hand-tuned config was not in the race")
    found["trials"] = [t for t in found["trials"] if t["role"] != "hand-tuned"]
    assert gpt2.vs_hand_tuned(found)[0] is None


def test_the_default_search_limit_is_autotunes() -> None:
    from autotune.study.session.options import DEFAULT_TIME_LIMIT_S

    assert steps.SEARCH_DEFAULT_LIMIT_S == DEFAULT_TIME_LIMIT_S
    assert steps.search_limit(None) == (DEFAULT_TIME_LIMIT_S, False)
    assert steps.search_limit(steps.SEARCH_WANT_S) == (DEFAULT_TIME_LIMIT_S, False)
    limit, shrunk = steps.search_limit(200)
    assert shrunk and limit * steps.SEARCH_OVERRUN + steps.SEARCH_END_S <= 200


def test_a_search_step_is_stopped_only_after_the_search_has_ended_by_itself() -> None:
    """The suite sends SIGTERM ``STOP_GRACE_S`` before a step's limit: a search step must
    hold the search's latest end (its limit plus ``OVERRUN_SHARE``) before that, or a search
    still writing its preset is stopped and the steps after it have no winner."""
    from autotune.study.session.deadline import OVERRUN_SHARE

    assert pytest.approx(1 + OVERRUN_SHARE) == steps.SEARCH_OVERRUN
    latest_end = steps.SEARCH_DEFAULT_LIMIT_S * (1 + OVERRUN_SHARE)
    assert latest_end < steps.SEARCH_WANT_S - steps.STOP_GRACE_S
    for granted in (160.0, 200.0, 300.0):
        limit, _ = steps.search_limit(granted)
        assert granted - steps.STOP_GRACE_S > limit * (1 + OVERRUN_SHARE)


# -- (b) the knobs ----------------------------------------------------------------------------
def test_the_knob_variants_change_what_the_winner_does_not_have() -> None:
    assert gpt2.knob_variants(WINNER.to_dict()) == [
        "sdpa_backend=cudnn",
        "sdpa_backend=flash",
        "sdpa_backend=efficient",
        "fused_optimizer=true",
        "expandable_segments=true",
        "micro_batch=32,loss=chunked",
        "micro_batch=64,loss=chunked",
        "micro_batch=64,loss=chunked,activation_checkpointing=true,checkpoint_every=2",
        "compile=max-autotune-no-cudagraphs",
        "compile=reduce-overhead",
    ]
    eager = WINNER.replace(micro_batch=64, grad_accum=1, fused_optimizer=True, compile="off",
                           knobs={"attention": "eager", "loss": "chunked"})  # fmt: skip
    variants = gpt2.knob_variants(eager.to_dict())
    assert variants[:4] == [
        "attention=sdpa,sdpa_backend=cudnn",
        "attention=sdpa,sdpa_backend=flash",
        "attention=sdpa,sdpa_backend=efficient",
        "fused_optimizer=false",  # foreach AdamW against the fused winner
    ]
    assert "activation_checkpointing=true,checkpoint_every=2" in variants  # no larger batch
    assert not any(v.startswith("micro_batch") for v in variants)
    assert variants[-3:] == [f"compile={m}" for m in gpt2.COMPILE_MODES]


def test_float8_is_a_variant_only_where_the_card_has_fp8_tensor_cores() -> None:
    """On an H200 (9.0) or an L4 (8.9) fp8 comes before the compile modes, compiled as the
    winner is, or with compile on where the winner runs eager (eager float8 is slow); on an
    A100 (8.0), or a card of unknown capability, it is no variant."""
    winner = WINNER.to_dict()
    hopper = gpt2.knob_variants(winner, "9.0")
    assert hopper == [*gpt2.knob_variants(winner)[:-2], "fp8_linears=true", *hopper[-2:]]
    assert "fp8_linears=true" in gpt2.knob_variants(winner, "8.9")
    for capability in ("8.0", None, "n/a"):
        assert not any("fp8" in v for v in gpt2.knob_variants(winner, capability))
    eager = WINNER.replace(compile="off").to_dict()
    assert "fp8_linears=true,compile=default" in gpt2.knob_variants(eager, "9.0")
    on = WINNER.replace(fp8_linears=True).to_dict()
    assert "fp8_linears=false" in gpt2.knob_variants(on, "9.0")
    assert steps._summary(on).endswith("compile=default fp8")  # a winner with it says so


def test_the_knobs_command_runs_model_knobs_on_the_winner_within_its_time(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path, granted_s=125.0)
    winner = write_winner(ctx.winner)
    (argv,) = gpt2._knobs_commands(ctx)
    assert argv[1].endswith("benchmarks/model_knobs.py")
    assert argv[argv.index("--preset") + 1] == str(winner)
    assert argv[argv.index("--within") + 1] == "100s"
    assert argv[argv.index("--device") + 1] == "cuda"
    variants = [argv[i + 1] for i, a in enumerate(argv) if a == "--variant"]
    assert variants == gpt2.knob_variants(WINNER.to_dict(), "9.0")  # the H200's
    assert "fp8_linears=true" in variants
    with pytest.raises(steps.NotReady, match="no winner preset"):
        gpt2._knobs_commands(_ctx(tmp_path / "elsewhere"))


def test_the_knobs_report_reads_model_knobs_table(tmp_path: Path) -> None:
    report = gpt2._knobs_report(_ctx(tmp_path), [_completed(knobs_stdout(KNOB_ROWS))])
    assert report.result == "fastest: sdpa_backend=cudnn at 1.04x the winner"
    rows = {r["config"]: r for r in report.figures["rows"]}
    assert rows["sdpa_backend=cudnn"]["ratio"] == 1.04
    assert rows["sdpa_backend=cudnn"]["peak_ratio"] == 0.97
    assert rows["micro_batch=64,loss=chunked"]["ratio"] is None  # both bursts failed
    assert "round 1" not in report.section and "not run: `compile=default`" in report.section
    slower = {"winner": KNOB_ROWS["winner"], "fused_optimizer=true": [(490_000.0, 1)]}
    report = gpt2._knobs_report(_ctx(tmp_path), [_completed(knobs_stdout(slower))])
    assert report.result == "1 variants measured, none faster than the winner"
    with pytest.raises(steps.StepFailed, match="exit 2, 0 rows"):
        gpt2._knobs_report(_ctx(tmp_path), [_completed("usage: ...", code=2)])


def test_knobs_stopped_at_their_limit_keep_the_table_they_printed(tmp_path: Path) -> None:
    stopped = {"knobs-gpt2": (143, knobs_stdout(KNOB_ROWS))}
    runner = FakeRunner(seconds={"knobs-gpt2": 1e9}, **stopped)
    code, text = run_main(tmp_path, runner, "--within", "1h", "--steps",
                          "search-gpt2,knobs-gpt2")  # fmt: skip
    assert code == 1 and statuses(text)["knobs-gpt2"] == "timeout"
    assert "stopped at its limit of 15 min 00 s; fastest: sdpa_backend=cudnn" in text
    assert "| gpt2-124m | sdpa_backend=cudnn " in text


# -- (c) training on the winner ------------------------------------------------------------------
@pytest.mark.parametrize(("steady", "passed"), [(480_000.0, True), (479_000.0, False)])
def test_training_is_held_to_095_of_the_preset(tmp_path: Path, steady: float, passed: bool) -> None:
    ctx = _ctx(tmp_path)
    write_winner(ctx.winner, tokens_per_s=505_000.0)
    train_summary(ctx.work / "train-gpt2", steady=steady)
    run = [_completed("")]
    if passed:
        report = gpt2._train_report(ctx, run)
        assert report.result == "train / preset 0.95x: at least 0.95x"
        assert report.figures["passed"] is True and report.figures["steps"] == 200
        assert "0.95x: met" in report.section
    else:
        with pytest.raises(steps.StepFailed, match=r"train / preset 0.95x: below 0.95x") as exc:
            gpt2._train_report(ctx, run)
        assert "0.95x: 0.2% short of it" in str(exc.value)  # 479,000 / 505,000 = 0.9485


def test_a_training_run_cut_at_its_limit_reports_the_steps_it_ran(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    write_winner(ctx.winner)
    train_summary(ctx.work / "train-gpt2", steady=500_000.0, steps=150)
    report = gpt2._train_report(ctx, [_completed("", code=143, stopped=True)])
    assert "| 150 of 200 |" in report.section
    (ctx.work / "train-gpt2" / "summary.json").unlink()
    with pytest.raises(steps.StepFailed, match=r"exit 143, no summary\.json"):
        gpt2._train_report(ctx, [_completed("", code=143, stopped=True)])


def test_the_train_step_waits_for_a_winner(tmp_path: Path) -> None:
    with pytest.raises(steps.NotReady, match="no winner preset"):
        gpt2._train_commands(_ctx(tmp_path))
    failed = {"search-gpt2": (1, json.dumps({"best": None, "stopped": "interrupted"}))}
    code, text = run_main(tmp_path, FakeRunner(**failed), "--within", "1h", "--steps",
                          "search-gpt2,knobs-gpt2,train-gpt2")  # fmt: skip
    assert code == 1 and statuses(text) == {
        "search-gpt2": "failed", "knobs-gpt2": "skipped", "train-gpt2": "skipped",
    }  # fmt: skip
    assert "no winner preset at" in text


def test_the_suites_steps_are_named_once() -> None:
    names = [s.name for s in suite.STEPS]
    assert len(names) == len(set(names)) and set(suite.LEASE_PLAN) <= set(names)
