"""The built-in catalog of multi-GPU nodes: GPUs plus their intra-node and inter-node fabrics.

The entries live in `hybridperf/devices/data/nodes/*.json` (switched boxes, the Vidur profiling
systems, PCIe boxes, rack-scale NVLink domains), each a list of objects with `NodeSpec`'s fields plus
`source` and `notes`; see `catalog` for why the catalog is data and `docs/devices.md` for how to add one.

Numbers are spec-sheet numbers, per GPU and per direction (GB/s), unless the entry's notes say
otherwise; the collective prior (`hybridperf.priors.collectives`) turns them into achievable rates with
fitted efficiencies. Device names are exactly the catalog's (`torch.cuda.get_device_name()`). A node's
aliases include aiconfigurator's system ids (`h100_sxm`, `gb200`, ...) where the node is that system.

Reference points:
- NVLink3 (A100): 12 links x 25 GB/s = 300 GB/s per direction; NCCL reaches ~235 GB/s bus bandwidth
  on a DGX-A100. NVLink4 (H100/H200): 450 GB/s per direction. NVLink5 (Blackwell): 900 GB/s.
- NVLink bridge: A100 PCIe with 3 bridges = 600 GB/s bidirectional (300 per direction);
  A40 / RTX A6000 = 112.5 GB/s bidirectional (56.25 per direction).
- PCIe x16 per direction: gen3 ~16, gen4 ~32, gen5 ~64 GB/s (raw).
- InfiniBand per port: HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s, XDR 800 Gb/s = 100 GB/s; DGX
  boxes carry one port per GPU.
- AMD MI300X: every GPU has 7 Infinity Fabric links of 64 GB/s per direction to its 7 peers (448 total).
- An NVL72 rack is one NVLink domain of 72 GPUs (`gpus_per_node` 72), 4 GPUs per tray and host
  (`gpus_per_host` 4).

The Vidur profiling systems (`a100_dgx`, `a100_pairwise_nvlink`, `a40_pairwise_nvlink`) describe the
machines as profiled. Their inter-node networks are not documented by Vidur; the values are read off
their two-node send/recv profiles and say so in `inter_name`. `nic_line_gbs` is the NIC line rate
NCCL's tuner sees when that differs from the achieved per-GPU rate.
"""
from __future__ import annotations

from functools import cache

from hybridperf.devices.datafiles import load_catalog
from hybridperf.devices.spec import NodeSpec


@cache
def nodes() -> tuple[NodeSpec, ...]:
    """Every catalog node, read on first use (see `catalog.devices`)."""
    return tuple(load_catalog("nodes", NodeSpec))


def __getattr__(name: str):
    if name == "NODES":  # the catalog as a list, as before it was data
        return list(nodes())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
