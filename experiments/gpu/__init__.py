"""Scripts that need a GPU or torch tracing: measurements on a lent GPU and kernel counts of HF models."""
