"""Bad inputs through the real CLI: one `error:` line, a non-zero exit, no traceback, no file left behind.

One test (or one parametrized family) per class of bad input of issue 55: spec fields, the output
guard, manifest tampering and traversal, a full disk, ragged CSV rows, duplicated columns, dtype-op
pairs PyTorch cannot run, a missing optional dependency. `test_properties.py` holds the property tests.
"""
from __future__ import annotations

import builtins
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridperf.residual_models.bundle import MANIFEST, sha256_file, shipped_models_dir, sign_manifest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "tests" / "data" / "tiny_gpt2_config.json"
NEUSIGHT_SPEC = {"Device": "NVIDIA H100 PCIe", "Dev_Mem": 80, "Mem_Bw": 2000, "Num_Sm": 114, "Core_Per_SM": 128,
                 "Freq": 1755, "SingleFLOPs": 51000, "L2Cache": 50}


def cli(monkeypatch, capsys, args) -> tuple[int, str, str]:
    """`hybridperf ARGS` in-process through `hybridperf.cli.app.main`: (exit code, stdout, stderr)."""
    from hybridperf.cli.app import main

    monkeypatch.setattr(sys, "argv", ["hybridperf", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(monkeypatch, capsys, args, match: str = "") -> str:
    """Run ARGS, assert a one-line `error:` (containing `match`) and a non-zero exit; return the line."""
    code, _, err = cli(monkeypatch, capsys, args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code not in (0, None), err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert match in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def kernels_csv(tmp_path) -> Path:
    p = tmp_path / "kernels.csv"
    pd.DataFrame({"OPName": ["linear", "add", "softmax"], "B": [4, 64, 8], "M": [128, None, None],
                  "N": [256, None, None], "K": [512, None, None], "H": [None, 1024, 512]}).to_csv(p, index=False)
    return p


def _leftovers(folder: Path, keep: set) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# ---------------------------------------------------------------------------------------------------
# spec fields


@pytest.mark.parametrize("field, value, match", [
    ("Num_Sm", 0, "Num_Sm is 0"),
    ("Dev_Mem", 0, "Dev_Mem is 0"),
    ("Mem_Bw", "fast", "Mem_Bw is 'fast'"),
    ("Mem_Bw", None, "Mem_Bw is None"),
    ("L2Cache", [50], "L2Cache is [50]"),
    ("Mem_Bw", float("nan"), "Mem_Bw is nan"),
    ("Freq", float("inf"), "Freq is inf"),
    ("Freq", 0, "Freq is 0"),
    ("SingleFLOPs", -1.0, "SingleFLOPs is -1.0"),
    ("Mem_Bw", -2000, "Mem_Bw is -2000"),
    ("Num_Sm", True, "Num_Sm is True"),
    ("Num_Sm", 108.7, "Num_Sm is 108.7"),
])
def test_bad_neusight_spec_field_is_refused(monkeypatch, capsys, tmp_path, kernels_csv, field, value, match):
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps({**NEUSIGHT_SPEC, field: value}))
    out = tmp_path / "pred.csv"
    line = refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", spec, "--output", out,
                                         "--prior-only"], match)
    assert str(spec) in line and "allowed" in line
    assert not out.exists()


@pytest.mark.parametrize("field, value", [("num_sms", 0), ("mem_bw_gbs", -1.0), ("boost_clock_mhz", "1.9 GHz"),
                                          ("peak_tflops", {"fp32": float("nan")}), ("l2_mb", None)])
def test_bad_project_spec_field_is_refused(monkeypatch, capsys, tmp_path, field, value):
    from hybridperf.devices import get_device

    d = get_device("NVIDIA H100 80GB HBM3").to_dict()
    d[field] = value
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps(d))
    refused(monkeypatch, capsys, ["predict-model", "--config", CONFIG, "--batch", 1, "--seq", 16, "--device", spec,
                                  "--prior-only", "--json"], field)


