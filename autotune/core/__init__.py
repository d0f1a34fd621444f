"""Foundations without torch: errors, units, atomic files, the one validator, signals, and
what a device can run (``device_caps``), which the config and the model contract check."""
