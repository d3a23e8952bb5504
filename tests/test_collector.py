"""The local kernel collector and `hybridperf collect`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from hybridperf.cli import collect as collect_cli
from hybridperf.datasets.collector import build_op, collect_kernels, fastest_mean, load_shapes
from hybridperf.datasets.schema import COLUMNS, canonicalize, validate
from hybridperf.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_load_shapes_with_opname(tmp_path):
    f = _write(tmp_path / "s.csv", "OPName,B,M,N,K,H\nbmm,2,4,4,4,\nln,3,,,,16\nadd,3,,,,16\n")
    s = load_shapes(f)
    assert s["op"].tolist() == ["bmm", "ln", "add"]
    assert load_shapes(f, ops=["ln"])["op"].tolist() == ["ln"]


def test_load_shapes_expands_ops_without_opname(tmp_path):
    f = _write(tmp_path / "s.csv", "B,M,N,K,H\n2,4,4,4,32\n8,,,,64\n")
    s = load_shapes(f, ops=["linear", "softmax"])
    assert sorted(s["op"]) == ["linear", "softmax", "softmax"]
    lin = s[s.op == "linear"].iloc[0]
    assert (lin.B, lin.M, lin.N, lin.K) == (1, 8, 4, 4) and np.isnan(lin.H)  # B folded into the GEMM's rows
    assert s[s.op == "softmax"]["M"].isna().all()  # unused shape fields are NaN
    with pytest.raises(InputError, match="--ops"):
        load_shapes(f)


def test_load_shapes_bad_row_names_line(tmp_path):
    f = _write(tmp_path / "s.csv", "OPName,B,H\nadd,4,8\nadd,0,8\n")
    with pytest.raises(InputError, match=r"s\.csv:3:"):
        load_shapes(f)
    with pytest.raises(InputError, match="no such"):
        load_shapes(tmp_path / "missing.csv")


def test_fastest_mean():
    assert fastest_mean([5, 1, 3, 2, 4], 2) == 1.5
    assert fastest_mean([2.0], 5) == 2.0


def test_missing_torch_is_one_line_input_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    shapes = pd.DataFrame({"op": ["add"], "B": [2], "M": [np.nan], "N": [np.nan], "K": [np.nan], "H": [4]})
    with pytest.raises(InputError, match=r"pip install torch==2\.13\.0") as e:
        collect_kernels(shapes, device="cpu", progress=False)
    assert "\n" not in str(e.value)


def test_argument_checks():
    shapes = pd.DataFrame({"op": ["add"], "B": [2], "M": [np.nan], "N": [np.nan], "K": [np.nan], "H": [4]})
    with pytest.raises(InputError, match="--fastest"):
        collect_kernels(shapes, repeats=3, fastest=5, progress=False)
    with pytest.raises(InputError, match="--dtype"):
        collect_kernels(shapes, dtype="int4", progress=False)


def test_modules_do_not_import_torch():
    code = ("import sys, hybridperf.datasets.collector, hybridperf.cli.collect, hybridperf.cli.data; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_tiny_cpu_collection(tmp_path):
    pytest.importorskip("torch")
    f = _write(tmp_path / "s.csv", "OPName,B,M,N,K,H\nbmm,2,8,8,8,\nlinear,1,8,16,16,\nln,4,,,,32\n")
    df = collect_kernels(load_shapes(f), device="cpu", warmup=1, repeats=3, fastest=2, progress=False)
    validate(df)
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert df["op"].tolist() == ["bmm", "linear", "ln"]
    assert (df["latency_ms"] > 0).all() and (df["Latency"] == df["latency_ms"]).all()
    assert (df["OPName"] == df["op"]).all() and df["Device"].iloc[0] == df["device"].iloc[0] != ""
    assert set(df["dtype"]) == {"fp32"}


def test_collect_cli_output_is_valid_training_and_calibration_input(tmp_path):
    pytest.importorskip("torch")
    f = _write(tmp_path / "s.csv", "OPName,B,M,N,K,H\nbmm,2,8,8,8,\nadd,4,,,,32\n")
    out = tmp_path / "out.csv"
    app = typer.Typer()

    @app.callback()
    def _root():
        pass

    collect_cli.register(app)
    res = CliRunner().invoke(app, ["collect", "--shapes", str(f), "--out", str(out), "--device", "cpu",
                                   "--warmup", "1", "--repeats", "3", "--fastest", "2", "--quiet"])
    assert res.exit_code == 0, res.output
    back = pd.read_csv(out)
    assert {"OPName", "Latency", "Device", *COLUMNS} <= set(back.columns)
    again = canonicalize(back, source=str(out), require_latency=True)  # re-reads as a canonical table
    assert len(again) == 2 and (again["latency_ms"] > 0).all()
    # NeuSight-style view only (what a calibration file holds)
    neu = back[["OPName", "B", "M", "N", "K", "H", "Latency", "Device"]]
    assert len(canonicalize(neu, require_latency=True)) == 2


def test_example_shapes_file_parses():
    s = load_shapes(REPO / "examples" / "shapes_tiny.csv")
    assert {"bmm", "linear", "add", "softmax", "ln"} <= set(s["op"])
    assert len(s) <= 12


def test_gpu_check_script_runs_end_to_end_on_the_cpu(tmp_path):
    """experiments/gpu/gpu_check.py (the one-command check for a lent GPU) collects, predicts and reports;
    here on the CPU with toy shapes, predicting for a catalog GPU, so only the plumbing is checked."""
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, "-m", "experiments.gpu.gpu_check", "--quick", "--device", "cpu",
                          "--as-device", "NVIDIA H100 80GB HBM3", "--no-models", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr
    k = pd.read_csv(tmp_path / "kernels.csv")
    assert set(k["op_class"]) == {"bmm", "linear", "elementwise", "softmax", "layernorm"}
    assert (k["latency_ms"] > 0).all() and (k["lo_ms"] <= k["pred_ms"]).all() and (k["pred_ms"] <= k["hi_ms"]).all()
    g = pd.read_csv(tmp_path / "gemm.csv")
    assert {"fp32", "bf16"} <= set(g["dtype"]) and (g["measured_tflops"] > 0).all()
    assert pd.read_csv(tmp_path / "burst.csv")["phase"].tolist() == ["after_idle", "after_sustained_load"]
    report = (tmp_path / "report.md").read_text()
    assert "predicted as NVIDIA H100 80GB HBM3" in report and "| softmax " in report


def test_gpu_check_repredicts_saved_measurements_without_a_gpu(tmp_path):
    """`python -m experiments.gpu.gpu_check --from DIR` keeps the measured columns of a saved run and re-runs
    only the predictions (here the H100 run shipped in experiments/data/measured), so a code change is checked
    on real data."""
    src = REPO / "experiments" / "data" / "measured" / "h100"
    res = subprocess.run([sys.executable, "-m", "experiments.gpu.gpu_check", "--from", str(src),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr
    for name, measured in (("kernels", "latency_ms"), ("models", "measured_ms"), ("optimizer", "measured_ms")):
        old, new = pd.read_csv(src / f"{name}.csv"), pd.read_csv(tmp_path / f"{name}.csv")
        assert len(new) == len(old) and (new[measured] == old[measured]).all()
        assert (new["pred_ms"] > 0).all()
    k = pd.read_csv(tmp_path / "kernels.csv")
    assert (k["predicted_for"] == "NVIDIA H100 80GB HBM3").all()
    assert "Predictions re-run on the measurements" in (tmp_path / "report.md").read_text()


def test_traced_tiles_reads_both_orientations_of_our_tile_sizes(tmp_path):
    from experiments.gpu.kernel_trace import traced_tiles

    trace = pd.DataFrame({"device": "NVIDIA H200", "op": ["bmm", "bmm", "bmm", "linear"],
                          "dtype": "float32", "kernel": ["sm80_xmma_gemm_f32f32_nn_n_tilesize128x64x8_stage3",
                                                         "cutlass_80_simt_sgemm_256x128_8x4_nn_align1",
                                                         "sm80_xmma_gemm_f32f32_nn_n_tilesize32x32x8_stage3",
                                                         "sm80_xmma_gemm_f32f32_tn_n_tilesize64x64x8_stage3"]})
    trace.to_csv(tmp_path / "t.csv", index=False)
    # 256x128 is no tile of ours; the linear's 64x64 is not a bmm kernel
    assert traced_tiles(tmp_path / "t.csv") == {"hopper": {"NVIDIA H200": ((32, 32), (64, 128), (128, 64))}}


def test_model_profile_report_splits_kernel_time_from_gaps():
    """`python -m experiments.gpu.model_profile --report` compares device time with device time: per run, the
    groups' times and the `gaps and host` row add up to the end-to-end time, measured and predicted alike."""
    from experiments.gpu.model_profile import report

    tab = report(REPO / "experiments" / "data" / "measured" / "h100" / "model_profile")
    assert {"linear", "bmm", "softmax", "layernorm", "gaps and host", "end to end"} <= set(tab["group"])
    for _, run in tab.groupby(["model", "batch", "mode"]):
        e2e = run[run["group"] == "end to end"].iloc[0]
        parts = run[run["group"] != "end to end"]
        assert parts["measured_ms"].sum() == pytest.approx(e2e["measured_ms"])
        assert parts["ours_ms"].sum() == pytest.approx(e2e["ours_ms"])
        assert (parts.loc[parts["group"] != "gaps and host", "ours_ms"] >= 0).all()


