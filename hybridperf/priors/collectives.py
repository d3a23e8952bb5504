"""Alpha-beta cost models of NCCL-style collectives over NVLink/NVSwitch, PCIe, meshes and networks,
plus the runtime of the learned correction (numpy + onnxruntime only).

Semantics follow Vidur's NCCL profiles: `nbytes` is the size in bytes of each rank's buffer (the
all-reduce buffer; the all-gather input / reduce-scatter output, so the gathered tensor is
`nbytes * gpus`; the all-to-all send buffer; the send/recv message); `gpus` ranks are packed
`gpus_per_node` to a node; the answer is the latency in milliseconds of the NCCL kernel.

Notation: p = gpus, g = gpus per node, N = p / g nodes, n = nbytes, B = an achievable per-GPU,
per-direction bandwidth (spec bandwidth x fitted efficiency x protocol efficiency), a = one hop's
latency (link latency + protocol overhead), L0 = the protocol's fixed kernel latency.

    ring all-reduce        L0 + 2(p-1) a + 2(p-1)/p * n / B
    tree all-reduce        L0 + 2 ceil(log2 p) a + 2 n / (B e_t)  (double binary tree: every rank
                           sends and receives 2n in all over its links, on one port 2n/B; e_t < 1:
                           NCCL's tree pipelines worse than its ring)
    hierarchical (N > 1)   RS over the g local GPUs + all-reduce of n/g across the N nodes on the
                           GPU's share of the NICs + AG over the local GPUs:
                           2[(g-1)/g n/B_in + (g-1) a_in] + 2(N-1)/N n/(B_node e_h) + 2(N-1) a_net
                           (e_h < 1: NCCL runs no true RS/AR/AG hierarchy; its multi-node tree moves
                           each byte up and down, i.e. about half the ideal rate)
    all-gather, reduce-scatter (ring)   L0 + (p-1) a + (p-1)/p * (n p) / B
    all-to-all             L0 + (p-1) a + max((g-1)/p n / B_in, g (p-g)/p n / B_node)
    send/recv              L0 + a + n / B_p2p

Bandwidth by topology (g GPUs used in the node):
    nvswitch      every GPU at its full NVLink rate, whatever g
    nvlink_pairs  g = 2 (one bridged pair): the bridge; g > 2: a ring must cross PCIe between pairs,
                  so min(bridge, PCIe)
    pcie          the PCIe link, halved when the ring crosses the CPU sockets of an 8-GPU box
    mesh          min(all links, (g-1) links) for collectives, one link for point-to-point
    network       the node's NICs: min(inter_node_bw, g * inter_bw) shared by the g GPUs; a ring
                  spanning nodes runs at min(B_intra, B_node) bus bandwidth
Protocols: LL (half the bandwidth, lowest latency), LL128 (~92% bandwidth, NVLink only, one node),
Simple (full bandwidth, highest latency).
Choice, as NCCL makes it: the tuner ranks every (algorithm, protocol) with NCCL's own cost model
(`_tuner_us`: the latency tables and protocol factors of NCCL's tuning.cc, on line rates: every
efficiency 1, the NIC at `nic_line_gbs`), never with what the hardware achieves; the prior charges the
achieved cost (above) of that pick. So where NCCL over-rates a link it keeps LL too long and the
time may dip at the switch, as measured. send/recv (and all-to-all per peer) run LL up to
NCCL_P2P_LL_THRESHOLD bytes, Simple above. The pick depends on no fitted constant.

Measurement floor: profiles taken like Vidur's (back-to-back launches, kernel device time) never
report less than a floor set by host launch overhead and rank skew (~50-60 us for all-reduce, ~10-20
us for send/recv on A100 hosts); the prior is `(floor^s + t^s)^(1/s)`, a smooth max.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from hybridperf.devices.spec import NodeSpec
from hybridperf.errors import InputError, ModelBundleError
from hybridperf.residual_models.bundle import (bundle_file, check_residuals, manifest_digest, sha256_file,
                                              shipped_models_dir)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
TOPOLOGIES = ("nvswitch", "nvlink_pairs", "pcie", "mesh")
_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "sendrecv": "send_recv", "p2p": "send_recv", "send": "send_recv",
}


@dataclass(frozen=True)
class CollectiveConstants:
    """Every tunable number of the prior. Defaults are physical guesses; `fit_constants` (training)
    refits the ones the data can see. Efficiencies multiply spec bandwidths."""

    floor_us: float = 50.0  # measurement floor of all-reduce-like collectives
    floor_p2p_us: float = 12.0  # measurement floor of send/recv
    floor_sharpness: float = 4.0  # s of the smooth max (floor^s + t^s)^(1/s)
    floor_p2p_sharpness: float = 4.0  # the same for send/recv
    eff_nvlink: float = 0.78  # collectives over NVLink/NVSwitch/mesh (235/300 on a DGX-A100)
    eff_nvlink_p2p: float = 0.90  # send/recv over NVLink
    eff_pcie: float = 0.78  # collectives whose ring crosses PCIe
    eff_pcie_p2p: float = 0.80  # send/recv over PCIe
    eff_net: float = 0.90  # collectives across nodes (of the node's NIC bandwidth)
    eff_net_p2p: float = 0.90  # send/recv across nodes
    pcie_cross_socket: float = 0.5  # ring spanning both CPU sockets of an 8-GPU PCIe box
    hier_inter_eff: float = 0.5  # see module doc (hierarchical / multi-node tree)
    tree_bw_eff: float = 0.65  # single-node tree vs ring bandwidth (NCCL's tree reaches ~2/3 of ring)
    ll_bw: float = 0.5  # LL: 8-byte stores carry 4 bytes of data
    ll128_bw: float = 0.92  # LL128: 120 of 128 bytes are data
    base_ll_us: float = 4.0
    base_ll128_us: float = 7.0
    base_simple_us: float = 6.0
    hop_ll_us: float = 0.5
    hop_ll128_us: float = 1.0
    hop_simple_us: float = 2.5

    def to_dict(self) -> dict:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "CollectiveConstants":
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in d.items() if k in names})

    def updated(self, **kw) -> "CollectiveConstants":
        return replace(self, **{k: float(v) for k, v in kw.items()})


DEFAULT_CONSTANTS = CollectiveConstants()


def canonical_collective(name: str) -> str:
    """`all_reduce` for all_reduce / allreduce / all-reduce ...; InputError otherwise."""
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES:
        raise InputError(f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)}")
    return key


def _positive_int(value, flag: str) -> int:
    """`value` as a positive integer, or InputError naming the command-line flag."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{flag} must be an integer, got {value!r}") from None
    if n < 1 or n != value:
        raise InputError(f"{flag} must be a positive integer, got {value}")
    return n


