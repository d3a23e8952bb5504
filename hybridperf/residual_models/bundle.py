"""A model bundle on disk: ONNX files plus `manifest.json`, verified and run with onnxruntime alone.

The manifest records the feature schema, opset, library versions, a digest of the training data and
the sha256 of every file, and carries the sha256 of its own canonical JSON (`content_sha256`);
`load_bundle` refuses a bundle whose manifest or files do not match (tampered, truncated, swapped),
whose file names leave the bundle folder, or whose feature schema differs from this code's. A model's
outputs are checked on every run. Nothing here unpickles anything.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybridperf.atomic import write_text
from hybridperf.errors import ModelBundleError
from hybridperf.jsonio import read_json_object

MANIFEST = "manifest.json"
FORMAT = "hybridperf-bundle"
FORMAT_VERSION = 1
DIGEST_KEY = "content_sha256"
#: the largest |log(measured / prior)| a residual or correction model may output (a factor of ~22,000);
#: beyond it the model file is broken, not the kernel unusual
MAX_ABS_LOG_RESIDUAL = 10.0


def shipped_models_dir() -> Path:
    """Where the shipped bundles live: the exported_models/ of the source tree this code runs from,
    else the installed package `hybridperf._exported_models` (a wheel), so code and models always
    come from the same checkout."""
    repo = Path(__file__).resolve().parents[2] / "exported_models"
    if repo.is_dir():
        return repo
    try:
        from importlib.resources import files

        p = Path(str(files("hybridperf._exported_models")))
        if p.is_dir():
            return p
    except (ModuleNotFoundError, TypeError):
        pass
    return repo


def manifest_digest(manifest: dict) -> str:
    """sha256 of a manifest's canonical JSON (sorted keys, no spaces), without its own `content_sha256`."""
    body = {k: v for k, v in manifest.items() if k != DIGEST_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sign_manifest(manifest: dict) -> dict:
    """A copy of `manifest` carrying its own digest (`content_sha256`)."""
    return {**manifest, DIGEST_KEY: manifest_digest(manifest)}


def verify_manifest(manifest: dict, where: str) -> None:
    """ModelBundleError unless `manifest` carries the digest of its own content."""
    if DIGEST_KEY not in manifest:
        raise ModelBundleError(f"{where}: the manifest carries no {DIGEST_KEY}, so an edit to it cannot be detected "
                               "(re-export the bundle with this hybridperf)")
    if manifest[DIGEST_KEY] != manifest_digest(manifest):
        raise ModelBundleError(f"{where}: the manifest does not match its {DIGEST_KEY} (edited or corrupt)")


def bundle_file(root: Path, name) -> Path:
    """The path of a file a manifest names, which must lie inside the bundle folder `root`: a plain
    relative name, no `..`, no absolute path, no symbolic link leading out."""
    if not isinstance(name, str) or not name or "\\" in name or name.startswith(("/", "~")) \
            or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ModelBundleError(f"{root}: manifest names the file {name!r}, which is not a plain name inside the bundle")
    path = root / name
    base = root.resolve()
    if not path.resolve().is_relative_to(base):
        raise ModelBundleError(f"{root}: manifest file {name!r} leads outside the bundle (a symbolic link)")
    return path


def check_residuals(values: np.ndarray, where: str) -> np.ndarray:
    """`values` (log residuals a model file produced), unless one is NaN, infinite or absurd."""
    bad = ~np.isfinite(values) | (np.abs(values) > MAX_ABS_LOG_RESIDUAL)
    if bad.any():
        raise ModelBundleError(f"{where} output {values[bad].ravel()[0]:.6g}, not a log residual within "
                               f"+-{MAX_ABS_LOG_RESIDUAL:g}: the model file is broken, or the input lies far outside "
                               "anything it was trained on")
    return values


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Bundle:
    """A verified bundle: its manifest and one onnxruntime session per ONNX file."""

    path: Path
    manifest: dict
    sessions: dict = field(default_factory=dict)

    def run(self, file: str, X: np.ndarray) -> np.ndarray:
        """Run the ONNX model `file` on float32 features X; returns a (rows, outputs) float64 array."""
        sess = self.sessions[file]
        out = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(X, dtype=np.float32)})[0]
        out = np.asarray(out, dtype=np.float64)
        return check_residuals(out.reshape(len(X), -1), f"{self.path}: {file}")


