"""What the burst and the trainer share: the step, model wrapping, memory, MFU, torchrun."""