def test_spec_dataclasses_validate_on_construction():
    """The checks live in the dataclasses, so a catalog entry or a `from_dict` is held to them too."""
    from dataclasses import replace

    from hybridperf.devices import get_device, get_node
    from hybridperf.errors import SpecError

    dev = get_device("H100")
    for bad in ({"num_sms": 0}, {"num_sms": True}, {"mem_gb": float("nan")}, {"vendor": "acme"}, {"aliases": "H100"}):
        with pytest.raises(SpecError):
            replace(dev, **bad)
    assert replace(dev, num_sms=132.0).num_sms == 132 and isinstance(replace(dev, num_sms=132.0).num_sms, int)
    with pytest.raises(SpecError, match="intra_bw_gbs"):
        replace(get_node("DGX-H100"), intra_bw_gbs=-450.0)


@pytest.mark.parametrize("field, value", [("intra_bw_gbs", -450.0), ("inter_latency_us", float("nan")),
                                          ("gpus_per_node", 8.5), ("intra_topology", "ring")])
def test_bad_node_spec_is_refused(monkeypatch, capsys, tmp_path, field, value):
    from hybridperf.devices import get_node

    node = tmp_path / "node.json"
    node.write_text(json.dumps({**get_node("DGX-H100").to_dict(), field: value}))
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", "64MiB", "--gpus", 8,
                                  "--device", node, "--json"], field)


def test_string_in_an_integer_config_field_is_refused(monkeypatch, capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**json.loads(CONFIG.read_text()), "n_positions": "1024"}))
    refused(monkeypatch, capsys, ["predict-model", "--config", cfg, "--batch", 1, "--seq", 16, "--device", "H100",
                                  "--prior-only", "--json"], "n_positions")


@pytest.mark.parametrize("field, value", [("n_positions", 0), ("n_positions", -5), ("max_position_embeddings", 0)])
def test_position_table_of_no_positions_is_refused_not_unlimited(monkeypatch, capsys, tmp_path, field, value):
    cfg = tmp_path / "config.json"
    raw = {k: v for k, v in json.loads(CONFIG.read_text()).items() if k != "n_positions"}
    cfg.write_text(json.dumps({**raw, field: value}))
    refused(monkeypatch, capsys, ["predict-model", "--config", cfg, "--batch", 1, "--seq", 128, "--mode", "inf",
                                  "--device", "H100", "--prior-only", "--json"], field)


@pytest.mark.parametrize("model_type, rows", [("llama", 0), ("roberta", 2)])
def test_other_families_refuse_a_table_of_no_positions(model_type, rows):
    """Llama-likes read max_position_embeddings as given; RoBERTa's 2 rows are the padding index's."""
    from hybridperf.errors import InputError
    from hybridperf.graphs.config import config_from_dict

    cfg = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": rows}
    with pytest.raises(InputError, match="max_position_embeddings"):
        config_from_dict(cfg)


# ---------------------------------------------------------------------------------------------------
# the output guard


@pytest.mark.parametrize("pred, lo, hi", [([1.0, np.nan], None, None), ([1.0, 0.0], None, None), ([-1.0], None, None),
                                          ([np.inf], None, None), ([1.0], [2.0], [3.0]), ([1.0], [0.5], [0.9]),
                                          ([1e300], None, None), (["x"], None, None)])
def test_guard_refuses_non_finite_non_positive_and_inverted(pred, lo, hi):
    from hybridperf.guard import OutputGuardError, check_predictions

    with pytest.raises(OutputGuardError):
        check_predictions(pred, lo, hi, "test")
    check_predictions([1.0, 2.0], [0.5, 2.0], [1.0, 3.0], "test")  # ties are fine


def test_guard_stops_a_bad_prediction_before_the_file_is_written(monkeypatch, capsys, tmp_path, kernels_csv):
    from hybridperf.predictor import Predictor

    real = Predictor.predict

    def broken(self, *a, **kw):
        res = real(self, *a, **kw)
        res.loc[1, "hi_ms"] = res.loc[1, "pred_ms"] / 2  # an inverted interval
        return res

    monkeypatch.setattr(Predictor, "predict", broken)
    out = tmp_path / "pred.csv"
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", out, "--prior-only"],
            "row 2")
    assert _leftovers(tmp_path, {"kernels.csv"}) == []


