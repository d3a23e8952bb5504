"""Few-shot transfer to a new GPU: adapt_predictor, save_adapted, suggest_kernels and their CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import random_shapes
from hybridperf.cli.app import app
from hybridperf.datasets.schema import canonicalize
from hybridperf.errors import InputError
from hybridperf.predictor import Predictor
from hybridperf.residual_models.bundle import MANIFEST, sha256_file, sign_manifest
from hybridperf.transfer import adapt_predictor, save_adapted
from hybridperf.transfer.suggest import default_candidates, suggest_kernels

TARGET = "NVIDIA L4"  # not a training device of the tiny bundle
TINY_GPT2 = Path(__file__).resolve().parent / "data" / "tiny_gpt2_config.json"
FACTOR = 1.5
runner = CliRunner()


@pytest.fixture(scope="module")
def base(tiny_bundle) -> Predictor:
    return Predictor.load(tiny_bundle)


@pytest.fixture(scope="module")
def measured(base) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(calibration, held-out) canonical rows on TARGET whose true latency is 1.5x the base prediction."""
    rng = np.random.default_rng(11)
    rows = canonicalize(random_shapes(rng, 100))
    rows["latency_ms"] = base.predict(rows, TARGET)["pred_ms"].to_numpy() * FACTOR * np.exp(rng.normal(0, 0.05, len(rows)))
    rows["device"] = TARGET
    return rows.iloc[:30].reset_index(drop=True), rows.iloc[30:].reset_index(drop=True)


def _mape(pred: pd.DataFrame, truth: pd.DataFrame) -> float:
    return float(np.mean(np.abs(pred["pred_ms"].to_numpy() / truth["latency_ms"].to_numpy() - 1.0)))


def test_k0_is_the_base_predictor(base, measured):
    _, held = measured
    adapted = adapt_predictor(base, held.iloc[:0], TARGET)
    a, b = adapted.predict(held, TARGET), base.predict(held, TARGET)
    for c in ("pred_ms", "lo_ms", "hi_ms"):
        np.testing.assert_array_equal(a[c].to_numpy(), b[c].to_numpy())


def test_adaptation_beats_zero_shot_on_held_out_rows(base, measured):
    cal, held = measured
    adapted = adapt_predictor(base, cal, TARGET)
    base_mape = _mape(base.predict(held, TARGET), held)
    adapted_mape = _mape(adapted.predict(held, TARGET), held)
    assert base_mape == pytest.approx(1 - 1 / FACTOR, abs=0.03)  # the zero-shot model is 1.5x too fast
    assert adapted_mape < base_mape
    assert adapted_mape < 0.5 * base_mape  # a 1.5x offset is the easiest thing to learn
    info = adapted.adaptation
    assert info["device"] == TARGET and info["k"] == len(cal)
    # measured slower than predicted: the corrections raise the predictions
    raised = adapted.predict(held, TARGET)["pred_ms"].to_numpy() > base.predict(held, TARGET)["pred_ms"].to_numpy()
    assert raised.mean() > 0.9
    # the base predictor is untouched
    assert not base.corrections and base.adaptation is None


def test_adapted_intervals_bracket_predictions(base, measured):
    cal, held = measured
    out = adapt_predictor(base, cal, TARGET).predict(held, TARGET)
    assert (out["lo_ms"] > 0).all()
    assert (out["lo_ms"] <= out["pred_ms"]).all() and (out["pred_ms"] <= out["hi_ms"]).all()
    cover = ((held["latency_ms"] >= out["lo_ms"]) & (held["latency_ms"] <= out["hi_ms"])).mean()
    assert cover >= 0.6


def test_save_adapted_round_trip(base, measured, tmp_path):
    cal, held = measured
    adapted = adapt_predictor(base, cal, TARGET)
    dest = save_adapted(adapted, tmp_path / "adapted")
    m = json.loads((dest / MANIFEST).read_text())
    assert m["adaptation"]["device"] == TARGET
    for name, digest in m["files"].items():
        assert sha256_file(dest / name) == digest
    loaded = Predictor.load(dest)
    assert set(loaded.corrections) == set(adapted.corrections)
    a, b = adapted.predict(held, TARGET), loaded.predict(held, TARGET)
    for c in ("pred_ms", "lo_ms", "hi_ms"):
        np.testing.assert_allclose(b[c].to_numpy(), a[c].to_numpy(), rtol=1e-6)


def test_readapting_is_refused(base, measured, tmp_path):
    cal, _ = measured
    adapted = adapt_predictor(base, cal, TARGET)
    with pytest.raises(InputError):
        adapt_predictor(adapted, cal, TARGET)
    loaded = Predictor.load(save_adapted(adapted, tmp_path / "adapted"))
    with pytest.raises(InputError):
        adapt_predictor(loaded, cal, TARGET)


def test_transfer_input_errors(base, measured, tiny_bundle):
    cal, _ = measured
    with pytest.raises(InputError):
        adapt_predictor(Predictor.prior_only(), cal, TARGET)
    bad = cal.copy()
    bad.loc[0, "latency_ms"] = -1.0
    with pytest.raises(InputError):
        adapt_predictor(base, bad, TARGET)
    with pytest.raises(InputError, match="measured on 'AMD EPYC'"):  # e.g. a CPU collection
        adapt_predictor(base, cal.assign(device="AMD EPYC"), TARGET)
    with pytest.raises(InputError, match="not on NVIDIA L4"):
        adapt_predictor(base, cal.assign(device="Tesla T4"), TARGET)
    adapt_predictor(base, cal.assign(device="L4"), TARGET)  # an alias of the target is the target
    with pytest.raises(InputError):
        save_adapted(base, tiny_bundle.parent / "never")  # not adapted
    with pytest.raises(InputError):
        save_adapted(adapt_predictor(base, cal, TARGET), tiny_bundle)  # over the zero-shot bundle


def test_tampered_adapted_bundle_is_refused(base, measured, tmp_path):
    from hybridperf.errors import ModelBundleError

    dest = save_adapted(adapt_predictor(base, measured[0], TARGET), tmp_path / "adapted")
    f = next(dest.glob("*_transfer.onnx"))
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ModelBundleError):
        Predictor.load(dest)


