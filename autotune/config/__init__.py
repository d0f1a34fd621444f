"""What a config is: TrainConfig, its checks, and the parallel (multi-process) record."""
