"""Which of the wheels carried to a lent GPU machine to install there: those whose
distribution its Python lacks. Prints their paths, one a line (benchmarks/gpu_lease.sh
installs them into a folder put first on PYTHONPATH).

The machine's own packages stay: its torch was built and tested with them, and the one
GPU run so far worked with the machine's typer, rich, numpy and pytest and the carried
optuna, alembic, colorlog, SQLAlchemy, Mako and greenlet. So every wheel of the suite's
list can be carried (``WHEELS`` in benchmarks/gpu_suite.py), whatever the machine has,
and only what is missing is installed. A package the machine has in a version too old
for autotune shows in the suite's import check, which names it, rather than being
replaced beside the packages built against it.

Standard library only: it runs before anything is installed.

    python3 benchmarks/_lease_wheels.py .whl
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path

__all__ = ["distribution", "installed", "main", "to_install"]


def distribution(wheel: Path) -> str:
    """The distribution a wheel file holds, as its name spells it (``SQLAlchemy`` from
    ``sqlalchemy-2.1.9-cp312-...whl``: a wheel's name is normalized to lower case with
    underscores; the lookup of an installed one is insensitive to both)."""
    return wheel.name.split("-", 1)[0]


def installed(name: str) -> bool:
    """Whether this Python has the distribution ``name``."""
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def to_install(wheels: Iterable[Path], *, has: Callable[[str], bool] = installed) -> list[Path]:
    """The wheels, in name order, whose distribution ``has`` says is absent."""
    return [w for w in sorted(wheels, key=lambda w: w.name) if not has(distribution(w))]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python3 benchmarks/_lease_wheels.py WHEEL_FOLDER", file=sys.stderr)
        return 2
    folder = Path(args[0])
    if not folder.is_dir():
        print(f"_lease_wheels.py: no folder {str(folder)!r} of carried wheels", file=sys.stderr)
        return 2
    for wheel in to_install(folder.glob("*.whl")):
        print(wheel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