def test_guard_on_collective_and_model_output(monkeypatch, capsys):
    import hybridperf.residual_models.collectives as coll
    from hybridperf.graphs.compose import ModelPrediction

    monkeypatch.setattr(coll, "predict_collective", lambda *a, **kw: {"ms": -1.364, "lo_ms": -2.0, "hi_ms": 1.0})
    line = refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", 65536,
                                         "--gpus", 8, "--device", "DGX-H100", "--json"], "all_reduce")
    assert "row" not in line  # one prediction: no row number to name
    monkeypatch.setattr(ModelPrediction, "to_dict", lambda self: {"e2e_ms": float("nan"), "lo_ms": 1.0, "hi_ms": 2.0,
                                                                  "fw_ms": 1.0, "bw_ms": 0.0})
    refused(monkeypatch, capsys, ["predict-model", "--config", CONFIG, "--batch", 1, "--seq", 16, "--device", "H100",
                                  "--prior-only", "--json"], "nan")


def test_absurd_shape_is_refused_not_printed_as_inf(monkeypatch, capsys, tmp_path):
    big = tmp_path / "big.csv"
    big.write_text("OPName,B,M,N,K\nlinear,1e300,1e300,4,4\n")
    refused(monkeypatch, capsys, ["predict-kernels", big, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--prior-only"], "2^40")


# ---------------------------------------------------------------------------------------------------
# bundles: manifest tampering, traversal, device binding, model outputs


@pytest.fixture
def shipped_copy(tmp_path) -> Path:
    src = shipped_models_dir() / "kernels"
    if not (src / MANIFEST).is_file():
        pytest.skip("no shipped kernel bundle in exported_models/kernels")
    dst = tmp_path / "bundle"
    shutil.copytree(src, dst)
    return dst


def _manifest(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text())


def _write(root: Path, m: dict, sign: bool = True) -> None:
    (root / MANIFEST).write_text(json.dumps(sign_manifest(m) if sign else m))


@pytest.mark.parametrize("edit", [
    lambda m: m["device_bias"][next(iter(m["device_bias"]))].update({"linear:fp32": 50.0}),
    lambda m: m.pop("op_classes"),
    lambda m: m.pop("content_sha256"),
])
def test_edited_manifest_is_refused(monkeypatch, capsys, tmp_path, kernels_csv, shipped_copy, edit):
    m = _manifest(shipped_copy)
    edit(m)
    _write(shipped_copy, m, sign=False)
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--model-bundle", shipped_copy], "content_sha256")


@pytest.mark.parametrize("name", ["../outside.onnx", "/etc/passwd", "sub/../../outside.onnx", "link.onnx"])
def test_manifest_file_names_stay_inside_the_bundle(monkeypatch, capsys, tmp_path, kernels_csv, shipped_copy, name):
    outside = tmp_path / "outside.onnx"
    first = next(n for n in _manifest(shipped_copy)["files"] if n.endswith(".onnx"))
    shutil.copy(shipped_copy / first, outside)
    if name == "link.onnx":
        os.symlink(outside, shipped_copy / "link.onnx")
    m = _manifest(shipped_copy)
    m["files"][name] = sha256_file(outside) if name != "/etc/passwd" else "0" * 64
    _write(shipped_copy, m)
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--model-bundle", shipped_copy], "bundle")


@pytest.mark.parametrize("edit, match", [
    (lambda m, outside: m["files"].update({"../outside.onnx": sha256_file(outside)}), "plain name"),
    (lambda m, outside: m["constants"].update(eff_nvlink=50.0), "content_sha256"),
])
def test_collectives_manifest_is_verified_and_confined(monkeypatch, capsys, tmp_path, edit, match):
    from hybridperf.residual_models.collectives import default_bundle_dir

    if not (default_bundle_dir() / MANIFEST).is_file():
        pytest.skip("no shipped collectives bundle")
    bundle = tmp_path / "coll"
    shutil.copytree(default_bundle_dir(), bundle)
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(b"not a model")
    m = _manifest(bundle)
    edit(m, outside)
    _write(bundle, m, sign=match != "content_sha256")  # a traversal re-signed: confinement still refuses it
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", 65536, "--gpus", 8,
                                  "--device", "DGX-H100", "--model-bundle", bundle, "--json"], match)


