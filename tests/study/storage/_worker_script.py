"""One worker of a shared search with faked bursts (tests/study/storage/test_workers*.py run it as a
process): ``python _worker_script.py FOLDER STORAGE TRIALS [--finish] [--device D --worker]``
(``--device``: the label its bursts are logged under, as ``run_workers`` gives it).
Each trial's burst appends a line to FOLDER/bursts.jsonl: the worker's pid, the device,
the config, and when the burst started and ended. With FAKE_BURST_PEERS=n, a worker's
first burst waits (up to a minute) until n workers have reached theirs: on a loaded
machine one worker's imports can outlast the other's whole share of the study."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from autotune.study import search, search_options
from autotune.testing.burst import FakeBurst, cpu_profile, toy_spec


class LoggedBurst(FakeBurst):
    def __init__(self, log: Path, delay: float, device: str | None, peers: int = 0) -> None:
        super().__init__()
        self.log = log
        self.delay = delay
        self.device = device  # the worker's device as --devices gave it (the burst: cpu)
        self.peers = peers  # workers to wait for before the first burst (0: none)

    def _meet_peers(self) -> None:
        ready = self.log.parent / f"ready-{os.getpid()}"
        ready.touch()
        deadline = time.monotonic() + 60
        while len(list(self.log.parent.glob("ready-*"))) < self.peers:
            if time.monotonic() > deadline:
                return  # the test's own checks say what went wrong
            time.sleep(0.05)

    def __call__(self, spec, config, **kwargs):  # type: ignore[no-untyped-def]
        if self.peers:
            self._meet_peers()
            self.peers = 0
        start = time.time()
        time.sleep(self.delay)
        result = super().__call__(spec, config, **kwargs)
        if kwargs.get("on_step") is not None and not kwargs.get("verify"):  # a trial's burst
            line = {
                "pid": os.getpid(),
                "device": self.device or kwargs.get("device"),
                "config": config.to_dict(),
                "start": start,
                "end": time.time(),
            }
            with self.log.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return result


def main() -> None:
    folder, storage, trials = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    finish = "--finish" in sys.argv
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else None
    delay = float(os.environ.get("FAKE_BURST_S", "0.2"))
    peers = int(os.environ.get("FAKE_BURST_PEERS", "0"))
    result = search(
        toy_spec(),
        budget="1GB",
        **search_options(
            hardware=cpu_profile(),
            burst_fn=LoggedBurst(folder / "bursts.jsonl", delay, device, peers),
            trials=trials,
            storage=storage,
            study="shared",
            output=folder / "best.yaml",
            runs_dir=folder / "runs",
            steps=2,
            warmup=0,
            worker=not finish,
            finish=finish,
        ),
    )
    print(json.dumps({"pid": os.getpid(), "preset": result.preset_path}))


if __name__ == "__main__":
    main()
