"""The built-in catalog of multi-GPU nodes: GPUs plus their intra-node and inter-node fabrics.

Numbers are spec-sheet numbers, per GPU and per direction (GB/s), unless a comment says otherwise;
the collective prior (`hybridperf.priors.collectives`) turns them into achievable rates with fitted
efficiencies. Device names are exactly the catalog's (`torch.cuda.get_device_name()`).

Reference points:
- NVLink3 (A100): 12 links x 25 GB/s = 300 GB/s per direction; NCCL reaches ~235 GB/s bus bandwidth
  on a DGX-A100. NVLink4 (H100/H200): 450 GB/s per direction. NVLink5 (B200): 900 GB/s.
- NVLink bridge: A100 PCIe with 3 bridges = 600 GB/s bidirectional (300 per direction);
  A40 / RTX A6000 = 112.5 GB/s bidirectional (56.25 per direction).
- PCIe x16 per direction: gen3 ~16, gen4 ~32, gen5 ~64 GB/s (raw).
- InfiniBand per port: HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s; DGX boxes carry one port per GPU.
- AMD MI300X: every GPU has 7 Infinity Fabric links of 64 GB/s per direction to its 7 peers (448 total).

The three Vidur profiling systems (`a100_dgx`, `a100_pairwise_nvlink`, `a40_pairwise_nvlink`) describe
the machines as profiled. Their inter-node networks are not documented by Vidur; the values below are
read off their two-node send/recv profiles and say so in `inter_name` (see the collectives report).
`nic_line_gbs` is the NIC line rate NCCL's tuner sees when that differs from the achieved per-GPU rate:
a100_dgx is a DGX-A100-class node, whose NICs are HDR 200 Gb/s (25 GB/s) ports, although Vidur's
profiles achieve ~8 GB/s per GPU flow.
"""
from __future__ import annotations

from hybridperf.devices.spec import NodeSpec

