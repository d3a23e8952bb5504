"""Kernel-level checks: priors against measured tables, leave-one-GPU-out residual models, noise floors."""