def check_shape(collective: str, gpus: int, gpus_per_node: int | None, node: NodeSpec) -> tuple[int, int]:
    """Validate (gpus, gpus_per_node) against Vidur's packing rules and the node; returns them."""
    p = _positive_int(gpus, "--gpus")
    g = min(p, node.gpus_per_node) if gpus_per_node is None else _positive_int(gpus_per_node, "--gpus-per-node")
    if g > p:
        raise InputError(f"--gpus-per-node ({g}) exceeds --gpus ({p})")
    if p % g:
        raise InputError(f"--gpus ({p}) must be a multiple of --gpus-per-node ({g})")
    if g > node.gpus_per_node:
        raise InputError(f"node {node.name} has {node.gpus_per_node} GPUs; --gpus-per-node {g} is too many")
    if collective == "send_recv" and p < 2:
        raise InputError("send_recv needs --gpus >= 2")
    return p, g


def _as_bytes(nbytes) -> np.ndarray:
    n = np.atleast_1d(np.asarray(nbytes, dtype=np.float64))
    if n.ndim != 1:
        n = n.ravel()
    if not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise InputError("message size must be a positive, finite number of bytes")
    return n


# ---------------------------------------------------------------------------------------------------
# fabric: effective per-GPU bandwidths (bytes/us) and latencies (us) of one configuration


