"""What users read imports only the public API: the README, docs/ and examples/ write
`from autotune import ModelSpec` (names in `autotune.__all__`), never an internal module
such as `autotune.contract.spec`, except where EXCEPTIONS says why."""

from __future__ import annotations

import re
from pathlib import Path

import autotune

ROOT = Path(__file__).resolve().parent.parent
# from autotune.x import ... / import autotune.x (in code, code blocks or inline code)
INTERNAL = re.compile(r"\b(?:from\s+(autotune\.[\w.]+)\s+import\b|import\s+(autotune\.[\w.]+))")
PUBLIC = re.compile(r"\bfrom\s+autotune\s+import\s+(\([^)]*\)|[^\n`#]+)")

# (file relative to the repository, internal module): why the page may import it.
EXCEPTIONS = {
    ("docs/explain.md", "autotune.explain"): (
        "the page shows how the search's planner orders knobs from a verdict; the verdict "
        "comes from a profiled burst, an internal record with no public constructor"
    ),
    ("docs/explain.md", "autotune.explain.render"): "the same snippet: a burst's verdict",
}


def user_pages(root: Path = ROOT) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "examples").rglob("*.py")),
    ]


def internal_imports(path: Path, root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, line, module) for each import of a module below ``autotune``."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in INTERNAL.finditer(line):
            found.append((path.relative_to(root).as_posix(), number, match[1] or match[2]))
    return found


def public_names(path: Path) -> set[str]:
    names = set()
    for match in PUBLIC.finditer(path.read_text(encoding="utf-8")):
        names.update(n.split(" as ")[0].strip() for n in match[1].strip("()").split(","))
    return names - {""}


def test_user_docs_and_examples_import_only_the_public_api() -> None:
    found = [f for page in user_pages() for f in internal_imports(page)]
    bad = [
        f"{file}:{line}: {module}"
        for file, line, module in found
        if (file, module) not in EXCEPTIONS
    ]
    assert not bad, (
        "import these from `autotune` (export the name in autotune/__init__.py if it is "
        "missing), or list the page in EXCEPTIONS with the reason: " + "; ".join(bad)
    )
    used = {(file, module) for file, _, module in found}
    assert not set(EXCEPTIONS) - used, f"exceptions no page needs: {set(EXCEPTIONS) - used}"


def test_every_name_imported_from_autotune_is_exported() -> None:
    names = set().union(*(public_names(page) for page in user_pages()))
    assert {"ModelSpec", "PresetLoop", "load_preset"} <= names  # the scan finds them
    assert not names - set(autotune.__all__), sorted(names - set(autotune.__all__))
    # each exported name resolves, without importing torch to check it
    assert all(n in vars(autotune) or n in autotune._LAZY for n in autotune.__all__)


def test_the_scan_finds_internal_imports(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "```python\nfrom autotune.contract.spec import ModelSpec\nimport autotune.study\n"
        "from autotune import (\n    PresetLoop,\n    tune as t,\n)\n```\n"
        "Use `from autotune import search` or `import autotune`.\n",
        encoding="utf-8",
    )
    assert internal_imports(page, tmp_path) == [
        ("docs/page.md", 2, "autotune.contract.spec"),
        ("docs/page.md", 3, "autotune.study"),
    ]
    assert public_names(page) == {"PresetLoop", "tune", "search"}
