"""The training engine: Lightning set-up, checkpoints, exact resume and run artefacts."""
