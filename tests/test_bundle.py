"""Model bundles: ONNX-vs-native parity, tamper detection, determinism of training, intervals."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import TINY_DEVICES, random_shapes, tiny_config, train_tiny
from hybridperf.datasets.schema import canonicalize
from hybridperf.errors import ModelBundleError
from hybridperf.predictor import Predictor
from hybridperf.residual_models.bundle import MANIFEST, bias_key, load_bundle, sha256_file, sign_manifest
from hybridperf.residual_models.features import FEATURE_NAMES


def _manifest(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text())


def _write_manifest(root: Path, m: dict) -> None:
    (root / MANIFEST).write_text(json.dumps(sign_manifest(m), indent=1))


def _onnx_files(root: Path) -> list[str]:
    return sorted(n for n in _manifest(root)["files"] if n.endswith(".onnx"))


def _eval_rows(n: int = 60, seed: int = 7) -> pd.DataFrame:
    """Canonical rows of every op the tiny bundle knows, plus a few shapes far outside its range."""
    raw = random_shapes(np.random.default_rng(seed), n)
    extra = pd.DataFrame([
        {"OPName": "linear", "B": 64, "M": 8192, "N": 16384, "K": 16384, "H": np.nan},
        {"OPName": "bmm", "B": 1, "M": 1, "N": 1, "K": 1, "H": np.nan},
        {"OPName": "add", "B": 1 << 20, "M": np.nan, "N": np.nan, "K": np.nan, "H": 8192},
        {"OPName": "softmax", "B": 1, "M": np.nan, "N": np.nan, "K": np.nan, "H": 1},
        {"OPName": "gelu", "B": 1000, "M": np.nan, "N": np.nan, "K": np.nan, "H": 1000},  # class seen, op not
    ])
    return canonicalize(pd.concat([raw, extra], ignore_index=True))


# ---------------------------------------------------------------------------------------------------
# the bundle on disk


def test_bundle_manifest_lists_its_files(tiny_bundle):
    m = _manifest(tiny_bundle)
    assert m["kind"] == "kernels"
    assert m["feature_names"] == list(FEATURE_NAMES)
    assert m["files"], "no ONNX files"
    for name, digest in m["files"].items():
        assert sha256_file(tiny_bundle / name) == digest
    assert set(m["op_classes"]) == {"bmm", "linear", "elementwise", "softmax", "layernorm"}
    for spec in m["op_classes"].values():
        for member in spec["members"]:
            assert member["file"] in m["files"]
            assert member["weight"] > 0
    assert sorted(m["training_data"]["devices"]) == sorted(TINY_DEVICES)
    b = load_bundle(tiny_bundle, expect_kind="kernels", feature_names=FEATURE_NAMES)
    assert set(b.sessions) == set(_onnx_files(tiny_bundle))


# ---------------------------------------------------------------------------------------------------
# ONNX vs native


@pytest.fixture(scope="module")
def native_fit(tiny_table):
    """fit_all on the tiny table with the tiny bundle's config: the very models the bundle exported."""
    pytest.importorskip("torch")
    pytest.importorskip("xgboost")
    import torch

    torch.set_num_threads(1)
    from hybridperf.training.kernels import fit_all

    return fit_all(tiny_table, tiny_config(0))


