"""experiments/kernels/aic_noise_floor.py: two harnesses timing one call give the rows' noise, a harness's
constant offset aside, and only pairs that run the same call count."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kernels.aic_noise_floor import pair_errors, same_call


def _gemms(sources: dict, noise_sd: float, seed: int = 0) -> pd.DataFrame:
    """bf16 GEMM rows of one H100 shape grid, one harness per (framework, version, kernel_source) key of
    `sources`, each timed as a smooth function x its offset x exp(noise)."""
    rng = np.random.default_rng(seed)
    shapes = [(m, n, k) for m in (1, 8, 64, 512, 4096) for n in (1024, 4096) for k in (2048, 8192)]
    out = []
    for (fw, ver, src), offset in sources.items():
        for m, n, k in shapes:
            t = 0.005 + 2.0 * m * n * k / 700e12 * 1e3
            out.append({"system": "h100_sxm", "op_name": "gemm", "framework": fw, "version": ver,
                        "kernel_source": src, "m": m, "n": n, "k": k, "gemm_dtype": "bfloat16",
                        "latency_ms": t * offset * np.exp(rng.normal(0.0, noise_sd))})
    return pd.DataFrame(out)


def test_a_harness_offset_is_not_noise_and_the_floor_follows_the_noise():
    two = {("VLLM", "0.24.0", "torch.nn.functional.linear"): 1.0, ("SGLang", "0.5.14", "sglang_torch_linear"): 1.3}
    quiet = pair_errors(_gemms(two, noise_sd=0.0)).iloc[0]
    assert quiet["pair"] == "cublas" and quiet["shapes"] == 20
    assert quiet["raw_mape"] > 20 and quiet["floor"] < 1e-9  # 30% apart everywhere: an offset, no noise
    floor = pair_errors(_gemms(two, noise_sd=0.1)).iloc[0]["floor"]
    assert 4.0 < floor < 14.0  # lognormal noise of sd 0.1 on each row: ~8% MAPE of one row


def test_only_pairs_that_run_one_call_count():
    assert same_call(("VLLM", "0.24.0", "torch.nn.functional.linear"), ("TRTLLM", "1.3.0rc20", "torch_flow"),
                     "gemm", "bfloat16") == "cublas"
    # two frameworks' fp8 GEMMs are two kernels
    assert same_call(("VLLM", "0.24.0", "CutlassFP8ScaledMMLinearKernel"),
                     ("SGLang", "0.5.14", "sglang_sgl_kernel_fp8_scaled_mm"), "gemm", "fp8") is None
    cutlass = "moe_torch_flow_cutlass"
    assert same_call(("TRTLLM", "1.3.0rc10", cutlass), ("TRTLLM", "1.3.0rc20", cutlass), "moe", "bfloat16") == "version"
    # SGLang's MoE collector timed other work before 0.5.14 (moe.WHOLE_TOKENS_BEFORE)
    assert same_call(("SGLang", "0.5.10", "sglang_fused_moe_triton"), ("SGLang", "0.5.14", "sglang_fused_moe_triton"),
                     "moe", "bfloat16") is None
    fp8 = _gemms({("VLLM", "0.24.0", "CutlassFP8ScaledMMLinearKernel"): 1.0,
                  ("SGLang", "0.5.14", "sglang_sgl_kernel_fp8_scaled_mm"): 1.0}, 0.05).assign(gemm_dtype="fp8")
    assert pair_errors(fp8).empty