def test_adapted_bundle_is_bound_to_its_device(monkeypatch, capsys, tmp_path, kernels_csv, shipped_copy):
    m = _manifest(shipped_copy)
    m["adaptation"] = {"device": "Tesla T4", "k": 8, "corrections": {}, "intervals": {}}
    _write(shipped_copy, m)
    out = tmp_path / "o.csv"
    args = ["predict-kernels", kernels_csv, "--device", "H100", "--output", out, "--model-bundle", shipped_copy]
    refused(monkeypatch, capsys, args, "adapted to Tesla T4")
    assert not out.exists()
    code, _, err = cli(monkeypatch, capsys, [*args, "--allow-other-device"])
    assert code == 0 and out.is_file(), err


def _constant_onnx(value: float, width: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=1), helper.make_node("Mul", ["s", "zero"], ["z"]),
             helper.make_node("Add", ["z", "c"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0.0], np.float32), "zero"),
             numpy_helper.from_array(np.array([value], np.float32), "c")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("value", [float("nan"), 40.0])
def test_model_output_out_of_range_is_refused(monkeypatch, capsys, tmp_path, kernels_csv, shipped_copy, value):
    pytest.importorskip("onnx")
    from hybridperf.residual_models.features import FEATURE_NAMES

    m = _manifest(shipped_copy)
    used = {mem["file"] for spec in m["op_classes"].values() for mem in spec["members"]}
    for name in used:  # every member, so whichever op class a row hits
        (shipped_copy / name).write_bytes(_constant_onnx(value, len(FEATURE_NAMES)))
        m["files"][name] = sha256_file(shipped_copy / name)
    _write(shipped_copy, m)
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--model-bundle", shipped_copy, "--timing", "kernel"], "log residual")


@pytest.mark.parametrize("cmd", [
    ["predict-kernels", "{csv}", "--device", "H100", "--output", "{out}"],
    ["predict-model", "--config", str(CONFIG), "--batch", "1", "--seq", "16", "--device", "H100"],
    ["compare", "--config", str(CONFIG), "--batch", "1", "--seq", "16", "--devices", "H100"],
    ["predict-collective", "--collective", "all_reduce", "--bytes", "65536", "--gpus", "8", "--device", "DGX-H100"],
])
def test_prior_only_with_a_model_bundle_is_refused(monkeypatch, capsys, tmp_path, kernels_csv, cmd):
    args = [a.format(csv=kernels_csv, out=tmp_path / "o.csv") for a in cmd]
    refused(monkeypatch, capsys, [*args, "--prior-only", "--model-bundle", tmp_path], "mutually exclusive")


# ---------------------------------------------------------------------------------------------------
# disk full, unwritable paths, partial outputs


def test_disk_full_is_one_line(monkeypatch, capsys, kernels_csv):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", "/dev/full",
                                  "--prior-only"], "No space left on device")


def test_a_failed_write_leaves_no_partial_file(monkeypatch, capsys, tmp_path, kernels_csv):
    """ENOSPC half-way through the CSV: the target is never created and the temporary file is removed."""
    import errno

    real = pd.DataFrame.to_csv

    def half_then_full(self, path=None, *a, **kw):
        real(self.head(1), path, *a, **kw)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_full)
    import hybridperf.csvio as csvio

    monkeypatch.setattr(csvio, "fast_to_csv", lambda df, path: half_then_full(df, path, index=False))
    out = tmp_path / "pred.csv"
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", out, "--prior-only"],
            "No space left on device")
    assert _leftovers(tmp_path, {"kernels.csv"}) == []


def test_output_under_a_file_is_one_line(monkeypatch, capsys, tmp_path, kernels_csv):
    (tmp_path / "afile").write_text("x")
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output",
                                  tmp_path / "afile" / "pred.csv", "--prior-only"], "Not a directory")


