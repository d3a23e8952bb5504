"""Cost model of NCCL collectives (pure physics: no files, no learned parts).

Sizes are what NCCL's tests report (docs/predict-collective.md): `nbytes` is the all-reduce buffer, the
all-gather's gathered output, the reduce-scatter's input before scattering, one rank's all-to-all send
buffer, the send/recv message. `gpus` ranks are packed `gpus_per_node` to a node.

How NCCL runs a collective (src/graph/tuning.cc, NCCL 2.27-2.29): for every (algorithm, protocol) it
models time = latency + bytes / algorithm bandwidth from line rates and fixed latency tables, and runs
the cheapest. We rank the candidates the same way (`nccl_model_us` on the tuner's view of the fabric:
NCCL's own link rates) and charge the pick what it really costs (the same formulas on the achieved
bandwidths: spec x fitted efficiency, and the latencies x `lat_scale`).

Candidates, p ranks, g per node, N = p / g nodes:
    ring      LL / LL128 / Simple; all_reduce 2(p-1) steps, all_gather / reduce_scatter p-1 steps;
              algorithm bandwidth = bus bandwidth x p / steps. Bus: the GPU's links in one node, the
              node's NICs across nodes. On an NVSwitch, fewer than 8 ranks lose bandwidth (rank_loss); an
              all-reduce's ring has its own 8-rank rate (eff_allreduce, over the other collectives') and
              loses less with fewer ranks (rank_loss_allreduce).
    tree      all_reduce only: double binary tree, bus x 0.92 (x 1/3.8 LL, x 7/9 LL128 in one node) and
              half the bus rate as algorithm bandwidth; NCCL's size correction factors applied.
    nvls      NVLink SHARP (Hopper/Blackwell NVSwitch, one node; reduction inside the switch): Simple. The
              tuner rates it at NVLink x nvlsEfficiency x 15/16 (x2 for all_reduce, which pipelines two
              operations). An all-reduce achieves the better of the ring's rate and the switch's, which moves
              n (1 + 1/g) per direction (`_nvls_all_reduce_bus`); an all-gather or reduce-scatter the ring's.
              A 25 us fixed latency makes it a large-message algorithm.
    nvls_tree NVLS inside nodes + a tree across nodes (all_reduce, N > 1).
    pat       all_gather / reduce_scatter with one GPU per node (N = p): log-latency, bus x 0.75.
    collnet   in-network reduction (InfiniBand SHARP): only with a SHARP plugin, which catalog nodes
              do not declare, so never a candidate here (NCCL disables it without one as well).
    direct    send/recv (one message) and all_to_all (p-1 peers at once, n/p each, a fitted latency per peer): LL up to
              nccl_tuning.NCCL_P2P_LL_THRESHOLD bytes per peer, Simple above; intra-node bytes over the GPU's
              links (all of them busy for all_to_all, at the collective efficiency), inter-node bytes
              over the node's NICs (on a PCIe box through the GPU's own link, which carries both).
Protocols: LL (half the bandwidth, capped by NCCL's llMaxBw), LL128 (0.92, NVLink only), Simple.
Channels: the tuner prices every size at all of NCCL's channels, but NCCL runs a small ring/tree message on
one channel per nThreads x threadThreshold bytes (LL: 512 x 8 x p); inside an NVSwitch node each moves at one
NVLink channel's rate (NCCL's SMxx_NVLINK_BW x eff_nvlink / 0.8; `nccl_tuning.active_channels`).

Timing (`timing`):
    graph  the collective as a kernel in a stream of back-to-back launches or a captured CUDA graph
           (aiconfigurator's tables: nccl-tests' loop and graph replays; small messages 5-25 us):
           launch_us + the collective's time.
    call   one timed call as Vidur profiles it (kineto, back-to-back launches from Python): never below
           a floor set by host launch overhead and rank skew (~30-60 us all-reduce, ~15 us send/recv
           on A100 hosts): (floor^s + t^s)^(1/s), a smooth max.
Without a timing, "call" (Vidur's semantics, which the multi-GPU step model composes); the CLI picks
"graph" when the device is named by an aiconfigurator system id (`hybridperf.cli.collective`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from hybridperf.devices.spec import COLLECTIVE_TIMINGS, TOPOLOGIES, NodeSpec
from hybridperf.errors import InputError
from hybridperf.priors import nccl_tuning as nccl

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
#: topologies whose `intra_bw_gbs` is each GPU's PCIe link: a NIC's traffic crosses it too (GPUDirect RDMA), so a
#: GPU sends to other nodes no faster than a PCIe peer
PCIE_TOPOLOGIES = ("pcie", "nvlink_pairs")
TIMINGS = COLLECTIVE_TIMINGS
_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "sendrecv": "send_recv", "p2p": "send_recv", "send": "send_recv",
}


@dataclass(frozen=True)
class CollectiveConstants:
    """Every tunable number of the prior. Defaults are physical guesses; training refits the ones the
    data can see. Efficiencies multiply spec bandwidths."""

    floor_us: float = 50.0  # call timing: measurement floor of all-reduce-like collectives
    floor_p2p_us: float = 12.0  # call timing: the same for send/recv
    floor_sharpness: float = 4.0  # s of the smooth max (floor^s + t^s)^(1/s)
    floor_p2p_sharpness: float = 4.0
    launch_us: float = 2.0  # graph timing: per-kernel overhead beyond NCCL's modelled latency
    lat_scale: float = 1.3  # achieved / NCCL-modelled latency
    # send/recv's own latency (NCCL's p2p path, no ring step), across nodes plus the network's; fitted only on
    # graph-timed rows (none in ../shared: a per-call floor hides it)
    lat_p2p_us: float = 6.0
    # all-to-all's latency per peer: p - 1 send/recv pairs set up and synchronised (aiconfigurator's 4 KiB
    # all-to-all: A100 11.1 / 12.4 / 15.6 us, B200 9.2 / 10.2 / 13.3 us on 2 / 4 / 8 GPUs)
    lat_a2a_peer_us: float = 0.5
    eff_nvlink: float = 0.78  # collectives over NVLink/NVSwitch/mesh (ring bus bandwidth / spec)
    eff_nvlink_p2p: float = 0.85  # send/recv over NVLink (all-to-all runs on eff_nvlink's ring rate)
    eff_pcie: float = 0.70  # collectives whose ring crosses PCIe
    eff_pcie_p2p: float = 0.75
    eff_net: float = 0.90  # collectives across nodes (of the node's NIC bandwidth)
    eff_net_p2p: float = 0.90
    nvls_gain: float = 1.0  # NVLS all-reduce's achieved link rate over eff_nvlink x nvlsEfficiency, 1 until fitted
    nvls_lat_gain: float = 1.0  # NVLS all-reduce's achieved fixed latency over NCCL's (25 us), 1 until fitted
    rank_loss: float = 0.6  # g <= 8 ranks on one NVSwitch reach (1 - rank_loss / g) / (1 - rank_loss / 8) x eff_nvlink
    eff_allreduce: float = 1.0  # an all-reduce's ring on an NVSwitch over an all-gather's, at 8 ranks
    rank_loss_allreduce: float = 0.6  # rank_loss of that all-reduce ring
    pcie_cross_socket: float = 0.5  # ring spanning both CPU sockets of an 8-GPU PCIe box
    # filling NCCL's pipeline: the first `fill_bytes` of a message move at 1 / (1 + fill_share) of the rate
    # (the default is the fit's lower bound, not 0: the fit searches in log space)
    fill_share: float = 0.001
    fill_bytes: float = 4 * 2**20

    def to_dict(self) -> dict:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "CollectiveConstants":
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in d.items() if k in names})

    def updated(self, **kw) -> "CollectiveConstants":
        return replace(self, **{k: float(v) for k, v in kw.items()})


DEFAULT_CONSTANTS = CollectiveConstants()
#: what NCCL's tuner believes: its graph search's link rates (SM80-SM100 NVLink ~0.8 of spec, PCI_BW
#: 24 of 32 GB/s), the NIC at line rate, its own latency tables
TUNER_CONSTANTS = replace(DEFAULT_CONSTANTS, lat_scale=1.0, launch_us=0.0, eff_nvlink=nccl.TUNER_NVLINK_EFF,
                          eff_nvlink_p2p=nccl.TUNER_NVLINK_EFF,
                          eff_pcie=0.75, eff_pcie_p2p=0.75, eff_net=1.0, eff_net_p2p=1.0, nvls_gain=1.0, rank_loss=0.0,
                          eff_allreduce=1.0, rank_loss_allreduce=0.0, fill_share=0.0)


def canonical_collective(name: str) -> str:
    """`all_reduce` for all_reduce / allreduce / all-reduce ...; InputError otherwise."""
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES:
        raise InputError(f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)}")
    return key


def check_timing(timing: str | None) -> str:
    """"graph" or "call" ("call" when None); InputError otherwise."""
    t = "call" if timing is None else str(timing).strip().lower()
    if t not in TIMINGS:
        raise InputError(f"--timing must be one of graph, call, auto; got {timing!r}")
    return t


def _positive_int(value, flag: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{flag} must be an integer, got {value!r}") from None
    if n < 1 or n != value:
        raise InputError(f"{flag} must be a positive integer, got {value}")
    return n


#: the most ranks accepted: beyond any cluster built (the largest hold a few hundred thousand GPUs)
MAX_RANKS = 2**20


def check_shape(collective: str, gpus: int, gpus_per_node: int | None, node: NodeSpec) -> tuple[int, int]:
    """Validate (gpus, gpus_per_node) against the node; returns them (gpus_per_node filled in when None, and no more
    than gpus: a node's size given for fewer ranks places them all in one node)."""
    p = _positive_int(gpus, "--gpus")
    if p > MAX_RANKS:
        raise InputError(f"--gpus {p} is more ranks than any cluster has (at most {MAX_RANKS})")
    g = min(p, node.gpus_per_node) if gpus_per_node is None else _positive_int(gpus_per_node, "--gpus-per-node")
    if g > node.gpus_per_node:
        raise InputError(f"node {node.name} has {node.gpus_per_node} GPUs; --gpus-per-node {g} is too many")
    g = min(g, p)  # a node's size given for fewer ranks: they all sit in one node
    if p % g:
        if gpus_per_node is None:
            racks = 0 < node.gpus_per_host < node.gpus_per_node  # a domain over hosts: whole domains or nothing
            raise InputError(f"--gpus ({p}) beyond one {node.name} fills whole nodes of {g} GPUs: use a multiple of "
                             f"{g}" + ("" if racks else ", or --gpus-per-node to place fewer on each"))
        raise InputError(f"--gpus ({p}) must be a multiple of --gpus-per-node ({g})")
    if collective == "send_recv" and p < 2:
        raise InputError("send_recv needs --gpus >= 2")
    return p, g


def per_host_to_domain(gpus: int, gpus_per_host: int, node: NodeSpec) -> int:
    """Ranks per NVLink domain of `gpus` ranks placed `gpus_per_host` to a host (tray) of a domain that spans
    several hosts (an NVL72 rack: 4 GPUs per tray, 72 per domain): ranks on different trays of one rack
    still talk over NVLink, so one domain holds them all, or a whole number of full domains do, however
    many a rank count per host names (8 per host on a 4-GPU tray is still one rack). Other nodes keep
    `gpus_per_host`; InputError for ranks that fill some racks and part of another."""
    host, domain = node.gpus_per_host, node.gpus_per_node
    if node.intra_topology != "nvswitch" or not host or host >= domain:
        return gpus_per_host
    if gpus_per_host > domain:
        raise InputError(f"--gpus-per-node {gpus_per_host} is more GPUs than a {node.name} domain holds ({domain})")
    if gpus <= min(gpus_per_host, host):
        return gpus_per_host
    if gpus <= domain:
        return gpus
    if gpus % domain:
        raise InputError(f"{gpus} ranks at {gpus_per_host} per host fill {gpus // domain} {node.name} domain(s) of "
                         f"{domain} GPUs and part of another: use a multiple of {domain} ranks")
    return domain


#: the largest message accepted: a PiB is beyond any system's memory
MAX_BYTES = float(2 ** 50)


def as_bytes(nbytes) -> np.ndarray:
    n = np.atleast_1d(np.asarray(nbytes, dtype=np.float64)).ravel()
    if not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise InputError("message size must be a positive, finite number of bytes")
    if np.any(n > MAX_BYTES):
        raise InputError(f"message size must be at most 2^50 bytes (1 PiB), got {float(n.max()):g}")
    return n


# ---------------------------------------------------------------------------------------------------
# fabric: per-GPU bandwidths (GB/s = 1e3 bytes/us) one configuration sees


@dataclass(frozen=True)
class Fabric:
    p: int
    g: int
    nodes: int
    arch: int  # NCCL's compute-capability index: 0 Volta-, 1 Ampere/Ada, 2 Hopper, 3 Blackwell
    intra_bw: float  # ring bus bandwidth among the g local GPUs; 0 if g == 1
    allreduce_gain: float  # an all-reduce ring's bus bandwidth over intra_bw
    intra_p2p_bw: float  # one GPU's point-to-point rate inside the node
    intra_kind: str  # nvlink | pcie | none
    nvls: bool  # NVLink SHARP available (Hopper+ NVSwitch)
    nvlink_spec: float  # the GPU's NVLink spec rate (NCCL's tuner rates NVLS from it)
    node_bw: float  # the node's NICs as the g GPUs share them (collectives)
    net_p2p_bw: float  # one GPU's flow to another node
    channel_bw: float = 0.0  # one NCCL channel's achieved NVLink rate on an NVSwitch (0: not modelled)


_ARCH_INDEX = {"volta": 0, "turing": 0, "pascal": 0, "ampere": 1, "ada": 1, "hopper": 2, "blackwell": 3}


def node_arch(node: NodeSpec) -> int:
    """Generation index of the node's GPUs (its own `arch`, else its catalog device's)."""
    from hybridperf.devices import get_device

    return _ARCH_INDEX.get(node.arch or get_device(node.device).arch, 1)


def fabric(node: NodeSpec, p: int, g: int, c: CollectiveConstants = DEFAULT_CONSTANTS) -> Fabric:
    """Bandwidths of `p` ranks, `g` to a node of type `node`, after the efficiencies in `c`."""
    topo = node.intra_topology
    if topo not in TOPOLOGIES:
        raise InputError(f"node {node.name}: unknown intra_topology {topo!r}; expected one of {TOPOLOGIES}")
    pair = node.pair_bw_gbs if node.pair_bw_gbs > 0 else node.intra_bw_gbs
    cross = c.pcie_cross_socket if (node.gpus_per_node >= 8 and g > node.gpus_per_node // 2) else 1.0
    if topo == "nvswitch":
        bw, p2p, kind = node.intra_bw_gbs * c.eff_nvlink, node.intra_bw_gbs * c.eff_nvlink_p2p, "nvlink"
    elif topo == "mesh":
        bw, p2p, kind = min(node.intra_bw_gbs, max(g - 1, 1) * pair) * c.eff_nvlink, pair * c.eff_nvlink_p2p, "nvlink"
    elif topo == "nvlink_pairs":
        # ranks 0 and 1 share a bridged pair; more ranks pass rank 1 -> 2 over PCIe
        p2p = pair * c.eff_nvlink_p2p
        p2p = p2p if g <= 2 else min(p2p, node.intra_bw_gbs * c.eff_pcie_p2p)  # as a PCIe box's p2p
        bw, kind = (pair * c.eff_nvlink, "nvlink") if g <= 2 else (min(pair * c.eff_nvlink, node.intra_bw_gbs * c.eff_pcie * cross), "pcie")
    else:
        bw, p2p, kind = node.intra_bw_gbs * c.eff_pcie * cross, node.intra_bw_gbs * c.eff_pcie_p2p, "pcie"
    gain = 1.0
    if topo == "nvswitch":  # eff_nvlink is the rate of 8 ranks; more (an NVL72 domain) are not faster
        ranks = _rank_factor(c.rank_loss, g)
        bw *= ranks
        gain = c.eff_allreduce * _rank_factor(c.rank_loss_allreduce, g) / ranks
    if g <= 1:
        bw, kind = 0.0, "none"
    arch = node_arch(node)
    cap = node.inter_node_bw_gbs if node.inter_node_bw_gbs > 0 else node.gpus_per_node * node.inter_bw_gbs
    per_gpu = node.nic_line_gbs if (c is TUNER_CONSTANTS and node.nic_line_gbs > 0) else node.inter_bw_gbs
    node_bw, net_p2p = min(cap, g * per_gpu) * c.eff_net, min(cap, per_gpu) * c.eff_net_p2p
    if topo in PCIE_TOPOLOGIES:  # GPUDirect RDMA reads the GPU over its own PCIe link: no faster than a PCIe peer
        node_bw = min(node_bw, g * node.intra_bw_gbs * c.eff_pcie)
        net_p2p = min(net_p2p, node.intra_bw_gbs * c.eff_pcie_p2p)
    channel = nccl.NVLINK_CHANNEL_BW[arch] * c.eff_nvlink / nccl.TUNER_NVLINK_EFF if topo == "nvswitch" else 0.0
    return Fabric(p=p, g=g, nodes=p // g, arch=arch, intra_bw=bw, allreduce_gain=gain, intra_p2p_bw=p2p,
                  intra_kind=kind, nvls=topo == "nvswitch" and arch >= 2 and g >= 2, nvlink_spec=node.intra_bw_gbs,
                  node_bw=node_bw, net_p2p_bw=net_p2p, channel_bw=channel)


def _rank_factor(loss: float, g: int) -> float:
    """Bus bandwidth of g ranks on one NVSwitch over that of 8 (more, as in an NVL72 domain, are not faster)."""
    return max(1.0 - loss / min(max(g, 1), 8), 0.05) / max(1.0 - loss / 8, 0.05)


# ---------------------------------------------------------------------------------------------------
# NCCL's model (tuning.cc), evaluated on any fabric

def candidates(coll: str, f: Fabric) -> list[tuple[str, str]]:
    """(algorithm, protocol) pairs NCCL may run for `coll` on `f` (its enable rules)."""
    if coll in ("send_recv", "all_to_all"):
        return [("direct", "LL"), ("direct", "Simple")]
    if f.p == 1:
        return [("local", "Simple")]
    ll128 = f.intra_kind == "nvlink" or (f.g == 1 and f.arch >= 2)  # NVLink inside; Hopper+ across NICs
    out = [("ring", pr) for pr in nccl.PROTOS if pr != "LL128" or ll128]
    if coll == "all_reduce":
        out += [("tree", pr) for pr in nccl.PROTOS if pr != "LL128" or ll128]
        if f.nvls:
            out.append(("nvls" if f.nodes == 1 else "nvls_tree", "Simple"))
    elif f.nvls and f.nodes == 1:
        out.append(("nvls", "Simple"))
    if coll in ("all_gather", "reduce_scatter") and f.nodes == f.p and f.p > 1:
        out.append(("pat", "Simple"))
    return out


def nccl_model_us(coll: str, alg: str, pr: str, n: np.ndarray, f: Fabric, c: CollectiveConstants) -> np.ndarray:
    """NCCL's time model of one candidate (us) on the bandwidths of `f`, latencies x c.lat_scale."""
    p, g, N = f.p, f.g, f.nodes
    k = nccl.PROTOS.index(pr)
    if alg == "local":
        return np.zeros_like(n)
    if alg == "direct":
        per_peer = n if coll == "send_recv" else n / p
        use = per_peer <= nccl.NCCL_P2P_LL_THRESHOLD if pr == "LL" else per_peer > nccl.NCCL_P2P_LL_THRESHOLD
        eff = 0.5 if pr == "LL" else 1.0
        net_lat = nccl.HW_LAT["net"]["ring"][k] if N > 1 else 0.0
        if coll == "send_recv":
            lat = c.lat_p2p_us + c.lat_scale * net_lat
            bw = f.intra_p2p_bw if g >= 2 and N == 1 else f.net_p2p_bw  # ranks on several nodes: a pair crosses
            t = n / (1e3 * bw * eff)
        else:
            hw = nccl.HW_LAT[f.intra_kind if f.intra_kind != "none" else "pcie"]["ring"][k]
            lat = c.lat_scale * (nccl.BASE_LAT["ring"][k] + hw + net_lat) + c.lat_a2a_peer_us * (p - 1)
            t_in = (p - 1 if f.intra_kind == "pcie" else g - 1) / p * n / (1e3 * f.intra_bw * eff) if g > 1 else 0 * n
            t_net = g * (p - g) / p * n / (1e3 * f.node_bw * eff) if N > 1 else 0 * n
            t = np.maximum(t_in, t_net)
        return np.where(use, lat + t * _fill(n, c), np.inf)
    nsteps = 2 * (p - 1) if coll == "all_reduce" else p - 1
    hw_in = nccl.HW_LAT["nvlink" if f.intra_kind == "nvlink" else "pcie"][alg][k]
    hw_net = nccl.HW_LAT["net"]["tree" if g == 1 else alg][k]
    ring_bus = f.intra_bw * (f.allreduce_gain if coll == "all_reduce" else 1.0)
    bus = (min(ring_bus, f.node_bw) if g > 1 else f.node_bw) if N > 1 else ring_bus
    llmax = nccl.LL_MAX_BW[f.arch if N == 1 else 1][min(N, 3) - 1]
    lat = nccl.BASE_LAT[alg][k]
    if alg == "ring":
        inter = 0 if N == 1 else (2 * (N - 1) if coll == "all_reduce" else N - 1)
        intra = max(hw_in, (3.0 if pr == "Simple" else 1.0) if N > 1 else 0.0)
        lat += (nsteps - inter) * intra + inter * hw_net
        share = nccl.PROTO_LINK_SHARE
        bus = {"LL": min(llmax, share["LL"] * bus), "LL128": share["LL128"] * bus, "Simple": bus}[pr]
        algbw = _channel_capped(bus, n, pr, f, c, ring=True) * p / nsteps
    elif alg == "tree":
        lat += 2 * ((g - 1) * hw_in + math.log2(N) * hw_net)
        bus = 0.92 * bus  # NCCL's tree rate over the ring's (tuning.cc), every protocol
        bus = {"LL": min(bus / 3.8, llmax), "LL128": bus * (7 / 9 if N == 1 else 120 / 128), "Simple": bus}[pr]
        algbw = 0.5 * (bus * nccl.tree_correction(n, k) if c is TUNER_CONSTANTS  # the pick only: keeps t monotone
                       else _channel_capped(bus, n, pr, f, c, ring=False))
    elif alg in ("nvls", "nvls_tree"):
        if c is TUNER_CONSTANTS:  # NCCL's own NVLS rate
            intra = f.nvlink_spec * c.eff_nvlink * nccl.NVLS_EFF[f.arch] * nccl.NVLS_CHANNEL_FACTOR
            intra *= 2.0 if coll == "all_reduce" else (g - 1) / g
        elif coll == "all_reduce":  # achieved, in the units NCCL converts below: see _nvls_all_reduce_bus
            intra = _nvls_all_reduce_bus(f, g, c)
            if alg == "nvls" and intra <= ring_bus:  # few ranks: NCCL's NVLS runs at the ring's speed
                return nccl_model_us(coll, "ring", pr, n, f, c)
            intra = max(ring_bus, intra)
        else:  # an NVLS all-gather moves what a ring does: the ring's rate
            intra = ring_bus * g / (g - 1)
        if alg == "nvls":
            lat = hw_in * (c.nvls_lat_gain if coll == "all_reduce" else 1.0)  # the tuner's gain is 1
            algbw = intra * p / nsteps if coll == "all_reduce" else intra
        else:
            lat += hw_in + 2 * math.log2(N) * hw_net
            inter = f.node_bw * (2 if N <= 2 else 1)  # the node's NICs carry 1/g of the data each
            algbw = min(intra, inter, nccl.NVLS_TREE_MAX[f.arch][min(N, 3) - 1] * 16) * p / nsteps
    else:  # pat
        lat += math.log2(N) * hw_net / 3.5 + p * 2.8
        algbw = 0.75 * bus
    t = n / (1e3 * algbw)
    return c.lat_scale * lat + t * _fill(n, c)


def _channel_capped(bus: float, n: np.ndarray, pr: str, f: Fabric, c: CollectiveConstants, ring: bool):
    """The bus bandwidth a ring or tree inside one NVSwitch node achieves at `n` bytes: NCCL runs a small
    message on fewer channels than its tuner priced (`active_channels`), each at `channel_bw` x the protocol's
    share of the link. The tuner's own model (TUNER_CONSTANTS) is left as NCCL has it."""
    if c is TUNER_CONSTANTS or not f.channel_bw or f.nodes > 1:
        return bus
    return np.minimum(bus, nccl.active_channels(n, pr, f.p, ring) * f.channel_bw * nccl.PROTO_LINK_SHARE[pr])


def _nvls_all_reduce_bus(f: Fabric, g: int, c: CollectiveConstants) -> float:
    """NVLS all-reduce's bus bandwidth on g ranks: each rank sends its buffer into the switch and takes the
    reduced buffer back through multicast, n (1 + 1/g) per direction, at the links' fitted rate x NCCL's
    nvlsEfficiency of the generation x nvls_gain (1 until fitted): algorithm bandwidth B / (1 + 1/g), bus
    bandwidth B 2 (g - 1) / (g + 1). Below ~5 ranks that is slower than a ring, and NCCL's NVLS then runs at
    the ring's speed (H100: 365-370 GB/s bus bandwidth on 2-4 ranks, 420-480 on 5-8, NCCL issue 1455). Its
    fixed latency is its own (`nvls_lat_gain`): B200's 8-rank all-reduce takes ~97 us + n / 434 GB/s from
    32 MB to 512 MB, slower than its ring below ~100 MB."""
    rate = f.nvlink_spec * c.eff_nvlink * nccl.NVLS_EFF[f.arch] * c.nvls_gain
    return rate * 2.0 * (g - 1) / (g + 1)


def _fill(n: np.ndarray, c: CollectiveConstants) -> np.ndarray:
    """Factor on a message's transfer time for the pipeline's fill: 1 + fill_share x min(n, fill_bytes) / n
    (1 for NCCL's own tuner model, whose fill_share is 0)."""
    return 1.0 + c.fill_share * np.minimum(n, c.fill_bytes) / np.maximum(n, 1.0)


def prior_terms(collective: str, nbytes, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                constants: CollectiveConstants | None = None, timing: str | None = None) -> dict:
    """The prior's pieces over `nbytes`: `ms` (the prior), `alg_us` (the pick's achieved time),
    `floor_us` (call timing; 0 for graph), `algorithm` / `protocol` (the pick per size)."""
    c = constants or DEFAULT_CONSTANTS
    coll = canonical_collective(collective)
    p, g = check_shape(coll, gpus, gpus_per_node, node)
    timing = check_timing(timing)
    n = as_bytes(nbytes)
    f, f_tuner = fabric(node, p, g, c), fabric(node, p, g, TUNER_CONSTANTS)
    picked = np.full_like(n, np.inf)
    best = np.full_like(n, np.inf)
    alg = np.empty(n.shape, dtype=object)
    pro = np.empty(n.shape, dtype=object)
    for a, pr in candidates(coll, f):
        tuned = nccl_model_us(coll, a, pr, n, f_tuner, TUNER_CONSTANTS)
        win = tuned < picked
        picked = np.where(win, tuned, picked)
        best = np.where(win, nccl_model_us(coll, a, pr, n, f, c), best)
        alg[win], pro[win] = a, pr
    t = best + c.launch_us
    floor = 0.0
    if timing == "call":
        floor = c.floor_p2p_us if coll == "send_recv" else c.floor_us
        s = max(c.floor_p2p_sharpness if coll == "send_recv" else c.floor_sharpness, 1.0)
        m = np.maximum(t, floor)
        t = m * (1.0 + (np.minimum(t, floor) / m) ** s) ** (1.0 / s)
    return {"ms": t / 1e3, "alg_us": best, "floor_us": np.full_like(n, floor), "algorithm": alg, "protocol": pro,
            "fabric": f, "gpus": p, "gpus_per_node": g, "collective": coll, "nbytes": n, "timing": timing}


def collective_time_ms(collective: str, nbytes, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                       constants: CollectiveConstants | None = None, timing: str | None = None, **consts) -> np.ndarray:
    """Prior latency (ms) over `nbytes`; keyword `consts` override CollectiveConstants fields."""
    c = constants or DEFAULT_CONSTANTS
    if consts:
        c = c.updated(**consts)
    return prior_terms(collective, nbytes, gpus, gpus_per_node, node, c, timing)["ms"]


# ---------------------------------------------------------------------------------------------------
# the engines' own all-reduce kernels (vLLM / SGLang custom all-reduce, TensorRT-LLM one/two-shot)

ENGINES = ("nccl", "vllm", "sglang", "trtllm")
#: world sizes an engine's custom all-reduce runs on (vLLM's and SGLang's `_SUPPORTED_WORLD_SIZES`); NCCL otherwise
CUSTOM_WORLD_SIZES = {"vllm": (2, 4, 6, 8), "sglang": (2, 4, 6, 8)}
#: vendors the engines' custom all-reduce is built for (CUDA, ROCm); elsewhere (Intel) they call the library's
CUSTOM_VENDORS = ("nvidia", "amd")


@dataclass(frozen=True)
class CustomAllReduceConstants:
    """One-shot: every rank reads the p-1 peers' buffers over its links and reduces locally,
    lat_us + (p-1) n / B. Two-shot: reduce-scatter then all-gather through peer memory,
    2 lat_us + 2 (p-1)/p n / B. B = the GPU's link spec (NVLink, or PCIe for two PCIe GPUs) x eff.
    Engines pick the cheaper of the two, and NCCL above their size limit (8 MiB: vLLM's and SGLang's
    default; TensorRT-LLM's tables meet NCCL from 8 MiB too), where not every pair of GPUs is linked (more
    than two GPUs on PCIe or bridged pairs), or on a world size their kernels lack (`CUSTOM_WORLD_SIZES`)."""

    lat_us: float = 4.0
    eff: float = 0.7
    max_bytes: float = 8 * 2**20

    def to_dict(self) -> dict:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "CustomAllReduceConstants":
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in d.items() if k in names})


