"""The full training run: trainer, log, checkpoints, run folder, schedule, launch, your own loop."""
