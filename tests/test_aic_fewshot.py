"""A new GPU in aiconfigurator's schema: `collect --schema aiconfigurator` on CPU (tiny shapes),
`suggest --schema aiconfigurator`, and `calibrate_to`'s shift and widening; the collected rows go through
`predict-kernels --calibration` end to end."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridperf.aic_kernels import AicPredictor
from hybridperf.transfer.aic_calibrate import calibrate_to, mape_shift
from hybridperf.aic_rows import validate
from hybridperf.devices import get_device
from hybridperf.transfer.aic_suggest import allocate, default_candidates, runs_dtype, suggest_rows
from test_bad_inputs import cli, refused

REPO = Path(__file__).resolve().parents[1]
H100, A100 = get_device("NVIDIA H100 80GB HBM3"), get_device("NVIDIA A100-SXM4-80GB")
B200, L4 = get_device("NVIDIA B200"), get_device("NVIDIA L4")
#: docs/new-gpu.md's example: tiny rows a CPU measures in seconds, one fp8 row a CPU skips
EXAMPLE = (REPO / "examples" / "aic_shapes_tiny.csv").read_text()
HEADER = "op_name,m,n,k,gemm_dtype,batch_size,isl,num_heads,num_key_value_heads,head_dim,step,attn_dtype,kv_cache_dtype\n"


def _collect(monkeypatch, capsys, tmp_path, text: str, *extra):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text(text)
    out = tmp_path / "measured.csv"
    args = ["collect", "--schema", "aiconfigurator", "--shapes", shapes, "--out", out, "--device", "cpu",
            "--quiet", "--warmup", "1", "--repeats", "3", "--fastest", "1", *extra]
    return cli(monkeypatch, capsys, args), out


def test_collect_on_cpu_feeds_predict_kernels_calibration(monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    (code, _, err), out = _collect(monkeypatch, capsys, tmp_path, EXAMPLE)
    assert code in (0, None), err
    assert "skipped 1 shapes" in err and "fp8 GEMMs need a CUDA GPU" in err  # fp8 on CPU: one reason, no traceback
    got = pd.read_csv(out)
    assert got["op_name"].tolist() == ["gemm", "gemm", "context_attention", "generation_attention"]
    assert (got["latency"] > 0).all() and np.isfinite(got["latency"]).all()
    assert got["kernel_source"].tolist() == ["torch.nn.functional.linear"] * 2 + ["torch_sdpa"] * 2
    assert {"device", "torch_version", "framework", "version"} <= set(got.columns)
    validate(got)  # valid aiconfigurator rows
    pred = tmp_path / "pred.csv"
    args = ["predict-kernels", out, "--device", "NVIDIA H100 80GB HBM3", "--calibration", out, "--output", pred]
    refused(monkeypatch, capsys, args, "--allow-other-device")  # CPU rows would shift a GPU's: as transfer refuses
    assert not pred.exists()
    code, _, err = cli(monkeypatch, capsys, [*args, "--allow-other-device"])
    assert code in (0, None), err
    assert "not NVIDIA H100 80GB HBM3; its shift is applied" in err  # CPU rows calibrating a GPU: said so
    res = pd.read_csv(pred)
    assert len(res) == len(got)
    assert ((res["pred_lo_ms"] > 0) & (res["pred_lo_ms"] <= res["pred_ms"]) & (res["pred_ms"] <= res["pred_hi_ms"])).all()


def test_collect_only_fp8_on_cpu_is_one_error_line(monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    shapes = tmp_path / "s.csv"
    shapes.write_text(HEADER + "gemm,16,64,64,fp8,,,,,,,,\n")
    refused(monkeypatch, capsys, ["collect", "--schema", "aiconfigurator", "--shapes", shapes, "--out",
                                  tmp_path / "o.csv", "--device", "cpu", "--quiet"], "fp8 GEMMs need a CUDA GPU")
    assert not (tmp_path / "o.csv").exists()


def test_quantize_fp8_maps_the_amax_onto_e4m3_and_round_trips():
    torch = pytest.importorskip("torch")
    from hybridperf.datasets.aic_collector import E4M3_MAX, quantize_fp8

    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    xq, scale = quantize_fp8(torch, x)
    assert xq.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.dim() == 0
    assert float(xq.float().abs().max()) == E4M3_MAX  # the largest element lands on e4m3's largest value
    back = xq.float() * scale
    assert torch.allclose(back, x.float(), rtol=0.07, atol=float(scale) * 2)  # e4m3 keeps 3 mantissa bits


@pytest.mark.parametrize("text, match", [
    ("op_name,m,n,k,gemm_dtype\nmoe,1,2,3,bfloat16\n", "cannot be collected"),
    ("m,n,k\n1,2,3\n", "no op_name column"),
    ("op_name,m,n,gemm_dtype\ngemm,1,2,bfloat16\n", "gemm rows need a k value"),
    ("op_name,m,n,k,gemm_dtype\ngemm,1,0,3,bfloat16\n", "s.csv:2: gemm needs a positive whole n"),
    ("op_name,m,n,k,gemm_dtype\ngemm,1,2.5,3,bfloat16\n", "positive whole n"),
])
def test_collect_bad_shapes(monkeypatch, capsys, tmp_path, text, match):
    shapes = tmp_path / "s.csv"
    shapes.write_text(text)
    refused(monkeypatch, capsys, ["collect", "--schema", "aiconfigurator", "--shapes", shapes, "--out",
                                  tmp_path / "o.csv", "--device", "cpu"], match)


def test_collect_schema_options_are_checked(monkeypatch, capsys, tmp_path):
    shapes = tmp_path / "s.csv"
    shapes.write_text(EXAMPLE)
    base = ["collect", "--shapes", shapes, "--out", tmp_path / "o.csv", "--device", "cpu"]
    refused(monkeypatch, capsys, [*base, "--schema", "vidur"], "--schema must be one of")
    refused(monkeypatch, capsys, [*base, "--schema", "aiconfigurator", "--dtype", "fp16"], "go with --schema neusight")


def test_collect_says_when_it_timed_the_cpu(monkeypatch, capsys, tmp_path):
    """Without --device on a machine without CUDA, the rows are the CPU's and the output says so; a refusal
    stays one line."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    shapes = tmp_path / "s.csv"
    shapes.write_text(HEADER + "gemm,16,64,64,bfloat16,,,,,,,,\n")
    code, _, err = cli(monkeypatch, capsys, ["collect", "--schema", "aiconfigurator", "--shapes", shapes, "--out",
                                             tmp_path / "m.csv", "--quiet", "--warmup", "1", "--repeats", "3",
                                             "--fastest", "1"])
    assert code in (0, None), err
    assert "timed on the CPU" in err
    refused(monkeypatch, capsys, ["collect", "--schema", "aiconfigurator", "--shapes", tmp_path / "missing.csv",
                                  "--out", tmp_path / "x.csv"])


