"""What benchmarks/gpu_suite.py needs on a lent GPU whose Python has torch but not optuna:
the wheels it names (every package autotune needs beyond torch's own), the versions it
pins, the one-line device command and benchmarks/gpu_lease.sh, which runs it."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.fake_gpu_suite import FakeRunner, suite

ROOT = Path(__file__).resolve().parent.parent
# The lent machine: CPython 3.12 on x86-64 Linux (the markers of a requirement are read
# for it, not for this machine)
DEVICE = {
    "python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64",
    "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
    "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": "",
}  # fmt: skip


def _closure(name: str) -> set[str]:
    """The distributions ``name`` needs, transitively (no extras), as installed here."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        try:
            lines = requires(todo.pop()) or []
        except PackageNotFoundError:
            continue
        for line in lines:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(DEVICE):
                continue
            key = canonicalize_name(req.name)
            if key not in seen:
                seen.add(key)
                todo.append(key)
    return seen


def test_the_wheels_cover_what_autotune_needs_beyond_torch() -> None:
    """Every distribution autotune needs that torch does not bring (the lent machine has
    torch and its dependencies) is among the wheels the suite names: optuna and its
    dependencies first. Found missing: typer's pydantic and annotated-doc."""
    beyond_torch = _closure("autotune-train") - _closure("torch") - {"torch"}
    named = {canonicalize_name(dist) for _module, dist, _pinned in suite.WHEELS}
    assert {"optuna", "alembic", "sqlalchemy", "mako", "colorlog"} <= beyond_torch
    assert sorted(beyond_torch - named) == []


def test_each_wheel_names_the_module_it_provides() -> None:
    import importlib.util

    for module, dist, _pinned in suite.WHEELS:
        assert importlib.util.find_spec(module) is not None, f"{dist} provides no {module!r}"


def test_the_pinned_versions_meet_autotunes_requirements() -> None:
    """The wheels the suite names for a machine without network must satisfy autotune's
    own requirements. Not the versions installed here: those follow the registry (PyYAML
    6.0.3 -> 6.0.4 between two CI runs failed an equality check) and each environment
    (a development machine's cloudpickle 2.1, CI's fresh 3.1)."""
    wanted = {}
    for line in requires("autotune-train") or []:
        req = Requirement(line)
        if req.marker is None:  # the core requirements, not an extra's
            wanted[canonicalize_name(req.name)] = req.specifier
    named = {canonicalize_name(dist) for _module, dist, _pinned in suite.WHEELS}
    assert {"optuna", "pyyaml", "typer", "rich", "cloudpickle"} <= named & set(wanted)
    for _module, dist, pinned in suite.WHEELS:
        spec = wanted.get(canonicalize_name(dist))
        assert spec is None or spec.contains(pinned), f"{dist}: {pinned} is outside {spec}"


def test_missing_wheels_are_named_with_the_download_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = {"optuna", "alembic", "sqlalchemy", "mako", "colorlog"}
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=FakeRunner(),
        has_cuda=lambda: True,
        find=lambda module: None if module in absent else object(),
    )
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "suite.md").exists()
    assert "missing Python packages: optuna, alembic, SQLAlchemy, Mako, colorlog." in err
    assert "--only-binary=:all: --python-version 3.12" in err
    assert "optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0" in err
    assert "--no-index --no-deps" in err


def _device_command() -> str:
    lines = [line.strip() for line in (suite.__doc__ or "").splitlines()]
    (command,) = [line for line in lines if line.startswith("python3 -m pip") and "&&" in line]
    return command


def test_the_device_command_fits_the_run_tool_and_its_suite_arguments_parse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = _device_command()
    assert len(command) <= 2000
    install, _, run = command.partition(" && ")
    assert ".whl/*.whl" in install and "--target /tmp/site" in install
    argv = shlex.split(run.replace("$OUT", "/tmp/out"))
    assert argv[:3] == ["PYTHONPATH=/tmp/site:.", "python3", "benchmarks/gpu_suite.py"]
    assert suite.main([*argv[3:], "--dry-run"]) == 0
    assert "Plan within 9 min 00 s" in capsys.readouterr().out


def test_gpu_lease_sh_installs_the_wheels_then_runs_the_suite(tmp_path: Path) -> None:
    """The script run from a copy of the repository, with a ``python3`` that records how it
    is called: the carried wheels installed beside the system's packages, then the suite
    within 9 minutes writing under $OUT, with the script's further arguments."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu_lease.sh", repo / "benchmarks")
    (repo / ".whl").mkdir()
    (repo / ".whl" / "optuna-5.0.0-py3-none-any.whl").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\necho "$PYTHONPATH | $*" >> {tmp_path / "calls"}\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": "/tmp/o",
           "GPU_LEASE_SITE": str(tmp_path / "site")}  # fmt: skip
    env.pop("PYTHONPATH", None)
    script = repo / "benchmarks" / "gpu_lease.sh"
    subprocess.run(["bash", str(script), "9m", "--winner", "w.yaml"], env=env, check=True)
    install, run = (tmp_path / "calls").read_text().splitlines()
    assert install.endswith(
        f"-m pip install -q --no-index --no-deps --no-compile --target {tmp_path / 'site'} "
        ".whl/optuna-5.0.0-py3-none-any.whl"
    )
    assert run == (
        f"{tmp_path / 'site'}:. | benchmarks/gpu_suite.py --within 9m --out /tmp/o/gpu_suite.md "
        "--work /tmp/gpu-work --winner w.yaml"
    )