@dataclass(frozen=True)
class Fabric:
    """What the ranks of one (node, p, g) configuration see. Bandwidths in GB/s (= 1e3 bytes/us)."""

    p: int
    g: int
    nodes: int
    intra_bw: float  # collective (ring) bandwidth among the g local GPUs; 0 if g == 1
    intra_p2p_bw: float  # rank 0 -> rank 1 inside the node
    intra_lat: float
    intra_kind: str  # nvlink | pcie | none (the ring among the g local GPUs)
    p2p_kind: str  # nvlink | pcie (rank 0 -> rank 1 inside the node)
    node_bw: float  # all NICs used by the g GPUs of a node, collectives (after efficiency)
    net_p2p_bw: float  # one GPU's flow to another node (after efficiency)
    inter_lat: float


_EFFICIENCIES = ("eff_nvlink", "eff_nvlink_p2p", "eff_pcie", "eff_pcie_p2p", "eff_net", "eff_net_p2p")


def _pcie_share(node: NodeSpec, g: int, c: CollectiveConstants) -> float:
    return c.pcie_cross_socket if (node.gpus_per_node >= 8 and g > node.gpus_per_node // 2) else 1.0


def fabric(node: NodeSpec, p: int, g: int, c: CollectiveConstants = DEFAULT_CONSTANTS, nominal: bool = False) -> Fabric:
    """Achievable bandwidths of node `node` when `p` ranks run `g` to a node (see module doc);
    `nominal=True`: the line rates NCCL's tuner believes in (every efficiency 1, NIC line rate)."""
    if nominal:
        c = replace(c, **{k: 1.0 for k in _EFFICIENCIES})
    topo = node.intra_topology
    if topo not in TOPOLOGIES:
        raise InputError(f"node {node.name}: unknown intra_topology {topo!r}; expected one of {TOPOLOGIES}")
    pair = node.pair_bw_gbs if node.pair_bw_gbs > 0 else node.intra_bw_gbs
    if topo == "nvswitch":
        bw, p2p, kind = node.intra_bw_gbs * c.eff_nvlink, node.intra_bw_gbs * c.eff_nvlink_p2p, "nvlink"
    elif topo == "mesh":
        bw = min(node.intra_bw_gbs, max(g - 1, 1) * pair) * c.eff_nvlink
        p2p, kind = pair * c.eff_nvlink_p2p, "nvlink"
    elif topo == "nvlink_pairs":
        p2p = pair * c.eff_nvlink_p2p  # ranks 0 and 1 are packed onto one bridged pair
        if g <= 2:
            bw, kind = pair * c.eff_nvlink, "nvlink"
        else:
            bw = min(pair * c.eff_nvlink, node.intra_bw_gbs * c.eff_pcie * _pcie_share(node, g, c))
            kind = "pcie"
    else:  # pcie
        bw, kind = node.intra_bw_gbs * c.eff_pcie * _pcie_share(node, g, c), "pcie"
        p2p = node.intra_bw_gbs * c.eff_pcie_p2p
    if g <= 1:
        bw, kind = 0.0, "none"
    cap = node.inter_node_bw_gbs if node.inter_node_bw_gbs > 0 else node.gpus_per_node * node.inter_bw_gbs
    per_gpu = node.nic_line_gbs if (nominal and node.nic_line_gbs > 0) else node.inter_bw_gbs
    node_bw = min(cap, g * per_gpu) * c.eff_net
    net_p2p = min(cap, per_gpu) * c.eff_net_p2p
    return Fabric(p=p, g=g, nodes=p // g, intra_bw=bw, intra_p2p_bw=p2p, intra_lat=node.intra_latency_us,
                  intra_kind=kind, p2p_kind="pcie" if topo == "pcie" else "nvlink", node_bw=node_bw, net_p2p_bw=net_p2p, inter_lat=node.inter_latency_us)


# ---------------------------------------------------------------------------------------------------
# the algorithms: each returns (latency_us, bandwidth_us) arrays for one protocol


def _proto(c: CollectiveConstants, proto: str) -> tuple[float, float, float]:
    """(bandwidth efficiency, fixed latency us, per-hop overhead us) of an NCCL protocol."""
    if proto == "LL":
        return c.ll_bw, c.base_ll_us, c.hop_ll_us
    if proto == "LL128":
        return c.ll128_bw, c.base_ll128_us, c.hop_ll128_us
    return 1.0, c.base_simple_us, c.hop_simple_us


def _mb(gbs: float) -> float:
    """GB/s -> bytes per microsecond."""
    return gbs * 1e3


# NCCL's own cost model (src/graph/tuning.cc, NCCL 2.18-2.21): its tuner runs the (algorithm, protocol)
# with the lowest *modelled* time, computed from line rates and these latency tables (us), not from
# what the hardware achieves. We pick the way it picks and charge what the choice really costs.
_NCCL_BASE_LAT = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}, "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
_NCCL_HW_LAT = {
    "nvlink": {"ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}, "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}},
    "pcie": {"ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}, "tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}},
    "net": {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}, "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}},
}
_NCCL_LL_MAX_BW = (87.7, 22.5, 19.0)  # GB/s cap of LL bus bandwidth (Ampere), 1 / 2 / more nodes
NCCL_P2P_LL_THRESHOLD = 16384  # send/recv (and all-to-all per peer) use LL up to this many bytes, else Simple


