"""`predict-kernels` on aiconfigurator rows prices only what a GPU can run and refuses what it cannot price:
fp4 on GPUs without FP4 units runs weight-only, fp8 without fp8 units at the 16-bit rate (each said once),
bad rows and other devices' calibrations are one-line errors, integer shapes stay integers."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import assert_one_line_error
from hybridperf.aic_kernels import prior_terms
from hybridperf.aic_rows import validate
from hybridperf.devices import get_device
from hybridperf.priors.llm_gemm import gemm_ms, gemm_parts, matrix_peak, spec_matrix_peak
from hybridperf.priors.moe import moe_ms
from test_bad_inputs import cli

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "systems" / "data"
H100, B200, A100 = (get_device(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA B200", "NVIDIA A100-SXM4-80GB"))
NO_FP4 = [get_device(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA L40S", "NVIDIA L4", "NVIDIA A100-SXM4-80GB")]
GEMM = {"op_name": "gemm", "m": 8192, "n": 8192, "k": 8192, "gemm_dtype": "bfloat16"}
MOE = {"op_name": "moe", "num_tokens": 64, "hidden_size": 4096, "inter_size": 1536, "topk": 2, "num_experts": 8,
       "moe_dtype": "bfloat16"}


def _predict(monkeypatch, capsys, tmp_path, rows, device="h100_sxm", *extra, name="rows.csv"):
    """(exit code, stderr, output path) of predict-kernels on `rows` written as CSV (or parquet by `name`)."""
    inp, out = tmp_path / name, tmp_path / "out.csv"
    frame = pd.DataFrame(rows)
    frame.to_parquet(inp) if name.endswith(".parquet") else frame.to_csv(inp, index=False)
    code, _, err = cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", device, "--output", out, *extra])
    return code, err, out


@pytest.mark.parametrize("dev", NO_FP4, ids=lambda d: d.name)
def test_nvfp4_without_fp4_units_runs_weight_only(dev):
    """A compute-bound nvfp4 GEMM on a GPU without FP4 tensor cores is no faster than fp8 (it was 2x fp8, above
    H100's dense fp8 peak): it runs as NVFP4 weights dequantized into the 16-bit MMA, GEMM and MoE alike."""
    big = (8192, 8192, 8192)
    nvfp4, fp8, wo = (float(gemm_ms(*big, dt, dev)) for dt in ("nvfp4", "fp8", "nvfp4_wo"))
    assert nvfp4 == wo and nvfp4 >= 0.99 * min(fp8, float(gemm_ms(*big, "bfloat16", dev)))
    assert 2 * 8192 ** 3 / (nvfp4 * 1e-3) <= max(spec_matrix_peak(dev, "fp8"), spec_matrix_peak(dev, "bf16"))
    assert spec_matrix_peak(dev, "fp4") == spec_matrix_peak(dev, "bf16")
    assert float(moe_ms(8192, 4096, 1536, 8, 128, dev, "nvfp4")) == float(moe_ms(8192, 4096, 1536, 8, 128, dev,
                                                                                   "nvfp4_wo"))
    rows = validate(pd.DataFrame([{**GEMM, "gemm_dtype": d} for d in ("nvfp4", "nvfp4_wo")]))
    assert prior_terms(rows, dev)["prior_ms"].nunique() == 1  # the constants of the kernels it runs, too


def test_fp4_units_keep_fp4():
    """B200 (and a Blackwell spec without its fp4 figure, at 2x fp8) keeps the FP4 rate; so do sm_120 parts and
    CDNA4, which have FP4 units."""
    assert gemm_parts(8192, 8192, 8192, "nvfp4", B200)["dtype"] == "nvfp4"
    assert float(gemm_ms(8192, 8192, 8192, "nvfp4", B200)) < 0.7 * float(gemm_ms(8192, 8192, 8192, "fp8", B200))
    bare = replace(B200, peak_tflops={k: v for k, v in B200.peak_tflops.items() if k != "fp4_tc"}, tdp_w=0)
    assert bare.has_matrix_units("fp4") and matrix_peak(bare, "fp4") == pytest.approx(2 * matrix_peak(bare, "fp8"))
    assert get_device("NVIDIA GeForce RTX 5090").has_matrix_units("fp4")
    assert get_device("AMD Instinct MI355X").has_matrix_units("fp4")
    assert not H100.has_matrix_units("fp4") and not get_device("AMD Instinct MI300X").has_matrix_units("fp4")
    assert H100.has_matrix_units("fp8") and not A100.has_matrix_units("fp8")


def test_predict_kernels_notes_weight_only_fp4_once(monkeypatch, capsys, tmp_path):
    rows = [{**GEMM, "gemm_dtype": "nvfp4"}, {**GEMM, "m": 16, "gemm_dtype": "nvfp4"}, {**MOE, "moe_dtype": "nvfp4"}]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows)
    assert code in (0, None), err
    notes = [ln for ln in err.splitlines() if "priced weight-only" in ln]
    assert len(notes) == 1 and notes[0].startswith("note:") and "nvfp4 as nvfp4_wo" in notes[0]
    pred = pd.read_csv(out)["pred_ms"]
    fp8 = _predict(monkeypatch, capsys, tmp_path, [{**GEMM, "gemm_dtype": "fp8"}])[2]
    assert pred.iloc[0] >= pd.read_csv(fp8)["pred_ms"].iloc[0]
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, rows, "b200_sxm")
    assert code in (0, None) and "weight-only" not in err


