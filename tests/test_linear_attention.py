"""Linear-attention (gated delta rule) kernels: the prior, its fit, and serving's use of it."""
from dataclasses import replace
from itertools import product

import numpy as np
import pandas as pd
import pytest

from hybridperf.devices import get_device
from hybridperf.priors import linear_attention as L
from hybridperf.priors.attention import Fitted
from hybridperf.priors.memory import achievable_bandwidth

H100, B200 = get_device("h100_sxm"), get_device("b200_sxm")


def test_recurrence_reads_and_writes_each_state_from_dram_in_serving():
    c = L.TRITON
    state = 64 * 8 * 128 * 128 * L.STATE_BYTES
    want = c.recurrent_kcycles.value / H100.boost_clock_mhz \
        + 2 * state * c.recurrent_passes.value / achievable_bandwidth(H100) * 1e3
    assert float(L.recurrent_ms(64, 8, 128, 128, H100, c)) == pytest.approx(want)
    # a collector replaying one state finds it in L2 while it fits
    resident = float(L.recurrent_ms(4, 8, 128, 128, H100, c, resident=True))
    assert resident < float(L.recurrent_ms(4, 8, 128, 128, H100, c))


def test_chunked_rule_steps_chunk_by_chunk_and_fills_the_sms():
    c = replace(L.TRITON, chunk_flops=Fitted(0.0, "FLOPs", "test"))  # the chain alone
    one = float(L.chunk_ms(1, 64, 8, H100, c))
    # each further chunk adds one step; the first chunk's fill is paid once
    assert float(L.chunk_ms(1, 64 * 9, 8, H100, c)) - one == pytest.approx(8 * c.step_kcycles.value / 1980)
    assert float(L.chunk_ms(1, 32, 8, H100, c)) < one  # a partly filled chunk
    # (sequence, head) pairs beyond the SMs run in a second wave
    assert float(L.chunk_ms(H100.num_sms // 8, 4096, 8, H100, c)) < float(L.chunk_ms(H100.num_sms // 8 + 1, 4096, 8,
                                                                                       H100, c))
    full = L.TRITON  # with matrix work, more tokens and more heads never cost less
    t = [float(L.chunk_ms(1, n, h, B200, full)) for n, h in product((1, 64, 1000, 8192), (1, 8, 64))]
    assert all(np.isfinite(t)) and min(t) > 0
    assert np.all(np.diff(np.array(t).reshape(4, 3), axis=0) >= 0) and np.all(np.diff(np.array(t).reshape(4, 3)) >= 0)


def test_engines_chunked_rule_family():
    assert L.family("vllm", H100) == L.family("vllm", B200) == "flashinfer"
    assert L.family("vllm", get_device("a100_sxm")) == L.family("sglang", H100) == L.family("trtllm", B200) == "triton"
    assert set(L.SHIPPED) == {"triton", "flashinfer"}


