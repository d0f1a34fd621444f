"""The trials: one config measured by a burst, its cost, its record, and where the time went."""