@pytest.mark.parametrize("kind", ["mlp", "xgb"])
def test_onnx_matches_native_per_learner(native_fit, tiny_table, tmp_path, kind):
    import onnxruntime as ort

    from hybridperf.training.kernel_data import featurize

    oc = "linear"
    model = native_fit[oc]["models"][kind]
    X = featurize(tiny_table[tiny_table["op_class"] == oc]).X
    path = tmp_path / f"{oc}_{kind}.onnx"
    model.export_onnx(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = np.asarray(sess.run(None, {sess.get_inputs()[0].name: X})[0], dtype=np.float64).reshape(len(X), -1)
    if kind == "mlp":
        assert out.shape[1] == model.n_seeds
        np.testing.assert_allclose(out, model.predict_members(X), rtol=1e-5, atol=1e-6)
    else:
        assert out.shape[1] == 1
    onnx_r = out.mean(axis=1)
    native_r = model.predict(X)
    # on the latency scale: prior * exp(residual)
    np.testing.assert_allclose(np.exp(onnx_r), np.exp(native_r), rtol=1e-5)


@pytest.fixture(scope="module")
def blended_bundle(native_fit, tiny_bundle, tiny_table, tmp_path_factory):
    """A bundle exported from `native_fit` with an MLP/XGBoost blend forced into every op class (the tiny
    training data makes choose_blend pick XGBoost alone, which would leave the MLP ONNX path untested)."""
    from hybridperf.training.kernels import export_bundle

    intervals = {oc: spec["interval"] for oc, spec in _manifest(tiny_bundle)["op_classes"].items()}
    choice = {oc: {"mlp_weight": 0.5, "shrink": 0.8} for oc in native_fit}
    out = tmp_path_factory.mktemp("blended") / "kernels"
    export_bundle(native_fit, choice, intervals, out, tiny_table, tiny_config(0))
    return out


def test_predictor_matches_native_blend(native_fit, blended_bundle, tiny_table):
    """Predictor (onnxruntime) == prior x exp(sum of manifest weights x native learner predictions
    + the training device's bias)."""
    from hybridperf.training.kernel_data import featurize

    m = _manifest(blended_bundle)
    kinds = {member["kind"] for spec in m["op_classes"].values() for member in spec["members"]}
    assert kinds == {"mlp", "xgb"}
    p = Predictor.load(blended_bundle)
    for dev, rows in tiny_table.groupby("device"):
        rows = rows.reset_index(drop=True)
        fz = featurize(rows)
        expect_r = np.zeros(len(rows))
        for oc, spec in m["op_classes"].items():
            mask = (rows["op_class"] == oc).to_numpy()
            for member in spec["members"]:
                expect_r[mask] += member["weight"] * native_fit[oc]["models"][member["kind"]].predict(fz.X[mask])
        expect_r += np.array([m["device_bias"][dev][bias_key(oc)] for oc in rows["op_class"]])
        out = p.predict(rows, dev)
        np.testing.assert_allclose(out["prior_ms"], fz.prior_ms, rtol=1e-12)
        np.testing.assert_allclose(out["pred_ms"], fz.prior_ms * np.exp(expect_r), rtol=1e-5)


def test_refit_reproduces_the_shipped_models(native_fit, tiny_bundle, tiny_table):
    """train_kernel_bundle's final refit is fit_all on the same data: the bundle equals the native models."""
    from hybridperf.training.kernel_data import featurize

    m = _manifest(tiny_bundle)
    b = load_bundle(tiny_bundle)
    fz = featurize(tiny_table)
    for oc, spec in m["op_classes"].items():
        mask = (fz.rows["op_class"] == oc).to_numpy()
        for member in spec["members"]:
            onnx_r = b.run(member["file"], fz.X[mask]).mean(axis=1)
            native_r = native_fit[oc]["models"][member["kind"]].predict(fz.X[mask])
            np.testing.assert_allclose(np.exp(onnx_r), np.exp(native_r), rtol=1e-5)


def test_mlp_is_stable_on_a_feature_constant_in_training(tiny_table):
    pytest.importorskip("torch")
    from hybridperf.residual_models.mlp import MLPResidual
    from hybridperf.training.kernel_data import featurize

    fz = featurize(tiny_table[tiny_table["op_class"] == "linear"])
    j = FEATURE_NAMES.index("dtype_bytes")
    assert np.unique(fz.X[:, j]).tolist() == [4.0]
    model = MLPResidual(hidden=(16,), n_seeds=2, epochs=30, seed=0).fit(fz.X, fz.y)
    X16 = fz.X.copy()
    X16[:, j] = 2.0  # the same kernels in fp16: a feature the model never saw vary
    shift = np.abs(model.predict(X16) - model.predict(fz.X))
    assert shift.max() < 1.0, f"log-residual moved by up to {shift.max():.1f}"


# ---------------------------------------------------------------------------------------------------
# tampering


def test_flipped_byte_in_onnx_is_refused(bundle_copy):
    f = bundle_copy / _onnx_files(bundle_copy)[0]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(ModelBundleError, match="sha256"):
        Predictor.load(bundle_copy)


def test_malformed_manifest_json_is_refused(bundle_copy):
    text = (bundle_copy / MANIFEST).read_text()
    (bundle_copy / MANIFEST).write_text(text[: len(text) // 2])
    with pytest.raises(ModelBundleError):
        Predictor.load(bundle_copy)


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"format": "something else"}'])
def test_unreadable_or_foreign_manifest_is_refused(bundle_copy, content):
    (bundle_copy / MANIFEST).write_bytes(content)
    with pytest.raises(ModelBundleError):
        Predictor.load(bundle_copy)


def _set_interval_q_lo(m, v):
    m["op_classes"]["linear"]["interval"]["q_lo"] = v


def _set_first_weight(m, v):
    next(spec for spec in m["op_classes"].values() if spec["members"])["members"][0]["weight"] = v


@pytest.mark.parametrize("edit, match", [
    (lambda m: _set_interval_q_lo(m, "abc"), "interval.q_lo is 'abc'"),
    (lambda m: _set_interval_q_lo(m, float("nan")), "interval.q_lo"),
    (lambda m: _set_interval_q_lo(m, 9.0), "q_lo > q_hi"),
    (lambda m: _set_first_weight(m, "x"), "weight is 'x'"),
    (lambda m: _set_first_weight(m, -1.0), "weight"),
    (lambda m: m["op_classes"]["linear"]["feature_range"].update(lo=[0.0]), "feature_range.lo"),
    (lambda m: m["device_bias"]["Tesla T4"].update({"linear:fp32": "abc"}), r"device_bias\['Tesla T4'\].linear:fp32"),
    (lambda m: m.update(device_bias=[1, 2]), "device_bias is not"),
    (lambda m: m["op_classes"]["linear"]["interval"].update(
        by_floor_share={"edges": [0.5], "q_lo": [-0.1], "q_hi": [0.1, 0.2], "q_center": [0.0, 0.0]}),
     r"by_floor_share.q_lo is not a list of 2"),
    (lambda m: m["op_classes"]["linear"]["interval"].update(
        by_floor_share={"edges": [0.5], "q_lo": [-0.1, 0.3], "q_hi": [0.1, 0.2], "q_center": [0.0, 0.0]}),
     "a bin with q_lo > q_hi"),
    (lambda m: m["op_classes"]["linear"]["interval"].update(
        by_floor_share={"edges": [0.5, 0.2], "q_lo": [0, 0, 0], "q_hi": [0, 0, 0], "q_center": [0, 0, 0]}),
     "edges are not increasing"),
])
def test_edited_manifest_numbers_are_refused(bundle_copy, edit, match):
    """A manifest whose numbers are not finite numbers of the right shape fails at load, in one line,
    instead of deep inside a prediction (or silently, for a feature range that broadcasts)."""
    m = _manifest(bundle_copy)
    edit(m)
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError, match=match):
        Predictor.load(bundle_copy)


def test_missing_manifest_is_refused(bundle_copy):
    (bundle_copy / MANIFEST).unlink()
    with pytest.raises(ModelBundleError):
        Predictor.load(bundle_copy)


def test_deleted_listed_file_is_refused(bundle_copy):
    (bundle_copy / _onnx_files(bundle_copy)[-1]).unlink()
    with pytest.raises(ModelBundleError, match="missing"):
        Predictor.load(bundle_copy)


def test_random_bytes_with_matching_sha_is_refused(bundle_copy):
    name = _onnx_files(bundle_copy)[0]
    f = bundle_copy / name
    f.write_bytes(np.random.default_rng(0).bytes(4096))
    m = _manifest(bundle_copy)
    m["files"][name] = sha256_file(f)
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError, match="not a loadable ONNX"):
        Predictor.load(bundle_copy)


