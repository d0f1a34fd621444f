"""A fake command runner for benchmarks/gpu_suite.py: it answers each step's command as the
real command would end on a GPU, its output built by autotune's own records where there is
one (a search's ``--json`` is ``SearchResult.to_dict()``, a training run's ``summary.json``
is ``TrainResult.to_dict()``, ``model_knobs.py``'s table is its ``table()``), so that the
suite's reports read the field names the real commands write."""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark_modules import load_benchmark

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.preset import save_preset
from autotune.preset.sections import Measured, ModelRef, Task
from tests.fake_presets import gpu_fingerprint, make_preset

suite = load_benchmark("gpu_suite")
GB = 10**9
H200_BYTES = 150_000_000_000
WINNER = TrainConfig(micro_batch=16, grad_accum=4, seq_len=1024, precision="bf16",
                     compile="default")  # fmt: skip
WINNER_TOKENS_PER_S = 505_000.0


@functools.cache
def model_knobs() -> types.ModuleType:
    return load_benchmark("model_knobs")


def write_winner(path: Path, *, tokens_per_s: float = WINNER_TOKENS_PER_S) -> Path:
    """gpt2-124m's winning preset as the search writes it (a real ``Preset``)."""
    preset = make_preset(
        name="gpt2-124m-cuda",
        model=ModelRef(name="gpt2-124m", args={}),
        task=Task(seq_len=1024, global_batch=64),
        config=WINNER,
        baseline=None,
        budget_bytes=int(0.9 * H200_BYTES),
        fingerprint=gpu_fingerprint("NVIDIA H200", "9.0", memory_bytes=H200_BYTES),
        measured=Measured(tokens_per_s=tokens_per_s, peak_memory_bytes=40 * GB, mfu=0.512),
    )
    save_preset(preset, path)
    return path


def gpt2_search_json(**changes: Any) -> dict[str, Any]:
    """``autotune search --model gpt2-124m --json`` as the search prints it: naive, the
    guide's hand-tuned config and a refinement in a race the refinement won, an OOM, the
    ledger of its time."""
    from autotune.study.race.race_records import Entrant, Paired, RaceResult
    from autotune.study.session.search_result import SearchResult
    from autotune.study.trials.ledger import TimeLedger
    from autotune.study.trials.records import TrialRecord

    def trial(number: int, role: str, config: TrainConfig, **figures: Any) -> TrialRecord:
        return TrialRecord(number=number, state="COMPLETE", status=figures.pop("status", "ok"),
                           config=config.to_dict(), role=role, ran=True, **figures)  # fmt: skip

    naive = trial(0, "naive", TrainConfig(micro_batch=1, grad_accum=64, seq_len=1024),
                  throughput=40_000.0, mfu=0.04, peak_memory_bytes=3 * GB)  # fmt: skip
    hand = trial(1, "hand-tuned", WINNER.replace(micro_batch=8, grad_accum=8),
                 throughput=402_000.0, mfu=0.395, peak_memory_bytes=24 * GB)  # fmt: skip
    oom = trial(2, "playbook", WINNER.replace(micro_batch=64, grad_accum=1, compile="off"),
                status="oom")  # fmt: skip
    best = trial(5, "refine", WINNER, throughput=WINNER_TOKENS_PER_S, mfu=0.51,
                 peak_memory_bytes=40 * GB, prediction_error_pct=4.5,
                 predicted_edge_micro_batch=32)  # fmt: skip
    entrants = (
        Entrant(record=best, roles=["finalist"], throughputs=[500_000.0, 510_000.0]),
        Entrant(record=hand, roles=["finalist", "expert"], throughputs=[400_000.0, 404_000.0]),
        Entrant(record=naive, roles=["naive"], throughputs=[40_000.0, 40_400.0]),
    )
    race = RaceResult(rounds=2, unit="tokens/s", entrants=entrants, winner=entrants[0],
                      runner_up=entrants[1], naive=entrants[2],
                      speedup=Paired(12.6, 12.4, 12.8, 2),
                      margin=Paired(1.26, 1.25, 1.27, 2))  # fmt: skip
    ledger = TimeLedger(total_s=352.0, trials_s=280.0, configs=9, first_compiles=4,
                        first_compiles_s=88.0, cached_compiles_s=20.0, process_starts_s=40.0,
                        warm_ups_s=30.0, timed_steps_s=52.0, race_s=70.0, writing_s=2.0,
                        other_s=50.0)  # fmt: skip
    fields: dict[str, Any] = dict(
        model="gpt2-124m", device="cuda", budget_bytes=int(0.9 * H200_BYTES), global_batch=64,
        seq_len=(1024,), objective="throughput", train_steps=None, unit="tokens/s",
        study_name="gpt2-124m-cuda", storage="sqlite:///gpt2.db", space_size=4000, best=best,
        verified=None, naive=naive, speedup=12.6, top=(best, hand), trials=(naive, hand, oom, best),
        skipped={}, preset_path="gpt2-124m.yaml", wall_s=352.0,
        stopped="the time limit (340 s) was reached", race=race, ledger=ledger,
    )  # fmt: skip
    fields.update(changes)
    return SearchResult(**fields).to_dict()


