"""The module table of docs/design.md, built from the source tree: one row per package
(the first sentence of its ``__init__`` docstring) followed by one row per module in it
(the first sentence of the module's docstring), for autotune/ and models/.

Regenerate the table in place after adding, moving or re-describing a module::

    python tests/gen_module_table.py --write

Without ``--write`` it prints the table. ``tests/test_docs_modules.py`` fails while the
table in docs/design.md differs from this one. The docstrings are read with ``ast``:
nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "design.md"
# The folders the table covers; autotune/models is a symlink to models/, listed once.
ROOTS = ("autotune", "models")
START = "<!-- module-table:start (generated: python tests/gen_module_table.py --write) -->"
END = "<!-- module-table:end -->"
MISSING = "(no docstring yet: add one)"


def summary(path: Path) -> str:
    """The first sentence of the first paragraph of ``path``'s docstring, on one line,
    made safe for a Markdown table cell."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    if not paragraph:
        return MISSING
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph, maxsplit=1)[0]
    return sentence.replace("``", "`").replace("|", "\\|")


def _packages(repo: Path) -> list[Path]:
    """Every package folder under the roots, the root first, then by path."""
    found = []
    for root in ROOTS:
        for init in sorted((repo / root).rglob("__init__.py")):
            folder = init.parent
            if root == "autotune" and "models" in folder.relative_to(repo / root).parts:
                continue  # the symlink to models/
            found.append(folder)
    return found


def module_table(repo: Path = REPO) -> str:
    """The Markdown table: a package's row, then a row per module of it."""
    lines = ["| module | owns |", "|---|---|"]
    for folder in _packages(repo):
        name = folder.relative_to(repo).as_posix()
        lines.append(f"| `{name}/` | {summary(folder / '__init__.py')} |")
        for module in sorted(folder.glob("*.py")):
            if module.name != "__init__.py":
                lines.append(f"| `{name}/{module.name}` | {summary(module)} |")
    return "\n".join(lines) + "\n"


def documented_table(text: str) -> str:
    """The table between the markers of a docs page; ``ValueError`` when they are missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {START!r} ... {END!r} markers")
    return text[start + len(START) : end].strip("\n") + "\n"


def with_table(text: str, table: str) -> str:
    """``text`` with the table between its markers replaced by ``table``."""
    documented_table(text)  # the markers are there
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    args = parser.parse_args(argv)
    table = module_table()
    if not args.write:
        sys.stdout.write(table)
        return 0
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(with_table(text, table), encoding="utf-8")
    print(f"wrote the module table ({table.count(chr(10)) - 2} rows) to {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
