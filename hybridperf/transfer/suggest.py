"""Which kernels to measure on a new GPU: the k whose measurement helps the transfer most.

Greedy V-optimal design under the transfer's own prior (hybridperf.transfer.adapt): each pick is the
candidate whose measurement most reduces the posterior variance of the correction, summed over the
candidates of its op class. A class's share is scaled by its expected squared zero-shot error on the
device (read off its interval, plus the device-level term on an unseen GPU): the targets are per
class, and a class the zero-shot model already predicts within 2% (elementwise) gains less from a
measurement than a GEMM class does. Each class's prior is the transfer's own (`adapt.class_prior`), so a
class whose error transfers little (softmax, `CLASS_PRIOR_SCALE`) is picked less; its row-length term
(`ROW_CLASSES`) corrects the row lengths that were measured and is left out of the design.
So the first picks pin the uncertain classes' offsets at a representative kernel, later ones go where
the basis terms (duration, reduction length, quantisation, compute/memory balance) are least pinned.
The bmm class also carries the transfer's discrete unknown, the GPU's batched-SGEMM tile family
(`adapt.choose_batched_tiles`), as the covariance it adds (`tile_family_covariance`), so vector-math
bmm kernels the families price apart get measured (leave-one-GPU-out on NeuSight: A100 bmm at 16
suggested kernels 10.5 -> 5.5%).
Given a target instead (a model's kernels with their launch counts, `hybridperf suggest --config`), the
design pins one quantity, the log of the target's summed time: each pick is the candidate whose
measurement most reduces the variance of the time-share-weighted sum of the target kernels' corrections,
so the picks follow where the model's time goes. Deterministic; no measurement is needed to choose.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec, get_device
from hybridperf.errors import InputError
from hybridperf.ops import OP_CLASSES
from hybridperf.priors.gemm import batched_tile_hypotheses
from hybridperf.stats import Z90
from hybridperf.transfer.adapt import TransferPrior, class_prior, class_rows, prior_kernel, tile_family_prior

MAX_PER_CLASS = 500  # candidates per class the design considers (keeps it O(k n^2) small)


def default_candidates() -> pd.DataFrame:
    """Transformer-typical kernels of every op class (NeuSight-style columns)."""
    rows = []
    dims = (256, 1024, 4096, 16384)
    for B, M, N, K in itertools.product((1, 16), (128, 512, 2048, 8192), dims, dims):
        rows.append({"OPName": "linear", "B": B, "M": M, "N": N, "K": K})
    for B, M, N, K in itertools.product((16, 64, 256), (128, 512, 2048), (64, 128), (128, 512, 2048)):
        rows.append({"OPName": "bmm", "B": B, "M": M, "N": N, "K": K})
    for op, B, H in itertools.product(("add", "mul", "gelu", "relu", "softmax", "ln"), (128, 1024, 8192, 65536),
                                      (256, 1024, 4096, 16384)):
        rows.append({"OPName": op, "B": B, "H": H})
    return pd.DataFrame(rows)


def _greedy_design(kernels: list, k: int, noise: float, class_weights=None) -> list:
    """Indices (class, row) of k greedy V-optimal picks over per-class prior covariances `kernels`,
    each class's summed variance weighted by `class_weights` (default: equal)."""
    class_weights = np.ones(len(kernels)) if class_weights is None else np.asarray(class_weights, np.float64)
    weight = [cw / len(K) for cw, K in zip(class_weights, kernels)]
    kernels = [K.copy() for K in kernels]
    picks = []
    for _ in range(k):
        gains = [w * (K ** 2).sum(axis=0) / (np.diag(K) + noise ** 2) for w, K in zip(weight, kernels)]
        for c, j in picks:
            gains[c][j] = -1.0
        c = int(np.argmax([g.max() for g in gains]))
        j = int(np.argmax(gains[c]))
        if gains[c][j] < 0:
            break
        K = kernels[c]
        kj = K[:, j].copy()
        kernels[c] = K - np.outer(kj, kj) / (kj[j] + noise ** 2)
        picks.append((c, j))
    return picks


