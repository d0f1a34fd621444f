"""Where a step's time goes and which limit it hits: the profiled breakdown of one
config's step (``breakdown``), its verdict and the knobs to turn next (``verdict``), and
their rendering (``render``). The search's profiling of its naive config and winner is the
search's (``autotune.study.session.profile_found``)."""

from autotune.explain.breakdown import PARTS, Breakdown, parse_events, profile_steps
from autotune.explain.verdict import KNOBS_BY_LIMIT, Finding, StepVerdict, classify, refine_order

__all__ = [
    "KNOBS_BY_LIMIT",
    "PARTS",
    "Breakdown",
    "Finding",
    "StepVerdict",
    "classify",
    "parse_events",
    "profile_steps",
    "refine_order",
]
