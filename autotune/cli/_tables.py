"""Terminal tables that never cut the column a user types back.

That column (a preset's name, a model's name) keeps its whole width on any terminal; the
other columns wrap, folding a word too long for them rather than cutting its end off with
an ellipsis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

__all__ = ["keep_column_whole"]


def keep_column_whole(table: Table, index: int, values: Iterable[str | Text]) -> None:
    """Make column ``index`` of ``table`` as wide as its longest value (or its header) and
    never wrap it; every other column folds what does not fit instead of cutting it.

    rich's ``no_wrap`` alone is not enough: on a narrow terminal rich shrinks a no-wrap
    column too and ends its text with an ellipsis, so the name a user must type is lost.
    A ``min_width`` is kept through rich's shrinking; the other columns give way."""
    from rich.cells import cell_len

    def width(value: str | Text) -> int:
        return cell_len(value) if isinstance(value, str) else value.cell_len

    for i, column in enumerate(table.columns):
        if i != index:
            column.overflow = "fold"
            continue
        widths = [width(str(column.header)), *(width(value) for value in values)]
        column.no_wrap = True
        column.min_width = max(widths)
        column.overflow = "fold"  # a last resort only: the column is as wide as its values
