"""aiconfigurator-schema kernels: the loader, the GEMM/MoE physics, `predict-kernels` on op_name rows,
the shipped bundle. Tables are made here; tests that need ../shared/datasets skip without it."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import assert_one_line_error, run_cli
from hybridperf.aic_kernels import AicPredictor, kernel_family
from hybridperf.transfer.aic_calibrate import calibrate_to
from hybridperf.aic_rows import validate
from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES, canonical, load_kernels
from hybridperf.devices import get_device
from hybridperf.priors.llm_gemm import (FIXED_TILE_SOURCES, ROOFLINE, KernelConstants, combine_ms, fitted_constants,
                                        gemm_ms, gemm_parts, l2_output_hit, l2_weight_hit, matrix_peak,
                                        tile_compute_s, warp_mma_peak)
from hybridperf.priors.moe import distribution_alpha, moe_ms, moe_parts, rank0_share

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
H100 = get_device("NVIDIA H100 80GB HBM3")
B200 = get_device("NVIDIA B200")

ROWS = [
    {"op_name": "gemm", "kernel_source": "torch_flow", "framework": "TRTLLM", "m": 1, "n": 4096, "k": 4096,
     "gemm_dtype": "bfloat16", "latency": 0.02},
    {"op_name": "gemm", "kernel_source": "deepgemm", "m": 4096, "n": 7168, "k": 2048, "gemm_dtype": "fp8_block",
     "latency": 0.1},
    {"op_name": "gemm", "kernel_source": "x", "m": 16, "n": 4096, "k": 4096, "gemm_dtype": "nvfp4"},
    {"op_name": "context_attention", "kernel_source": "fa3", "batch_size": 2, "isl": 4096, "num_heads": 32,
     "num_key_value_heads": 8, "head_dim": 128, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "step": 0,
     "window_size": 0, "latency": 1.0},
    {"op_name": "generation_attention", "kernel_source": "xqa", "batch_size": 64, "isl": 1, "num_heads": 32,
     "num_key_value_heads": 8, "head_dim": 128, "attn_dtype": "bfloat16", "kv_cache_dtype": "fp8", "step": 2048,
     "window_size": 0},
    {"op_name": "moe", "kernel_source": "moe_torch_flow_cutlass", "num_tokens": 128, "hidden_size": 4096,
     "inter_size": 14336, "topk": 2, "num_experts": 8, "moe_tp_size": 1, "moe_ep_size": 1, "moe_dtype": "bfloat16",
     "distribution": "power_law_1.2", "latency": 1.0},
]


def test_gemm_regimes():
    """Decode GEMMs are bound by the weight's bytes, big ones by the matrix rate; fp8 halves both."""
    big = gemm_ms(8192, 8192, 8192, "bfloat16", H100, constants=ROOFLINE)
    flops_time = 2 * 8192 ** 3 / matrix_peak(H100, "bf16") * 1e3
    assert flops_time <= big[()] < 1.3 * flops_time
    dec = gemm_ms(1, 16384, 16384, "bfloat16", H100, constants=ROOFLINE)
    assert dec == pytest.approx(16384 ** 2 * 2 / 3350e9 * 1e3, rel=0.1)
    assert gemm_ms(8192, 8192, 8192, "fp8", H100, constants=ROOFLINE) < 0.7 * big
    # weight-only int4 reads a quarter of bf16's weight bytes at decode
    assert gemm_ms(1, 16384, 16384, "int4_wo", H100, constants=ROOFLINE) < 0.4 * dec


def test_waves_and_fallback_peaks():
    """One row more than a full wave of 128x256 tiles costs ~half a wave more whatever the tile; B200's
    fp4 rate falls back to 2x fp8."""
    t1, w1, _, _ = tile_compute_s(np.array([128.0 * 132]), np.array([256.0]), np.array([4096.0]), 1e15, H100)
    t2, w2, _, _ = tile_compute_s(np.array([128.0 * 132 + 1]), np.array([256.0]), np.array([4096.0]), 1e15, H100)
    assert w1[0] == 1 and w2[0] > 1 and t2[0] > 1.3 * t1[0]
    spec = dict(B200.peak_tflops)
    spec.pop("fp4_tc", None)
    from dataclasses import replace

    b = replace(B200, peak_tflops=spec, tdp_w=0)
    assert matrix_peak(b, "fp4") == pytest.approx(2 * matrix_peak(b, "fp8"))
    assert 0 < l2_weight_hit(np.array([1e6]), H100)[0] <= 1 and l2_weight_hit(np.array([1e9]), H100)[0] < 0.01


def test_tiles_as_fast_go_to_the_first_listed_so_a_faster_gpu_and_more_rows_are_not_priced_faster():
    """Of tiles as fast in the model, the first listed is taken, widest first: 8, 16 and 32 rows of a bf16
    4096 x 4096 GEMM on B200 split k alike (8 rows were priced 15% over 32, which ran unsplit in four 8-row
    tiles), and an exact tie no longer goes to whichever rounding favoured (GB200 was priced 1.5x a B200)."""
    B200, GB200 = get_device("B200"), get_device("GB200")
    m = np.array([8.0, 16.0, 32.0])
    parts = gemm_parts(m, 4096.0, 4096.0, "bfloat16", B200)
    assert len(set(parts["split_levels"].tolist())) == 1
    t = gemm_ms(m, 4096.0, 4096.0, "bfloat16", B200)
    assert np.all(np.diff(t) >= 0)
    tie = [gemm_ms(230.0, 512.0, 1152.0, "bfloat16", d)[()] for d in (GB200, B200)]
    assert tie[0] <= tie[1]