def test_a_full_disk_names_the_output_and_a_read_only_disk_says_so(monkeypatch, tmp_path):
    from hybridperf.atomic import atomic_path, check_writable

    target = tmp_path / "pred.csv"
    with pytest.raises(OSError) as e:
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")  # a write's ENOSPC names no file
    assert e.value.filename == str(target) and _leftovers(tmp_path, set()) == []

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setattr(os, "statvfs", lambda *a: ReadOnly())
    with pytest.raises(OSError, match="Read-only file system") as e:
        check_writable(target)
    assert e.value.filename == str(target)


def test_a_failed_bundle_export_leaves_no_folder(tmp_path):
    from hybridperf.atomic import atomic_dir

    target = tmp_path / "adapted"
    with pytest.raises(OSError):
        with atomic_dir(target) as tmp:
            (tmp / "a.onnx").write_bytes(b"x")
            raise OSError(28, "No space left on device")
    assert _leftovers(tmp_path, set()) == []
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):  # a folder of the user's own files is never replaced
        with atomic_dir(tmp_path / "mine"):
            pass
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


# ---------------------------------------------------------------------------------------------------
# malformed tables


@pytest.mark.parametrize("text, match", [
    ("OPName,B,H\nadd,1,2,3\nadd,3,4,5\n", "more fields than the header"),
    ("OPName,B,H\nadd,1,2\nadd,3,4,5\n", "malformed CSV"),
    ("OPName,B,H\nadd,True,4\n", "got True"),
    ("OPName,B,H,H\nadd,8,1024,2048\n", "'H' appears more than once"),
    ("OPName,B,M,N\nlinear,1,16,16\n", "the CSV has no K column, which linear rows need"),
])
def test_malformed_table_is_refused(monkeypatch, capsys, tmp_path, text, match):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    refused(monkeypatch, capsys, ["predict-kernels", bad, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--prior-only"], match)
    assert not (tmp_path / "o.csv").exists()


def test_undecodable_table_is_refused(monkeypatch, capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfeOPName,B,H\n\x00\x81,1,2\n")
    refused(monkeypatch, capsys, ["predict-kernels", bad, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--prior-only"], "bad.csv")


def test_header_only_calibration_is_refused(monkeypatch, capsys, tmp_path, kernels_csv):
    cal = tmp_path / "cal.csv"
    cal.write_text("OPName,B,M,N,K,H,Latency\n")
    refused(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--calibration", cal], "no measured rows")


# ---------------------------------------------------------------------------------------------------
# dtype-op pairs PyTorch cannot run


@pytest.mark.parametrize("op, dtype", [("add", "fp8"), ("gelu", "fp8"), ("softmax", "int8"), ("ln", "fp4")])
def test_matmul_only_dtype_on_another_op_is_refused(monkeypatch, capsys, tmp_path, op, dtype):
    inp = tmp_path / "k.csv"
    inp.write_text(f"OPName,B,H,dtype\n{op},8,1024,{dtype}\n")
    refused(monkeypatch, capsys, ["predict-kernels", inp, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--prior-only"], f"no {dtype}")


# ---------------------------------------------------------------------------------------------------
# a missing optional dependency


def test_plot_without_matplotlib_is_one_line(monkeypatch, capsys, tmp_path):
    real_import = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **kw)

    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out, plot = tmp_path / "rank.csv", tmp_path / "rank.png"
    refused(monkeypatch, capsys, ["compare", "--config", CONFIG, "--batch", 1, "--seq", 16, "--devices", "H100,L4",
                                  "--prior-only", "--output", out, "--plot", plot], "matplotlib")
    assert not out.exists() and not plot.exists()


# ---------------------------------------------------------------------------------------------------
# arguments a newcomer gets wrong


@pytest.mark.parametrize("args, match", [
    (["--bytes", "1e400", "--gpus", 8], "finite"),
    (["--bytes", "0.5", "--gpus", 8], "at least one byte"),
    (["--bytes", "1.5", "--gpus", 8], "whole number of bytes"),
    (["--bytes", "64MiB", "--gpus", 1], "--gpus must be >= 2"),
    (["--bytes", "64MiB", "--gpus", 9], "whole nodes of 8"),
    (["--bytes", "1e30", "--gpus", 8], "at most 2^50 bytes"),
])
def test_collective_arguments_are_refused_in_one_line(monkeypatch, capsys, args, match):
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--device", "DGX-H100", *args],
            match)


def test_a_node_size_given_for_fewer_ranks_places_them_in_one_node(monkeypatch, capsys):
    """`--gpus 2 --gpus-per-node 8` on an 8-GPU node (its size, as a cluster's inventory states it) is the
    2-rank collective inside one node, not an error."""
    def last(per_node):
        code, out, err = cli(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--device",
                                                   "DGX-H100", "--bytes", "64MiB", "--gpus", 2, "--gpus-per-node",
                                                   per_node, "--json"])
        assert code in (0, None), err
        return json.loads(out.strip().splitlines()[-1])
    assert last(8) == last(2)
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--device", "DGX-H100",
                                  "--bytes", "64MiB", "--gpus", 2, "--gpus-per-node", 16], "has 8 GPUs")


def test_a_calibration_without_rows_is_refused(monkeypatch, capsys, tmp_path):
    """Calibrating by no measurement is a mistake to say (an empty table to predict gives an empty output)."""
    measured = tmp_path / "measured.csv"
    measured.write_text("collective,bytes,gpus,latency_ms\n")
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--device", "DGX-H100",
                                  "--bytes", 65536, "--gpus", 8, "--calibration", measured],
            "calibration CSV has a header but no rows")
    runs = tmp_path / "runs.csv"
    runs.write_text("backend,model_path,system,mode,isl,osl,silicon_ttft_ms,silicon_tpot_ms\n")
    refused(monkeypatch, capsys, ["predict-serving", "--rows", runs, "--configs", tmp_path, "--output",
                                  tmp_path / "out.csv", "--calibration", runs],
            "calibration CSV has a header but no rows")
    assert not (tmp_path / "out.csv").exists()


def test_kernels_input_directory_is_refused_and_parquet_output_is_parquet(monkeypatch, capsys, tmp_path, kernels_csv):
    refused(monkeypatch, capsys, ["predict-kernels", tmp_path, "--device", "H100", "--output", tmp_path / "o.csv",
                                  "--prior-only"], "is a directory")
    out = tmp_path / "o.parquet"
    code, _, err = cli(monkeypatch, capsys, ["predict-kernels", kernels_csv, "--device", "H100", "--output", out,
                                             "--prior-only"])
    assert code in (0, None), err
    assert len(pd.read_parquet(out)) == 3


def test_serving_calibration_of_one_run_needs_runs_of_its_deployment(monkeypatch, capsys, tmp_path):
    measured = tmp_path / "measured.csv"
    measured.write_text("system\nh100_sxm\n")
    one = ["predict-serving", "--config", REPO / "examples" / "configs" / "llama3_8b.json", "--device", "h100_sxm",
           "--engine", "vllm", "--isl", 128, "--osl", 16, "--concurrency", 4, "--calibration", measured]
    refused(monkeypatch, capsys, one, "calibration runs lack column(s) backend")
    pd.DataFrame([{"system": "b200_sxm", "backend": "vllm", "model_path": "x/y", "mode": "agg", "isl": 128,
                   "osl": 16, "silicon_ttft_ms": 5.0, "silicon_tpot_ms": 1.0}]).to_csv(measured, index=False)
    refused(monkeypatch, capsys, one, "ran vllm on NVIDIA H100")
    pd.DataFrame([{"system": "h100_sxm", "backend": "vllm", "model_path": "x/y", "mode": "disagg", "isl": 128,
                   "osl": 16, "silicon_ttft_ms": 5.0, "silicon_tpot_ms": 1.0, "prefill_tp_size": 1,
                   "decode_tp_size": 1}]).to_csv(measured, index=False)
    refused(monkeypatch, capsys, one, "no aggregated run")


def test_serving_ep_on_a_dense_model_and_zero_on_inference_are_refused(monkeypatch, capsys):
    refused(monkeypatch, capsys, ["predict-serving", "--config", REPO / "examples" / "configs" / "llama3_8b.json",
                                  "--device", "h100_sxm", "--engine", "vllm", "--isl", 128, "--osl", 16,
                                  "--concurrency", 4, "--ep", 8], "no experts")
    refused(monkeypatch, capsys, ["predict-model", "--config", CONFIG, "--batch", 2, "--seq", 16, "--mode", "inf",
                                  "--device", "H100", "--zero", 2, "--prior-only"], "ZeRO-2")


def test_serving_says_when_weights_run_weight_only(monkeypatch, capsys):
    """fp4 weights on a GPU without fp4 tensor cores are priced weight-only, and the CLI says so on stderr."""
    args = ["predict-serving", "--config", REPO / "examples" / "configs" / "llama3_8b.json", "--engine", "vllm",
            "--isl", 128, "--osl", 16, "--concurrency", 4, "--precision", "fp4", "--json", "--device"]
    code, _, err = cli(monkeypatch, capsys, [*args, "h100_sxm"])
    assert code in (0, None) and "no fp4 tensor cores" in err, err
    code, _, err = cli(monkeypatch, capsys, [*args, "b200_sxm"])
    assert code in (0, None) and "tensor cores" not in err, err


# ---------------------------------------------------------------------------------------------------
# --plot and --output paths, refused before any work or output


def _plotting_commands(tmp_path):
    llama = tmp_path / "llama.json"
    llama.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
                                 "num_hidden_layers": 2, "intermediate_size": 1024, "vocab_size": 1000}))
    return {"sweep-serving": ["sweep-serving", "--config", llama, "--devices", "h100_sxm", "--engine", "vllm",
                              "--isl", 128, "--osl", 16, "--tp", 1, "--concurrency", 1],
            "compare": ["compare", "--config", CONFIG, "--batch", 1, "--seq", 16, "--devices", "H100",
                        "--prior-only"]}