def test_predict_kernels_notes_a_dtype_whose_matrix_rate_is_far_below_the_16_bit_one(monkeypatch, capsys, tmp_path):
    """Blackwell Ultra cut int8 to 125-167 TOPS (the catalog's B300 / GB300): SmoothQuant rows are priced at it,
    ~15x slower than bf16, and the CLI says so; on B200 (int8 4.5 POPS) it does not."""
    rows = [{**GEMM, "gemm_dtype": "sq"}, {**GEMM, "gemm_dtype": "bfloat16"}]
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, rows, "NVIDIA B300 SXM6 AC")
    notes = [ln for ln in err.splitlines() if "under half its 16-bit rate" in ln]
    assert code in (0, None) and len(notes) == 1 and "sq (int8" in notes[0]
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, rows, "b200_sxm")
    assert code in (0, None) and "under half" not in err
    # SGLang's int8_wo runs W8A8 int8 kernels (`llm_gemm.UNFUSED_PATHS`): on B300 at the int8 rate, said as such
    rows = [{**GEMM, "gemm_dtype": "int8_wo", "kernel_source": "sglang"}, {**GEMM, "gemm_dtype": "int8_wo"}]
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, rows, "NVIDIA B300 SXM6 AC")
    notes = [ln for ln in err.splitlines() if "under half its 16-bit rate" in ln]
    assert code in (0, None) and len(notes) == 1 and "int8_wo run as sq (int8" in notes[0], err
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, [MOE], "NVIDIA B300 SXM6 AC")  # no gemm row, no gemm column
    assert code in (0, None), err


def test_fp8_without_fp8_units_runs_weight_only_as_serving_prices_it(monkeypatch, capsys, tmp_path):
    """fp8 GEMMs on a GPU without fp8 units are priced as W8A16 (int8_wo, Marlin's path), the mode predict-serving
    prices an fp8 checkpoint in there, and said once; fp8 attention there computes at the 16-bit rate."""
    from hybridperf.serving.cost import gemm_dtype
    attn = {"op_name": "context_attention", "batch_size": 1, "isl": 128, "num_heads": 8, "num_key_value_heads": 8,
            "head_dim": 128, "attn_dtype": "fp8", "kv_cache_dtype": "fp8"}
    rows = [*({**GEMM, "m": 4096, "n": 4096, "k": 4096, "gemm_dtype": d} for d in ("fp8", "fp8", "int8_wo")), attn]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, "a100_sxm")
    assert code in (0, None), err
    notes = [ln for ln in err.splitlines() if ln.startswith("note:")]
    assert sum("fp8 as int8_wo" in n for n in notes) == 1 and sum("attention fp8" in n for n in notes) == 1, err
    pred = pd.read_csv(out)["pred_ms"]
    assert pred.iloc[0] == pred.iloc[2] and gemm_dtype("fp8", A100) == "int8_wo"
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, rows, "h100_sxm")
    assert code in (0, None) and "weight-only" not in err and "attention fp8" not in err