def test_cutlass_moe_pays_its_permute_and_finalize_passes_at_a_streaming_rate():
    """TensorRT-LLM's CUTLASS MoE permutes every token-expert pair's row and finalizes the outputs in kernels of their
    own, before and after the grouped GEMMs (so their time adds to the math, not overlapping it): 2 + 1 + 2 bytes per
    pair element in fp8, each byte at 1 + bandwidth / (SMs x 25 GB/s) times its DRAM time (few bytes in flight per
    SM), so the passes weigh most where each SM has the most bandwidth to draw (B200)."""
    from hybridperf.priors.moe import PERMUTED, SM_INFLIGHT_BW

    args = (65536.0, 7168.0, 256.0, 8.0, 256.0)  # a permuted buffer of GBs: L2 holds none of it
    added = {}
    for name in ("l40s", "h100_sxm", "b200_sxm"):
        dev = get_device(name)
        plain, perm = (moe_parts(*args, dev, "fp8", ep=8, replayed=False, permuted=p) for p in (False, True))
        bw = dev.mem_bw_gbs * 1e9
        pair_bytes = plain["routed"] * 7168.0 * 5.0
        stream = 1.0 + bw / (dev.num_sms * SM_INFLIGHT_BW)
        assert perm["memory"] == pytest.approx(plain["memory"])
        assert (perm["quant"] - plain["quant"]) * bw == pytest.approx(pair_bytes * stream, rel=1e-3)
        added[name] = (perm["quant"] - plain["quant"]) / plain["memory"]
    assert added["l40s"] < added["h100_sxm"] < added["b200_sxm"]
    # a compute-bound layer (wide experts, many tokens) pays the passes on top of its math
    wide = (65536.0, 7168.0, 2048.0, 8.0, 256.0)
    h100 = get_device("h100_sxm")
    plain, perm = (moe_parts(*wide, h100, "fp8", ep=8, replayed=False, permuted=p) for p in (False, True))
    assert perm["compute"] > perm["memory"]
    t_plain, t_perm = (combine_ms(parts, "fp8", ROOFLINE) for parts in (plain, perm))
    assert t_perm - t_plain == pytest.approx((perm["quant"] - plain["quant"]) * 1e3, rel=1e-6)
    # the bytes the residual reads are the passes' own, not their time: more bandwidth does not grow them
    b200 = get_device("b200_sxm")
    faster = replace(b200, mem_bw_gbs=2.0 * b200.mem_bw_gbs)
    assert moe_parts(*args, faster, "fp8", ep=8, permuted=True)["bytes"] == pytest.approx(
        moe_parts(*args, b200, "fp8", ep=8, permuted=True)["bytes"])
    # which table sources run such passes: TensorRT-LLM's CUTLASS (and nongated) and DeepGEMM MoE, FlashInfer's
    # CUTLASS experts; not the kernels that gather rows inside the GEMM (Triton, Marlin) or fuse it (trtllm-gen)
    fams = kernel_family(["moe_torch_flow_cutlass", "moe_torch_flow_nongated", "deepgemm",
                          "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts",
                          "sglang_fused_moe_triton", "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
                          "sglang_flashinfer_trtllm_moe"])
    assert [f in PERMUTED for f in fams] == [True] * 4 + [False] * 3


def test_vllm_cutlass_fp8_runs_its_own_tile_unsplit():
    """vLLM's CUTLASS fp8 at m = 8 on H100 runs one 16 x 64 (swapped) tile per 64 columns of n and never
    splits k, where the generic path splits a decode GEMM's k over idle SMs; on B200 its tile is 128 wide."""
    m, n, k = np.array([8.0]), np.array([3072.0]), np.array([51200.0])
    vllm = FIXED_TILE_SOURCES[("fp8", "CutlassFP8ScaledMMLinearKernel")]
    _, _, ctas, split = tile_compute_s(m, n, k, 1e15, H100, vllm)
    assert ctas[0] == 48 and split[0] == 1
    _, _, ctas_generic, split_generic = tile_compute_s(m, n, k, 1e15, H100)
    assert split_generic[0] > 1 and ctas_generic[0] > 48
    _, _, ctas_b200, _ = tile_compute_s(m, n, k, 1e15, B200, vllm)
    assert ctas_b200[0] == 24
    # past m = 128 the kernel's 128 x 128 tile: 16 x 24 tiles for a 2048 x 3072 output
    _, _, ctas_big, _ = tile_compute_s(np.array([2048.0]), n, k, 1e15, H100, vllm)
    assert ctas_big[0] == 16 * 24
    # no dispatch on Ampere (vLLM runs no CUTLASS fp8 there), and a bf16 row of that source: the generic path
    a100 = get_device("NVIDIA A100-SXM4-80GB")
    assert tile_compute_s(m, n, k, 1e15, a100, vllm)[3][0] == tile_compute_s(m, n, k, 1e15, a100)[3][0]
    bf16 = gemm_ms(8, 3072, 51200, "bfloat16", H100, "CutlassFP8ScaledMMLinearKernel", constants=ROOFLINE)
    assert bf16 == pytest.approx(gemm_ms(8, 3072, 51200, "bfloat16", H100, constants=ROOFLINE))


def test_weight_only_gemms_run_warp_mma_on_blackwell():
    """TensorRT-LLM's weight-only GEMMs run their Sm80 (mma.sync) kernels on Blackwell: a compute-bound int4_wo GEMM
    there is held to the warp-level MMA rate, well below bf16's tcgen05 one; on Hopper (its own wgmma kernels) it
    keeps bf16's rate."""
    flops = 2.0 * 8192 ** 3
    int4_b200 = float(gemm_ms(8192, 8192, 8192, "int4_wo", B200, constants=ROOFLINE))
    assert flops / (int4_b200 * 1e-3) <= warp_mma_peak(B200, "bf16") * 1.0001
    assert int4_b200 > 2 * float(gemm_ms(8192, 8192, 8192, "bfloat16", B200, constants=ROOFLINE))
    assert float(gemm_ms(8192, 8192, 8192, "int4_wo", H100, constants=ROOFLINE)) == pytest.approx(
        float(gemm_ms(8192, 8192, 8192, "bfloat16", H100, constants=ROOFLINE)), rel=0.05)


def test_gemm_memory_efficiency_read_off_decode_shapes():
    """A decode GEMM's compute term pays m padded to a tile, so its memory time is only ~2x it: the GEMM fit reads
    the memory efficiency off such rows (`GEMM_MEMORY_BOUND_RATIO`), where at the compute-bound ratio (3x) it would
    find none and take a default."""
    from hybridperf.training.aic_kernels import BOUND_RATIO, GEMM_MEMORY_BOUND_RATIO, _fit_group

    rng = np.random.default_rng(0)
    c = np.exp(rng.uniform(np.log(1e-4), np.log(1.0), 200))
    mem = 2.4 * c  # decode-like: memory-bound, 2.4x the padded compute
    y = mem / 0.5  # half the bandwidth (not bf16's default 0.75)
    eff_m = _fit_group(c, mem, np.zeros(200), y, 1.0, 1980.0, mem_ratio=GEMM_MEMORY_BOUND_RATIO)[1]
    assert eff_m == pytest.approx(0.5, rel=0.1)
    assert np.isnan(_fit_group(c, mem, np.zeros(200), y, 1.0, 1980.0, mem_ratio=BOUND_RATIO)[1])
    # and the fit of GEMM constants uses that ratio, MoE's the compute-bound one
    from hybridperf.training.aic_kernels import _fit_constants

    rows = pd.DataFrame({"op_name": "gemm", "gemm_dtype": "bfloat16", "moe_dtype": "bfloat16", "kernel_source": "x",
                         "latency_ms": y})
    terms = pd.DataFrame({"compute_ms": c, "memory_ms": mem, "aux": 0.0, "fixed_ms": 0.0, "kernels": 1.0})
    gemm = _fit_constants([(rows, H100, terms)], "gemm", ["h100_sxm"], "test", 0.0)
    assert gemm.value("memory_eff", "bfloat16", "x") == pytest.approx(0.5, rel=0.1)
    moe = _fit_constants([(rows.assign(op_name="moe"), H100, terms)], "moe", ["h100_sxm"], "test", 0.0)
    assert "bfloat16|x" not in dict(moe.memory_eff)


