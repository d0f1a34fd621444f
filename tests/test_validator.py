"""The shared validator (autotune/core/validator.py) on records that are not presets: plain
dataclasses with nested records, lists and tuples (as a hardware profile has), unknown keys
ignored on request, converters for other types, and a self-validating Section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pytest

from autotune.core.errors import ConfigError, PresetError
from autotune.core.validator import BAD, Rule, Section, build, did_you_mean, positive
from autotune.machine.profile import HardwareProfile


@dataclass(frozen=True)
class Card:
    name: str
    capability: tuple[int, int]
    memory: int | None = None


@dataclass(frozen=True)
class Machine:
    kind: Literal["cpu", "cuda"]
    cards: tuple[Card, ...] = ()
    flags: list[str] = field(default_factory=list)
    ratio: float = 1.0


def machine_problems(data: Any, **options: Any) -> list[str]:
    problems: list[str] = []
    assert build(Machine, data, "machine", problems, **options) is BAD
    return problems


def test_a_plain_dataclass_is_built_with_its_nested_records() -> None:
    data = {"kind": "cuda", "cards": [{"name": "A100", "capability": [8, 0]}], "ratio": "3e-1"}
    problems: list[str] = []
    machine = build(Machine, data, "machine", problems)
    assert problems == []
    assert machine == Machine(kind="cuda", cards=(Card(name="A100", capability=(8, 0)),), ratio=0.3)


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    data = {
        "kind": "tpu",
        "cards": [{"name": 3, "capability": [8]}, {"capability": [8, "0"], "memory": -1.5}],
        "flags": "avx2",
        "ratoi": 2,
    }
    assert machine_problems(data) == [
        "machine.ratoi: unknown field (did you mean 'ratio'?)",
        "machine.kind: expected one of cpu, cuda; got 'tpu'",
        "machine.cards[0].name: expected a string; got 3",
        "machine.cards[0].capability: expected 2 items; got [8]",
        "machine.cards[1].name: missing required field",
        "machine.cards[1].capability[1]: expected an integer; got '0'",
        "machine.cards[1].memory: expected an integer or null; got -1.5",
        "machine.flags: expected a list; got 'avx2'",
    ]
    assert machine_problems([1, 2]) == ["machine: expected a mapping; got [1, 2]"]


def test_unknown_keys_may_be_ignored_all_the_way_down() -> None:
    data = {"kind": "cpu", "cards": [{"name": "x", "capability": [7, 0], "new": 1}], "peak": 2}
    problems: list[str] = []
    machine = build(Machine, data, "machine", problems, ignore_unknown=True)
    assert problems == [] and machine.cards[0].capability == (7, 0)
    assert machine_problems({"kind": "cpu", "peak": 2}) == ["machine.peak: unknown field"]


def test_a_converter_reads_a_type_the_validator_does_not_know() -> None:
    def card_from_text(value: Any, path: str, problems: list[str]) -> Any:
        if isinstance(value, str) and "@" in value:
            name, _, cc = value.partition("@")
            major, _, minor = cc.partition(".")
            return Card(name=name, capability=(int(major), int(minor)))
        problems.append(f"{path}: expected NAME@MAJOR.MINOR; got {value!r}")
        return BAD

    problems: list[str] = []
    converters = {Card: card_from_text}
    data = {"kind": "cuda", "cards": ["A100@8.0", "V100"]}
    assert build(Machine, data, "m", problems, converters=converters) is BAD
    assert problems == ["m.cards[1]: expected NAME@MAJOR.MINOR; got 'V100'"]


def test_a_hardware_profile_round_trips_through_build(fake_h100_profile: HardwareProfile) -> None:
    data = fake_h100_profile.to_dict()  # with derived keys (peak FLOP/s) that are not fields
    problems: list[str] = []
    rebuilt = build(HardwareProfile, data, "hardware", problems, ignore_unknown=True)
    assert problems == [] and rebuilt == fake_h100_profile


def _even(value: int) -> str | None:
    return None if value % 2 == 0 else f"expected an even number; got {value}"


@dataclass(frozen=True, kw_only=True)
class Pair(Section):
    low: int
    high: int = 2

    _path: ClassVar[str] = "pair"
    _rules: ClassVar[Mapping[str, Rule]] = {"low": positive, "high": _even}

    def _cross_problems(self) -> list[str]:
        return [] if self.low <= self.high else ["pair: low must not exceed high"]


@dataclass(frozen=True, kw_only=True)
class StrictPair(Pair):
    _error: ClassVar[type[ConfigError]] = PresetError
    _record: ClassVar[str] = "preset"


def test_a_section_validates_every_construction() -> None:
    assert Pair(low=1).high == 2
    with pytest.raises(ConfigError) as info:
        Pair(low=0, high=3)
    assert info.value.problems == [
        "pair.low: expected a number > 0; got 0",
        "pair.high: expected an even number; got 3",
    ]
    assert info.value.context == "invalid configuration pair section"
    with pytest.raises(ConfigError, match="low must not exceed high"):
        Pair(low=4, high=2)
    with pytest.raises(PresetError) as strict:
        StrictPair(low="1")  # type: ignore[arg-type]
    assert strict.value.context == "invalid preset pair section"
    assert strict.value.problems == ["pair.low: expected an integer; got '1'"]


def test_did_you_mean() -> None:
    assert did_you_mean("ratoi", ["ratio", "kind"]) == " (did you mean 'ratio'?)"
    assert did_you_mean("zzz", ["ratio"]) == ""
