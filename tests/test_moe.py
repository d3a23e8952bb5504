"""Top-k mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE): graph, launches per device, memory."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybridperf.devices import get_device
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config, predict_model
from hybridperf.graphs.compose import LOOP_LAUNCH_MS, composition_params, predict_table, predictor_kind
from hybridperf.graphs.grouped import launch_grouped_gemms, native_loop, one_grouped_kernel
from hybridperf.graphs.primitives import expert_groups
from hybridperf.predictor import Predictor

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512, "num_hidden_layers": 2}
MOE = {"mixtral": {"model_type": "mixtral", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
       "qwen2_moe": {"model_type": "qwen2_moe", **SMALL, "num_experts": 4, "num_experts_per_tok": 2,
                     "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96},
       "qwen3_moe": {"model_type": "qwen3_moe", **SMALL, "num_experts": 4, "num_experts_per_tok": 2,
                     "moe_intermediate_size": 32, "norm_topk_prob": True},
       "gpt_oss": {"model_type": "gpt_oss", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
       "olmoe": {"model_type": "olmoe", **SMALL, "intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2},
       "minimax_m2": {"model_type": "minimax_m2", **SMALL, "intermediate_size": 32, "num_local_experts": 4,
                      "num_experts_per_tok": 2, "rotary_dim": 8}}
H100, A100, V100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-PCIE-32GB"


def _per_layer(cfg, mode, dtype="fp32", batch=2, seq=8):
    """Kernels per layer, without the key/value cache a forward fills by default (the traces ran without)."""
    n = [int(build_graph({**cfg, "num_hidden_layers": k, "use_cache": False}, batch, seq, mode,
                         dtype=dtype).kernel_table()["count"].sum()) for k in (2, 3)]
    return n[1] - n[0]


@pytest.mark.parametrize("family,inf,decode_fp32,decode_bf16", [("mixtral", 58, 58, 66), ("qwen2_moe", 65, 65, 73),
                                                                ("qwen3_moe", 70, 70, 82), ("gpt_oss", 71, 72, 76),
                                                                ("olmoe", 68, 68, 80), ("minimax_m2", 73, 74, 86)])
def test_moe_layers_launch_what_hf_eager_launches(family, inf, decode_fp32, decode_bf16):
    """Kernels per layer as TorchDispatchMode counts them on HF eager models (transformers 5.23, grouped_mm
    experts; `experiments/gpu/graph_trace.py` and `experiments/gpu/decode_trace.py`): a forward of 2 x 8 tokens,
    and one decode step of 2 new tokens in fp32 and bf16 (Mixtral casts the router logits up and the
    fp32-weighted expert sum back down; Qwen casts the k weights down)."""
    cfg = MOE[family]
    assert _per_layer(cfg, "inf") == inf
    assert _per_layer(cfg, "decode") == decode_fp32
    assert _per_layer(cfg, "decode", "bf16") == decode_bf16


def test_moe_config_fields_and_sparse_layers():
    c = load_config(MOE["qwen2_moe"])
    assert (c.num_experts, c.experts_per_token, c.expert_ffn, c.shared_ffn) == (4, 2, 32, 96)
    assert c.sparse_layers == 2 and c.token_ffn == 2 * 32 + 96
    m = load_config(MOE["mixtral"])
    assert (m.num_experts, m.experts_per_token, m.expert_ffn, m.shared_ffn) == (4, 2, 128, 0)
    # HF's rule: layer i is sparse unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
    mixed = load_config({**MOE["qwen3_moe"], "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    assert mixed.sparse_layers == 2  # layers 1 and 5
    g = build_graph(mixed, 2, 8, "inf")
    assert [(b.name, b.count) for b in g.blocks if b.kind == "layer"] == [("layer", 2), ("dense_layer", 4)]
    # MixtralConfig has no such keys: HF makes every Mixtral layer sparse whatever a config says
    assert load_config({**MOE["mixtral"], "decoder_sparse_step": 2, "mlp_only_layers": [0]}).sparse_layers == 2
    for bad in ({"num_experts_per_tok": 8}, {"mlp_only_layers": "all"}, {"num_experts": 0}):
        with pytest.raises(InputError):
            load_config({**MOE["qwen3_moe"], **bad})


def test_expert_groups_under_balanced_routing():
    assert expert_groups(8, 2, 1) == (2, 1)  # a decode step of one token: its two experts, one row each
    assert expert_groups(128, 8, 1) == (8, 1)
    groups, rows = expert_groups(8, 2, 4096)
    assert groups == 8 and rows == 1024
    groups, rows = expert_groups(128, 8, 4)  # 32 pairs, some experts picked twice
    assert 28 <= groups < 32 and groups * rows >= 32


def test_grouped_gemm_is_one_kernel_only_for_bf16_on_hopper_class_devices():
    assert one_grouped_kernel(get_device(H100), "bf16")
    assert not one_grouped_kernel(get_device(H100), "fp16") and not one_grouped_kernel(get_device(A100), "bf16")
    assert not any(one_grouped_kernel(get_device(f"AMD Instinct {g}"), "bf16") for g in ("MI300X", "MI355X"))
    tab = build_graph({**MOE["mixtral"], "hidden_size": 256, "intermediate_size": 512}, 4, 256, "train",
                      dtype="bf16").kernel_table()
    grouped = tab[tab["grouped"]]
    assert len(grouped) == 2 * 3  # gate/up and down, each with its two gradients
    assert (grouped["op"] == "bmm").all()
    same = launch_grouped_gemms(tab, get_device(H100))
    assert same.equals(tab)
    loop = launch_grouped_gemms(tab, get_device(A100))
    looped = loop[tab["grouped"].to_numpy()]
    assert (looped["op"] == "linear").all() and (looped["B"] == 1).all()
    assert (looped["count"].to_numpy() == grouped["count"].to_numpy() * grouped["B"].to_numpy()).all()
    def flops(t):
        return float((t["B"] * t["M"] * t["N"] * t["K"] * t["count"]).sum())

    assert flops(looped) == flops(grouped)  # the same GEMMs, launched per expert
    # the predicted table launches what the device runs
    prior = Predictor.prior_only()
    assert (predict_table(tab, get_device(A100), prior).loc[tab["grouped"].to_numpy(), "op"] == "linear").all()


@pytest.mark.parametrize("device,native", [(H100, True), (A100, True), (V100, False)])
def test_fallback_gemms_of_atens_loop_cost_their_device_time_only(device, native):
    """fp32 experts run PyTorch's grouped-GEMM fallback: ATen launches one GEMM per expert from C++, with no
    eager dispatch gap or host floor each; below sm80 transformers loops in Python and each GEMM pays both."""
    cfg = {**MOE["qwen3_moe"], "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 128,
           "hidden_size": 256}
    k = predict_model(cfg, 4, 64, "inf", device, predictor=Predictor.prior_only(), dtype="fp32").kernels
    loop = (k["name"].str.startswith("experts.") & (k["op"] == "linear")).to_numpy()
    assert loop.sum() == 2 and (native_loop(k)[loop] == native).all() and not native_loop(k)[~loop].any()
    assert (k.loc[loop, "count"] == 2 * 16).all()  # 2 layers x one GEMM per expert (256 x 4 pairs hit all 16)
    scale = composition_params(predictor_kind(Predictor.prior_only()), "inf")["scale"]
    device_ms = scale * np.maximum(k["pred_ms"] - k["floor_ms"], 0.0).to_numpy()[loop]
    if native:
        assert k.loc[loop, "t_ms"].to_numpy() == pytest.approx(np.maximum(device_ms, LOOP_LAUNCH_MS))
    else:
        assert (k.loc[loop, "t_ms"].to_numpy() > device_ms + 0.001).all()


def test_moe_predicts_and_experts_cost_what_their_tokens_do():
    prior = Predictor.prior_only()
    cfg = {**MOE["mixtral"], "hidden_size": 1024, "intermediate_size": 4096, "num_local_experts": 8}
    for mode in ("inf", "train", "decode"):
        r = predict_model(cfg, 2, 256, mode, H100, predictor=prior, dtype="bf16", attn="eager")
        assert np.isfinite(r.ms) and r.lo_ms < r.ms < r.hi_ms
    # top-2 of 8 experts: more expert GEMM work than a dense MLP of the expert's width, far less than 8 of them
    dense = {**cfg, "model_type": "mistral"}
    moe_ms = predict_model(cfg, 8, 512, "inf", H100, predictor=prior, dtype="bf16", attn="eager").ms
    dense_ms = predict_model(dense, 8, 512, "inf", H100, predictor=prior, dtype="bf16", attn="eager").ms
    wide_ms = predict_model({**dense, "intermediate_size": 8 * 4096}, 8, 512, "inf", H100, predictor=prior,
                            dtype="bf16", attn="eager").ms
    assert dense_ms < moe_ms < wide_ms
    with pytest.raises(InputError, match="dp only"):
        from hybridperf.graphs.parallel import predict_parallel

        predict_parallel(cfg, 4, 64, "train", "DGX-H100", tp=2)


def test_inference_memory_counts_expert_weights_once():
    """The experts' weights are weights: the largest op's live tensors are the grouped GEMM's tokens only."""
    cfg = Path(__file__).resolve().parents[1] / "examples" / "configs" / "mixtral_8x7b.json"
    mem = build_graph(cfg, 1, 16, "inf", dtype="bf16").memory()
    assert mem.weights == pytest.approx(46.70e9 * 2 / 1e9, rel=0.01)  # Mixtral-8x7B's 46.7B parameters
    assert mem.activations < 0.1  # GB: a 16-token forward's cache and largest op, not 8 experts' 1.9 GB


