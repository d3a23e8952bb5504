"""Serving engines: each module in this folder defines one `EngineDefaults` and registers it (adding an
engine is adding one file; every module here is imported on first use of the package)."""
from __future__ import annotations

import importlib
import pkgutil

from hybridperf.serving.engines.registry import ENGINES, EngineDefaults, get_engine, register

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "registry":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["ENGINES", "EngineDefaults", "get_engine", "register"]
