"""Whole-model latency, memory and multi-GPU predictions against labels and measured runs."""
