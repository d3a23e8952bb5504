"""Collectives: node catalog, NCCL cost model, loaders, bundle integrity, predict-collective CLI."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.datasets.vidur_network import load_vidur_network, read_profile_csv
from hybridperf.devices import get_device, get_node
from hybridperf.devices.nodes import NODES
from hybridperf.errors import InputError, ModelBundleError
from hybridperf.priors.collectives import (
    COLLECTIVES,
    DEFAULT_CONSTANTS,
    TOPOLOGIES,
    canonical_collective,
    check_shape,
    collective_time_ms,
    custom_all_reduce_ms,
    per_host_to_domain,
    prior_terms,
)
from hybridperf.priors.nccl_tuning import NCCL_P2P_LL_THRESHOLD
from hybridperf.residual_models.collectives import FEATURE_NAMES, CollectiveModel, collective_features, default_bundle_dir

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
NETWORK = DATA / "vidur" / "data" / "profiling" / "network"
needs_data = pytest.mark.skipif(not NETWORK.is_dir(), reason=f"Vidur network profiles not found at {NETWORK}")
runner = CliRunner()
SIZES = np.unique(np.round(np.logspace(0, 10, 121)))  # 1 B .. 10 GB
HYP = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------- catalog

#: desktop units of one GPU, networked to each other (DGX Spark)
ONE_GPU_NODES = ("DGX-Spark",)


def test_every_node_device_resolves():
    for node in NODES:
        dev = get_device(node.device)
        assert dev.name == node.device, node.name
        assert node.intra_topology in TOPOLOGIES, node.name
        assert node.gpus_per_node >= 2 or node.name in ONE_GPU_NODES, node.name
        assert node.intra_bw_gbs > 0 and node.inter_bw_gbs > 0, node.name
        if node.intra_topology in ("nvlink_pairs", "mesh"):
            assert node.pair_bw_gbs > 0, node.name


def test_node_names_and_aliases_unique_and_required_present():
    keys = ["".join(ch for ch in k.lower() if ch.isalnum()) for n in NODES for k in (n.name, *n.aliases)]
    assert len(keys) == len(set(keys))
    for name in ("DGX-A100", "DGX-H100", "HGX-H200", "a100_dgx", "a100_pairwise_nvlink", "a40_pairwise_nvlink",
                 "8xL4-PCIe", "8xT4-PCIe", "4xA40-PCIe", "8xA100-PCIe", "8xH100-PCIe", "MI300X-8", "8xL40S-PCIe"):
        assert get_node(name).name == name
    assert get_node("a100_pairwise_nvlink").gpus_per_node == 4
    assert get_node("a40_pairwise_nvlink").device == "NVIDIA A40"


# ---------------------------------------------------------------------------------------------- prior

@st.composite
def configs(draw):
    node = draw(st.sampled_from(NODES))
    coll = draw(st.sampled_from(COLLECTIVES))
    g = draw(st.integers(1, node.gpus_per_node))
    nodes = draw(st.integers(1, 8))
    if coll == "send_recv" and g * nodes < 2:
        nodes = 2
    return coll, g * nodes, g, node


@HYP
@given(configs(), st.lists(st.floats(1.0, 1e10), min_size=1, max_size=20))
def test_prior_positive_finite(cfg, sizes):
    coll, p, g, node = cfg
    t = collective_time_ms(coll, np.array(sizes), p, g, node)
    assert t.shape == (len(sizes),)
    assert np.all(np.isfinite(t)) and np.all(t > 0)


@HYP
@given(configs())
@example(("all_reduce", 8, 8, get_node("DGX-A100")))  # on the steps of NCCL's channel count
@example(("all_reduce", 8, 8, get_node("DGX-B200")))
@example(("all_gather", 6, 6, get_node("DGX-H100")))
def test_prior_monotone_in_bytes(cfg):
    """Monotone while NCCL's pick stays the same; where the tuner switches (it keeps a slow protocol
    too long, as NCCL does) the time may dip, but by less than half."""
    coll, p, g, node = cfg
    terms = prior_terms(coll, SIZES, p, g, node)
    t = terms["ms"]
    pick = [f"{a}/{b}" for a, b in zip(terms["algorithm"], terms["protocol"])]
    same = np.array([a == b for a, b in zip(pick[:-1], pick[1:])])
    d = np.diff(t)
    assert np.all(d[same] >= -1e-12 * t[1:][same]), (coll, p, g, node.name)
    assert np.all(t[1:] >= 0.5 * t[:-1]), (coll, p, g, node.name)
    if p > 1:
        assert t[-1] > 10 * t[0]  # the bandwidth term dominates at 10 GB


def test_protocol_switch_monotone_like_nccl():
    """NCCL's tuner (its own latency tables, line rates): LL -> LL128 -> Simple as messages grow,
    each switch once; on 8 NVSwitch A100s LL128 runs from ~1 MB to tens of MB, as NCCL does."""
    node = get_node("DGX-A100")
    t = prior_terms("all_reduce", SIZES, 8, 8, node)
    order = [("LL", "LL128", "Simple").index(x) for x in t["protocol"]]
    assert order == sorted(order) and order[0] == 0 and order[-1] == 2
    first = {pr: SIZES[list(t["protocol"]).index(pr)] for pr in ("LL128", "Simple")}
    assert 2e5 <= first["LL128"] <= 8e6 and 8e6 <= first["Simple"] <= 2e8
    assert set(t["algorithm"]) <= {"ring", "tree"} and t["algorithm"][-1] == "ring"  # Ampere: no NVLS
    # no LL128 across PCIe: LL then Simple
    for p, g, name in [(4, 4, "a100_pairwise_nvlink"), (8, 8, "8xL4-PCIe")]:
        pr = list(prior_terms("all_reduce", SIZES, p, g, get_node(name))["protocol"])
        assert "LL128" not in pr and pr[0] == "LL" and pr[-1] == "Simple"
        assert pr == sorted(pr, key=("LL", "Simple").index)


def test_tuner_pick_ignores_fitted_constants():
    """NCCL picks from line rates, so changing an efficiency changes the cost, never the pick."""
    node = get_node("a100_dgx")
    base = prior_terms("all_reduce", SIZES, 16, 8, node)
    slow = prior_terms("all_reduce", SIZES, 16, 8, node, DEFAULT_CONSTANTS.updated(eff_net=0.2, eff_nvlink=0.3))
    assert list(base["algorithm"]) == list(slow["algorithm"]) and list(base["protocol"]) == list(slow["protocol"])
    assert slow["ms"][-1] > 2 * base["ms"][-1]
    # a NIC NCCL believes to be fast keeps LL longer than an honest one would
    honest = replace(node, nic_line_gbs=0.0)
    ll_fast = sum(x == "LL" for x in prior_terms("all_reduce", SIZES, 2, 1, node)["protocol"])
    ll_honest = sum(x == "LL" for x in prior_terms("all_reduce", SIZES, 2, 1, honest)["protocol"])
    assert ll_fast > ll_honest


def test_send_recv_protocol_threshold():
    node = get_node("DGX-A100")
    n = np.array([1024, NCCL_P2P_LL_THRESHOLD, NCCL_P2P_LL_THRESHOLD + 1, 1e8])
    for g in (1, 2):
        assert list(prior_terms("send_recv", n, 2, g, node)["protocol"]) == ["LL", "LL", "Simple", "Simple"]


def test_nvls_on_hopper_and_blackwell_nvswitch_only():
    """NVLink SHARP: a candidate on Hopper/Blackwell NVSwitch, picked for large all-reduces in one
    node (NCCL's 25 us latency keeps ring/LL for small ones); never on Ampere, PCIe or a mesh; across
    nodes it becomes NVLS-tree."""
    big = prior_terms("all_reduce", np.array([4e3, 1e9]), 8, 8, get_node("DGX-H100"))
    assert big["algorithm"][0] == "ring" and big["algorithm"][1] == "nvls"
    for name in ("DGX-A100", "8xH100-PCIe", "MI300X-8"):
        assert "nvls" not in set(prior_terms("all_reduce", SIZES, 8, 8, get_node(name))["algorithm"]), name
    multi = set(prior_terms("all_reduce", SIZES, 16, 8, get_node("DGX-B200"))["algorithm"])
    assert "nvls" not in multi and "nvls_tree" in multi
    # NCCL picks NVLS by its own rate; an all-reduce achieves the better of the ring's rate and the switch's:
    # B 2 (g - 1) / (g + 1) of bus bandwidth, B = NVLink x eff_nvlink x nvlsEfficiency (Hopper 0.85)
    node, c = get_node("DGX-H100"), DEFAULT_CONSTANTS
    n = np.array([2.0**34])  # large enough that latency and pipeline fill vanish
    for g in (2, 4, 8):
        ring = prior_terms("all_reduce", n, g, g, replace(node, arch="ampere"))
        assert ring["algorithm"][0] == "ring"
        t = collective_time_ms("all_reduce", n, g, g, node)[0]
        switch = node.intra_bw_gbs * c.eff_nvlink * 0.85 * 2 * (g - 1) / (g + 1)
        bus = 2 * (g - 1) / g * n[0] / (t * 1e-3) / 1e9
        ring_bus = 2 * (g - 1) / g * n[0] / (ring["ms"][0] * 1e-3) / 1e9
        assert bus == pytest.approx(max(switch, ring_bus), rel=0.02), g
    assert bus > 1.2 * ring_bus  # 8 ranks: the switch wins; 2 ranks: the ring
    faster = c.updated(nvls_gain=1.5)
    assert collective_time_ms("all_reduce", n, 8, 8, node, faster)[0] == pytest.approx(t / 1.5, rel=0.02)
    # NVLS's fixed latency is its own: it moves a small NVLS all-reduce, not a large one
    mid, slow_start = np.array([2.0**25]), c.updated(nvls_lat_gain=4.0)
    assert prior_terms("all_reduce", mid, 8, 8, node)["algorithm"][0] == "nvls"
    base = collective_time_ms("all_reduce", mid, 8, 8, node)[0]
    dt = collective_time_ms("all_reduce", mid, 8, 8, node, slow_start)[0] - base
    assert dt * 1e3 == pytest.approx(3 * 25.0 * c.lat_scale, rel=0.01)
    # both rates follow the fitted link efficiency
    slow_links = c.updated(eff_nvlink=c.eff_nvlink / 2)
    assert collective_time_ms("all_reduce", n, 8, 8, node, slow_links)[0] == pytest.approx(2 * t, rel=0.05)


def test_nvl72_domain_is_one_node():
    """An NVL72 rack is one NVSwitch domain: 64 GPUs in it reduce with NVLS at NVLink speed (900 GB/s
    a GPU), about twice as fast as 8 nodes of 8 over 400 Gb/s InfiniBand NICs (50 GB/s a GPU, NVLS-tree)."""
    nvl72 = replace(get_node("DGX-B200"), name="NVL72 test", gpus_per_node=72)
    one = prior_terms("all_reduce", [1e9], 64, 64, nvl72)
    assert one["algorithm"][0] == "nvls"
    assert one["ms"][0] < 0.55 * collective_time_ms("all_reduce", [1e9], 64, 8, get_node("DGX-B200"))[0]


def test_all_to_all_waits_on_each_peer():
    """An all-to-all sets up p - 1 send/recv pairs: at a small message its latency grows by a fitted step per peer
    (0.5-0.8 us in aiconfigurator's 2-8 GPU tables), so 72 ranks of an NVL72 domain wait longer than 8. The formula
    with the default constant; the shipped value is fitted (`exported_models/collectives`)."""
    nvl72 = get_node("GB200-NVL72")
    t = {p: prior_terms("all_to_all", [4096], p, p, nvl72, timing="graph")["ms"][0] for p in (2, 8, 72)}
    assert t[2] < t[8] < t[72]
    step = (t[72] - t[8]) * 1e3 / 64  # us per peer
    assert step == pytest.approx(DEFAULT_CONSTANTS.lat_a2a_peer_us, rel=0.05)


def test_all_reduce_ring_has_its_own_rank_loss():
    """On an NVSwitch an all-reduce's ring loses less bandwidth at few ranks than an all-gather's
    (aiconfigurator's A100 and B200 tables: 2-GPU all-reduce 1.2-1.3x the all-gather's bus bandwidth);
    elsewhere the two share the rings' rate."""
    c = DEFAULT_CONSTANTS.updated(rank_loss=0.7, rank_loss_allreduce=0.35, eff_allreduce=1.0)
    n = np.array([1e9])

    def bus(coll, node, p):
        f = 2 * (p - 1) / p if coll == "all_reduce" else (p - 1) / p
        return f * n[0] / collective_time_ms(coll, n, p, p, get_node(node), c, "graph")[0]

    assert bus("all_reduce", "DGX-A100", 2) > 1.15 * bus("all_gather", "DGX-A100", 2)
    assert bus("all_reduce", "DGX-A100", 8) == pytest.approx(bus("all_gather", "DGX-A100", 8), rel=0.03)
    assert bus("all_reduce", "8xH100-PCIe", 2) == pytest.approx(bus("all_gather", "8xH100-PCIe", 2), rel=0.03)


def test_pat_with_one_gpu_per_node():
    t = prior_terms("all_gather", np.array([1e4, 1e5]), 8, 1, get_node("DGX-H100"))
    assert "pat" in set(t["algorithm"]) or "ring" in set(t["algorithm"])
    assert "pat" not in set(prior_terms("all_gather", SIZES, 8, 8, get_node("DGX-H100"))["algorithm"])


def test_timing_graph_vs_call():
    """graph: small messages cost NCCL's kernel latency (5-30 us); call: never below the floor."""
    node = get_node("DGX-A100")
    g = collective_time_ms("all_reduce", [4096], 8, 8, node, timing="graph")[0] * 1e3
    c = collective_time_ms("all_reduce", [4096], 8, 8, node, timing="call")[0] * 1e3
    assert 5 <= g <= 40 and c >= DEFAULT_CONSTANTS.floor_us and c > g
    big_g = collective_time_ms("all_reduce", [1e9], 8, 8, node, timing="graph")[0]
    big_c = collective_time_ms("all_reduce", [1e9], 8, 8, node, timing="call")[0]
    assert big_c == pytest.approx(big_g, rel=0.01)
    assert prior_terms("all_reduce", [1e6], 8, 8, node)["timing"] == "call"  # Vidur's semantics by default
    with pytest.raises(InputError):
        collective_time_ms("all_reduce", [4096], 8, 8, node, timing="wall")


def test_custom_all_reduce():
    node = get_node("DGX-H100")
    n = np.array([4096.0, 65536, 1 << 20, 64 << 20])
    nccl = custom_all_reduce_ms(n, 8, node, "nccl")
    for eng in ("vllm", "sglang", "trtllm"):
        t = custom_all_reduce_ms(n, 8, node, eng)
        assert np.all(t <= nccl + 1e-12) and t[0] < 0.5 * nccl[0] and t[-1] == pytest.approx(nccl[-1])
    # PCIe box: the engines fall back to NCCL beyond two GPUs
    l40s = get_node("8xL40S-PCIe")
    np.testing.assert_allclose(custom_all_reduce_ms(n, 8, l40s, "vllm"), custom_all_reduce_ms(n, 8, l40s, "nccl"))
    assert custom_all_reduce_ms(n, 2, l40s, "vllm")[0] < custom_all_reduce_ms(n, 2, l40s, "nccl")[0]
    with pytest.raises(InputError):
        custom_all_reduce_ms(n, 8, node, "deepspeed")
    # vLLM's and SGLang's kernels exist for 2, 4, 6 and 8 ranks: TP16 in an NVL72 domain is NCCL's
    nvl72 = get_node("gb200")
    np.testing.assert_allclose(custom_all_reduce_ms(n, 16, nvl72, "vllm"), custom_all_reduce_ms(n, 16, nvl72, "nccl"))
    assert custom_all_reduce_ms(n, 8, nvl72, "vllm")[0] < custom_all_reduce_ms(n, 8, nvl72, "nccl")[0]


def test_topology_aware_bandwidth():
    big = np.array([1e9])
    pairs = get_node("a100_pairwise_nvlink")
    # 2 GPUs of a pair use the bridge; 4 GPUs must cross PCIe between the pairs
    bus2 = 1e9 / collective_time_ms("all_reduce", big, 2, 2, pairs)[0]
    bus4 = 1.5e9 / collective_time_ms("all_reduce", big, 4, 4, pairs)[0]
    assert bus2 > 4 * bus4
    # NVSwitch: bus bandwidth grows with the GPUs that join (rank_loss), by well under 2x
    dgx = get_node("DGX-A100")
    b = [2 * (p - 1) / p * 1e9 / collective_time_ms("all_reduce", big, p, p, dgx)[0] for p in (2, 4, 8)]
    assert b[0] < b[1] < b[2] < 1.5 * b[0]
    # crossing nodes costs: a little with 8x HDR per DGX, a lot on Vidur's one-port-per-node network
    assert collective_time_ms("all_reduce", big, 16, 8, dgx)[0] > 1.1 * collective_time_ms("all_reduce", big, 8, 8, dgx)[0]
    vd = get_node("a100_dgx")
    assert collective_time_ms("all_reduce", big, 16, 8, vd)[0] > 5 * collective_time_ms("all_reduce", big, 8, 8, vd)[0]
    # send/recv: intra-node NVLink beats the network
    assert collective_time_ms("send_recv", big, 2, 1, dgx)[0] > 5 * collective_time_ms("send_recv", big, 2, 2, dgx)[0]
    # PCIe box: a ring over both sockets is slower than one within a socket
    l4 = get_node("8xL4-PCIe")
    assert collective_time_ms("all_reduce", big, 8, 8, l4)[0] > 1.5 * collective_time_ms("all_reduce", big, 4, 4, l4)[0]


def test_pcie_gpu_reaches_another_node_no_faster_than_its_pcie_link():
    """GPUDirect RDMA reads the GPU over its own PCIe link: a PCIe box's 400 Gb/s NIC per GPU (50 GB/s) cannot
    carry more than the GPU's 32 GB/s Gen4 link, so a send/recv across nodes is not faster than a PCIe peer's."""
    big = np.array([64 * 2**20])
    l40s = get_node("8xL40S-PCIe")
    assert l40s.inter_bw_gbs > l40s.intra_bw_gbs
    across, inside = (collective_time_ms("send_recv", big, 2, g, l40s, timing="graph")[0] for g in (1, 2))
    assert across >= 0.99 * inside



def test_collective_semantics():
    """NCCL tests' sizes: all_gather's n is the gathered output, so on a ring all_gather(n) and
    reduce_scatter(n) each move (p-1)/p n and together make all_reduce(n)."""
    node = get_node("DGX-A100")
    n = np.array([2e9])
    ag = collective_time_ms("all_gather", n, 8, 8, node)[0]
    rs = collective_time_ms("reduce_scatter", n, 8, 8, node)[0]
    ar = collective_time_ms("all_reduce", n, 8, 8, node)[0]
    assert ag == pytest.approx(rs)
    assert ar == pytest.approx(ag + rs, rel=0.05)
    bus = 7 / 8 * n[0] / (ag * 1e-3) / 1e9  # nccl-tests' bus bandwidth, GB/s
    assert 0.5 * 300 < bus < 300
    a2a = collective_time_ms("all_to_all", n, 8, 8, node)[0]
    assert a2a < ar
    slow = collective_time_ms("all_reduce", n, 8, 8, node, eff_nvlink=DEFAULT_CONSTANTS.eff_nvlink / 2)[0]
    assert slow == pytest.approx(2 * ar, rel=0.05)


def test_input_validation():
    node = get_node("DGX-A100")
    assert canonical_collective("AllReduce") == "all_reduce" and canonical_collective("all-gather") == "all_gather"
    with pytest.raises(InputError):
        canonical_collective("broadcast_everything")
    for p, g in [(4, 16), (0, 1), (6, 4), (16, 16)]:
        with pytest.raises(InputError):
            check_shape("all_reduce", p, g, node)
    assert check_shape("all_reduce", 4, 8, node) == (4, 4)  # the node's size given for fewer ranks: one node
    with pytest.raises(InputError):
        check_shape("send_recv", 1, 1, node)
    for bad in ([0], [-5], [np.nan], [np.inf]):
        with pytest.raises(InputError):
            collective_time_ms("all_reduce", bad, 8, 8, node)


def test_features_shape():
    node = get_node("a100_dgx")
    X = collective_features(node, prior_terms("all_reduce", SIZES[:10], 16, 8, node))
    assert X.shape == (10, len(FEATURE_NAMES)) and np.all(np.isfinite(X))


# ---------------------------------------------------------------------------------------------- bundle

def test_shipped_bundle_loads_and_predicts():
    model = CollectiveModel.load()
    assert (default_bundle_dir() / "manifest.json").is_file()
    from hybridperf.residual_models.bundle import read_manifest

    man = read_manifest(default_bundle_dir())
    assert man["kind"] == "collectives" and "constants" in man and "interval" in man
    assert {"digest_sha256", "systems"} <= set(man["training_data"])
    out = model.predict("all_reduce", [1e6, 1e8], 16, 8, get_node("DGX-H100"))
    assert np.all(out["lo_ms"] <= out["ms"]) and np.all(out["ms"] <= out["hi_ms"]) and np.all(out["lo_ms"] > 0)


def _flip(path: Path, at: float = 0.5) -> None:
    b = bytearray(path.read_bytes())
    i = int(len(b) * at)
    b[i] ^= 0x01
    path.write_bytes(bytes(b))


def test_shipped_bundle_tamper_detected(tmp_path):
    src = default_bundle_dir()
    for f in sorted(src.iterdir()):
        if f.name != "manifest.json":
            continue
        copy = tmp_path / f.name
        shutil.copytree(src, copy)
        CollectiveModel.load(copy)  # intact copy loads
        _flip(copy / f.name)
        with pytest.raises(ModelBundleError):
            CollectiveModel.load(copy)


def test_bundle_with_residual_roundtrip_and_tamper(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from hybridperf.training.collectives import fit_residual, write_bundle

    node = get_node("DGX-A100")
    sizes = np.logspace(3, 9, 200)
    X = collective_features(node, prior_terms("all_reduce", sizes, 8, 8, node))
    y = 0.1 * np.sin(np.log(sizes))
    est = fit_residual(X, y, kind="ridge")
    interval = {"q_lo": -0.2, "q_hi": 0.3, "strata": {"send_recv": {"q_lo": -0.5, "q_hi": 0.5}}}
    d = write_bundle(tmp_path / "b", DEFAULT_CONSTANTS, interval, est, data_digest="synthetic", trained_on=["x"])
    model = CollectiveModel.load(d)
    assert model.bundle is not None
    out = model.predict("all_reduce", sizes, 8, 8, node)
    prior = collective_time_ms("all_reduce", sizes, 8, 8, node)
    np.testing.assert_allclose(np.log(out["ms"] / prior), est.predict(X), atol=1e-4)
    np.testing.assert_allclose(out["hi_ms"] / out["ms"], np.exp(0.3), rtol=1e-9)
    sr = model.predict("send_recv", sizes[:3], 2, 2, node)
    np.testing.assert_allclose(sr["lo_ms"] / sr["ms"], np.exp(-0.5), rtol=1e-9)
    _flip(d / "residual.onnx")
    with pytest.raises(ModelBundleError, match="sha256"):
        CollectiveModel.load(d)


def test_missing_bundle_is_an_error(tmp_path):
    with pytest.raises(ModelBundleError):
        CollectiveModel.load(tmp_path)


# ---------------------------------------------------------------------------------------------- loader

HEADER = ("time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,"
          "time_stats.all_reduce.median,time_stats.all_reduce.std,rank,num_workers,size,collective,"
          "devices_per_node,max_devices_per_node")


def test_loader_drops_bad_rows_with_file_and_line(tmp_path):
    d = tmp_path / "network" / "toy"
    d.mkdir(parents=True)
    rows = [
        ",".join(["0", HEADER]),
        "0,0.01,0.02,0.015,0.014,0.001,0,2,2048,all_reduce,2,8",
        "1,0.01,0.02,0.015,,0.001,0,2,4096,all_reduce,2,8",  # NaN median: line 3
        "2,0.01,0.02,0.015,-1,0.001,0,2,8192,all_reduce,2,8",  # negative: line 4
        "3,0.01,0.02,0.015,0.05,0.001,0,16,8192,all_reduce,8,8",
    ]
    (d / "all_reduce.csv").write_text("\n".join(rows) + "\n")
    df = load_vidur_network(tmp_path)
    assert len(df) == 2 and list(df.nodes) == [1, 2]
    dropped = df.attrs["dropped"]
    assert len(dropped) == 2 and dropped[0].endswith("all_reduce.csv:3: time_stats.all_reduce.median is NaN (need > 0)")
    assert ":4:" in dropped[1]
    assert set(df.columns) >= {"system", "collective", "nbytes", "gpus", "gpus_per_node", "latency_ms", "min_ms",
                               "mean_ms", "std_ms"}


def test_loader_missing_column(tmp_path):
    p = tmp_path / "sys" / "send_recv.csv"
    p.parent.mkdir()
    p.write_text(",num_workers,size,devices_per_node\n0,2,2048,1\n")
    with pytest.raises(InputError, match="time_stats.send_recv.median"):
        read_profile_csv(p)
    with pytest.raises(InputError):
        load_vidur_network(tmp_path / "nowhere")


@needs_data
def test_loader_on_vidur_profiles():
    df = load_vidur_network(DATA)
    assert set(df.system) == {"a100_dgx", "a100_pairwise_nvlink", "a40_pairwise_nvlink"}
    assert set(df.collective) == {"all_reduce", "send_recv"}
    assert df.attrs["dropped"] == [] and (df.latency_ms > 0).all()
    dgx = df[(df.system == "a100_dgx") & (df.collective == "all_reduce")]
    assert {(p, g) for p, g in zip(dgx.gpus, dgx.gpus_per_node)} == {(2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8)}


@needs_data
def test_shipped_model_reasonable_on_nvlink_all_reduce():
    df = load_vidur_network(DATA, systems=["a100_dgx"], collectives=["all_reduce"])
    model = CollectiveModel.load()
    for (p, g), grp in df[df.gpus == df.gpus_per_node].groupby(["gpus", "gpus_per_node"]):
        big = grp[grp.nbytes >= 1 << 20]
        pred = model.predict("all_reduce", big.nbytes.to_numpy(), p, g, get_node("a100_dgx"))["ms"]
        assert np.mean(np.abs(pred / big.latency_ms.to_numpy() - 1)) < 0.25, (p, g)


# ---------------------------------------------------------------------------------------------- CLI

def _cli(*args):
    return runner.invoke(app, ["predict-collective", *map(str, args)])


def test_cli_json_last_line():
    r = _cli("--collective", "all_reduce", "--bytes", 67108864, "--gpus", 16, "--gpus-per-node", 8,
             "--device", "DGX-A100", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) == {"ms", "lo_ms", "hi_ms"}
    assert 0 < out["lo_ms"] <= out["ms"] <= out["hi_ms"]


def test_cli_human_and_gpu_name_default_node():
    r = _cli("--collective", "send_recv", "--bytes", "1MiB", "--gpus", 2, "--gpus-per-node", 2,
             "--device", "a100_pairwise_nvlink")
    assert r.exit_code == 0 and "ms" in r.stdout and "send_recv" in r.stdout
    r = _cli("--collective", "all_gather", "--bytes", "1e6", "--gpus", 8, "--device", "NVIDIA L4", "--json")
    assert r.exit_code == 0, r.output
    assert "not a node" in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ms"] > 0


@pytest.mark.parametrize("args", [
    ("--collective", "broadcastx", "--bytes", 1024, "--gpus", 8, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", 0, "--gpus", 8, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", "-3", "--gpus", 8, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", "lots", "--gpus", 8, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", 1024, "--gpus", 0, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", 1024, "--gpus", 4, "--gpus-per-node", 12, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", 1024, "--gpus", 16, "--gpus-per-node", 16, "--device", "DGX-A100"),
    ("--collective", "all_reduce", "--bytes", 1024, "--gpus", 8, "--device", "No Such Node"),
    ("--collective", "all_reduce", "--bytes", 1024, "--gpus", 100_000_000, "--device", "DGX-A100"),
])
def test_cli_bad_input_exits_nonzero(args):
    r = _cli(*args)
    assert r.exit_code != 0


def test_cli_one_line_error_and_no_training_imports():
    code = (
        "import sys\n"
        "from hybridperf.cli.app import main\n"
        "sys.argv = ['hybridperf', 'predict-collective', '--collective', 'all_reduce', '--bytes', '4096',"
        " '--gpus', '16', '--gpus-per-node', '8', '--device', 'DGX-H100', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('sklearn', 'xgboost', 'torch', 'scipy', 'skl2onnx') if m in sys.modules))\n"
    )
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "hybridperf", "predict-collective", "--collective", "all_reduce",
                          "--bytes", "0", "--gpus", "8", "--device", "DGX-A100", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error:")


def test_fittable_constants_follow_nccl_picks():
    """nvls_gain is fitted only where NCCL's tuner runs NVLS on the training rows; floors only on
    call-timed rows; the all-reduce ring's own constants only on one NVSwitch node's all-reduce rows
    (its rank loss below 8 ranks)."""
    pytest.importorskip("scipy")
    import pandas as pd

    from hybridperf.training.collectives import fittable

    def rows(system, p, g, timing="graph"):
        n = np.logspace(11, 28, 18, base=2).astype(np.int64)
        return pd.DataFrame({"system": system, "collective": "all_reduce", "nbytes": n, "gpus": p,
                             "gpus_per_node": g, "latency_ms": 1.0, "timing": timing})

    assert {"nvls_gain", "nvls_lat_gain"} <= set(fittable(rows("b200_sxm", 8, 8)))
    assert not {"nvls_gain", "nvls_lat_gain"} & set(fittable(rows("a100_sxm", 8, 8)))
    # across nodes (NVLS-tree) the switch's rate is used, its one-node latency is not
    tree = set(fittable(rows("b200_sxm", 16, 8)))
    assert "nvls_gain" in tree and "nvls_lat_gain" not in tree
    # an NVLS all-gather runs at the ring's rate: nothing of NVLS to fit
    assert "nvls_gain" not in fittable(rows("b200_sxm", 8, 8).assign(collective="all_gather"))
    assert {"eff_allreduce", "rank_loss_allreduce"} <= set(fittable(rows("a100_sxm", 4, 4)))
    eight = set(fittable(rows("a100_sxm", 8, 8)))
    assert "eff_allreduce" in eight and "rank_loss_allreduce" not in eight
    ring_ar = {"eff_allreduce", "rank_loss_allreduce"}
    assert not ring_ar & set(fittable(rows("a100_dgx", 16, 8, "call")))
    assert not ring_ar & set(fittable(rows("l40s", 4, 4)))
    assert not ring_ar & set(fittable(rows("a100_sxm", 4, 4).assign(collective="all_gather")))
    assert "floor_us" not in fittable(rows("a100_sxm", 8, 8)) and "launch_us" in fittable(rows("a100_sxm", 8, 8))
    # the all-to-all's latency per peer is fitted where the peers vary, not on a pair alone
    assert "lat_a2a_peer_us" in fittable(rows("a100_sxm", 8, 8).assign(collective="all_to_all"))
    assert "lat_a2a_peer_us" not in fittable(rows("a100_sxm", 2, 2).assign(collective="all_to_all"))
    assert "floor_us" in fittable(rows("a100_dgx", 16, 8, "call")) and "eff_net" in fittable(rows("a100_dgx", 16, 8, "call"))


# ---------------------------------------------------------------------------------------------- aiconfigurator

AIC = DATA / "aiconfigurator" / "systems" / "data"
needs_aic = pytest.mark.skipif(not AIC.is_dir(), reason=f"aiconfigurator tables not found at {AIC}")


def test_aiconfigurator_loader_on_synthetic_table(tmp_path):
    import pandas as pd

    from hybridperf.datasets.aiconfigurator_comm import load_aiconfigurator_comm

    d = tmp_path / "systems" / "data" / "toy" / "comm" / "nccl" / "2.27.3"
    d.mkdir(parents=True)
    pd.DataFrame({"op_name": ["all_gather", "alltoall", "all_reduce"], "nccl_dtype": ["half", "half", "int8"],
                  "num_gpus": [8, 4, 2], "message_size": [1024, 1024, 1024], "latency": [0.01, 0.02, -1.0]}
                 ).to_parquet(d / "nccl_perf.parquet")
    df = load_aiconfigurator_comm(tmp_path, ["toy"])
    assert list(df.collective) == ["all_gather", "all_to_all"] and list(df.nbytes) == [2048, 2048]  # elements x 2 B
    assert set(df.timing) == {"graph"} and list(df.gpus_per_node) == [8, 4]
    with pytest.raises(InputError):
        load_aiconfigurator_comm(tmp_path, ["missing"])


@needs_aic
def test_aiconfigurator_tables_count_the_gathered_output():
    """A 512 MiB all_gather on 8 A100s at NVLink's ~200-240 GB/s bus bandwidth is only possible if
    message_size counts the whole gathered buffer (NCCL tests semantics: docs/predict-collective.md)."""
    from hybridperf.datasets.aiconfigurator_comm import load_aiconfigurator_comm

    df = load_aiconfigurator_comm(DATA, ["a100_sxm"])
    r = df[(df.collective == "all_gather") & (df.gpus == 8)].sort_values("nbytes").iloc[-1]
    nb, ms = float(r["nbytes"]), float(r["latency_ms"])
    bus = 7 / 8 * nb / (ms * 1e-3) / 1e9
    assert 150 < bus < 300
    pred = CollectiveModel.load().predict("all_gather", [nb], 8, 8, get_node("DGX-A100"))["ms"][0]
    assert abs(pred / ms - 1) < 0.25
    custom = load_aiconfigurator_comm(DATA, ["a100_sxm"], custom=True)
    assert {"vllm", "sglang", "trtllm"} <= set(custom.impl) and set(custom.timing) == {"graph", "eager"}


def test_cli_timing_and_impl():
    r = _cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", "b200_sxm", "--timing", "graph",
             "--impl", "vllm", "--json")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout.strip().splitlines()[-1])
    last = lambda r: json.loads(r.stdout.strip().splitlines()[-1])  # noqa: E731
    n = last(_cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", "b200_sxm", "--json"))
    assert 0 < v["lo_ms"] <= v["ms"] <= v["hi_ms"] and v["ms"] < n["ms"]
    # Vidur's profiled systems mean per-call timing, every other node back-to-back calls (nccl-tests, aiconfigurator)
    call = last(_cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", "DGX-B200",
                     "--timing", "call", "--json"))
    graph = last(_cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", "DGX-B200", "--json"))
    assert call["ms"] > n["ms"] and graph == n
    vidur = [last(_cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", "a100_dgx", *t,
                       "--json")) for t in ((), ("--timing", "call"))]
    assert vidur[0] == vidur[1]
    # a --json caller is told on stderr when auto chose call timing (graph timing needs no note)
    said = [_cli("--collective", "all_reduce", "--bytes", 65536, "--gpus", 8, "--device", d, "--json").stderr
            for d in ("a100_dgx", "DGX-B200", "b200_sxm")]
    assert "call timing" in said[0] and "--timing graph" in said[0] and "timing" not in said[1] + said[2]
    for bad in (("--impl", "vllm", "--gpus", 16), ("--impl", "nope", "--gpus", 8), ("--timing", "wall", "--gpus", 8)):
        r = _cli("--collective", "all_reduce", "--bytes", 65536, "--device", "DGX-B200", *bad)
        assert r.exit_code != 0
    r = _cli("--collective", "all_to_all", "--bytes", "1MiB", "--gpus", 8, "--device", "DGX-H100", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout.strip().splitlines()[-1])["ms"] > 0


def test_system_ids():
    # aiconfigurator names its GB200 system gb200_sxm (4-GPU trays of one NVL72 NVLink domain)
    assert get_device("gb200_sxm").name == "NVIDIA GB200" and get_node("gb200_sxm").gpus_per_node == 72
    # the H800's NVSwitch board: the H100's but for its NVLink (400 GB/s both ways)
    assert get_node("h800_sxm").device == "NVIDIA H800" and get_node("h800_sxm").intra_bw_gbs == 200.0


def test_interval_strata_by_fabric(tmp_path):
    """The interval of an NVSwitch node and of a PCIe box come from their own strata; a missing
    stratum falls back to the coarser send_recv / collective one."""
    pytest.importorskip("skl2onnx")
    from hybridperf.training.collectives import write_bundle

    interval = {"q_lo": -0.9, "q_hi": 0.9, "strata": {"collective:nvswitch": {"q_lo": -0.1, "q_hi": 0.2},
                                                       "collective:other": {"q_lo": -0.5, "q_hi": 0.6},
                                                       "send_recv": {"q_lo": -0.3, "q_hi": 0.4}}}
    model = CollectiveModel.load(write_bundle(tmp_path / "b", DEFAULT_CONSTANTS, interval))
    nv = model.predict("all_reduce", [1e6], 8, 8, get_node("DGX-H100"))
    pc = model.predict("all_reduce", [1e6], 8, 8, get_node("8xL40S-PCIe"))
    sr = model.predict("send_recv", [1e6], 2, 2, get_node("DGX-H100"))
    assert nv["hi_ms"][0] / nv["ms"][0] == pytest.approx(np.exp(0.2))
    assert pc["lo_ms"][0] / pc["ms"][0] == pytest.approx(np.exp(-0.5))
    assert sr["hi_ms"][0] / sr["ms"][0] == pytest.approx(np.exp(0.4))


def test_intervals_widen_once_outside_the_training_range(tmp_path):
    """Below the smallest measured size, or on more GPUs than any fit saw, the band widens by `ood_widen` once
    (both at once: still once); above the largest measured size it does not (a bandwidth-bound time)."""
    pytest.importorskip("skl2onnx")
    from hybridperf.training.collectives import write_bundle

    interval = {"q_lo": -0.2, "q_hi": 0.4, "ood_widen": 1.5,
                "training_range": {"topologies": ["nvswitch"], "max_gpus": 8, "min_bytes": 4096, "max_bytes": 2.0**29,
                                   "max_arch": 3}}
    model = CollectiveModel.load(write_bundle(tmp_path / "b", DEFAULT_CONSTANTS, interval))
    node = get_node("DGX-H100")

    def half_width(n, gpus, per_node):
        r = model.predict("all_reduce", [n], gpus, per_node, node)
        return np.log(r["hi_ms"][0] / r["ms"][0])

    assert half_width(2.0**20, 8, 8) == pytest.approx(0.4)
    assert half_width(2.0**32, 8, 8) == pytest.approx(0.4)
    assert half_width(1024, 8, 8) == pytest.approx(0.6)
    assert half_width(1024, 16, 8) == pytest.approx(0.6)


def test_nvswitch_bus_bandwidth_grows_with_ranks_up_to_eight():
    """rank_loss: 2 ranks on an NVSwitch reach (1 - a/2) / (1 - a/8) of the 8-rank rate; 72 ranks no more than 8."""
    from dataclasses import replace

    from hybridperf.devices import get_node
    from hybridperf.priors.collectives import DEFAULT_CONSTANTS, fabric

    node = get_node("DGX-H100")
    c = DEFAULT_CONSTANTS
    bw = {g: fabric(node, g, g, c).intra_bw for g in (2, 4, 8)}
    a = c.rank_loss
    assert bw[2] / bw[8] == pytest.approx((1 - a / 2) / (1 - a / 8))
    assert bw[2] < bw[4] < bw[8]
    wide = replace(node, gpus_per_node=72)
    assert fabric(wide, 72, 72, c).intra_bw == pytest.approx(bw[8])
    assert fabric(node, 2, 2, replace(c, rank_loss=0.0)).intra_bw == pytest.approx(bw[8])


def test_small_ring_messages_run_on_the_channels_nccl_gives_them():
    """NCCL runs an LL ring on one channel per 512 threads x 8 B x nRanks (64 KB on 8 ranks: 2, 256 KB: 8), each
    at one channel's rate: the bandwidth term of an 8-rank all-reduce is the same from 32 KB to 256 KB, a
    plateau well above the tuner's LL rate, while the tuner itself still prices all channels."""
    from hybridperf.priors.collectives import TUNER_CONSTANTS, fabric, nccl_model_us
    from hybridperf.priors.nccl_tuning import active_channels

    assert list(active_channels(np.array([4096.0, 65536, 262144, 2**26]), "LL", 8)) == [1, 2, 8, 2048]
    node = get_node("DGX-A100")
    n = np.array([4096.0, 65536, 262144])
    t = prior_terms("all_reduce", n, 8, 8, node, DEFAULT_CONSTANTS, "graph")
    assert set(t["algorithm"]) == {"ring"} and set(t["protocol"]) == {"LL"}
    us = t["alg_us"]
    assert us[2] == pytest.approx(us[1], rel=0.01)  # plateau
    f = t["fabric"]
    plateau = 2 * 7 / 8 * 65536 / (1e3 * 2 * f.channel_bw * 0.5)
    assert us[1] - us[0] == pytest.approx(plateau - 2 * 7 / 8 * 4096 / (1e3 * f.channel_bw * 0.5), rel=0.05)
    tuner = nccl_model_us("all_reduce", "ring", "LL", n, fabric(node, 8, 8, TUNER_CONSTANTS), TUNER_CONSTANTS)
    assert tuner[2] - tuner[1] > 2.0  # NCCL's own model: all channels at every size


def test_trays_of_an_nvl72_rack_share_its_nvlink_domain():
    """On GB200-NVL72, 4 GPUs per host tray: `predict-collective` prices 8 or 72 ranks at 4 per host as one
    NVLink domain, 144 as two racks, 6 as one (a tray and a half), and refuses 76; 16 ranks named 8 per host (no
    tray has 8) are still one rack, not two 8-GPU islands on InfiniBand; the library's gpus_per_node keeps meaning
    ranks per domain (a send/recv between two racks stays on InfiniBand); an 8-GPU DGX is untouched."""
    rack, dgx = get_node("gb200"), get_node("DGX-H100")
    assert [per_host_to_domain(p, 4, rack) for p in (4, 8, 72, 144)] == [4, 8, 72, 72]
    assert per_host_to_domain(16, 8, dgx) == 8 and per_host_to_domain(16, 8, rack) == 16
    assert per_host_to_domain(144, 8, rack) == 72
    with pytest.raises(InputError, match="part of another"):
        per_host_to_domain(76, 4, rack)
    with pytest.raises(InputError, match="more GPUs than a .* domain holds"):  # not silently 8 ranks of one domain
        per_host_to_domain(8, 80, rack)
    # ranks beyond one rack come in whole racks: fewer per host would not help, so the error does not suggest it
    with pytest.raises(InputError, match=r"use a multiple of 72$"):
        check_shape("all_reduce", 76, None, rack)
    with pytest.raises(InputError, match="or --gpus-per-node to place fewer"):
        check_shape("all_reduce", 12, None, dgx)
    assert check_shape("all_reduce", 8, 4, rack) == (8, 4)
    assert collective_time_ms("send_recv", [64 << 20], 2, 1, rack)[0] > \
        5 * collective_time_ms("send_recv", [64 << 20], 2, 2, rack)[0]
    ms = [json.loads(_cli("--collective", "all_reduce", "--bytes", "64MiB", "--gpus", 8, "--gpus-per-node", g,
                          "--device", "gb200", "--json").stdout.strip().splitlines()[-1])["ms"] for g in (4, 8)]
    assert ms[0] == ms[1]
    # 6 ranks on two trays (4 + 2) are one domain as 6 named 8 per host are: the CLI refuses neither, both one price
    # (the library's gpus_per_node counts ranks per domain, and stays strict)
    assert per_host_to_domain(6, 4, rack) == 6
    with pytest.raises(InputError, match="multiple of --gpus-per-node"):
        check_shape("all_reduce", 6, 4, rack)
    six = [json.loads(_cli("--collective", "all_reduce", "--bytes", "64MiB", "--gpus", 6, "--gpus-per-node", g,
                           "--device", "gb200", "--json").stdout.strip().splitlines()[-1])["ms"] for g in (4, 8)]
    assert six[0] == six[1]
    with pytest.raises(InputError, match="multiple of --gpus-per-node"):
        check_shape("all_reduce", 6, 4, dgx)  # an 8-GPU node's hosts are its nodes: 6 at 4 a node is no placement
    bad = _cli("--collective", "all_reduce", "--bytes", "64MiB", "--gpus", 76, "--gpus-per-node", 4, "--device", "gb200")
    assert bad.exit_code != 0 and "part of another" in str(bad.exception)


def test_pipeline_fill_slows_messages_below_fill_bytes_only():
    """The first `fill_bytes` of a message move at 1 / (1 + fill_share) of the rate: a message well under
    fill_bytes takes about (1 + share) x its transfer time, one far beyond it nearly the plain time."""
    node = get_node("DGX-A100")
    base = replace(DEFAULT_CONSTANTS, fill_share=0.001, lat_scale=0.3, launch_us=0.1)
    slow = replace(base, fill_share=0.5, fill_bytes=float(2**26))
    sizes = np.array([2.0**24, 2.0**34])
    t0 = collective_time_ms("all_gather", sizes, 8, 8, node, base, "graph")
    t1 = collective_time_ms("all_gather", sizes, 8, 8, node, slow, "graph")
    assert 1.3 < t1[0] / t0[0] < 1.5
    assert 1.0 < t1[1] / t0[1] < 1.01


def test_send_recv_across_nodes_or_bridged_pairs_runs_at_the_slowest_link():
    """nccl-tests' send/recv passes rank i to i + 1: with ranks on two nodes one pair crosses the network,
    so 16 ranks at 8 per node take a 2-node pair's time, not an NVLink pair's; on bridged pairs 4 ranks pass
    rank 1 -> 2 over PCIe."""
    dgx, pairs = get_node("DGX-H100"), get_node("a100_pairwise_nvlink")
    n = [1 << 30]
    across = collective_time_ms("send_recv", n, 16, 8, dgx)[0]
    assert across == pytest.approx(collective_time_ms("send_recv", n, 2, 1, dgx)[0])
    assert across > 5 * collective_time_ms("send_recv", n, 8, 8, dgx)[0]
    assert collective_time_ms("send_recv", n, 4, 4, pairs)[0] > 3 * collective_time_ms("send_recv", n, 2, 2, pairs)[0]


def test_send_recv_has_its_own_latency_and_never_outruns_its_link():
    """send/recv's latency is `lat_p2p_us` (NCCL's p2p path, no ring step); the fit may not credit a GPU with
    sending faster than its links' per-direction rate, so the shipped bundle's large messages stay under it."""
    from hybridperf.training.collectives import BOUNDS, fittable

    assert max(BOUNDS[k][1] for k in ("eff_nvlink_p2p", "eff_pcie_p2p", "eff_net_p2p")) <= 1.0
    node = get_node("DGX-H100")
    c = replace(DEFAULT_CONSTANTS, fill_share=0.0)
    for lat in (3.0, 12.0):
        t = prior_terms("send_recv", np.array([64.0]), 2, 2, node, constants=replace(c, lat_p2p_us=lat), timing="graph")
        assert t["ms"][0] * 1e3 == pytest.approx(lat + c.launch_us, rel=0.05)
    import pandas as pd

    rows = pd.DataFrame({"system": "a100_dgx", "collective": "send_recv", "nbytes": [4096, 2**26], "gpus": 2,
                         "gpus_per_node": 2, "latency_ms": 1.0, "timing": "call"})
    # fitted only where no call-timing floor hides it (per call it traded off against the floor's sharpness)
    assert "lat_p2p_us" in fittable(rows.assign(timing="graph")) and "lat_p2p_us" not in fittable(rows)
    assert "lat_p2p_us" not in fittable(rows.assign(collective="all_gather", timing="graph"))
    model = CollectiveModel.load()
    for name in ("DGX-A100", "DGX-H100", "b200_sxm"):
        link = get_node(name).intra_bw_gbs
        ms = model.predict("send_recv", [2.0**30], 2, 2, get_node(name))["ms"][0]
        assert 2.0**30 / (ms * 1e-3) / 1e9 <= link


def test_tensorrt_llm_all_reduce_is_refused_off_nvidia():
    """TensorRT-LLM runs on NVIDIA GPUs only: its all-reduce on an MI300X node is an error, vLLM's is priced."""
    mi = get_node("MI300X-8")
    with pytest.raises(InputError, match="NVIDIA GPUs only"):
        custom_all_reduce_ms([1 << 20], 8, mi, "trtllm")
    assert custom_all_reduce_ms([1 << 20], 8, mi, "vllm")[0] > 0
    # vLLM's and SGLang's kernels are CUDA and ROCm ones: on Intel's B60 box they all-reduce through the library
    b60 = get_node("8xB60-PCIe")
    for engine in ("vllm", "sglang"):
        assert custom_all_reduce_ms([1 << 16], 2, b60, engine)[0] == custom_all_reduce_ms([1 << 16], 2, b60, "nccl")[0]
    h100 = get_node("DGX-H100")
    assert custom_all_reduce_ms([1 << 16], 2, h100, "vllm")[0] < custom_all_reduce_ms([1 << 16], 2, h100, "nccl")[0]


def test_bytes_take_decimal_and_binary_units_up_to_pebibytes():
    from hybridperf.cli.collective import parse_bytes

    assert parse_bytes("1TB") == 1e12 and parse_bytes("2TiB") == 2 * 1024**4 and parse_bytes("1PiB") == 1024**5
    assert parse_bytes("64MiB") == 64 * 1024**2 and parse_bytes("6.4e7") == 6.4e7
    with pytest.raises(InputError, match="optional unit"):
        parse_bytes("3XB")


@pytest.mark.parametrize("name", ["8xL40S-PCIe", "8xH100-PCIe", "8xRTX-PRO-6000-PCIe"])
def test_pcie_all_to_all_is_not_faster_over_more_nodes(name):
    """A rank of a PCIe box sends (p - 1) / p of its buffer through its own PCIe link, to a peer in the box or
    to the NIC behind it: spreading the same all_to_all over more such boxes cannot make it faster (priced as
    if the NIC traffic had a link of its own, 16 ranks on two L40S boxes took half the time of 8 on one)."""
    node = get_node(name)
    sizes = np.logspace(6, 10, 9)
    t = {p: collective_time_ms("all_to_all", sizes, p, 8, node) for p in (8, 16, 32)}
    assert (t[16] >= 0.99 * t[8]).all() and (t[32] >= 0.99 * t[16]).all()
