"""Training for the collective model: fit the prior's constants, learn the residual
log(measured / prior), export both (ONNX + manifest.json) to exported_models/collectives/.

Training may import scipy, scikit-learn and skl2onnx; the prediction path
(`hybridperf.residual_models.collectives.CollectiveModel`) imports none of them.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.devices import get_node
from hybridperf.devices.spec import NodeSpec
from hybridperf.errors import InputError
from hybridperf.priors.collectives import DEFAULT_CONSTANTS, CollectiveConstants, CustomAllReduceConstants, prior_terms
from hybridperf.residual_models.bundle import write_manifest
from hybridperf.residual_models.collectives import BUNDLE_KIND, FEATURE_NAMES, collective_features

ROBUST_SCALE = 0.3
GROUP_KEYS = ["system", "collective", "gpus", "gpus_per_node", "timing"]
#: (lower, upper) bounds of every constant fit_constants may move
BOUNDS = {
    "floor_us": (2.0, 200.0),
    "floor_p2p_us": (1.0, 100.0),
    "floor_sharpness": (1.0, 12.0),
    "floor_p2p_sharpness": (1.0, 12.0),
    "launch_us": (0.1, 20.0),
    "lat_scale": (0.3, 4.0),
    "lat_p2p_us": (0.5, 50.0),
    "lat_a2a_peer_us": (0.01, 20.0),
    "eff_nvlink": (0.2, 1.1),
    "eff_nvlink_p2p": (0.2, 1.0),
    "eff_pcie": (0.2, 1.1),
    "eff_pcie_p2p": (0.2, 1.0),
    "eff_net": (0.05, 1.2),
    "eff_net_p2p": (0.05, 1.0),
    "nvls_gain": (0.2, 2.0),
    "nvls_lat_gain": (0.2, 10.0),
    "rank_loss": (0.01, 1.6),
    "eff_allreduce": (0.5, 2.0),
    "rank_loss_allreduce": (0.01, 1.6),
    "fill_share": (0.001, 1.0),
    "fill_bytes": (2.0**20, 2.0**28),  # NCCL's chunks x channels: MBs, not one 64 KiB step
}


def node_for(system: str, nodes: dict | None = None) -> NodeSpec:
    """The NodeSpec of a system (a Vidur system is a catalog node; aiconfigurator ids map through
    SYSTEM_NODES; `nodes` overrides)."""
    from hybridperf.datasets.aiconfigurator_comm import SYSTEM_NODES

    if nodes and system in nodes:
        return nodes[system]
    return get_node(SYSTEM_NODES.get(system, system))


def _groups(df: pd.DataFrame, nodes: dict | None = None) -> list:
    """[(collective, nbytes, gpus, gpus_per_node, node, positions)] for every group of `df`."""
    pos = pd.Series(np.arange(len(df)), index=df.index)
    return [(coll, grp["nbytes"].to_numpy(), int(p), int(g), node_for(system, nodes), tm, pos.loc[grp.index].to_numpy())
            for (system, coll, p, g, tm), grp in df.groupby(GROUP_KEYS, sort=False)]


def _prior_ms(groups: list, n_rows: int, constants: CollectiveConstants) -> np.ndarray:
    out = np.empty(n_rows)
    for coll, n, p, g, node, tm, idx in groups:
        out[idx] = prior_terms(coll, n, p, g, node, constants, tm)["ms"]
    return out


def row_weights(df: pd.DataFrame) -> np.ndarray:
    """Every (system, collective, gpus, gpus_per_node) group gets the same total weight."""
    size = df.groupby(GROUP_KEYS, sort=False)["nbytes"].transform("size").to_numpy()
    w = 1.0 / size
    return w / w.sum()


def fittable(df: pd.DataFrame, nodes: dict | None = None) -> list[str]:
    """The constants that rows of `df` actually exercise (the others keep their defaults)."""
    out = {"lat_scale", "fill_share", "fill_bytes"}
    for (system, coll, p, g, tm), grp in df.groupby(GROUP_KEYS, sort=False):
        node = node_for(system, nodes)
        if tm == "call":
            out.update(("floor_p2p_us", "floor_p2p_sharpness") if coll == "send_recv" else ("floor_us", "floor_sharpness"))
        else:
            out.add("launch_us")
        t = prior_terms(coll, grp["nbytes"].to_numpy(), int(p), int(g), node, timing=tm)
        algs = set(t["algorithm"])
        if coll == "all_reduce" and algs & {"nvls", "nvls_tree"}:
            out.update(("nvls_gain", "nvls_lat_gain") if "nvls" in algs else ("nvls_gain",))  # its latency: one node
        if coll == "send_recv" and tm == "graph":  # per call, the floor hides it: the fit traded the two off
            out.add("lat_p2p_us")
        if coll == "all_to_all" and p > 2:  # seen apart from the fixed latency where the peers vary
            out.add("lat_a2a_peer_us")
        if p > g:
            out.add("eff_net_p2p" if coll == "send_recv" else "eff_net")  # all-to-all crosses on node_bw
        if g > 1 and not (coll == "send_recv" and p > g):  # across nodes a send/recv runs at the NIC's rate
            pcie = node.intra_topology == "pcie" or (node.intra_topology == "nvlink_pairs" and g > 2)
            out.add(("eff_pcie" if pcie else "eff_nvlink") + ("_p2p" if coll == "send_recv" else ""))
            if node.intra_topology == "nvswitch" and coll != "send_recv" and g < 8:
                out.add("rank_loss")
            if node.intra_topology == "nvswitch" and coll == "all_reduce" and p == g:  # across nodes the NICs bind
                out.update(("eff_allreduce", "rank_loss_allreduce") if g < 8 else ("eff_allreduce",))
    # pcie_cross_socket keeps its physical default: the one 8-GPU PCIe box measured (aiconfigurator's l40s) has
    # no GPU peer-to-peer at all (5 GB/s bus bandwidth on 4 GPUs of one socket, 1.5 on 8), so a value fitted
    # there (0.07) would describe that box, not a ring crossing sockets, and price every 8-GPU PCIe box so
    return [k for k in BOUNDS if k in out]


@dataclass
class FitResult:
    constants: CollectiveConstants
    params: list
    loss_before: float
    loss_after: float


def fit_constants(
    df: pd.DataFrame,
    base: CollectiveConstants = DEFAULT_CONSTANTS,
    params: list[str] | None = None,
    nodes: dict | None = None,
    maxiter: int = 3000,
    objective: str = "robust",
    polish: bool = True,
) -> FitResult:
    """Fit the constants exercised by `df` to minimise the group-balanced mean of
    `objective`: "robust" s tanh(|log(prior/measured)| / s) with s = 0.3 (a system the physics cannot
    describe, such as a PCIe box that loses 10x of its bandwidth, then cannot drag every shared
    constant towards itself), "logabs" |log(prior/measured)|, or "mape".

    Parameters are searched in log space within BOUNDS (Nelder-Mead, then Powell polish)."""
    from scipy.optimize import minimize

    if df.empty:
        raise InputError("no rows to fit collective constants on")
    params = list(params) if params is not None else fittable(df, nodes)
    w = row_weights(df)
    y = df["latency_ms"].to_numpy()
    groups = _groups(df, nodes)
    lo = np.log([BOUNDS[k][0] for k in params])
    hi = np.log([BOUNDS[k][1] for k in params])

    def make(theta) -> CollectiveConstants:
        th = np.clip(theta, lo, hi)
        return base.updated(**{k: float(np.exp(v)) for k, v in zip(params, th)})

    def loss(theta) -> float:
        pen = float(np.sum(np.maximum(theta - hi, 0) ** 2 + np.maximum(lo - theta, 0) ** 2))
        pr = _prior_ms(groups, len(df), make(theta))
        err = np.abs(pr / y - 1.0) if objective == "mape" else np.abs(np.log(pr / y))
        if objective == "robust":
            err = ROBUST_SCALE * np.tanh(err / ROBUST_SCALE)
        return float(np.sum(w * err)) + 10 * pen

    theta0 = np.log([getattr(base, k) for k in params])
    before = loss(theta0)
    if not params:
        return FitResult(base, [], before, before)
    res = minimize(loss, theta0, method="Nelder-Mead",
                   options={"maxiter": maxiter, "xatol": 1e-4, "fatol": 1e-7, "adaptive": True})
    best = res.x
    if polish:
        res2 = minimize(loss, res.x, method="Powell", options={"maxiter": maxiter, "xtol": 1e-4, "ftol": 1e-8})
        best = res2.x if res2.fun <= res.fun else res.x
    fitted = make(best)
    return FitResult(fitted, params, before, loss(best))


def fit_custom_all_reduce(df: pd.DataFrame, constants: CollectiveConstants, nodes: dict | None = None,
                          maxiter: int = 400) -> CustomAllReduceConstants:
    """Fit the one-shot/two-shot latency and bandwidth efficiency to custom all-reduce rows (graph
    timing, engine in `impl`), group-balanced mean |log(pred / measured)|."""
    from scipy.optimize import minimize

    from hybridperf.priors.collectives import custom_all_reduce_ms

    rows = df[(df["timing"] == "graph") & (df["impl"] != "nccl")]
    if rows.empty:
        return CustomAllReduceConstants()
    groups = [(node_for(s, nodes), int(p), e, grp["nbytes"].to_numpy(), grp["latency_ms"].to_numpy())
              for (s, p, e), grp in rows.groupby(["system", "gpus", "impl"])]
    base = CustomAllReduceConstants()

    def make(th):
        return CustomAllReduceConstants(lat_us=float(np.exp(np.clip(th[0], -1, 4))), eff=float(np.exp(np.clip(th[1], -3, 0.3))),
                                        max_bytes=base.max_bytes)

    def loss(th):
        k = make(th)
        return float(np.mean([np.mean(np.abs(np.log(custom_all_reduce_ms(n, p, node, e, constants, k) / y)))
                              for node, p, e, n, y in groups]))

    res = minimize(loss, np.log([base.lat_us, base.eff]), method="Nelder-Mead", options={"maxiter": maxiter})
    return make(res.x)


# ---------------------------------------------------------------------------------------------------
# residual


def residual_xy(df: pd.DataFrame, constants: CollectiveConstants, nodes: dict | None = None):
    """(X, y = log(measured / prior), prior_ms) for every row, in df's order."""
    X = np.empty((len(df), len(FEATURE_NAMES)))
    prior = np.empty(len(df))
    pos = pd.Series(np.arange(len(df)), index=df.index)
    for (system, coll, p, g, tm), grp in df.groupby(GROUP_KEYS, sort=False):
        node = node_for(system, nodes)
        t = prior_terms(coll, grp["nbytes"].to_numpy(), int(p), int(g), node, constants, tm)
        idx = pos.loc[grp.index].to_numpy()
        X[idx] = collective_features(node, t)
        prior[idx] = t["ms"]
    return X, np.log(df["latency_ms"].to_numpy() / prior), prior


