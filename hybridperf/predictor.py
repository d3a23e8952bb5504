"""`Predictor`: kernel latency = analytical prior x exp(learned residual), with a calibrated 90% interval.

Runs on numpy, pandas and onnxruntime only. Usage:

    from hybridperf.predictor import Predictor
    p = Predictor.load()                       # the shipped bundle (exported_models/kernels)
    out = p.predict(kernels_df, "NVIDIA H100 80GB HBM3")
    out[["pred_ms", "lo_ms", "hi_ms"]]
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import DeviceSpec, dtype_key, get_device
from hybridperf.errors import InputError, ModelBundleError
from hybridperf.ops import GEMM_OPS
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants
from hybridperf.priors.kernel_prior import kernel_prior_terms
from hybridperf.priors.launch import check_host, check_timing, row_timing
from hybridperf.residual_models.bundle import (Bundle, correction_key, load_bundle, measured_bias, shipped_models_dir,
                                              stratum_key)
from hybridperf.residual_models.features import FEATURE_NAMES, kernel_features
from hybridperf.residual_models.intervals import interval_quantiles
from hybridperf.stats import Z90, widen_about, widen_in_quadrature

#: used only when no bundle is available: central 90% band of log(measured/prior), a wide default
FALLBACK_INTERVAL = {"q_lo": -0.7, "q_hi": 0.7, "ood_beta": 0.0}
#: device-level efficiency error (sd, log) of a GPU the prior's constants were never set on. The
#: bundle's conformal intervals come from leave-one-GPU-out on NeuSight's five GPUs, but the prior's
#: few global constants (achievable bandwidth, tile efficiencies) were chosen on those same GPUs, so
#: there the device-level error is in-sample. On the two GPUs that had no say in them (Vidur's
#: A100-SXM4-80GB and A40), large memory-bound kernels run at 1.07x and 0.91x the prior: RMS 0.085 in
#: log. An unseen device's interval adds it in quadrature (1.645 sd at 90%); the bundle's training
#: devices do not, and a device the bundle was adapted to adds what its measured kernels left of it
#: (`device_shift_q90`).
DEVICE_SHIFT_SD = 0.085
DEVICE_SHIFT_Q90 = Z90 * DEVICE_SHIFT_SD  # its 90% half-width (log)
#: the same error for a bundle trained on ONE GPU, whose interval (cross-validated inside that GPU)
#: holds no device-to-device variation at all: the spread between GPUs of the prior's per-class bias,
#: RMS over the op classes of NeuSight's five GPUs (sd per class: bmm 0.08, elementwise 0.08,
#: LayerNorm 0.05, linear 0.30, softmax 0.21)
SINGLE_GPU_DEVICE_SD = 0.174


def device_shift_sd(n_training_devices: int) -> float:
    """Prior sd (log) of an unseen GPU's device-level error for a bundle trained on that many GPUs."""
    return SINGLE_GPU_DEVICE_SD if n_training_devices == 1 else DEVICE_SHIFT_SD


def device_shift_q90(n_rows: int, half_width: float, prior_sd: float = DEVICE_SHIFT_SD) -> float:
    """90% half-width (log) of the device-level error left in one op class after `n_rows` of its
    kernels were measured on the device: the posterior sd of a class offset with prior sd
    `prior_sd`, observed through rows that scatter with the class's interval (`half_width`, log,
    at 90%). No rows: 1.645 x prior_sd; many rows: nearly 0."""
    if n_rows <= 0:
        return Z90 * prior_sd
    noise_sd = max(half_width, 1e-3) / Z90
    return float(Z90 / np.sqrt(1.0 / prior_sd ** 2 + n_rows / noise_sd ** 2))


OOD_CLIP = 5.0


class _OnnxCorrection:
    """A transfer correction stored as an ONNX file of a bundle."""

    def __init__(self, bundle: Bundle, file: str):
        self.bundle, self.file = bundle, file

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.bundle.run(self.file, X)[:, 0]


#: features the device sets (alone, or with the kernel's shape). One that never varied in training (a
#: bundle fitted on one GPU) has no spread to measure a distance in, and a new GPU's value says only
#: that the GPU is new, which the device-level interval term (`device_shift_sd`) already adds.
DEVICE_FEATURES = ("power_capped", "log_tiles_per_sm", "log_tiles_per_sm_x_occupancy", "l2_hit", "log_bytes_over_l2",
                   "log_bytes_per_sm", "log_flops_per_sm", "log_waves", "wave_efficiency", "tile_m", "tile_n",
                   "tile_efficiency", "log_split_k", "parallel_fraction")
