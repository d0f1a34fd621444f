"""`autotune train` killed again and again at random moments (SIGKILL, SIGTERM or SIGINT,
to the process or to its whole process group), each time rerun with ``--resume auto``,
ends bit for bit where an uninterrupted run ends (the fault suite).

The kills land while Python and torch start, while the data and a checkpoint load, inside
steps, inside checkpoint writes and evaluations. Compared with the uninterrupted run: the
last checkpoint (model, optimizer, scheduler, RNG states, data position: every tensor equal,
not close) and every logged loss, learning rate, gradient norm and evaluation. Counted at
the end: no process of the run left (DataLoader workers included) and no temporary file
left in the run folder.

The kill schedule comes from a seeded RNG: ``AUTOTUNE_KILL_SEED=N`` replays or varies it
(the seed is printed, and named in every failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from child_signals import interactive
from fake_lm import FAKE_LM
from processes import describe_live

from autotune.train.run_folder import LOCK_FILE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX signals and process groups"),
]

KILLS = 22
STEPS = 300  # more than the kills can reach (at most MAX_LINES steps each), and enough
# that a run resumed near the start outlasts the test's reaction on a loaded machine
MAX_LINES = 4  # a kill comes within this many logged steps of a run's start
SEED = int(os.environ.get("AUTOTUNE_KILL_SEED", "20"))
STEP_LINE = re.compile(r"^step (\d+)/")
RESUMED_LINE = re.compile(r"^resumed from .* at step (\d+)$", re.MULTILINE)

# A kill's exit status: the clean stop (after the step, with a checkpoint) once the trainer
# handles the signal; death by the signal before that (while Python and torch start).
EXPECTED = {
    signal.SIGKILL: {-signal.SIGKILL},
    signal.SIGTERM: {128 + signal.SIGTERM, -signal.SIGTERM},
    signal.SIGINT: {128 + signal.SIGINT, -signal.SIGINT},
}


@dataclass
class Run:
    """One launch of ``autotune train``, its output read by a thread as it comes."""

    proc: subprocess.Popen[str]
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def steps_logged(self) -> int:
        return sum(1 for line in list(self.lines) if STEP_LINE.match(line))

    def resumed_at(self) -> int | None:
        """The step this run resumed from (None: it did not get that far, or started
        afresh)."""
        found = RESUMED_LINE.findall(self.output())
        return int(found[-1]) if found else None

    def output(self) -> str:
        return "".join(self.lines)


def _command(out: Path, corpus: Path, *, resume: bool) -> list[str]:
    cmd = [
        sys.executable, "-m", "autotune", "train", "--model", f"{FAKE_LM}:spec",
        "--data", str(corpus), "--out", str(out), "--max-steps", str(STEPS),
        "--set", "config.micro_batch=2", "--set", "config.seq_len=16",
        "--set", "config.num_workers=1", "--set", "training.log_interval=1",
        "--set", "training.checkpoint_interval=3", "--eval-interval", "25",
    ]  # fmt: skip
    return [*cmd, "--resume", "auto"] if resume else cmd


def _launch(cmd: list[str], env: Mapping[str, str]) -> Run:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env),
        start_new_session=True, preexec_fn=interactive,
    )  # fmt: skip
    return Run(proc)


def _kill_at_random(run: Run, rng: random.Random, startup_s: float) -> tuple[str, bool]:
    """Send ``run`` a random signal at a random moment: during start-up (a quarter of the
    kills) or within the first ``MAX_LINES`` logged steps, a few milliseconds after one
    (inside the next step, its checkpoint or its evaluation). Returns what was sent and
    whether training had started."""
    sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
    group = rng.random() < 0.5
    at_s = rng.uniform(0.0, startup_s) if rng.random() < 0.25 else float("inf")
    lines = rng.randint(1, MAX_LINES)
    delay = rng.uniform(0.0, 0.015)
    while run.proc.poll() is None:
        if time.monotonic() - run.started >= at_s:
            break
        if run.steps_logged() >= lines:
            time.sleep(delay)
            break
        time.sleep(0.001)
    training = run.steps_logged() > 0
    with contextlib.suppress(ProcessLookupError):  # it ended first
        (os.killpg if group else os.kill)(run.proc.pid, sig)
    return f"{sig.name} to the {'group' if group else 'process'}", training


def _records(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The train and eval records of metrics.jsonl, without their timings."""
    train, evals = [], []
    for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "train":
            train.append({k: record[k] for k in ("step", "epoch", "loss", "lr", "grad_norm")})
        elif record.get("type") == "eval":
            evals.append({k: v for k, v in record.items() if not k.endswith(("_s", "_per_s"))})
    return train, evals


