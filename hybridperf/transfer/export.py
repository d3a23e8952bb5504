"""Save an adapted predictor as a bundle: the zero-shot ONNX files, one small ONNX graph per op class
for the transfer correction (a Gaussian-process posterior mean), and a manifest with the
re-calibrated intervals."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from hybridperf.errors import InputError
from hybridperf.residual_models.features import FEATURE_NAMES
from hybridperf.residual_models.bundle import MANIFEST, write_manifest

CORRECTION_OPSET = 13
CORRECTION_IR_VERSION = 8  # readable by every onnxruntime since 1.10


def gp_onnx(corr):
    """ONNX graph x (rows, F) -> GP posterior mean (rows, 1) of a `GPCorrection`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from hybridperf.transfer.adapt import GP_FEATURES, LENGTH, OFFSET, SIGNAL, GPCorrection

    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(np.asarray(GPCorrection.columns(), np.int64), "cols"),
        numpy_helper.from_array(f32(list(GP_FEATURES.values())), "scale"),
        numpy_helper.from_array(f32(corr.points[None, :, :]), "points"),
        numpy_helper.from_array(f32(corr.alpha.reshape(-1, 1)), "alpha"),
        numpy_helper.from_array(np.asarray([2], np.int64), "axis2"),
        numpy_helper.from_array(np.asarray([1], np.int64), "axis1"),
        numpy_helper.from_array(f32([-0.5 / LENGTH ** 2]), "neg_half_inv_l2"),
        numpy_helper.from_array(f32([SIGNAL ** 2]), "s2"),
        numpy_helper.from_array(f32([OFFSET ** 2]), "c2"),
    ]
    nodes = [
        helper.make_node("Gather", ["x", "cols"], ["xs"], axis=1),
        helper.make_node("Div", ["xs", "scale"], ["z"]),
        helper.make_node("Unsqueeze", ["z", "axis1"], ["z3"]),
        helper.make_node("Sub", ["z3", "points"], ["diff"]),
        helper.make_node("Mul", ["diff", "diff"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axis2"], ["d2"], keepdims=0),
        helper.make_node("Mul", ["d2", "neg_half_inv_l2"], ["arg"]),
        helper.make_node("Exp", ["arg"], ["rbf"]),
        helper.make_node("Mul", ["rbf", "s2"], ["k_rbf"]),
        helper.make_node("Add", ["k_rbf", "c2"], ["k"]),
        helper.make_node("MatMul", ["k", "alpha"], ["correction"]),
    ]
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
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((src / MANIFEST).read_text())
    for name in manifest["files"]:
        shutil.copy2(src / name, out / name)
    corrections = {}
    for oc, corr in predictor.corrections.items():
        name = f"{oc}_transfer.onnx"
        (out / name).write_bytes(gp_onnx(corr).SerializeToString())
        manifest["files"][name] = ""
        corrections[oc] = {"file": name, **corr.to_dict()}
    for oc, iv in predictor.intervals.items():
        if oc in manifest["op_classes"]:
            manifest["op_classes"][oc]["interval"] = iv
    manifest["adaptation"] = {**predictor.adaptation, "corrections": corrections,
                              "adapted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "base_bundle_sha256": {k: v for k, v in json.loads((src / MANIFEST).read_text())["files"].items()}}
    write_manifest(out, manifest)
    return out
