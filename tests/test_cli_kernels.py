"""`hybridperf predict-kernels` (docs/predict-kernels.md): output shape and one-line errors on bad input.

Successful runs go through typer's CliRunner; error runs go through `hybridperf.cli.app.main()` (what
`python -m hybridperf` and the `hybridperf` script call) in-process, so that the exit code and stderr are
exactly what a user sees; a few runs use a real `python -m hybridperf` subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app, main
from hybridperf.residual_models.bundle import sign_manifest
from conftest import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

GOOD_ROWS = [
    {"OPName": "bmm", "B": 4, "M": 128, "N": 64, "K": 256, "H": None, "Latency": 0.1, "junk": "x"},
    {"OPName": "add", "B": 128, "M": None, "N": None, "K": None, "H": 1024, "Latency": 0.05, "junk": "y"},
    {"OPName": "ln", "B": 64, "M": None, "N": None, "K": None, "H": 768, "Latency": None, "junk": "z"},
    {"OPName": "linear", "B": 2, "M": 512, "N": 768, "K": 3072, "H": None, "Latency": 0.3, "junk": "w"},
    {"OPName": "softmax", "B": 12, "M": None, "N": None, "K": None, "H": 128, "Latency": 0.02, "junk": "q"},
    {"OPName": "gelu", "B": 8, "M": None, "N": None, "K": None, "H": 4096, "Latency": 0.03, "junk": "x"},
    {"OPName": "divu", "B": 8, "M": None, "N": None, "K": None, "H": 4096, "Latency": 0.03, "junk": ""},
    {"OPName": "bmm", "B": 1, "M": 1, "N": 1, "K": 1, "H": None, "Latency": 0.02, "junk": "y"},
]
PRED_COLS = ["pred_ms", "pred_lo_ms", "pred_hi_ms"]


@pytest.fixture
def good_csv(tmp_path) -> Path:
    p = tmp_path / "kernels.csv"
    pd.DataFrame(GOOD_ROWS).to_csv(p, index=False)
    return p


def _predict(args) -> tuple[int, str]:
    r = runner.invoke(app, ["predict-kernels", *map(str, args)])
    return r.exit_code, r.output


def _check_output(inp: Path, out: Path) -> pd.DataFrame:
    raw = pd.read_csv(inp)
    res = pd.read_csv(out)
    assert len(res) == len(raw)
    assert list(res.columns[: len(raw.columns)]) == list(raw.columns)
    for c in PRED_COLS:
        assert c in res.columns
    pd.testing.assert_frame_equal(res[list(raw.columns)], raw)  # every input row and column unchanged, in order
    for c in PRED_COLS:
        assert np.isfinite(res[c]).all() and (res[c] > 0).all(), c
    assert (res["pred_lo_ms"] <= res["pred_ms"]).all() and (res["pred_ms"] <= res["pred_hi_ms"]).all()
    return res


@pytest.mark.parametrize("device", ["Tesla T4", "H100-SXM", "NVIDIA L4", "AMD Instinct MI300X"])
def test_prior_only_keeps_rows_and_columns(good_csv, tmp_path, device):
    out = tmp_path / "out" / "pred.csv"  # parent directory created on demand
    code, text = _predict([good_csv, "--device", device, "--output", out, "--prior-only"])
    assert code == 0, text
    _check_output(good_csv, out)


def test_output_adds_exactly_three_columns(good_csv, tmp_path):
    out = tmp_path / "pred.csv"
    assert _predict([good_csv, "--device", "Tesla T4", "--output", out, "--prior-only"])[0] == 0
    assert list(pd.read_csv(out).columns) == [*pd.read_csv(good_csv).columns, *PRED_COLS]


def test_prior_only_with_device_json(good_csv, tmp_path):
    spec = {"Device": "Foo GPU", "Dev_Mem": 16, "Mem_Bw": 900, "Num_Sm": 80, "Core_Per_SM": 64, "Freq": 1530,
            "SingleFLOPs": 15700, "L2Cache": 6}
    p = tmp_path / "foo.json"
    p.write_text(json.dumps(spec))
    out = tmp_path / "pred.csv"
    code, text = _predict([good_csv, "--device", p, "--output", out, "--prior-only"])
    assert code == 0, text
    _check_output(good_csv, out)


def test_minimal_columns_and_dtype(tmp_path):
    inp = tmp_path / "k.csv"
    pd.DataFrame({"OPName": ["relu", "mul", "softmax"], "B": [4, 4, 4], "H": [1024, 1024, 1024],
                  "dtype": ["float32", "float16", "bf16"]}).to_csv(inp, index=False)
    out = tmp_path / "pred.csv"
    code, text = _predict([inp, "--device", "NVIDIA A100 80GB PCIe", "--output", out,
                           "--prior-only"])
    assert code == 0, text
    _check_output(inp, out)


def test_header_only_input_gives_header_only_output(tmp_path):
    inp = tmp_path / "k.csv"
    inp.write_text("OPName,B,M,N,K,H\n")
    out = tmp_path / "pred.csv"
    code, text = _predict([inp, "--device", "Tesla T4", "--output", out, "--prior-only"])
    assert code == 0, text
    res = pd.read_csv(out)
    assert len(res) == 0 and set(PRED_COLS) <= set(res.columns)


def test_model_bundle(good_csv, tiny_bundle, tmp_path):
    out = tmp_path / "pred.csv"
    code, text = _predict([good_csv, "--device", "Tesla T4", "--output", out, "--model-bundle", tiny_bundle])
    assert code == 0, text
    res = _check_output(good_csv, out)
    from hybridperf.predictor import Predictor

    expect = Predictor.load(tiny_bundle).predict(pd.read_csv(good_csv), "Tesla T4")
    np.testing.assert_allclose(res["pred_ms"], expect["pred_ms"], rtol=1e-6)
    np.testing.assert_allclose(res["pred_lo_ms"], expect["lo_ms"], rtol=1e-6)
    np.testing.assert_allclose(res["pred_hi_ms"], expect["hi_ms"], rtol=1e-6)


def test_model_bundle_with_calibration(good_csv, tiny_bundle, tmp_path):
    cal = tmp_path / "cal.csv"
    rows = pd.DataFrame(GOOD_ROWS).dropna(subset=["Latency"])
    rows.to_csv(cal, index=False)
    out = tmp_path / "pred.csv"
    code, text = _predict([good_csv, "--device", "NVIDIA L4", "--output", out, "--model-bundle", tiny_bundle,
                           "--calibration", cal])
    assert code == 0, text
    _check_output(good_csv, out)


# ---------------------------------------------------------------------------------------------------
# bad input: exit != 0, exactly one line on stderr starting with "error:", no traceback


def _write(tmp_path, name, content) -> Path:
    p = tmp_path / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


BAD_INPUTS = {
    "binary_garbage": bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8)),
    "unbalanced_quotes": 'OPName,B,M,N,K,H\n"bmm,4,128,64,256,\nadd,1,,,,5\n',
    "empty_file": "",
    "missing_opname": "Op,B,H\nadd,1,5\n",
    "unknown_op": "OPName,B,H\nconv2d,1,5\n",
    "nan_shape": "OPName,B,M,N,K,H\nbmm,4,nan,64,256,\n",
    "missing_shape": "OPName,B,M,N,K,H\nbmm,4,,64,256,\n",
    "negative_B": "OPName,B,H\nadd,-3,5\n",
    "zero_H": "OPName,B,H\nadd,3,0\n",
    "text_shape": "OPName,B,H\nadd,three,5\n",
    "unknown_dtype": "OPName,B,H,dtype\nadd,3,5,float7\n",
    "unknown_timing": "OPName,B,H,timing\nadd,3,5,wallclock\n",
    "unknown_host": "OPName,B,H,host\nadd,3,5,laptop\n",
    "fp8_gemm_without_fp8_units": "OPName,B,M,N,K,dtype\nlinear,1,64,64,64,fp32\nlinear,1,64,64,64,fp8\n",
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_one_line_error(case, tmp_path, monkeypatch, capsys):
    inp = _write(tmp_path, f"{case}.csv", BAD_INPUTS[case])
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", "Tesla T4", "--output",
                                            tmp_path / "o.csv", "--prior-only"])
    assert_one_line_error(code, err)
    assert not (tmp_path / "o.csv").exists()


def test_fp8_gemm_runs_where_fp8_units_exist(tmp_path, monkeypatch, capsys):
    inp = _write(tmp_path, "k.csv", BAD_INPUTS["fp8_gemm_without_fp8_units"])
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", "Tesla T4", "--output",
                                            tmp_path / "o.csv", "--prior-only"])
    assert "data row 2" in err and "fp8" in err
    code, text = _predict([inp, "--device", "NVIDIA L4", "--output", tmp_path / "o.csv", "--prior-only"])
    assert code == 0, text
    assert len(pd.read_csv(tmp_path / "o.csv")) == 2


def test_kernel_timing_drops_the_per_call_floor(good_csv, tmp_path):
    """`--timing kernel` predicts a profiler's kernel duration: the same device work without the
    per-call launch floor, so every row is faster and a tiny kernel takes microseconds."""
    outs = {}
    for timing in ("call", "kernel"):
        out = tmp_path / f"{timing}.csv"
        code, text = _predict([good_csv, "--device", "NVIDIA A40", "--output", out, "--prior-only", "--timing", timing])
        assert code == 0, text
        outs[timing] = _check_output(good_csv, out)
    assert (outs["kernel"]["pred_ms"] < outs["call"]["pred_ms"]).all()
    tiny = _write(tmp_path, "tiny.csv", "OPName,B,H\nadd,1,64\n")
    _predict([tiny, "--device", "NVIDIA A40", "--output", tmp_path / "t.csv", "--prior-only", "--timing", "kernel"])
    assert pd.read_csv(tmp_path / "t.csv")["pred_ms"].iloc[0] < 0.01


def test_unknown_timing_option(good_csv, tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", "Tesla T4", "--output",
                                            tmp_path / "o.csv", "--prior-only", "--timing", "wall"])
    assert_one_line_error(code, err)
    assert "timing" in err


def test_error_names_file_and_line(tmp_path, monkeypatch, capsys):
    inp = _write(tmp_path, "k.csv", "OPName,B,H\nadd,3,5\nadd,4,5\nfoo,1,1\n")
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", "T4", "--output", tmp_path / "o.csv",
                                            "--prior-only"])
    assert_one_line_error(code, err)
    assert "k.csv:4" in err and "foo" in err


def test_error_shows_the_value_as_written(tmp_path, monkeypatch, capsys):
    inp = _write(tmp_path, "k.csv", "OPName,B,H\nadd,-3,5\n")
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", "T4", "--output", tmp_path / "o.csv",
                                            "--prior-only"])
    assert_one_line_error(code, err)
    assert "np." not in err and "-3" in err


def test_missing_input_file(good_csv, tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", tmp_path / "nope.csv", "--device", "T4",
                                            "--output", tmp_path / "o.csv", "--prior-only"])
    assert_one_line_error(code, err)
    assert "nope.csv" in err


@pytest.mark.parametrize("device", ["No Such GPU", "does/not/exist.json"])
def test_unknown_device(good_csv, tmp_path, monkeypatch, capsys, device):
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", device,
                                            "--output", tmp_path / "o.csv", "--prior-only"])
    assert_one_line_error(code, err)


def test_malformed_device_json(good_csv, tmp_path, monkeypatch, capsys):
    spec = _write(tmp_path, "dev.json", "{not json")
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", spec,
                                            "--output", tmp_path / "o.csv", "--prior-only"])
    assert_one_line_error(code, err)


def test_nonexistent_model_bundle(good_csv, tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", "T4", "--output",
                                            tmp_path / "o.csv", "--model-bundle", tmp_path / "no_bundle"])
    assert_one_line_error(code, err)


@pytest.mark.parametrize("args", [
    pytest.param(["predict-kernels", "{csv}", "--output", "{out}"], id="missing_device"),
    pytest.param(["predict-kernels", "{csv}", "--device", "T4"], id="missing_output"),
    pytest.param(["predict-kernels", "{csv}", "--device", "T4", "--output", "{out}", "--bogus"], id="unknown_option"),
    pytest.param(["predict-kernelz", "{csv}"], id="unknown_command"),
])
def test_usage_errors(good_csv, tmp_path, monkeypatch, capsys, args):
    args = [a.format(csv=good_csv, out=tmp_path / "o.csv") for a in args]
    code, err = run_cli(monkeypatch, capsys, args)
    assert_one_line_error(code, err)


def test_help_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hybridperf", "predict-kernels", "--help"])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    assert code in (0, None)
    assert "--device" in capsys.readouterr().out


def _tamper(bundle_copy: Path, how: str) -> Path:
    m = json.loads((bundle_copy / "manifest.json").read_text())
    onnx_files = sorted(n for n in m["files"] if n.endswith(".onnx"))
    if how == "flipped_byte":
        f = bundle_copy / onnx_files[0]
        b = bytearray(f.read_bytes())
        b[len(b) // 3] ^= 0x10
        f.write_bytes(bytes(b))
    elif how == "deleted_file":
        (bundle_copy / onnx_files[0]).unlink()
    elif how == "malformed_manifest":
        (bundle_copy / "manifest.json").write_text('{"format": "hybridperf-bundle", ')
    elif how == "feature_schema":
        m["feature_names"] = m["feature_names"][1:]
        (bundle_copy / "manifest.json").write_text(json.dumps(sign_manifest(m)))
    return bundle_copy


@pytest.mark.parametrize("how", ["flipped_byte", "deleted_file", "malformed_manifest", "feature_schema"])
def test_tampered_model_bundle(good_csv, bundle_copy, tmp_path, monkeypatch, capsys, how):
    bundle = _tamper(bundle_copy, how)
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", "T4", "--output",
                                            tmp_path / "o.csv", "--model-bundle", bundle])
    assert_one_line_error(code, err)
    assert not (tmp_path / "o.csv").exists()


def test_bad_calibration_rows(good_csv, tiny_bundle, tmp_path, monkeypatch, capsys):
    cal = _write(tmp_path, "cal.csv", "OPName,B,H,Latency\nadd,4,1024,\n")  # no latency
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", "T4", "--output",
                                            tmp_path / "o.csv", "--model-bundle", tiny_bundle, "--calibration", cal])
    assert_one_line_error(code, err)


# ---------------------------------------------------------------------------------------------------
# a real process: `python -m hybridperf`


def _run(*args, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "hybridperf", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def test_subprocess_devices_exits_0():
    r = _run("devices")
    assert r.returncode == 0, r.stderr
    assert "Tesla T4" in r.stdout


def test_subprocess_predict_and_bad_input(good_csv, tmp_path):
    out = tmp_path / "pred.csv"
    r = _run("predict-kernels", good_csv, "--device", "Tesla T4", "--output", out, "--prior-only")
    assert r.returncode == 0, r.stderr
    _check_output(good_csv, out)
    bad = _write(tmp_path, "bad.csv", "OPName,B,H\nadd,-1,5\n")
    r = _run("predict-kernels", bad, "--device", "Tesla T4", "--output", tmp_path / "o.csv", "--prior-only")
    assert_one_line_error(r.returncode, r.stderr)


def test_subprocess_tampered_bundle(good_csv, bundle_copy, tmp_path):
    bundle = _tamper(bundle_copy, "flipped_byte")
    r = _run("predict-kernels", good_csv, "--device", "Tesla T4", "--output", tmp_path / "o.csv",
             "--model-bundle", bundle)
    assert_one_line_error(r.returncode, r.stderr)


def test_timing_column_wins_over_the_option_default(tmp_path):
    """Rows that say how they were timed keep it; --timing is the default for rows that do not."""
    inp = _write(tmp_path, "t.csv", "OPName,B,H,timing\nadd,1,64,kernel\nadd,1,64,call\n")
    out = tmp_path / "o.csv"
    code, text = _predict([inp, "--device", "NVIDIA A40", "--output", out, "--prior-only"])
    assert code == 0, text
    kern, call = pd.read_csv(out)["pred_ms"]
    assert kern < 0.01 < call


def test_rows_outside_the_training_range_get_a_note(tmp_path):
    """The shipped call-timed models saw fp32 and fp16 (our H200's), never fp8: an fp8 row gets a
    one-line note on stderr (its interval is widened, not calibrated), and a file of fp32 and fp16 none."""
    fp8 = _write(tmp_path, "fp8.csv", "OPName,B,M,N,K,H,dtype\nlinear,1,4096,4096,4096,,fp8\n"
                                      "softmax,4096,,,,1024,fp32\n")
    r = runner.invoke(app, ["predict-kernels", str(fp8), "--device", "NVIDIA H100 80GB HBM3",
                            "--output", str(tmp_path / "o.csv")])
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "1 row (fp8 linear) lies" in notes[0]
    seen = _write(tmp_path, "seen.csv", "OPName,B,M,N,K,H,dtype\nlinear,8,512,1024,4096,,fp32\n"
                                        "linear,1,4096,4096,4096,,float16\nsoftmax,4096,,,,1024,fp32\n")
    r = runner.invoke(app, ["predict-kernels", str(seen), "--device", "NVIDIA H100 80GB HBM3",
                            "--output", str(tmp_path / "o.csv")])
    assert r.exit_code == 0 and "note:" not in r.stderr, r.output


def test_host_sets_the_call_floor(tmp_path):
    """A call timed on NeuSight's hosts (`--host neusight`) carries their larger per-call overhead:
    a tiny kernel costs their floor; the default, a current host, its share of it."""
    from hybridperf.priors.launch import FLOOR_MS, HOST_FLOOR_SCALE

    tiny = _write(tmp_path, "tiny.csv", "OPName,B,H\nadd,1,64\n")
    preds = {}
    for host in ("neusight", "current"):
        code, text = _predict([tiny, "--device", "NVIDIA A40", "--output", tmp_path / f"{host}.csv", "--prior-only",
                               "--host", host])
        assert code == 0, text
        preds[host] = pd.read_csv(tmp_path / f"{host}.csv")["pred_ms"].iloc[0]
    assert preds["neusight"] == pytest.approx(FLOOR_MS["elementwise"], rel=0.02)
    assert preds["current"] == pytest.approx(FLOOR_MS["elementwise"] * HOST_FLOOR_SCALE["current"]["elementwise"], rel=0.05)
    code, text = _predict([tiny, "--device", "NVIDIA A40", "--output", tmp_path / "d.csv", "--prior-only"])
    assert pd.read_csv(tmp_path / "d.csv")["pred_ms"].iloc[0] == preds["current"]


def test_unknown_host_option(good_csv, tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", good_csv, "--device", "Tesla T4", "--output",
                                            tmp_path / "o.csv", "--prior-only", "--host", "laptop"])
    assert_one_line_error(code, err)
    assert "host" in err


def test_rows_with_a_latency_are_scored(good_csv, tmp_path):
    """Rows that carry a measured Latency get a MAPE and coverage line on stderr; rows without none."""
    from hybridperf.cli.kernels import accuracy_note

    out = tmp_path / "o.csv"
    r = runner.invoke(app, ["predict-kernels", str(good_csv), "--device", "H100", "--output", str(out), "--prior-only"])
    assert r.exit_code == 0, r.output
    assert "scored 7 rows with a measured Latency" in r.output  # the `ln` row has none
    res = pd.DataFrame({"pred_ms": [1.0, 2.0], "lo_ms": [0.5, 1.9], "hi_ms": [2.0, 2.1], "op_class": ["bmm", "linear"]})
    note = accuracy_note([2.0, np.nan], res)
    assert "scored 1 rows" in note and "MAPE 50.0% (bmm 50.0)" in note and "covers 100.0%" in note
    assert accuracy_note([np.nan, 0.0], res) == ""


def test_score_of_rows_measured_on_another_device_says_so(tmp_path):
    """Rows that name the GPU they were measured on, predicted for another, get a score that says it compares
    two devices (a T4's bmm rows against an H100's predictions are 88% off by construction)."""
    csv = tmp_path / "t4.csv"
    pd.DataFrame({"OPName": ["bmm", "bmm"], "B": [8, 8], "M": [512, 1024], "N": [512, 1024], "K": [64, 64],
                  "Latency": [0.05, 0.2], "Device": ["Tesla T4", "Tesla T4"]}).to_csv(csv, index=False)
    for device, other in (("Tesla T4", False), ("H100", True)):
        r = runner.invoke(app, ["predict-kernels", str(csv), "--device", device, "--output", str(tmp_path / "o.csv"),
                                "--prior-only"])
        assert r.exit_code == 0, r.output
        assert ("rows measured on Tesla T4, not the --device predicted" in r.output) == other
    # a GPU the catalog lacks, given by a spec file, is the device its own rows name
    spec = tmp_path / "my_gpu.json"
    spec.write_text(json.dumps({"Device": "My GPU", "Dev_Mem": 40, "Mem_Bw": 1555, "Num_Sm": 80, "Core_Per_SM": 128,
                                "Freq": 1700, "SingleFLOPs": 34816, "L2Cache": 40}))
    pd.read_csv(csv).assign(Device="My GPU").to_csv(csv, index=False)
    r = runner.invoke(app, ["predict-kernels", str(csv), "--device", str(spec), "--output", str(tmp_path / "o.csv"),
                            "--prior-only"])
    assert r.exit_code == 0 and "scored 2 rows" in r.output and "not the --device" not in r.output, r.output