def test_collect_module_does_not_import_torch():
    import subprocess

    code = "import sys, hybridperf.datasets.aic_collector, hybridperf.transfer.aic_suggest; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_runs_dtype_follows_the_tensor_cores():
    assert runs_dtype(H100, "fp8") and not runs_dtype(A100, "fp8") and runs_dtype(A100, "bfloat16")
    assert runs_dtype(B200, "nvfp4") and not runs_dtype(H100, "nvfp4")
    assert not runs_dtype(A100, "bfloat16/fp8") and runs_dtype(L4, "fp8")


def test_suggest_is_deterministic_and_covers_the_cells():
    p = AicPredictor.load()
    a = suggest_rows(p, default_candidates(), H100, 8)
    b = suggest_rows(p, default_candidates(), H100, 8)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 8
    cells = set(zip(a["op_name"], a["gemm_dtype"].where(a["op_name"] == "gemm", a["attn_dtype"])))
    assert cells == {("gemm", "bfloat16"), ("gemm", "fp8"), ("context_attention", "bfloat16"),
                     ("generation_attention", "bfloat16")}
    assert ((a["pred_lo_ms"] > 0) & (a["pred_lo_ms"] <= a["pred_ms"]) & (a["pred_ms"] <= a["pred_hi_ms"])).all()
    # two rows of one cell: one on each side of the compute/memory balance (decode-sized and prefill-sized m)
    gemm = a[(a["op_name"] == "gemm") & (a["gemm_dtype"] == "bfloat16")]
    assert gemm["m"].min() <= 64 and gemm["m"].max() >= 1024
    # no fp8 tensor cores: no fp8 row; the first picks give every op one row
    a100 = suggest_rows(p, default_candidates(), A100, 3)
    assert set(a100["op_name"]) == {"gemm", "context_attention", "generation_attention"}
    assert (suggest_rows(p, default_candidates(), A100, 20)["gemm_dtype"] != "fp8").all()


