"""MLA decode prior (`priors/mla.py`) and its use in serving's step cost."""
from __future__ import annotations

import dataclasses

import numpy as np

from hybridperf.devices import get_device
from hybridperf.priors import mla as M
from hybridperf.priors.attention import generation_attention_ms
from hybridperf.priors.memory import achievable_bandwidth
from hybridperf.serving.api import Worker, setup_cost
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.cost import Parallel
from hybridperf.serving.engines import get_engine

H100, B200, A100, RTX = (get_device(n) for n in ("h100_sxm", "b200_sxm", "a100_sxm", "rtx_pro_6000_server"))
DSV3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 61,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3, "vocab_size": 129280, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def test_native_kernels_need_datacenter_hopper_or_blackwell():
    assert M.native_mla(H100) and M.native_mla(B200)
    assert not M.native_mla(A100) and not M.native_mla(RTX)  # sm_120's 100 KB shared memory
    assert not M.native_mla(get_device("MI300X"))


def test_long_cache_reads_the_latent_once_at_the_fitted_bandwidth():
    c = M.CONSTANTS
    keys = 4e6
    t = float(M.mla_decode_ms(1, keys, 16, 512, 64, H100, "bf16"))
    bw = keys * 576 * 2 / ((t - c.overhead_ms.value) * 1e-3)  # bytes/s the prediction implies
    assert 0.95 < bw / (achievable_bandwidth(H100) * c.bw_share.value) < 1.05
    # fp8 latents halve the bytes of a memory-bound call; heads are free until the matrix rate binds
    fp8 = float(M.mla_decode_ms(1, keys, 16, 512, 64, H100, "fp8"))
    assert 0.45 < (fp8 - c.overhead_ms.value) / (t - c.overhead_ms.value) < 0.55
    assert np.isclose(M.mla_decode_ms(1, keys, 1, 512, 64, H100), M.mla_decode_ms(1, keys, 8, 512, 64, H100), rtol=1e-4)
    many = float(M.mla_decode_ms(1, keys, 128, 512, 64, H100, "fp8"))
    assert many > 1.5 * fp8  # 128 heads over fp8 latents (bf16 MMA on Hopper): compute-bound


def test_fp8_latents_use_fp8_mma_on_blackwell_only():
    def compute_bound(dev, kv):
        return float(M.mla_decode_ms(64, 65536, 128, 512, 64, dev, kv))
    assert compute_bound(B200, "fp8") < 0.6 * compute_bound(B200, "bf16")
    assert compute_bound(H100, "fp8") > 0.9 * compute_bound(H100, "bf16")


def test_other_gpus_keep_the_generic_decode_prior():
    got = M.mla_decode_ms(8, 4096, 16, 512, 64, A100, "bf16", "torch_flow")
    want = generation_attention_ms(8, 4096, 16, 1, 576, A100, kv_dtype="bf16", kernel_source="torch_flow")
    assert float(got) == float(want)
    # 128 query heads over one latent is no GQA group that TensorRT-LLM's XQA fallback would apply to
    wide = M.mla_decode_ms(8, 4096, 128, 512, 64, A100, "bf16", "torch_flow")
    assert float(wide) < 4 * float(got)


def test_serving_prices_mla_decode_with_the_mla_prior_and_prefill_values_at_their_width():
    arch = arch_from_dict(DSV3)
    wk = Worker(Parallel(tp=8, pp=1, adp=1, moe_tp=8, moe_ep=1), "fp8", "fp8", 1.0)
    eng = get_engine("trtllm")
    cost, _ = setup_cost(arch, B200, eng, wk, 1, 64, 1024, 256)
    per_key = float(M.mla_decode_ms(1, 1e6, 16, 512, 64, B200, "fp8")) / 1e6 * 61
    assert np.isclose(cost.decode_attn_ms(1e5, 64) / 1e5, per_key, rtol=1e-6)
    # MLA prefill: values 128 wide against 192-wide queries and keys; pricing them 192 wide costs more
    wide = dataclasses.replace(arch, v_head_dim=arch.head_dim)
    wide_cost, _ = setup_cost(wide, B200, eng, wk, 1, 64, 1024, 256)
    assert cost.prefill_attn_ms(4096, 0) < wide_cost.prefill_attn_ms(4096, 0)


def test_sparse_mla_pays_per_query_token_for_padded_heads():
    """DSA's sparse MLA (GLM-5, DeepSeek-V3.2): every query attends exactly top-k latents in CTAs of 64 heads, its
    heads padded to 64 on Hopper and 128 on Blackwell, in waves over the SMs; the context never enters."""
    kw = dict(kv_lora=512, rope=64, topk=2048)
    one = float(M.sparse_mla_ms(1, 64, device=B200, **kw))
    # a TP rank's 8 heads run as 128 on a B200: the same as 64 or 128 heads, less than 129
    assert [float(M.sparse_mla_ms(1, h, device=B200, **kw)) for h in (8, 64, 128)] == [one] * 3
    assert float(M.sparse_mla_ms(B200.num_sms, 129, device=B200, **kw)) > float(M.sparse_mla_ms(B200.num_sms, 128,
                                                                                              device=B200, **kw))
    # on the H100 8 heads pad to 64: half the CTAs of 128 heads, which fill a wave at half the tokens
    assert float(M.sparse_mla_ms(H100.num_sms, 8, device=H100, **kw)) < float(M.sparse_mla_ms(H100.num_sms, 128,
                                                                                            device=H100, **kw))
    # waves: up to one CTA per SM costs one wave; many tokens cost in proportion
    assert float(M.sparse_mla_ms(B200.num_sms // 2, 64, device=B200, **kw)) == one
    many = float(M.sparse_mla_ms(100 * B200.num_sms, 64, device=B200, **kw))
    assert 150 < many / one < 210
    # FlashMLA's FP8-cache kernel fills a 64-row tile with the heads there are: 8 heads a token, one CTA, not two
    n = B200.num_sms
    fp8_kernel = float(M.sparse_mla_ms(n, 8, device=B200, padded=False, **kw))
    assert fp8_kernel < float(M.sparse_mla_ms(n, 8, device=B200, **kw))
    # a GPU without the native kernels: the generic decode path over top-k latents per token
    assert np.isclose(M.sparse_mla_ms(16, 8, device=A100, **kw),
                      generation_attention_ms(16, 2048, 8, 1, 576, A100, xqa_fallback=False))