def custom_all_reduce_ms(nbytes, gpus: int, node: NodeSpec, engine: str = "vllm",
                         constants: CollectiveConstants | None = None,
                         custom: CustomAllReduceConstants | None = None) -> np.ndarray:
    """All-reduce time (ms, graph timing) of `engine`'s implementation inside one node, over `nbytes`."""
    eng = str(engine).strip().lower()
    if eng not in ENGINES:
        raise InputError(f"--impl must be one of {', '.join(ENGINES)}; got {engine!r}")
    from hybridperf.devices.node_lookup import node_vendor
    vendor = node_vendor(node)  # "": a JSON spec's GPU, whose engines are taken to run
    if eng == "trtllm" and vendor not in ("nvidia", ""):
        raise InputError(f"TensorRT-LLM runs on NVIDIA GPUs only, not on {node.name}")
    n = as_bytes(nbytes)
    p, g = check_shape("all_reduce", gpus, None, node)
    nccl_ms = prior_terms("all_reduce", n, p, g, node, constants, "graph")["ms"]
    if eng == "nccl" or p == 1 or p != g or (node.intra_topology not in ("nvswitch", "mesh") and p > 2) \
            or p not in CUSTOM_WORLD_SIZES.get(eng, (p,)) or vendor not in (*CUSTOM_VENDORS, ""):
        return nccl_ms  # the engines need every pair linked (NVSwitch, a mesh) or just two GPUs, and their world sizes
    k = custom or CustomAllReduceConstants()
    pair = node.pair_bw_gbs or node.intra_bw_gbs
    link = {"nvswitch": node.intra_bw_gbs, "mesh": min(node.intra_bw_gbs, (p - 1) * pair)}.get(node.intra_topology, pair)
    bw = 1e3 * link * k.eff
    one = k.lat_us + (p - 1) * n / bw
    two = 2 * k.lat_us + 2 * (p - 1) / p * n / bw
    custom_ms = np.minimum(one, two) / 1e3
    return np.where(n <= k.max_bytes, np.minimum(custom_ms, nccl_ms), nccl_ms)