def test_allocate_gives_each_op_one_row_first():
    cells = pd.DataFrame({"op": ["gemm", "gemm", "moe"], "dtype": ["bf16", "fp8", "bf16"], "rows": [10, 5, 1]})
    assert allocate(cells, 2) == {("gemm", "bf16"): 1, ("moe", "bf16"): 1, ("gemm", "fp8"): 0}
    assert allocate(cells, 100) == {("gemm", "bf16"): 10, ("moe", "bf16"): 1, ("gemm", "fp8"): 5}


def test_suggest_cli(monkeypatch, capsys, tmp_path):
    out = tmp_path / "s.csv"
    code, stdout, err = cli(monkeypatch, capsys, ["suggest", "--schema", "aiconfigurator", "--device", "NVIDIA H100 80GB HBM3",
                                                  "-k", "5", "--out", out])
    assert code in (0, None), err
    assert len(pd.read_csv(out)) == 5 and "collect --schema aiconfigurator" in stdout
    refused(monkeypatch, capsys, ["suggest", "--schema", "aiconfigurator", "--device", "NVIDIA H100 80GB HBM3",
                                  "-k", "0", "--out", out], "-k must be at least 1")
    refused(monkeypatch, capsys, ["suggest", "--schema", "aiconfigurator", "--device", "no-such-gpu", "--out", out])
    refused(monkeypatch, capsys, ["suggest", "--schema", "other", "--device", "NVIDIA H100 80GB HBM3", "--out", out],
            "--schema must be")


def test_mape_shift_leans_toward_over_prediction():
    assert mape_shift([0.3]) == pytest.approx(0.3)
    e = np.array([-0.5, 0.0, 0.2, 0.6, 0.9])
    assert mape_shift(e) < np.median(e)
    best = min(np.linspace(-1, 1, 2001), key=lambda s: np.mean(np.abs(np.exp(s - e) - 1)))
    assert abs(mape_shift(e) - best) < 0.2


def test_calibrate_to_widens_only_where_rows_spread_wider():
    p = AicPredictor.load()
    rows = validate(default_candidates().iloc[::7].reset_index(drop=True))
    zero = p.predict(rows, H100)
    rng = np.random.default_rng(0)
    tight = rows.assign(latency=zero["pred_ms"].to_numpy() * np.exp(rng.normal(0, 0.01, len(rows))))
    wide = rows.assign(latency=zero["pred_ms"].to_numpy() * np.exp(rng.choice([-1.5, 1.5], len(rows))))
    assert all(f == 1.0 for f in calibrate_to(p, tight, H100).scales.values())
    cal = calibrate_to(p, wide, H100)
    assert all(f > 1.5 for f in cal.scales.values())
    res = cal.predict(rows, H100)
    assert (np.log(res["hi_ms"] / res["lo_ms"]) > np.log(zero["hi_ms"] / zero["lo_ms"])).all()
    assert ((res["lo_ms"] > 0) & (res["lo_ms"] <= res["pred_ms"]) & (res["pred_ms"] <= res["hi_ms"])).all()
    assert calibrate_to(p, wide, H100, widen=False).scales == {}


