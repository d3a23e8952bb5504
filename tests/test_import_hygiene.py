"""The prediction path imports neither torch nor xgboost nor scikit-learn, and nothing in the package
unpickles (DESIGN.md, Principles: serialization and the prediction path)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hybridperf"
TRAINING_ONLY = ("torch", "xgboost", "sklearn")

_SCRIPT = textwrap.dedent("""
    import json, sys
    import pandas as pd

    bundle, csv, out = sys.argv[1], sys.argv[2], sys.argv[3]
    from hybridperf.predictor import Predictor

    rows = pd.DataFrame({"OPName": ["bmm", "linear", "add", "softmax", "ln", "gelu"],
                         "B": [4, 2, 128, 12, 64, 8], "M": [128, 512, None, None, None, None],
                         "N": [64, 768, None, None, None, None], "K": [256, 3072, None, None, None, None],
                         "H": [None, None, 1024, 128, 768, 4096]})
    done = []
    res = Predictor.prior_only().predict(rows, "NVIDIA H100 80GB HBM3")
    assert (res["pred_ms"] > 0).all()
    done.append("prior_only")
    if bundle != "-":
        res = Predictor.load(bundle).predict(rows, "Tesla T4")
        assert (res["pred_ms"] > 0).all()
        done.append("bundle")
    import hybridperf.cli.app as cli
    rows.to_csv(csv, index=False)
    sys.argv = ["hybridperf", "predict-kernels", csv, "--device", "NVIDIA L4", "--output", out]
    sys.argv += ["--model-bundle", bundle] if bundle != "-" else ["--prior-only"]
    cli.main()
    assert len(pd.read_csv(out)) == len(rows)
    done.append("cli")
    loaded = sorted(m for m in ("torch", "xgboost", "sklearn", "onnxmltools", "skl2onnx", "mlflow")
                    if m in sys.modules)
    print(json.dumps({"done": done, "loaded": loaded}))
""")


def _run_prediction_path(bundle: str, tmp_path: Path) -> dict:
    import json

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", _SCRIPT, bundle, str(tmp_path / "in.csv"), str(tmp_path / "out.csv")],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_prior_only_path_imports_no_training_libraries(tmp_path):
    res = _run_prediction_path("-", tmp_path)
    assert res["done"] == ["prior_only", "cli"]
    assert not set(res["loaded"]) & set(TRAINING_ONLY), res["loaded"]
    assert res["loaded"] == [], res["loaded"]


def test_bundle_path_imports_no_training_libraries(tiny_bundle, tmp_path):
    res = _run_prediction_path(str(tiny_bundle), tmp_path)
    assert res["done"] == ["prior_only", "bundle", "cli"]
    assert not set(res["loaded"]) & set(TRAINING_ONLY), res["loaded"]
    assert res["loaded"] == [], res["loaded"]


# ---------------------------------------------------------------------------------------------------
# no unpickling anywhere in the package

_SOURCES = sorted(PACKAGE.rglob("*.py"))
_FORBIDDEN = {
    "import pickle": re.compile(r"^\s*(import\s+(c?pickle|dill|cloudpickle)\b|from\s+(c?pickle|dill|cloudpickle)\s+import)",
                                re.M),
    "import joblib": re.compile(r"^\s*(import\s+joblib\b|from\s+joblib\b)", re.M),
    "torch.load(": re.compile(r"\btorch\.load\s*\("),
    "pickle.load(": re.compile(r"\bpickle\.loads?\s*\("),
    "allow_pickle=True": re.compile(r"allow_pickle\s*=\s*True"),
    "pd.read_pickle(": re.compile(r"\bread_pickle\s*\("),
}


def test_sources_found():
    assert len(_SOURCES) > 20
    assert PACKAGE / "predictor.py" in _SOURCES


@pytest.mark.parametrize("what", sorted(_FORBIDDEN))
def test_no_unpickling_in_package(what):
    hits = []
    for f in _SOURCES:
        text = f.read_text(encoding="utf-8")
        for m in _FORBIDDEN[what].finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"{f.relative_to(REPO)}:{line}")
    assert not hits, f"{what} in {hits}"
