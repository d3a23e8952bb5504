"""Resolve what `--device` names where a node is wanted: a catalog node, a node JSON, or a GPU placed in the
catalog's node of it (`gpu_node`: an NVSwitch domain first, the largest) or else a default node of 8 built from
its spec sheet. Shared by `predict-collective`, the parallel training step and serving, so that one GPU name
means one fabric everywhere (an "NVIDIA GB200" is its NVL72 rack in all three)."""
from __future__ import annotations

from pathlib import Path

from hybridperf.devices import find_node, get_device, list_nodes
from hybridperf.devices.spec import NodeSpec
from hybridperf.errors import UnknownDeviceError
from hybridperf.jsonio import read_json_object


def default_node_for_device(dev, gpus_per_node: int = 8):
    """A plausible node of 8 identical GPUs built from a device's spec sheet: NVSwitch for SXM
    NVIDIA parts, an Infinity Fabric mesh for AMD OAM parts, NVLink-bridged pairs for PCIe and NVL cards with a
    bridge, a plain PCIe box otherwise; InfiniBand/RoCE at 25 (PCIe gen <= 4) or 50 GB/s per GPU."""
    pcie = float(dev.pcie_bw_gbs or 16.0)
    inter = 50.0 if int(dev.pcie_gen or 3) >= 5 else 25.0
    common = dict(name=f"{gpus_per_node}x {dev.name} (default node)", device=dev.name, arch=dev.arch,
                  gpus_per_node=gpus_per_node,
                  inter_bw_gbs=inter, inter_node_bw_gbs=inter * gpus_per_node, inter_latency_us=5.0,
                  inter_name=f"InfiniBand {inter:g} GB/s per GPU (assumed)")
    link = float(dev.link_bw_gbs or 0.0)
    if link > 0 and dev.vendor == "amd" and dev.form_factor == "OAM":
        return NodeSpec(intra_topology="mesh", intra_bw_gbs=link, pair_bw_gbs=link / (gpus_per_node - 1),
                        intra_latency_us=3.0, **common), "an Infinity Fabric mesh"
    if link > 0 and dev.form_factor in ("SXM", "OAM"):  # an NVL board is a PCIe card on NVLink bridges: pairs
        return NodeSpec(intra_topology="nvswitch", intra_bw_gbs=link, intra_latency_us=2.0, **common), "NVSwitch"
    if link > 0:
        return NodeSpec(intra_topology="nvlink_pairs", intra_bw_gbs=pcie, pair_bw_gbs=link, intra_latency_us=3.0,
                        **common), "NVLink-bridged pairs, PCIe between pairs"
    return NodeSpec(intra_topology="pcie", intra_bw_gbs=pcie, intra_latency_us=4.0, **common), "PCIe only"


def resolve_node(name: str):
    """A catalog node, a node JSON (NodeSpec fields), or a GPU (catalog/JSON) in a default node.
    Returns (node, note) where note is "" for an exact node."""
    node = find_node(name)
    if node is not None:
        return node, ""
    p = Path(name)
    if p.suffix.lower() == ".json" and p.is_file():
        d = read_json_object(p, error=UnknownDeviceError)
        if "intra_topology" in d:
            node = NodeSpec.from_dict(d, source=str(p))
            get_device(node.device)
            return node, ""
    dev = get_device(name)  # raises UnknownDeviceError with a one-line message
    node, how = gpu_node(dev)
    return node, f"note: {name!r} is a GPU, not a node; {how}"


def gpu_node(dev) -> tuple[NodeSpec, str]:
    """The node a bare GPU is placed in, and how, in words for a note: of the catalog's nodes of that GPU and the
    default node of 8 its spec sheet implies, an NVSwitch domain first, then the largest (a rack-scale GPU's NVL72
    domain; a serving TP group of 8 stays in one node), the catalog's on a tie. A profiled cluster (Vidur's, timed
    per call) stands for itself, not for the GPU: a 4-GPU box or a pair whose NVLink bridge went unused is no server
    of 8."""
    default, kind = default_node_for_device(dev)
    nodes = [n for n in list_nodes() if n.device == dev.name and n.collective_timing != "call"] + [default]
    node = min(nodes, key=lambda n: (n.intra_topology != "nvswitch", -n.gpus_per_node))
    if node is default:
        return node, (f"assuming a node of {node.gpus_per_node} of them with {kind} "
                      f"(pass a node such as DGX-H100 or a100_pairwise_nvlink for a known fabric)")
    return node, (f"taking its catalog node {node.name} ({node.gpus_per_node} GPUs a node, "
                  f"{node.intra_topology.replace('_', ' ')})")


def node_vendor(node: NodeSpec) -> str:
    """The vendor of a node's GPUs; "" where the catalog lacks them (a node around a JSON spec)."""
    try:
        return get_device(node.device).vendor
    except UnknownDeviceError:
        return ""
