"""Analytical priors: the physically grounded latency of every op class, and the constants read off GPUs."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def replaced(namespace: dict, name: str, value):
    """Temporarily rebind `name` in a module's global `namespace` (its `globals()`) to `value`: how a
    prior constant fitted on GPUs is swapped for the one fitted without the GPU being scored."""
    saved = namespace[name]
    namespace[name] = value
    try:
        yield
    finally:
        namespace[name] = saved
