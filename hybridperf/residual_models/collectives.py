"""The learned part of the collective model: prior (fitted constants) x exp(ONNX residual), with a
central 90% interval; the bundle is verified by `hybridperf.residual_models.bundle.load_bundle`, the
same verifier as the kernel bundles (kind "collectives").

Features are device-agnostic (sizes, ranks, topology class, spec bandwidths, the prior's pick and
time), never a system's name.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hybridperf.devices.spec import NodeSpec
from hybridperf.errors import ModelBundleError
from hybridperf.priors.collectives import (
    DEFAULT_CONSTANTS,
    TOPOLOGIES,
    CollectiveConstants,
    CustomAllReduceConstants,
    canonical_collective,
    custom_all_reduce_ms,
    prior_terms,
)
from hybridperf.residual_models.bundle import load_bundle, read_manifest, shipped_models_dir

BUNDLE_KIND = "collectives"
#: used only when no bundle can be found: a wide central 90% band on log(measured / prior)
FALLBACK_INTERVAL = {"q_lo": -0.7, "q_hi": 0.7}
_ALGS = ("ring", "tree", "nvls", "direct")
FEATURE_NAMES = (
    "log2_bytes", "log2_gpus", "log2_gpus_per_node", "log2_nodes",
    "coll_all_reduce", "coll_gather_scatter", "coll_all_to_all", "coll_send_recv",
    *(f"topo_{t}" for t in TOPOLOGIES), "arch_index",
    "log2_intra_bw", "log2_node_nic_bw", "timing_call",
    *(f"alg_{a}" for a in _ALGS), "proto_ll", "proto_ll128",
    "log2_prior_us", "log2_alg_us",
)


def default_bundle_dir() -> Path:
    return shipped_models_dir() / "collectives"


def collective_features(node: NodeSpec, terms: dict) -> np.ndarray:
    """Feature matrix (rows = sizes of `terms`, columns = FEATURE_NAMES), float64."""
    f, coll, n = terms["fabric"], terms["collective"], terms["nbytes"]
    cap = node.inter_node_bw_gbs if node.inter_node_bw_gbs > 0 else node.gpus_per_node * node.inter_bw_gbs
    l2 = lambda v: math.log2(max(float(v), 1e-3))  # noqa: E731
    const = [
        l2(f.p), l2(f.g), l2(f.nodes),
        float(coll == "all_reduce"), float(coll in ("all_gather", "reduce_scatter")),
        float(coll == "all_to_all"), float(coll == "send_recv"),
        *(float(node.intra_topology == t) for t in TOPOLOGIES), float(f.arch),
        l2(node.intra_bw_gbs), l2(cap), float(terms["timing"] == "call"),
    ]
    X = np.empty((len(n), len(FEATURE_NAMES)))
    X[:, 0] = np.log2(n)
    X[:, 1:1 + len(const)] = const
    j = 1 + len(const)
    alg = np.asarray([str(a).replace("_tree", "") for a in terms["algorithm"]])
    pro = np.asarray([str(p) for p in terms["protocol"]])
    for i, a in enumerate(_ALGS):
        X[:, j + i] = alg == a
    j += len(_ALGS)
    X[:, j], X[:, j + 1] = pro == "LL", pro == "LL128"
    X[:, j + 2] = np.log2(np.maximum(terms["ms"] * 1e3, 1e-3))
    X[:, j + 3] = np.log2(np.maximum(terms["alg_us"], 1e-3))
    return X


class CollectiveModel:
    """Prior x exp(residual) with a 90% interval. `load()` reads exported_models/collectives;
    `prior_only()` needs no files. Only numpy and onnxruntime run here."""

    def __init__(self, constants: CollectiveConstants = DEFAULT_CONSTANTS, interval: dict | None = None,
                 bundle=None, custom: CustomAllReduceConstants | None = None):
        self.constants = constants
        self.interval = dict(interval or FALLBACK_INTERVAL)
        self.bundle = bundle
        self.custom = custom or CustomAllReduceConstants()

    @classmethod
    def prior_only(cls, constants: CollectiveConstants | None = None, interval: dict | None = None):
        return cls(constants or DEFAULT_CONSTANTS, interval)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "CollectiveModel":
        """Load and verify a bundle directory; ModelBundleError if broken."""
        d = Path(path) if path is not None else default_bundle_dir()
        if path is None and not (d / "manifest.json").is_file():
            return cls.prior_only()
        m = read_manifest(d)
        has_residual = bool(m.get("residual"))
        b = load_bundle(d, expect_kind=BUNDLE_KIND, feature_names=FEATURE_NAMES if has_residual else None)
        try:
            constants = CollectiveConstants.from_dict(m.get("constants", {}))
            custom = CustomAllReduceConstants.from_dict(m.get("custom_all_reduce", {}))
        except (TypeError, ValueError) as e:
            raise ModelBundleError(f"{d}: bad collective constants ({e})") from None
        if has_residual and m["residual"].get("file") not in b.sessions:
            raise ModelBundleError(f"{d}: residual file {m['residual'].get('file')!r} is not a listed ONNX file")
        return cls(constants, m.get("interval") or FALLBACK_INTERVAL, b if has_residual else None, custom)

    def residual(self, X: np.ndarray) -> np.ndarray:
        if self.bundle is None:
            return np.zeros(len(X))
        return self.bundle.run(self.bundle.manifest["residual"]["file"], X)[:, 0]

    def predict(self, collective: str, nbytes, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                timing: str | None = None) -> dict:
        """{"ms", "lo_ms", "hi_ms"} arrays over `nbytes`."""
        t = prior_terms(collective, nbytes, gpus, gpus_per_node, node, self.constants, timing)
        ms = t["ms"] * np.exp(self.residual(collective_features(node, t)))
        q_lo, q_hi = self.interval_quantiles(t, node)
        return {"ms": ms, "lo_ms": ms * np.exp(q_lo), "hi_ms": ms * np.exp(q_hi)}

    def predict_custom_all_reduce(self, nbytes, gpus: int, node: NodeSpec, engine: str) -> dict:
        """The engine's all-reduce (graph timing) with the collective interval."""
        ms = custom_all_reduce_ms(nbytes, gpus, node, engine, self.constants, self.custom)
        t = prior_terms("all_reduce", nbytes, gpus, None, node, self.constants, "graph")
        q_lo, q_hi = self.interval_quantiles(t, node)
        w = float(self.interval.get("custom_widen", 1.0))
        return {"ms": ms, "lo_ms": ms * np.exp(q_lo * w), "hi_ms": ms * np.exp(q_hi * w)}

    def interval_quantiles(self, terms: dict, node: NodeSpec) -> tuple[np.ndarray, np.ndarray]:
        """(q_lo, q_hi) of log(measured / predicted): the held-out quantiles of the stratum
        (`interval_stratum`), widened once by `ood_widen` outside what training saw (a topology or
        architecture never seen, more GPUs, sizes below those measured). Sizes above them are not widened:
        their time is bandwidth-bound, the rate the largest measured sizes already set; widenings do not
        stack (stacked, a 4 GiB send/recv's band reached 300x its point)."""
        iv = self.interval
        strata = iv.get("strata") or {}
        key = interval_stratum(canonical_collective(terms["collective"]), node.intra_topology)
        st = strata.get(key) or strata.get(key.split(":")[0]) or iv
        q_lo, q_hi = float(st.get("q_lo", iv["q_lo"])), float(st.get("q_hi", iv["q_hi"]))
        widen = np.ones(len(terms["ms"]))
        rng = iv.get("training_range")
        if rng:
            w = float(iv.get("ood_widen", 1.5))
            if node.intra_topology not in rng.get("topologies", TOPOLOGIES) or terms["gpus"] > rng.get("max_gpus", 1 << 30) \
                    or terms["fabric"].arch > rng.get("max_arch", 9):
                widen[:] = w
            widen = np.where(terms["nbytes"] < rng.get("min_bytes", 0), w, widen)
        return q_lo * widen, q_hi * widen


def interval_stratum(collective: str, topology: str) -> str:
    """The interval's stratum: send_recv or the rest, on NVSwitch or other fabrics (PCIe, bridged
    pairs, meshes err far more); a missing stratum falls back to the part before the colon."""
    return ("send_recv" if collective == "send_recv" else "collective") + (":nvswitch" if topology == "nvswitch" else ":other")


def predict_collective(collective: str, nbytes: float, gpus: int, gpus_per_node: int | None, node: NodeSpec,
                       model: CollectiveModel | None = None, timing: str | None = None,
                       impl: str = "nccl") -> dict:
    """One prediction as plain floats: {"ms", "lo_ms", "hi_ms"}; `impl` other than nccl: the engine's
    custom all-reduce (one node, graph timing). `timing` None: the node's `collective_timing`, as
    `predict-collective --timing auto`."""
    m = model or CollectiveModel.load()
    if impl != "nccl":
        out = m.predict_custom_all_reduce([nbytes], gpus, node, impl)
    else:
        out = m.predict(collective, [nbytes], gpus, gpus_per_node, node, timing or node.collective_timing)
    return {k: float(v[0]) for k, v in out.items()}