def test_fit_recovers_the_constants_of_rows_it_made():
    """Rows priced with known constants on two GPUs: `gdn_kernels.fit_all` finds constants that price them again."""
    from experiments.kernels import gdn_kernels as G

    rows = []
    for system, kernel, b, s, vh in product(("h100_sxm", "b200_sxm"), ("conv", "conv_update", "recurrent", "chunk"),
                                            (1, 16, 256), (1, 256, 4096), (4, 32)):
        if kernel != "chunk" and kernel != "conv" and s > 1:
            continue
        rows.append(dict(system=system, fw="sglang", kernel=kernel, family="triton", batch_size=b, seq_len=s,
                         num_k_heads=vh // 4, num_v_heads=vh, head_k_dim=128, head_v_dim=128))
    df = pd.DataFrame(rows)
    df["channels"] = 2 * df["num_k_heads"] * df["head_k_dim"] + df["num_v_heads"] * df["head_v_dim"]
    truth = L.TRITON
    df["latency"] = G.predict(df, truth)
    fitted = G.fit_all(df)
    assert np.allclose(G.predict(df, fitted["triton"]), df["latency"], rtol=0.01)
    assert fitted["flashinfer"] is fitted["triton"]  # no FlashInfer rows: Triton's constants
    assert "b200_sxm, h100_sxm" in fitted["triton"].chunk_flops.source


def test_serving_prices_each_linear_layer_s_kernels():
    from hybridperf.serving.api import Worker, setup_cost
    from hybridperf.serving.arch import arch_from_dict
    from hybridperf.serving.cost import Parallel
    from hybridperf.serving.engines import get_engine

    types = (["linear_attention"] * 3 + ["full_attention"]) * 2
    a = arch_from_dict({"model_type": "qwen3_5_text", "hidden_size": 2048, "num_hidden_layers": 8,
                        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 1000,
                        "intermediate_size": 4096, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "layer_types": types})
    assert a.linear_conv_channels() == 2 * 16 * 128 + 32 * 128

    def cost_of(engine, par, device=H100):
        return setup_cost(a, device, get_engine(engine), Worker(par), 8192, 8, 1024, 128)[0]

    for engine, fam in (("sglang", "triton"), ("vllm", "flashinfer")):
        cost = cost_of(engine, Parallel(tp=2))
        assert cost.linear is L.SHIPPED[fam]
        one = cost.prefill_linear_ms([1000])
        # an iteration's chunks run in one launch per kernel: eight cost more than one, less than eight launches
        assert one < cost.prefill_linear_ms([1000] * 8) < 8 * one
        assert cost.prefill_linear_ms([1000, 200]) < cost.prefill_linear_ms([1000, 1000])
        assert cost.prefill_linear_ms([]) == 0.0
        # pipeline stages split the layers
        assert cost_of(engine, Parallel(tp=2, pp=2)).prefill_linear_ms([1000]) == pytest.approx(one / 2)
        # verifying drafts writes a state per query token: the extra writes at DRAM speed, the conv's tokens
        extra = cost._linear_decode_ms(64, 4) - cost._linear_decode_ms(64, 1)
        state = 64 * 16 * 128 * 128 * L.STATE_BYTES * cost.linear.recurrent_passes.value
        conv = 64 * 3 * a.linear_conv_channels() / 2 * cost.linear.update_bytes.value
        assert extra == pytest.approx(6 * (3 * state + conv) / achievable_bandwidth(H100) * 1e3)
    # FlashInfer's kernel only on Hopper's and data-center Blackwell's kernel architecture
    assert cost_of("vllm", Parallel(tp=2), get_device("rtx_pro_6000")).linear is L.TRITON
    dense = arch_from_dict({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 4,
                            "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 1000,
                            "intermediate_size": 4096})
    dense_cost = setup_cost(dense, H100, get_engine("vllm"), Worker(Parallel()), 8192, 8, 1024, 128)[0]
    assert dense_cost.prefill_linear_ms([1000]) == 0.0 and dense_cost._linear_decode_ms(8, 1) == 0.0


def test_mixed_chunks_share_the_longest_chain():
    """Short chunks beside a long one ride its chain on other SMs (one wave), adding only their work."""
    mixed = L.prefill_layer_ms([8192] + [64] * 40, 4096, 16, H100)
    alone = L.prefill_layer_ms([8192], 4096, 16, H100)
    assert alone < mixed < alone + L.prefill_layer_ms([64] * 40, 4096, 16, H100)
    c = replace(L.TRITON, chunk_flops=Fitted(0.0, "FLOPs", "test"), conv_bytes=Fitted(0.0, "bytes", "test"))
    assert L.prefill_layer_ms([8192] + [64] * 40, 4096, 16, H100, c) == pytest.approx(
        L.prefill_layer_ms([8192], 4096, 16, H100, c))
    assert float(L.chunk_ms(4, 1000, 16, H100)) == pytest.approx(L.prefill_layer_ms([1000] * 4, 0, 16, H100)
                                                              - float(L.conv_ms(4000, 0, H100)))


def test_tensor_parallel_must_split_the_delta_rule_s_key_heads():
    """The engines shard a GatedDeltaNet layer's key heads over TP (`num_k_heads // tp_size`); Mamba-2's groups
    they may replicate, so those are not checked."""
    from hybridperf.errors import InputError
    from hybridperf.serving.arch import arch_from_dict
    from hybridperf.serving.cost import Parallel

    a = arch_from_dict({"model_type": "qwen3_5_text", "hidden_size": 2048, "num_hidden_layers": 4,
                        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000,
                        "intermediate_size": 4096, "linear_num_key_heads": 8, "linear_num_value_heads": 32,
                        "layer_types": ["linear_attention"] * 3 + ["full_attention"]})
    assert a.sharded_linear_heads == 8
    Parallel(tp=8).check(a)
    with pytest.raises(InputError, match="8 linear-attention key heads do not split 16 ways"):
        Parallel(tp=16).check(a)
    assert replace(a, family="nemotron_h").sharded_linear_heads == 0
