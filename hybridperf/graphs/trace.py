"""Read NeuSight's traced layer graphs (FX-node CSVs with per-node latency) into kernel-level facts:
which nodes launch GPU work, their op group, GEMM FLOPs, and the layer / outside-layer split.

Used to validate the enumerator (GEMM shapes per layer) and to compare per-op-group predictions with
the per-node measurements, as NeuSight's artifact does. Pure pandas; no torch.
"""
from __future__ import annotations

import ast
import re

import numpy as np
import pandas as pd

_LAYER = re.compile(r"(?:^|_)(?:h|layer|layers|block)_0_")
_POST = re.compile(r"(ln_f$|^model_decoder_final_layer_norm|^lm_head|^cls_|^bert_pooler)")
#: nodes cheaper than this with no backward are Python-side work (size/view/getitem...), no kernel
TRIVIAL_MS = 0.02


def _shapes(v):
    if isinstance(v, list):
        return v
    if not isinstance(v, str) or not v.strip():
        return []
    try:
        out = ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return []
    return [list(s) if isinstance(s, (list, tuple)) else s for s in out] if isinstance(out, (list, tuple)) else []


def _out_shape(v):
    if isinstance(v, (list, tuple)):
        return list(v)
    try:
        out = ast.literal_eval(str(v))
        return list(out) if isinstance(out, (list, tuple)) else []
    except (ValueError, SyntaxError):
        return []


def layer_span(df: pd.DataFrame) -> tuple[int, int]:
    """[start, end) row range of the traced layer 0 (up to the first post-layer module)."""
    names = df["Name"].astype(str).tolist()
    idx = [i for i, n in enumerate(names) if _LAYER.search(n)]
    if not idx:
        return 0, 0
    post = [i for i, n in enumerate(names) if i > idx[-1] and _POST.search(n)]
    return idx[0], (post[0] if post else idx[-1] + 1)


def node_group(row) -> str | None:
    """Op group of one traced node (our breakdown classes), or None for Python-only nodes."""
    op, target, name = str(row["op"]), str(row["target"]), str(row["Name"])
    lat = float(row.get("latency", 0.0) or 0.0)
    bw = float(row.get("bw_latency", 0.0) or 0.0)
    if op in ("placeholder", "get_attr", "output"):
        return None
    if lat < TRIVIAL_MS and bw <= 0:
        return None
    low = name.lower()
    if op == "call_module":
        if "layer_norm" in low or re.search(r"(^|_)ln(_|$)", low) or "layernorm" in low:
            return "layernorm"
        if "drop" in low or "activation" in low or "act" == low.split("_")[-1]:
            return "elementwise"
        if "embed" in low or low.endswith("_wte") or low.endswith("_wpe"):
            return "embedding"
        return "linear"
    if "addmm" in target or target.endswith("linear>"):
        return "linear"
    if "matmul" in target or "bmm" in target:
        return "bmm"
    if "softmax" in target:
        return "softmax"
    if "layer_norm" in target:
        return "layernorm"
    if "embedding" in target:
        return "embedding"
    if op == "call_method" and target in ("contiguous", "reshape", "clone"):
        return "memory"
    return "elementwise" if lat >= TRIVIAL_MS else "memory"


def gemm_flops(row) -> float:
    """FLOPs of a traced GEMM node (addmm, matmul/bmm, or a Linear module), else 0."""
    op, target = str(row["op"]), str(row["target"])
    shp = _shapes(row["input_shapes"])
    if "addmm" in target and len(shp) == 3:
        (m, n), (_, k) = shp[1], shp[2]
        return 2.0 * m * n * k
    if ("matmul" in target or "bmm" in target) and len(shp) >= 2:
        a, b = shp[0], shp[1]
        batch = float(np.prod(a[:-2])) if len(a) > 2 else 1.0
        return 2.0 * batch * a[-2] * a[-1] * b[-1]
    if op == "call_module" and node_group(row) == "linear" and shp:
        out = _out_shape(row["output_shape"])
        if out:
            return 2.0 * float(np.prod(shp[0])) * out[-1]
    return 0.0


def traced_layer_gemm_flops(df: pd.DataFrame) -> list[float]:
    """Sorted FLOPs of the GEMMs in traced layer 0."""
    a, b = layer_span(df)
    return sorted(f for f in (gemm_flops(r) for _, r in df.iloc[a:b].iterrows()) if f > 0)


def traced_group_totals(df: pd.DataFrame, num_layer: int) -> dict:
    """Per-op-group latency (ms) of the whole model composed from the per-node measurements:
    outside-layer nodes once + layer-0 nodes x num_layer (NeuSight's composition)."""
    a, b = layer_span(df)
    tot: dict[str, float] = {}
    for i, (_, r) in enumerate(df.iterrows()):
        g = node_group(r)
        if g is None:
            continue
        mult = num_layer if a <= i < b else 1
        tot[g] = tot.get(g, 0.0) + mult * float(r.get("latency", 0.0) or 0.0)
    return tot