def test_a_quant_mode_no_table_holds_is_priced_as_the_one_its_name_reads_as(monkeypatch, capsys, tmp_path):
    """aiconfigurator adds quant modes (a newer system's tables may hold `mxfp8`): such a row is priced as its
    modelled kin, its interval wider than the kin's own, and said once, not a refusal of the whole file; a name that
    reads as no precision (fp7) is still refused."""
    from hybridperf.aic_rows import matmul_kin
    from hybridperf.serving.rows import row_precision

    names = {"mxfp8": "fp8_block", "fp8_pc_pt": "fp8", "w4a8_nvfp4_fp8": "w4a8_mxfp4_mxfp8",
             "w4a16_nvfp4": "w4a16_nvfp4", "mxfp4": "nvfp4", "w4a4_nvfp4": "nvfp4", "w8a8_int8": "sq",
             "w8a16": "int8_wo", "fp8_wo": "int8_wo", "w4a16_awq": "int4_wo", "mxfp4_wo": "w4a16_mxfp4",
             "w4a8_fp8": "w4afp8", "int4_fp8": "w4afp8", "fp7": "", "bfloat16": "bfloat16"}
    assert {d: matmul_kin(d) for d in names} == names
    rows = [{**GEMM, "m": 16, "gemm_dtype": "fp8_block"}, {**GEMM, "m": 16, "gemm_dtype": "mxfp8"},
            {**MOE, "moe_dtype": "nvfp4"}, {**MOE, "moe_dtype": "mxfp4"}]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, "b200_sxm")
    assert code in (0, None), err
    notes = [ln for ln in err.splitlines() if "their name reads as" in ln]
    assert len(notes) == 1 and "'mxfp8' as fp8_block" in notes[0] and "'mxfp4' as nvfp4" in notes[0], err
    res = pd.read_csv(out)
    for kin, new in ((0, 1), (2, 3)):
        assert res["pred_ms"].iloc[new] == pytest.approx(res["pred_ms"].iloc[kin], rel=1e-6)
        assert res["pred_hi_ms"].iloc[new] / res["pred_lo_ms"].iloc[new] \
            > res["pred_hi_ms"].iloc[kin] / res["pred_lo_ms"].iloc[kin]
    assert row_precision({"gemm_quant_mode": "mxfp8"}, "gemm_quant_mode") == "fp8"
    assert row_precision({"precision": "nvfp4"}, "gemm_quant_mode") == "fp4"  # a quant mode in the precision column
    assert row_precision({"precision": "BF16"}, "gemm_quant_mode") == "bf16"
    assert row_precision({"gemm_quant_mode": "BF16"}, "gemm_quant_mode") == "bf16"
    # the slow-rate note names a mode priced at B300's int8 rate under its own name too
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, [{**GEMM, "gemm_dtype": "w8a8_int8"}], "NVIDIA B300 SXM6 AC")
    assert code in (0, None) and "w8a8_int8" in next(ln for ln in err.splitlines() if "under half" in ln), err


def test_a_kv_cache_format_no_table_holds_is_priced_by_its_name(monkeypatch, capsys, tmp_path):
    """An NVFP4 KV cache (TensorRT-LLM on Blackwell) reads half an fp8 cache's bytes; an fp8 format no spelling
    table holds (mxfp8) is priced as fp8, its interval wider; both said once."""
    dec = {"op_name": "generation_attention", "batch_size": 64, "isl": 1, "step": 8192, "num_heads": 64,
           "num_key_value_heads": 8, "head_dim": 128, "attn_dtype": "bfloat16", "kernel_source": "torch_flow"}
    rows = [{**dec, "kv_cache_dtype": d} for d in ("fp8", "nvfp4", "mxfp8")]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, "b200_sxm")
    assert code in (0, None), err
    notes = [ln for ln in err.splitlines() if "KV-cache dtype(s)" in ln]
    assert len(notes) == 1 and "'nvfp4' as fp4" in notes[0] and "'mxfp8' as fp8" in notes[0], err
    res = pd.read_csv(out)
    assert res["pred_ms"].iloc[1] < 0.8 * res["pred_ms"].iloc[0]
    assert res["pred_ms"].iloc[2] == pytest.approx(res["pred_ms"].iloc[0], rel=1e-9)  # priced as fp8, features too
    width = res["pred_hi_ms"] / res["pred_lo_ms"]
    assert width.iloc[2] > width.iloc[0]


