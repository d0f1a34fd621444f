"""No import circle in study/, type-level imports included. How a search runs a burst lives
in burst_runner.py, below the objective: the race and the burst threads import it without
going through the objective. What a search found (session/search_result.py) sits above the
trial and race records it is made of."""

from __future__ import annotations

import ast
from pathlib import Path

STUDY = Path(__file__).resolve().parents[3] / "autotune" / "study"
# circles left in study/ (none: the last, the records and what is made of them, ended when
# SearchResult left records.py for session/search_result.py)
KNOWN: list[set[str]] = []


def _graph() -> dict[str, set[str]]:
    """Each study module's imports of other study modules, ``TYPE_CHECKING`` ones too."""
    modules = {
        ".".join(["autotune", "study", *p.relative_to(STUDY).with_suffix("").parts]): p
        for p in STUDY.rglob("*.py")
        if p.name != "__init__.py"
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The modules that reach each other (strongly connected, more than one)."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for succ in graph[todo.pop()] - seen:
                seen.add(succ)
                todo.append(succ)
        return seen

    reached = {name: reach(name) for name in graph}
    circles: list[set[str]] = []
    for name in sorted(graph):
        circle = {name} | {m for m in reached[name] if name in reached[m]}
        if len(circle) > 1 and circle not in circles:
            circles.append(circle)
    return circles


def test_the_scan_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_circle_in_the_study() -> None:
    circles = _circles(_graph())
    assert [c for c in circles if c not in KNOWN] == []
    assert "autotune.study.trials.burst_runner" in _graph()["autotune.study.race.finalist_race"]