def test_host_floor_scale_reads_the_hosts_share_of_the_call_floor():
    """Kernels whose measured time is the prior's body plus s x NeuSight's floor give back s, read on
    the floor-bound ones only; `collect` reports it for a catalog GPU and stays quiet on the CPU."""
    from hybridperf.cli.collect import host_floor_line
    from hybridperf.devices import get_device
    from hybridperf.priors.kernel_prior import host_floor_scale, kernel_prior_terms

    rows = canonicalize(pd.DataFrame({"OPName": ["add", "relu", "linear", "softmax", "add"],
                                      "B": [1, 4, 1, 8, 1 << 16], "M": [None, None, 64, None, None],
                                      "N": [None, None, 64, None, None], "K": [None, None, 64, None, None],
                                      "H": [64, 256, None, 128, 8192]}), device="Tesla T4")
    dev = get_device("Tesla T4")
    terms = kernel_prior_terms(rows.assign(host="neusight"), dev)
    body, floor = terms["prior_ms"] - terms["floor_ms"], terms["floor_ms"]
    measured = rows.assign(latency_ms=(body + 0.5 * floor).to_numpy())
    shares, n = host_floor_scale(measured, dev, min_class_rows=2)
    assert n == 4  # the large add is not floor-bound
    assert shares == pytest.approx({"all": 0.5, "elementwise": 0.5})  # one linear, one softmax: no share of their own
    assert "0.50 of NeuSight's (4 floor-bound kernels)" in host_floor_line(measured)
    assert host_floor_line(measured.assign(device="cpu")) is None