_DEVICE_COLUMNS = np.isin(np.array(FEATURE_NAMES), DEVICE_FEATURES)


def ood_score(X: np.ndarray, rng: dict, skip_device_constants: bool = True) -> np.ndarray:
    """How far each row lies outside the training range, in units of the training spread (0 inside).
    Device features that were constant in training are skipped (`DEVICE_FEATURES`) unless
    `skip_device_constants` is False."""
    lo, hi, scale = (np.asarray(rng[k], dtype=np.float64) for k in ("lo", "hi", "scale"))
    below = (lo - X) / scale
    above = (X - hi) / scale
    beyond = np.maximum(np.maximum(below, above), 0.0)
    if skip_device_constants and beyond.shape[1] == len(_DEVICE_COLUMNS):
        beyond[:, _DEVICE_COLUMNS & (hi <= lo)] = 0.0
    return np.clip(np.max(beyond, axis=1, initial=0.0), 0.0, OOD_CLIP)


def ood_widening(interval: dict, ood: np.ndarray) -> np.ndarray:
    """Factor an interval is widened by for rows with out-of-range scores `ood`: by how far beyond the
    training range (or, after transfer, beyond the measured kernels, `ood_ref`) each row lies."""
    beyond = np.maximum(np.asarray(ood, np.float64) - interval.get("ood_ref", 0.0), 0.0)
    return 1.0 + interval.get("ood_beta", 0.0) * beyond


#: dtypes only GEMM operands come in: PyTorch has no fp8 or fp4 element-wise, softmax or LayerNorm
#: kernels (it raises "not implemented for 'Float8_e4m3fn'"), and int8/int4 here denote quantized GEMM
#: operands, whose element-wise neighbours run in fp16/bf16
MATMUL_ONLY_DTYPES = ("fp8", "int8", "fp4", "int4")


def check_runs_on(kernels: pd.DataFrame, device: DeviceSpec) -> None:
    """Refuse kernels no PyTorch program runs: an element-wise op, softmax or LayerNorm in a
    matmul-only dtype (fp8, int8, fp4, int4), and fp8 GEMMs on a GPU without fp8 matrix units (only
    Ada, Hopper, Blackwell and CDNA3 have them; elsewhere PyTorch raises), so no latency is meaningful."""
    keys = kernels["dtype"].map(dtype_key)
    odd = ~kernels["op"].isin(GEMM_OPS).to_numpy() & keys.isin(MATMUL_ONLY_DTYPES).to_numpy()
    if odd.any():
        i = int(np.argmax(odd))
        raise InputError(f"data row {i + 1}: no {keys.iloc[i]} {kernels['op'].iloc[i]} kernel is modelled: only GEMMs "
                         f"take {', '.join(MATMUL_ONLY_DTYPES)} operands (PyTorch has no fp8 element-wise, softmax or "
                         "LayerNorm kernels); give the dtype the op runs in (fp16, bf16, fp32)")
    if device.has_matrix_units("fp8"):
        return
    fp8 = kernels["op"].isin(GEMM_OPS).to_numpy() & (keys == "fp8").to_numpy()
    if fp8.any():
        i = int(np.argmax(fp8))
        raise InputError(f"data row {i + 1}: {device.name} has no fp8 matrix units, so an fp8 "
                         f"{kernels['op'].iloc[i]} cannot run on it")