def test_constants_prefer_the_same_architecture():
    """A kernel source's constants fitted on GPUs of the row's kernel architecture come first (the same kernels on
    the same SMs: an H200 takes the H100's), then the source's over every architecture, then the dtype's on that
    architecture, then the dtype's; a fit writes the per-architecture keys beside the pooled ones."""
    c = KernelConstants(compute_eff=(("bfloat16", 0.6), ("bfloat16@hopper", 0.65), ("bfloat16|x", 0.5),
                                     ("bfloat16|x@hopper", 0.8)), memory_eff=(), floor_kcycles=())
    assert c.value("compute_eff", "bfloat16", "x", "hopper") == 0.8
    assert c.value("compute_eff", "bfloat16", "x", "ada") == 0.5
    assert c.value("compute_eff", "bfloat16", "x") == 0.5
    assert c.value("compute_eff", "bfloat16", "y", "hopper") == 0.65
    assert c.value("compute_eff", "bfloat16", "y", "ada") == 0.6
    from hybridperf.training.aic_kernels import _fit_constants

    rng = np.random.default_rng(1)
    comp = np.exp(rng.uniform(np.log(1e-3), np.log(1.0), 200))
    terms = pd.DataFrame({"compute_ms": comp, "memory_ms": comp / 10, "aux": 0.0, "fixed_ms": 0.0, "kernels": 1.0})
    rows = pd.DataFrame({"op_name": "gemm", "gemm_dtype": "bfloat16", "kernel_source": "x"}, index=range(200))
    priced = [(rows.assign(latency_ms=comp / 0.9), H100, terms), (rows.assign(latency_ms=comp / 0.6), B200, terms)]
    fit = _fit_constants(priced, "gemm", ["h100_sxm", "b200_sxm"], "t", 0.0)
    assert fit.value("compute_eff", "bfloat16", "x", "hopper") == pytest.approx(0.9, rel=0.05)
    assert fit.value("compute_eff", "bfloat16", "x", "blackwell") == pytest.approx(0.6, rel=0.05)
    assert fit.value("compute_eff", "bfloat16", "x") == pytest.approx((0.9 * 0.6) ** 0.5, rel=0.05)


def test_replayed_output_stays_in_l2_on_inline_ecc_gddr_cards_only():
    """A 64 MB output cycled with small inputs stays in L40S's 96 MB L2, a 1 GB one does not; H100 (HBM)
    writes every output to DRAM; a replayed small-k GEMM is faster on L40S for it."""
    l40s = get_device("NVIDIA L40S")
    hit = l2_output_hit(np.array([64e6, 1e9]), np.array([1e6, 1e6]), l40s)
    assert hit[0] == 1.0 and hit[1] < 0.01
    assert l2_output_hit(np.array([64e6]), np.array([1e6]), H100)[0] == 0.0
    m, n, k = 2048, 12288, 64
    assert gemm_ms(m, n, k, "bfloat16", l40s) < 0.7 * gemm_ms(m, n, k, "bfloat16", l40s, replayed=False)


def test_moe_skew_and_shards():
    """Power-law routing loads EP rank 0 more than balanced; more EP ranks, less work on rank 0."""
    bal = moe_ms(4096, 7168, 2048, 8, 256, H100, "fp8_block", 1, 8, "balanced")
    skew = moe_ms(4096, 7168, 2048, 8, 256, H100, "fp8_block", 1, 8, "power_law_1.01")
    assert skew > bal
    assert moe_ms(4096, 7168, 2048, 8, 256, H100, "fp8_block", 1, 32) < bal
    assert rank0_share(np.array([4096.0]), 8, 256, 1, 1.2)[0] == 1.0
    assert 1 / 8 < rank0_share(np.array([4096.0]), 8, 256, 8, 1.2)[0] <= 1.0


def test_short_k_experts_spend_more_of_their_time_filling_tiles():
    """Per FLOP, a TP-split expert's down projection (k = its local width) costs more than a wide one's."""
    def compute_per_flop(inter, tp):
        p = moe_parts(np.array([16384.0]), 4096, inter, 8, 128, H100, "bfloat16", tp, 1)
        return float(p["compute"][0] / p["flops"][0])
    wide, split = compute_per_flop(4096, 1), compute_per_flop(4096, 16)
    assert 1.2 < split / wide < 1.4  # k 256 against 4096 on the down projection, a third of the FLOPs
    assert compute_per_flop(32768, 1) == pytest.approx(compute_per_flop(16384, 1), rel=0.02)  # long k: no effect


def test_kernel_family_and_validation():
    fam = kernel_family(["DeepGemmFp8BlockScaledMMKernel", "sglang_fused_moe_triton", "torch_flow", "???"])
    assert list(fam) == ["deepgemm", "triton", "torch", "other"]
    with pytest.raises(Exception, match="unknown op_name"):
        validate(pd.DataFrame([{"op_name": "conv", "m": 1}]))
    with pytest.raises(Exception, match="need columns"):
        validate(pd.DataFrame([{"op_name": "gemm", "m": 1, "n": 2}]))
    with pytest.raises(Exception, match="positive finite m"):
        validate(pd.DataFrame([{"op_name": "gemm", "m": -1, "n": 2, "k": 3, "gemm_dtype": "fp8"}]))
    gqa = {"op_name": "context_attention", "batch_size": 1, "isl": 128, "head_dim": 128}
    for heads, kv in ((8, 16), (32, 12)):
        with pytest.raises(Exception, match="whole number dividing num_heads"):
            validate(pd.DataFrame([{**gqa, "num_heads": heads, "num_key_value_heads": kv}]))
    moe = {"op_name": "moe", "num_tokens": 64, "hidden_size": 4096, "inter_size": 1536, "moe_dtype": "bfloat16"}
    for topk, experts, ep in ((16, 8, 1), (8, 128, 256)):
        with pytest.raises(Exception, match="no larger than num_experts"):
            validate(pd.DataFrame([{**moe, "topk": topk, "num_experts": experts, "moe_ep_size": ep}]))
    for topk, experts, ep in ((0.5, 8, 1), (2, 7.5, 1), (2, 8, 2.5)):
        with pytest.raises(Exception, match="whole number (topk|num_experts|moe_ep_size)"):
            validate(pd.DataFrame([{**moe, "topk": topk, "num_experts": experts, "moe_ep_size": ep}]))
    for name in ("power_law_x", "power_law_-1", "power_law_200"):
        with pytest.raises(Exception, match="alpha in"):
            validate(pd.DataFrame([{**moe, "topk": 8, "num_experts": 128, "distribution": name}]))
    ok = validate(pd.DataFrame([{**moe, "topk": 8, "num_experts": 128, "distribution": "power_law_1.2_eplb"}]))
    assert distribution_alpha(ok["distribution"].to_numpy())[0] == 0.0  # EPLB spreads the load over the ranks
    assert list(kernel_family(["vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"])) == ["triton_kernels"]


BUNDLE = REPO / "exported_models" / "aic_kernels"


def _predictor() -> AicPredictor:
    """This checkout's bundle (residuals run) where it has one, else the installed default."""
    return AicPredictor.load(BUNDLE if (BUNDLE / "manifest.json").is_file() else None)