def test_feature_schema_mismatch_is_refused(bundle_copy):
    m = _manifest(bundle_copy)
    m["feature_names"] = m["feature_names"][::-1]
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError, match="feature schema"):
        Predictor.load(bundle_copy)
    m["feature_names"] = m["feature_names"][:-1]
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError):
        Predictor.load(bundle_copy)


def test_wrong_kind_and_version_are_refused(bundle_copy):
    m = _manifest(bundle_copy)
    _write_manifest(bundle_copy, {**m, "kind": "collectives"})
    with pytest.raises(ModelBundleError, match="kind"):
        Predictor.load(bundle_copy)
    _write_manifest(bundle_copy, {**m, "format_version": 999})
    with pytest.raises(ModelBundleError):
        Predictor.load(bundle_copy)


def test_nonexistent_bundle_dir_is_refused(tmp_path):
    with pytest.raises(ModelBundleError):
        Predictor.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelBundleError):
        Predictor.load(tmp_path / "empty")


def test_member_file_not_listed_is_refused(bundle_copy):
    m = _manifest(bundle_copy)
    oc = next(iter(m["op_classes"]))
    m["op_classes"][oc]["members"][0]["file"] = "not_listed.onnx"
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError):
        p = Predictor.load(bundle_copy)
        p.predict(_eval_rows(10), "Tesla T4")


def _tiny_onnx(n_inputs: int) -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, n_inputs])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def test_swapped_onnx_with_wrong_input_width_is_refused(bundle_copy):
    name = _onnx_files(bundle_copy)[0]
    (bundle_copy / name).write_bytes(_tiny_onnx(3))
    m = _manifest(bundle_copy)
    m["files"][name] = sha256_file(bundle_copy / name)
    _write_manifest(bundle_copy, m)
    with pytest.raises(ModelBundleError):
        p = Predictor.load(bundle_copy)
        p.predict(_eval_rows(10), "Tesla T4")


# ---------------------------------------------------------------------------------------------------
# determinism


def _predictions(bundle: Path, rows: pd.DataFrame) -> np.ndarray:
    p = Predictor.load(bundle)
    return np.concatenate([p.predict(rows, d)[["pred_ms", "lo_ms", "hi_ms"]].to_numpy()
                           for d in ("Tesla T4", "NVIDIA H100 80GB HBM3")])