def _tuner_us(coll: str, alg: str, pr: str, n: np.ndarray, f: Fabric) -> np.ndarray:
    """NCCL's modelled time (us) of one candidate on the nominal fabric `f`; inf if NCCL never runs it."""
    p, g, N = f.p, f.g, f.nodes
    if alg == "local":
        return np.zeros_like(n)
    if alg == "direct":  # point-to-point: a size threshold, not the cost model
        per_peer = n if coll == "send_recv" else n / p
        use = per_peer <= NCCL_P2P_LL_THRESHOLD if pr == "LL" else per_peer > NCCL_P2P_LL_THRESHOLD
        return np.where(use & (pr != "LL128"), 0.0, np.inf)
    kind = "ring" if alg == "ring" else "tree"
    intra = _NCCL_HW_LAT["nvlink" if f.intra_kind == "nvlink" else "pcie"][kind][pr]
    net = _NCCL_HW_LAT["net"]["tree" if g == 1 else kind][pr]  # one GPU per node: latencies fully exposed
    if N > 1:
        intra = max(intra, 3.0 if pr == "Simple" else 1.0)  # network post overhead per step
    bus = min(f.intra_bw, f.node_bw) if (N > 1 and g > 1) else (f.node_bw if N > 1 else f.intra_bw)
    llmax = _NCCL_LL_MAX_BW[min(N, 3) - 1]
    if kind == "ring":
        steps, inter = (2 * (p - 1), 2 * (N - 1)) if coll == "all_reduce" else (p - 1, N - 1)
        lat = _NCCL_BASE_LAT["ring"][pr] + (steps - inter) * intra + inter * net
        bus = {"LL": min(llmax, 0.5 * bus), "LL128": 0.92 * bus, "Simple": bus}[pr]
        vol = 2 * (p - 1) / p * n if coll == "all_reduce" else (p - 1) * n
        return lat + vol / _mb(bus)
    lat = _NCCL_BASE_LAT["tree"][pr] + 2 * ((g - 1) * intra + math.log2(N) * net)
    bus = 0.92 * bus
    bus = {"LL": min(bus / 3.8, llmax), "LL128": bus * (7 / 9 if N == 1 else 120 / 128), "Simple": bus}[pr]
    return lat + 2 * n / _mb(bus)


