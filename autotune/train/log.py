"""The trainer's console and metrics output (rank 0 only).

A rich progress bar on a terminal, plain lines otherwise, one JSON record per line with
``json_logs``; every record also goes to ``metrics.jsonl`` in the run folder and, when it
is installed, to TensorBoard under ``tb/``. When the run ends (or is interrupted), its loss
and throughput curves are drawn from ``metrics.jsonl`` into ``curves.png`` where matplotlib
is installed (the ``report`` extra).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.core.errors import UsageError
from autotune.core.files import atomic_write_text, atomic_writer, read_capped, regular_file_size

__all__ = ["CURVES_FILE", "Display", "fmt_rate", "is_tty", "write_curves"]

CURVES_FILE = "curves.png"
# metrics.jsonl, read by the one rule for a user's path: a regular file of at most 2 GiB
# (a folder, a FIFO or a device in its place is refused, named, before the run goes on)
_METRICS = "metrics file"


def _metrics_error(message: str) -> UsageError:
    return UsageError(
        f"{message} (the run writes its metrics there): move it away, or train into a new folder"
    )


_MAX_METRICS_BYTES = 2 * 2**30


def _metrics_lines(path: Path) -> list[tuple[str, float]]:
    """The records of ``metrics.jsonl`` as ``(line, step)``: a line that is no UTF-8 JSON
    object (cut short by a kill, or damaged) is left out, as is one whose step is no number
    (a record without one counts as step 0)."""
    raw = read_capped(path, limit=_MAX_METRICS_BYTES, what=_METRICS, error=_metrics_error)
    found: list[tuple[str, float]] = []
    for chunk in raw.splitlines():
        try:
            line = chunk.decode("utf-8")
            record = json.loads(line)
        except ValueError:  # UnicodeDecodeError too
            continue
        step = record.get("step", 0) if isinstance(record, dict) else None
        if isinstance(step, int | float) and not isinstance(step, bool):
            found.append((line, step))
    return found


def is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class Display:
    """Console output (rank 0): a rich progress bar on a terminal, plain lines otherwise,
    JSON records only with ``json_logs``; plus metrics.jsonl and TensorBoard."""

    def __init__(
        self,
        out_dir: Path,
        *,
        enabled: bool,
        json_logs: bool,
        progress: bool | None,
        echo: Callable[[str], None] | None,
        tensorboard: bool,
    ) -> None:
        self.enabled = enabled
        self.json_logs = json_logs
        self.metrics_path = out_dir / "metrics.jsonl"
        self.curves_path = out_dir / CURVES_FILE
        self._rate_label = "tokens/s"
        self._echo = echo
        self._metrics: Any = None
        self._tb: Any = None
        self._progress: Any = None
        self._task: Any = None
        self._use_progress = (
            enabled
            and not json_logs
            and echo is None
            and (progress if progress is not None else is_tty())
        )
        # opened with metrics.jsonl: nothing is written before the run holds its folder
        self._tb_dir = out_dir / "tb" if enabled and tensorboard else None

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._echo is not None:
            self._echo(text)
        elif self.json_logs:
            print(text, file=sys.stderr, flush=True)
        elif self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def start(self, total: int, done: int) -> None:
        if not self._use_progress:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=done, info="")

    def advance(self, step: int, info: str | None = None) -> None:
        if self._progress is not None:
            kwargs: dict[str, Any] = {"completed": step}
            if info is not None:
                kwargs["info"] = info
            self._progress.update(self._task, **kwargs)

    def open_metrics(self, *, truncate_after: int | None) -> None:
        """Open metrics.jsonl for appending (on resume, drop records past the checkpoint),
        and the TensorBoard writer where it is installed (which hides its events past the
        checkpoint: ``purge_step``)."""
        if not self.enabled:
            return
        if self._tb_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                # the events past the checkpoint are hidden too (a killed run's, on resume)
                purge = None if truncate_after is None else truncate_after + 1
                self._tb = SummaryWriter(log_dir=str(self._tb_dir), purge_step=purge)
            except Exception:  # tensorboard is optional
                self._tb = None
        found = regular_file_size(
            self.metrics_path, what=_METRICS, error=_metrics_error, missing_ok=True
        )
        if truncate_after is not None and found is not None:
            kept = [
                line for line, step in _metrics_lines(self.metrics_path) if step <= truncate_after
            ]
            atomic_write_text(self.metrics_path, "".join(k + "\n" for k in kept))
        self._metrics = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115

    def record(self, record: Mapping[str, Any], line: str | None = None) -> None:
        if not self.enabled:
            return
        text = json.dumps(record, default=str)
        if self._metrics is not None:
            self._metrics.write(text + "\n")
            self._metrics.flush()
        if self._tb is not None:
            prefix = record.get("type", "train")
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self._tb.add_scalar(f"{prefix}/{key}", value, record.get("step", 0))
            if isinstance(record.get("sample"), str):
                self._tb.add_text("sample", record["sample"], record.get("step", 0))
        if self.json_logs:
            print(text, flush=True)
        elif line is not None:
            self.message(line)

    def log_train(
        self, record: Mapping[str, Any], *, total: int, rate: float | None, label: str
    ) -> None:
        """A train record, and its line: loss, the rate (in ``label``), MFU, where the time of
        a step went; the progress bar shows the first three."""
        self._rate_label = label
        mfu = record["mfu"]
        mfu_text = f" | MFU {mfu:.1%}" if mfu is not None else ""
        info = f"loss {record['loss']:.4f} | {fmt_rate(rate)} {label}{mfu_text}"
        line = (
            f"step {record['step']}/{total} | {info} | lr {record['lr']:.2e} | step "
            f"{record['step_time_s'] * 1e3:.0f} ms (data {record['data_wait_s'] * 1e3:.1f}, "
            f"compute {record['compute_s'] * 1e3:.0f}, optimizer "
            f"{record['optimizer_s'] * 1e3:.1f})"
        )
        self.record(record, line)
        self.advance(record["step"], info)

    def log_eval(self, record: Mapping[str, Any]) -> None:
        """An eval record, and its line: the validation loss, the metrics, a text sample."""
        parts = [f"eval step {record['step']}: val loss {record['loss']:.4f}"]
        parts += [
            f"{k} {v:.4g}"
            for k, v in record.items()
            if k not in ("loss", "samples", "improved") and isinstance(v, float)
        ]
        line = " | ".join(parts)
        if "sample" in record:
            line += f"\n  prompt: {record['prompt']!r}\n  sample: {record['sample']!r}"
        self.record(record, line)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self.enabled and self.metrics_path.exists():
            note = write_curves(self.metrics_path, self.curves_path, rate_label=self._rate_label)
            if note:
                self.message(note)


def fmt_rate(x: float | None) -> str:
    """A rate for a log line: ``12,345`` reads ``12.3k``; ``-`` where there is none."""
    if x is None:
        return "-"
    return f"{x / 1e3:,.1f}k" if x >= 1e4 else f"{x:,.0f}"


def write_curves(metrics: Path, png: Path, *, rate_label: str = "tokens/s") -> str | None:
    """Draw the run's loss (train, and eval where there is one) and throughput from
    ``metrics.jsonl`` into ``png``. Returns a one-line note instead of failing: the curves
    are a convenience, never a reason for a run to fail."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f'note: pip install "autotune-train[report]" to get {png.name} (loss and throughput)'
    try:
        train, evals = _read_curves(metrics)
        if not train:
            return None
        from matplotlib.figure import Figure

        key = "samples_per_s" if rate_label == "samples/s" else "tokens_per_s"
        fig = Figure(figsize=(10, 3.6), layout="constrained")
        loss_ax, rate_ax = fig.subplots(1, 2)
        loss_ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
        if evals:
            eval_steps = [r["step"] for r in evals]
            loss_ax.plot(eval_steps, [r["loss"] for r in evals], "o-", label="eval")
        loss_ax.set(xlabel="step", ylabel="loss", title="Loss")
        loss_ax.legend()
        rated = [r for r in train if isinstance(r.get(key), (int, float))]
        rate_ax.plot([r["step"] for r in rated], [r[key] for r in rated], color="#2ca02c")
        rate_ax.set(xlabel="step", ylabel=rate_label, title="Throughput")
        rate_ax.set_ylim(bottom=0)
        for ax in (loss_ax, rate_ax):
            ax.grid(alpha=0.3)
        with atomic_writer(png, binary=True) as f:
            fig.savefig(f, format="png", dpi=100)
    except Exception as exc:  # a plotting failure must not fail the run
        return f"note: could not draw {png.name}: {type(exc).__name__}: {exc}"
    return None


def _read_curves(metrics: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The train and eval records of ``metrics.jsonl`` that carry a step and a loss."""
    train: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    for line, _ in _metrics_lines(metrics):
        record = json.loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("loss"), (int, float)):
            continue
        if not isinstance(record.get("step"), int):
            continue
        (evals if record.get("type") == "eval" else train).append(record)
    return train, evals
