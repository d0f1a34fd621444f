"""The wheel, installed into a fresh virtual environment, works with no source tree around.

The venv uses ``--system-site-packages`` so torch and friends need not be reinstalled; the
wheel itself goes into the venv (``--no-deps --force-reinstall``), and the test checks that
the venv's copy of autotune, not the editable checkout, is the one that runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What a build needs; everything else in the checkout (runs, caches, .git) stays behind.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "autotune", "models", "presets")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "autotune_runs")


def _run(args: list[str], *, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        pytest.fail(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _copy_sources(src: Path) -> None:
    """What a build reads, copied to ``src`` (an in-tree build would litter the checkout)."""
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=IGNORE)
        elif path.exists():
            shutil.copy2(path, src / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from a copy of the checkout (an in-tree build would litter it)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    _copy_sources(src)
    dist = root / "dist"
    _run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("--no-index", "-w", str(dist), str(src)),
        ],
        cwd=root,
    )
    (built,) = dist.glob("autotune_train-*.whl")  # the distribution's own name
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv that sees this environment's packages, with the wheel installed into it.

    ``--system-site-packages`` alone is not enough: when the tests run inside a virtual
    environment (as CI's do), it exposes the base interpreter's site-packages, not the
    environment's where torch and typer live. A ``.pth`` file appends this environment's
    site-packages to the new venv's path, after its own, so the wheel's autotune wins
    (the editable install's finder is a ``.pth`` hook there, which a plain path entry does
    not run).
    """
    path = tmp_path_factory.mktemp("venv") / "env"
    _run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        cwd=path.parent,
    )
    python = path / "bin" / "python"
    own = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=path.parent,
    ).stdout.strip()
    here = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(own) / "_outer_environment.pth").write_text("".join(f"{p}\n" for p in here))
    # The system's pip, run by the venv's python, installs into the venv.
    _run(
        [
            *(str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall"),
            *("--no-index", str(wheel)),
        ],
        cwd=path.parent,
    )
    return path


def _python(
    venv: Path, code: str, cwd: Path, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, check=check)


def test_wheel_maps_models_and_presets_into_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert zf.read(top_level).decode().split() == ["autotune"]
    strays = sorted(n for n in names if not n.startswith(("autotune/", "autotune_train-")))
    assert strays == [], "files outside the autotune package"
    assert "autotune/py.typed" in names
    packages = sorted(  # every subpackage of the source tree (autotune/study, ...)
        p.parent.relative_to(REPO).as_posix()
        for p in (REPO / "autotune").rglob("__init__.py")
        if "models" not in p.relative_to(REPO / "autotune").parts
    )
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert "autotune/cli" in packages and "autotune/study" in packages
    assert missing == [], f"packages missing from the wheel: {missing}"
    models = sorted(
        p.relative_to(REPO / "models").as_posix() for p in (REPO / "models").rglob("*.py")
    )
    missing = [m for m in models if f"autotune/models/{m}" not in names]
    assert models and missing == [], f"models/ files missing from the wheel: {missing}"
    presets = sorted(
        p.relative_to(REPO / "presets").as_posix() for p in (REPO / "presets").rglob("*.yaml")
    )
    missing = [p for p in presets if f"autotune/presets/{p}" not in names]
    assert missing == [], f"presets/ files missing from the wheel: {missing}"


def test_installed_autotune_is_the_venvs_and_not_the_checkout(venv: Path, tmp_path: Path) -> None:
    out = _python(venv, "import autotune; print(autotune.__file__)", cwd=tmp_path).stdout
    installed = Path(out.strip()).resolve()
    assert installed.is_relative_to(venv.resolve()), installed
    assert not installed.is_relative_to(REPO), installed


def test_no_top_level_models_module_is_installed(venv: Path, tmp_path: Path) -> None:
    result = _python(venv, "import models", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr


def test_models_and_presets_are_found_inside_the_installed_package(
    venv: Path, tmp_path: Path
) -> None:
    code = (
        "import importlib.resources as r, json, sys, autotune.models, autotune.models.registry\n"
        "presets = r.files('autotune') / 'presets'\n"
        "print(json.dumps({'models': autotune.models.__file__,\n"
        "                  'registry': autotune.models.registry.__file__,\n"
        "                  'compiler': 'torch._dynamo' in sys.modules,\n"
        "                  'presets': str(presets), 'presets_dir': presets.is_dir()}))\n"
    )
    found = json.loads(_python(venv, code, cwd=tmp_path).stdout)
    for key in ("models", "registry"):
        path = Path(found[key]).resolve()
        assert path.is_relative_to(venv.resolve() / "lib"), (key, path)
    assert found["presets_dir"], found["presets"]
    # the models load without torch's compiler (1.7-2.6 s of imports in every process that
    # named a model: the chunked loss is imported where it runs)
    assert not found["compiler"]
    assert Path(found["presets"]).resolve().is_relative_to(venv.resolve())


def test_installed_console_script_runs_from_another_directory(venv: Path, tmp_path: Path) -> None:
    version = _run([str(venv / "bin" / "autotune"), "--version"], cwd=tmp_path).stdout
    assert version.startswith("autotune ")


# torch and its compiler imported for the probe: 5 s on the 2-core CPU. The console script
# runs above, the installed package imports torch in test_models_and_presets_are_found_...,
# and the probe's JSON is tests/cli/test_probe.py's.
@pytest.mark.slow
def test_installed_console_script_probes_from_another_directory(venv: Path, tmp_path: Path) -> None:
    result = _run([str(venv / "bin" / "autotune"), "probe", "--json"], cwd=tmp_path)
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["default_device"] in ("cpu", "cuda:0")
    assert data["cpu"]["logical_cores"] >= 1
    assert data["software"]["autotune_version"]


def test_the_wheel_is_the_distributions_own_name_and_lists_its_presets(
    wheel: Path, venv: Path, tmp_path: Path
) -> None:
    """``autotune`` on the package index is an unrelated project: the distribution is
    ``autotune-train`` (the import name and the command stay ``autotune``), and the presets
    it lists are the ones inside the installed package."""
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = (n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Name: autotune-train" in zf.read(metadata).decode().splitlines()
    listed = json.loads(
        _run([str(venv / "bin" / "autotune"), "presets", "list", "--json"], cwd=tmp_path).stdout
    )
    shipped = sorted(p.relative_to(REPO / "presets").with_suffix("").as_posix()
                     for p in (REPO / "presets").rglob("*.yaml"))  # fmt: skip
    builtin = [p for p in listed if p["origin"] == "builtin"]
    assert sorted(p["ref"] for p in builtin) == shipped
    assert all(Path(p["path"]).resolve().is_relative_to(venv.resolve()) for p in builtin)


@pytest.mark.slow
def test_the_sdist_builds_and_carries_the_models_and_presets(tmp_path: Path) -> None:
    import tarfile

    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    dist = tmp_path / "dist"
    _run(
        # no isolation (no network in CI), and no check of the build's own requirements:
        # an sdist needs setuptools alone, not the `wheel` package the backend lists
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "--skip-dependency-check",
            "--outdir",
            str(dist),
        ],
        cwd=src,
    )
    (sdist,) = dist.glob("autotune_train-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pyproject.toml", "models/mu.py", "models/registry.py"} <= names
    assert any(n.startswith("presets/") and n.endswith(".yaml") for n in names)


@pytest.mark.slow
def test_a_short_search_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """A newcomer's first command, from the wheel alone: a search with the embedded
    defaults (a SQLite study, built-in data) in a folder with no source tree, its preset
    written there."""
    result = _run(
        [str(venv / "bin" / "autotune"), "search", "--model", "mu", "--budget", "2GB",
         "--device", "cpu", "--timeout", "90s", "--output", "best.yaml", "--json"],
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout[result.stdout.find("{") :])["best"]
    assert (tmp_path / "best.yaml").is_file()
    assert (tmp_path / "autotune_runs").is_dir()