def test_a_correction_serves_only_the_dtype_it_was_measured_in(base, measured, tmp_path):
    """fp16 kernels measured 1.5x slower than predicted raise the fp16 predictions; fp32 rows, of which
    nothing was measured, are predicted exactly as zero-shot, interval included, also after a reload."""
    cal, held = measured
    cal16 = canonicalize(cal.assign(dtype="fp16"))
    adapted = adapt_predictor(base, cal16.assign(latency_ms=base.predict(cal16, TARGET)["pred_ms"].to_numpy() * FACTOR),
                              TARGET)
    assert adapted.corrections and all(k.endswith(":fp16") for k in adapted.corrections)
    reloaded = Predictor.load(save_adapted(adapted, tmp_path / "adapted"))
    for p in (adapted, reloaded):
        fp32, zero = p.predict(held, TARGET), base.predict(held, TARGET)
        for c in ("pred_ms", "lo_ms", "hi_ms"):
            np.testing.assert_allclose(fp32[c].to_numpy(), zero[c].to_numpy(), rtol=1e-6)
        fp16 = canonicalize(held.assign(dtype="fp16"))
        raised = p.predict(fp16, TARGET)["pred_ms"].to_numpy() / base.predict(fp16, TARGET)["pred_ms"].to_numpy()
        assert np.median(raised) > 1.3


def test_an_adapted_bundle_with_one_correction_per_class_still_loads(base, measured, tmp_path):
    """Adapted bundles from before per-dtype keys (corrections keyed by op class, intervals written into
    `op_classes`) load and apply each class's correction to every dtype."""
    cal, held = measured
    adapted = adapt_predictor(base, cal, TARGET)
    dest = save_adapted(adapted, tmp_path / "adapted")
    m = json.loads((dest / MANIFEST).read_text())
    intervals = m["adaptation"].pop("intervals")
    m["adaptation"]["corrections"] = {k.split(":")[0]: c for k, c in m["adaptation"]["corrections"].items()}
    for key, spec in m["op_classes"].items():
        oc = key.split("@")[0]
        spec["interval"] = intervals.get(f"{oc}:fp32", intervals.get(oc, spec["interval"]))
    (dest / MANIFEST).write_text(json.dumps(sign_manifest(m)))
    legacy = Predictor.load(dest)
    assert set(legacy.corrections) == {k.split(":")[0] for k in adapted.corrections}
    np.testing.assert_allclose(legacy.predict(held, TARGET)["pred_ms"], adapted.predict(held, TARGET)["pred_ms"],
                               rtol=1e-5)
    fp16 = canonicalize(held.assign(dtype="fp16"))
    assert (legacy.predict(fp16, TARGET)["pred_ms"] > base.predict(fp16, TARGET)["pred_ms"]).mean() > 0.9


def test_a_malformed_adapted_interval_is_refused(base, measured, tmp_path):
    from hybridperf.errors import ModelBundleError

    dest = save_adapted(adapt_predictor(base, measured[0], TARGET), tmp_path / "adapted")
    m = json.loads((dest / MANIFEST).read_text())
    key = next(iter(m["adaptation"]["intervals"]))
    m["adaptation"]["intervals"][key]["q_lo"] = "nan"
    (dest / MANIFEST).write_text(json.dumps(sign_manifest(m)))
    with pytest.raises(ModelBundleError, match=f"adaptation.intervals.{key}.q_lo"):
        Predictor.load(dest)

# ---------------------------------------------------------------------------------------------------
# which kernels to measure


@pytest.fixture(scope="module")
def candidates() -> pd.DataFrame:
    return random_shapes(np.random.default_rng(3), 120)  # bmm, linear, add, softmax, ln: 5 op classes


def test_suggest_k6(base, candidates):
    a = suggest_kernels(base, candidates, TARGET, k=6)
    b = suggest_kernels(base, candidates, TARGET, k=6)
    assert len(a) == 6
    pd.testing.assert_frame_equal(a, b)
    assert a["op_class"].nunique() >= 3
    assert not a.duplicated(subset=["op", "B", "M", "N", "K", "H"]).any()
    # the picks are candidate rows
    key = ["op", "B", "M", "N", "K", "H"]
    cand = canonicalize(candidates)[key]
    assert len(a[key].merge(cand.drop_duplicates(), on=key)) == 6
    assert (a["lo_ms"] <= a["pred_ms"]).all() and (a["pred_ms"] <= a["hi_ms"]).all()


def test_suggest_default_candidates(base):
    picks = suggest_kernels(base, default_candidates(), TARGET, k=10, class_scale={})
    assert len(picks) == 10
    assert picks["op_class"].nunique() == 5


def test_suggest_spends_less_on_a_class_whose_error_transfers_little(base):
    """The design runs under the transfer's per-class prior: a class whose prior is shrunk (softmax by
    default) is worth fewer measurements."""
    def n_softmax(class_scale):
        picks = suggest_kernels(base, default_candidates(), TARGET, k=16, class_scale=class_scale)
        return int((picks["op_class"] == "softmax").sum())

    from hybridperf.transfer.adapt import CLASS_PRIOR_SCALE

    assert n_softmax({"softmax": 0.2}) < n_softmax({}) and n_softmax(None) == n_softmax(dict(CLASS_PRIOR_SCALE))


def test_suggest_spends_measurements_where_the_zero_shot_error_is_large(bundle_copy, candidates):
    """A class the zero-shot model predicts within a few percent gets no pick while uncertain classes
    still lack one; with equal intervals every class gets one."""
    m = json.loads((bundle_copy / "manifest.json").read_text())
    for oc, spec in m["op_classes"].items():
        half = 0.01 if oc.startswith("elementwise") else 0.3
        spec["interval"].update(q_lo=-half, q_hi=half)
    (bundle_copy / "manifest.json").write_text(json.dumps(sign_manifest(m)))
    picks = suggest_kernels(Predictor.load(bundle_copy), candidates, TARGET, k=4, class_scale={})
    assert "elementwise" not in set(picks["op_class"]) and picks["op_class"].nunique() == 4
    for spec in m["op_classes"].values():
        spec["interval"].update(q_lo=-0.3, q_hi=0.3)
    (bundle_copy / "manifest.json").write_text(json.dumps(sign_manifest(m)))
    picks = suggest_kernels(Predictor.load(bundle_copy), candidates, TARGET, k=5, class_scale={})
    assert picks["op_class"].nunique() == 5


def test_zero_shot_error_moment_counts_an_offset_interval_and_an_unseen_device(base):
    """An interval that is narrow but offset (the model is expected to be off) weighs like a wide one;
    an unseen GPU adds the device-level term."""
    from hybridperf.devices import get_device
    from hybridperf.predictor import DEVICE_SHIFT_SD
    from hybridperf.transfer.suggest import zero_shot_error_moment

    m = base.manifest["op_classes"]
    saved = {oc: dict(m[oc]["interval"]) for oc in ("linear", "softmax")}
    try:
        m["linear"]["interval"].update(q_lo=0.22, q_hi=0.39)
        m["softmax"]["interval"].update(q_lo=-0.03, q_hi=0.02)
        seen, unseen = get_device("Tesla T4"), get_device("NVIDIA L4")
        assert "Tesla T4" in base.training_devices
        lin, sm = zero_shot_error_moment(base, "linear", seen), zero_shot_error_moment(base, "softmax", seen)
        assert lin > 0.09 > 0.001 > sm
        assert zero_shot_error_moment(base, "softmax", unseen) == pytest.approx(sm + DEVICE_SHIFT_SD ** 2)
    finally:
        for oc, iv in saved.items():
            m[oc]["interval"] = iv