def read_manifest(path: str | Path) -> dict:
    """Parse and sanity-check a bundle's manifest.json."""
    p = Path(path)
    mf = p / MANIFEST if p.is_dir() else p
    if not mf.is_file():
        raise ModelBundleError(f"no {MANIFEST} in model bundle {p}")
    m = read_json_object(mf, error=ModelBundleError)
    if m.get("format") != FORMAT:
        raise ModelBundleError(f"{mf}: not a hybridperf bundle manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise ModelBundleError(f"{mf}: bundle format {m.get('format_version')} unsupported (want {FORMAT_VERSION})")
    if not isinstance(m.get("files"), dict):
        raise ModelBundleError(f"{mf}: manifest lists no files")
    verify_manifest(m, str(mf))
    return m


def load_bundle(path: str | Path, expect_kind: str | None = None, feature_names=None) -> Bundle:
    """Load and verify a bundle directory; raises ModelBundleError on any mismatch."""
    import onnxruntime as ort

    root = Path(path)
    m = read_manifest(root)
    if expect_kind and m.get("kind") != expect_kind:
        raise ModelBundleError(f"{root}: bundle kind {m.get('kind')!r}, expected {expect_kind!r}")
    if feature_names is not None and list(m.get("feature_names", [])) != list(feature_names):
        raise ModelBundleError(f"{root}: bundle feature schema differs from this hybridperf version; retrain or upgrade")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sessions = {}
    for name, digest in m["files"].items():
        f = bundle_file(root, name)
        if not f.is_file():
            raise ModelBundleError(f"{root}: file {name} listed in the manifest is missing")
        if sha256_file(f) != digest:
            raise ModelBundleError(f"{root}: {name} does not match its sha256 in the manifest (tampered or corrupt)")
        if name.endswith(".onnx"):
            try:
                sessions[name] = ort.InferenceSession(str(f), sess_options=opts, providers=["CPUExecutionProvider"])
            except Exception as e:  # onnxruntime raises its own exception types
                raise ModelBundleError(f"{root}: {name} is not a loadable ONNX model ({str(e).splitlines()[0]})") from None
    _check_references(root, m, sessions, feature_names)
    _check_values(root, m, feature_names)
    return Bundle(path=root, manifest=m, sessions=sessions)


def _check_references(root: Path, m: dict, sessions: dict, feature_names) -> None:
    """Every model the manifest uses is a listed, loaded ONNX file taking the full feature vector."""
    used = [mem["file"] for spec in m.get("op_classes", {}).values() for mem in spec.get("members", [])]
    used += [c["file"] for c in (m.get("adaptation") or {}).get("corrections", {}).values()]
    width = len(feature_names) if feature_names is not None else None
    for name in used:
        if name not in sessions:
            raise ModelBundleError(f"{root}: manifest uses {name}, which is not a listed ONNX file")
        shape = sessions[name].get_inputs()[0].shape
        if width is not None and (len(shape) != 2 or shape[1] != width):
            raise ModelBundleError(f"{root}: {name} takes input shape {shape}, expected [rows, {width}]")


def _check_values(root: Path, m: dict, feature_names) -> None:
    """The manifest's numbers the predictor computes with are finite numbers of the right shape, so
    an edited manifest fails here with one line instead of deep inside a prediction."""
    def number(x, where: str, lo: float = -np.inf) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x) or x < lo:
            raise ModelBundleError(f"{root}: manifest {where} is {x!r}, not a finite number" + (f" >= {lo}" if lo > -np.inf else ""))

    for key, spec in (m.get("op_classes") or {}).items():
        if not isinstance(spec, dict):
            raise ModelBundleError(f"{root}: manifest op_classes.{key} is not an object")
        for i, member in enumerate(spec.get("members", [])):
            number(member.get("weight"), f"op_classes.{key}.members[{i}].weight", 0.0)
        if spec.get("interval") is not None:
            _check_interval(root, spec["interval"], f"op_classes.{key}.interval", number)
        rng = spec.get("feature_range")
        if rng is not None:
            for f in ("lo", "hi", "scale"):
                v = rng.get(f)
                if not isinstance(v, list) or (feature_names is not None and len(v) != len(feature_names)):
                    raise ModelBundleError(f"{root}: manifest op_classes.{key}.feature_range.{f} is not a list "
                                           "of one number per feature")
                for j, x in enumerate(v):
                    number(x, f"op_classes.{key}.feature_range.{f}[{j}]")
    adapted = (m.get("adaptation") or {}).get("intervals", {})
    if not isinstance(adapted, dict):
        raise ModelBundleError(f"{root}: manifest adaptation.intervals is not {{op_class:dtype: interval}}")
    for key, iv in adapted.items():
        _check_interval(root, iv, f"adaptation.intervals.{key}", number)
    _check_tile_family(root, m.get("adaptation") or {})
    bias = m.get("device_bias", {})
    if not isinstance(bias, dict) or not all(isinstance(v, dict) for v in bias.values()):
        raise ModelBundleError(f"{root}: manifest device_bias is not {{device: {{stratum:dtype: number}}}}")
    for dev, strata in bias.items():
        for key, x in strata.items():
            number(x, f"device_bias[{dev!r}].{key}")
    for group in ("constants", "custom_all_reduce") if m.get("kind") == "collectives" else ():
        for key, x in (m.get(group) or {}).items():
            number(x, f"{group}.{key}", 0.0)
    if m.get("kind") == "collectives" and m.get("interval") is not None:
        _check_interval(root, m["interval"], "interval", number)
        for key, iv in (m["interval"].get("strata") or {}).items():
            _check_interval(root, iv, f"interval.strata.{key}", number)