def _candidates(coll: str, n: np.ndarray, f: Fabric, c: CollectiveConstants):
    """Yield (algorithm, protocol, latency_us, bandwidth_us) for every candidate NCCL could run."""
    p, g, N = f.p, f.g, f.nodes
    multi = N > 1
    protos = ["LL", "Simple"]  # LL128 only where every hop is NVLink-class (NCCL's default)
    if (coll == "send_recv" and g >= 2 and f.p2p_kind == "nvlink") or (
            coll != "send_recv" and not multi and f.intra_kind == "nvlink"):
        protos.insert(1, "LL128")
    for pr in protos:
        eff, L0, hop = _proto(c, pr)
        a_in = f.intra_lat + hop
        a_net = f.inter_lat + hop
        if coll == "send_recv":
            if g >= 2:
                yield "direct", pr, np.full_like(n, L0 + a_in), n / (_mb(f.intra_p2p_bw) * eff)
            else:
                yield "direct", pr, np.full_like(n, L0 + a_net), n / (_mb(f.net_p2p_bw) * eff)
            continue
        if p == 1:
            yield "local", pr, np.full_like(n, L0), np.zeros_like(n)
            continue
        if multi:
            bus = min(f.intra_bw, f.node_bw) if g > 1 else f.node_bw
            a_ring = ((g - 1) * a_in + a_net) / g  # NCCL-style: g-1 of every g hops stay in the node
        else:
            bus, a_ring = f.intra_bw, a_in
        B = _mb(bus) * eff
        if coll == "all_reduce":
            yield "ring", pr, np.full_like(n, L0 + 2 * (p - 1) * a_ring), 2 * (p - 1) / p * n / B
            if not multi:
                steps = 2 * math.ceil(math.log2(p))
                yield "tree", pr, np.full_like(n, L0 + steps * a_in), 2 * n / (B * c.tree_bw_eff)
            else:
                yield "hierarchical", pr, *hierarchical_all_reduce(n, f, c, pr)
        elif coll in ("all_gather", "reduce_scatter"):
            yield "ring", pr, np.full_like(n, L0 + (p - 1) * a_ring), (p - 1) * n / B
        elif coll == "all_to_all":
            t_in = (g - 1) / p * n / (_mb(f.intra_bw) * eff) if g > 1 else np.zeros_like(n)
            t_net = g * (p - g) / p * n / (_mb(f.node_bw) * eff) if multi else np.zeros_like(n)
            yield "direct", pr, np.full_like(n, L0 + (p - 1) * a_ring), np.maximum(t_in, t_net)


def hierarchical_all_reduce(n: np.ndarray, f: Fabric, c: CollectiveConstants, proto: str = "Simple"):
    """(latency_us, bandwidth_us) of reduce-scatter among the g local GPUs, all-reduce of n/g across
    the N nodes, all-gather among the local GPUs (module doc). With one node it is the flat ring."""
    eff, L0, hop = _proto(c, proto)
    g, N = f.g, f.nodes
    a_in, a_net = f.intra_lat + hop, f.inter_lat + hop
    lat = L0 + 2 * (g - 1) * a_in + 2 * (N - 1) * a_net
    bw = np.zeros_like(n)
    if N > 1:
        bw = 2 * (N - 1) / N * n / (_mb(f.node_bw) * eff * c.hier_inter_eff)
    if g > 1:
        bw = bw + 2 * (g - 1) / g * n / (_mb(f.intra_bw) * eff)
    return np.full_like(n, lat), bw