def test_suggest_rejects_k0(base, candidates):
    with pytest.raises(InputError):
        suggest_kernels(base, candidates, TARGET, k=0)


def test_suggest_returns_k_rows_when_a_class_is_small(base):
    cand = pd.concat([random_shapes(np.random.default_rng(1), 20, ops=("linear",)),
                      pd.DataFrame([{"OPName": "softmax", "B": 64, "H": 1024}])], ignore_index=True)
    assert len(suggest_kernels(base, cand, TARGET, k=6)) == 6


def test_suggest_for_a_target_follows_where_its_time_goes(base):
    """With a target (a model's kernels with launch counts), the design pins the target's summed time:
    a class that holds none of it gets no pick, and the picks move with the time shares."""
    cand = default_candidates()
    lin = pd.DataFrame([{"OPName": "linear", "B": 1, "M": 4096, "N": 1024, "K": 4096, "count": 48}])
    sm = pd.DataFrame([{"OPName": "softmax", "B": 65536, "H": 1024, "count": 24}])
    only_linear = suggest_kernels(base, cand, TARGET, k=6, target=lin)
    assert set(only_linear["op_class"]) == {"linear"}
    # equal time shares: both classes are measured
    two = pd.concat([lin, sm], ignore_index=True)
    two["count"] = 1.0 / base.predict(two.drop(columns="count"), TARGET)["pred_ms"].to_numpy()
    both = suggest_kernels(base, cand, TARGET, k=6, target=two)
    assert set(both["op_class"]) == {"linear", "softmax"}
    pd.testing.assert_frame_equal(both, suggest_kernels(base, cand, TARGET, k=6, target=two))
    # the design is not the untargeted one
    assert set(suggest_kernels(base, cand, TARGET, k=6)["op_class"]) - {"linear", "softmax"}


def test_equal_weight_target_gives_every_model_the_same_share(base):
    from hybridperf.devices import get_device
    from hybridperf.transfer.suggest import equal_weight_target, target_shares

    big = pd.DataFrame([{"OPName": "linear", "B": 1, "M": 4096, "N": 1024, "K": 4096, "count": 48},
                        {"OPName": "add", "B": 4096, "H": 1024, "count": 96}])
    small = pd.DataFrame([{"OPName": "softmax", "B": 64, "H": 512, "count": 2}])
    target = equal_weight_target(base, [big, small], TARGET)
    _, _, share = target_shares(base, target, get_device(TARGET))
    assert share[:2].sum() == pytest.approx(0.5) and share[2] == pytest.approx(0.5)
    # within a model, the shares keep their ratio
    _, _, alone = target_shares(base, big, get_device(TARGET))
    np.testing.assert_allclose(share[:2] / share[:2].sum(), alone)


def test_suggest_target_needs_launch_counts(base):
    target = pd.DataFrame([{"OPName": "linear", "B": 1, "M": 64, "N": 64, "K": 64}])
    with pytest.raises(InputError, match="count"):
        suggest_kernels(base, default_candidates(), TARGET, k=2, target=target)
    with pytest.raises(InputError, match="count"):
        suggest_kernels(base, default_candidates(), TARGET, k=2, target=target.assign(count=-1))


def test_model_kernel_requests_count_every_priced_launch():
    from hybridperf.graphs import build_graph
    from hybridperf.graphs.compose import model_kernel_requests

    graph = build_graph(TINY_GPT2, 2, 64, "train")
    req = model_kernel_requests(graph, TARGET)
    tab = graph.kernel_table()
    priced = ~tab["op"].str.startswith("misc:")
    assert req["count"].sum() == tab.loc[priced, "count"].sum()
    assert set(req["OPName"]) == set(tab.loc[priced, "op"]) and (req["host"] == "neusight").all()


# ---------------------------------------------------------------------------------------------------
# CLI


