"""Foundations without torch: errors, units, atomic files, the one validator, signals."""
