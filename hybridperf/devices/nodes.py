"""The built-in catalog of multi-GPU nodes: GPUs plus their intra-node and inter-node fabrics."""
from __future__ import annotations

from hybridperf.devices.spec import NodeSpec

NODES: list[NodeSpec] = []
