"""Analytical priors: the physically grounded latency of every op class, and the constants read off GPUs
(`hybridperf.priors.constants`)."""
