"""A run folder has one writer: a second run into a folder in use is refused at once,
naming the running one; the lock of a run killed outright is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_lm import make_spec

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core.errors import UsageError
from autotune.data import TrainData, prepare_lm_data
from autotune.engine.distributed import DistInfo
from autotune.train.run_folder import HOLDER_FILE, RunFolder
from autotune.train.trainer import Trainer

SEQ = 16

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TrainData:
    return prepare_lm_data(
        None, seq_len=SEQ, vocab_size=260, cache_dir=tmp_path_factory.mktemp("cache")
    )


def trainer(out: Path, data: TrainData, **kwargs: object) -> Trainer:
    return Trainer(
        make_spec(),
        TrainConfig(micro_batch=4, grad_accum=1, seq_len=SEQ),
        TrainingDefaults(max_steps=2, log_interval=1, eval_interval=100, eval_batches=1),
        data,
        out,
        echo=lambda _: None,
        option_names={"out_dir": "--out"},
        **kwargs,  # type: ignore[arg-type]
    )


def folder(path: Path, *, rank: int = 0) -> RunFolder:
    return RunFolder(
        path, dist=DistInfo(rank=rank, world_size=2 if rank else 1), keep_last=2, message=print
    )


HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from autotune.engine.distributed import DistInfo
    from autotune.train.run_folder import RunFolder

    with RunFolder(Path(sys.argv[1]), dist=DistInfo(), keep_last=1, message=print).locked():
        print("held", flush=True)
        time.sleep(120)
    """
)


def test_a_second_run_into_a_busy_folder_is_refused_at_once(
    tmp_path: Path, data: TrainData
) -> None:
    out = tmp_path / "run"
    first = trainer(out, data).run()
    assert first.steps == 2
    with folder(out).locked():  # a run is writing this folder right now
        before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
        with pytest.raises(UsageError) as info:
            trainer(out, data, resume="auto").run()
        after = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    message = str(info.value)
    assert f"{out} is in use by another training run (pid {os.getpid()} on " in message
    assert "one writer" in message and "--out" in message and "\n" not in message
    assert after == before  # it wrote nothing
    assert not (out / HOLDER_FILE).exists()  # the holder's record goes with its lock
    again = trainer(out, data, resume="auto", tensorboard=False).run()  # free again
    assert again.start_step == 2


def test_nothing_is_written_before_the_folder_is_held(tmp_path: Path, data: TrainData) -> None:
    out = tmp_path / "run"
    with folder(out).locked():
        with pytest.raises(UsageError, match="in use by another training run"):
            trainer(out, data).run()  # TensorBoard on: its writer must not start either
        assert sorted(p.name for p in out.iterdir()) == [".autotune.lock", HOLDER_FILE]


def test_the_lock_of_a_run_killed_outright_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(UsageError, match=f"pid {holder.pid} on "), folder(out).locked():
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((out / HOLDER_FILE).read_text())["pid"] == holder.pid  # left behind
    with folder(out).locked():  # the OS dropped the dead holder's lock
        assert json.loads((out / HOLDER_FILE).read_text())["pid"] == os.getpid()


def test_only_rank_0_holds_the_folder(tmp_path: Path) -> None:
    """Under torchrun rank 0 alone writes the folder, so it alone takes the lock: the
    other ranks of the same run must not be refused by it."""
    with folder(tmp_path).locked(), folder(tmp_path, rank=1).locked():
        pass
