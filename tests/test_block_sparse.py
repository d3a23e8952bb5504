"""MiniMax-M3's block-sparse attention (MSA) in serving: dense first layers, capped sparse layers, index scans."""
from dataclasses import replace

import pytest

from hybridperf.devices import get_device
from hybridperf.priors.memory import achievable_bandwidth
from hybridperf.serving.api import Worker, setup_cost
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.cost import Parallel, kernel_floor_ms
from hybridperf.serving.engines import get_engine

M3 = {"model_type": "minimax_m3", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 1000, "intermediate_size": 512,
      "dense_intermediate_size": 2048, "moe_intermediate_size": 512, "num_local_experts": 8, "num_experts_per_tok": 2,
      "first_k_dense_replace": 2, "n_shared_experts": 1, "shared_intermediate_size": 512,
      "sparse_attention_config": {"use_sparse_attention": True, "sparse_attention_freq": [0, 0] + [1] * 6,
                                  "sparse_block_size": 128, "sparse_topk_blocks": 16, "sparse_local_block": 1,
                                  "sparse_num_index_heads": 4, "sparse_index_dim": 128}}
B200 = get_device("b200_sxm")


def _cost(arch):
    return setup_cost(arch, B200, get_engine("vllm"), Worker(Parallel()), 16384, 8, 1024, 128)[0]


def test_msa_reads_the_arch_of_its_config():
    a = arch_from_dict(M3, "m3")
    bs = a.block_sparse
    assert (bs.dense_layers, bs.sparse_layers, bs.index_heads, bs.index_dim, bs.attended) == (2, 6, 4, 128, 2176)
    assert a.max_keys == 2176 and a.index_bytes_per_token() == 6 * 128 * 2.0
    assert a.params()["index"] == 6 * 5 * 128 * 1024


def test_decode_grows_with_every_cached_key_past_the_attended_ones():
    """Past 2,176 keys a sequence, the sparse layers' attention stops growing, but their index scans read every
    cached index key (256 bytes a key and layer) and the dense layers every cached key; before, nothing grew."""
    a = arch_from_dict(M3, "m3")
    now, before = _cost(a), _cost(replace(a, block_sparse=None))
    seqs, k1, k2 = 64, 64 * 50_000, 64 * 100_000
    per_key = now._kv_ms[0] / a.full_layers  # one layer's attention per cached key (one stage)
    want = (2 * per_key + 6 * 128 * 2.0 / achievable_bandwidth(B200) * 1e3) * (k2 - k1)
    assert now.decode_attn_ms(k2, seqs) - now.decode_attn_ms(k1, seqs) == pytest.approx(want, rel=0.01)
    assert before.decode_attn_ms(k2, seqs) == pytest.approx(before.decode_attn_ms(k1, seqs))
    # a short context is the attention's alone, each sparse layer's scan at the kernel floor
    short = now.decode_attn_ms(64 * 100, seqs) - before.decode_attn_ms(64 * 100, seqs)
    assert short == pytest.approx(6 * kernel_floor_ms(B200), rel=0.05)


def test_prefill_scores_every_earlier_key_and_dense_layers_attend_them():
    a = arch_from_dict(M3, "m3")
    now, before = _cost(a), _cost(replace(a, block_sparse=None))
    assert now.prefill_attn_ms(2048, 0) > before.prefill_attn_ms(2048, 0)
    extra = [now.prefill_attn_ms(2048, p) - before.prefill_attn_ms(2048, p) for p in (0, 30_000, 60_000)]
    assert extra[0] < extra[1] < extra[2]  # grows with the prefix the chunk's queries score and attend
