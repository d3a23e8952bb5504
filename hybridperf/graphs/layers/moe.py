"""Top-k mixtures of experts in HF eager code: the routers (softmax, GPT-OSS, DeepSeek-V3) and the grouped
expert GEMMs."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig
from hybridperf.graphs.layers.activation import mlp_activation
from hybridperf.graphs.layers.grads import grad_cast, grad_cat, grad_sums, slice_grads
from hybridperf.graphs.primitives import F32, HALF_DTYPES, _k, cast, expert_groups, grouped_gemm, linear, misc, vec


def moe_block(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """A top-k MoE in place of the MLP (MOE_LLAMA families; HF eager, `experts_implementation="grouped_mm"`,
    transformers 5.23's default), over `tok` normed tokens.

    Router: a GEMM to one logit per expert, softmax in fp32, top-k, and (Mixtral always, Qwen with `norm_topk_prob`)
    the k weights divided by their sum. Mixtral keeps the weights in fp32, so in a half-precision model its weighted
    expert outputs and their sum over k are fp32 and cast back; Qwen casts the k weights to the model dtype.
    Experts: `expert_dispatch`. Qwen2-MoE adds a gated MLP every token passes through (the shared expert), scaled by
    sigmoid(x w) and added; DeepSeek-V3 routes with `deepseek_router` and adds its shared experts unscaled; GPT-OSS
    routes with a biased GEMM and a softmax over the k chosen logits, and its experts are `oss_experts`; MiniMax-M2
    routes with a sigmoid and a score-correction bias and keeps the normalised weights in fp32. Counted
    with TorchDispatchMode (`experiments/gpu/graph_trace.py`); the tiny integer bookkeeping kernels are
    `misc:route`. In the backward each gather (tag `gather`) zero-fills its gradient and scatters into it."""
    h, E, k, tok = cfg.hidden, cfg.num_experts, cfg.experts_per_token, int(tok)
    mixtral = cfg.family == "mixtral"
    pairs = tok * k
    groups, rows = expert_groups(E, k, tok)
    fs = cfg.shared_ffn

    def route(name, nbytes, tag=""):
        return misc(f"moe.{name}", "route", nbytes, tag=tag)

    deepseek = cfg.family == "deepseek_v3"
    minimax = cfg.family == "minimax_m2"
    fp32_weights = mixtral or deepseek or minimax  # the k routing weights stay fp32, and so do the weighted outputs
    # router and gather, and the shared expert's gate and up projections (Qwen2-MoE: and its sigmoid gate)
    ks = [*grad_sums("moe.x", tok, h, 2 + (2 if deepseek else 3 if fs else 0), train)]
    if fs:
        ks += [linear("shared.gate_proj", tok, h, fs, bias=False), linear("shared.up_proj", tok, h, fs, bias=False),
               *mlp_activation("shared", cfg.activation, tok, fs, train), vec("shared.gate_mul", "mul", tok, fs),
               linear("shared.down_proj", tok, fs, h, bias=False)]
    oss = cfg.family == "gpt_oss"
    if deepseek:
        ks += deepseek_router(cfg, tok)
    elif minimax:  # MiniMax-M2: logits in the model dtype, a sigmoid in fp32, the score-correction bias, top-k of
        # the biased scores, the unbiased ones gathered (HF's MiniMaxM2TopKRouter, transformers 5.24)
        ks += [linear("moe.router", tok, h, E, bias=False),
               cast("moe.router_to_fp32", tok * E, dtypes=HALF_DTYPES),
               vec("moe.router_sigmoid", "tanh", tok, E, fp32=True), route("score_bias", 3 * tok * E * F32),
               route("topk", tok * E * F32 + pairs * (F32 + 8)),
               misc("moe.gather_weights", "index", tok * E * F32 + pairs * (F32 + 8), tag="gather", fp32=True)]
    elif oss:  # GPT-OSS: logits with a bias, top-k of them, a softmax over the k (all in the model dtype)
        ks += [linear("moe.router", tok, h, E, bias=True),
               route("topk", tok * E * F32 + pairs * (F32 + 8), tag="gather"),
               vec("moe.router_softmax", "softmax", tok, k)]
    else:
        ks += [linear("moe.router", tok, h, E, bias=False),
               cast("moe.router_to_fp32", tok * E, dtypes=HALF_DTYPES if mixtral else ("bf16",)),
               vec("moe.router_softmax", "softmax", tok, E, fp32=True),
               route("topk", tok * E * F32 + pairs * (F32 + 8), tag="gather")]
    if mixtral or minimax or cfg.raw.get("norm_topk_prob", deepseek):  # the k weights: their sum, the division
        ks += [*grad_sums("moe.topk_w", tok, k, 2, train, fp32=True),
               misc("moe.topk_sum", "reduce", pairs * F32, fp32=True),
               # autograd keeps the gathered weights an in-place division overwrites (MiniMax-M2's trace)
               *([misc("moe.topk_w_saved", "copy", 2 * pairs * F32, fp32=True)] if train and minimax else []),
               *([misc("moe.topk_eps", "mask", 2 * tok * F32, fp32=True)] if deepseek else []),
               _k("moe.topk_norm", "div", tok, H=k, tag="broadcast", fp32=True)]
    if deepseek:  # DeepSeek scales the k weights by `routed_scaling_factor` and keeps them in fp32
        ks.append(vec("moe.routed_scale", "mulu", tok, k, fp32=True))
    elif not (mixtral or oss or minimax):
        ks.append(cast("moe.weights_to_half", pairs))
    ks += expert_dispatch(cfg, tok, train, fp32_weights, oss_experts(cfg, pairs, groups, rows, train) if oss else None)
    if deepseek:
        ks.append(vec("moe.add_shared", "add", tok, h))
    elif fs:
        ks += [linear("shared.expert_gate", tok, h, 1, bias=False), vec("shared.sigmoid", "tanh", tok, 1),
               vec("shared.scale", "mul", tok, h, tag="broadcast"), vec("moe.add_shared", "add", tok, h)]
    return ks


def expert_dispatch(cfg: ModelConfig, tok: int, train: bool = False, fp32_weights: bool = False,
                    experts: list | None = None) -> list:
    """The routed experts of `tok` tokens (transformers' grouped_mm path): sort the (token, expert) pairs by expert,
    gather their tokens and weights, count them per expert (histc, cumsum), `experts` (default: the gate/up grouped
    GEMM, act(gate) * up, the down grouped GEMM), times the routing weight, un-permute and sum over the k experts of
    each token. `fp32_weights`: the weights are fp32, so are the weighted outputs and their sum, cast back."""
    h, E, k, f = cfg.hidden, cfg.num_experts, cfg.experts_per_token, cfg.expert_ffn
    pairs = tok * k
    groups, rows = expert_groups(E, k, tok)

    def route(name, nbytes, tag=""):
        return misc(f"moe.{name}", "route", nbytes, tag=tag)

    if experts is None:
        experts = [grouped_gemm("experts.gate_up", groups, rows, h, 2 * f, E),
                   *grad_cat("experts.gate_up_out", pairs * 2 * f, train),
                   *mlp_activation("experts", cfg.activation, pairs, f, train),
                   vec("experts.gate_mul", "mul", pairs, f), grouped_gemm("experts.down", groups, rows, f, h, E)]
    return [route("sort", 3 * pairs * 8), route("token_of_pair", 2 * pairs * 8),
            misc("moe.gather_tokens", "index", 2 * pairs * h * F32 + pairs * 8, tag="gather"),
            route("weights_of_pair", pairs * (2 * F32 + 8), tag="gather"), route("ids_to_int", pairs * 12),
            route("histc", pairs * 4 + E * 4), route("offsets", 2 * E * 4), *experts,
            vec("moe.weight_mul", "mul", pairs, h, tag="broadcast", fp32=fp32_weights),
            *(grad_cast("moe.weight_mul", pairs * h, train) if fp32_weights else []),
            misc("moe.arange", "mask", pairs * 8), route("inverse_perm", 3 * pairs * 8),
            misc("moe.unpermute", "index", 2 * pairs * h * F32 + pairs * 8, tag="gather", fp32=fp32_weights),
            misc("moe.sum_k", "reduce", pairs * h * F32, fp32=fp32_weights),
            *([cast("moe.to_half", tok * h)] if fp32_weights else [])]


def oss_experts(cfg: ModelConfig, pairs: int, groups: int, rows: int, train: bool = False) -> list:
    """GPT-OSS's experts over `pairs` routed (token, expert) rows (GptOssExperts, grouped_mm with biases,
    transformers 5.23): each grouped GEMM's bias rows gathered per pair and added, and the clamped SwiGLU on
    the even (gate) and odd (up) columns: clamp both, gate * sigmoid(alpha gate), (up + 1) * that. The
    strided columns' gradients are scattered back (slice_backward) and added."""
    h, E, f = cfg.hidden, cfg.num_experts, cfg.expert_ffn

    def bias(name, width):  # gathered from the (experts, width) bias, whose gradient is scattered back
        return [_k(f"experts.{name}_bias", "misc:index", nbytes=2 * pairs * width * F32, params=E * width,
                   tag="gather"), vec(f"experts.{name}_bias_add", "add", pairs, width)]

    return [grouped_gemm("experts.gate_up", groups, rows, h, 2 * f, E), *bias("gate_up", 2 * f),
            vec("experts.gate_clamp", "relu", pairs, f, tag="clamp_max"),
            vec("experts.up_clamp", "relu", pairs, f, tag="clamp"),
            *grad_sums("experts.gate", pairs, f, 2, train), vec("experts.gate_alpha", "mulu", pairs, f),
            vec("experts.gate_sigmoid", "tanh", pairs, f), vec("experts.glu", "mul", pairs, f),
            vec("experts.up_plus_one", "addu", pairs, f), vec("experts.gate_mul", "mul", pairs, f),
            *slice_grads("experts.gate_up_out", pairs, 2 * f, 2, train),
            *grad_sums("experts.gate_up_halves", pairs, 2 * f, 2, train),
            grouped_gemm("experts.down", groups, rows, f, h, E), *bias("down", h)]


def deepseek_router(cfg: ModelConfig, tok: int) -> list:
    """DeepSeek-V3's router over `tok` tokens (DeepseekV3TopkRouter, transformers 5.23): the logits in fp32
    (x and the weight cast up in a half-precision model), a sigmoid, the score-correction bias, the best
    two scores of each of `n_group` groups summed, the `topk_group` best groups kept (a mask: zeros, scatter,
    expand (a copy unless there is one group), cast, not, masked_fill), top-k of the rest, and the chosen scores
    gathered, which is where the gradient flows (tag `gather`). Counted with TorchDispatchMode
    (`experiments/gpu/graph_trace.py`)."""
    h, E, k = cfg.hidden, cfg.num_experts, cfg.experts_per_token
    G = int(cfg.raw.get("n_group", 8))

    def route(name, nbytes, tag=""):
        return misc(f"moe.{name}", "route", nbytes, tag=tag)

    return [cast("moe.router_x_to_fp32", tok * h), cast("moe.router_w_to_fp32", E * h),
            {**linear("moe.router", tok, h, E, bias=False), "fp32": True},
            vec("moe.router_sigmoid", "tanh", tok, E, fp32=True), route("score_bias", 3 * tok * E * F32),
            route("group_top2", tok * E * F32 + tok * G * 2 * 12), route("group_sum", tok * G * 3 * F32),
            route("group_topk", tok * G * (F32 + 8)), route("group_zeros", tok * G * F32),
            route("group_scatter", tok * G * (F32 + 8)),
            *([route("group_expand", 2 * tok * E * F32)] if G > 1 else []),  # one group: the mask is a view
            route("mask_to_bool", tok * E * 5), route("mask_not", 2 * tok * E),
            route("mask_fill", tok * E * (2 * F32 + 1)),
            route("topk", tok * E * F32 + tok * k * (F32 + 8)),
            misc("moe.gather_weights", "index", tok * E * F32 + tok * k * (F32 + 8), tag="gather", fp32=True)]
