"""The blocks a report section is made of (a paragraph, a table, a figure) and the small
constructors every section builds them with; the templates turn each into markup."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from markupsafe import Markup

from autotune.core.units import format_figure
from autotune.report import plots

__all__ = [
    "Block",
    "Cell",
    "Figure",
    "Row",
    "Table",
    "Text",
    "cell",
    "fmt",
    "make_figure",
    "note",
    "table",
]


@dataclass(frozen=True)
class Text:
    """A paragraph: ``style`` is p, note, big, pre or h3; ``code`` follows the text in a
    ``<code>`` element."""

    text: str
    style: str = "p"
    code: str = ""
    kind: ClassVar[str] = "text"


@dataclass(frozen=True)
class Cell:
    text: str
    num: bool = False  # right-aligned, tabular figures


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    cls: str = ""  # changed / same in the config diff


@dataclass(frozen=True)
class Table:
    """A table; with ``details``, folded under a ``<details>`` whose summary it is."""

    header: tuple[str, ...]
    rows: tuple[Row, ...]
    details: str = ""
    kind: ClassVar[str] = "table"


@dataclass(frozen=True)
class Figure:
    name: str
    svg: Markup
    caption: str
    kind: ClassVar[str] = "figure"


Block = Text | Table | Figure


def fmt(value: Any) -> str:
    """A figure as a table shows it ("-" for None)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return format_figure(value)
    return str(value)


def cell(value: Any) -> Cell:
    return Cell(fmt(value), num=isinstance(value, (int, float)) and not isinstance(value, bool))


def table(
    header: Sequence[str] | None,
    rows: Sequence[Sequence[Any]],
    *,
    classes: Sequence[str] = (),
    details: str = "",
) -> Table:
    return Table(
        header=tuple(header or ()),
        rows=tuple(
            Row(tuple(cell(c) for c in row), classes[i] if i < len(classes) else "")
            for i, row in enumerate(rows)
        ),
        details=details,
    )


def make_figure(fig: Any, name: str, caption: str) -> Figure:
    # The one string that reaches the page unescaped: matplotlib's SVG of a figure our own
    # code drew from numbers. Its XML writer escapes every text it writes (labels are drawn
    # as paths; their text survives only in escaped comments), and figure_svg only renames
    # ids after our own figure names. Nothing from a preset or a study is pasted into it.
    return Figure(name=name, svg=Markup(plots.figure_svg(fig, name=name)), caption=caption)


def note(text: str) -> Text:
    return Text(text, style="note")