@pytest.mark.parametrize("rows, name, where", [
    ([{**GEMM, "m": True}], "rows.csv", "m (row 1, got True)"),
    ([{**GEMM, "m": True}], "rows.parquet", "m (row 1, got True)"),
    ([GEMM, {**GEMM, "m": 8.5}], "rows.csv", "whole number m (row 2, got 8.5)"),
    ([{**GEMM, "gemm_dtype": "fp7"}], "rows.csv", "gemm_dtype is none the priors know (bf16, bfloat16"),
    ([{**MOE, "distribution": "zipf"}], "rows.csv", "distribution 'zipf'"),
    ([{**MOE, "distribution": "power_law_1_2"}], "rows.csv", "distribution 'power_law_1_2'"),  # not alpha 12
    ([{**MOE, "distribution": "power_law1.2"}], "rows.csv", "distribution 'power_law1.2'"),
    ([{**MOE, "moe_ep_size": 3}], "rows.csv", "moe_ep_size dividing num_experts (row 1, got 3)"),
    ([{**MOE, "moe_tp_size": 5000}], "rows.csv", "moe_tp_size dividing inter_size (row 1, got 5000)"),
    ([{**GEMM, "latency": 1.0}, {**GEMM, "latency": -1}], "rows.csv", "latency"),
    ([{"op_name": "context_attention", "batch_size": 1, "isl": 128, "num_heads": 8, "num_key_value_heads": 8,
       "head_dim": 128, "attn_dtype": "fp7"}], "rows.csv", "attn_dtype is none the priors know"),
    ([{"op_name": "generation_attention", "batch_size": 1, "isl": 1, "step": 128, "num_heads": 8,
       "num_key_value_heads": 8, "head_dim": 128, "kv_cache_dtype": "fp64"}], "rows.csv",
     "kv_cache_dtype is none the priors know"),  # a spelling dtype_key reads, but no attention kernel's
    ([{"op_name": "generation_attention", "batch_size": 1, "step": 128, "num_heads": 8, "num_key_value_heads": 8,
       "head_dim": 128}, {"op_name": "generation_attention", "batch_size": 1, "step": None, "num_heads": 8,
                         "num_key_value_heads": 8, "head_dim": 128}], "rows.csv",
     "non-negative step (row 2"),  # a blank step is no empty cache
])
def test_rows_the_priors_cannot_price_are_refused(monkeypatch, capsys, tmp_path, rows, name, where):
    """Each was priced before (True as 1, 8.5, fp7 as bf16, zipf as balanced, EP 3 of 8 experts, a blank step as
    0) or dropped from the score (latency -1); now one line naming the row and column, and no output file."""
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, name=name)
    assert_one_line_error(code, err)
    assert where in err and "row" in err, err
    assert not out.exists()