class Predictor:
    """Hybrid kernel-latency predictor backed by a verified ONNX bundle (or the prior alone).

    `corrections` ({`correction_key`: callable(X) -> log-correction}) and `intervals` ({key: interval})
    hold a few-shot adaptation to one device (see hybridperf.transfer), keyed by op class and dtype
    (`linear:fp16`); an interval keyed by the op class alone serves that class's unmeasured dtypes.
    Adapted bundles from before per-dtype keys hold one correction per op class, for every dtype. An
    adapted bundle on disk carries them as ONNX files and manifest entries. `constants`: the GPU-fitted
    prior constants it prices with (`with_constants(fitted_constants(exclude_device=...))` holds a GPU out).
    """

    def __init__(self, bundle: Bundle | None = None, corrections: dict | None = None, intervals: dict | None = None,
                 constants: PriorConstants = DEFAULT_CONSTANTS):
        self.bundle = bundle
        self.constants = constants
        self.corrections = dict(corrections or {})
        self.intervals = dict(intervals or {})
        self.adaptation = (bundle.manifest.get("adaptation") if bundle else None) or None
        if bundle is not None and self.adaptation and not self.corrections:
            for key, c in self.adaptation.get("corrections", {}).items():
                self.corrections[key] = _OnnxCorrection(bundle, c["file"])
            self.intervals = dict(self.adaptation.get("intervals", {}))

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Predictor":
        """Load a kernel bundle directory (default: the shipped one)."""
        root = Path(path) if path is not None else shipped_models_dir() / "kernels"
        if not root.exists():
            raise ModelBundleError(f"model bundle not found: {root}")
        return cls(load_bundle(root, expect_kind="kernels", feature_names=FEATURE_NAMES))

    @classmethod
    def prior_only(cls) -> "Predictor":
        """A predictor that uses the analytical prior alone, with a wide default interval."""
        return cls(None)

    def with_constants(self, constants: PriorConstants) -> "Predictor":
        """A copy of this predictor that prices with `constants`."""
        out = copy.copy(self)
        out.constants = constants
        return out

    def check_device(self, device: DeviceSpec, allow_other: bool = False) -> None:
        """Refuse to predict `device` with a bundle adapted to another GPU (its corrections and intervals
        were measured there) unless `allow_other` (the CLI's --allow-other-device)."""
        adapted = (self.adaptation or {}).get("device")
        if adapted and adapted != device.name and not allow_other:
            raise ModelBundleError(f"{self.bundle.path} was adapted to {adapted}, not {device.name}; use the "
                                   "zero-shot bundle, adapt one to this GPU (`hybridperf transfer`), or pass "
                                   "--allow-other-device")

    @property
    def manifest(self) -> dict:
        return self.bundle.manifest if self.bundle else {}

    @property
    def device_shift_sd(self) -> float:
        """Prior sd (log) of the device-level error on a GPU this bundle was not trained on."""
        return device_shift_sd(len(self.training_devices))

    @property
    def training_devices(self) -> set:
        """Names of the GPUs the bundle's residual models were trained on."""
        return set(self.manifest.get("training_data", {}).get("devices", []))

    def measured_on(self, device: str, op_class: str, timing: str = "call", dtype: str | None = "fp32") -> bool:
        """Whether the bundle was trained on `device`'s kernels of this op class, timing and dtype
        (`dtype=None`: any). A GPU in the training set for one stratum only (Vidur's profiler-timed fp16
        A100-SXM4-80GB) is still unseen for the others: its call-timed fp32 kernels get no measured bias
        and the device-level error."""
        if self.bundle is None:
            return False
        bias = self.manifest.get("device_bias")
        if bias is None:  # a bundle from before per-stratum biases: its whole training set counts
            return device in self.training_devices
        return measured_bias(bias.get(device, {}), op_class, timing, dtype) is not None

    def residual(self, op_class: str, X: np.ndarray, timing: str = "call",
                 dtype: str = "fp32") -> tuple[np.ndarray, dict]:
        """Blended log-residual for rows of one op class, timing and dtype, and the manifest entry used:
        the stratum `op_class@kernel` for profiler-timed rows when the bundle has one, else the class's.
        A few-shot correction applies to the dtype it was measured in (legacy: to every dtype)."""
        classes = self.manifest.get("op_classes", {})
        spec = classes.get(stratum_key(op_class, timing)) or classes.get(op_class) \
            or {"members": [], "interval": FALLBACK_INTERVAL}
        r = np.zeros(len(X))
        for member in spec["members"]:
            out = self.bundle.run(member["file"], X)
            r += member["weight"] * out.mean(axis=1)
        key = correction_key(op_class, dtype)
        correction = self.corrections.get(key, self.corrections.get(op_class))
        if correction is not None:
            r += correction(X)
        interval = self.intervals.get(key, self.intervals.get(op_class))
        if interval is not None:
            spec = {**spec, "interval": interval}
        return r, spec

    def features(self, kernels: pd.DataFrame, device: str | DeviceSpec, timing: str | None = None) -> np.ndarray:
        """The residual models' feature matrix for canonical `kernels` on `device`."""
        dev = get_device(device)
        return kernel_features(kernels, self.prior_terms(kernels, dev, timing), dev)

    def prior_terms(self, kernels: pd.DataFrame, device: DeviceSpec, timing: str | None = None) -> pd.DataFrame:
        """The analytical prior's terms for `kernels` on `device`: on the device this predictor was adapted
        to, with the batched-SGEMM tile family its measured kernels chose (`adaptation.batched_sgemm_tiles`)."""
        adaptation = self.adaptation or {}
        constants = self.constants
        if adaptation.get("device") == device.name and "batched_sgemm_tiles" in adaptation:
            constants = constants.with_batched_tiles(device.arch, adaptation["batched_sgemm_tiles"])
        return kernel_prior_terms(kernels, device, timing, constants)

    def predict(self, kernels: pd.DataFrame, device: str | DeviceSpec, timing: str | None = None,
                host: str | None = None) -> pd.DataFrame:
        """Predict every row of `kernels` (canonical or NeuSight-style columns) on `device`.

        `timing` (`call` or `kernel`, see hybridperf.priors.launch) sets how the predicted latency is
        measured, for every row; by default each row's `timing` column, else `call`. `host`
        (`current` or `neusight`) whose per-call overhead a timed call carries; by default each row's
        `host` column, else `current`.
        Returns the canonical rows plus prior_ms, pred_ms, lo_ms, hi_ms (central 90% interval, by the
        share of the launch floor in the prior: `residual_models.intervals`) and ood (0 = inside the
        training range). On a GPU the bundle was trained on, the bias measured
        there per op class, timing and dtype (manifest `device_bias`, kept out of the demeaned models) is
        applied too; an unseen GPU has none to apply.
        """
        return self.predict_with_features(kernels, device, timing, host, features=False)[0]

    def predict_with_features(self, kernels: pd.DataFrame, device: str | DeviceSpec, timing: str | None = None,
                              host: str | None = None, features: bool = True) -> tuple[pd.DataFrame, np.ndarray | None]:
        """`predict`, and the residual models' feature matrix of its rows (as `features` gives for the
        returned rows) from the same prior terms (None when `features` is False and there is no bundle)."""
        dev = get_device(device)
        df = kernels if "op_class" in kernels.columns and "flops" in kernels.columns else canonicalize(kernels)
        df = df.reset_index(drop=True)
        check_runs_on(df, dev)
        if timing is not None:
            df = df.assign(timing=check_timing(timing))
        if host is not None:
            df = df.assign(host=check_host(host))
        terms = self.prior_terms(df, dev)
        prior = terms["prior_ms"].to_numpy()
        floor_share = terms["floor_ms"].to_numpy() / prior
        pred = prior.copy()
        lo = np.empty(len(df))
        hi = np.empty(len(df))
        ood = np.zeros(len(df))
        X = kernel_features(df, terms, dev) if self.bundle or features else None
        adapted_here = bool(self.adaptation) and self.adaptation.get("device") == dev.name
        timings = row_timing(df)
        known_bias = self.manifest.get("device_bias", {}).get(dev.name, {}) if self.bundle else {}
        for (oc, tm, dt), idx in df.groupby([df["op_class"], timings, df["dtype"]], sort=False).indices.items():
            if self.bundle is None:
                r, spec = np.zeros(len(idx)), {"interval": FALLBACK_INTERVAL}
            else:
                r, spec = self.residual(oc, X[idx], tm, dt)
            iv = spec["interval"]
            if "feature_range" in spec:
                ood[idx] = ood_score(X[idx], spec["feature_range"])
            # the row's floor-share regime, widened about its centre
            q_lo, q_hi, q_c = interval_quantiles(iv, floor_share[idx])
            zero_shot = self.bundle is not None and not adapted_here
            trained_here = zero_shot and self.measured_on(dev.name, oc, tm, dt)
            unseen = zero_shot and not trained_here
            if trained_here:
                # a training GPU's own offset is applied (`device_bias`): drop the unseen GPUs' typical
                # offset, the class's overall centre, and keep each regime's offset from it
                offset = iv.get("q_center", 0.0)
                q_lo, q_hi, q_c = q_lo - offset, q_hi - offset, q_c - offset
            q_lo, q_hi = widen_about(q_lo, q_hi, q_c, ood_widening(iv, ood[idx]))
            shift = iv.get("device_shift_q90", 0.0) if adapted_here else Z90 * self.device_shift_sd if unseen else 0.0
            if shift > 0:
                q_lo, q_hi = widen_in_quadrature(q_lo, q_hi, shift)
            q_lo, q_hi = np.minimum(q_lo, 0.0), np.maximum(q_hi, 0.0)  # the interval holds its prediction
            pred[idx] = prior[idx] * np.exp(r + (measured_bias(known_bias, oc, tm, dt) or 0.0))
            lo[idx] = pred[idx] * np.exp(q_lo)
            hi[idx] = pred[idx] * np.exp(q_hi)
        out = df.copy()
        out["prior_ms"] = prior
        out["pred_ms"] = pred
        out["lo_ms"] = lo
        out["hi_ms"] = hi
        out["ood"] = ood
        return out, X
