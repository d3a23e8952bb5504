"""RMSNorm in eager PyTorch (LayerNorm is one `ln` kernel, `graphs.primitives.ln`)."""
from __future__ import annotations

from hybridperf.graphs.layers.grads import grad_cast, grad_sums
from hybridperf.graphs.primitives import F32, _k, cast, misc, vec


def rms_norm(p, tok, h, train=False, unit_offset=False, fp32_weight=False):
    """RMSNorm in eager PyTorch (SwitchTransformersLayerNorm, LlamaRMSNorm): pow, mean, +eps, rsqrt,
    x*r, w*x (x is read twice). Both compute in fp32: a half-precision model casts x up first and the
    normalised x back down before the weight multiply (TorchDispatchMode on HF's bf16 LlamaRMSNorm).
    `unit_offset` (GemmaRMSNorm): the weight enters as (1 + weight), a tiny add, and multiplies in fp32,
    before the cast back (its fp32 copy of the weight is a tiny cast in a half-precision model).
    `fp32_weight` (GptOssRMSNorm): the half weight multiplies the fp32 x (type promotion) before the cast back,
    so the weight's gradient is cast back in the backward."""
    ks = [*grad_sums(f"{p}.x", tok, h, 2, train, fp32=True), cast(f"{p}.to_fp32", tok * h),
          vec(f"{p}.pow", "powu", tok, h, fp32=True), misc(f"{p}.mean", "reduce", tok * h * F32, fp32=True),
          misc(f"{p}.eps", "mask", 2 * tok * F32, fp32=True), misc(f"{p}.rsqrt", "mask", 2 * tok * F32, "rsqrt", True),
          vec(f"{p}.mul", "mul", tok, h, tag="broadcast", fp32=True)]
    if unit_offset:
        return ks + [cast(f"{p}.weight_to_fp32", h), misc(f"{p}.one_plus_weight", "mask", 2 * h * F32, fp32=True),
                     _k(f"{p}.weight", "mul", tok, H=h, params=h, tag="broadcast", fp32=True),
                     cast(f"{p}.to_half", tok * h)]
    if fp32_weight:
        return ks + [_k(f"{p}.weight", "mul", tok, H=h, params=h, tag="broadcast", fp32=True),
                     cast(f"{p}.to_half", tok * h), *grad_cast(f"{p}.weight", h, train)]
    return ks + [cast(f"{p}.to_half", tok * h), _k(f"{p}.weight", "mul", tok, H=h, params=h, tag="broadcast")]


def fp32_norm(p, rows, h, scale=True):
    """An RMSNorm computed and scaled in fp32 (Gemma 4's, Nemotron-H's): x cast up, pow, mean, + eps, rsqrt (or
    pow(-0.5)), the product, (with a scale) the weight cast up and multiplied, and the cast back. Inference only."""
    ks = [cast(f"{p}.to_fp32", rows * h), vec(f"{p}.pow", "powu", rows, h, fp32=True),
          misc(f"{p}.mean", "reduce", rows * h * F32, fp32=True), misc(f"{p}.eps", "mask", 2 * rows * F32, fp32=True),
          misc(f"{p}.rsqrt", "mask", 2 * rows * F32, "rsqrt", True),
          vec(f"{p}.mul", "mul", rows, h, tag="broadcast", fp32=True)]
    if scale:
        ks += [cast(f"{p}.weight_to_fp32", h),
               _k(f"{p}.weight", "mul", rows, H=h, params=h, tag="broadcast", fp32=True)]
    return ks + [cast(f"{p}.to_half", rows * h)]