def test_blank_cells_and_collected_float_names_still_predict():
    """A blank latency is a row to predict, `collect`'s float32 rows price (as bf16, noted), EPLB power laws
    route as balanced."""
    attn = {"op_name": "context_attention", "batch_size": 1, "isl": 128, "num_heads": 8, "num_key_value_heads": 8,
            "head_dim": 128, "attn_dtype": "float32", "kv_cache_dtype": "float32"}
    eplb = {**MOE, "moe_ep_size": 4, "distribution": "power_law_1.2_eplb", "latency": 0.1}
    rows = validate(pd.DataFrame([{**GEMM, "latency": None, "gemm_dtype": "float32"}, attn, eplb,
                                  {**eplb, "distribution": "balanced"}]))
    terms = prior_terms(rows, H100)
    assert len(terms) == 4
    assert terms.iloc[2].to_dict() == terms.iloc[3].to_dict()
    # a power law named without its alpha is aiconfigurator's default one, 1.2
    skew = validate(pd.DataFrame([{**MOE, "moe_ep_size": 4, "distribution": d}
                                  for d in ("power_law", "power_law_1.2")]))
    terms = prior_terms(skew, H100)
    assert terms.iloc[0].to_dict() == terms.iloc[1].to_dict()


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/datasets/aiconfigurator not found")
@pytest.mark.parametrize("table", ["gemm/sglang/0.5.6.post2/gemm_perf.parquet", "moe/sglang/0.5.14/moe_perf.parquet",
                                   "attention/trtllm/1.3.0rc20/context_attention_perf.parquet",
                                   "attention/vllm/0.24.0/generation_attention_perf.parquet"])
def test_real_tables_stay_valid(table):
    """aiconfigurator's own values (its dtype names, `power_law_1.2`, `balanced`, whole sizes, latencies) pass."""
    df = pd.read_parquet(SHARED / "h100_sxm" / table)
    rows = validate(df, table)
    assert len(rows) == len(df)


def test_calibration_from_another_device_is_refused(monkeypatch, capsys, tmp_path):
    """Rows measured on a CPU (or another GPU) would move this GPU's predictions by their errors: refused as
    `transfer` refuses them, unless --allow-other-device, which applies them with a warning."""
    cal = tmp_path / "aic_measured.csv"
    pd.DataFrame([{**GEMM, "m": m, "latency": 5.0, "device": "AMD EPYC 7B13", "framework": "torch"}
                  for m in (64, 1024, 8192)]).to_csv(cal, index=False)
    rows = [{**GEMM, "framework": "torch"}]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, "h100_sxm", "--calibration", cal)
    assert_one_line_error(code, err)
    assert "AMD EPYC 7B13" in err and "--allow-other-device" in err and not out.exists()
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, "h100_sxm", "--calibration", cal,
                              "--allow-other-device")
    assert code in (0, None), err
    assert "warning:" in err and out.exists()


def test_integer_shapes_stay_integers(monkeypatch, capsys, tmp_path):
    """Mixed ops leave blanks in each other's columns; the sizes are written as the input wrote them."""
    rows = [GEMM, {"op_name": "context_attention", "batch_size": 4, "isl": 1024, "num_heads": 32,
                   "num_key_value_heads": 8, "head_dim": 128, "step": 0}]
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows)
    assert code in (0, None), err
    lines = out.read_text().splitlines()
    assert lines[1].startswith("gemm,8192,8192,8192,bfloat16,,") and ",4,1024,32,8,128,0," in lines[2]
    sug = tmp_path / "suggested.csv"
    code, _, err = cli(monkeypatch, capsys, ["suggest", "--schema", "aiconfigurator", "--device", "h100_sxm",
                                              "-k", "6", "--out", sug])
    assert code in (0, None), err
    picks = pd.read_csv(sug, dtype=str, keep_default_na=False)
    sizes = picks[["m", "n", "k", "batch_size", "isl", "num_heads", "head_dim"]].to_numpy().ravel()
    assert not any("." in v for v in sizes) and np.isin(["gemm", "context_attention"], picks["op_name"]).all()


