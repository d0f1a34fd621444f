"""Finding presets: the shipped, working-directory and user folders, and short names."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_presets import make_preset, wire_preset_places

from autotune.core.errors import PresetError
from autotune.preset import find_presets, library, resolve_preset, save_preset


@pytest.fixture
def preset_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty shipped, working and user folders, wired in."""
    return wire_preset_places(tmp_path, monkeypatch)


def test_find_presets_looks_in_all_three_places(preset_places: dict[str, Path]) -> None:
    builtin = save_preset(make_preset(name="shipped"), preset_places["builtin"] / "cpu/mu.yaml")
    cwd = save_preset(make_preset(name="here"), preset_places["cwd"] / "best.yaml")
    (preset_places["cwd"] / "compose.yaml").write_text("services: {}\n")  # not a preset
    (preset_places["cwd"] / "broken.yaml").write_text("a: [\n")
    user = save_preset(make_preset(name="mine"), preset_places["user"] / "team/gpt.yaml")
    assert find_presets() == [("builtin", builtin), ("cwd", cwd), ("user", user)]


def test_resolve_preset_by_path_name_or_name_field(preset_places: dict[str, Path]) -> None:
    shipped = save_preset(make_preset(name="Shipped MU"), preset_places["builtin"] / "cpu/mu.yaml")
    user = save_preset(make_preset(name="mine"), preset_places["user"] / "gpt.yaml")
    cwd = save_preset(make_preset(name="here"), preset_places["cwd"] / "best.yaml")
    assert resolve_preset(str(shipped)) == shipped
    assert resolve_preset("cpu/mu") == shipped
    assert resolve_preset("mu") == shipped
    assert resolve_preset("gpt.yaml") == user
    assert resolve_preset("best.yaml").resolve() == cwd.resolve()  # by its path only
    assert resolve_preset("./best.yaml").resolve() == cwd.resolve()
    assert resolve_preset("Shipped MU") == shipped
    with pytest.raises(PresetError) as info:
        resolve_preset("gtp")
    message = str(info.value)
    assert "no preset 'gtp' (did you mean 'gpt'?)" in message
    assert "cpu/mu (builtin)" in message and "gpt (user)" in message
    with pytest.raises(PresetError, match=r"no preset file 'missing/best\.yaml'"):
        resolve_preset("missing/best.yaml")


def test_a_user_preset_wins_over_a_shipped_one(preset_places: dict[str, Path]) -> None:
    save_preset(make_preset(), preset_places["builtin"] / "mu.yaml")
    mine = save_preset(make_preset(), preset_places["user"] / "mu.yaml")
    assert resolve_preset("mu") == mine


def test_a_planted_working_directory_file_never_stands_in_for_a_name(
    preset_places: dict[str, Path],
) -> None:
    shipped = save_preset(make_preset(name="shipped"), preset_places["builtin"] / "mu.yaml")
    save_preset(make_preset(name="planted"), preset_places["cwd"] / "mu.yaml")
    (preset_places["cwd"] / "mu").write_text("also planted\n")
    assert resolve_preset("mu") == shipped
    (preset_places["cwd"] / "mu").unlink()
    (preset_places["cwd"] / "mu").mkdir()  # a folder of that name hides nothing either
    assert resolve_preset("mu") == shipped
    with pytest.raises(PresetError, match=r"'mu/' is a directory, not a preset file"):
        resolve_preset("mu/")
    assert resolve_preset("./mu.yaml") == Path("mu.yaml")  # named as a path: that file
    save_preset(make_preset(name="only-here"), preset_places["cwd"] / "best.yaml")
    with pytest.raises(PresetError, match=r"no preset 'best'.*only by its path: \./best\.yaml"):
        resolve_preset("best")
    (preset_places["cwd"] / "run2").mkdir()  # "no preset 'run2'", and nothing more
    with pytest.raises(PresetError, match=r"no preset 'run2'.*'run2' here is a folder, not a"):
        resolve_preset("run2")


def test_an_ambiguous_short_name_is_refused(preset_places: dict[str, Path]) -> None:
    save_preset(make_preset(), preset_places["builtin"] / "cpu" / "mu.yaml")
    save_preset(make_preset(), preset_places["builtin"] / "h100" / "mu.yaml")
    with pytest.raises(PresetError, match=r"'mu' is ambiguous: cpu/mu \(builtin\), h100/mu"):
        resolve_preset("mu")
    assert resolve_preset("h100/mu") == preset_places["builtin"] / "h100" / "mu.yaml"


def test_the_shipped_folder_is_found_in_a_source_checkout() -> None:
    folder = library.builtin_preset_dir()
    assert folder is not None and folder.is_dir()
    assert folder.name == "presets"


def test_user_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AUTOTUNE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert library.user_preset_dir() == tmp_path / "autotune" / "presets"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert library.user_preset_dir() == Path.home() / ".config" / "autotune" / "presets"


def test_an_unreadable_user_folder_hides_its_presets_not_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AUTOTUNE_CONFIG_DIR=/proc/1/root stopped presets list with an error about writing
    locked = tmp_path / "locked"
    (locked / "presets").mkdir(parents=True)
    monkeypatch.setenv("AUTOTUNE_CONFIG_DIR", str(locked))
    real_is_dir = Path.is_dir

    def denied(self: Path) -> bool:
        if self == locked / "presets":
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", denied)  # root ignores chmod 0
    found = find_presets()
    assert found and {origin for origin, _ in found} <= {"builtin", "cwd"}
