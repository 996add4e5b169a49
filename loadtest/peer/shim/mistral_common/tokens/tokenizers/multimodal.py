"""Stand-in (loadtest/peer/shim/README.md)."""
DATASET_MEAN = (0.0, 0.0, 0.0)
DATASET_STD = (1.0, 1.0, 1.0)