def test_predict_intervals_and_calibration():
    rows = validate(pd.DataFrame(ROWS))
    p = _predictor()
    res = p.predict(rows, H100)
    for c in ("pred_ms", "lo_ms", "hi_ms"):
        assert np.isfinite(res[c]).all() and (res[c] > 0).all()
    assert (res["lo_ms"] <= res["pred_ms"]).all() and (res["pred_ms"] <= res["hi_ms"]).all()
    # an architecture the physics has no tiles for widens every interval
    from dataclasses import replace

    other = p.predict(rows, replace(H100, arch="cdna3"))
    width = np.log(res["hi_ms"] / res["lo_ms"])
    assert (np.log(other["hi_ms"] / other["lo_ms"]) >= width - 1e-9).all()
    # few-shot: 20 rows of each kind measured at 2x the prediction pull it most of the way up
    meas = pd.concat([rows.assign(latency=res["pred_ms"].to_numpy() * 2.0)] * 20, ignore_index=True)
    moved = calibrate_to(p, meas, H100).predict(rows, H100)["pred_ms"]
    assert (moved > 1.3 * res["pred_ms"]).all()


def test_a_float_dtype_spelt_short_is_the_tables_dtype():
    """`bf16` and `fp16` are spellings of the tables' bfloat16 and float16: the same prediction and interval (a
    spelling the fits never saw had widened the interval as a new dtype)."""
    row = {**ROWS[0], "kernel_source": "vllm_flash_attn_fa3"}
    attn = {**ROWS[4], "kernel_source": "vllm_flash_attn_fa3", "kv_cache_dtype": "bfloat16"}
    rows = [row, {**row, "gemm_dtype": "bf16"}, attn, {**attn, "attn_dtype": "bf16", "kv_cache_dtype": "bf16"}]
    res = _predictor().predict(validate(pd.DataFrame(rows)), H100)
    for c in ("pred_ms", "lo_ms", "hi_ms"):
        assert res[c].iloc[1] == pytest.approx(res[c].iloc[0]) and res[c].iloc[3] == pytest.approx(res[c].iloc[2])


def test_cli_aiconfigurator_schema(tmp_path, monkeypatch, capsys):
    """Every input row comes back in order with pred_ms/lo/hi; parquet reads like CSV."""
    inp = tmp_path / "rows.parquet"
    raw = pd.DataFrame(ROWS).assign(extra="keep")
    raw.to_parquet(inp)
    out = tmp_path / "out.csv"
    from typer.testing import CliRunner

    from hybridperf.cli.app import app

    bundle = ["--model-bundle", str(BUNDLE)] if (BUNDLE / "manifest.json").is_file() else []
    r = CliRunner().invoke(app, ["predict-kernels", str(inp), "--device", "h100_sxm", "--output", str(out), *bundle])
    assert r.exit_code == 0, r.output
    res = pd.read_csv(out)
    assert len(res) == len(raw) and list(res["op_name"]) == list(raw["op_name"]) and (res["extra"] == "keep").all()
    assert ((res["pred_lo_ms"] <= res["pred_ms"]) & (res["pred_ms"] <= res["pred_hi_ms"])).all()
    assert (res["pred_lo_ms"] > 0).all()
    bad = tmp_path / "bad.csv"
    pd.DataFrame([{"op_name": "moe", "num_tokens": 4}]).to_csv(bad, index=False)
    code, err = run_cli(monkeypatch, capsys, ["predict-kernels", bad, "--device", "h100_sxm", "--output", out])
    assert_one_line_error(code, err)


def test_loader_canonical_columns():
    df = pd.DataFrame([{"framework": "VLLM", "version": "1", "kernel_source": "k", "m": 1, "n": 2, "k": 3,
                        "gemm_dtype": "fp8", "latency": 0.1}])
    c = canonical(df, "gemm", "h100_sxm")
    assert list(c[["system", "op_name", "dtype"]].iloc[0]) == ["h100_sxm", "gemm", "fp8"]
    assert c["latency_ms"].iloc[0] == 0.1


def test_shipped_bundle_matches_constants_file():
    """The bundle's prior constants are the ones the priors read by default."""
    mf = REPO / "exported_models" / "aic_kernels" / "manifest.json"
    if not mf.is_file():
        pytest.skip("no shipped aic_kernels bundle")
    m = json.loads(mf.read_text())
    assert m["constants"]["gemm"] == fitted_constants()["gemm"].to_dict()
    assert m["constants"]["moe"] == fitted_constants()["moe"].to_dict()
    assert set(m["constants"]["gemm"]["fitted_on"]) == set(SYSTEM_DEVICES)


def test_shared_tables_load():
    if not (SHARED / "aiconfigurator").is_dir():
        pytest.skip("../shared/datasets/aiconfigurator not found")
    df = load_kernels(SHARED, systems=["l40s"], ops=["gemm"])
    assert len(df) > 1000 and set(df["op_name"]) == {"gemm"}
    assert (df["latency_ms"] > 0).all() and df["system"].eq("l40s").all()


