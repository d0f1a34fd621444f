"""Stand-ins for a trial's channel and a step's output, for driving ``Trial._timed_steps``
with scripted step times (tests/test_burst_stable.py, tests/test_burst_minimum.py)."""

from __future__ import annotations

from typing import Any


class RecordingChannel:
    """Keeps every message the trial sends: ``(kind, fields)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append((kind, fields))


class StepOut:
    """A step's output with a finite loss."""

    def loss_value(self) -> float:
        return 1.0
