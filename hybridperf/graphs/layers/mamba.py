"""The Mamba-2 mixer as transformers' PyTorch path runs it (`mamba2_chunk_scan` and the selective state update of
Bamba, Nemotron-H and Granite 4.0-H, without `mamba-ssm` and `causal-conv1d` installed): its width keys are
Nemotron-H's names in `cfg.raw` (`mamba_num_heads`, `mamba_head_dim`, `ssm_state_size`, `n_groups`, `conv_kernel`,
`chunk_size`); a family reading other names stores these. Counted with TorchDispatchMode on transformers 5.24."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig
from hybridperf.graphs.primitives import F32, bmm, cast, fp32_vec, linear, misc, vec


def mamba_dims(cfg: ModelConfig) -> dict:
    """The mixer's widths from `cfg.raw` (Nemotron-H's key names): heads, head width, state, groups, conv."""
    r = cfg.raw
    H, P, N, G = (int(r[k]) for k in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups"))
    return {"H": H, "P": P, "N": N, "G": G, "inner": H * P, "conv": H * P + 2 * G * N, "K": int(r["conv_kernel"]),
            "C": int(r["chunk_size"])}


def _segsum(p: str, rows: int) -> list:
    """segment_sum over `rows` (chunk x chunk) entries: two triangular masks (ones, tril, not), a masked fill and the
    cumulative sum between them, and the exponential after."""
    mask = [misc(f"{p}.ones", "mask", 64), misc(f"{p}.tril", "mask", 64), misc(f"{p}.not", "mask", 64)]
    return [*mask, misc(f"{p}.fill", "mask", 2 * rows * F32, fp32=True),
            misc(f"{p}.cumsum", "reduce", 2 * rows * F32, fp32=True),
            *({**k, "name": f"{k['name']}2"} for k in mask), misc(f"{p}.fill2", "mask", 2 * rows * F32, fp32=True),
            vec(f"{p}.exp", "tanh", rows, 1, fp32=True)]


def mamba2_prefill(cfg: ModelConfig, B: int, S: int, fill: bool) -> list:
    """The Mamba-2 mixer over `S` tokens (torch path): the projection, the causal conv, dt, then the SSD scan over
    `c` chunks (the diagonal blocks' outputs, the chunk states, their recurrence, the state-to-output term), the
    gated RMSNorm and the output projection."""
    g, h, tok = mamba_dims(cfg), cfg.hidden, B * S
    H, P, N, inner, conv, K, C = g["H"], g["P"], g["N"], g["inner"], g["conv"], g["K"], g["C"]
    c = -(-S // C)
    rows = B * c * C  # padded tokens
    many = c > 1  # einsums over several chunks lay their operands out again (three more copies)

    def copy(name, elems):
        return misc(name, "copy", 2 * elems * F32, fp32=True)

    state = B * conv * K
    return [linear("in_proj", tok, h, inner + conv + H, bias=False), cast("a_to_fp32", H),
            misc("a_exp", "mask", 2 * H * F32, fp32=True), misc("a_neg", "mask", 2 * H * F32, fp32=True),
            *([misc("conv_state_zeros", "mask", state * F32), misc("conv_state_fill", "copy", 2 * state * F32),
               *([misc("conv_state_pad", "copy", 2 * state * F32)] if S < K else [])] if fill else []),  # F.pad
            # first when fewer tokens than the conv's width; the conv state is in the model's dtype
            vec("conv1d", "mulu", tok, conv), vec("conv_silu", "gelu", tok, conv),
            vec("dt_bias", "add", tok, H), vec("dt_softplus", "tanh", tok, H), vec("dt_clamp", "relu", tok, H),
            cast("x_to_fp32", tok * inner), cast("b_to_fp32", tok * g["G"] * N), copy("b_repeat", tok * H * N),
            cast("c_to_fp32", tok * g["G"] * N), copy("c_repeat", tok * H * N),
            copy("d_pad", rows * inner), fp32_vec("d_residual", "mul", rows, inner, "broadcast"),
            cast("dt_to_fp32", tok * H), fp32_vec("x_dt", "mul", tok, inner, "broadcast"),
            cast("dt_to_fp32_2", tok * H),
            fp32_vec("a_dt", "mul", tok, H), copy("x_pad", rows * inner), copy("a_pad", rows * H),
            copy("b_pad", rows * H * N), copy("c_pad", rows * H * N),
            misc("a_cumsum", "reduce", 2 * rows * H * F32, fp32=True), *_segsum("L", rows * H * C),
            copy("g_c_layout", rows * H * N), copy("g_b_layout", rows * H * N),
            {**bmm("g_scores", B * c * H, C, N, C), "fp32": True}, fp32_vec("m_mask", "mul", rows * H, C),
            *([copy("y_diag_layout", rows * H * C)] if many else []),
            {**bmm("y_diag", B * c * H, C, C, P), "fp32": True},
            misc("decay_sub", "mask", 2 * rows * H * F32, fp32=True), fp32_vec("decay_exp", "tanh", rows, H),
            fp32_vec("b_decay", "mul", rows * H, N, "broadcast"), copy("states_b_layout", rows * H * N),
            *([copy("states_x_layout", rows * inner)] if many else []),
            {**bmm("chunk_states", B * c * H, P, C, N), "fp32": True},
            misc("states_zeros", "mask", B * H * P * N * F32, fp32=True), copy("states_cat", B * (c + 1) * H * P * N),
            misc("decay_chunk_pad", "mask", 2 * B * H * (c + 1) * F32, fp32=True), *_segsum("decay_chunk",
                                                                                            B * H * (c + 1) ** 2),
            copy("new_states_layout", B * (c + 1) * H * P * N),
            {**bmm("new_states", B * H, c + 1, c + 1, P * N), "fp32": True},
            fp32_vec("state_decay_out", "tanh", rows, H), copy("c_states_layout", rows * H * N),
            *([copy("c_states_states_layout", B * c * H * P * N)] if many else []),
            {**bmm("c_times_states", B * c * H, C, N, P), "fp32": True},
            fp32_vec("y_off", "mul", rows * H, P, "broadcast"),
            fp32_vec("y_sum", "add", rows, inner), copy("y_contiguous", rows * inner),
            fp32_vec("y_d", "add", rows, inner),
            *([misc("state_cache_zeros", "mask", B * H * P * N * F32, fp32=True),
               copy("state_cache_copy", B * H * P * N)] if fill else []),
            *_gated_norm(tok, inner, decode=False), linear("out_proj", tok, inner, h, bias=False)]


def _gated_norm(tok: int, inner: int, decode: bool) -> list:
    """NemotronHRMSNormGated: x * silu(gate) in fp32, normed per group, times the weight, cast for the projection."""
    norm = [vec("gnorm.pow", "powu", tok, inner, fp32=True), misc("gnorm.mean", "reduce", tok * inner * F32, fp32=True),
            misc("gnorm.eps", "mask", 2 * tok * F32, fp32=True),
            misc("gnorm.rsqrt", "mask", 2 * tok * F32, "rsqrt", True),
            vec("gnorm.mul", "mul", tok, inner, tag="broadcast", fp32=True)]
    gate = [cast("gnorm.gate_to_fp32", tok * inner), vec("gnorm.silu", "gelu", tok, inner, fp32=True),
            vec("gnorm.gate", "mul", tok, inner, fp32=True)]
    weight = vec("gnorm.weight", "mul", tok, inner, tag="broadcast", fp32=True)
    if decode:  # two casts before the gate's silu, the normed x cast back before the weight
        return [cast("gnorm.x_cast", tok * inner), *gate, *norm, cast("gnorm.to_half", tok * inner), weight]
    return [*gate, *norm, weight, cast("gnorm.to_half", tok * inner)]


def mamba2_step(cfg: ModelConfig, B: int) -> list:
    """One decode step of the mixer: the conv over the cached inputs, dt, then the state update (decay, B x the
    input, the state times its decay plus that) and its read by C, D's skip, the gated norm, the projection."""
    g, h = mamba_dims(cfg), cfg.hidden
    H, P, N, inner, conv, K = g["H"], g["P"], g["N"], g["inner"], g["conv"], g["K"]
    st = B * H * P  # state rows of N
    state = B * conv * K

    return [linear("in_proj", B, h, inner + conv + H, bias=False), cast("a_to_fp32", H),
            misc("a_exp", "mask", 2 * H * F32, fp32=True), misc("a_neg", "mask", 2 * H * F32, fp32=True),
            misc("conv_state_cat", "copy", 2 * state * F32), misc("conv_state_copy", "copy", 2 * state * F32),
            vec("conv1d", "mulu", B * K, conv), vec("conv_silu", "gelu", B, conv),
            vec("dt_bias", "add", B, inner), vec("dt_softplus", "tanh", B, inner), cast("dt_to_fp32", B * inner),
            fp32_vec("da", "mul", st, N, "broadcast"), fp32_vec("da_exp", "tanh", st, N),
            misc("b_repeat", "copy", 2 * B * H * N * F32), fp32_vec("db", "mul", st, N, "broadcast"),
            fp32_vec("dbx", "mul", st, N, "broadcast"), fp32_vec("state_decay", "mul", st, N),
            fp32_vec("state_add", "add", st, N),
            misc("state_copy", "copy", 2 * st * N * F32, fp32=True), misc("c_repeat", "copy", 2 * B * H * N * F32),
            cast("c_to_fp32", B * H * N), {**bmm("state_read", B * H, P, N, 1), "fp32": True},
            fp32_vec("d_skip", "mul", B, inner, "broadcast"), fp32_vec("y_d", "add", B, inner),
            *_gated_norm(B, inner, decode=True), linear("out_proj", B, inner, h, bias=False)]


def mamba2_state_bytes(cfg: ModelConfig, dtype_bytes: float) -> float:
    """Every Mamba block's cache per sequence (`cfg.raw["blocks"]`): the fp32 SSM state (heads x head_dim x state)
    and the conv state (its last inputs, in the model's dtype). A family's `Family.state_bytes`."""
    g = mamba_dims(cfg)
    return cfg.raw["blocks"].count("mamba") * (g["H"] * g["P"] * g["N"] * F32 + g["conv"] * g["K"] * dtype_bytes)


def attention_kv_width(cfg: ModelConfig) -> float:
    """Keys and values of the attention blocks among `cfg.raw["blocks"]`, spread over all blocks (the Mamba ones
    cache `mamba2_state_bytes` instead). A family's `Family.kv_cache_width`."""
    return 2 * cfg.num_kv_heads * cfg.head_dim * cfg.raw["blocks"].count("attention") / cfg.layers
