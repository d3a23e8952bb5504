"""Few-shot transfer to a held-out GPU: k measured kernels, by class, shape list and dtype."""