NODES: list[NodeSpec] = [
    # ---- NVSwitch boxes -------------------------------------------------------------------------
    NodeSpec(
        name="DGX-A100", device="NVIDIA A100-SXM4-80GB", gpus_per_node=8, intra_topology="nvswitch",
        intra_bw_gbs=300.0, intra_latency_us=2.0,  # NVSwitch gen2, NVLink3 (~235 GB/s NCCL bus bw)
        inter_bw_gbs=25.0, inter_node_bw_gbs=200.0, inter_latency_us=5.0,
        inter_name="InfiniBand HDR 8x200Gb/s",
        aliases=("HGX-A100", "8xA100-SXM"),
    ),
    NodeSpec(
        name="DGX-H100", device="NVIDIA H100 80GB HBM3", gpus_per_node=8, intra_topology="nvswitch",
        intra_bw_gbs=450.0, intra_latency_us=2.0,  # NVSwitch gen3, NVLink4
        inter_bw_gbs=50.0, inter_node_bw_gbs=400.0, inter_latency_us=4.0,
        inter_name="InfiniBand NDR 8x400Gb/s",
        aliases=("h100_dgx", "HGX-H100", "8xH100-SXM"),
    ),
    NodeSpec(
        name="HGX-H200", device="NVIDIA H200", gpus_per_node=8, intra_topology="nvswitch",
        intra_bw_gbs=450.0, intra_latency_us=2.0,  # NVSwitch gen3, NVLink4
        inter_bw_gbs=50.0, inter_node_bw_gbs=400.0, inter_latency_us=4.0,
        inter_name="InfiniBand NDR 8x400Gb/s",
        aliases=("DGX-H200", "h200_dgx", "8xH200"),
    ),
    NodeSpec(
        name="DGX-B200", device="NVIDIA B200", gpus_per_node=8, intra_topology="nvswitch",
        intra_bw_gbs=900.0, intra_latency_us=2.0,  # NVSwitch gen4, NVLink5
        inter_bw_gbs=50.0, inter_node_bw_gbs=400.0, inter_latency_us=4.0,
        inter_name="InfiniBand NDR 8x400Gb/s (ConnectX-7)",
        aliases=("HGX-B200", "b200_dgx", "8xB200"),
    ),
    NodeSpec(
        name="MI300X-8", device="AMD Instinct MI300X", gpus_per_node=8, intra_topology="mesh",
        intra_bw_gbs=448.0, pair_bw_gbs=64.0, intra_latency_us=3.0,  # Infinity Fabric full mesh, 7x64
        inter_bw_gbs=50.0, inter_node_bw_gbs=400.0, inter_latency_us=5.0,
        inter_name="400Gb/s RoCE/IB per GPU",
        aliases=("8xMI300X", "MI300X-OAM-8", "mi300x_platform"),
    ),
    # ---- Vidur profiling systems --------------------------------------------------------------
    NodeSpec(
        # DGX-A100-class node. Vidur's 2-node profiles show ~8 GB/s for one GPU per node and ~25 GB/s
        # for a whole node (one HDR port's worth), far below a DGX's 8x HDR; hence a separate entry.
        name="a100_dgx", device="NVIDIA A100-SXM4-80GB", gpus_per_node=8, intra_topology="nvswitch",
        intra_bw_gbs=300.0, intra_latency_us=2.0,
        inter_bw_gbs=8.0, inter_node_bw_gbs=25.0, inter_latency_us=8.0, nic_line_gbs=25.0,
        inter_name="as profiled by Vidur: ~1x HDR 200Gb/s per node, ~8 GB/s per GPU flow",
        aliases=("vidur_a100_dgx",),
    ),
    NodeSpec(
        # 4x A100 80GB PCIe, bridged in pairs (3 NVLink bridges per pair), PCIe gen4 between pairs.
        name="a100_pairwise_nvlink", device="NVIDIA A100 80GB PCIe", gpus_per_node=4,
        intra_topology="nvlink_pairs", intra_bw_gbs=32.0, pair_bw_gbs=300.0, intra_latency_us=3.0,
        inter_bw_gbs=3.125, inter_node_bw_gbs=3.125, inter_latency_us=10.0,
        inter_name="as profiled by Vidur: ~25Gb/s Ethernet-class",
        aliases=("a100_pair_nvlink", "4xA100-PCIe-NVLink-pairs"),
    ),
    NodeSpec(
        # 8x A40, bridged in pairs (112.5 GB/s bidirectional), PCIe gen4 between pairs.
        name="a40_pairwise_nvlink", device="NVIDIA A40", gpus_per_node=8,
        intra_topology="nvlink_pairs", intra_bw_gbs=32.0, pair_bw_gbs=56.25, intra_latency_us=3.0,
        inter_bw_gbs=3.125, inter_node_bw_gbs=3.125, inter_latency_us=10.0,
        inter_name="as profiled by Vidur: ~25Gb/s Ethernet-class",
        aliases=("a40_pair_nvlink", "8xA40-NVLink-pairs"),
    ),
    NodeSpec(
        # Same pairing for H100 PCIe (NVLink bridge: 600 GB/s bidirectional), PCIe gen5 between pairs.
        name="h100_pairwise_nvlink", device="NVIDIA H100 PCIe", gpus_per_node=4,
        intra_topology="nvlink_pairs", intra_bw_gbs=64.0, pair_bw_gbs=300.0, intra_latency_us=3.0,
        inter_bw_gbs=50.0, inter_node_bw_gbs=50.0, inter_latency_us=5.0,
        inter_name="InfiniBand NDR 400Gb/s per node (assumed)",
        aliases=("h100_pair_nvlink", "4xH100-PCIe-NVLink-pairs"),
    ),
    # ---- PCIe boxes (no GPU-to-GPU links) ------------------------------------------------------
    NodeSpec(
        name="8xL4-PCIe", device="NVIDIA L4", gpus_per_node=8, intra_topology="pcie",
        intra_bw_gbs=32.0, intra_latency_us=4.0,  # PCIe gen4 x16
        inter_bw_gbs=12.5, inter_node_bw_gbs=12.5, inter_latency_us=15.0, inter_name="Ethernet 100Gb/s",
        aliases=("L4x8", "g2-standard-96"),
    ),
    NodeSpec(
        name="8xT4-PCIe", device="Tesla T4", gpus_per_node=8, intra_topology="pcie",
        intra_bw_gbs=16.0, intra_latency_us=5.0,  # PCIe gen3 x16
        inter_bw_gbs=12.5, inter_node_bw_gbs=12.5, inter_latency_us=15.0, inter_name="Ethernet 100Gb/s",
        aliases=("T4x8",),
    ),
    NodeSpec(
        name="4xA40-PCIe", device="NVIDIA A40", gpus_per_node=4, intra_topology="pcie",
        intra_bw_gbs=32.0, intra_latency_us=4.0,  # PCIe gen4 x16, no bridges
        inter_bw_gbs=12.5, inter_node_bw_gbs=12.5, inter_latency_us=15.0, inter_name="Ethernet 100Gb/s",
        aliases=("A40x4",),
    ),
    NodeSpec(
        name="8xA100-PCIe", device="NVIDIA A100-PCIE-40GB", gpus_per_node=8, intra_topology="pcie",
        intra_bw_gbs=32.0, intra_latency_us=4.0,  # PCIe gen4 x16, no bridges
        inter_bw_gbs=25.0, inter_node_bw_gbs=50.0, inter_latency_us=5.0, inter_name="InfiniBand HDR 2x200Gb/s",
        aliases=("A100-PCIe-x8",),
    ),
    NodeSpec(
        name="8xH100-PCIe", device="NVIDIA H100 PCIe", gpus_per_node=8, intra_topology="pcie",
        intra_bw_gbs=64.0, intra_latency_us=4.0,  # PCIe gen5 x16, no bridges
        inter_bw_gbs=50.0, inter_node_bw_gbs=200.0, inter_latency_us=5.0, inter_name="InfiniBand NDR 4x400Gb/s",
        aliases=("H100-PCIe-x8",),
    ),
]
NODES.append(NodeSpec(
    # aiconfigurator's `l40s` system: 8x L40S (no NVLink) on PCIe gen4 x16, 1x CX7 NDR 400Gb/s per node
    name="8xL40S-PCIe", device="NVIDIA L40S", gpus_per_node=8, intra_topology="pcie",
    intra_bw_gbs=32.0, intra_latency_us=4.0,
    inter_bw_gbs=50.0, inter_node_bw_gbs=50.0, inter_latency_us=5.0, inter_name="InfiniBand NDR 400Gb/s per node",
    aliases=("L40Sx8",),
))
