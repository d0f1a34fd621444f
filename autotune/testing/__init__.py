"""Test seams, shipped like ``optuna.testing``: a fake burst (a search without a trial
process), fake device capabilities and a fake NVML, and a toy model spec.

Import the module you need (``from autotune.testing.burst import FakeBurst``); nothing
here is imported by autotune itself.
"""