def prior_terms(
    collective: str,
    nbytes,
    gpus: int,
    gpus_per_node: int | None,
    node: NodeSpec,
    constants: CollectiveConstants | None = None,
) -> dict:
    """All the prior's pieces, vectorised over `nbytes`: `ms` (the prior), `alg_us` (best algorithm
    before the floor), `lat_us` / `bw_us` (its latency and bandwidth terms), `floor_us`,
    `algorithm` / `protocol` (names of the winner per size)."""
    c = constants or DEFAULT_CONSTANTS
    coll = canonical_collective(collective)
    p, g = check_shape(coll, gpus, gpus_per_node, node)
    n = _as_bytes(nbytes)
    f = fabric(node, p, g, c)
    f_nom = fabric(node, p, g, c, nominal=True)
    picked = np.full_like(n, np.inf)  # NCCL's modelled time of its pick
    best = np.full_like(n, np.inf)  # what the pick really costs
    lat = np.zeros_like(n)
    bw = np.zeros_like(n)
    alg = np.empty(n.shape, dtype=object)
    pro = np.empty(n.shape, dtype=object)
    for a, pr, l_us, b_us in _candidates(coll, n, f, c):
        tuned = _tuner_us(coll, a, pr, n, f_nom)
        win = tuned < picked
        picked = np.where(win, tuned, picked)
        best = np.where(win, l_us + b_us, best)
        lat = np.where(win, l_us, lat)
        bw = np.where(win, b_us, bw)
        alg[win] = a
        pro[win] = pr
    floor = c.floor_p2p_us if coll == "send_recv" else c.floor_us
    s = max(c.floor_p2p_sharpness if coll == "send_recv" else c.floor_sharpness, 1.0)
    # smooth max, computed stably: m * (1 + (min/m)^s)^(1/s)
    m = np.maximum(best, floor)
    r = np.minimum(best, floor) / m
    total = m * (1.0 + r**s) ** (1.0 / s)
    return {"ms": total / 1e3, "alg_us": best, "lat_us": lat, "bw_us": bw, "floor_us": np.full_like(n, floor),
            "algorithm": alg, "protocol": pro, "fabric": f, "gpus": p, "gpus_per_node": g,
            "collective": coll, "nbytes": n}


def collective_time_ms(
    collective: str,
    nbytes,
    gpus: int,
    gpus_per_node: int | None,
    node: NodeSpec,
    constants: CollectiveConstants | None = None,
    **consts,
) -> np.ndarray:
    """Prior latency (ms) of `collective` on `nbytes` (array) per rank, `gpus` ranks packed
    `gpus_per_node` to a node of type `node`. Keyword `consts` override CollectiveConstants fields."""
    c = constants or DEFAULT_CONSTANTS
    if consts:
        c = c.updated(**consts)
    return prior_terms(collective, nbytes, gpus, gpus_per_node, node, c)["ms"]


# ---------------------------------------------------------------------------------------------------
# features of the learned residual log(measured / prior): device-agnostic, no names or ids

FEATURE_NAMES = (
    "log2_bytes", "log2_gpus", "log2_gpus_per_node", "log2_nodes", "multi_node",
    "coll_all_reduce", "coll_gather_scatter", "coll_all_to_all", "coll_send_recv",
    "topo_nvswitch", "topo_nvlink_pairs", "topo_pcie", "topo_mesh",
    "log2_intra_bw", "log2_pair_bw", "log2_inter_bw", "log2_node_inter_bw",
    "intra_latency_us", "inter_latency_us",
    "log2_path_bw", "log2_prior_us", "log2_lat_us", "log2_bw_us", "log_alg_over_floor",
)