def zero_shot_error_moment(predictor, op_class: str, device: DeviceSpec) -> float:
    """Expected squared zero-shot log-error of `op_class` on `device`, read off its 90% interval
    (the wide fallback interval without a bundle): the interval's centre squared (a skewed or offset
    interval means the point prediction is expected to be off) plus its half-width / 1.645 squared,
    plus the device-level term on a GPU the bundle was not trained on."""
    from hybridperf.predictor import FALLBACK_INTERVAL

    iv = predictor.manifest.get("op_classes", {}).get(op_class, {}).get("interval", FALLBACK_INTERVAL)
    unseen = predictor.bundle is not None and not predictor.measured_on(device.name, op_class)
    centre, half = (iv["q_hi"] + iv["q_lo"]) / 2.0, (iv["q_hi"] - iv["q_lo"]) / 2.0
    return float(centre ** 2 + (half / Z90) ** 2 + (predictor.device_shift_sd ** 2 if unseen else 0.0))


def _greedy_targeted(covariances: list, targets: list, k: int, noise: float, class_weights) -> list:
    """Indices (class, candidate) of k greedy picks that most reduce the variance of one weighted sum of
    corrections: per class, `covariances[c]` is the joint prior covariance of its target rows then its
    candidate rows, `targets[c]` the weights of the target rows, `class_weights[c]` scales its variance."""
    covariances = [K.copy() for K in covariances]
    n_target = [len(w) for w in targets]
    picks = []
    for _ in range(k):
        gains = []
        for c, (K, w, cw) in enumerate(zip(covariances, targets, class_weights)):
            t = n_target[c]
            g = cw * (w @ K[:t, t:]) ** 2 / (np.diag(K)[t:] + noise ** 2)
            g[[j for cc, j in picks if cc == c]] = -1.0
            gains.append(g)
        c = int(np.argmax([g.max() if len(g) else -1.0 for g in gains]))
        if not len(gains[c]) or gains[c].max() < 0:
            break
        j = int(np.argmax(gains[c]))
        K, t = covariances[c], n_target[c]
        kj = K[:, t + j].copy()
        covariances[c] = K - np.outer(kj, kj) / (kj[t + j] + noise ** 2)
        picks.append((c, j))
    return picks


def suggest_kernels(predictor, candidates: pd.DataFrame, device: str | DeviceSpec, k: int,
                    op_classes=OP_CLASSES, max_ms: float = 200.0, max_per_class: int = MAX_PER_CLASS,
                    class_scale: dict | None = None, target: pd.DataFrame | None = None) -> pd.DataFrame:
    """The `k` rows of `candidates` (canonical or NeuSight-style) most worth measuring on `device`,
    with their zero-shot prediction and interval, designed under the transfer's per-class prior
    (`class_scale` as in `adapt.fit_corrections`: a class whose error transfers little is picked less).
    Kernels predicted slower than `max_ms` or with tensors over a quarter of device memory are skipped
    (measuring stays quick); a class with more than `max_per_class` candidates is thinned evenly.

    `target` (optional; e.g. a model's kernels, `graphs.compose.model_kernel_requests`): kernel requests
    with a launch `count` column whose summed time the user wants predicted. The design then reduces the
    variance of the log of that sum, each kernel's correction weighted by its share of the zero-shot
    time, instead of the candidates' mean variance: the picks follow where the model's time goes.
    Deterministic."""
    if k < 1:
        raise InputError("k must be at least 1")
    dev = get_device(device)
    pred, X = predictor.predict_with_features(candidates, dev)
    keep = (pred["op_class"].isin(op_classes) & (pred["pred_ms"] <= max_ms)
            & (pred["bytes"] <= dev.mem_gb * 1e9 / 4)).to_numpy()
    # a shape listed twice (e.g. a linear's batch folded into its rows) is one candidate
    keep = keep & ~pred.duplicated(["op", "B", "M", "N", "K", "H", "dtype"]).to_numpy()
    pred, X = pred[keep].reset_index(drop=True), X[keep]
    if pred.empty:
        raise InputError("no candidate kernels of the requested op classes")
    by_class = class_rows(pred["op_class"].to_numpy(), max_per_class)
    classes = list(by_class)
    rows = [by_class[oc] for oc in classes]
    # designed without the host-floor term: its wide prior would send the first picks of every class to
    # floor-bound kernels, whose host overhead is not what the per-class targets are about; and without
    # the row-length term (adapt.ROW_CLASSES), which would spend most of k on one softmax per row length
    # (NeuSight leave-one-GPU-out: all rows 7.99% against 7.94% without, coverage 95.1% at k = 8)
    priors = [replace(class_prior(None, oc, class_scale), host_floor=0.0, row_signal=0.0) for oc in classes]
    class_weights = [zero_shot_error_moment(predictor, oc, dev) for oc in classes]
    noise = TransferPrior().noise
    if target is None:
        covariances = [prior_kernel(X[r], X[r], p) + tile_family_covariance(predictor, pred.iloc[r], dev)
                       for r, p in zip(rows, priors)]
        picks = _greedy_design(covariances, min(k, len(pred)), noise, class_weights)
    else:
        tpred, tX, share = target_shares(predictor, target, dev)
        covariances, weights = [], []
        for oc, r, p in zip(classes, rows, priors):
            t = np.flatnonzero(tpred["op_class"].to_numpy() == oc)
            Xj = np.vstack([tX[t], X[r]])
            covariances.append(prior_kernel(Xj, Xj, p) + tile_family_covariance(
                predictor, pd.concat([tpred.iloc[t], pred.iloc[r]], ignore_index=True), dev))
            weights.append(share[t])
        picks = _greedy_targeted(covariances, weights, min(k, len(pred)), noise, class_weights)
    return pred.iloc[sorted(rows[c][j] for c, j in picks)].reset_index(drop=True)