def test_prediction_path_imports_no_training_libraries(tmp_path):
    """predict-kernels on aiconfigurator rows runs on numpy, pandas and onnxruntime alone."""
    import os
    import subprocess
    import sys

    inp, out = tmp_path / "rows.csv", tmp_path / "out.csv"
    pd.DataFrame(ROWS).to_csv(inp, index=False)
    script = ("import sys, json\nimport hybridperf.cli.app as cli\n"
              f"sys.argv = ['hybridperf', 'predict-kernels', {str(inp)!r}, '--device', 'b200_sxm', '--output', {str(out)!r}]\n"
              + (f"sys.argv += ['--model-bundle', {str(BUNDLE)!r}]\n" if (BUNDLE / "manifest.json").is_file() else "")
              +
              "try:\n    cli.main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
              "print(json.dumps(sorted(m for m in ('torch', 'xgboost', 'sklearn', 'onnxmltools') if m in sys.modules)))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
    assert len(pd.read_csv(out)) == len(ROWS)


def test_bundle_refuses_bad_residual_scale(tmp_path):
    """An edited manifest (a residual scaled outside [0, 1]) fails to load with one line."""
    import shutil

    from hybridperf.errors import ModelBundleError
    from hybridperf.residual_models.bundle import sign_manifest

    src = REPO / "exported_models" / "aic_kernels"
    if not (src / "manifest.json").is_file() or not json.loads((src / "manifest.json").read_text())["residuals"]:
        pytest.skip("no shipped aic_kernels residual")
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    next(iter(m["residuals"].values()))["scale"] = 3.0
    m.pop("content_sha256", None)
    (dst / "manifest.json").write_text(json.dumps(sign_manifest(m)))  # re-signed: the value check must refuse it
    with pytest.raises(ModelBundleError, match="scale"):
        AicPredictor.load(dst)


def test_blank_dtype_and_empty_cache_rows_predict():
    """A blank dtype cell prices as bf16 with a widened interval; decode against an empty cache is valid."""
    rows = validate(pd.DataFrame([
        {"op_name": "gemm", "m": 8, "n": 4096, "k": 4096, "gemm_dtype": None, "kernel_source": None},
        {"op_name": "gemm", "m": 8, "n": 4096, "k": 4096, "gemm_dtype": "bfloat16", "kernel_source": "torch_flow"},
        {"op_name": "generation_attention", "batch_size": 1, "num_heads": 8, "num_key_value_heads": 8,
         "head_dim": 128, "step": 0},
    ]))
    res = _predictor().predict(rows, H100)
    assert np.isfinite(res.to_numpy()).all() and (res["lo_ms"] > 0).all()
    assert res["pred_ms"].iloc[0] == pytest.approx(res["pred_ms"].iloc[1], rel=0.5)
    w = np.log(res["hi_ms"] / res["lo_ms"])
    assert w.iloc[0] > w.iloc[1]


def test_eager_timed_block_fp8_is_the_slower_of_host_and_gpu():
    """vLLM's block-fp8 linears are timed without a CUDA graph: a call costs the host's dispatch or the GPU's
    work, whichever is slower (not their sum), and fitting reads the host's time off the flat small shapes."""
    from hybridperf.training.aic_kernels import fit_constants

    src = "DeepGemmFp8BlockScaledMMKernel"
    m = np.array([1.0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384] * 8)
    n = np.repeat([2048.0, 4096, 7168, 8192, 16384, 24576, 1536, 3072], 15)
    k = np.repeat([7168.0, 4096, 2048, 8192, 7168, 1536, 7168, 1536], 15)
    gpu = gemm_ms(m, n, k, "fp8_block", H100, "deepgemm", constants=ROOFLINE)
    rows = pd.DataFrame({"system": "h100_sxm", "op_name": "gemm", "gemm_dtype": "fp8_block", "kernel_source": src,
                         "m": m, "n": n, "k": k, "latency_ms": np.maximum(gpu, 0.15)})
    c = fit_constants(rows, "gemm", ["h100_sxm"], "test")
    assert c.host_s("fp8_block", src) == pytest.approx(150e-6, rel=0.02)
    assert c.host_s("fp8_block", "TritonFp8BlockScaledMMKernel") == pytest.approx(150e-6, rel=0.02)  # dtype's
    assert c.value("floor_kcycles", "fp8_block", src) < 20  # a kernel's floor, not the host's 150 us
    pred = gemm_ms(m, n, k, "fp8_block", H100, src, constants=c)
    assert np.abs(pred[m <= 16] / 0.15 - 1).max() < 0.02
    i = np.argmax(gpu)  # 1.3 ms of GPU work hides the host: no 150 us on top
    assert pred[i] == pytest.approx(gemm_ms(m[i], n[i], k[i], "fp8_block", H100, "deepgemm", constants=c), rel=0.01)


def test_sglang_int8_wo_is_w8a8_behind_an_unfused_quantization():
    """aiconfigurator's SGLang int8_wo rows run int8 tensor cores after nine eager PyTorch ops quantize the
    activation: at large m*k that pass, not the weight, sets the time; TRT-LLM's weight-only plugin is untouched."""
    wo = gemm_ms(4096, 2048, 7168, "int8_wo", H100, "trt_flow", constants=ROOFLINE)
    sg = gemm_ms(4096, 2048, 7168, "int8_wo", H100, "sglang", constants=ROOFLINE)
    extra_ms = 4096 * 7168 * (47 - 3) / (H100.mem_bw_gbs * 1e9) * 1e3  # over a fused 3-byte quantization
    assert sg[()] == pytest.approx(extra_ms + gemm_ms(4096, 2048, 7168, "sq", H100, constants=ROOFLINE), rel=0.01)
    assert sg > 2 * wo


def test_collectors_fp8_path_pays_its_four_quantization_kernels():
    """`collect`'s fp8 rows quantize in four PyTorch kernels moving 5 bytes per activation element (amax read,
    then read and fp8 write) before `torch._scaled_mm`; the engines' fused quantization is one 3-byte kernel."""
    from hybridperf.priors.llm_gemm import gemm_parts
    ours, fused = (gemm_parts(4096, 2048, 7168, "fp8", H100, kernel_source=s) for s in ("torch._scaled_mm", "sglang"))
    assert ours["kernels"] == 5.0 and fused["kernels"] == 2.0
    assert ours["quant"] == pytest.approx(fused["quant"] * 5.0 / 3.0)
    c = KernelConstants(compute_eff=(("bfloat16", 1.0),), memory_eff=(("bfloat16", 1.0),),
                        floor_kcycles=(("bfloat16", 6.0),))
    gap_ms = gemm_ms(1, 2048, 512, "fp8", H100, "torch._scaled_mm", constants=c) - gemm_ms(1, 2048, 512, "fp8", H100,
                                                                                             constants=c)
    assert gap_ms == pytest.approx(3 * 6e3 / (H100.boost_clock_mhz * 1e6) * 1e3, rel=0.05)  # three more floors


def test_l2_hits_follow_the_copies_each_framework_cycles():
    """TensorRT-LLM's collector cycles min(5, ceil(L2 / weight)) weight copies, SGLang's and vLLM's six (vLLM's
    fp8_block and nvfp4 one): a 16.8 MB weight stays in one 25 MB half of H100's L2 under one copy, and comes
    from DRAM under six (100 MB) or TensorRT-LLM's three (50 MB, the whole L2 but twice a half)."""
    from hybridperf.priors.llm_gemm import gemm_parts, replay_copies

    assert replay_copies("TRTLLM", "fp8", "1.3.0rc20") is None and replay_copies("TRTLLM", "fp8", "1.0.0") == 5
    assert replay_copies("SGLang", "fp8", "0.5.14") == 6 and replay_copies("SGLang", "fp8", "0.5.6.post2") == 1
    assert replay_copies("VLLM", "bfloat16") == 6 and replay_copies("VLLM", "fp8_block") == 1
    assert replay_copies("torch", "fp8") == 1  # our collector's CUDA graph replays one set of operands
    def mem(fw, dtype="bfloat16", replayed=True):  # a 16.8 MB weight: 4096 x 2048 in bf16, 8192 x 2048 in fp8
        n = 4096 if dtype == "bfloat16" else 8192
        return gemm_parts(8, n, 2048, dtype, H100, replayed=replayed, framework=fw)["memory"][()]

    assert mem("TRTLLM") > 0.95 * mem("VLLM") and mem("VLLM") == mem("SGLang")
    assert mem("VLLM", "fp8_block") < 0.6 * mem("SGLang", "fp8_block")
    assert mem("TRTLLM", replayed=False) == mem("VLLM", replayed=False)  # inside a model: DRAM either way


def test_dtype_widening_follows_the_kernels_a_row_runs():
    """SGLang's int8_wo rows run W8A8 (`sq`) kernels: training on them teaches `sq`, not weight-only int8, so a
    TensorRT-LLM weight-only int8 row is a dtype never trained on (its interval widened) and an SGLang one is not."""
    from hybridperf.aic_kernels import DEFAULT_WIDEN, dtype_of, interval_quantiles, run_dtype_of

    rows = pd.DataFrame({"op_name": ["gemm", "gemm"], "gemm_dtype": ["int8_wo", "int8_wo"],
                         "kernel_source": ["sglang", "trt_flow_/weight_only_quant_matmul_L257/PLUGIN_V2_0"]})
    assert list(run_dtype_of(rows)) == ["sq", "int8_wo"] and list(dtype_of(rows)) == ["int8_wo", "int8_wo"]
    trained = {"dtypes": {"gemm": ["sq"]}, "kernel_families": {"gemm": ["torch", "trt_plugin"]}}
    iv = {"gemm:prior:int8_wo": {"q_lo": -0.2, "q_hi": 0.2}}
    q_lo, q_hi = interval_quantiles(iv, trained, rows["op_name"], dtype_of(rows), ["torch", "trt_plugin"], "hopper",
                                    {"gemm": "prior"}, run_dts=run_dtype_of(rows))
    assert q_hi.tolist() == pytest.approx([0.2, 0.2 + DEFAULT_WIDEN["dtype"]])
    assert q_lo.tolist() == pytest.approx([-0.2, -0.2 - DEFAULT_WIDEN["dtype"]])


def test_a_kernel_path_no_training_system_ran_gets_at_least_the_new_source_interval():
    """A row whose dtype and kernel source no training system ran takes its constants from other kernels: its
    interval covers at least its op's `new_source` quantiles; a row of a trained path keeps its dtype's."""
    from hybridperf.aic_kernels import DEFAULT_WIDEN, NEW_SOURCE, dtype_of, interval_quantiles, source_key

    rows = pd.DataFrame({"op_name": ["gemm", "gemm"], "gemm_dtype": ["fp8_block", "fp8_block"],
                         "kernel_source": ["DeepGemmFp8BlockScaledMMKernel", "FlashInferFp8BlockScaledMMKernel"]})
    assert list(source_key(rows)) == ["fp8_block|" + s for s in rows["kernel_source"]]
    trained = {"dtypes": {"gemm": ["fp8_block"]}, "kernel_families": {"gemm": ["deepgemm", "flashinfer"]},
               "sources": {"gemm": ["fp8_block|DeepGemmFp8BlockScaledMMKernel"]}}
    iv = {"gemm:hybrid:fp8_block": {"q_lo": -0.2, "q_hi": 0.3},
          f"gemm:hybrid:{NEW_SOURCE}": {"q_lo": -0.9, "q_hi": 0.1}}
    q_lo, q_hi = interval_quantiles(iv, trained, rows["op_name"], dtype_of(rows), ["deepgemm", "flashinfer"],
                                    "hopper", {"gemm": "hybrid"}, sources=source_key(rows))
    assert q_lo.tolist() == pytest.approx([-0.2, -0.9]) and q_hi.tolist() == pytest.approx([0.3, 0.3])
    q_lo, q_hi = interval_quantiles(iv, trained, rows["op_name"], dtype_of(rows), ["deepgemm", "flashinfer"],
                                    "hopper", {"gemm": "hybrid"}, sources=source_key(rows), off_ridge=True)
    ridge = DEFAULT_WIDEN["ridge"]  # the GPU's own widening applies to the new-source floor too
    assert q_lo.tolist() == pytest.approx([-0.2 - ridge, -0.9 - ridge])
    assert q_hi.tolist() == pytest.approx([0.3 + ridge, 0.3 + ridge])
    q_lo, _ = interval_quantiles(iv, {k: v for k, v in trained.items() if k != "sources"}, rows["op_name"],
                                 dtype_of(rows), ["deepgemm", "flashinfer"], "hopper", {"gemm": "hybrid"},
                                 sources=source_key(rows))
    assert q_lo.tolist() == pytest.approx([-0.2, -0.2])  # a bundle that lists no sources widens nothing


def test_prior_terms_read_the_framework_a_row_names_or_its_kernel_source():
    """The copies a row's collector cycled follow its `framework` (and version) column, else its kernel source
    (vLLM's kernel classes, SGLang's `sglang*`, TensorRT-LLM's `torch_flow`); a blank or categorical framework
    cell is read off the kernel source too."""
    from hybridperf.aic_kernels import framework_of, prior_terms

    base = {"op_name": "gemm", "m": 8, "n": 4096, "k": 2048, "gemm_dtype": "bfloat16"}
    rows = pd.DataFrame([{**base, "kernel_source": "torch_flow", "framework": "TRTLLM"},
                         {**base, "kernel_source": "torch.nn.functional.linear", "framework": "VLLM"},
                         {**base, "kernel_source": "torch_flow", "framework": None},
                         {**base, "kernel_source": "torch.nn.functional.linear", "framework": None}])
    rows["framework"] = rows["framework"].astype("category")
    rows = validate(rows)
    assert list(framework_of(rows)) == ["TRTLLM", "VLLM", "TRTLLM", "VLLM"]
    mem = prior_terms(rows, get_device("l40s"))["memory_ms"].to_numpy()
    assert mem[0] == mem[2] and mem[1] == mem[3] and mem[0] < 0.7 * mem[1]  # 5 copies fit L40S's 96 MB L2, 6 do not
    assert list(framework_of(rows.drop(columns="framework"))) == ["TRTLLM", "VLLM", "TRTLLM", "VLLM"]
    assert list(framework_of(pd.DataFrame({"kernel_source": ["DeepGemmFp8BlockScaledMMKernel", "sglang_torch_linear",
                                                              "mystery"]}))) == ["VLLM", "SGLang", ""]


def test_unfitted_dtype_takes_its_kin_on_the_same_kernel_source():
    """nvfp4 through TensorRT-LLM's generic `torch_flow` path, fitted nowhere, takes fp8's constants on that
    path (the same wrapper's launches) before fp8's over every source, and a source of its own falls to fp8."""
    c = KernelConstants(compute_eff=(("bfloat16", 0.9), ("fp8", 0.8), ("fp8|torch_flow", 0.7)),
                        memory_eff=(("bfloat16", 0.9),),
                        floor_kcycles=(("bfloat16", 4.0), ("fp8", 5.0), ("fp8|torch_flow", 13.0)))
    assert c.value("floor_kcycles", "nvfp4", "torch_flow") == 13.0
    assert c.value("floor_kcycles", "nvfp4", "sglang_flashinfer_cutedsl_nvfp4") == 5.0
    assert c.value("compute_eff", "nvfp4", "torch_flow") == 0.7
    fitted = KernelConstants(compute_eff=(("nvfp4", 0.6), ("fp8|torch_flow", 0.7)), memory_eff=(),
                             floor_kcycles=())
    assert fitted.value("compute_eff", "nvfp4", "torch_flow") == 0.6  # the dtype's own fit comes first
    on_arch = KernelConstants(compute_eff=(("fp8", 0.8), ("fp8@hopper", 0.6)), memory_eff=(), floor_kcycles=())
    assert on_arch.value("compute_eff", "fp8_static", "torch._scaled_mm", "hopper") == 0.6  # the kin on its arch
    assert on_arch.value("compute_eff", "fp8_static", "torch._scaled_mm", "ampere") == 0.8


def test_aiconfigurator_modes_no_shared_table_holds_are_priced_by_their_physics():
    """fp8 with a precomputed activation scale skips the quantization pass; NVFP4 weights dequantized on
    Hopper stream 4-bit weights into the bf16 MMA, as weight-only int4 does; unknown names still price as bf16."""
    decode = (16, 8192, 8192)
    fp8, static = (float(gemm_ms(*decode, dt, H100)) for dt in ("fp8", "fp8_static"))
    assert static < fp8
    wo = [float(gemm_ms(*decode, dt, H100)) for dt in ("nvfp4_wo", "int4_wo", "bfloat16")]
    assert wo[0] == pytest.approx(wo[1], rel=0.15) and wo[0] < 0.6 * wo[2]
    grouped = [float(moe_ms(64, 4096, 1536, 8, 128, B200, dt)) for dt in ("w4a8_mxfp4_mxfp8_trtllm", "w4a8_mxfp4_mxfp8")]
    assert grouped[0] == pytest.approx(grouped[1], rel=0.3)


def test_sglang_wide_ep_fp8_block_attention_is_fp8_attention():
    from hybridperf.aic_kernels import prior_terms
    row = {"op_name": "context_attention", "batch_size": 4, "isl": 8192, "num_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "kv_cache_dtype": "fp8", "kernel_source": "fa3", "framework": "SGLang"}
    rows = validate(pd.DataFrame([{**row, "attn_dtype": d} for d in ("fp8_block", "fp8", "bfloat16")]), "test")
    t = prior_terms(rows, H100, fitted_constants()["gemm"], fitted_constants()["moe"])["prior_ms"].to_numpy()
    assert t[0] == t[1] < t[2]


def test_a_gpu_whose_ridge_no_training_gpu_had_gets_wider_intervals():
    """H20 (148 TFLOP/s over 4 TB/s: 37 FLOP/B) balances compute and memory where none of the four training GPUs
    (153-419 FLOP/B) did; an H200 (206) lies inside their range."""
    from hybridperf.aic_kernels import DEFAULT_WIDEN, ridge_outside

    systems = ["a100_sxm", "h100_sxm", "l40s", "b200_sxm"]
    h20, h200 = get_device("NVIDIA H20"), get_device("NVIDIA H200")
    assert ridge_outside(h20, systems) and not ridge_outside(h200, systems) and not ridge_outside(h20, [])
    p = AicPredictor.load()
    trained = {k: v for k, v in p.manifest["trained"].items() if k != "sources"}  # no new-source floor in the way
    p = AicPredictor(p.gemm_c, p.moe_c, p.bundle, {**p.manifest, "trained": trained})
    rows = validate(pd.DataFrame(ROWS))
    width = lambda r: np.log(r["hi_ms"] / r["lo_ms"]).to_numpy()  # noqa: E731
    without = AicPredictor(p.gemm_c, p.moe_c, p.bundle, {**p.manifest, "widen": {"ridge": 0.0}})
    assert width(p.predict(rows, h20)) == pytest.approx(width(without.predict(rows, h20)) + 2 * DEFAULT_WIDEN["ridge"])
    assert width(p.predict(rows, h200)) == pytest.approx(width(without.predict(rows, h200)))


def test_memory_widening_follows_the_memory_the_training_gpus_had():
    from hybridperf.aic_kernels import memory_family

    l40s = get_device("NVIDIA L40S")
    assert memory_family(l40s) == "gddr" and memory_family(H100) == "hbm"
    p = AicPredictor.load()
    rows = validate(pd.DataFrame(ROWS))
    trained = {k: v for k, v in p.manifest["trained"].items() if k != "sources"}  # no new-source floor in the way
    hbm_only = AicPredictor(p.gemm_c, p.moe_c, p.bundle, {**p.manifest, "trained": {**trained, "memory": ["hbm"]}})
    both = AicPredictor(p.gemm_c, p.moe_c, p.bundle, {**p.manifest, "trained": {**trained, "memory": ["gddr", "hbm"]}})
    width = lambda r: np.log(r["hi_ms"] / r["lo_ms"]).to_numpy()  # noqa: E731
    assert width(hbm_only.predict(rows, l40s)) == pytest.approx(width(both.predict(rows, l40s)) + 0.5)
    assert width(hbm_only.predict(rows, H100)) == pytest.approx(width(both.predict(rows, H100)))
    assert hbm_only.predict(rows, l40s)["pred_ms"].tolist() == both.predict(rows, l40s)["pred_ms"].tolist()


def test_split_k_reduction_latency_grows_with_each_doubling():
    """A long-k GEMM with few output tiles splits k over the SMs; reducing the partial sums costs
    `reduce_kcycles` per doubling of the split, nothing without a split, once in the priced time (hidden
    under an eager path's host dispatch), and survives a round trip."""
    from dataclasses import replace

    from hybridperf.aic_kernels import prior_terms
    from hybridperf.priors.llm_gemm import KernelConstants, gemm_ms, gemm_parts, split_reduce_s

    base = fitted_constants()["gemm"]
    c, none = replace(base, reduce_kcycles=1.0), replace(base, reduce_kcycles=0.0)
    assert KernelConstants.from_dict(c.to_dict()) == c
    assert KernelConstants.from_dict({k: v for k, v in c.to_dict().items() if k != "reduce_kcycles"}) == none
    with pytest.raises(ValueError):
        replace(base, reduce_kcycles=float("nan"))
    m, n, k = np.array([16.0, 16.0, 8192.0]), np.array([64.0, 64.0, 8192.0]), np.array([1024.0, 16384.0, 8192.0])
    lat = split_reduce_s(gemm_parts(m, n, k, "bfloat16", H100), c)
    assert lat[2] == 0.0  # a full machine of tiles: no split
    assert 0.0 < lat[0] < lat[1]
    assert lat[1] - lat[0] == pytest.approx(np.log2(16384 / 1024) * 1e3 / (H100.boost_clock_mhz * 1e6))
    added = gemm_ms(m, n, k, "bfloat16", H100, constants=c) - gemm_ms(m, n, k, "bfloat16", H100, constants=none)
    np.testing.assert_allclose(added, lat * 1e3, rtol=1e-9, atol=1e-12)
    rows = pd.DataFrame({"op_name": "gemm", "m": m, "n": n, "k": k, "gemm_dtype": "bfloat16"})
    with_c, without = prior_terms(validate(rows), H100, c, c), prior_terms(validate(rows), H100, none, none)
    np.testing.assert_allclose(with_c["fixed_ms"], lat * 1e3)
    np.testing.assert_allclose(with_c["prior_ms"] - without["prior_ms"], with_c["fixed_ms"], atol=1e-12)
    np.testing.assert_allclose(with_c["floor_ms"] - without["floor_ms"], with_c["fixed_ms"], atol=1e-12)
    eager = dict(kernel_source="DeepGemmFp8BlockScaledMMKernel", framework="VLLM")
    tiny = [np.array([1.0]), np.array([64.0]), np.array([16384.0])]
    hidden = (gemm_ms(*tiny, "fp8_block", H100, constants=c, **eager)
              - gemm_ms(*tiny, "fp8_block", H100, constants=none, **eager))
    assert abs(hidden[0]) < split_reduce_s(gemm_parts(*tiny, "fp8_block", H100), c)[0] * 1e3 / 10  # under the host's


def test_eager_timed_rows_keep_their_host_dispatch_where_the_kernels_fall_back():
    """A block-fp8 row on an Ampere GPU runs weight-only kernels, but its collector still timed it eagerly:
    the host's dispatch bounds it there as on the H100, instead of vanishing with the dtype's fallback."""
    a100 = get_device("NVIDIA A100-SXM4-80GB")
    c = replace(fitted_constants()["gemm"], host_us=(("fp8_block|DeepGemmFp8BlockScaledMMKernel", 150.0),))
    pred = gemm_ms(8, 4096, 4096, "fp8_block", a100, "DeepGemmFp8BlockScaledMMKernel", constants=c)
    assert float(pred) >= 0.15
    assert float(gemm_ms(8, 4096, 4096, "int8_wo", a100, "DeepGemmFp8BlockScaledMMKernel", constants=c)) < 0.05


def test_decode_gemm_pads_few_rows_to_a_small_tile():
    """A GEMM of a few rows pads them to 8-32 (the MMA's N slot, swapped), not a 64-row tile: on a GPU of low
    matrix rate and fast memory (H20-3e: H200's memory, a seventh of its math) decode is memory-bound and takes
    H200's time, while a large GEMM is several times slower."""
    h20, h200 = get_device("h20_3e"), get_device("h200_sxm")
    shapes = [(1, 28672, 4096), (8, 128256, 4096), (4, 14336, 4096)]
    for m, n, k in shapes:
        assert gemm_ms(m, n, k, "bfloat16", h20) == pytest.approx(float(gemm_ms(m, n, k, "bfloat16", h200)), rel=0.1)
    assert gemm_ms(8192, 8192, 8192, "bfloat16", h20) > 4 * gemm_ms(8192, 8192, 8192, "bfloat16", h200)


def _attention_grid(op: str) -> pd.DataFrame:
    steps = (15, 511, 4095, 32767) if op == "generation_attention" else (0, 1024)
    isls = (1,) if op == "generation_attention" else (128, 1024, 8192)
    grid = [{"op_name": op, "kernel_source": src, "batch_size": b, "isl": isl, "num_heads": h,
             "num_key_value_heads": kvh, "head_dim": 128, "attn_dtype": "bfloat16", "kv_cache_dtype": kv,
             "step": step, "window_size": 0}
            for src in ("torch_flow", "xqa", "flashinfer", "vllm_flash_attn", "trtllm_mha", "fa3")
            for b in (1, 8, 64, 512) for isl in isls for step in steps for h, kvh in ((32, 8), (64, 2), (96, 4))
            for kv in ("bfloat16", "fp8")]
    return validate(pd.DataFrame(grid))


@pytest.mark.parametrize("slower, faster", [("NVIDIA H100 80GB HBM3", "NVIDIA H200"), ("b200_sxm", "gb200"),
                                            ("b300_sxm", "gb300")])
def test_a_stronger_gpu_never_prices_decode_attention_slower(slower, faster):
    """H200 is an H100 with 1.4x the DRAM bandwidth, GB200 a B200 with more FLOP/s and bandwidth: the shipped
    decode residual (bandwidth-monotone, FLOP/s only through its own term: `REFERENCE_RATES`) must not price
    any decode-attention row slower on the stronger GPU, whatever its shape or kernel source."""
    rows, p = _attention_grid("generation_attention"), _predictor()
    assert "generation_attention" in p.manifest.get("residuals", {})
    ref, new = p.predict(rows, get_device(slower))["pred_ms"], p.predict(rows, get_device(faster))["pred_ms"]
    assert (new <= ref * (1 + 1e-6)).all(), (new / ref).max()


def test_more_bandwidth_prices_prefill_attention_within_a_few_percent():
    """Prefill is bound by its math: an H200 runs our SDPA forwards in 0.97-1.06x an H100's time. The shipped
    context residual reads bandwidth only through monotone terms and the prior (which it leaves free), so an H200
    row is priced at most a few % above an H100's (the free residual reached 1.13x)."""
    rows, p = _attention_grid("context_attention"), _predictor()
    assert "context_attention" in p.manifest.get("residuals", {})
    h100, h200 = p.predict(rows, H100)["pred_ms"], p.predict(rows, get_device("NVIDIA H200"))["pred_ms"]
    assert (h200 <= h100 * 1.03).all(), (h200 / h100).max()


def _gemm_moe_grid() -> pd.DataFrame:
    gemm = [{"op_name": "gemm", "kernel_source": src, "m": m, "n": n, "k": k, "gemm_dtype": dt}
            for src in ("torch.nn.functional.linear", "cutlass_scaled_mm", "DeepGemmFp8BlockScaledMMKernel")
            for m in (1, 16, 256, 4096) for n, k in ((4096, 4096), (28672, 8192), (1024, 7168))
            for dt in ("bfloat16", "fp8", "fp8_block", "nvfp4")]
    moe = [{"op_name": "moe", "kernel_source": src, "num_tokens": t, "hidden_size": h, "inter_size": i, "topk": topk,
            "num_experts": e, "moe_tp_size": 1, "moe_ep_size": ep, "moe_dtype": dt, "distribution": dist}
           for src in ("moe_torch_flow_cutlass", "sglang_fused_moe_triton", "vllm_fused_moe_triton")
           for t in (1, 64, 2048) for h, i, topk, e in ((4096, 14336, 2, 8), (7168, 2048, 8, 256))
           for ep in (1, 8) for dt in ("bfloat16", "fp8", "nvfp4") for dist in ("balanced", "power_law_1.2")]
    return validate(pd.DataFrame(gemm + moe))


def test_more_matrix_flops_never_prices_gemm_or_moe_slower():
    """A GPU with a quarter more matrix FLOP/s, the rest the same: the GEMM and MoE residuals read FLOP/s only
    through their own monotone terms (`REFERENCE_RATES`), so no row is priced more than 2% slower (reading it in
    their compute-over-memory features, the MoE residual priced 8% of sampled table rows slower, up to 1.09x)."""
    b200 = get_device("b200_sxm")
    more = replace(b200, peak_tflops={k: v * 1.25 if k.endswith("_tc") else v for k, v in b200.peak_tflops.items()})
    rows, p = _gemm_moe_grid(), _predictor()
    assert {"gemm", "moe"} <= set(p.manifest.get("residuals", {}))
    ref, new = p.predict(rows, b200)["pred_ms"], p.predict(rows, more)["pred_ms"]
    assert (new <= ref * 1.02).all(), (new / ref).max()
