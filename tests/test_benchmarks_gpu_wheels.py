"""What benchmarks/gpu_suite.py needs on a lent GPU whose Python has torch but not optuna:
the wheels it names (every package autotune needs beyond torch's own), the versions it
pins, its import check, and benchmarks/gpu_lease.sh, which installs the carried wheels the
machine lacks (benchmarks/_lease_wheels.py) and runs it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.fake_gpu_suite import FakeRunner, suite

lease_wheels = load_benchmark("_lease_wheels")

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


def test_what_fails_to_import_is_named_with_the_wheels_to_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = {"optuna", "alembic", "sqlalchemy", "mako", "colorlog"}
    runner = FakeRunner()
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=runner,
        has_cuda=lambda: True,
        find=lambda module: None if module in absent else object(),
        check_imports=lambda: [{"in": "optuna", "module": "optuna"}],
    )
    err = capsys.readouterr().err
    assert code == 2 and not runner.calls and not (tmp_path / "suite.md").exists()
    assert "cannot run here (optuna: no module 'optuna')" in err
    assert "The packages to carry: optuna, alembic, SQLAlchemy, Mako, colorlog." in err
    assert "--only-binary=:all: --python-version 3.12" in err
    assert "optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 Mako==1.4.3 colorlog==6.12.0" in err
    assert "python benchmarks/gpu_suite.py --fetch-wheels" in err


def test_a_package_nothing_imports_here_does_not_stop_the_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """typer 0.29 needs pydantic and annotated-doc; a machine with an older typer has
    neither and runs every command. Only what fails to import stops the suite (here the
    run goes on to the CUDA check)."""
    code = suite.main(
        ["--out", str(tmp_path / "suite.md")],
        runner=FakeRunner(),
        has_cuda=lambda: False,
        find=lambda module: None if module in {"pydantic", "annotated_doc"} else object(),
        check_imports=list,
    )
    err = capsys.readouterr().err
    assert code == 2 and "no CUDA device" in err and "pydantic" not in err


def test_the_import_check_runs_what_the_commands_import(monkeypatch: pytest.MonkeyPatch) -> None:
    assert suite.import_problems() == []  # this machine has autotune's dependencies
    monkeypatch.setattr(suite, "CHECKED_MODULES", ("json", "autotune_no_such_module"))
    assert suite.import_problems() == [
        {"in": "autotune_no_such_module", "module": "autotune_no_such_module"}
    ]


def test_a_wheel_of_a_module_that_is_not_in_the_list_is_named_by_its_module() -> None:
    problems = [{"in": "autotune.cli.main", "module": "click.core"}, {"in": "x", "error": "boom"}]
    assert suite.missing_wheels(problems, lambda module: object()) == [("click", "")]
    message = suite.missing_message(problems, [("click", "")])
    assert "or only these: " in message
    assert "cannot use is not replaced by gpu_lease.sh" in message  # the error: too old
    assert "not replaced" not in suite.missing_message(problems[:1], [("click", "")])


def test_fetch_wheels_downloads_every_wheel_the_suite_names() -> None:
    seen: list[list[str]] = []
    assert suite.fetch_wheels(lambda argv: seen.append(argv) or 0) == 0
    (argv,) = seen
    assert argv[:4] == ["python3", "-m", "pip", "download"] and "--no-deps" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12" and "-d" in argv
    pins = {a for a in argv if "==" in a}
    assert pins == {f"{d}=={v}" for _m, d, v in (*suite.WHEELS, suite.TORCHAO)}


# -- on the lent machine: only the wheels its Python lacks ----------------------------------
def test_a_lease_installs_only_the_wheels_whose_distribution_is_absent(tmp_path: Path) -> None:
    wheels = [tmp_path / name for name in (
        "sqlalchemy-2.1.9-cp312-cp312-manylinux_2_28_x86_64.whl",
        "optuna-5.0.0-py3-none-any.whl",
        "typing_extensions-4.16.0-py3-none-any.whl",
    )]  # fmt: skip
    has = {"SQLAlchemy", "typing-extensions"}  # as the machine spells them
    normal = {canonicalize_name(n) for n in has}
    assert lease_wheels.to_install(wheels, has=lambda d: canonicalize_name(d) in normal) == [
        wheels[1]
    ]
    assert lease_wheels.distribution(wheels[0]) == "sqlalchemy"
    assert lease_wheels.installed("SQLAlchemy") and lease_wheels.installed("typing_extensions")
    assert not lease_wheels.installed("autotune-no-such-distribution")
    assert lease_wheels.main([str(tmp_path / "nowhere")]) == 2
    assert lease_wheels.main([]) == 2


def test_gpu_lease_sh_installs_the_absent_wheels_then_runs_the_suite(tmp_path: Path) -> None:
    """The script run from a copy of the repository, with a ``python3`` that records how it
    is called (and runs _lease_wheels.py for real): of the carried wheels, only the one
    whose distribution this Python lacks is installed beside the system's packages, then
    the suite runs within 9 minutes writing under $OUT, with the script's further
    arguments."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    for name in ("gpu_lease.sh", "_lease_wheels.py"):
        shutil.copy(ROOT / "benchmarks" / name, repo / "benchmarks")
    (repo / ".whl").mkdir()
    for name in ("optuna-5.0.0-py3-none-any.whl", "autotune_absent-1.0-py3-none-any.whl"):
        (repo / ".whl" / name).write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = benchmarks/_lease_wheels.py ]; then exec {sys.executable} "$@"; fi\n'
        f'echo "$PYTHONPATH | $*" >> {tmp_path / "calls"}\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": "/tmp/o",
           "GPU_LEASE_SITE": str(tmp_path / "site")}  # fmt: skip
    env.pop("PYTHONPATH", None)
    script = repo / "benchmarks" / "gpu_lease.sh"
    subprocess.run(["bash", str(script), "9m", "--winner", "w.yaml"], env=env, check=True)
    install, run = (tmp_path / "calls").read_text().splitlines()
    assert install.endswith(
        f"-m pip install -q --no-index --no-deps --no-compile --target {tmp_path / 'site'} "
        ".whl/autotune_absent-1.0-py3-none-any.whl"
    )
    assert run == (
        f"{tmp_path / 'site'}:. | benchmarks/gpu_suite.py --within 9m --out /tmp/o/gpu_suite.md "
        "--work /tmp/gpu-work --winner w.yaml"
    )


def test_gpu_lease_sh_plans_the_lease_with_this_python(tmp_path: Path) -> None:
    """The lease's command as it runs, without a GPU: its suite arguments parse and give
    the 9-minute plan (``--dry-run`` after the script's own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path),
           "GPU_LEASE_WHEELS": str(tmp_path / "none")}  # fmt: skip
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_lease.sh"), "9m", "--dry-run"],
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Plan within 9 min 00 s" in done.stdout
    assert "search --model gpt2-124m --seq-len 1024" in done.stdout
    assert "no wheels in" in done.stderr