def test_collector_times_a_linear_in_the_form_its_row_asks_for(tmp_path):
    """A `form` column reaches the collector: `mm` rows run torch.mm (no bias) and keep their form, rows
    without one are F.linear."""
    f = _write(tmp_path / "s.csv", "OPName,B,M,N,K,form\nlinear,2,8,16,4,mm\nlinear,2,8,16,4,\n")
    shapes = load_shapes(f)
    assert shapes["form"].tolist() == ["mm", "linear"]
    out = collect_kernels(shapes, device="cpu", warmup=0, repeats=1, fastest=1, progress=False)
    assert out["form"].tolist() == ["mm", "linear"] and (out["latency_ms"] > 0).all()
    torch = pytest.importorskip("torch")
    fn, args = build_op(torch, "linear", 1, 16, 16, 4, 0, device="cpu", dtype=torch.float32, form="mm")
    assert fn is torch.mm and [tuple(a.shape) for a in args] == [(16, 16), (16, 4)]
    # a weight gradient: a (N, M) transposed times b (N, K); a bmm likewise per batch
    for op, B, shapes in (("linear", 1, [(16, 8), (16, 4)]), ("bmm", 3, [(3, 16, 8), (3, 16, 4)])):
        fn, args = build_op(torch, op, B, 8, 16, 4, 0, device="cpu", dtype=torch.float32, form="mm_t")
        assert [tuple(a.shape) for a in args] == shapes and fn(*args).shape[-2:] == (8, 4)
