"""Import a script of benchmarks/ (not a package) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/NAME.py`` as the module ``benchmarks_NAME`` (its sibling ``_common`` is
    importable, as when the script runs)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