def _neusight(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows[["op", "B", "M", "N", "K", "H", "latency_ms"]].rename(columns={"op": "OPName", "latency_ms": "Latency"})
    return out


def test_cli_transfer_then_predict(tiny_bundle, measured, tmp_path):
    cal, held = measured
    cal_csv = tmp_path / "measured.csv"
    _neusight(cal).to_csv(cal_csv, index=False)
    dest = tmp_path / "adapted"
    r = runner.invoke(app, ["transfer", str(cal_csv), "--device", TARGET, "--out", str(dest),
                            "--model-bundle", str(tiny_bundle)])
    assert r.exit_code == 0, r.output
    assert (dest / MANIFEST).is_file()
    loaded = Predictor.load(dest)
    assert loaded.adaptation["device"] == TARGET and loaded.adaptation["k"] == len(cal)
    # predict-kernels with the adapted bundle == predict-kernels --calibration with the zero-shot one
    held_csv = tmp_path / "held.csv"
    _neusight(held).drop(columns=["Latency"]).to_csv(held_csv, index=False)
    r1 = runner.invoke(app, ["predict-kernels", str(held_csv), "--device", TARGET, "--output", str(tmp_path / "a.csv"),
                             "--model-bundle", str(dest)])
    r2 = runner.invoke(app, ["predict-kernels", str(held_csv), "--device", TARGET, "--output", str(tmp_path / "b.csv"),
                             "--model-bundle", str(tiny_bundle), "--calibration", str(cal_csv)])
    assert r1.exit_code == 0, r1.output
    assert r2.exit_code == 0, r2.output
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    for c in ("pred_ms", "pred_lo_ms", "pred_hi_ms"):
        np.testing.assert_allclose(a[c], b[c], rtol=1e-5)
    assert _mape(a, held) < _mape(base_pred := Predictor.load(tiny_bundle).predict(held, TARGET), held)
    assert len(base_pred) == len(held)


def test_cli_suggest_writes_shapes(tiny_bundle, candidates, tmp_path):
    cand_csv = tmp_path / "cand.csv"
    candidates.to_csv(cand_csv, index=False)
    out = tmp_path / "sub" / "shapes.csv"
    args = ["suggest", "--device", TARGET, "--k", "6", "--out", str(out), "--candidates", str(cand_csv),
            "--model-bundle", str(tiny_bundle)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    shapes = pd.read_csv(out)
    assert list(shapes.columns) == ["OPName", "B", "M", "N", "K", "H", "form"]
    assert len(shapes) == 6
    gemm = shapes["OPName"].isin(["linear", "bmm"])
    assert shapes.loc[~gemm, "form"].isna().all() and shapes.loc[shapes["OPName"] == "linear", "form"].notna().all()
    # the shapes file is valid input for predict-kernels / collect
    assert len(canonicalize(shapes)) == 6
    first = out.read_bytes()
    assert runner.invoke(app, args).exit_code == 0
    assert out.read_bytes() == first  # deterministic


def test_cli_suggest_default_candidates(tiny_bundle, tmp_path):
    out = tmp_path / "shapes.csv"
    r = runner.invoke(app, ["suggest", "--device", "H100-SXM", "--k", "5", "--out", str(out),
                            "--model-bundle", str(tiny_bundle)])
    assert r.exit_code == 0, r.output
    assert len(pd.read_csv(out)) == 5


def test_cli_suggest_for_a_model_picks_its_own_kernels(tiny_bundle, tmp_path):
    from hybridperf.graphs import build_graph
    from hybridperf.graphs.compose import model_kernel_requests

    out = tmp_path / "shapes.csv"
    r = runner.invoke(app, ["suggest", "--device", TARGET, "--k", "4", "--out", str(out), "--config", str(TINY_GPT2),
                            "--batch", "2", "--seq", "64", "--mode", "train", "--model-bundle", str(tiny_bundle)])
    assert r.exit_code == 0, r.output
    shapes = pd.read_csv(out)
    own = model_kernel_requests(build_graph(TINY_GPT2, 2, 64, "train"), TARGET)
    key = ["OPName", "B", "M", "N", "K", "H"]
    assert len(shapes) == 4 and len(shapes.merge(own[key].drop_duplicates(), on=key)) == 4
    # each shape keeps its GEMM form, so that `collect` times a weight gradient as one
    shapes["form"] = shapes["form"].fillna("")
    assert len(shapes.merge(own[key + ["form"]].drop_duplicates(), on=key + ["form"])) == 4
    assert "mm_t" in set(own["form"])
    r = runner.invoke(app, ["suggest", "--device", TARGET, "--batch", "2", "--model-bundle", str(tiny_bundle)])
    assert r.exit_code != 0 and "--config" in f"{r.output}{r.exception}"


def test_adaptation_corrects_a_class_the_bundle_lacks(tiny_table, tmp_path):
    pytest.importorskip("torch")
    import torch

    from conftest import tiny_config
    from hybridperf.training.kernels import export_bundle, fit_all

    torch.set_num_threads(1)
    cfg = tiny_config(0)
    fitted = fit_all(tiny_table[tiny_table["op_class"] != "layernorm"], cfg)
    intervals = {oc: {"q_lo": -0.2, "q_hi": 0.2, "ood_beta": 0.5} for oc in fitted}
    export_bundle(fitted, {oc: {"mlp_weight": 0.0, "shrink": 1.0} for oc in fitted}, intervals, tmp_path / "b",
                  tiny_table, cfg)
    p = Predictor.load(tmp_path / "b")
    rows = canonicalize(random_shapes(np.random.default_rng(2), 60))
    rows["latency_ms"] = p.predict(rows, TARGET)["pred_ms"].to_numpy() * FACTOR
    out = adapt_predictor(p, rows, TARGET).predict(rows, TARGET)
    ratio = (out["pred_ms"] / rows["latency_ms"]).groupby(rows["op_class"]).mean()
    assert ratio["linear"] == pytest.approx(1.0, abs=0.05)
    assert ratio["layernorm"] == pytest.approx(1.0, abs=0.05)


def test_predict_with_features_gives_the_features_of_its_rows(base):
    rows = canonicalize(random_shapes(np.random.default_rng(9), 40))
    pred, X = base.predict_with_features(rows, TARGET, timing="kernel")
    pd.testing.assert_frame_equal(pred, base.predict(rows, TARGET, timing="kernel"))
    np.testing.assert_array_equal(X, base.features(pred, TARGET))


# ---------------------------------------------------------------------------------------------------
# the adapter's mechanisms, on synthetic devices


def _synthetic_device(base, n: int, seed: int, log_correction) -> pd.DataFrame:
    """Rows whose latency is the base prediction times exp(log_correction(features))."""
    rng = np.random.default_rng(seed)
    rows = canonicalize(random_shapes(rng, n))
    X = base.features(rows, TARGET)
    rows["latency_ms"] = base.predict(rows, TARGET)["pred_ms"].to_numpy() * np.exp(log_correction(X))
    rows["device"] = TARGET
    return rows


def test_adapter_recovers_a_device_level_efficiency(base):
    """A device whose compute-bound kernels run 30% slower and memory-bound ones 10% faster than
    the zero-shot model: 25 kernels pin both, on kernels never measured. The compute/memory balance
    is a local slope (TransferPrior.slope_length), so a split that is really device-wide is
    recovered a little less fully than by a global slope (compute-bound median 0.205 against 0.222;
    a global balance slope cost Vidur's A40 0.7 points at k = 16, experiments/RESULTS.md section 3)."""
    from hybridperf.residual_models.features import FEATURE_NAMES

    cm = FEATURE_NAMES.index("compute_over_memory")
    truth = lambda X: np.where(X[:, cm] > 0, np.log(1.3), np.log(0.9))  # noqa: E731
    cal = _synthetic_device(base, 25, 5, truth)
    held = _synthetic_device(base, 200, 6, truth)
    adapted = adapt_predictor(base, cal, TARGET, class_scale={})  # every class at the same prior
    pred = adapted.predict(held, TARGET)["pred_ms"].to_numpy()
    assert np.abs(pred / held["latency_ms"].to_numpy() - 1).mean() < 0.04  # zero-shot is 10-30% off
    gain = pd.Series(np.log(pred / base.predict(held, TARGET)["pred_ms"].to_numpy()))
    compute_bound = base.features(held, TARGET)[:, cm] > 0
    assert gain[compute_bound].median() == pytest.approx(np.log(1.3), abs=0.065)
    assert gain[~compute_bound].median() == pytest.approx(np.log(0.9), abs=0.03)


def test_adapter_shrinks_toward_zero_shot_with_little_evidence(base):
    """One kernel per class moves the prediction only part of the way: the prior is the zero-shot model."""
    cal = _synthetic_device(base, 5, 7, lambda X: np.full(len(X), np.log(1.5)))
    adapted = adapt_predictor(base, cal, TARGET, class_scale={})  # every class at the same prior
    ratio = adapted.predict(cal, TARGET)["pred_ms"].to_numpy() / base.predict(cal, TARGET)["pred_ms"].to_numpy()
    assert (ratio > 1.02).all() and (ratio < 1.5).all()


def test_softmax_learns_per_row_length_not_across_row_lengths(base):
    """A GPU whose softmax at H = 2560 runs 35% slower and at every other H as predicted (the P100's
    pattern): two softmaxes measured at H = 2560 move the same H at other row counts most of the way,
    and the neighbouring H = 2048 and 3072 little: only the smooth terms reach them (adapt.ROW_CLASSES)."""
    rows = canonicalize(pd.DataFrame({"OPName": "softmax", "B": [4096, 16384, 8192, 65536, 8192, 65536],
                                      "H": [2560, 2560, 2560, 2560, 2048, 3072]}))
    truth = np.where(rows["H"].to_numpy() == 2560, np.log(1.35), 0.0)
    rows["latency_ms"] = base.predict(rows, TARGET)["pred_ms"].to_numpy() * np.exp(truth)
    rows["device"] = TARGET
    gain = np.log(adapt_predictor(base, rows.iloc[:2], TARGET).predict(rows.iloc[2:], TARGET)["pred_ms"].to_numpy()
                  / base.predict(rows.iloc[2:], TARGET)["pred_ms"].to_numpy())
    assert (gain[:2] > 0.6 * np.log(1.35)).all()  # the same H at 2x and 4x more rows
    assert np.abs(gain[2:]).max() < 0.25 * np.log(1.35)  # another H: the row-length term does not carry it


def test_adapter_is_robust_to_one_outlier(base):
    good = _synthetic_device(base, 40, 8, lambda X: np.full(len(X), np.log(1.2)))
    bad = good.copy()
    bad.loc[0, "latency_ms"] *= 30.0
    held = _synthetic_device(base, 100, 9, lambda X: np.full(len(X), np.log(1.2)))
    a = adapt_predictor(base, good, TARGET).predict(held, TARGET)["pred_ms"].to_numpy()
    b = adapt_predictor(base, bad, TARGET).predict(held, TARGET)["pred_ms"].to_numpy()
    assert np.abs(b / a - 1).mean() < 0.03


@pytest.mark.parametrize("row_signal", [0.0, 0.15])
def test_correction_onnx_matches_numpy(base, row_signal):
    """The exported graph computes the same correction as adapt.Correction, regimes, edges and the
    row-length term (rows at a measured row length and between them) included."""
    import onnxruntime as ort

    from hybridperf.residual_models.features import FEATURE_NAMES
    from hybridperf.transfer.adapt import TransferPrior, fit_class
    from hybridperf.transfer.export import correction_onnx

    rng = np.random.default_rng(4)
    X = rng.normal(0, 1, (60, len(FEATURE_NAMES))).astype(np.float32)
    X[:, FEATURE_NAMES.index("floor_share")] = rng.uniform(0, 1, 60)
    X[:5, FEATURE_NAMES.index("compute_over_memory")] = [0.0, -9.0, 9.0, 1e-3, -1e-3]
    h = FEATURE_NAMES.index("log_H")
    X[20:30, h] = X[:10, h] + rng.normal(0, 0.03, 10).astype(np.float32)  # near a measured row length
    corr, loo, _ = fit_class(X[:20].astype(np.float64), rng.normal(0.1, 0.2, 20), TransferPrior(row_signal=row_signal))
    assert (corr.rows is not None) == (row_signal > 0)
    assert np.isfinite(loo).all()
    sess = ort.InferenceSession(correction_onnx(corr).SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": X})[0][:, 0]
    np.testing.assert_allclose(out, corr(X), atol=2e-5)


def test_recalibrated_intervals_follow_the_leave_one_out_residuals():
    from hybridperf.transfer.adapt import recalibrate

    zero = {"linear": {"q_lo": -0.2, "q_hi": 0.4, "ood_beta": 0.5}, "softmax": {"q_lo": -0.3, "q_hi": 0.3, "ood_beta": 0.5}}
    from hybridperf.predictor import DEVICE_SHIFT_Q90

    nothing = recalibrate(zero, {})
    assert all(nothing[oc] == {**zero[oc], "device_shift_q90": DEVICE_SHIFT_Q90} for oc in zero)
    tight = recalibrate(zero, {"linear": np.linspace(-0.02, 0.02, 40)})
    wide = recalibrate(zero, {"linear": np.linspace(-0.8, 0.8, 40)})
    assert tight["linear"]["q_hi"] - tight["linear"]["q_lo"] < 0.3 < 0.6 < wide["linear"]["q_hi"] - wide["linear"]["q_lo"]
    assert tight["linear"]["ood_ref"] == 0.0  # measured in range: the widening starts where it did
    far = recalibrate(zero, {"linear": np.linspace(-0.02, 0.02, 40)}, ood={"linear": np.full(40, 4.0)})
    assert far["linear"]["ood_ref"] == 4.0 and far["linear"]["ood_beta"] == 0.5
    # nothing measured, nothing corrected: the zero-shot interval and all of the device-level error
    assert tight["softmax"] == {**zero["softmax"], "device_shift_q90": DEVICE_SHIFT_Q90}
    assert tight["linear"]["device_shift_q90"] < 0.5 * DEVICE_SHIFT_Q90  # 40 kernels pinned the device down
    # a class with few measurements borrows, at a discount, the others' standardised residuals
    few = np.array([-0.01, 0.01])
    alone = recalibrate(zero, {"linear": np.linspace(-0.02, 0.02, 40), "softmax": few})
    borrowed = recalibrate(zero, {"linear": np.linspace(-0.8, 0.8, 40), "softmax": few})
    width = lambda iv: iv["softmax"]["q_hi"] - iv["softmax"]["q_lo"]  # noqa: E731
    assert width(alone) < width(zero) < width(borrowed)


def test_out_of_range_widening_starts_at_the_measured_kernels(base):
    """Kernels measured outside the bundle's training range (the tiny bundle's row-wise classes on an
    MI300X) move the origin of the out-of-range widening to them: rows as far out as the measured ones
    are not widened for it, rows in range are widened as before (not at all)."""
    dev = "AMD Instinct MI300X"
    rows = canonicalize(random_shapes(np.random.default_rng(5), 80))
    zero = base.predict(rows, dev)
    rows["latency_ms"] = zero["pred_ms"].to_numpy() * np.exp(np.random.default_rng(6).normal(0, 0.02, len(rows)))
    rows["device"] = dev
    adapted = adapt_predictor(base, rows, dev)
    ew = adapted.intervals["elementwise:fp32"]
    measured_ood = zero.loc[zero["op_class"] == "elementwise", "ood"]
    assert ew["ood_ref"] == pytest.approx(measured_ood.median()) and ew["ood_ref"] > 1.0
    legacy = Predictor(adapted.bundle, corrections=adapted.corrections,
                       intervals={oc: {**iv, "ood_ref": 0.0} for oc, iv in adapted.intervals.items()})
    legacy.adaptation = adapted.adaptation
    new, old = adapted.predict(rows, dev), legacy.predict(rows, dev)
    width = lambda o: np.log(o["hi_ms"] / o["lo_ms"])  # noqa: E731
    at_ref = ((new["op_class"] == "elementwise") & (new["ood"] <= ew["ood_ref"]) & (new["ood"] > 0.5)).to_numpy()
    in_range = (new["ood"] == 0).to_numpy()
    assert at_ref.any() and in_range.any()
    assert (width(new)[at_ref] < 0.8 * width(old)[at_ref]).all()
    np.testing.assert_allclose(width(new)[in_range], width(old)[in_range])


def test_few_measured_kernels_keep_the_unseen_gpus_device_level_error_in_the_interval():
    """A bundle trained on one GPU has a narrow, cross-validated interval (half-width 0.1 here) and a
    large device-level error (sd 0.174). Three kernels that happen to agree with the correction must
    not shrink the interval below that of the class alone: the zero-shot pseudo-residuals are the
    interval an unseen GPU gets at k = 0, the device-level error included."""
    from hybridperf.predictor import SINGLE_GPU_DEVICE_SD
    from hybridperf.stats import Z90
    from hybridperf.transfer.adapt import recalibrate

    zero = {"elementwise": {"q_lo": -0.1, "q_hi": 0.1, "ood_beta": 0.0}}
    few = recalibrate(zero, {"elementwise": np.array([-0.01, 0.0, 0.01])}, shift_sd=SINGLE_GPU_DEVICE_SD)
    width = few["elementwise"]["q_hi"] - few["elementwise"]["q_lo"]
    assert width > 2 * 0.1 * 1.5  # well over the class's own interval
    assert width < 2 * np.hypot(0.1, Z90 * SINGLE_GPU_DEVICE_SD)  # and under the k = 0 one


def test_an_interval_calibrated_across_gpus_counts_the_device_level_error_once():
    """A leave-one-GPU-out interval already holds how held-out GPUs' errors spread; after transfer its
    pseudo-residuals are the class's own interval, and the device-level error enters once, through
    what the measured kernels leave of it (`device_shift_q90`). So many agreeing kernels bring a
    narrow class (element-wise, half-width 0.03) well under its k = 0 width, where the device term
    (0.14) dominates, while one calibrated within a GPU keeps that term in its pseudo-residuals."""
    from hybridperf.predictor import DEVICE_SHIFT_SD
    from hybridperf.stats import Z90
    from hybridperf.transfer.adapt import recalibrate

    zero = {"elementwise": {"q_lo": -0.03, "q_hi": 0.03, "ood_beta": 0.0}}
    loo = {"elementwise": np.linspace(-0.02, 0.02, 9)}
    width = {}
    for cross in (True, False):
        iv = recalibrate(zero, loo, cross_device=cross)["elementwise"]
        width[cross] = iv["q_hi"] - iv["q_lo"] + 2 * iv["device_shift_q90"]
    at_k0 = 2 * np.hypot(0.03, Z90 * DEVICE_SHIFT_SD)
    assert width[True] < 0.5 * at_k0
    assert width[False] > 2 * width[True]


def test_a_class_measured_by_its_kernel_time_is_recalibrated_from_that_stratum(bundle_copy, tmp_path):
    """Transfer re-calibrates a class from the zero-shot interval of the stratum its kernels were
    measured in: profiler-timed rows from `op_class@kernel`, not from the call-timed interval."""
    m = json.loads((bundle_copy / MANIFEST).read_text())
    spec = m["op_classes"]["linear"]
    m["op_classes"]["linear@kernel"] = {**spec, "interval": {**spec["interval"], "q_lo": 1.0, "q_hi": 1.2,
                                                             "q_center": 1.1}}
    (bundle_copy / MANIFEST).write_text(json.dumps(sign_manifest(m)))
    p = Predictor.load(bundle_copy)
    rows = canonicalize(random_shapes(np.random.default_rng(7), 40))
    rows = rows[rows["op_class"] == "linear"].reset_index(drop=True)
    rows["latency_ms"] = p.predict(rows, TARGET)["pred_ms"].to_numpy()
    call = adapt_predictor(p, rows, TARGET).intervals["linear:fp32"]
    adapted = adapt_predictor(p, rows.assign(timing="kernel"), TARGET)
    # the kernel stratum's pseudo-residuals sit near +1.1
    assert adapted.intervals["linear:fp32"]["q_hi"] > call["q_hi"] + 0.3
    # saved and reloaded, profiler-timed rows get the same adapted interval as in memory
    reloaded = Predictor.load(save_adapted(adapted, tmp_path / "adapted"))
    kernel_rows = rows.assign(timing="kernel")
    for col in ("pred_ms", "lo_ms", "hi_ms"):
        np.testing.assert_allclose(reloaded.predict(kernel_rows, TARGET)[col],
                                   adapted.predict(kernel_rows, TARGET)[col], rtol=1e-5)


def test_large_calibration_sets_are_thinned(base, monkeypatch):
    import hybridperf.transfer.adapt as adapt

    monkeypatch.setattr(adapt, "MAX_ROWS_PER_CLASS", 4)
    cal = _synthetic_device(base, 40, 10, lambda X: np.full(len(X), np.log(1.2)))
    adapted = adapt_predictor(base, cal, TARGET)
    assert all(len(c.alpha) <= 4 for c in adapted.corrections.values())
    assert adapted.adaptation["k"] == 40


def test_evidence_loosens_the_prior_for_a_far_device(base):
    """Zero-shot 2.5x too fast (as Vidur's A40 is off by 2x): the evidence picks a wider prior."""
    from hybridperf.transfer.adapt import class_prior

    near = adapt_predictor(base, _synthetic_device(base, 30, 12, lambda X: np.full(len(X), np.log(1.1))), TARGET)
    far = adapt_predictor(base, _synthetic_device(base, 30, 12, lambda X: np.full(len(X), np.log(2.5))), TARGET)
    centre = {oc: class_prior(None, oc).offset for oc in far.corrections}  # each class's own prior
    assert all(c.prior.offset <= centre[oc] for oc, c in near.corrections.items())
    assert all(c.prior.offset > centre[oc] for oc, c in far.corrections.items())


def test_device_level_error_shrinks_with_the_class_s_measured_kernels():
    from hybridperf.predictor import DEVICE_SHIFT_Q90, device_shift_q90

    q = [device_shift_q90(n, 0.2) for n in (0, 1, 4, 16, 64)]
    assert q[0] == pytest.approx(DEVICE_SHIFT_Q90)
    assert all(a > b for a, b in zip(q, q[1:])) and q[-1] < 0.2 * DEVICE_SHIFT_Q90
    # a class that scatters little on the device is pinned down by fewer kernels
    assert device_shift_q90(2, 0.02) < device_shift_q90(2, 0.4)


def test_prior_strength_is_chosen_per_op_class():
    """A class far from the zero-shot model loosens its own prior, not that of a class it already fits."""
    from hybridperf.residual_models.features import FEATURE_NAMES
    from hybridperf.transfer.adapt import TransferPrior, fit_corrections

    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, len(FEATURE_NAMES)))
    oc = np.array(["far"] * 12 + ["near"] * 12)
    e = np.concatenate([0.8 + 0.3 * rng.normal(size=12), 0.01 * rng.normal(size=12)])
    corr, _ = fit_corrections(X, e, oc)
    assert corr["far"].prior.offset > TransferPrior().offset > corr["near"].prior.offset


def test_a_class_prior_scale_shrinks_that_class_only():
    """A class prior scale: a few measured softmaxes move the softmax correction less than the same
    errors move an unscaled class (at row lengths not measured, as the row-length term,
    adapt.ROW_CLASSES, is not scaled), and the default applies CLASS_PRIOR_SCALE."""
    from hybridperf.residual_models.features import FEATURE_NAMES
    from hybridperf.transfer.adapt import CLASS_PRIOR_SCALE, fit_corrections

    assert CLASS_PRIOR_SCALE.get("softmax", 1.0) < 1.0
    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, len(FEATURE_NAMES)))
    oc, e = np.array(["softmax"] * 3 + ["layernorm"] * 3), np.full(6, 0.3)
    shrunk, _ = fit_corrections(X, e, oc, class_scale={"softmax": 0.2})
    flat, _ = fit_corrections(X, e, oc, class_scale={})
    other_h = X[:3].copy()
    other_h[:, FEATURE_NAMES.index("log_H")] += 1.0
    assert np.abs(shrunk["softmax"](other_h)).mean() < 0.5 * np.abs(flat["softmax"](other_h)).mean()
    np.testing.assert_allclose(shrunk["layernorm"](X[3:]), flat["layernorm"](X[3:]))
    default, _ = fit_corrections(X, e, oc)
    explicit, _ = fit_corrections(X, e, oc, class_scale=dict(CLASS_PRIOR_SCALE))
    np.testing.assert_allclose(default["softmax"](other_h), explicit["softmax"](other_h))
    assert np.abs(default["softmax"](other_h)).mean() < np.abs(flat["softmax"](other_h)).mean()


