"""Save an adapted predictor as a bundle: the zero-shot ONNX files, one small ONNX graph per op class
and dtype for the transfer correction (physical basis + RBF, see adapt.py), and a manifest with the
re-calibrated intervals (`adaptation.intervals`; the zero-shot `op_classes` are kept as they were)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from hybridperf.errors import InputError
from hybridperf.residual_models.features import FEATURE_NAMES
from hybridperf.atomic import atomic_dir
from hybridperf.residual_models.bundle import DIGEST_KEY, bundle_file, read_manifest, write_manifest

CORRECTION_OPSET = 13
CORRECTION_IR_VERSION = 8  # readable by every onnxruntime since 1.10


def correction_onnx(corr):
    """ONNX graph x (rows, F) -> correction (rows, 1) of an adapt.`Correction`, the same arithmetic
    as adapt.basis and adapt.Correction.__call__."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from hybridperf.transfer.adapt import _REF_MS, _REF_RED, BASIS_INPUTS, GLOBAL, RBF_FEATURES

    inits, nodes = [], []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(op, inputs, out, **kw):
        nodes.append(helper.make_node(op, inputs, [out], **kw))
        return out

    col = {c: node("Gather", ["x", const(f"i_{c}", [FEATURE_NAMES.index(c)], np.int64)], c, axis=1)
           for c in BASIS_INPUTS}  # (rows, 1) each
    f, cm = col["floor_share"], col["compute_over_memory"]
    busy = node("Sub", [const("one", [1.0]), f], "busy")
    is_comp = node("Cast", [node("Greater", [cm, const("zero", [0.0])], "cm_pos")], "cm_pos_f", to=TensorProto.FLOAT)
    comp = node("Mul", [busy, is_comp], "comp")

    def scaled(name, a, shift, scale):  # (a - shift) / scale
        return node("Div", [node("Sub", [a, const(f"{name}_shift", [shift])], f"{name}_c"),
                            const(f"{name}_scale", [scale])], f"{name}_s")

    def inefficiency(name, eff):  # comp * (1 - eff) / 0.3
        return node("Mul", [comp, scaled(name, node("Sub", [const(f"{name}_one", [1.0]), eff], f"{name}_1m"), 0.0, 0.3)],
                    name)

    terms = [
        scaled("floor", f, 0.0, 0.5),
        scaled("host_floor", node("Mul", [f, f], "f2"), 0.0, 0.5),
        scaled("size", col["log_prior_ms"], _REF_MS, 2.0),
        node("Mul", [comp, scaled("red", col["log_N"], _REF_RED, 2.0)], "reduction"),
        inefficiency("waves", col["wave_efficiency"]),
        inefficiency("tiles", col["tile_efficiency"]),
        node("Mul", [busy, scaled("bal", node("Clip", [cm, const("lo4", -4.0), const("hi4", 4.0)], "cm_clip"), 0.0, 2.0)],
             "balance"),
        node("Mul", [busy, scaled("ovl", node("Exp", [node("Neg", [node("Abs", [cm], "cm_abs")], "cm_nabs")], "cm_e"),
                                  0.0, 0.5)], "overlap"),
    ]
    b = node("Concat", terms, "basis", axis=1)  # BASIS without its leading constant term
    linear = node("Add", [node("MatMul", [b, const("coef", corr.coef[1:].reshape(-1, 1))], "slopes"),
                          const("offset", corr.coef[:1])], "linear")
    cols = [FEATURE_NAMES.index(c) for c in RBF_FEATURES]
    z = node("Div", [node("Gather", ["x", const("rbf_cols", cols, np.int64)], "zs", axis=1),
                     const("rbf_scale", list(RBF_FEATURES.values()))], "z")
    diff = node("Sub", [node("Unsqueeze", [z, const("axis1", [1], np.int64)], "z3"), const("points", corr.points[None])], "diff")
    d2 = node("ReduceSum", [node("Mul", [diff, diff], "sq"), const("axis2", [2], np.int64)], "d2", keepdims=0)
    rbf = node("Exp", [node("Mul", [d2, const("neg_half_inv_l2", [-0.5 / corr.prior.rbf_length ** 2])], "arg")], "rbf")
    alpha = const("alpha", (corr.prior.rbf_signal ** 2 * corr.alpha).reshape(-1, 1))
    smooth = node("MatMul", [rbf, alpha], "smooth")
    if corr.local is not None:  # regime slopes that fade with distance: sum_i rbf_i(x) * (slopes(x) . local[:, i])
        fade = node("Exp", [node("Mul", [d2, const("neg_half_inv_ls2", [-0.5 / corr.prior.slope_length ** 2])],
                                 "arg_s")], "fade")
        slopes = node("Gather", [b, const("s_cols", np.flatnonzero(~GLOBAL[1:]), np.int64)], "slope_terms", axis=1)
        per_point = node("Mul", [fade, node("MatMul", [slopes, const("local", corr.local)], "slopes_at")], "local_pp")
        local = node("ReduceSum", [per_point, const("axis1b", [1], np.int64)], "local_sum", keepdims=1)
        smooth = node("Add", [smooth, local], "smooth_local")
    if corr.rows is not None:  # busy(x) * sum_i exp(-(log H(x) - log H_i)^2 / 2 l^2) * w_i
        log_h = node("Gather", ["x", const("i_log_H", [FEATURE_NAMES.index("log_H")], np.int64)], "log_H", axis=1)
        dh = node("Sub", [log_h, const("row_points", corr.rows[None, :, 0])], "dh")
        near_h = node("Exp", [node("Mul", [node("Mul", [dh, dh], "dh2"),
                                           const("neg_half_inv_lh2", [-0.5 / corr.prior.row_length ** 2])], "arg_h")],
                      "near_h")
        row = node("Mul", [busy, node("MatMul", [near_h, const("row_weights", corr.rows[:, 1:])], "row_sum")], "row")
        smooth = node("Add", [smooth, row], "smooth_row")
    nodes.append(helper.make_node("Add", [linear, smooth], ["correction"]))
    graph = helper.make_graph(
        nodes, "transfer_correction",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, len(FEATURE_NAMES)])],
        [helper.make_tensor_value_info("correction", TensorProto.FLOAT, [None, 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CORRECTION_OPSET)],
                              producer_name="hybridperf", ir_version=CORRECTION_IR_VERSION)
    onnx.checker.check_model(model)
    return model