def collective_features(collective: str, nbytes, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                        constants: CollectiveConstants | None = None, terms: dict | None = None) -> np.ndarray:
    """Feature matrix (rows = sizes, columns = FEATURE_NAMES), float64."""
    coll = canonical_collective(collective)
    t = terms or prior_terms(coll, nbytes, gpus, gpus_per_node, node, constants)
    f: Fabric = t["fabric"]
    n = _as_bytes(nbytes)
    k = len(n)
    cap = node.inter_node_bw_gbs if node.inter_node_bw_gbs > 0 else node.gpus_per_node * node.inter_bw_gbs
    if coll == "send_recv":
        path = f.intra_p2p_bw if f.g >= 2 else f.net_p2p_bw
    elif f.nodes > 1:
        path = min(f.intra_bw, f.node_bw) if f.g > 1 else f.node_bw
    else:
        path = f.intra_bw if f.g > 1 else 1e3
    l2 = lambda v: math.log2(max(float(v), 1e-3))  # noqa: E731
    const = [
        l2(f.p), l2(f.g), l2(f.nodes), float(f.nodes > 1),
        float(coll == "all_reduce"), float(coll in ("all_gather", "reduce_scatter")),
        float(coll == "all_to_all"), float(coll == "send_recv"),
        *(float(node.intra_topology == x) for x in TOPOLOGIES),
        l2(node.intra_bw_gbs), l2(node.pair_bw_gbs or node.intra_bw_gbs), l2(node.inter_bw_gbs), l2(cap),
        float(node.intra_latency_us), float(node.inter_latency_us), l2(path),
    ]
    X = np.empty((k, len(FEATURE_NAMES)), dtype=np.float64)
    X[:, 0] = np.log2(n)
    X[:, 1:1 + len(const)] = np.asarray(const)
    j = 1 + len(const)
    X[:, j] = np.log2(np.maximum(t["ms"] * 1e3, 1e-3))
    X[:, j + 1] = np.log2(np.maximum(t["lat_us"], 1e-3))
    X[:, j + 2] = np.log2(np.maximum(t["bw_us"], 1e-3))
    X[:, j + 3] = np.log(np.maximum(t["alg_us"], 1e-6) / t["floor_us"])
    assert j + 4 == len(FEATURE_NAMES)
    return X


# ---------------------------------------------------------------------------------------------------
# the shipped bundle: fitted constants, optional ONNX residual, interval quantiles

BUNDLE_KIND = "hybridperf-collectives"
BUNDLE_VERSION = 1
#: used only when no bundle can be found at all: a wide central 90% band on log(measured/prior)
FALLBACK_INTERVAL = {"q_lo": -0.7, "q_hi": 0.7}


def default_bundle_dir() -> Path:
    """exported_models/collectives, inside the installed wheel or the repository."""
    return shipped_models_dir() / "collectives"


