"""One isolated measurement: the parent's supervision and the trial's own process (child)."""
