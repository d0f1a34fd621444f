"""What the machine is: the probe, device capabilities, OpenMP's wait policy, the compile cache."""