def target_shares(predictor, target: pd.DataFrame, device: DeviceSpec) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """`target`'s zero-shot predictions, features and each row's share of its summed time (count x pred_ms)."""
    if "count" not in target.columns:
        raise InputError("the target kernels need a `count` column (launches per run)")
    count = pd.to_numeric(target["count"], errors="coerce").to_numpy(np.float64)
    if not np.all(np.isfinite(count) & (count >= 0)) or not count.sum() > 0:
        raise InputError("the target kernels' `count` must be non-negative numbers, not all zero")
    tpred, tX = predictor.predict_with_features(target.drop(columns="count"), device)
    time = count * tpred["pred_ms"].to_numpy(np.float64)
    return tpred, tX, time / time.sum()


def equal_weight_target(predictor, targets: list, device: str | DeviceSpec) -> pd.DataFrame:
    """Several models' kernel requests (each with a launch `count`, `model_kernel_requests`) as one
    `suggest_kernels` target in which every model weighs the same: each model's counts are scaled so
    that its zero-shot kernel time sums to 1."""
    out = []
    for t in targets:
        ms = predictor.predict(t.drop(columns="count"), device)["pred_ms"].to_numpy()
        out.append(t.assign(count=t["count"] / float((t["count"] * ms).sum())))
    return pd.concat(out, ignore_index=True)


def tile_family_covariance(predictor, rows: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """Covariance of the log-error of predicted `rows` (one class, `predict`'s output: its `pred_ms` is
    the assumed family's) that the GPU's unknown batched-SGEMM tile family adds: over the families the
    transfer chooses from (`gemm.batched_tile_hypotheses`, weighted by `adapt.tile_family_prior`), the
    covariance of each row's log-prediction under the family against the assumed one's. Zero for rows
    no family re-prices (matrix-unit or non-bmm kernels), so the design measures the vector-math bmm
    kernels whose price the families disagree on, which is what lets the transfer tell the family (the
    A100's 64-wide outputs)."""
    families = batched_tile_hypotheses(device, predictor.constants)
    if len(families) < 2 or not (rows["op_class"] == "bmm").any():
        return np.zeros((len(rows), len(rows)))
    logs = [np.log(rows["pred_ms"].to_numpy(np.float64))]
    for family in families[1:]:
        priced = predictor.with_constants(predictor.constants.with_batched_tiles(device.arch, family))
        logs.append(np.log(priced.predict(rows, device)["pred_ms"].to_numpy(np.float64)))
    D = np.array(logs) - logs[0]
    p = tile_family_prior(len(families))
    D = D - p @ D
    return (D.T * p) @ D


def to_shapes_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """NeuSight-style shapes table (OPName, B, M, N, K, H) the collector accepts, with each GEMM's `form`
    where the rows carry one (a model's `mm` projections and `mm_t` weight gradients run as such)."""
    cols = ["op", "B", "M", "N", "K", "H"] + (["form"] if "form" in rows.columns else [])
    out = rows[cols].rename(columns={"op": "OPName"})
    if "form" in out.columns:
        out["form"] = out["form"].replace("", None)
    return out