def _mismatches(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two checkpoint states differ: tensors must be equal (not close)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [where]
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return [f"{where} keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [m for k in a for m in _mismatches(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where} length"]
        return [
            m
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for m in _mismatches(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [where]


def _load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def _processes_of(folder: Path) -> list[psutil.Process]:
    """Processes whose command line names ``folder`` (a run and its DataLoader workers)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if any(str(folder) in part for part in cmdline):
            found.append(process)
    return found


def _left_alive(folder: Path, wait_s: float, before: set[int]) -> list[str]:
    """The test's children (but those in ``before``: another test's helpers) and the run's
    processes still alive after ``wait_s`` (a worker whose parent was killed outright
    notices within PyTorch's 5 s watchdog)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = [
            line
            for p in psutil.Process().children(recursive=True) + _processes_of(folder)
            if p.pid not in before and (line := describe_live(p))
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_random_kills_of_training_resume_bit_exact(tmp_path: Path) -> None:
    print(f"kill schedule seed {SEED} (AUTOTUNE_KILL_SEED)")
    rng = random.Random(SEED)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    env = {
        **os.environ,
        "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(Path(FAKE_LM).parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    reference, out = tmp_path / "reference", tmp_path / "killed"
    started = time.monotonic()
    whole = _launch(_command(reference, corpus, resume=False), env)
    assert whole.proc.wait(timeout=300) == 0, whole.output()
    startup_s = 1.5 * (time.monotonic() - started)  # covers start-up whatever the machine

    kills: list[str] = []
    resumed_at: list[int] = []  # where the runs that got that far started: the progress
    while len(kills) < KILLS:
        run = _launch(_command(out, corpus, resume=True), env)
        sent, training = _kill_at_random(run, rng, startup_s)
        code = run.proc.wait(timeout=300)
        text = run.output()
        context = f"seed {SEED}, kill {len(kills) + 1} ({sent}):\n{text}"
        assert code != 0, f"the run finished before it was killed; raise STEPS ({context})"
        assert code in EXPECTED[signal.Signals[sent.split()[0]]], f"exit {code}; {context}"
        assert "skipping" not in text, f"a checkpoint did not load; {context}"
        # The trainer's clean stop never shows a traceback. (After kill -9 of the main
        # process alone, an orphaned DataLoader worker may print multiprocessing's own
        # as it exits: nothing of autotune's runs then.)
        if training and not sent.startswith("SIGKILL"):
            assert "Traceback" not in text, context
        kills.append(sent + ("" if training else " at start-up"))
        resumed_at += [step for step in [run.resumed_at()] if step is not None]

    final = _launch(_command(out, corpus, resume=True), env)
    assert final.proc.wait(timeout=300) == 0, final.output()
    resumed_at += [final.resumed_at() or 0]
    print(f"{len(kills)} kills: {dict(Counter(kills))}; the runs started at steps {resumed_at}")
    assert resumed_at[-1] > 0 and resumed_at == sorted(resumed_at), f"seed {SEED}: {resumed_at}"

    last = f"ckpt-step{STEPS:08d}.pt"
    mismatches = _mismatches(_load(reference / last), _load(out / last))
    mismatches += _mismatches(_load(reference / "best.pt"), _load(out / "best.pt"), "best.pt")
    want_train, want_evals = _records(reference)
    got_train, got_evals = _records(out)
    assert [r["step"] for r in got_train] == list(range(1, STEPS + 1)), f"seed {SEED}"
    mismatches += [
        f"step {a['step']}" for a, b in zip(want_train, got_train, strict=True) if a != b
    ]
    assert len(got_evals) == len(want_evals), f"seed {SEED}: evals {got_evals}"
    mismatches += [
        f"eval {a.get('step')}" for a, b in zip(want_evals, got_evals, strict=True) if a != b
    ]
    assert mismatches == [], f"seed {SEED}: not bit-exact after {len(kills)} kills: {mismatches}"

    assert _left_alive(out, wait_s=15, before=before) == [], f"seed {SEED}: processes left"
    # the folder's lock file stays by design (an OS lock lives on it; the holder file,
    # removed by the last clean run, must not)
    leftovers = [
        p.name
        for p in out.iterdir()
        if (p.name.startswith(".") or ".tmp" in p.name) and p.name != LOCK_FILE
    ]
    assert leftovers == [], f"seed {SEED}: temporary files left in the run folder"
