"""One isolated measurement: the parent's supervision and the trial's own process (child).

The parent's side: ``supervisor`` (``run_burst``: start the trial, watch it, end its
tree), ``process`` (the trial's process and folder), ``trial_report`` (what the trial
reported and the status decided from it), ``result`` (``BurstResult`` and its figures).
Between them: ``request`` (what the parent sends) and ``channel`` (the JSON-lines pipe
back). The trial's side: ``child`` (the entry point, ``python -m autotune.burst.child``),
``trial`` (the set-up, the timed steps, the budget check), ``trial_batches`` (its batches)
and ``ranks`` (torchrun). Importing this package loads no torch; the trial does.
"""

from __future__ import annotations

from autotune.burst.result import BurstResult, BurstStatus
from autotune.burst.supervisor import run_burst

__all__ = ["BurstResult", "BurstStatus", "run_burst"]
