"""Many connections claiming one study attribute at the same moment (workers.py's claims)."""

from __future__ import annotations

import threading
from typing import Any

import optuna

from autotune.study.storage.optuna_glue import open_storage
from autotune.study.storage.ownership import claim_study_attr


def claim_at_once(url: str, *, threads: int = 8) -> list[Any]:
    """A fresh study at ``url``; ``threads`` threads, each with its own connection, claim
    one key at once (a barrier lines them up); what each read back as the holder."""
    optuna.create_study(study_name="s", storage=open_storage(url))
    barrier = threading.Barrier(threads)
    holders: list[Any] = []

    def claim(n: int) -> None:
        study = optuna.load_study(study_name="s", storage=open_storage(url))
        barrier.wait()
        holders.append(claim_study_attr(study, "k", {"n": n}))

    started = [threading.Thread(target=claim, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return holders
