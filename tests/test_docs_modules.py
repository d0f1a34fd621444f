"""docs/design.md's module table is the one the source tree gives (tests/gen_module_table.py):
a module added, moved or re-described without regenerating it fails here, with the table
to paste printed. And every principle a docstring cites by number is on that page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gen_module_table import (
    DOC,
    END,
    MISSING,
    START,
    documented_table,
    module_table,
    summary,
    with_table,
)


def test_design_md_lists_every_module_as_its_docstring_says() -> None:
    generated = module_table()
    documented = documented_table(DOC.read_text(encoding="utf-8"))
    if documented != generated:
        print(generated)  # the table to paste (pytest shows it with the failure)
        pytest.fail(
            "docs/design.md's module table differs from the source tree's; regenerate it "
            "with `python tests/gen_module_table.py --write` (the generated table is printed "
            "in the captured output above)"
        )


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_table_has_a_row_per_package_then_per_module(tmp_path: Path) -> None:
    repo = _tree(
        tmp_path,
        {
            "autotune/__init__.py": '"""The tool.\n\nMore."""\n',
            "autotune/b/__init__.py": '"""Stage b: what it owns,\nover two lines. Then more."""',
            "autotune/b/z.py": '"""Z, with ``code`` and a | pipe."""\n',
            "autotune/b/a.py": "x = 1\n",
            "autotune/a/__init__.py": '"""Stage a."""\n',
            "models/__init__.py": '"""The zoo."""\n',
            "models/gpt.py": '"""GPT (See et al. 2017). Second."""\n',
        },
    )
    assert module_table(repo).splitlines() == [
        "| module | owns |",
        "|---|---|",
        "| `autotune/` | The tool. |",
        "| `autotune/a/` | Stage a. |",
        "| `autotune/b/` | Stage b: what it owns, over two lines. |",
        f"| `autotune/b/a.py` | {MISSING} |",
        "| `autotune/b/z.py` | Z, with `code` and a \\| pipe. |",
        "| `models/` | The zoo. |",
        "| `models/gpt.py` | GPT (See et al. 2017). |",
    ]
    assert summary(repo / "autotune" / "b" / "z.py") == "Z, with `code` and a \\| pipe."


def test_the_table_is_replaced_between_its_markers_only() -> None:
    page = f"# Design\n\nBefore.\n\n{START}\n| old |\n{END}\n\nAfter.\n"
    new = with_table(page, "| module | owns |\n")
    assert new == f"# Design\n\nBefore.\n\n{START}\n| module | owns |\n{END}\n\nAfter.\n"
    assert documented_table(new) == "| module | owns |\n"
    with pytest.raises(ValueError, match="markers"):
        documented_table("# Design without a table\n")


def test_every_principle_the_code_cites_is_in_the_design() -> None:
    """A docstring's "principle N" means the Nth of docs/design.md's principles: each one
    cited must be there (race_decision.py once cited an 8th the list did not have)."""
    root = DOC.parents[1]
    listed = {int(m) for m in re.findall(r"^(\d+)\. \*\*", DOC.read_text(encoding="utf-8"), re.M)}
    cited = {
        f"{path.relative_to(root)}: principle {n}"
        for base in ("autotune", "models")
        for path in sorted((root / base).rglob("*.py"))
        for n in re.findall(r"\bprinciple (\d+)", path.read_text(encoding="utf-8"))
        if int(n) not in listed
    }
    assert not cited, f"docs/design.md lists principles {sorted(listed)}; cited: {sorted(cited)}"