def _check_tile_family(root: Path, adaptation: dict) -> None:
    """An adapted bundle's batched-SGEMM tile family is null (the orientation rule) or a list of
    [rows, columns] tiles the GEMM prior knows."""
    if "batched_sgemm_tiles" not in adaptation or adaptation["batched_sgemm_tiles"] is None:
        return
    from hybridperf.priors.gemm import TILES

    known = {(t[0], t[1]) for t in TILES}
    family = adaptation["batched_sgemm_tiles"]
    if not isinstance(family, list) or not family or \
            not all(isinstance(t, list) and len(t) == 2 and tuple(t) in known for t in family):
        raise ModelBundleError(f"{root}: manifest adaptation.batched_sgemm_tiles is {family!r}, not null or a list "
                               f"of tiles among {sorted(known)}")


def _check_interval(root: Path, iv, where: str, number) -> None:
    """A 90% interval: finite q_lo <= q_hi, optional non-negative widening terms, floor-share bins."""
    if not isinstance(iv, dict):
        raise ModelBundleError(f"{root}: manifest {where} is not an object")
    for f in ("q_lo", "q_hi"):
        number(iv.get(f), f"{where}.{f}")
    if iv["q_lo"] > iv["q_hi"]:
        raise ModelBundleError(f"{root}: manifest {where} has q_lo > q_hi")
    for f in ("ood_beta", "device_shift_q90"):
        if f in iv:
            number(iv[f], f"{where}.{f}", 0.0)
    for f in ("q_center", "ood_ref"):
        if f in iv:
            number(iv[f], f"{where}.{f}")
    if "by_floor_share" in iv:
        _check_regimes(root, iv["by_floor_share"], f"{where}.by_floor_share", number)


def _check_regimes(root: Path, regimes, where: str, number) -> None:
    """Floor-share bins: increasing edges in (0, 1) and, per bin (one more than edges), finite
    quantiles with q_lo <= q_hi (`hybridperf.residual_models.intervals`)."""
    if not isinstance(regimes, dict) or not isinstance(regimes.get("edges"), list):
        raise ModelBundleError(f"{root}: manifest {where} is not {{edges: [...], q_lo: [...], q_hi: [...], q_center: [...]}}")
    edges = regimes["edges"]
    for j, x in enumerate(edges):
        number(x, f"{where}.edges[{j}]", 0.0)
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ModelBundleError(f"{root}: manifest {where}.edges are not increasing")
    for k in ("q_lo", "q_hi", "q_center"):
        v = regimes.get(k)
        if not isinstance(v, list) or len(v) != len(edges) + 1:
            raise ModelBundleError(f"{root}: manifest {where}.{k} is not a list of {len(edges) + 1} numbers")
        for j, x in enumerate(v):
            number(x, f"{where}.{k}[{j}]")
    if any(lo > hi for lo, hi in zip(regimes["q_lo"], regimes["q_hi"])):
        raise ModelBundleError(f"{root}: manifest {where} has a bin with q_lo > q_hi")


def write_manifest(root: Path, manifest: dict) -> None:
    """Fill in the sha256 of every listed file and of the manifest itself, and write manifest.json."""
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["format_version"] = FORMAT_VERSION
    manifest["files"] = {name: sha256_file(bundle_file(root, name)) for name in sorted(manifest["files"])}
    write_text(root / MANIFEST, json.dumps(sign_manifest(manifest), indent=1, sort_keys=True))


def stratum_key(op_class: str, timing: str = "call") -> str:
    """Manifest key of a calibration stratum: the op class, suffixed `@kernel` for profiler-timed
    rows (blend, shrinkage and interval may differ between a timed call and a kernel's duration)."""
    return op_class if timing == "call" else f"{op_class}@{timing}"


def bias_key(op_class: str, timing: str = "call", dtype: str = "fp32") -> str:
    """Manifest `device_bias` key: the stratum and the dtype (`linear@kernel:fp16`). fp32 and half
    precision run different kernels (SIMT and tensor-core GEMMs, other vector widths), so a GPU
    measured in both gets one bias per dtype."""
    return f"{stratum_key(op_class, timing)}:{dtype}"


def correction_key(op_class: str, dtype: str) -> str:
    """Key of a few-shot correction and its interval (`linear:fp16`): each dtype measured on the
    target GPU gets its own, because fp16 kernels' errors do not carry to fp32 ones (fp16 kernels moved
    fp32 predictions on our H200 from 6.8 to 8.3% MAPE, experiments/transfer/cross_dtype_transfer.py)."""
    return f"{op_class}:{dtype}"


def measured_bias(bias: dict, op_class: str, timing: str = "call", dtype: str | None = "fp32") -> float | None:
    """A training GPU's measured bias (`device_bias[device]`) for rows of (op class, timing, dtype),
    or None where the GPU was not measured there; `dtype=None` takes any dtype's. Manifests from
    before per-dtype keys (no `:`) hold one bias per stratum, for whatever dtypes were measured."""
    stratum = stratum_key(op_class, timing)
    if bias and not any(":" in k for k in bias):
        return bias.get(stratum)
    if dtype is not None:
        return bias.get(bias_key(op_class, timing, dtype))
    return next((v for k, v in bias.items() if k.rsplit(":", 1)[0] == stratum), None)
