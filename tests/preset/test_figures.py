"""preset/figures.py: how a speedup is printed with its evidence, in every output."""

from __future__ import annotations

from autotune.preset.figures import qualified, race_speedup, speedup_clause


def test_a_speedup_reads_with_its_evidence_or_as_not_measured() -> None:
    assert qualified(2.314, interval=(2.2, 2.4)) == "2.31x (95% interval 2.20-2.40)"
    assert race_speedup({"speedup": 2.0, "speedup_interval": [1.9, 2.1], "rounds": 1}) == (
        "2.00x (no interval: 1 round)"  # an older preset's one-round 'interval'
    )
    assert race_speedup({"speedup": None, "speedup_reason": "no quiet round"}) == (
        "not measured (no quiet round)"
    )


def test_the_headline_clause_is_the_same_sentence_for_the_report_and_presets_show() -> None:
    assert speedup_clause("2.31x (95% interval 2.20-2.40)") == (
        ", 2.31x the naive config (95% interval 2.20-2.40)"
    )
    assert speedup_clause("2.31x") == ", 2.31x the naive config"
    assert speedup_clause("not measured (no quiet round)") == (
        "; speedup: not measured (no quiet round)"
    )
