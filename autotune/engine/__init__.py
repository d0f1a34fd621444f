"""What the burst and the trainer share: the step function, model wrapping, memory."""