def test_a_torch_calibration_shifts_only_rows_torch_timed():
    p = AicPredictor.load()
    engine = validate(default_candidates().iloc[::7].reset_index(drop=True)).assign(framework="VLLM")
    torch_rows = engine.assign(framework="torch")
    zero_engine, zero_torch = p.predict(engine, H100), p.predict(torch_rows, H100)
    slow = torch_rows.assign(latency=zero_torch["pred_ms"].to_numpy() * 2.0)  # our kernels ran 2x the prediction
    cal = calibrate_to(p, slow, H100)
    assert cal.predict(engine, H100)["pred_ms"].to_numpy() == pytest.approx(zero_engine["pred_ms"].to_numpy())
    moved = cal.predict(torch_rows, H100)["pred_ms"].to_numpy() / zero_torch["pred_ms"].to_numpy()
    assert (moved > 1.3).all()  # 2x, shrunk toward 1 by n / (n + 10) per op and dtype
    back = calibrate_to(p, engine.assign(latency=zero_engine["pred_ms"].to_numpy() * 2.0), H100)
    assert (back.predict(engine, H100)["pred_ms"].to_numpy() > 1.3 * zero_engine["pred_ms"].to_numpy()).all()


def test_pytorch_prefills_take_the_prior_and_its_interval():
    """The prefill residual learned engines' per-call work (`ENGINE_RESIDUALS`): a torch-timed prefill is the
    prior with the prior's interval, the same engine row keeps the residual; other ops keep it for torch rows."""
    p = AicPredictor.load()
    engine = validate(default_candidates().iloc[::7].reset_index(drop=True)).assign(framework="VLLM")
    torch_rows = engine.assign(framework="torch")
    hybrid, prior = p.predict(torch_rows, H100), p.predict(torch_rows, H100, prior_only=True)
    ctx = (torch_rows["op_name"] == "context_attention").to_numpy()
    assert ctx.any() and (~ctx).any()
    for col in ("pred_ms", "lo_ms", "hi_ms"):
        assert hybrid[col].to_numpy()[ctx] == pytest.approx(prior[col].to_numpy()[ctx])
    assert not np.allclose(p.predict(engine, H100)["pred_ms"].to_numpy()[ctx], prior["pred_ms"].to_numpy()[ctx])
    assert not np.allclose(hybrid["pred_ms"].to_numpy()[~ctx], prior["pred_ms"].to_numpy()[~ctx])


def test_predict_kernels_says_when_a_calibration_cannot_shift_the_rows(monkeypatch, capsys, tmp_path):
    pytest.importorskip("torch")
    (code, _, err), measured = _collect(monkeypatch, capsys, tmp_path, EXAMPLE)
    assert code in (0, None), err
    engine = tmp_path / "engine.csv"
    pd.read_csv(measured).drop(columns=["latency"]).assign(framework="VLLM").to_csv(engine, index=False)
    args = ["predict-kernels", engine, "--device", "NVIDIA H100 80GB HBM3", "--calibration", measured,
            "--allow-other-device"]  # measured on this machine's CPU
    code, _, err = cli(monkeypatch, capsys, [*args, "--output", tmp_path / "a.csv"])
    assert code in (0, None), err
    assert "timed by PyTorch's own kernels and these rows by a serving engine's kernels" in err
    zero = tmp_path / "zero.csv"
    cli(monkeypatch, capsys, ["predict-kernels", engine, "--device", "NVIDIA H100 80GB HBM3", "--output", zero])
    assert pd.read_csv(tmp_path / "a.csv")["pred_ms"].tolist() == pd.read_csv(zero)["pred_ms"].tolist()
    code, _, err = cli(monkeypatch, capsys, ["predict-kernels", measured, "--device", "NVIDIA H100 80GB HBM3",
                                             "--calibration", measured, "--allow-other-device",
                                             "--output", tmp_path / "b.csv"])
    assert "a calibration shifts only" not in err  # torch rows calibrating torch rows: nothing to say