def knobs_stdout(rows: dict[str, list[tuple[float | None, int | None]]]) -> str:
    """``model_knobs.py --preset``'s output: its header lines, a progress line per burst,
    then its ``table()`` of ``rows`` (label: the rounds' (tokens/s, peak))."""
    cells = {("gpt2-124m", label): runs for label, runs in rows.items()}
    progress = "".join(
        f"  round {i + 1} gpt2-124m {label}: {t}\n"
        for label, runs in rows.items()
        for i, (t, _) in enumerate(runs)
    )
    return (
        "- date: today\n- gpt2-124m winner: mb 16x4 seq 1024 bf16, compile default\n"
        f"- not run: `compile=default`: the preset's own config\n{progress}\n"
        + model_knobs().table(cells)
        + "\n"
    )


KNOB_ROWS = {
    "winner": [(500_000.0, 40 * 2**30), (510_000.0, 40 * 2**30)],
    "sdpa_backend=cudnn": [(530_000.0, 39 * 2**30), (520_000.0, 39 * 2**30)],
    "micro_batch=64,loss=chunked": [(None, None), (None, None)],
}


def train_summary(out: Path, *, steady: float, steps: int = 200) -> None:
    """A training run's ``summary.json``, from a real ``TrainResult``."""
    from autotune.train.run_result import TrainResult

    result = TrainResult(out_dir=out, start_step=0, steps=steps, total_steps=200,
                         losses=(4.0, 3.5), eval=None, best_eval_loss=None,
                         steady_tokens_per_s=steady, steady_samples_per_s=steady / 1024,
                         mfu=0.5, interrupted=None, checkpoint=None, config=WINNER,
                         median_tokens_per_s=steady * 1.01)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result.to_dict(), default=str))


