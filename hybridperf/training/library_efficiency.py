"""Fit the vendor BLAS efficiency (`hybridperf.priors.constants.LIBRARY_EFFICIENCY`) from traced GEMMs.

NeuSight's whole-model labels come with the traced graph of one layer and the measured latency of each
node. Their large GEMM nodes (addmm = linear, matmul/bmm over the batch of heads) give, per GPU, the
ratio measured / tile-model compute time. The efficiency of a (vendor, op) is 1 / the median ratio
over the vendor's GPUs, using only kernels long enough (>= MIN_MS) for the launch floor not to matter.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.datasets.labels import load_labels, load_layer_graph
from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.priors.constants import DEFAULT_CONSTANTS
from hybridperf.priors.kernel_prior import kernel_prior_terms

MIN_MS = 0.2


def traced_gemms(root: str | Path, devices=None) -> pd.DataFrame:
    """Forward GEMM nodes of the inference labels' traced graphs: device, op, B, M, N, K, latency_ms."""
    labels = load_labels(root, devices=devices)
    rows = []
    for lab in labels.itertuples():
        if lab.mode != "inf" or lab.fusion or not isinstance(lab.graph_path, str):
            continue
        for r in load_layer_graph(lab.graph_path).itertuples():
            target, shapes, lat = str(r.target), r.input_shapes, float(r.fw_latency)
            if lat <= 0 or not isinstance(shapes, list):
                continue
            if "addmm" in target and len(shapes) == 3 and len(shapes[1]) == 2:
                (m, n), k = shapes[1], shapes[2][-1]
                rows.append((lab.device, "linear", 1, m, n, k, lat))
            elif ("matmul" in target or "bmm" in target) and len(shapes) == 2 and len(shapes[0]) >= 3:
                a, b = shapes
                rows.append((lab.device, "bmm", int(np.prod(a[:-2])), a[-2], a[-1], b[-1], lat))
    return pd.DataFrame(rows, columns=["device", "OPName", "B", "M", "N", "K", "latency_ms"])


def gemm_ratios(gemms: pd.DataFrame) -> pd.DataFrame:
    """Per traced GEMM: measured / prior with no library efficiency applied (long kernels only)."""
    parts = []
    tile_rate = DEFAULT_CONSTANTS.with_library_efficiency({})
    for dev, g in gemms.groupby("device"):
        c = canonicalize(g.assign(Latency=g["latency_ms"]).drop(columns=["latency_ms", "device"]),
                         device=dev, require_latency=True, host="neusight")
        terms = kernel_prior_terms(c, get_device(dev), constants=tile_rate)
        parts.append(c.assign(vendor=get_device(dev).vendor, ratio=c["latency_ms"] / terms["prior_ms"],
                              prior_ms=terms["prior_ms"]))
    out = pd.concat(parts, ignore_index=True)
    return out[out["prior_ms"] >= MIN_MS]


def fit_library_efficiency(ratios: pd.DataFrame, vendor: str = "amd", exclude_device: str | None = None) -> dict:
    """{(vendor, op): efficiency} from the traced GEMMs of `vendor`'s GPUs (minus `exclude_device`)."""
    r = ratios[(ratios["vendor"] == vendor) & (ratios["device"] != exclude_device)]
    return {(vendor, op): round(float(1.0 / np.median(g["ratio"])), 3) for op, g in r.groupby("op")}
