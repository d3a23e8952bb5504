"""Save an adapted predictor as a bundle: the zero-shot ONNX files, one small ONNX graph per op class
for the linear transfer correction, and a manifest with the re-calibrated intervals."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from hybridperf.errors import InputError
from hybridperf.residual_models.bundle import MANIFEST, write_manifest

CORRECTION_OPSET = 13
CORRECTION_IR_VERSION = 8  # readable by every onnxruntime since 1.10


def linear_onnx(coef: np.ndarray, intercept: float):
    """ONNX graph x (rows, F) -> x @ coef + intercept, shape (rows, 1)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    W = numpy_helper.from_array(np.asarray(coef, np.float32).reshape(-1, 1), "W")
    b = numpy_helper.from_array(np.asarray([intercept], np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["correction"])],
        "transfer_correction",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, len(coef)])],
        [helper.make_tensor_value_info("correction", TensorProto.FLOAT, [None, 1])],
        initializer=[W, b],
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
        (out / name).write_bytes(linear_onnx(corr.coef, corr.intercept).SerializeToString())
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
