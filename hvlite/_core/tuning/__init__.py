"""What auto picks: the alpha-beta cost model, its probes, calibration of the near-best
algorithms per size class, and the autotuner of fusion threshold and cycle time."""
