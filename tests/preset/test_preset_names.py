"""Every string of a preset that names something is one line of printable text: a control
character (C0, DEL, C1, a Unicode line separator, a bidi or zero-width format
character) is refused at validation, with the
field's path, every problem at once."""

from __future__ import annotations

import pytest
from fake_presets import make_preset, problems_of

from autotune.core.errors import PresetError
from autotune.core.text import control_problem, one_line, terminal_safe
from autotune.preset import ModelRef, preset_to_dict

CONTROLS = ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\t"]
CONTROLS += ["\u202e", "\u2066", "\u200b", "\u200d", "\ufeff"]  # bidi, zero-width (Cf)

# Where a name sits in a preset's data, as (path in the message, how to plant it).
NAME_FIELDS = [
    "name",
    "model.name",
    "fingerprint.device_name",
    "fingerprint.cpu_model",
    "fingerprint.torch_version",
    "fingerprint.driver_version",
    "search.study_name",
    "search.storage",
    "search.sampler",
]


def _plant(data: dict, path: str, value: str) -> None:
    *parents, leaf = path.split(".")
    for key in parents:
        data = data[key]
    data[leaf] = value


@pytest.mark.parametrize("char", CONTROLS)
def test_control_problem_names_the_character(char: str) -> None:
    problem = control_problem(f"ab{char}cd")
    assert problem is not None
    assert problem.startswith(f"contains the control character U+{ord(char):04X} at position 2")
    assert control_problem("NVIDIA A100-SXM4-80GB (é, ü, 日本)") is None


def test_every_name_field_refuses_control_characters_at_once() -> None:
    data = preset_to_dict(make_preset())
    for i, path in enumerate(NAME_FIELDS):
        _plant(data, path, f"x{CONTROLS[i % len(CONTROLS)]}y")
    problems = problems_of(data)
    for i, path in enumerate(NAME_FIELDS):
        code = f"U+{ord(CONTROLS[i % len(CONTROLS)]):04X}"
        assert f"{path}: contains the control character {code} at position 1" in "\n".join(
            problems
        ), path


def test_knob_names_and_values_and_model_args_refuse_control_characters() -> None:
    data = preset_to_dict(make_preset())
    data["config"]["knobs"] = {"bad\nname": 1, "mode": "a\x1b[2Jb"}
    data["baseline"]["config"]["knobs"] = {"mode": "x\u2028y"}
    data["model"]["args"] = {"dims": [64, "1\r2"]}
    problems = problems_of(data)
    assert "config.knobs: the knob 'bad\\nname' contains the control character U+000A" in (
        "\n".join(problems)
    )
    assert any(
        p.startswith("config.knobs.mode: contains the control character U+001B") for p in problems
    )
    assert any(
        p.startswith("baseline.config.knobs.mode: contains the control character U+2028")
        for p in problems
    )
    assert any(
        p.startswith("model.args: dims[1] contains the control character U+000D") for p in problems
    )


def test_constructing_a_section_refuses_them_too() -> None:
    with pytest.raises(PresetError, match=r"model.name: contains the control character U\+001B"):
        ModelRef(name="mu\x1b]0;t\x07")


def test_free_text_keeps_its_lines() -> None:
    preset = make_preset(notes="first line\nsecond line\tindented")
    assert preset.notes.count("\n") == 1


def test_one_line_and_terminal_safe() -> None:
    assert one_line("a\nb\x1b]0;t\x07 c\u2028d") == "a b ]0;t c d"
    text = (
        "ok \x1b[31mred\x1b[0m|\x1b]0;title\x07|\x1b]8;;u\x1b\\|\x1bPq\x1b\\|"
        "\x9b1m|\x9d2\x9c|x\x85y\n\tz\x1b]0;unterminated"
    )
    assert terminal_safe(text) == "ok red||||||xy\n\tz"
    assert terminal_safe("mu\u202elmay.exe \u200bok") == "mulmay.exe ok"
