"""``autotune report``: a search as one self-contained HTML page (and a summary PNG).

- ``data``: what a page shows, gathered from a study, a preset, or both (``ReportData``,
  ``load_report_data``);
- ``plots``: the plots, drawn with matplotlib (inline SVG for the page, PNG for ``--png``);
- ``page``: the HTML, one section per question (``render_html``, ``race_html``), from the
  Jinja2 templates in ``templates/`` (autoescaped: every string is data, never markup).

matplotlib is an optional extra (``pip install "autotune-train[report]"``); without it
``write_report`` raises a ``UsageError`` that says so. Nothing here imports a model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from autotune.core.errors import UsageError
from autotune.core.files import file_head
from autotune.report.data import ReportData, load_report_data

__all__ = ["ReportData", "load_report_data", "page_beside", "write_report"]


def page_beside(preset: str | Path) -> Path:
    """Where ``autotune search --report`` puts a preset's page: best.yaml -> best.html."""
    return Path(preset).with_suffix(".html")


def write_report(
    source: str | Path,
    *,
    out: str | Path | None = "report.html",
    png: str | Path | None = None,
    storage: str | None = None,
    runs_dir: str | Path = "autotune_runs",
) -> ReportData:
    """Write the report of ``source`` (a study's name, or a preset's path or name) to
    ``out`` (HTML; None: not written) and, with ``png``, the summary image of its two main
    plots. Returns what the page shows. ``UsageError`` (exit code 2) for a source that
    names nothing, or when matplotlib is missing."""
    from autotune.core.files import atomic_write_text
    from autotune.report import page, plots

    plots.require_matplotlib()
    data = load_report_data(source, storage=storage, runs_dir=runs_dir)
    _refuse_inputs(data, out=out, png=png)
    _check_folders(out=out, png=png)  # before the plots are drawn (seconds)
    _refuse_others(out=out, png=png)
    if out is not None:
        text = page.render_html(data)
        with _writing(out, "--out"):
            atomic_write_text(Path(out).expanduser(), text)
    if png is not None:
        with _writing(png, "--png"):
            plots.summary_png(data, Path(png).expanduser())
    return data


def _refuse_inputs(data: ReportData, *, out: str | Path | None, png: str | Path | None) -> None:
    """``--out``/``--png`` must not replace what the report is read from: the preset, the
    study's SQLite or journal file (``report best.yaml -o best.yaml`` lost the preset)."""
    from autotune.study.storage.ownership import storage_files

    inputs: dict[Path, str] = {}
    if data.preset_path:
        inputs[Path(data.preset_path).expanduser().resolve()] = "the preset it reports"
    for stored in storage_files(data.storage) if data.storage else set():
        inputs[stored] = "the study's storage file"
    written: dict[Path, str] = {}
    for path, flag in ((out, "--out"), (png, "--png")):
        if path is None:
            continue
        target = Path(path).expanduser().resolve()
        if target in inputs:
            raise UsageError(
                f"{flag} {str(path)!r} is {inputs[target]}: writing there would destroy it; "
                "give another file"
            )
        if target in written:
            raise UsageError(f"--out and --png are the same file {str(path)!r}; give two files")
        written[target] = flag


def _check_folders(*, out: str | Path | None, png: str | Path | None) -> None:
    """A file whose folder does not exist (or is a file) cannot be written: said before
    the page is drawn, in the words a failed write would have."""
    for path, flag in ((out, "--out"), (png, "--png")):
        if path is None:
            continue
        folder = Path(path).expanduser().parent
        if not folder.is_dir():
            why = "Not a directory" if folder.exists() else "No such file or directory"
            raise _cannot_write(path, flag, why)


def _refuse_others(*, out: str | Path | None, png: str | Path | None) -> None:
    """``--out`` and ``--png`` replace only what a report wrote there before (or an empty
    file): ``report -o ckpt.pt`` turned a checkpoint into a page, ``--png mine.yaml`` a
    preset into an image. A path that is a folder, a device or ends with a slash is
    refused as every output is (``check_output_path``)."""
    from autotune.core.files import check_output_path, not_ours_problem

    for path, flag, ours in ((out, "--out", _is_report_page), (png, "--png", _is_report_png)):
        if path is None:
            continue
        try:
            check_output_path(path)
        except UsageError as exc:
            raise UsageError(f"{flag} {exc}") from None
        what = "a page or image autotune report wrote"
        if problem := not_ours_problem(path, ours, what=what, by="the report"):
            raise UsageError(f"{flag} {str(path)!r} {problem}")


def _is_report_page(path: Path) -> bool:
    """An HTML page of ``autotune report`` (its title says so, in every version)."""
    head = file_head(path)
    return (
        head.lstrip().lower().startswith(b"<!doctype html>") and b"<title>autotune report" in head
    )


def _is_report_png(path: Path) -> bool:
    """A PNG of ``autotune report``: its ``Software`` text (``plots.PNG_SOFTWARE``)."""
    from autotune.report.plots import PNG_SOFTWARE

    head = file_head(path, 1 << 16)
    return head.startswith(b"\x89PNG") and b"Software\x00" + PNG_SOFTWARE.encode() in head


@contextlib.contextmanager
def _writing(path: str | Path, flag: str) -> Iterator[None]:
    """A file that cannot be written is the user's to fix: a one-paragraph error."""
    try:
        yield
    except OSError as exc:
        raise _cannot_write(path, flag, exc.strerror or str(exc)) from None


def _cannot_write(path: str | Path, flag: str, why: str) -> UsageError:
    return UsageError(
        f"{flag} {str(path)!r}: cannot write it ({why}); give a path in a folder that "
        "exists and that you can write to"
    )
