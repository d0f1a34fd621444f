"""The trainer's parts own their data: no module of autotune/train/ but trainer.py takes
the ``Trainer`` (issue 56): each part takes the fields it reads. Reads source, imports
nothing."""

from __future__ import annotations

import ast
from pathlib import Path

TRAIN = Path(__file__).resolve().parent.parent / "autotune" / "train"


def _takes_trainer(path: Path) -> list[str]:
    """The functions of ``path`` with a parameter annotated ``Trainer``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.annotation is not None and "Trainer" in ast.unparse(arg.annotation):
                found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
    return found


def test_no_part_of_the_trainer_takes_the_trainer() -> None:
    offenders = [
        hit for path in sorted(TRAIN.glob("*.py")) if path.name != "trainer.py"
        for hit in _takes_trainer(path)
    ]  # fmt: skip
    assert offenders == [], "take the fields they read instead: " + ", ".join(offenders)