@pytest.mark.parametrize("command", ["sweep-serving", "compare"])
@pytest.mark.parametrize("plot, output, match", [
    ("p.txt", "out.csv", "matplotlib cannot write .txt files"),
    ("file/p.png", "out.csv", "Not a directory"),
    ("p.png", "file/out.csv", "Not a directory"),
    ("p.png", "folder", "Is a directory"),
])
def test_bad_plot_or_output_path_is_refused_before_anything_is_written(monkeypatch, capsys, tmp_path, command, plot,
                                                                       output, match):
    pytest.importorskip("matplotlib")
    args = _plotting_commands(tmp_path)[command]
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    before = sorted(tmp_path.rglob("*"))
    code, _, err = cli(monkeypatch, capsys, [*args, "--output", tmp_path / output, "--plot", tmp_path / plot])
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert match in err
    assert sorted(tmp_path.rglob("*")) == before  # the CSV was not written before the plot failed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_plot_into_a_read_only_folder_is_refused_first(monkeypatch, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    code, _, err = cli(monkeypatch, capsys, [*_plotting_commands(tmp_path)["sweep-serving"], "--output",
                                             tmp_path / "s.csv", "--plot", ro / "p.png"])
    assert code == 2 and "Permission denied" in err and not (tmp_path / "s.csv").exists()


def test_plot_path_that_matplotlib_writes_is_accepted(monkeypatch, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, _, err = cli(monkeypatch, capsys, [*_plotting_commands(tmp_path)["sweep-serving"], "--output",
                                             tmp_path / "s.csv", "--plot", tmp_path / "new" / "p.SVG"])
    assert code == 0, err
    assert (tmp_path / "new" / "p.SVG").read_text().lstrip().startswith("<?xml")
    assert not [p for p in (tmp_path / "new").iterdir() if p.name != "p.SVG"]  # no temporary file left


def test_parallel_decode_is_refused_before_the_device_note(monkeypatch, capsys):
    """A GPU name given where a node is wanted prints a note; a parallel decode is refused before it, in one line."""
    refused(monkeypatch, capsys, ["predict-model", "--config", CONFIG, "--batch", 1, "--seq", 16, "--mode", "decode",
                                  "--tp", 2, "--device", "H100"], "one GPU")