class CollectiveModel:
    """Prior (with fitted constants) x exp(ONNX residual), with a central 90% interval.

    `CollectiveModel.load()` reads exported_models/collectives; `CollectiveModel.prior_only()` needs
    no files. Only numpy and onnxruntime run here.
    """

    def __init__(self, constants: CollectiveConstants, interval: dict, session=None,
                 feature_names: tuple[str, ...] = FEATURE_NAMES, manifest: dict | None = None):
        self.constants = constants
        self.interval = dict(interval)
        self.session = session
        self.feature_names = tuple(feature_names)
        self.manifest = manifest or {}

    @classmethod
    def prior_only(cls, constants: CollectiveConstants | None = None, interval: dict | None = None):
        return cls(constants or DEFAULT_CONSTANTS, interval or FALLBACK_INTERVAL)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "CollectiveModel":
        """Load and verify a bundle directory (manifest.json [+ ONNX]); ModelBundleError if broken."""
        d = Path(path) if path is not None else default_bundle_dir()
        mf = d / "manifest.json"
        if not mf.is_file():
            if path is None:
                return cls.prior_only()
            raise ModelBundleError(f"no manifest.json in collectives bundle {d}")
        try:
            man = json.loads(mf.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelBundleError(f"unreadable manifest {mf}: {e}") from None
        if not isinstance(man, dict) or man.get("kind") != BUNDLE_KIND:
            raise ModelBundleError(f"{mf} is not a {BUNDLE_KIND} manifest")
        if man.get("content_sha256") != manifest_digest(man):
            raise ModelBundleError(f"{mf}: content sha256 mismatch: the manifest was modified or corrupted")
        if man.get("version") != BUNDLE_VERSION:
            raise ModelBundleError(f"{mf}: bundle version {man.get('version')} != {BUNDLE_VERSION}")
        for name, digest in (man.get("files") or {}).items():
            fp = bundle_file(d, name)
            if not fp.is_file():
                raise ModelBundleError(f"bundle file missing: {fp}")
            if sha256_file(fp) != digest:
                raise ModelBundleError(f"sha256 mismatch for {fp}: the file was modified or corrupted")
        try:
            constants = CollectiveConstants.from_dict(man.get("constants", {}))
            interval = dict(man.get("interval") or FALLBACK_INTERVAL)
            interval["q_lo"], interval["q_hi"] = float(interval["q_lo"]), float(interval["q_hi"])
        except (TypeError, ValueError, KeyError) as e:
            raise ModelBundleError(f"{mf}: bad constants/interval ({e})") from None
        session, names = None, FEATURE_NAMES
        res = man.get("residual")
        if res:
            names = tuple(res.get("feature_names", ()))
            if names != FEATURE_NAMES:
                raise ModelBundleError(f"{mf}: residual feature schema differs from this code's")
            fname = res.get("file", "")
            if not isinstance(fname, str) or fname not in (man.get("files") or {}):
                raise ModelBundleError(f"{mf}: residual file {fname!r} has no sha256 entry")
            try:
                import onnxruntime as ort

                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                so.inter_op_num_threads = 1
                session = ort.InferenceSession(str(d / fname), sess_options=so, providers=["CPUExecutionProvider"])
            except Exception as e:  # onnxruntime raises its own exception types
                raise ModelBundleError(f"cannot load {d / fname}: {str(e).splitlines()[0]}") from None
        return cls(constants, interval or FALLBACK_INTERVAL, session, names, man)

    def residual(self, X: np.ndarray) -> np.ndarray:
        """Predicted log(measured / prior) per row (zeros without a learned residual)."""
        if self.session is None:
            return np.zeros(len(X))
        inp = self.session.get_inputs()[0].name
        out = self.session.run(None, {inp: np.ascontiguousarray(X, dtype=np.float32)})[0]
        return check_residuals(np.asarray(out, dtype=np.float64).reshape(len(X)), "collectives residual model")

    def predict(self, collective: str, nbytes, gpus: int, gpus_per_node: int | None, node: NodeSpec) -> dict:
        """{"ms", "lo_ms", "hi_ms"} arrays over `nbytes`."""
        terms = prior_terms(collective, nbytes, gpus, gpus_per_node, node, self.constants)
        r = np.zeros_like(terms["ms"])
        if self.session is not None:
            X = collective_features(collective, nbytes, gpus, gpus_per_node, node, self.constants, terms)
            r = self.residual(X)
        ms = terms["ms"] * np.exp(r)
        q_lo, q_hi = self.interval_quantiles(terms, node)
        return {"ms": ms, "lo_ms": ms * np.exp(q_lo), "hi_ms": ms * np.exp(q_hi)}

    def interval_quantiles(self, terms: dict, node: NodeSpec) -> tuple[np.ndarray, np.ndarray]:
        """(q_lo, q_hi) of log(measured / predicted) per size: the held-out quantiles of this
        collective's stratum, widened by `ood_widen` outside the training range (topology never
        seen, more GPUs, or sizes beyond those measured)."""
        iv = self.interval
        stratum = "send_recv" if terms["collective"] == "send_recv" else "collective"
        st = (iv.get("strata") or {}).get(stratum) or iv
        q_lo, q_hi = float(st.get("q_lo", iv["q_lo"])), float(st.get("q_hi", iv["q_hi"]))
        n = len(terms["ms"])
        widen = np.ones(n)
        rng = iv.get("training_range")
        if rng:
            w = float(iv.get("ood_widen", 1.5))
            if node.intra_topology not in rng.get("topologies", TOPOLOGIES) or terms["gpus"] > rng.get("max_gpus", 1 << 30):
                widen[:] = w
            nb = terms["nbytes"]
            widen = np.where((nb < rng.get("min_bytes", 0)) | (nb > rng.get("max_bytes", np.inf)), widen * w, widen)
        return q_lo * widen, q_hi * widen


def predict_collective(collective: str, nbytes: float, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                       model: CollectiveModel | None = None) -> dict:
    """One prediction as plain floats: {"ms", "lo_ms", "hi_ms"}."""
    m = model or CollectiveModel.load()
    out = m.predict(collective, [nbytes], gpus, gpus_per_node, node)
    return {k: float(v[0]) for k, v in out.items()}