class FakeRunner:
    """Answers each step's command as it would end on a GPU; ``override`` changes one
    step's answer: a (returncode, stdout) pair, or None for a command killed at its limit.
    ``seconds``: each command's wall time (its step's name: seconds), reported and, with
    ``clock``, spent on that clock."""

    def __init__(self, *, seconds: dict[str, float] | None = None, **override: Any) -> None:
        self.override = override
        self.seconds = seconds or {}
        self.calls: list[list[str]] = []
        self.timeouts: list[float] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self, argv: Sequence[str], *, timeout_s: float, cwd: Path) -> Any:
        argv = list(argv)
        self.calls.append(argv)
        self.timeouts.append(timeout_s)
        assert timeout_s > 0
        name = self._name(argv)
        wall = min(self.seconds.get(name, 1.5), timeout_s)
        self.now += wall
        # an overridden answer writes none of the files the command writes when it works
        answer = self.override[name] if name in self.override else self._answer(name, argv)
        if answer is None:
            return suite.Completed(None, "", "killed", timeout_s, stopped=True)
        code, out = answer
        err = "some progress on stderr\nthe last line"
        if wall >= timeout_s:  # stopped at its limit: SIGTERM, after which it prints its table
            return suite.Completed(143, out, err, wall, stopped=True)
        return suite.Completed(code, out, err, wall)

    @staticmethod
    def _name(argv: list[str]) -> str:
        script = next((Path(a).stem for a in argv if a.endswith(".py")), "")
        if "probe" in argv:
            return "probe"
        if "pytest" in argv:
            return "gpu-tests"
        if "bench" in argv:
            return "oom-big" if "gpt2-124m" in argv else "oom-small"
        if "search" in argv:
            return "search-gpt2" if "gpt2-124m" in argv else "search"
        if "train" in argv:
            return "train-gpt2" if "gpt2-124m.yaml" in " ".join(argv) else "train"
        if script == "model_knobs":
            return "knobs-gpt2" if "--preset" in argv else "knobs"
        if script == "warm_start":
            return "warm-start"
        if script == "compare":
            return f"compare-{argv[argv.index('--model') + 1]}"
        raise AssertionError(f"unexpected command {argv}")

    def _answer(self, name: str, argv: list[str]) -> tuple[int, str]:
        def after(flag: str) -> str:
            return argv[argv.index(flag) + 1]

        if name == "probe":
            gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": 85 * GB,
                   "compute_capability": [9, 0], "driver_version": "580.159.04"}  # fmt: skip
            software = {"torch_version": "2.11.0+cu130", "torch_cuda_version": "13.0"}
            return 0, json.dumps({"gpus": [gpu], "software": software})
        if name == "gpu-tests":
            return 0, "....\n===== 9 passed, 1 skipped in 42.0s =====\n"
        if name == "oom-big":
            burst = {"status": "oom", "reason": "CUDA out of memory", "peak_memory_bytes": 8e9}
            return 1, json.dumps(burst)
        if name == "oom-small":
            return 0, json.dumps({"status": "ok", "peak_memory_bytes": 1.2e9})
        if name == "search-gpt2":
            write_winner(Path(after("--output")))
            return 0, "progress\n" + json.dumps(gpt2_search_json())
        if name == "search":
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
            return 0, "progress\n" + json.dumps(found)
        if name == "train-gpt2":
            train_summary(Path(after("--out")), steady=500_000.0)
            return 0, ""
        if name == "train":
            out = Path(after("--out"))
            out.mkdir(parents=True)
            (out / "summary.json").write_text(
                json.dumps({"steps": 300, "steady_tokens_per_s": 190000.0})
            )
            return 0, ""
        if name == "knobs-gpt2":
            return 0, knobs_stdout(KNOB_ROWS)
        if name == "warm-start":
            return 0, warm_start_stdout()
        if name == "knobs":
            table = (
                "- date: today\n\n| model | config | median | peak | vs base |\n"
                "|--|--|--:|--:|--:|\n"
                "| gpt2-124m | base | 400,000 | 20.00 GiB | 1.00x |\n"
                "| gpt2-124m | loss=chunked | 410,000 | 14.00 GiB | 0.70x |\n"
            )
            return 0, table
        out = Path(after("--out"))  # compare.py
        out.mkdir(parents=True)
        model = after("--model")
        table = f"# compare: {model}\n\n| policy | tokens/s | MFU (bf16 peak) |\n|--|--:|--:|\n"
        (out / "compare.md").write_text(table + "| autotune | 1 | 40% |\n")
        return 0, ""


def warm_start_stdout() -> str:
    """``warm_start.py --device cuda``'s output: a header line, then its own table of bursts
    (warm: 2.1 and 3.2 s, fresh: 7.0 and 8.0 s)."""

    def ok(wall: float) -> BurstResult:
        return BurstResult(status="ok", wall_s=wall, compile_s=1.0, tokens_per_s=100.0)

    cells = {
        ("mu naive", "fresh"): [ok(7.0), ok(7.0)],
        ("mu naive", "warm"): [ok(2.1), ok(2.1)],
        ("mu compiled", "fresh"): [ok(8.0), ok(8.0)],
        ("mu compiled", "warm"): [ok(3.2), ok(3.2)],
    }
    return "- date: today\n  round 1 mu naive warm: wall 2.1 s\n\n" + load_benchmark(
        "warm_start"
    ).table(cells)


def statuses(text: str) -> dict[str, str]:
    """The suite's steps table: step name -> status."""
    names = {s.name for s in suite.STEPS}
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    return {row[0]: row[1] for row in cells if len(row) == 5 and row[0] in names}


def run_main(tmp_path: Path, runner: FakeRunner, *extra: str) -> tuple[int, str]:
    out = tmp_path / "out" / "suite.md"
    code = suite.main(
        ["--out", str(out), "--work", str(tmp_path / "work"), *extra],
        runner=runner,
        has_cuda=lambda: True,
        check_imports=list,
    )
    return code, out.read_text()