@pytest.mark.parametrize("family,extra,hidden,ffn,batch,seq,dtype_bytes,counted", [
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}, 128, 256, 2, 64, 4, 2113056),
    ("mixtral", {"num_local_experts": 32, "num_experts_per_tok": 4}, 256, 512, 4, 32, 2, 3544704),
    ("qwen3_moe", {"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 64}, 192, 384, 1, 128, 4,
     2983488),
    ("qwen2_moe", {"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 256}, 256, 512, 4, 32, 2, 2025792),
    ("gpt_oss", {"num_local_experts": 16, "num_experts_per_tok": 4, "sliding_window": 32}, 192, 192, 2, 64, 4, 4684864),
    ("deepseek_v3", {"n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
                     "moe_intermediate_size": 64, "q_lora_rank": 96, "kv_lora_rank": 64, "qk_rope_head_dim": 16,
                     "qk_nope_head_dim": 32, "v_head_dim": 32, "first_k_dense_replace": 1},
     192, 384, 2, 64, 2, 1792576),
    ("gpt_oss", {"num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 16}, 256, 128, 4, 32, 4, 2837536),
])
def test_moe_saved_activations_match_the_cpu_autograd_counts(family, extra, hidden, ffn, batch, seq, dtype_bytes,
                                                             counted):
    """Bytes one MoE layer saves for backward against the saved-tensor-hook count of the same layer on the
    CPU (`python -m experiments.models.activation_memory --moe`; a 3-layer minus a 2-layer model)."""
    cfg = {"model_type": family, "hidden_size": hidden, "intermediate_size": ffn, "num_attention_heads": 4,
           "num_key_value_heads": 4, "head_dim": hidden // 4, "vocab_size": 1000, "max_position_embeddings": 512,
           **extra}
    dtype = "fp32" if dtype_bytes == 4 else "bf16"
    per_layer = [build_graph({**cfg, "num_hidden_layers": n}, batch, seq, "train", dtype).memory().activations
                 for n in (2, 3)]
    assert (per_layer[1] - per_layer[0]) * 1e9 == pytest.approx(counted, rel=0.01)


#: a small DeepSeek-V3 (multi-head latent attention, group-limited sigmoid routing, a shared expert)
DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 512, "q_lora_rank": 32,
            "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
            "moe_intermediate_size": 32, "first_k_dense_replace": 1, "num_hidden_layers": 2}


@pytest.mark.parametrize("family,train_fp32,train_bf16", [("mixtral", 169, 186), ("qwen2_moe", 196, 212),
                                                          ("qwen3_moe", 211, 235), ("gpt_oss", 213, 223),
                                                          ("olmoe", 201, 225), ("minimax_m2", 224, 249)])
def test_moe_training_layers_launch_what_hf_eager_launches(family, train_fp32, train_bf16):
    """A training step that accumulates into `.grad` (TorchDispatchMode, `experiments/gpu/graph_trace.py`): the
    broadcast division and product of the routing weights sum their gradients, and Mixtral's fp32 expert
    outputs hand their bf16 inputs an fp32 gradient (one cast)."""
    assert _per_layer(MOE[family], "train") == train_fp32
    assert _per_layer(MOE[family], "train", "bf16") == train_bf16


@pytest.mark.parametrize("extra,inf,train,decode", [({}, 95, 266, 96), ({"rope_interleave": False}, 91, 256, None),
                                                    ({"q_lora_rank": None}, 88, 241, None)])
def test_deepseek_v3_layers_launch_what_hf_eager_launches(extra, inf, train, decode):
    """Kernels per MoE layer of HF eager DeepseekV3ForCausalLM (transformers 5.23; `experiments/gpu/graph_trace.py`,
    `decode_trace.py`, fp32): latent attention with interleaved RoPE (or rotate_half), with or without the
    low-rank query, the router's 17 kernels, grouped experts and the shared expert. bf16 adds the norms',
    softmax's and router's casts (108, 293, 109 with the defaults)."""
    cfg = {**DEEPSEEK, **extra}
    assert _per_layer(cfg, "inf") == inf and _per_layer(cfg, "train") == train
    if decode:
        assert _per_layer(cfg, "decode") == decode
        assert (_per_layer(cfg, "inf", "bf16"), _per_layer(cfg, "train", "bf16"), _per_layer(cfg, "decode", "bf16")) \
            == (108, 293, 109)
    # one expert group (Kimi-K2, GLM-4.7-Flash): the group mask's expand is a view, one kernel fewer (traced: 94)
    assert _per_layer({**cfg, "n_group": 1, "topk_group": 1}, "inf") == inf - 1
    # the first `first_k_dense_replace` layers keep a dense MLP (Llama's)
    g = build_graph({**cfg, "num_hidden_layers": 4}, 2, 8, "inf")
    assert [(b.name, b.count) for b in g.blocks if b.kind == "layer"] == [("layer", 3), ("dense_layer", 1)]


def test_deepseek_v3_latent_attention_shapes_cache_and_config():
    c = load_config(DEEPSEEK)
    assert (c.head_dim, c.num_experts, c.expert_ffn, c.shared_ffn, c.sparse_layers) == (24, 8, 32, 32, 1)
    t = build_graph(DEEPSEEK, 2, 8, "inf").kernel_table().query("block == 'layer'").set_index("name")
    assert t.loc["kv_b_proj", ["M", "N", "K"]].tolist() == [16, 16, 4 * 32]  # latent -> every head's k_nope and v
    assert t.loc["attn.qk", ["B", "N"]].tolist() == [8, 24] and t.loc["attn.av", "K"] == 16
    # a decode step re-expands the whole latent cache; the cache is the latent and the rotary key per token
    d = build_graph(DEEPSEEK, 2, 100, "decode").kernel_table().query("block == 'layer'").set_index("name")
    assert d.loc["kv_b_proj", "M"] == 2 * 101
    g = build_graph(DEEPSEEK, 2, 100, "decode")
    assert g._kv_cache_bytes() == 2 * 2 * 101 * (16 + 8) * 4  # batch x layers x tokens x (latent + rotary key)
    defaults = load_config({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                            "num_attention_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280})
    assert (defaults.num_experts, defaults.experts_per_token, defaults.sparse_layers, defaults.head_dim) == \
        (256, 8, 58, 192)
    for bad in ({"n_group": 3}, {"topk_group": 4}, {"kv_lora_rank": 0}, {"num_experts_per_tok": 5}):
        with pytest.raises(InputError):
            load_config({**DEEPSEEK, **bad})
    with pytest.raises(InputError, match="dp only"):
        from hybridperf.graphs.parallel import predict_parallel

        predict_parallel(DEEPSEEK, 4, 64, "train", "DGX-H100", tp=2)


def test_gpt_oss_sinks_biases_and_sliding_layers():
    """GPT-OSS: attention with a sink logit per head (softmax over kv + 1, in the model dtype), biased
    projections and experts, a clamped SwiGLU on the experts' even and odd columns, and sliding layers (128
    keys) alternating with full ones, whose decode step attends to its window only."""
    cfg = load_config(MOE["gpt_oss"])
    assert (cfg.sparse_layers, cfg.sliding_window, cfg.layer_types) == (2, 128, ("sliding_attention", "full_attention"))
    t = build_graph(MOE["gpt_oss"], 2, 8, "inf", dtype="bf16").kernel_table().set_index("name")
    assert t.loc["attn.softmax", ["H", "dtype"]].tolist() == [9, "bf16"]  # 8 keys and the sink
    assert t.loc["o_proj", "op"] == "linear" and "attn.softmax_in" not in t.index
    assert {"experts.gate_up_bias_add", "experts.up_clamp", "experts.down_bias_add"} <= set(t.index)
    d = build_graph(MOE["gpt_oss"], 2, 400, "decode").kernel_table()
    qk = d[d["name"] == "attn.qk"].set_index("block")
    assert (qk.loc["sliding_layer", "K"], qk.loc["layer", "K"]) == (128, 401)
    with pytest.raises(InputError, match="dp only"):
        from hybridperf.graphs.parallel import predict_parallel

        predict_parallel(MOE["gpt_oss"], 4, 64, "train", "DGX-H100", tp=2)


def test_gpt_oss_sink_attention_runs_unvectorised_kernels():
    """The sink's concatenation (an expanded, strided input) always takes PyTorch's unvectorised path; the softmax
    over kv + 1 keys does when a row is longer than 1,024 and not a whole number of 16-byte vectors, and so
    does its backward (1.5x its bytes). Their time is bound by SMs x clock unless DRAM is slower."""
    from hybridperf.graphs.layers.attention_core import row_softmax
    from hybridperf.graphs.misc import STRIDED_ACCESSES_PER_SM_CYCLE, misc_latency_ms
    from hybridperf.priors.memory import memory_time_ms

    t = build_graph({**MOE["gpt_oss"], "max_position_embeddings": 4096}, 2, 2048, "train", dtype="bf16").kernel_table()
    full = t[t["block"] == "layer"].set_index("name")
    assert full.loc["attn.sink_cat", "op"] == "misc:strided"
    assert full.loc["attn.softmax", "op"] == "misc:strided"  # 2,049 wide
    assert full.loc["attn.softmax.bw", "nbytes"] == pytest.approx(1.5 * full.loc["attn.softmax", "nbytes"])
    widths = (1023, 1537, 2048, 4096, 10000, 10001)
    paths = {w: (row_softmax("s", 4, w)["op"], row_softmax("s", 4, w)["tag"]) for w in widths}
    assert paths == {1023: ("softmax", ""), 1537: ("softmax", "strided_softmax_bw"), 2048: ("softmax", ""),
                     4096: ("misc:strided", "strided_softmax_fw"), 10000: ("softmax", ""),
                     10001: ("misc:strided", "strided_softmax")}  # PyTorch's forward and backward dispatch
    assert row_softmax("s", 4, 10004, fp32=True)["op"] == "softmax" and row_softmax("s", 4, 10004)["op"] != "softmax"
    h100, l40s = get_device("NVIDIA H100 80GB HBM3"), get_device("L40S")
    ms = misc_latency_ms(["strided", "copy"], [1e9, 1e9], h100)  # bf16: 5e8 elements
    assert ms[0] == pytest.approx(5e8 / (STRIDED_ACCESSES_PER_SM_CYCLE * 132 * 1980e6) * 1e3) and ms[0] > 3 * ms[1]
    assert misc_latency_ms(["strided"], [2e9], h100, elem_bytes=4.0)[0] == pytest.approx(ms[0])  # per element
    assert misc_latency_ms(["strided"], [1e9], l40s)[0] == pytest.approx(memory_time_ms([1e9], l40s)[0])
    oss = {**MOE["gpt_oss"], "max_position_embeddings": 4096}
    amp = build_graph(oss, 1, 2048, "train", dtype="fp32", amp=True).kernel_table().query("block == 'layer'")
    softmax = amp.set_index("name").loc["attn.softmax", ["op", "dtype"]].tolist()
    assert softmax == ["misc:strided", "fp32"]  # autocast's fp32 list
    fused = build_graph(oss, 1, 2048, dtype="bf16", fused=True).kernel_table()
    assert "misc:strided" not in set(fused["op"])  # a compiler's kernels, not PyTorch's unvectorised ones


def test_full_sliding_window_cache_is_concatenated_strided():
    """Once `seq` passes the window - 1 tokens a sliding layer keeps, its cache is a slice of the last step's
    keys and values: the decode step's torch.cat of it is unvectorised; below, and in full layers, a plain copy."""
    def cache_ops(seq):
        d = build_graph(MOE["gpt_oss"], 2, seq, "decode").kernel_table()
        return d[d["name"] == "attn.cache_k"].set_index("block")["op"].to_dict()

    assert cache_ops(126) == {"layer": "misc:copy"}  # 127 keys: no sliding block yet
    assert cache_ops(127) == {"sliding_layer": "misc:copy", "layer": "misc:copy"}  # 128 keys: masked, not yet a slice
    assert cache_ops(400) == {"sliding_layer": "misc:strided", "layer": "misc:copy"}


def test_forward_moe_kernels_take_more_host_time(monkeypatch):
    """The forward kernels of a grouped-experts MoE block (a MOE_LLAMA family, eager) cost (1 + MOE_HOST_EXTRA) x
    the host floor where the host bounds them (their ops launch more than one CUDA kernel): a small-batch MoE decode
    step slows down; a dense one, the backward's MoE kernels (autograd, no Python), Switch's loop of experts and a
    compiled graph do not."""
    import importlib

    compose = importlib.import_module("hybridperf.graphs.compose")
    g = build_graph(MOE["qwen3_moe"], 2, 64, "train", dtype="bf16")
    tab = g.kernel_table()
    extra = compose.moe_host_extra(g)
    host = compose.host_ms(tab, 0.018, extra)
    moe = tab["name"].str.startswith(("moe.", "experts.")).to_numpy()
    fw = (tab["phase"] == "fw").to_numpy()
    assert extra == compose.MOE_HOST_EXTRA > 0 and moe.any() and (moe & ~fw).any()
    assert np.allclose(host[moe & fw], 0.018 * (1 + extra)) and np.allclose(host[~(moe & fw)], 0.018)
    switch = {"model_type": "switch_transformers", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4,
              "num_layers": 2, "vocab_size": 100, "num_experts": 4}
    assert compose.moe_host_extra(build_graph(switch, 2, 64, dtype="bf16")) == 0.0
    assert compose.moe_host_extra(build_graph(MOE["qwen3_moe"], 2, 64, dtype="bf16", fused=True)) == 0.0
    kw = dict(mode="decode", device=H100, dtype="bf16", cudnn_plans="cached")
    dense = {"model_type": "llama", **SMALL}
    before = {n: predict_model(c, 1, 256, **kw).ms for n, c in (("moe", MOE["qwen3_moe"]), ("dense", dense))}
    monkeypatch.setattr(compose, "MOE_HOST_EXTRA", 0.0)
    after = {n: predict_model(c, 1, 256, **kw).ms for n, c in (("moe", MOE["qwen3_moe"]), ("dense", dense))}
    assert before["moe"] > 1.02 * after["moe"] and before["dense"] == pytest.approx(after["dense"])


def test_olmoe_clip_qkv_clamps_in_place_after_a_saved_copy():
    """OLMoE's `clip_qkv` clamps q, k and v in place: three kernels a layer, and when training a copy of each that
    autograd keeps, and each clamp's five-kernel backward (TorchDispatchMode, transformers 5.24: 71 / 222)."""
    clipped = {**MOE["olmoe"], "clip_qkv": 8.0}
    assert _per_layer(clipped, "inf") == _per_layer(MOE["olmoe"], "inf") + 3 == 71
    assert _per_layer(clipped, "train") == _per_layer(MOE["olmoe"], "train") + 21 == 222
