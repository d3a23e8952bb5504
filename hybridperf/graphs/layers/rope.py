"""Rotary position embeddings as eager HF code runs them, and the causal mask and rotary table built before
the layers."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig
from hybridperf.graphs.layers.grads import grad_cast, grad_cat, grad_sums, slice_grads
from hybridperf.graphs.primitives import F32, cast, misc, vec


def rotary_dim(cfg: ModelConfig, default_fraction: float) -> int:
    """Width of each head that RoPE rotates: head_dim times the config's `rotary_pct` (GPT-NeoX) or
    `partial_rotary_factor` (top level, or in `rope_parameters` / `rope_scaling`), else MiniMax-M2's `rotary_dim`
    (transformers reads it only where no factor is given), else head_dim times `default_fraction`."""
    rope = cfg.raw.get("rope_parameters") or cfg.raw.get("rope_scaling") or {}
    fraction = cfg.raw.get("rotary_pct") or cfg.raw.get("partial_rotary_factor") or rope.get("partial_rotary_factor")
    if not fraction and cfg.raw.get("rotary_dim"):
        return min(int(cfg.raw["rotary_dim"]), cfg.head_dim)
    return int(cfg.head_dim * float(fraction or default_fraction))


def causal_and_rotary_setup(B: int, S: int, rotary_width: int) -> list:
    """What a rotary causal LM builds before its layers (as NeuSight's traced graphs count it): the causal
    mask (full, triu, arange compare, mul, expand + clone) and the rotary table (freqs, cat, cos, sin) over
    B * S positions, `rotary_width` wide."""
    return [*(misc(f"causal_{i}", "mask", 2 * S * S * F32) for i in range(4)),
            misc("causal_clone", "copy", 2 * B * S * S * F32),
            *(misc(f"rotary_{i}", "mask", 2 * B * S * rotary_width * F32) for i in range(4))]


def cat_rope(p: str, tok: int, heads: int, hd: int, rot: int, train: bool) -> list:
    """RoPE on the first `rot` of each of `heads` heads of projection `p` (q or k), then concatenated with
    the passed-through rest (Phi-3, GPT-NeoX; a copy even when the rest is empty). Each slice sends a
    gradient back (`slice_grads`: the rotated and passed parts of each head, and rotate_half's halves), and
    autograd adds the two parts into the projection's (one full-width add)."""
    return [*_rope(f"{p}_rope", tok, heads * rot), *grad_sums(f"{p}_rope_x", tok, heads * rot, 3, train),
            *slice_grads(f"{p}_rope_x", tok, heads * rot, 2, train),
            misc(f"{p}_rope_pass", "strided", 2 * tok * heads * hd * F32),  # the passed part is a slice
            *grad_sums(f"{p}_rope_parts", tok, heads * hd, 2, train),
            *slice_grads(f"{p}_rope_parts", tok, heads * hd, 2 if rot < hd else 1, train)]  # no rest: one slice


def _rope(p, tok, width, fp32_tables=False, train=False):
    """apply_rotary_pos_emb on one projection: x*cos, -x2 (half), cat(-x2, x1), rot*sin, sum. x1 is a slice of a
    head, so rotate_half's torch.cat takes PyTorch's unvectorised strided path (`misc:strided`).
    `fp32_tables` (OLMo 2): cos and sin stay fp32 in a half-precision model, so the products and the sum run
    in fp32 and the result is cast back to x's dtype; the backward casts the two products' gradients down
    (the cast's own backward is the generic one)."""
    ks = [vec(f"{p}_cos", "mul", tok, width, tag="constant", fp32=fp32_tables),
          vec(f"{p}_neg", "mulu", tok, width // 2), misc(f"{p}_cat", "strided", 2 * tok * width * F32),
          vec(f"{p}_sin", "mul", tok, width, tag="constant", fp32=fp32_tables),
          vec(f"{p}_add", "add", tok, width, fp32=fp32_tables)]
    if not fp32_tables:
        return ks
    return ks + [cast(f"{p}_to_half", tok * width),
                 *grad_cast(f"{p}_cos", tok * width, train), *grad_cast(f"{p}_sin", tok * width, train)]


def halves_rope(p: str, rows: int, width: int, train: bool = False, strided: bool = True) -> list:
    """RoPE written on two halves x1, x2 of (rows, width) (transformers 5.23): DeepSeek's interleaved even and
    odd elements (`strided`), GPT-OSS's torch.chunk. x1 and x2 times cos and sin (four products with
    constants), x1 cos - x2 sin and x2 cos + x1 sin, and a torch.cat. x1 and x2 are read twice each; the
    backward of the subtraction negates its gradient. The halves' gradients are joined by a torch.cat
    (chunk), or each scattered into a zero-filled full-width one (slice_backward) and added."""
    half = width // 2
    ks = [*(vec(f"{p}_{n}", "mul", rows, half, tag="constant") for n in ("x1cos", "x2sin", "x2cos", "x1sin")),
          vec(f"{p}_sub", "add", rows, half, tag="sub"), vec(f"{p}_add", "add", rows, half),
          misc(f"{p}_cat", "copy", 2 * rows * width * F32), *grad_sums(f"{p}_x1", rows, half, 2, train),
          *grad_sums(f"{p}_x2", rows, half, 2, train)]
    if strided:
        return ks + [*slice_grads(f"{p}_x", rows, width, 2, train), *grad_sums(f"{p}_halves", rows, width, 2, train)]
    return ks + grad_cat(f"{p}_halves", rows * width, train)
