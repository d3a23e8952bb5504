"""DeepSeek-V4's attention module as serving prices it (`hybridperf.serving.compressed`) and the experiment that fits
its constants leave-one-GPU-out (`experiments/kernels/dsv4_attention.py`), on a small synthetic model."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from experiments.kernels import dsv4_attention as E
from hybridperf.devices import get_device
from hybridperf.priors.attention import Fitted
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.compressed import MODULE_CONSTANTS, CompressedAttention, CompressedConstants
from hybridperf.serving.cost import kernel_floor_ms

V4 = {"model_type": "deepseek_v4", "hidden_size": 1024, "num_hidden_layers": 4, "vocab_size": 1000,
      "num_attention_heads": 64, "head_dim": 512, "q_lora_rank": 256, "o_groups": 8, "o_lora_rank": 128,
      "index_n_heads": 8, "index_head_dim": 64, "index_topk": 512, "sliding_window": 128, "hc_mult": 4,
      "compress_ratios": [0, 4, 128, 4, 0], "n_routed_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 256, "n_shared_experts": 1}
B200 = get_device("b200_sxm")


def test_a_small_decode_step_pays_the_modules_kernels():
    c = arch_from_dict(V4).compressed
    floor = kernel_floor_ms(B200)
    one = float(c.module_ms(1, 1024, 8, B200, floor))
    # 2 CSA layers' kernels, 2 other layers' (a window-only layer counts as HCA) at the floor, plus one token's passes
    kernels = (2 * MODULE_CONSTANTS.csa_kernels.value + 2 * MODULE_CONSTANTS.hca_kernels.value) * floor
    assert kernels < one < 1.01 * kernels
    assert float(c.module_ms(4096, 1024, 8, B200, floor)) > 2 * one  # the passes grow with the tokens
    # a TP rank's 8 of 64 heads still fill FlashMLA's 64-head tile: fewer heads, fewer query passes only
    assert float(c.module_ms(4096, 1024, 8, B200, floor)) < float(c.module_ms(4096, 1024, 64, B200, floor))
    tile = CompressedConstants(*(Fitted(float(f == "tile_passes"), "", "") for f in E.PARAMS))
    assert [float(c.module_ms(4096, 1024, h, B200, 0.0, tile)) for h in (8, 65)] == pytest.approx(
        [float(c.module_ms(4096, 1024, 64, B200, 0.0, tile)) * k for k in (1, 2)])  # 65 heads: two tiles


def test_decode_attention_reads_the_attended_entries_and_selects_past_top_k():
    c = arch_from_dict(V4).compressed
    assert float(c.layer_entries(4, 100)) == 100 + 25  # the window holds all 100, the compressed entries 25
    assert float(c.layer_entries(4, 1 << 20)) == 128 + 512  # CSA: window + the indexer's top-k
    assert float(c.layer_entries(128, 1 << 20)) == 128 + (1 << 20) / 128  # HCA: every compressed entry
    step = {ctx: c.decode_ms(8 * ctx, 8, 8, B200, "fp8", None) for ctx in (1024, 2048, 2052, 65536)}
    assert 0 < step[1024] < step[2048] < step[2052] < step[65536]
    # once a query's row holds more than top-k compressed entries (4 x 512 keys) the indexer selects: a row's
    # latency, not the few more keys' reads
    assert step[2052] - step[2048] > 10 * (step[2048] - step[1024]) / 1024 * 4
    # three query tokens a sequence (two drafts verified) over the same cache: more attention and index work
    assert c.decode_ms(8 * 4096, 8, 8, B200, "fp8", None, queries=3) > c.decode_ms(8 * 4096, 8, 8, B200, "fp8", None)
    # ... but no row selects before it holds more than 4 x top-k keys: the drafts' rows hold fewer than the last's
    edge = [c.decode_ms(8 * 2048, 8, 8, B200, "fp8", None, queries=q) for q in (1, 3)]
    assert edge[1] - edge[0] < 0.2 * (step[2052] - step[2048])


def test_serving_step_carries_the_module_and_the_drafts(monkeypatch):
    from hybridperf.serving.api import Worker, setup_cost
    from hybridperf.serving.cost import Parallel
    from hybridperf.serving.engines import get_engine

    arch = arch_from_dict(V4)

    def step():
        return setup_cost(arch, B200, get_engine("sglang"), Worker(Parallel(), "fp8", "fp8", 1.0), 4096, 8, 4096,
                          64)[0]

    cost = step()
    module = float(arch.compressed.module_ms(1, arch.hidden, arch.heads, B200, kernel_floor_ms(B200)))
    monkeypatch.setattr(CompressedAttention, "module_ms", lambda self, n, *a, **k: np.zeros_like(n, dtype=float))
    assert cost.tokens_ms(1) - step().tokens_ms(1) == pytest.approx(module, rel=1e-3)  # in the token-count part
    assert cost.decode_attn_ms(8 * 4096, 8, queries=3) > cost.decode_attn_ms(8 * 4096, 8)


def test_one_launch_for_many_sequences_prefill_beats_one_each():
    c = arch_from_dict(V4).compressed
    one = c.prefill_ms(64, 4096, 8, B200, "fp8", None)
    many = c.prefill_ms(64, 4096, 8, B200, "fp8", None, seqs=32)
    assert one < many < 32 * one


def _geo():
    """Two geometries, as Flash and Pro: a wider model with twice the heads fills two query tiles at TP 1."""
    out = {}
    for key, cfg in (("flash", V4), ("pro", {**V4, "hidden_size": 2048, "num_attention_heads": 128})):
        arch = arch_from_dict(cfg)
        out.update({(key, r): (replace(arch.compressed, ratios=(r,)), arch) for r in (4, 128)})
    return out


def test_the_fit_recovers_constants_that_made_the_table():
    """Latencies made by the pricing with known constants: the experiment's fit finds them again."""
    grid = [(s, m, r, tp, b, step) for s in ("h100_sxm", "b200_sxm") for m in ("flash", "pro") for r in (4, 128)
            for tp in (1, 8) for b in (1, 8, 64, 512) for step in (16, 1024, 8192)]
    df = pd.DataFrame(grid, columns=["system", "model_key", "compress_ratio", "tp_size", "batch_size", "step"])
    df = df.assign(gemm_type="fp8_block", isl=1)
    truth = CompressedConstants(*(Fitted(v, "", "") for v in (28.0, 15.0, 6.0, 2.0, 12.0)))
    comp = E.components(df, _geo(), E.dsa_attention.M.SPARSE_CONSTANTS, True)
    df["latency"] = E.prediction(comp, truth)
    got = E.fit(df, comp, "synthetic")
    for name in E.PARAMS:
        assert getattr(got, name).value == pytest.approx(getattr(truth, name).value, rel=0.02)
    assert got.csa_kernels.source == "synthetic" and got.csa_kernels.script == E.SCRIPT
    assert np.all(comp["old"] > 0) and np.all(comp["old"] < df["latency"])  # before: no kernels, no passes


def test_hyper_connections_floors_are_read_off_the_other_systems():
    """A layer's mHC at K floors on every system: each held-out system reads K off the others, and a few tokens are
    priced at K floors where the plain layer's elementwise kernels would take ELEMENTWISE_KERNELS."""
    rows = [(s, "sglang", 4096, 4, n) for s in ("h100_sxm", "b200_sxm", "l40s") for n in (1, 4, 16)]
    d = pd.DataFrame(rows, columns=["system", "fw", "hidden_size", "hc_mult", "num_tokens"])
    d["latency"] = [14.0 * kernel_floor_ms(get_device(s)) for s in d["system"]]
    cells, fits = E.evaluate_mhc(d)
    assert fits == pytest.approx({"b200_sxm": 14.0, "h100_sxm": 14.0, "l40s": 14.0})
    assert np.allclose(cells["mape"], 0.0, atol=1e-6) and np.all(cells["before_mape"] > 70)