def save_adapted(predictor, out_dir: str | Path) -> Path:
    """Write `predictor` (adapted with hybridperf.transfer.adapt_predictor) as a bundle in `out_dir`."""
    if not predictor.adaptation or predictor.bundle is None:
        raise InputError("nothing to save: the predictor is not adapted")
    out = Path(out_dir)
    src = predictor.bundle.path
    if out.resolve() == src.resolve():
        raise InputError("write the adapted bundle to a new directory, not over the zero-shot one")
    manifest = {k: v for k, v in read_manifest(src).items() if k != DIGEST_KEY}
    base_files = dict(manifest["files"])  # the zero-shot files' sha256, before the corrections join them
    with atomic_dir(out) as tmp:  # a full disk or an error leaves no half-written bundle
        for name in base_files:
            shutil.copy2(bundle_file(src, name), tmp / name)
        corrections = {}
        for key, corr in predictor.corrections.items():  # key: op class and dtype (`linear:fp16`)
            name = f"{key.replace(':', '_')}_transfer.onnx"
            (tmp / name).write_bytes(correction_onnx(corr).SerializeToString())
            manifest["files"][name] = ""
            corrections[key] = {"file": name, **corr.to_dict()}
        manifest["adaptation"] = {**predictor.adaptation, "corrections": corrections,
                                  "intervals": predictor.intervals,
                                  "adapted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "base_bundle_sha256": base_files}
        write_manifest(tmp, manifest)
    return out