def test_predict_kernels_says_which_dtype_columns_it_filled_in(monkeypatch, capsys, tmp_path):
    """A decode table without `kv_cache_dtype`, or with blank cells of it, is priced as bf16 caches (an fp8 cache's
    time differs by 0.5-2x): the CLI says so once per column, naming the ops that read it; a table naming it does
    not."""
    decode = {"op_name": "generation_attention", "batch_size": 8, "num_heads": 32, "num_key_value_heads": 8,
              "head_dim": 128, "step": 1024, "attn_dtype": "bfloat16"}
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, [decode, GEMM])
    said = ["note: kv_cache_dtype not given for some generation_attention rows; they are priced with kv_cache_dtype = "
            "bfloat16"]
    assert code in (0, None) and [ln for ln in err.splitlines() if "not given" in ln] == said, err
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, [{**decode, "kv_cache_dtype": "fp8"}, {**decode,
                                                                                              "kv_cache_dtype": None}])
    assert code in (0, None) and [ln for ln in err.splitlines() if "not given" in ln] == said, err
    code, err, _ = _predict(monkeypatch, capsys, tmp_path, [{**decode, "kv_cache_dtype": "fp8"}, GEMM])
    assert code in (0, None) and "not given" not in err


def test_dtype_cells_are_read_as_written_by_hand_and_an_unknown_fp8_spelling_widens_fp8s_interval():
    """`FP8`, ` fp8 ` and `fp8` are one dtype, a whitespace-only cell is blank (bf16); a spelling no table holds
    (`fp8_e4m3`) takes fp8's interval, widened, never a narrower one."""
    ctx = {"op_name": "context_attention", "batch_size": 16, "isl": 1536, "num_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "framework": "vllm"}
    rows = validate(pd.DataFrame([{**ctx, "attn_dtype": d, "kv_cache_dtype": d}
                                  for d in ("fp8", "FP8", " fp8 ", "fp8_e4m3", "   ", "bfloat16")]))
    assert rows["attn_dtype"].tolist() == ["fp8", "fp8", "fp8", "fp8_e4m3", "bfloat16", "bfloat16"]
    from hybridperf.aic_kernels import AicPredictor

    p = AicPredictor.load().predict(rows, get_device("NVIDIA H200"))
    lo, hi = np.log(p["pred_ms"] / p["lo_ms"]).to_numpy(), np.log(p["hi_ms"] / p["pred_ms"]).to_numpy()
    assert p["pred_ms"].iloc[3] == pytest.approx(p["pred_ms"].iloc[0]) and lo[3] > lo[0] and hi[3] > hi[0]
    assert p["pred_ms"].iloc[4] == pytest.approx(p["pred_ms"].iloc[5])


def test_pytorch_kernel_sources_name_their_harness_without_a_framework_column():
    from hybridperf.aic_kernels import TORCH_HARNESS, harness_of

    rows = pd.DataFrame({"kernel_source": ["torch_sdpa", "torch._scaled_mm", "vllm_flash_attn_fa3",
                                           "torch.nn.functional.linear"]})
    assert harness_of(rows).tolist() == [TORCH_HARNESS, TORCH_HARNESS, "", ""]


def test_no_harness_note_for_a_table_without_rows(monkeypatch, capsys, tmp_path):
    cal = tmp_path / "cal.csv"
    pd.DataFrame([{**GEMM, "framework": "torch", "latency": 1.0}]).to_csv(cal, index=False)
    inp, out = tmp_path / "empty.csv", tmp_path / "out.csv"
    inp.write_text("op_name,m,n,k,gemm_dtype,framework\n")
    code, _, err = cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", "h100_sxm", "--output", out,
                                             "--calibration", cal])
    assert code in (0, None) and "timed by" not in err, err


def test_a_calibration_of_other_ops_says_it_moves_nothing(monkeypatch, capsys, tmp_path):
    cal = tmp_path / "cal.csv"
    pd.DataFrame([{**GEMM, "framework": "torch", "latency": 1.0}]).to_csv(cal, index=False)
    decode = {"op_name": "generation_attention", "batch_size": 8, "num_heads": 32, "num_key_value_heads": 8,
              "head_dim": 128, "step": 1024, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16",
              "framework": "torch"}
    code, err, out = _predict(monkeypatch, capsys, tmp_path, [decode], "h100_sxm", "--calibration", cal)
    assert code in (0, None) and "holds no rows of these rows' ops (generation_attention)" in err, err
    code, err, out = _predict(monkeypatch, capsys, tmp_path, [decode, {**GEMM, "framework": "torch"}], "h100_sxm",
                              "--calibration", cal)
    assert code in (0, None) and "holds no rows" not in err, err
