"""Finding presets: the shipped ones, the user's, and those in the working directory.

``find_presets`` lists every preset in reach with its origin; ``resolve_preset`` turns a
path or a short name (``cpu/mu``, ``mu``, or a preset's ``name:``) into a file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.core.errors import PresetError
from autotune.core.validator import did_you_mean
from autotune.preset.io import load_preset, looks_like_preset, preset_error

__all__ = [
    "builtin_preset_dir",
    "find_presets",
    "looks_like_preset",
    "preset_ref",
    "resolve_preset",
    "user_preset_dir",
]


def builtin_preset_dir() -> Path | None:
    """The presets shipped with autotune (``autotune/presets`` in a wheel, ``presets/`` in
    a source checkout), or None when there is no such folder."""
    from importlib import resources

    candidates: list[Any] = []
    with contextlib.suppress(ModuleNotFoundError):
        candidates.append(resources.files("autotune.presets"))
    candidates.append(resources.files("autotune") / "presets")
    candidates.append(Path(__file__).resolve().parents[2] / "presets")  # source checkout
    for candidate in candidates:
        path = Path(str(candidate))
        if path.is_dir():
            return path
    return None


def user_preset_dir() -> Path:
    """``$AUTOTUNE_CONFIG_DIR/presets``, else ``$XDG_CONFIG_HOME/autotune/presets``, else
    ``~/.config/autotune/presets``."""
    root = os.environ.get("AUTOTUNE_CONFIG_DIR")
    if root:
        return Path(root).expanduser() / "presets"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "autotune" / "presets"


def _yaml_files(folder: Path, *, recursive: bool) -> Iterator[Path]:
    """The YAML files in ``folder``; none where it cannot be read (a user folder that
    ``AUTOTUNE_CONFIG_DIR`` points at without access stopped ``presets list`` and a
    built-in's export with an error about writing)."""
    patterns = ("*.yaml", "*.yml")
    try:
        if not folder.is_dir():
            return iter(())
        found = {
            p for pat in patterns for p in (folder.rglob(pat) if recursive else folder.glob(pat))
        }
        return iter(sorted(p for p in found if p.is_file() and not p.name.startswith(".")))
    except OSError:
        return iter(())


def find_presets() -> list[tuple[str, Path]]:
    """Every preset in reach, as ``(origin, path)``: ``builtin`` (shipped, recursively),
    ``cwd`` (``*.yaml`` files here with ``schema_version`` and ``config`` at the top) and
    ``user`` (``user_preset_dir()``, recursively)."""
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()

    def add(origin: str, path: Path) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            found.append((origin, path))

    builtin = builtin_preset_dir()
    if builtin is not None:
        for path in _yaml_files(builtin, recursive=True):
            add("builtin", path)
    for path in _yaml_files(Path.cwd(), recursive=False):
        if looks_like_preset(path):
            add("cwd", path)
    for path in _yaml_files(user_preset_dir(), recursive=True):
        add("user", path)
    return found


def preset_ref(origin: str, path: Path) -> str:
    """The short name that ``resolve_preset`` finds ``path`` by: its path below its folder,
    without the suffix (``cpu/mu``), or the file's name for the working directory."""
    if origin == "builtin":
        root = builtin_preset_dir()
    elif origin == "user":
        root = user_preset_dir()
    else:
        root = None
    if root is not None:
        with contextlib.suppress(ValueError):
            return path.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
    return f"./{path.name}"  # the working directory's presets are named by their path


# A name finds the user's own presets first, then the shipped ones. The working directory
# is not searched by name: a planted ./mu.yaml must not stand in for the shipped `mu`.
_RESOLVE_ORDER = {"user": 0, "builtin": 1}


def _looks_like_path(text: str) -> bool:
    return any(sep in text for sep in "/\\") or text.endswith((".yaml", ".yml"))


def resolve_preset(name_or_path: str) -> Path:
    """A preset file: ``name_or_path`` itself where it is a path to a file, else the user's
    or the shipped preset of that name (its path below its folder without ``.yaml``, the
    file name alone, or its ``name`` field). A preset in the working directory is found
    only by its path (``./best.yaml``, ``best.yaml``), and a folder here named ``mu`` does
    not hide the preset ``mu``. Unknown: a ``PresetError`` listing what exists."""
    candidate = Path(name_or_path).expanduser()
    if _looks_like_path(name_or_path) and candidate.is_dir():
        raise preset_error(f"{name_or_path!r} is a directory, not a preset file")
    if _looks_like_path(name_or_path) and os.path.lexists(candidate):
        return candidate  # a device, a FIFO or a link to one: refused, named, by the reader
    presets = sorted(
        (item for item in find_presets() if item[0] in _RESOLVE_ORDER),
        key=lambda item: _RESOLVE_ORDER[item[0]],
    )
    refs = [(preset_ref(origin, path), origin, path) for origin, path in presets]
    wanted = name_or_path.removesuffix(".yaml").removesuffix(".yml")
    for ref, _, path in refs:  # the full name; the user's first, then the shipped ones
        if ref == wanted:
            return path
    short = [(ref, origin, path) for ref, origin, path in refs if Path(ref).name == wanted]
    if len(short) == 1:
        return short[0][2]
    if short:
        which = ", ".join(f"{ref} ({origin})" for ref, origin, _ in short)
        raise preset_error(
            f"preset name {name_or_path!r} is ambiguous: {which}; give the full name"
        )
    for _, _, path in refs:  # second chance: the `name:` inside each file
        with contextlib.suppress(PresetError):
            if load_preset(path).name == name_or_path:
                return path
    known = [ref for ref, _, _ in refs]
    here = [path for origin, path in find_presets() if origin == "cwd"]
    here = [path for path in here if path.with_suffix("").name == wanted]
    hint = (
        f"; the working directory's {here[0].name} is used only by its path: ./{here[0].name}"
        if here
        else ""
    )
    if not hint and candidate.is_dir():  # "no preset 'run2'", where run2 is a folder here
        hint = f"; {name_or_path!r} here is a folder, not a preset file"
    listing = ", ".join(f"{ref} ({origin})" for ref, origin, _ in refs) or "none"
    looks_like_path = any(sep in name_or_path for sep in "/\\") or name_or_path.endswith(
        (".yaml", ".yml")
    )
    what = "preset file" if looks_like_path else "preset"
    raise preset_error(
        f"no {what} {name_or_path!r}{did_you_mean(wanted, known)}: give a path to a preset "
        f"file or the name of one; presets found by name: {listing} (the shipped ones and "
        f"those in {user_preset_dir()}){hint}"
    )