def test_cli_transfer_host_matches_predict_kernels_host(tiny_bundle, measured, tmp_path):
    """Calls measured on NeuSight's hosts: `transfer --host neusight` and `predict-kernels --host
    neusight --calibration` adapt alike; an unknown host is refused."""
    cal, held = measured
    cal_csv, held_csv, dest = tmp_path / "measured.csv", tmp_path / "held.csv", tmp_path / "adapted"
    _neusight(cal).to_csv(cal_csv, index=False)
    _neusight(held).drop(columns=["Latency"]).to_csv(held_csv, index=False)
    r = runner.invoke(app, ["transfer", str(cal_csv), "--device", TARGET, "--out", str(dest), "--model-bundle",
                            str(tiny_bundle), "--host", "neusight"])
    assert r.exit_code == 0, r.output
    for name, extra in (("a", ["--model-bundle", str(dest)]),
                        ("b", ["--model-bundle", str(tiny_bundle), "--calibration", str(cal_csv)])):
        r = runner.invoke(app, ["predict-kernels", str(held_csv), "--device", TARGET, "--output",
                                str(tmp_path / f"{name}.csv"), "--host", "neusight", *extra])
        assert r.exit_code == 0, r.output
    np.testing.assert_allclose(pd.read_csv(tmp_path / "a.csv")["pred_ms"], pd.read_csv(tmp_path / "b.csv")["pred_ms"],
                               rtol=1e-5)
    r = runner.invoke(app, ["transfer", str(cal_csv), "--device", TARGET, "--out", str(dest), "--host", "laptop"])
    assert r.exit_code != 0 and "unknown host" in f"{r.output}{r.exception}"


