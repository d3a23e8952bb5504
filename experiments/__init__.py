"""hybridperf's experiments: the scripts behind experiments/RESULTS.md, run as `python -m experiments run`."""
