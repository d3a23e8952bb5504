"""Model families as plugins: every module in this folder declares one `Family` as `FAMILY`, and importing
the package registers them all (`hybridperf.graphs.family`). Adding a family is adding one module here."""
from __future__ import annotations

import importlib
import pkgutil

from hybridperf.graphs.family import FAMILIES, Family, register

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    if not isinstance(getattr(_module, "FAMILY", None), Family):
        raise TypeError(f"{_module.__name__} declares no `FAMILY = Family(...)`")
    register(_module.FAMILY)

__all__ = ["FAMILIES", "Family", "register"]