def test_a_bump_in_the_reduction_length_is_corrected_near_it(monkeypatch):
    """Linears of equal work whose error is a bump over N (8-16k features 0.3 too slow, shorter and longer
    ones right: the P100 scored with the P4's page budget): the correction reaches the unmeasured 12k
    Linear inside the bump (-0.30 in truth; -0.15 when the slopes were global), and the RBF over log N
    keeps it nearer the bump than an RBF over the kernel's scale alone."""
    import hybridperf.transfer.adapt as adapt

    ns = np.array([512, 1024, 2048, 8192, 12288, 16384, 65536])
    rows = canonicalize(pd.DataFrame({"OPName": "linear", "B": 1, "M": 2 ** 26 // ns, "N": ns, "K": 4096}))
    p = Predictor.prior_only()
    X = p.features(p.predict(rows, "Tesla P100-PCIE-16GB"), "Tesla P100-PCIE-16GB")
    e = np.where((ns >= 8192) & (ns <= 16384), -0.3, 0.0)
    picked = [1, 3, 5, 6]  # N = 1k, 8k, 16k, 64k
    spread = {}
    for name, rbf in (("with log_N", dict(adapt.RBF_FEATURES)),
                      ("without", {k: v for k, v in adapt.RBF_FEATURES.items() if k != "log_N"})):
        monkeypatch.setattr(adapt, "RBF_FEATURES", rbf)
        corr, _ = adapt.fit_corrections(X[picked], e[picked], np.array(["linear"] * len(picked)))
        c = corr["linear"](X)
        spread[name] = c[4] - c[0]  # in the bump (12k, not measured) minus far below it (512)
    assert spread["with log_N"] < -0.25
    assert spread["with log_N"] < spread["without"] - 0.015


def test_a_slow_host_call_floor_is_not_charged_to_body_bound_kernels(base):
    """One floor-bound relu measured 1.36x the prediction (the H200 host's suggested relu): the
    floor is the host's, so a large relu whose time is all body barely moves, the small one does."""
    small = canonicalize(pd.DataFrame({"OPName": ["relu"], "B": [16], "H": [256]}))  # floor share 0.99 on an L4
    big = canonicalize(pd.DataFrame({"OPName": ["relu"], "B": [16384], "H": [8192]}))  # 0.002
    zero_small, zero_big = base.predict(small, TARGET), base.predict(big, TARGET)
    cal = small.assign(latency_ms=zero_small["pred_ms"].to_numpy() * 1.36, device=TARGET)
    adapted = adapt_predictor(base, cal, TARGET)
    moved_small = adapted.predict(small, TARGET)["pred_ms"].iloc[0] / zero_small["pred_ms"].iloc[0]
    moved_big = adapted.predict(big, TARGET)["pred_ms"].iloc[0] / zero_big["pred_ms"].iloc[0]
    # with the host term's prior as small as the offset's: 1.32 and 1.0067; with global slopes the
    # size slope pulled the big relu back to 1.001, with local ones only the offset reaches it: 1.0039
    assert moved_small > 1.34
    assert abs(moved_big - 1.0) < 0.005


def test_profiler_timed_kernels_have_no_host_floor_to_learn():
    """A class measured by its kernels' durations gets no host-floor term; a call-timed one does."""
    from hybridperf.residual_models.features import FEATURE_NAMES
    from hybridperf.transfer.adapt import fit_corrections

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, size=(16, len(FEATURE_NAMES)))
    oc = np.array(["elementwise"] * 8 + ["linear"] * 8)
    timing = np.array(["kernel"] * 8 + ["call"] * 8)
    corr, _ = fit_corrections(X, rng.normal(0.2, 0.05, 16), oc, class_scale={}, timing=timing)
    assert corr["elementwise"].prior.host_floor == 0.0 and corr["linear"].prior.host_floor > 0.0


def _attention_bmms(base, family, rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(8 calibration, the other) attention-shaped fp32 bmm rows on TARGET (64-wide edges, where tile
    families differ), timed as the prior prices them under the batched-SGEMM tile `family` (None: the
    orientation rule)."""
    from hybridperf.devices import get_device

    shapes = [(b, m, n, k) for b in (8, 16, 32) for s in (256, 512, 1024, 2048)
              for m, n, k in ((s, 64, s), (s, s, 64), (64, s, s))]
    rows = canonicalize(pd.DataFrame([{"OPName": "bmm", "B": b, "M": m, "N": n, "K": k} for b, m, n, k in shapes]))
    priced = base.with_constants(base.constants.with_batched_tiles(get_device(TARGET).arch, family))
    truth = priced.predict(rows, TARGET)["pred_ms"].to_numpy()
    rows["latency_ms"] = truth * np.exp(rng.normal(0, 0.03, len(rows)))
    rows["device"] = TARGET
    perm = rng.permutation(len(rows))
    return rows.iloc[perm[:8]].reset_index(drop=True), rows.iloc[perm[8:]].reset_index(drop=True)


def test_measured_bmm_kernels_choose_the_gpu_s_tile_family(base, tmp_path):
    # the prior assumes the L4 runs the A100's 128 x 128 batched SGEMM; this one picks tiles per shape
    cal, held = _attention_bmms(base, None, np.random.default_rng(3))
    zero_shot = _mape(base.predict(held, TARGET), held)
    adapted = adapt_predictor(base, cal, TARGET)
    assert "batched_sgemm_tiles" in adapted.adaptation and adapted.adaptation["batched_sgemm_tiles"] is None
    assert zero_shot > 0.15  # the families really differ on these shapes
    assert _mape(adapted.predict(held, TARGET), held) < 0.3 * zero_shot
    reloaded = Predictor.load(save_adapted(adapted, tmp_path / "adapted"))
    np.testing.assert_allclose(reloaded.predict(held, TARGET)["pred_ms"], adapted.predict(held, TARGET)["pred_ms"],
                               rtol=1e-5)
    # another GPU keeps the zero-shot prior's family
    other = "NVIDIA A10"
    np.testing.assert_allclose(reloaded.predict(held, other)["prior_ms"], base.predict(held, other)["prior_ms"])


def test_bmm_kernels_the_assumed_family_explains_keep_it(base):
    cal, _ = _attention_bmms(base, ((128, 128),), np.random.default_rng(4))
    assert "batched_sgemm_tiles" not in adapt_predictor(base, cal, TARGET).adaptation


def test_suggest_measures_a_bmm_the_tile_families_price_apart(base):
    """The GPU's batched-SGEMM tile family is unknown until its bmm kernels are measured, and only
    vector-math bmm with a 64-wide edge tells the families apart: the design's first pick is one."""
    from hybridperf.devices import get_device
    from hybridperf.transfer.suggest import tile_family_covariance

    shapes = [(b, m, n, k, dt) for b in (8, 32) for s in (256, 1024) for dt in ("fp32", "fp16")
              for m, n, k in ((s, s, 64), (64, s, s), (s, s, s), (s, 96, s))]
    rows = canonicalize(pd.DataFrame([{"OPName": "bmm", "B": b, "M": m, "N": n, "K": k, "dtype": dt}
                                      for b, m, n, k, dt in shapes]))
    sd = np.sqrt(np.diag(tile_family_covariance(base, base.predict(rows, TARGET), get_device(TARGET))))
    fp16 = (rows["dtype"] == "fp16").to_numpy()
    assert (sd[fp16] == 0).all() and sd[~fp16].max() > 0.2  # fp16 runs on tensor cores, no family applies
    pick = suggest_kernels(base, rows, TARGET, k=1).iloc[0]
    chosen = ((rows["B"] == pick["B"]) & (rows["M"] == pick["M"]) & (rows["N"] == pick["N"])
              & (rows["K"] == pick["K"]) & (rows["dtype"] == pick["dtype"])).to_numpy()
    assert sd[chosen][0] > 0.2


def test_a_malformed_tile_family_is_refused(base, tmp_path):
    from hybridperf.errors import ModelBundleError

    cal, _ = _attention_bmms(base, None, np.random.default_rng(3))
    dest = save_adapted(adapt_predictor(base, cal, TARGET), tmp_path / "adapted")
    m = json.loads((dest / MANIFEST).read_text())
    m["adaptation"]["batched_sgemm_tiles"] = [[128]]
    (dest / MANIFEST).write_text(json.dumps(sign_manifest(m)))
    with pytest.raises(ModelBundleError, match="adaptation.batched_sgemm_tiles"):
        Predictor.load(dest)
