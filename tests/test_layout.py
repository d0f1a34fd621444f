"""The package's shape, checked from its source: no import cycle, no module over 800 lines,
no function over 100, every stage folder saying in one line what it owns.

Run alone with ``python -m pytest tests/test_layout.py``; it reads files and imports nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
# A module's length is a smell to look at, not a rule to fit: at 600 six modules sat at
# 590-600 lines and were split by size, not by concept. 800 is where a module is looked at,
# 100 where a function is (at 80, four functions sat at 78-80): alarms, not shapes to fit.
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100


def _modules() -> dict[str, Path]:
    """Every module of the package (the zoo under models/ included), by dotted name."""
    found = {}
    for base, prefix in ((PACKAGE, "autotune"), (ROOT / "models", "autotune.models")):
        for path in sorted(base.rglob("*.py")):
            if base == PACKAGE and "models" in path.relative_to(base).parts[:1]:
                continue  # autotune/models is a link to models/, read from there
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The modules this file imports when it runs (typing-only imports left out)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_reexports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without a package's edges to its own submodules: ``pkg/__init__`` naming
    what ``pkg.sub`` defines is a face, not a dependency of ``pkg.sub`` on its siblings."""
    return {
        name: {t for t in targets if not t.startswith(name + ".")}
        for name, targets in graph.items()
    }


def test_the_scan_finds_a_cycle_it_is_shown() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_at_run_time() -> None:
    cycles = _cycles(_package_reexports(_graph()))
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_module_over_800_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_over_100_lines() -> None:
    long = []
    for path in _modules().values():
        for fn in _functions(ast.parse(path.read_text())):
            start = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            if (n := (fn.end_lineno or fn.lineno) - start + 1) > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


@pytest.mark.parametrize(
    "folder", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.is_dir())
)
def test_every_stage_folder_says_what_it_owns(folder: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
    assert doc, f"autotune/{folder}/__init__.py has no docstring"
    assert len(doc.splitlines()[0]) <= 100