def make_residual_estimator(kind: str = "gbr", seed: int = 0):
    """A small scikit-learn regressor for the residual (kind: gbr | ridge)."""
    if kind == "ridge":
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), Ridge(alpha=10.0))
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(loss="huber", n_estimators=150, max_depth=3, learning_rate=0.05,
                                     subsample=0.8, min_samples_leaf=50, random_state=seed)


def fit_residual(X: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None, kind: str = "gbr", seed: int = 0):
    est = make_residual_estimator(kind, seed)
    if weights is None:
        est.fit(X, y)
    elif kind == "ridge":
        est.fit(X, y, ridge__sample_weight=weights * len(weights))
    else:
        est.fit(X, y, sample_weight=weights * len(weights))
    return est


def to_onnx_bytes(estimator, n_features: int, opset: int = 15) -> bytes:
    """Serialise a fitted scikit-learn regressor to ONNX (float input 'X', float output)."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    onx = convert_sklearn(estimator, initial_types=[("X", FloatTensorType([None, n_features]))],
                          target_opset={"": opset, "ai.onnx.ml": 3})
    return onx.SerializeToString()


def library_versions() -> dict:
    import onnx
    import onnxruntime
    import sklearn
    import skl2onnx

    return {"python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "scikit-learn": sklearn.__version__,
            "skl2onnx": skl2onnx.__version__}


def write_bundle(
    out_dir: str | Path,
    constants: CollectiveConstants,
    interval: dict,
    estimator=None,
    *,
    custom: CustomAllReduceConstants | None = None,
    data_digest: str = "",
    trained_on: list | None = None,
    metrics: dict | None = None,
    notes: str = "",
    opset: int = 15,
) -> Path:
    """Write manifest.json (+ residual.onnx when `estimator` is given) into `out_dir`, in the format
    `hybridperf.residual_models.bundle.load_bundle` verifies (kind "collectives")."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files, residual = [], None
    stale = out / "residual.onnx"
    if estimator is not None:
        stale.write_bytes(to_onnx_bytes(estimator, len(FEATURE_NAMES), opset))
        files.append("residual.onnx")
        residual = {"file": "residual.onnx", "target": "log(measured_ms / prior_ms)", "estimator": type(estimator).__name__}
    elif stale.exists():
        stale.unlink()
    man = {
        "kind": BUNDLE_KIND, "constants": constants.to_dict(),
        "custom_all_reduce": (custom or CustomAllReduceConstants()).to_dict(),
        "interval": _jsonable(interval), "residual": residual, "files": files,
        "feature_names": list(FEATURE_NAMES), "opset": opset, "library_versions": library_versions(),
        "training_data": {"digest_sha256": data_digest, "systems": trained_on or []},
        "metrics": _jsonable(metrics or {}), "notes": notes,
    }
    write_manifest(out, man)
    return out


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x)
    if isinstance(x, (np.integer, int)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def interval_from_residuals(log_res: np.ndarray, weights: np.ndarray | None = None, coverage: float = 0.9) -> dict:
    """Central `coverage` band of held-out log(measured / predicted): split-conformal style quantiles."""
    r = np.asarray(log_res, dtype=float)
    if weights is None:
        weights = np.full(len(r), 1.0 / len(r))
    o = np.argsort(r)
    cw = np.cumsum(weights[o]) / np.sum(weights)
    a = (1 - coverage) / 2
    q_lo = float(r[o][np.searchsorted(cw, a)])
    q_hi = float(r[o][min(np.searchsorted(cw, 1 - a), len(r) - 1)])
    return {"q_lo": min(q_lo, 0.0), "q_hi": max(q_hi, 0.0), "coverage": coverage}


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    """Mean absolute percentage error, %."""
    return float(np.mean(np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)) * 100)