def test_training_is_deterministic(tiny_bundle, tiny_table, tmp_path):
    rows = _eval_rows()
    again = train_tiny(tmp_path / "again", seed=0, table=tiny_table)
    np.testing.assert_allclose(_predictions(again, rows), _predictions(tiny_bundle, rows), rtol=1e-6)
    assert _manifest(again)["op_classes"] == _manifest(tiny_bundle)["op_classes"]  # blend, intervals, ranges
    other = train_tiny(tmp_path / "other", seed=1, table=tiny_table)
    assert not np.allclose(_predictions(other, rows), _predictions(tiny_bundle, rows), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------
# intervals


@pytest.mark.parametrize("device", [*TINY_DEVICES, "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"])
def test_intervals_bracket_the_prediction(tiny_bundle, device):
    out = Predictor.load(tiny_bundle).predict(_eval_rows(), device)
    for c in ("prior_ms", "pred_ms", "lo_ms", "hi_ms"):
        assert np.isfinite(out[c]).all() and (out[c] > 0).all(), c
    assert (out["lo_ms"] <= out["pred_ms"]).all()
    assert (out["pred_ms"] <= out["hi_ms"]).all()
    assert (out["ood"] >= 0).all()


def test_intervals_widen_out_of_range(tiny_bundle):
    out = Predictor.load(tiny_bundle).predict(_eval_rows(), "Tesla T4")
    log_width = np.log(out["hi_ms"] / out["lo_ms"])
    huge = (out["op"] == "linear") & (out["M"] == 64 * 8192)  # B=64, M=8192: one GEMM of 64*8192 rows
    assert out.loc[huge, "ood"].iloc[0] > 0
    inside = (out["op_class"] == "linear") & (out["ood"] == 0)
    assert inside.any()
    assert log_width[huge].iloc[0] > log_width[inside].max()


def test_a_device_feature_that_never_varied_in_training_does_not_count_as_out_of_range():
    """A bundle fitted on one GPU has one value of `power_capped`; another GPU's value says only that
    the GPU is new (the device-level interval term's job), while a kernel feature out of range counts."""
    from hybridperf.predictor import OOD_CLIP, ood_score
    from hybridperf.residual_models.features import FEATURE_NAMES

    n = len(FEATURE_NAMES)
    lo, hi = np.zeros(n), np.ones(n)
    cap, dtype = FEATURE_NAMES.index("power_capped"), FEATURE_NAMES.index("dtype_bytes")
    hi[cap] = hi[dtype] = 0.0  # never varied in training
    rng = {"lo": lo, "hi": hi, "scale": np.full(n, 1e-3)}
    X = np.full((2, n), 0.5)
    X[:, cap] = [1.0, 0.0]
    X[:, dtype] = [0.0, 1.0]  # a new dtype is a new kind of kernel
    np.testing.assert_allclose(ood_score(X, rng), [0.0, OOD_CLIP])
    np.testing.assert_allclose(ood_score(X, rng, skip_device_constants=False), [OOD_CLIP, OOD_CLIP])


def test_predict_keeps_row_order_and_count(tiny_bundle):
    rows = _eval_rows()
    shuffled = rows.sample(frac=1.0, random_state=3).reset_index(drop=True)
    p = Predictor.load(tiny_bundle)
    a = p.predict(rows, "NVIDIA L4")
    b = p.predict(shuffled, "NVIDIA L4")
    assert len(a) == len(rows)
    key = ["op", "B", "M", "N", "K", "H"]
    merged = a.merge(b, on=key, suffixes=("", "_b"))
    np.testing.assert_allclose(merged["pred_ms"], merged["pred_ms_b"], rtol=1e-6)
    # a row predicted alone gets the same answer as in a batch
    one = p.predict(rows.iloc[[5]], "NVIDIA L4")
    assert one["pred_ms"].iloc[0] == pytest.approx(a["pred_ms"].iloc[5], rel=1e-6)


def test_prior_only_is_the_prior(tiny_table):
    out = Predictor.prior_only().predict(tiny_table[tiny_table["device"] == "Tesla T4"], "Tesla T4")
    np.testing.assert_array_equal(out["pred_ms"], out["prior_ms"])
    assert (out["lo_ms"] < out["pred_ms"]).all() and (out["pred_ms"] < out["hi_ms"]).all()


def test_bundle_dir_is_not_modified_by_loading(tiny_bundle):
    before = {p.name: sha256_file(p) for p in tiny_bundle.iterdir()}
    Predictor.load(tiny_bundle).predict(_eval_rows(10), "Tesla T4")
    assert {p.name: sha256_file(p) for p in tiny_bundle.iterdir()} == before


def test_strata_choose_blend_and_interval_per_timing():
    """Blend, shrinkage and interval are chosen per (op class, timing) stratum: a residual that only
    helps profiler-timed rows is kept for them and shrunk away for timed calls."""
    from hybridperf.training.kernels import TrainConfig, blended, choose_blend, conformal_interval, stratum

    rng = np.random.default_rng(0)
    n = 200
    y = rng.normal(0, 0.3, 2 * n)
    timing = np.repeat(["call", "kernel"], n)
    r = np.where(timing == "kernel", y, rng.normal(0, 0.3, 2 * n))  # exact for kernel rows, noise for calls
    logo = pd.DataFrame({"op_class": "linear", "timing": timing, "heldout": np.tile(["a", "b"], n),
                         "y": y, "r_mlp": r, "r_xgb": r, "ood": 0.0})
    assert set(stratum(logo)) == {"linear", "linear@kernel"}
    choice = choose_blend(logo)
    assert choice["linear"]["shrink"] == 0.0 and choice["linear@kernel"]["shrink"] == 1.0
    b = blended(logo, choice)
    np.testing.assert_allclose(b[timing == "call"], 0.0)
    np.testing.assert_allclose(b[timing == "kernel"], y[timing == "kernel"])
    iv = conformal_interval(logo, choice, TrainConfig())
    assert iv["linear@kernel"]["q_hi"] - iv["linear@kernel"]["q_lo"] < 1e-9 < iv["linear"]["q_hi"] - iv["linear"]["q_lo"]


def test_predictor_uses_the_kernel_timing_stratum(bundle_copy):
    """A bundle with an `op_class@kernel` entry applies it to profiler-timed rows only."""
    m = json.loads((bundle_copy / MANIFEST).read_text())
    base = m["op_classes"]["linear"]
    m["op_classes"]["linear@kernel"] = {**base, "members": [], "interval": {"q_lo": -0.5, "q_hi": 0.5, "ood_beta": 0.0}}
    (bundle_copy / MANIFEST).write_text(json.dumps(sign_manifest(m)))
    p = Predictor.load(bundle_copy)
    rows = random_shapes(np.random.default_rng(1), 10, ops=("linear",))
    call = p.predict(rows, "Tesla T4", timing="call")
    kern = p.predict(rows, "Tesla T4", timing="kernel")
    np.testing.assert_allclose(kern["pred_ms"], kern["prior_ms"])  # no members: the prior alone
    # the T4 was trained on with call timing only: for profiler-timed rows it is an unseen GPU
    from hybridperf.stats import Z90

    np.testing.assert_allclose(kern["hi_ms"] / kern["pred_ms"], np.exp(np.hypot(0.5, Z90 * p.device_shift_sd)))
    assert not np.allclose(call["pred_ms"], call["prior_ms"])


def test_unseen_device_adds_device_shift_in_quadrature(tiny_bundle):
    """A GPU outside the bundle's training set gets the device-level error added to its interval;
    a training GPU does not, and its interval is centred on the prediction: its own offset is applied
    (`device_bias`), so the unseen GPUs' typical offset (the interval's centre) is not."""
    from hybridperf.predictor import DEVICE_SHIFT_Q90

    p = Predictor.load(tiny_bundle)
    rows = random_shapes(np.random.default_rng(2), 20)
    m = json.loads((tiny_bundle / MANIFEST).read_text())
    extra = DEVICE_SHIFT_Q90
    for dev, unseen in (("Tesla T4", False), ("NVIDIA L4", True)):
        assert (dev in p.training_devices) != unseen
        out = p.predict(rows, dev)
        for oc, g in out.groupby("op_class"):
            iv = m["op_classes"][oc]["interval"]
            c = iv["q_center"]  # out of range the interval widens about its centre
            spread = (iv["q_hi"] - c) * (1.0 + iv["ood_beta"] * g["ood"].to_numpy())
            want = np.sqrt((c + spread) ** 2 + extra ** 2) if unseen else np.maximum(spread, 0.0)
            np.testing.assert_allclose(np.log(g["hi_ms"] / g["pred_ms"]), want, rtol=1e-9)


def test_a_gpu_trained_on_one_timing_only_is_unseen_for_the_other(tiny_bundle):
    """Vidur's A100-SXM4-80GB is in the shipped training set with profiler-timed kernels only: its
    call-timed rows must get the unseen-GPU interval (device-level error added), not a training GPU's."""
    p = Predictor.load(tiny_bundle)
    rows = random_shapes(np.random.default_rng(3), 20)
    dev = "NVIDIA A100-SXM4-80GB"
    before = p.predict(rows, dev)
    p.bundle.manifest["training_data"]["devices"].append(dev)
    p.bundle.manifest["device_bias"][dev] = {"linear@kernel:fp16": 0.3}
    assert dev in p.training_devices
    assert not p.measured_on(dev, "linear", "call") and p.measured_on(dev, "linear", "kernel", "fp16")
    assert not p.measured_on(dev, "linear", "kernel", "fp32") and p.measured_on(dev, "linear", "kernel", None)
    after = p.predict(rows, dev)
    np.testing.assert_allclose(after[["pred_ms", "lo_ms", "hi_ms"]], before[["pred_ms", "lo_ms", "hi_ms"]])
    # a training GPU measured in that stratum keeps its narrower interval: no device-level term
    width = lambda out: np.log(out["hi_ms"] / out["lo_ms"])  # noqa: E731
    seen = p.predict(rows, "Tesla T4")
    p.bundle.manifest["training_data"]["devices"].remove("Tesla T4")
    p.bundle.manifest["device_bias"].pop("Tesla T4", None)
    assert not p.measured_on("Tesla T4", "linear", "call")
    assert (width(seen) < width(p.predict(rows, "Tesla T4"))).all()


def test_manifest_strata_give_every_class_a_plain_entry():
    from hybridperf.training.kernels import manifest_strata

    iv = {"linear": {}, "linear@kernel": {}, "elementwise@kernel": {}}
    assert manifest_strata(["linear", "elementwise"], iv) == [
        ("elementwise", "elementwise@kernel"), ("elementwise@kernel", "elementwise@kernel"),
        ("linear", "linear"), ("linear@kernel", "linear@kernel")]
    with pytest.raises(Exception, match="no held-out calibration rows"):
        manifest_strata(["bmm"], iv)


def test_profiler_timed_rows_get_their_own_models_and_leave_call_models_alone(tiny_table, tmp_path):
    """A class trained on both timings: call-timed rows are served by models fitted on call rows only
    (identical to training without the profiler rows), profiler-timed rows by a second model set."""
    pytest.importorskip("torch")
    pytest.importorskip("xgboost")
    pytest.importorskip("onnxmltools")
    import torch

    torch.set_num_threads(1)
    from hybridperf.training.kernels import export_bundle, fit_all, models_for

    cfg = tiny_config(0)
    linear = tiny_table[tiny_table["op_class"] == "linear"]
    kern = linear.assign(timing="kernel", latency_ms=linear["latency_ms"] * 0.5)
    mixed = pd.concat([linear.assign(timing="call"), kern], ignore_index=True)
    fitted = fit_all(mixed, cfg)
    assert set(fitted) == {"linear", "linear@kernel"}
    only_call = fit_all(linear.assign(timing="call"), cfg)
    X = np.random.default_rng(0).normal(size=(5, len(FEATURE_NAMES)))
    np.testing.assert_allclose(fitted["linear"]["models"]["xgb"].predict(X), only_call["linear"]["models"]["xgb"].predict(X))
    assert models_for(fitted, "linear", "kernel") is fitted["linear@kernel"]
    assert models_for(only_call, "linear", "kernel") is only_call["linear"]  # no kernel set: the class's

    iv = {k: {"q_lo": -0.1, "q_hi": 0.1, "ood_beta": 0.5, "coverage": 0.9} for k in fitted}
    choice = {k: {"mlp_weight": 0.5, "shrink": 1.0} for k in fitted}
    m = export_bundle(fitted, choice, iv, tmp_path / "b", mixed, cfg)
    files = {k: {mem["file"] for mem in spec["members"]} for k, spec in m["op_classes"].items()}
    assert files == {"linear": {"linear_mlp.onnx", "linear_xgb.onnx"},
                     "linear@kernel": {"linear_kernel_mlp.onnx", "linear_kernel_xgb.onnx"}}
    p = Predictor.load(tmp_path / "b")
    rows = canonicalize(pd.DataFrame({"OPName": ["linear"] * 3, "B": [1, 4, 8], "M": [512, 1024, 64],
                                      "N": [256, 512, 2048], "K": [1024, 128, 512]}))
    call, kernel = p.predict(rows, "Tesla T4", timing="call"), p.predict(rows, "Tesla T4", timing="kernel")
    assert not np.allclose(call["pred_ms"], kernel["pred_ms"])


def test_training_devices_get_their_measured_bias_back(tiny_bundle, tiny_table):
    """Targets are demeaned per training device; the bundle keeps each device's bias and the
    predictor adds it on that device only (the tiny data run T4 at 1.15x and V100 at 0.95x)."""
    m = _manifest(tiny_bundle)
    bias = m["device_bias"]
    assert set(bias) == set(TINY_DEVICES)
    assert bias["Tesla T4"]["linear:fp32"] > bias["Tesla V100-PCIE-32GB"]["linear:fp32"]
    p = Predictor.load(tiny_bundle)
    rows = tiny_table[tiny_table["device"] == "Tesla T4"].head(40)
    on_t4 = p.predict(rows, "Tesla T4")
    stripped = Predictor.load(tiny_bundle)
    stripped.bundle.manifest["device_bias"] = {}
    without = stripped.predict(rows, "Tesla T4")
    want = np.exp([bias["Tesla T4"][bias_key(oc)] for oc in on_t4["op_class"]])
    np.testing.assert_allclose(on_t4["pred_ms"] / without["pred_ms"], want, rtol=1e-9)
    # a GPU outside the bundle's training set gets no device bias
    unseen = p.predict(rows, "NVIDIA L4")
    stripped_l4 = stripped.predict(rows, "NVIDIA L4")
    np.testing.assert_allclose(unseen["pred_ms"], stripped_l4["pred_ms"])


def test_a_training_gpus_bias_is_kept_per_dtype(tiny_bundle):
    """fp32 and half precision run different kernels: a GPU measured in fp32 only gets its bias on
    fp32 rows, and its fp16 rows are predicted as on an unseen GPU (no bias, the device-level interval).
    A manifest from before per-dtype keys applies each stratum's bias to every dtype."""
    rows = random_shapes(np.random.default_rng(5), 20)
    fp16 = rows.assign(dtype="fp16")
    p = Predictor.load(tiny_bundle)
    unseen = Predictor.load(tiny_bundle)
    unseen.bundle.manifest["device_bias"].pop("Tesla T4")
    unseen.bundle.manifest["training_data"]["devices"].remove("Tesla T4")
    cols = ["pred_ms", "lo_ms", "hi_ms"]
    np.testing.assert_allclose(p.predict(fp16, "Tesla T4")[cols], unseen.predict(fp16, "Tesla T4")[cols])
    assert not np.allclose(p.predict(rows, "Tesla T4")[cols], unseen.predict(rows, "Tesla T4")[cols])

    bias = p.bundle.manifest["device_bias"]["Tesla T4"]
    legacy = Predictor.load(tiny_bundle)
    legacy.bundle.manifest["device_bias"]["Tesla T4"] = {k.split(":")[0]: v for k, v in bias.items()}
    got = legacy.predict(fp16, "Tesla T4")["pred_ms"] / unseen.predict(fp16, "Tesla T4")["pred_ms"]
    np.testing.assert_allclose(got, np.exp([bias[bias_key(oc)] for oc in canonicalize(fp16)["op_class"]]))


def test_training_demeans_each_dtype_on_its_own():
    """A GPU measured in fp32 and fp16 has two training biases, one per dtype, not one median of both."""
    from hybridperf.training.kernels import device_bias

    rows = pd.DataFrame({"device": "NVIDIA H200", "op_class": "linear", "timing": "call",
                         "dtype": ["fp32"] * 3 + ["fp16"] * 5})
    y = np.array([0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 1.3, 1.4])
    np.testing.assert_allclose(device_bias(rows, y), [0.2] * 3 + [1.2] * 5)


def test_a_training_gpus_bias_is_read_off_its_model_shaped_kernels():
    """NeuSight's randomly shaped collect tables can disagree with its test tables on one GPU (P4
    linear: 1.86x against 1.0x); the bias applied on that GPU comes from the model-shaped rows."""
    from conftest import synth_measurements
    from hybridperf.training.kernel_data import MODEL_SHAPES_TABLE
    from hybridperf.training.kernels import training_device_bias

    rng = np.random.default_rng(0)
    collect = canonicalize(synth_measurements(rng, 120, "Tesla T4", 2.0, ops=("linear",)), require_latency=True)
    model = canonicalize(synth_measurements(rng, 40, "Tesla T4", 1.0, ops=("linear",)), require_latency=True)
    table = pd.concat([collect.assign(table="collect"), model.assign(table=MODEL_SHAPES_TABLE)], ignore_index=True)
    with_tables = training_device_bias(table, tiny_config())["Tesla T4"]["linear:fp32"]
    untagged = training_device_bias(table.drop(columns="table"), tiny_config())["Tesla T4"]["linear:fp32"]
    # synth rows carry a shape term of up to +-0.4 around the factor, so compare the two reads
    assert untagged - with_tables == pytest.approx(np.log(2.0), abs=0.25)
    # too few model-shaped rows of a stratum: the whole table is used
    few = pd.concat([collect.assign(table="collect"), model.head(5).assign(table=MODEL_SHAPES_TABLE)])
    assert training_device_bias(few, tiny_config())["Tesla T4"]["linear:fp32"] == pytest.approx(
        training_device_bias(few.drop(columns="table"), tiny_config())["Tesla T4"]["linear:fp32"])


def test_a_bundle_trained_on_one_gpu_adds_the_between_gpu_error_on_others(bundle_copy):
    """Its interval was cross-validated inside one GPU, so on another GPU the whole between-GPU spread
    of the prior's bias is added, not just the residual device term of a multi-GPU bundle."""
    from hybridperf.predictor import DEVICE_SHIFT_SD, SINGLE_GPU_DEVICE_SD

    rows = canonicalize(pd.DataFrame({"OPName": ["add", "linear"], "B": [64, 8], "M": [np.nan, 512],
                                      "N": [np.nan, 512], "K": [np.nan, 512], "H": [4096, np.nan]}))
    multi = Predictor.load(bundle_copy)
    assert multi.device_shift_sd == DEVICE_SHIFT_SD
    wide_multi = multi.predict(rows, "NVIDIA L4")
    m = _manifest(bundle_copy)
    m["training_data"]["devices"] = ["Tesla T4"]
    _write_manifest(bundle_copy, m)
    single = Predictor.load(bundle_copy)
    assert single.device_shift_sd == SINGLE_GPU_DEVICE_SD > DEVICE_SHIFT_SD
    wide_single = single.predict(rows, "NVIDIA L4")
    assert (wide_single["hi_ms"] / wide_single["lo_ms"] > wide_multi["hi_ms"] / wide_multi["lo_ms"]).all()


def test_export_removes_models_an_earlier_export_left(native_fit, tiny_bundle, tiny_table, tmp_path):
    from hybridperf.training.kernels import export_bundle

    out = tmp_path / "kernels"
    out.mkdir()
    (out / "softmax_mlp.onnx").write_bytes(b"left by an earlier export")
    intervals = {oc: spec["interval"] for oc, spec in _manifest(tiny_bundle)["op_classes"].items()}
    choice = {oc: {"mlp_weight": 0.0, "shrink": 1.0} for oc in native_fit}
    m = export_bundle(native_fit, choice, intervals, out, tiny_table, tiny_config(0))
    assert sorted(p.name for p in out.glob("*.onnx")) == sorted(m["files"])
    Predictor.load(out)


def test_out_of_range_intervals_widen_about_their_centre():
    """A skewed interval (the call floor makes a class's held-out errors lopsided) grows on both sides
    out of range: its offset stays an offset, its spread scales with 1 + beta * ood."""
    from hybridperf.stats import weighted_quantile, widen_about
    from hybridperf.training.kernels import TrainConfig, conformal_interval

    lo, hi = widen_about(-0.1, 0.8, 0.35, 3.0)
    assert (lo, hi) == pytest.approx((0.35 - 1.35, 0.35 + 1.35))
    rng = np.random.default_rng(0)
    e = np.concatenate([rng.exponential(0.3, 400) - 0.1, rng.exponential(0.3, 400) - 0.05])  # skewed up
    logo = pd.DataFrame({"y": e, "r_mlp": 0.0, "r_xgb": 0.0, "ood": 0.0, "op_class": "linear", "timing": "call",
                         "heldout": ["a"] * 400 + ["b"] * 400})
    iv = conformal_interval(logo, {}, TrainConfig())["linear"]
    w = np.ones(len(e))
    assert iv["q_lo"] == pytest.approx(weighted_quantile(e, w, 0.05)) and iv["q_hi"] == pytest.approx(
        weighted_quantile(e, w, 0.95))  # in range: the plain held-out quantiles
    assert iv["q_center"] == pytest.approx((iv["q_lo"] + iv["q_hi"]) / 2) and iv["q_center"] > 0


def _two_regime_logo(n: int = 300) -> pd.DataFrame:
    """Held-out errors of three GPUs: tight (sd 0.02) for large kernels, wide and skewed up for
    floor-bound ones, as NeuSight's collect files show."""
    rng = np.random.default_rng(1)
    parts = []
    for d in ("a", "b", "c"):
        parts.append(pd.DataFrame({"y": rng.normal(0, 0.02, n), "floor_share": rng.uniform(0.0, 0.09, n), "heldout": d}))
        parts.append(pd.DataFrame({"y": rng.exponential(0.3, n), "floor_share": rng.uniform(0.92, 0.99, n), "heldout": d}))
    return pd.concat(parts, ignore_index=True).assign(r_mlp=0.0, r_xgb=0.0, ood=0.0, op_class="elementwise", timing="call")


def test_intervals_are_calibrated_per_floor_regime():
    """Floor-bound kernels get the wide interval their held-out errors need, large ones keep a tight
    one; a bin without enough rows keeps the class's overall quantiles."""
    from hybridperf.residual_models.intervals import FLOOR_SHARE_EDGES, interval_quantiles
    from hybridperf.training.kernels import TrainConfig, conformal_interval

    iv = conformal_interval(_two_regime_logo(), {}, TrainConfig())["elementwise"]
    bins = iv["by_floor_share"]
    assert bins["edges"] == list(FLOOR_SHARE_EDGES) and len(bins["q_lo"]) == len(FLOOR_SHARE_EDGES) + 1
    width = np.subtract(bins["q_hi"], bins["q_lo"])
    assert width[0] < 0.1 < 0.5 < width[-1]
    assert bins["rows"][0] == bins["rows"][-1] == 900 and bins["rows"][2] == 0
    assert (bins["q_lo"][2], bins["q_hi"][2]) == (iv["q_lo"], iv["q_hi"])  # empty bin: the overall interval
    q_lo, q_hi, q_c = interval_quantiles(iv, [0.05, 0.4, 0.95])
    assert q_hi[0] - q_lo[0] == pytest.approx(width[0]) and q_hi[2] - q_lo[2] == pytest.approx(width[-1])
    # an interval without bins (older bundles) applies to every row
    plain = {"q_lo": -0.1, "q_hi": 0.2}
    assert [q.tolist() for q in interval_quantiles(plain, [0.0, 1.0])] == [[-0.1, -0.1], [0.2, 0.2], [0.0, 0.0]]


def test_predictor_widens_floor_bound_kernels_only(bundle_copy):
    """The shipped-format interval picks each row's bin from the prior's floor share."""
    m = _manifest(bundle_copy)
    iv = m["op_classes"]["elementwise"]["interval"]
    iv["by_floor_share"] = {"edges": [0.5], "q_lo": [-0.01, -0.5], "q_hi": [0.01, 0.5], "q_center": [0.0, 0.0]}
    iv["ood_beta"], iv["q_center"] = 0.0, 0.0
    _write_manifest(bundle_copy, m)
    rows = canonicalize(pd.DataFrame([{"OPName": "add", "B": 1, "H": 16},             # all floor
                                      {"OPName": "add", "B": 1 << 16, "H": 4096}]))  # all bytes
    out = Predictor.load(bundle_copy).predict(rows, "Tesla T4")  # a training GPU: no device term
    ratio = (out["hi_ms"] / out["lo_ms"]).to_numpy()
    assert ratio[0] == pytest.approx(np.exp(1.0), rel=1e-6) and ratio[1] == pytest.approx(np.exp(0.02), rel=1e-6)


def test_transfer_moves_the_floor_bins_with_their_class():
    from hybridperf.residual_models.intervals import map_regimes

    old = {"q_lo": -0.2, "q_hi": 0.2, "q_center": 0.0,
           "by_floor_share": {"edges": [0.5], "q_lo": [-0.1, -0.4], "q_hi": [0.1, 0.6], "q_center": [0.0, 0.1], "rows": [9, 9]}}
    new = map_regimes(old, {"q_lo": 0.0, "q_hi": 0.2, "q_center": 0.1})
    b = new["by_floor_share"]
    assert b["q_lo"] == pytest.approx([0.05, -0.1]) and b["q_hi"] == pytest.approx([0.15, 0.4])
    assert b["q_center"] == pytest.approx([0.1, 0.15]) and b["rows"] == [9, 9]
    assert map_regimes({"q_lo": -0.2, "q_hi": 0.2}, {"q_lo": 0.0, "q_hi": 0.1}) == {"q_lo": 0.0, "q_hi": 0.1}


def test_calibration_only_rows_shape_the_bins_not_the_class_interval():
    """Collect-file kernels (`calibration_only`) calibrate the floor-share bins they fall in; the class's
    overall interval, which `suggest` and `transfer` read, stays that of the scored kernels."""
    from hybridperf.training.kernels import TrainConfig, conformal_interval

    logo = _two_regime_logo()
    logo["calibration_only"] = logo["floor_share"] > 0.5
    both = conformal_interval(logo, {}, TrainConfig())["elementwise"]
    scored = conformal_interval(logo[~logo["calibration_only"]], {}, TrainConfig())["elementwise"]
    assert (both["q_lo"], both["q_hi"]) == pytest.approx((scored["q_lo"], scored["q_hi"]))
    assert both["by_floor_share"]["q_hi"][-1] > 0.5 > scored["by_floor_share"]["q_hi"][-1]


def test_scored_rows_alone_calibrate_the_bins_they_fill():
    """Where the scored kernels are enough for a bin, collect-file kernels timed in another regime (here
    0.4 slower in log) do not move it; they still calibrate the bins the scored kernels leave empty."""
    from hybridperf.training.kernels import TrainConfig, conformal_interval

    logo = _two_regime_logo()
    logo["calibration_only"] = logo["floor_share"] > 0.5
    slow_large = logo[~logo["calibration_only"]].assign(y=lambda d: d["y"] + 0.4, calibration_only=True)
    plain = conformal_interval(logo, {}, TrainConfig())["elementwise"]["by_floor_share"]
    mixed = conformal_interval(pd.concat([logo, slow_large], ignore_index=True), {}, TrainConfig())["elementwise"]
    bins = mixed["by_floor_share"]
    assert (bins["q_lo"][0], bins["q_hi"][0]) == pytest.approx((plain["q_lo"][0], plain["q_hi"][0]))
    assert bins["rows"][0] == 900 and bins["q_hi"][-1] == pytest.approx(plain["q_hi"][-1])


def test_profiler_timed_models_learn_from_fp32_calls_but_not_half_precision_ones(tiny_table):
    """`op_class@kernel` fits its profiler-timed rows and the class's fp32 timed calls; half-precision
    timed calls (our H200's) train the call-timed models only: among the training rows every
    half-precision one had been profiler-timed, and with them a held-out RMSNorm got much worse."""
    from hybridperf.training.kernels import fit_all

    lin = tiny_table[tiny_table["op_class"] == "linear"]
    a, b = lin.iloc[:40], lin.iloc[40:80]
    train = pd.concat([a, b.assign(dtype="fp16"), a.assign(dtype="fp16", timing="kernel", device="NVIDIA A40")],
                      ignore_index=True)
    sizes = {}  # from the progress lines "fit STRATUM (N rows)"
    line = re.compile(r"fit (\S+) \((\d+) rows\)")
    fit_all(train, tiny_config(0), progress=lambda s: sizes.update([line.fullmatch(s).groups()]))
    assert sizes == {"linear": "80", "linear@kernel": "80"}  # call: 40 fp32 + 40 fp16; kernel: 40 + the 40 fp32
