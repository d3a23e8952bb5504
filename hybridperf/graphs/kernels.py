"""Enumerate the GPU kernels one training step or forward pass of a HF transformer launches.

Semantics follow NeuSight's labels: eager fp32 PyTorch, HF `transformers` eager attention, batch B of
sequences of length S; `inf` = one forward under no_grad in eval mode (dropout launches nothing),
`train` = forward + backward (dropout active), gradients accumulated into `.grad` (the label's
`bwall_latency` = backward + accumulation), no optimizer step (`build_graph(..., optimizer=...)` adds
one, `hybridperf.graphs.optimizer`). `build_graph(..., recompute=True)` checkpoints every transformer
layer as HF's `gradient_checkpointing_enable()` does: the backward re-runs each layer's forward (phase
`rc`, dropout included: the checkpoint replays its RNG state) and autograd keeps only each layer's input.

Kernels are mapped onto hybridperf's op vocabulary (bmm, linear, elementwise, softmax, ln) whenever
one of them streams the same tensors. The rest are `misc:<kind>` rows with an explicit byte count
that `hybridperf.graphs.misc` turns into an analytic memory-bound estimate:

    misc:gather        embedding lookup: read the selected rows + indices, write the output
    misc:embedding_bw  embedding backward: zero the (V, h) gradient + scatter-add the token grads
    misc:copy          .contiguous()/.reshape() of a permuted tensor: strided read + write
    misc:reduce        a reduction (bias gradient = sum over tokens, T5 LayerNorm variance): read once
    misc:mask          building attention masks / position ids (arange, full, cumsum, masked_fill, ...)
    misc:route         MoE routing bookkeeping (argmax, one_hot, cumsum, capacity mask, max)
    misc:index         boolean-mask gather/scatter of the tokens routed to one expert

Mappings onto the vocabulary (each is a documented approximation):
    causal `where(mask, x, min)`, OPT's `max(x, min)`, a broadcast mask add  -> addu on the same shape
    (they stream x once in and once out; the broadcast mask stays in L2)
    dropout (train)                                  -> mul (reads x, writes y and the mask)
    backward of a unary op (relu, gelu, tanh, mulu)  -> mul (reads grad and the saved tensor)
    backward of a product with a constant (RoPE)     -> one mul
    backward of repeat_kv's copy (grouped-query)     -> the layout copy, and a sum over each group
    backward of x ** e (powu)                        -> pow, mul by e, mul by the gradient
    backward of softmax / LayerNorm over H           -> softmax / ln over 2H (~2x the bytes)
    backward of a GEMM                               -> two GEMMs of the same FLOPs (dX and dW)
    backward of a broadcast product (tag broadcast)  -> both products, then the broadcast operand's
    (RMSNorm's x * rsqrt and weight * x, MoE weights)   gradient summed over the broadcast dimension
                                                        (reduce); a quotient's five kernels (div, div,
                                                        neg, mul, div), then the sum
    backward of RMSNorm's rsqrt (tag rsqrt)          -> three per-row kernels (pow, two muls)
    backward of a slice (RoPE's halves; slice_grads) -> a zero-filled gradient of the whole tensor and a copy
    an fp32 op reading a half tensor (`grad_cast`)   -> a cast of its gradient (backward only)
    gradient accumulation of a parameter             -> add over the parameter's elements
    a tensor read by n ops of the forward            -> n - 1 adds of its gradient in the backward
    (autograd sums the gradients of every reader: `grad_sums`, e.g. a BERT layer's input feeds q, k,
    v and the residual add; counted per family with TorchDispatchMode on HF eager layers)

A model is a list of `Block`s (embeddings, repeated layer types, head), each a forward kernel list
with a repeat `count`; pipeline or tensor parallel variants can partition or rescale blocks.
`build_graph(..., fused=True)` runs each block through `fuse_pointwise` (inference as a fusing compiler
runs it, NeuSight's `-fusion` runs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES, dtype_key
from hybridperf.errors import InputError
from hybridperf.graphs.attention import attention_impl, mark_call
from hybridperf.graphs.config import (DEEPSEEK_DEFAULTS, GEMMA, LLAMA_LIKE, ROBERTA_LIKE, SLIDING_GEMMA, ModelConfig,
                                      kv_length, load_config)
from hybridperf.graphs.memory import (MemoryEstimate, mla_layer_extra_bytes, moe_layer_extra_bytes,
                                      saved_activation_bytes, score_saved_bytes)
from hybridperf.graphs.optimizer_specs import optimizer_spec, optimizer_state_bytes
from hybridperf.graphs.primitives import (BACKWARD_ONLY, CAUSAL_LM, F32, HALF_DTYPES, MODEL_DTYPES, Block, _k, bmm,
                                         cast, expert_groups, gather, grouped_gemm, linear, ln, misc, vec)
from hybridperf.ops import OP_CLASS

#: `grouped`: a top-k MoE's grouped expert GEMM (`grouped_gemm`), one launch or one per expert by device
KERNEL_COLUMNS = ("block", "name", "op", "B", "M", "N", "K", "H", "nbytes", "extra_nbytes", "phase", "count", "group",
                  "dtype", "grouped", "form", "attn")
#: inf: one forward of batch x seq tokens; train: forward + backward; decode: one generated token per
#: sequence against a key/value cache of seq tokens (`hybridperf.graphs.decode`)
MODES = ("inf", "train", "decode")
#: families whose eager attention takes its softmax in fp32 in a half-precision model
SOFTMAX_FP32 = ("gpt_neo", "gpt_neox", "opt") + tuple(f for f in LLAMA_LIKE if f != "gpt_oss")
#: families whose learned or rotary position tables cap the sequence at `max_positions`
POSITION_LIMITED = ("bert", *ROBERTA_LIKE, "gpt2", "gpt_neo", "gpt_neox", "opt", *LLAMA_LIKE)
#: families that build a sliding-window causal mask beside the causal one (Qwen2MoeModel even when no layer
#: uses it; Gemma 2 and 3 for their sliding layers), and its kernels in a prefill forward (TorchDispatchMode,
#: transformers 5.23)
SLIDING_MASK_KERNELS = {"qwen2_moe": 23, "gemma2": 23, "gemma3_text": 23,
                        "gpt_oss": 6}  # 14 for the mask, net of 8 position and padding checks Llama's path has


@dataclass
class ModelGraph:
    config: ModelConfig
    batch: int
    seq: int
    mode: str
    blocks: list
    dtype: str = "fp32"  # float tensors (weights, activations, gradients) in this dtype, but `fp32` kernels
    fused: bool = False  # pointwise chains fused into one kernel each (`fuse_pointwise`)
    optimizer: str | None = None  # train: the optimizer step that follows the backward (`graphs.optimizer`)
    recompute: bool = False  # train: every layer checkpointed, its forward re-run in the backward (phase rc)
    amp: bool = False  # fp32 weights under bf16 autocast (`hybridperf.graphs.amp`; dtype is then bf16)
    attn: str = "eager"  # attention implementation (`hybridperf.graphs.attention`)

    @property
    def dtype_bytes(self) -> float:
        return float(DTYPE_BYTES[self.dtype])

    def kernel_table(self) -> pd.DataFrame:
        """One row per distinct kernel of each block and phase (fw, bw, acc; rc: a checkpointed layer's
        forward, re-run in the backward), with its repeat `count`."""
        rows = []
        for blk in self.blocks:
            forward = [k for k in blk.kernels if k["tag"] not in BACKWARD_ONLY]
            for k in forward:
                rows.append({**k, "block": blk.name, "phase": "fw", "count": blk.count})
            if self.mode == "train" and self.recompute and blk.kind == "layer":
                for k in forward:
                    rows.append({**k, "block": blk.name, "phase": "rc", "count": blk.count})
            if self.mode == "train":
                for k in blk.kernels:
                    for r in backward_kernels(k):  # the backward of an fp32 op runs in fp32 too
                        rows.append({**r, "fp32": r["fp32"] or k["fp32"], "block": blk.name, "phase": "bw",
                                     "count": blk.count})
                    for r in accumulation_kernels(k):  # into fp32 `.grad` under autocast
                        rows.append({**r, "fp32": r["fp32"] or self.amp, "block": blk.name, "phase": "acc",
                                     "count": blk.count})
        rows = [r for r in rows if r["dtypes"] is None or self.dtype in r["dtypes"]]
        df = pd.DataFrame(rows)
        df["attn"] = df["attn"].fillna("") if "attn" in df.columns else ""
        df["group"] = [kernel_group(op) for op in df["op"]]
        df["grouped"] = df["tag"] == "grouped"
        upcast = df["fp32"].to_numpy(bool)
        df["dtype"] = np.where(upcast, "fp32", self.dtype)
        # byte counts are written for fp32 tensors: the chosen dtype scales them (index tensors are
        # negligible), except in kernels HF runs in fp32; a cast reads one width and writes the other
        scale = np.where(upcast, 1.0, self.dtype_bytes / F32)
        scale = np.where(df["op"].to_numpy() == "misc:cast", (self.dtype_bytes + F32) / (2 * F32), scale)
        df["nbytes"] = df["nbytes"] * scale
        df["extra_nbytes"] = df["extra_nbytes"] * scale
        return df.loc[:, list(KERNEL_COLUMNS)]

    def memory(self) -> MemoryEstimate:
        """Device memory the run needs (GB): weights, gradients (train) and activations, the saved set of
        eager autograd for training (`hybridperf.graphs.memory`; with `recompute`, each layer's input and
        one layer's saved set); for inference a causal LM's key/value cache and the largest op's inputs
        and output; with an optimizer its state and its step's temporaries. No allocator rounding."""
        cfg, eb = self.config, self.dtype_bytes
        params = float(sum(param_numels(self)))  # a tied head is the embedding table
        weights = params * (F32 if self.amp else eb) / 1e9
        if self.mode == "train":
            act = saved_activation_bytes(cfg.family, cfg.hidden, cfg.token_ffn, cfg.heads, cfg.vocab,
                                         cfg.total_layers, self.batch, self.seq, eb, cfg.max_positions, self.recompute)
            fused = sum(b.count for b in self.blocks if b.kind == "layer" and any(k["op"] == "attention"
                                                                                    for k in b.kernels))
            if fused:  # fused attention keeps no score-sized tensors for its backward
                act -= score_saved_bytes(cfg.family, cfg.heads, self.batch, self.seq, eb) * (
                    min(fused, 1) if self.recompute else fused)
            if cfg.sparse_layers:  # with recompute only the layer being back-propagated holds its saved set
                moe = moe_layer_extra_bytes(self.batch * self.seq, cfg.experts_per_token, cfg.hidden, eb,
                                            bool(cfg.shared_ffn) and cfg.family == "qwen2_moe",
                                            cfg.expert_ffn if cfg.family == "gpt_oss" else 0)
                act += moe * (1 if self.recompute else cfg.sparse_layers)
            if cfg.family == "deepseek_v3":  # every layer's latent attention
                d = mla_dims(cfg)
                widths = (d["q_lora"], d["kv_lora"] + d["qk_rope"], cfg.heads * (d["qk_nope"] + d["qk_rope"]),
                          cfg.heads * (d["qk_nope"] + d["v"]), cfg.hidden)
                act += mla_layer_extra_bytes(self.batch * self.seq, widths, eb) * (1 if self.recompute else cfg.layers)
            act /= 1e9
            if self.optimizer:
                state, temp = optimizer_state_bytes(params, self.optimizer, F32 if self.amp else eb)
                return MemoryEstimate(weights, weights, act, state / 1e9, temp / 1e9)
            return MemoryEstimate(weights, weights, act)
        return MemoryEstimate(weights, 0.0, (self._kv_cache_bytes() + self._largest_op_bytes()) / 1e9)

    def _kv_cache_bytes(self) -> float:
        """Bytes of the keys and values a causal LM returns from an inference forward (HF's `use_cache`,
        on unless the config turns it off) or holds after a decode step: two (batch, tokens, kv heads x
        head_dim) tensors per layer. Gemma 2 and 3's sliding layers keep their window's last tokens only."""
        cfg = self.config
        sliding = cfg.layer_types.count("sliding_attention")
        if self.mode == "decode":
            tokens, sliding_tokens = kv_length(cfg, self.seq), kv_length(cfg, self.seq, sliding=True)
        elif cfg.family not in CAUSAL_LM or not cfg.raw.get("use_cache", True):
            return 0.0
        else:  # HF's sliding cache keeps window - 1 tokens
            tokens = self.seq
            sliding_tokens = min(self.seq, cfg.sliding_window - 1) if sliding else self.seq
        layer_tokens = (cfg.total_layers - sliding) * tokens + sliding * sliding_tokens
        if cfg.family == "deepseek_v3":  # the latent and the shared rotary key, once per token
            d = mla_dims(cfg)
            return self.batch * layer_tokens * (d["kv_lora"] + d["qk_rope"]) * self.dtype_bytes
        return 2.0 * self.batch * layer_tokens * cfg.num_kv_heads * cfg.head_dim * self.dtype_bytes

    def _largest_op_bytes(self) -> float:
        """Inputs plus output of the forward's largest op: what is live at once under no_grad. In a
        half-precision model, eager attention of the `SOFTMAX_FP32` families takes its softmax in fp32
        and casts back, so there three score-sized tensors are live (input, fp32 output, cast)."""
        eb = self.dtype_bytes
        upcast = self.config.family in SOFTMAX_FP32 and self.dtype in HALF_DTYPES
        largest = 0.0
        for blk in self.blocks:
            for k in blk.kernels:
                op, B, M, N, K, H = k["op"], k["B"], k["M"], k["N"], k["K"], k["H"]
                if op.startswith("misc:"):
                    continue
                if op == "linear":
                    n = (M * N + M * K) * eb
                elif op == "bmm" and k["tag"] == "grouped":  # the experts' weights are counted as weights
                    n = B * (M * N + M * K) * eb
                elif op == "bmm":
                    n = B * (M * N + N * K + M * K) * eb
                elif op == "softmax" and upcast:
                    n = B * H * (2 * eb + F32)
                else:
                    n = 2 * B * H * eb
                largest = max(largest, float(n))
        return largest


def kernel_group(op: str) -> str:
    """Breakdown class of a kernel: our op classes, or 'embedding' / 'memory' for the misc kernels."""
    if op.startswith("misc:"):
        return "embedding" if op in ("misc:gather", "misc:embedding_bw") else "memory"
    return OP_CLASS[op]


# ----------------------------------------------------------------------------------------------------
# backward and gradient accumulation
# ----------------------------------------------------------------------------------------------------

def backward_kernels(k: dict) -> list:
    """Kernels of the backward of forward kernel `k` (see the module docstring for the rules)."""
    op, n, tag = k["op"], k["name"], k.get("tag", "")
    if tag == "dropout":  # grad * mask * scale
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "where":  # where(mask, grad, 0)
        return [vec(n + ".bw", "addu", k["B"], k["H"])]
    if tag == "grad_sum":  # a backward-only add (`grad_sums`)
        return [vec(n, "add", k["B"], k["H"])]
    if tag == "grad_cat":  # a backward-only copy (`grad_cat`, `slice_grads`)
        return [misc(n, "copy", k["nbytes"])]
    if tag == "grad_zeros":  # a backward-only zero-filled gradient (`slice_grads`)
        return [misc(n, "mask", k["nbytes"])]
    if tag in ("grad_cast", "grad_attn"):  # a backward-only cast (`grad_cast`), a fused attention backward
        return [{**k, "tag": ""}]
    if tag == "layout":  # the gradient is copied back into the layout the forward copied out of
        return [misc(n + ".bw", "copy", k["nbytes"])]
    if tag == "repeat":  # repeat_kv's copy: laid back, then summed over each key/value head's query heads
        return [misc(n + ".bw", "copy", k["nbytes"]), misc(n + ".bw_sum", "reduce", k["nbytes"] / 2)]
    if tag == "constant":  # a product with a tensor that takes no gradient (RoPE's cos and sin): one mul
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "sub":  # a - b: b's gradient is negated
        return [vec(n + ".bw", "mulu", k["B"], k["H"])]
    if tag == "broadcast_copy":  # a copy of a tensor broadcast over heads: its gradient summed back
        return [misc(n + ".bw", "reduce", k["nbytes"] / 2)]
    if tag == "sub_broadcast":  # x - m with m broadcast over the row: m's gradient is -grad summed over the row
        return [vec(n + ".bw", "mulu", k["B"], k["H"]), misc(n + ".bw_sum", "reduce", k["B"] * k["H"] * F32)]
    if tag == "row_max":  # max(dim) keeps its indices: the gradient is scattered into zeros
        return [misc(n + ".bw_zeros", "mask", k["nbytes"]), misc(n + ".bw", "index", k["nbytes"])]
    if tag == "sink_cat":  # the broadcast sink column's gradient summed over batch and rows
        return [misc(n + ".bw", "reduce", k["nbytes"] / 2)]
    if tag in ("clamp", "clamp_max"):  # where(lo <= x <= hi, grad, 0): a scalar, the compares, their and, where
        elems = k["B"] * k["H"]
        compares = 2 if tag == "clamp" else 1
        return [misc(n + ".bw_scalar", "mask", 8), *(misc(f"{n}.bw_cmp{i}", "mask", elems * (F32 + 1))
                                                      for i in range(compares)),
                *([misc(n + ".bw_and", "mask", 3 * elems)] if tag == "clamp" else []),
                vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "nll":  # zero-filled (tokens, V) gradient with one scatter
        return [misc(n + ".bw", "copy", k["B"] * k["H"] * F32)]
    if op == "linear":  # plain mm calls (the `mm` form)
        M, N, K = k["M"], k["N"], k["K"]
        out = [_k(n + ".dX", "linear", 1, M, K, N), _k(n + ".dW", "linear", 1, K, M, N)]
        if k["bias"]:
            out.append(misc(n + ".db", "reduce", M * K * F32))
        return out
    if op == "bmm":  # a grouped GEMM's two gradients are grouped GEMMs too (dX, and dW per expert)
        B, M, N, K, g = k["B"], k["M"], k["N"], k["K"], "grouped" if tag == "grouped" else ""
        return [_k(n + ".dA", "bmm", B, M, K, N, tag=g), _k(n + ".dB", "bmm", B, N, M, K, tag=g)]
    if op in ("softmax", "ln"):
        return [_k(n + ".bw", op, k["B"], H=2 * k["H"])]
    if op in ("add", "addu"):
        return []  # the gradient passes through
    if tag == "broadcast":  # the broadcast operand's gradient is a full-size product summed down to its shape
        prods = ["mul"] * 2 if op == "mul" else ["div", "div", "mulu", "mul", "div"]
        return [*(vec(f"{n}.bw{i}", o, k["B"], k["H"]) for i, o in enumerate(prods)),
                misc(n + ".bw_sum", "reduce", k["B"] * k["H"] * F32)]
    if tag == "rsqrt":  # d rsqrt(v) = -0.5 v^-1.5: pow, mul by -0.5, mul by the gradient, one value per row
        return [misc(f"{n}.bw{i}", "mask", k["nbytes"]) for i in range(3)]
    if op in ("mulu", "divu"):
        return [vec(n + ".bw", "mulu", k["B"], k["H"])]
    if op == "powu":  # grad * (e * x^(e-1)): pow, mul by e, mul by the gradient
        return [vec(n + ".bw", "powu", k["B"], k["H"]), vec(n + ".bw1", "mulu", k["B"], k["H"]),
                vec(n + ".bw2", "mul", k["B"], k["H"])]
    if op in ("mul", "div", "pow"):
        return [vec(n + ".bw", "mul", k["B"], k["H"]), vec(n + ".bw2", "mul", k["B"], k["H"])]
    if op in ("relu", "gelu", "tanh"):
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if op == "misc:gather":
        tokens_h = (k["nbytes"] / F32) / 2.0
        return [misc(n + ".bw", "embedding_bw", k["params"] * F32 + 3 * tokens_h * F32)]
    if op == "misc:reduce":
        return [misc(n + ".bw", "copy", 2 * k["nbytes"])]
    if op == "misc:cast":  # the gradient is cast back
        return [{**k, "name": n + ".bw"}]
    if tag == "gather":  # indexing that carries a gradient: a zero-filled gradient, then a scatter into it
        return [misc(n + ".bw_zeros", "mask", k["nbytes"] / 2), misc(n + ".bw", op.split(":", 1)[1], k["nbytes"])]
    if op == "misc:index":
        return [misc(n + ".bw", "index", k["nbytes"])]
    return []  # copies, masks and routing: no gradient kernels (views / integer tensors)


def accumulation_kernels(k: dict) -> list:
    """`.grad += g` for the parameters kernel `k` owns (one add over the parameter's elements)."""
    p = k.get("params", 0)
    if not p:
        return []
    if k["op"] == "linear":
        out = [vec(k["name"] + ".acc_w", "add", k["K"], k["N"])]
        if k["bias"]:
            out.append(vec(k["name"] + ".acc_b", "add", 1, k["K"]))
        return out
    if k["op"] == "ln":
        return [vec(k["name"] + ".acc_g", "add", 1, k["H"]), vec(k["name"] + ".acc_b", "add", 1, k["H"])]
    if k["op"] == "misc:gather":
        h = max(k["H"], 1)
        return [vec(k["name"] + ".acc", "add", max(p // h, 1), h)]
    return [vec(k["name"] + ".acc", "add", 1, p)]


#: LM heads whose weight is the embedding table when the config ties them (HF ties both)
TIED_HEADS = ("lm_head", "decoder")


def tensor_numels(kernels, tied_head: bool) -> list[int]:
    """Element counts of the parameter tensors `kernels` own, in `model.parameters()` order; with
    `tied_head` an LM head's weight is the embedding table's and is skipped (its bias is not)."""
    out = []
    for k in kernels:
        acc = accumulation_kernels(k)
        if tied_head and k["op"] == "linear" and k["name"] in TIED_HEADS:
            acc = acc[1:]
        out += [int(a["B"]) * int(a["H"]) for a in acc]
    return out


def param_numels(graph: ModelGraph) -> list[int]:
    """Element counts of every parameter tensor of the graph's model, in `model.parameters()` order."""
    tied = bool(graph.config.tied_embeddings)
    return [n for blk in graph.blocks for _ in range(blk.count) for n in tensor_numels(blk.kernels, tied)]


# ----------------------------------------------------------------------------------------------------
# kernel fusion (inference)
# ----------------------------------------------------------------------------------------------------

#: element-wise ops a fusing compiler merges into one kernel; `where` (tag) stays apart, as in the traced
#: fused graphs
POINTWISE = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh")
#: pointwise ops with a second full-size operand
BINARY_POINTWISE = ("add", "mul", "div", "pow")


def _fusible(k: dict) -> bool:
    return k["op"] in POINTWISE and k.get("tag", "") != "where"


def _external_inputs(chain: list) -> int:
    """Full-size tensors a fused chain reads besides its first input: the second operands of its binary
    ops, except those computed inside the chain (tag `internal`, e.g. GELU's x + 0.044715 x^3) and
    broadcast ones (tag `broadcast`, e.g. RMSNorm's per-row scale and per-column weight)."""
    return sum(1 for k in chain if k["op"] in BINARY_POINTWISE and k.get("tag", "") not in ("internal", "broadcast"))


def _fused_kernel(chain: list, anchor: dict | None = None) -> dict:
    """One kernel for `chain` (pointwise ops on one tensor shape), ending in the row-wise `anchor`
    (softmax or LayerNorm) when given. Intermediate tensors stay in registers, so the kernel streams its
    inputs once and writes one output: the anchor's kernel (or a unary / binary element-wise op) plus
    `extra_nbytes` for every further full-size input."""
    extra = _external_inputs(chain)
    rows, h = chain[0]["B"], chain[0]["H"]
    name = "+".join(k["name"] for k in chain + ([anchor] if anchor else []))
    if anchor is not None:
        base, more = anchor, extra
    else:
        base, more = vec(name, "add" if extra else "mulu", rows, h), max(extra - 1, 0)
    return {**base, "name": name, "tag": "fused", "extra_nbytes": more * rows * h * F32, "fp32": False,
            "params": sum(k.get("params", 0) for k in chain) + (anchor or {}).get("params", 0)}


def fuse_pointwise(kernels: list) -> list:
    """A block's forward kernels after vertical fusion, as a fusing compiler (torch.compile) runs them
    and as NeuSight's fused graphs record them (`results/opgraph/*-fusion.csv`):

      * a run of consecutive pointwise ops on one tensor shape becomes one kernel (GPT-2's eight-kernel
        GELU, BERT's scale + mask add);
      * such a run also folds into a following softmax or LayerNorm over the same rows (BERT's
        scale + mask + softmax, residual add + LayerNorm), unless its output has another consumer
        (tag `residual`: a pre-LN model's residual stream, read again by the next residual add);
      * GEMMs, copies, `where` and the misc kernels are left as they are and end a run;
      * dtype casts (`cast`) disappear: the compiler converts in registers, so a fused kernel reads
        and writes the model's dtype even where eager code upcasts.
    """
    out, chain = [], []

    def flush():
        if len(chain) == 1:
            out.append(chain[0])
        elif chain:
            out.append(_fused_kernel(chain))
        chain.clear()

    for k in kernels:
        if k["op"] == "misc:cast":
            continue
        same = bool(chain) and (k["B"], k["H"]) == (chain[-1]["B"], chain[-1]["H"])
        open_end = bool(chain) and chain[-1].get("tag", "") != "residual"
        if _fusible(k):
            if chain and not (same and open_end):
                flush()
            chain.append(k)
        elif k["op"] in ("softmax", "ln") and same and open_end:
            out.append(_fused_kernel(chain, k))
            chain.clear()
        else:
            flush()
            out.append(k)
    flush()
    return out


# ----------------------------------------------------------------------------------------------------
# families
# ----------------------------------------------------------------------------------------------------

def _attention_core(p, B, S, heads, hd, train, scale_op, mask_op, S_kv=None, dropout=True, softmax_fp32=False,
                    qk_fp32=False, layout=("q", "k", "v"), softcap=False, kv_groups=1, v_dim=None, sinks=False):
    """QK^T, scale, mask, softmax, dropout, AV, head merge: shared by every family.

    Every family hands bmm head-split views, (B, heads, S, hd) permuted out of (B, S, h): torch.matmul
    copies each of Q, K and V into a (B*heads, S, hd) batch before its bmm (OPT's `.contiguous()`
    and Llama's repeat_kv make the same copies explicitly), and the merged heads are copied back.
    These four `layout` copies each cost one more copy in the backward (the gradient is laid out
    back). Checked per layer with TorchDispatchMode on HF eager BERT, GPT-2, GPT-Neo, OPT and Llama
    (transformers 5.23): four clones in the forward, four in the backward (GPT-2 concatenates two
    of them). `dropout=False` for p = 0 (no kernel). `softmax_fp32`: softmax(x, dtype=float32).to(x.dtype)
    (Llama-style eager attention): in a half-precision model the softmax runs in fp32 between two casts;
    for fp16 input PyTorch's CUDA softmax reads the half scores itself (`half_to_float`), bf16 is cast
    first (ATen `softmax`). `qk_fp32` (GPT-Neo): q and k are cast to fp32 before QK^T, so their layout
    copies, the QK^T bmm, the mask and the softmax run in fp32, and the probabilities are cast back.
    `layout`: which of q, k, v arrive as views that need the copy (all but in Phi-3, `llama_layout_copies`).
    `softcap` (Gemma 2): the scaled scores are soft-capped, c * tanh(x / c), before the mask. `kv_groups`
    (grouped-query attention, heads per key/value head): the k and v copies are repeat_kv's, whose gradient
    is summed over each group (tag `repeat`). `v_dim`: the values' head width when it is not the keys'
    (DeepSeek's latent attention). `sinks` (GPT-OSS): a learned logit per head joins each row of scores
    before the softmax (`attention_scores`)."""
    S_kv = S if S_kv is None else S_kv
    vd = v_dim or hd
    bh = B * heads
    tok = B * S
    ks = [cast(f"{p}.q_to_fp32", tok * heads * hd), cast(f"{p}.k_to_fp32", B * S_kv * heads * hd)] if qk_fp32 else []
    if "q" in layout:
        ks.append(misc(f"{p}.q_copy", "copy", 2 * tok * heads * hd * F32, tag="layout", fp32=qk_fp32))
    kv_tag = "repeat" if kv_groups > 1 else "layout"
    if "k" in layout:
        ks.append(misc(f"{p}.k_copy", "copy", 2 * B * S_kv * heads * hd * F32, tag=kv_tag, fp32=qk_fp32))
    ks.append({**bmm(f"{p}.qk", bh, S, hd, S_kv), "fp32": qk_fp32})
    ks += attention_scores(p, bh * S, S_kv, scale_op, mask_op, softmax_fp32, qk_fp32, softcap, sinks and heads, train)
    if train and dropout:
        ks.append(vec(f"{p}.attn_dropout", "mul", bh * S, S_kv, tag="dropout"))
    if "v" in layout:
        ks.append(misc(f"{p}.v_copy", "copy", 2 * B * S_kv * heads * vd * F32, tag=kv_tag))
    ks.append(bmm(f"{p}.av", bh, S, S_kv, vd))
    ks.append(misc(f"{p}.merge_heads", "copy", 2 * tok * heads * vd * F32, tag="layout"))
    return mark_call(ks, B=B, S=S, S_kv=S_kv, heads=heads, kv_heads=heads // kv_groups, hd=hd, vd=vd, train=train)


def attention_scores(p, rows, width, scale_op, mask_op, softmax_fp32=False, qk_fp32=False, softcap=False,
                     sinks=0, train=False) -> list:
    """Scale, soft-cap, mask and softmax of (rows, width) attention scores, with `_attention_core`'s upcasts
    (`qk_fp32`: the scores are fp32 already; `softmax_fp32`: softmax(dtype=float32) between casts).
    `mask_op`: ops, or (op, tag) pairs; tag 'where' has a backward kernel, a mask add none. `sinks`
    (GPT-OSS, the number of heads): each row gains its head's sink logit (torch.cat), its maximum is
    subtracted, and the softmax runs over width + 1 (the sink's probability is dropped, a slice)."""
    ks = [vec(f"{p}.scale", scale_op, rows, width, fp32=qk_fp32)] if scale_op else []
    if softcap:
        ks += soft_cap(f"{p}.softcap", rows, width)
    for i, op in enumerate(mask_op):
        op, tag = op if isinstance(op, tuple) else (op, "")
        ks.append(vec(f"{p}.mask{i}", op, rows, width, tag=tag, fp32=qk_fp32))
    if sinks:  # the sink column is a parameter (one logit per head) broadcast to every row
        return ks + [_k(f"{p}.sink_cat", "misc:copy", nbytes=2 * rows * (width + 1) * F32, params=sinks,
                        tag="sink_cat"),
                     *grad_sums(f"{p}.sink_logits", rows, width + 1, 2, train),
                     misc(f"{p}.sink_max", "reduce", rows * (width + 1) * F32, tag="row_max"),
                     vec(f"{p}.sink_sub", "add", rows, width + 1, tag="sub_broadcast"),
                     vec(f"{p}.softmax", "softmax", rows, width + 1),
                     *slice_grads(f"{p}.sink_drop", rows, width + 1, 1, train)]
    if qk_fp32:
        return ks + [vec(f"{p}.softmax", "softmax", rows, width, fp32=True), cast(f"{p}.softmax_out", rows * width)]
    if softmax_fp32:
        return ks + [cast(f"{p}.softmax_in", rows * width, dtypes=("bf16",)),
                     vec(f"{p}.softmax", "softmax", rows, width, fp32=True), cast(f"{p}.softmax_out", rows * width)]
    return ks + [vec(f"{p}.softmax", "softmax", rows, width)]


def soft_cap(p, rows, width) -> list:
    """Gemma 2's soft-cap of (rows, width) scores or logits in eager HF: x / c, tanh, * c."""
    return [vec(f"{p}_div", "divu", rows, width), vec(f"{p}_tanh", "tanh", rows, width),
            vec(f"{p}_mul", "mulu", rows, width)]


def _activation(p, act, tok, f, train=False):
    act = act.lower()
    if act in ("gelu_new", "gelu_pytorch_tanh_eager", "gelu_fast"):
        # NewGELUActivation in eager: 0.5*x*(1+tanh(c*(x+0.044715*x^3))) = 8 kernels
        return [vec(f"{p}.gelu_{i}", op, tok, f, tag="internal" if op in BINARY_POINTWISE else "")
                for i, op in enumerate(("mulu", "powu", "mulu", "add", "mulu", "tanh", "addu", "mul"))] \
            + grad_sums(f"{p}.gelu_x", tok, f, 3, train)  # x: 0.5 * x, x ** 3 and x + 0.044715 * x ** 3
    if act in ("relu",):
        return [vec(f"{p}.relu", "relu", tok, f)]
    if act in ("gelu", "gelu_python", "gelu_pytorch_tanh", "silu", "swish"):
        return [vec(f"{p}.act", "gelu", tok, f)]
    raise InputError(f"unsupported activation {act!r}")


def _dropout(p, tok, h, train):
    return [vec(p, "mul", tok, h, tag="dropout")] if train else []


def grad_cat(p, elems, train):
    """The backward's torch.cat of the gradients of a chunked tensor (chunk's backward) of `elems`
    elements: one copy, launched in the backward only."""
    return [_k(f"{p}.grad_cat", "misc:copy", nbytes=2 * elems * F32, tag="grad_cat")] if train else []


def slice_grads(p, rows, width, parts, train):
    """The backward of `parts` equal slices of a (rows, width) tensor (ATen's slice_backward, e.g. RoPE's
    halves): each slice's gradient is copied into a zero-filled gradient of the whole tensor, two kernels
    launched in the backward only (autograd then adds the parts' gradients: `grad_sums`)."""
    if not train:
        return []
    return [k for i in range(parts) for k in (
        _k(f"{p}.slice{i}_zeros", "misc:mask", nbytes=rows * width * F32, tag="grad_zeros"),
        _k(f"{p}.slice{i}_copy", "misc:copy", nbytes=2 * rows * width // parts * F32, tag="grad_cat"))]


def grad_cast(p, elems, train):
    """A gradient cast to the model's half dtype in the backward only, over `elems` elements: an fp32 op
    that read a half-precision tensor (type promotion, no forward cast) hands it an fp32 gradient."""
    return [_k(f"{p}.grad_cast", "misc:cast", nbytes=2 * elems * F32, tag="grad_cast", dtypes=HALF_DTYPES)] \
        if train else []


def grad_sums(p, rows, h, readers, train, fp32=False):
    """The backward's sums of the gradients of a (rows, h) tensor that `readers` forward ops read:
    `readers - 1` adds, launched in the backward only (no forward kernel); `fp32`: the tensor is an
    upcast copy, so are its gradients."""
    return [_k(f"{p}.grad_sum{i}", "add", rows, H=h, tag="grad_sum", fp32=fp32)
            for i in range(readers - 1)] if train else []


def _gpt2(cfg: ModelConfig, B, S, train) -> list:
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    neo = cfg.family == "gpt_neo"
    pre = [misc("arange", "mask", S * 8), gather("wte", tok, h, V), gather("wpe", S, h, max(cfg.max_positions, S)),
           vec("embed_add", "add", tok, h, tag="residual"), *_dropout("embed_dropout", tok, h, train)]
    L = [*grad_sums("resid_in", tok, h, 2, train), ln("ln_1", tok, h)]
    if neo:
        L += [*grad_sums("ln_1_out", tok, h, 3, train), linear("q_proj", tok, h, h, bias=False),
              linear("k_proj", tok, h, h, bias=False), linear("v_proj", tok, h, h, bias=False)]
    else:
        L += [linear("c_attn", tok, h, 3 * h, conv1d=True)]
    # GPT-Neo's eager attention casts q and k to fp32 (`_attn`): QK^T, mask and softmax run in fp32
    L += _attention_core("attn", B, S, cfg.heads, cfg.head_dim, train,
                         scale_op=None if neo else "divu", mask_op=(("addu", "where"),), qk_fp32=neo)
    conv = not neo  # GPT-2's projections are Conv1D (addmm of x @ W), GPT-Neo's nn.Linear
    L += [linear("attn_proj", tok, h, h, conv1d=conv), *_dropout("resid_dropout", tok, h, train),
          vec("resid_add1", "add", tok, h, tag="residual"), *grad_sums("resid_mid", tok, h, 2, train),
          ln("ln_2", tok, h), linear("c_fc", tok, h, f, conv1d=conv),
          *_activation("mlp", cfg.activation, tok, f, train), linear("mlp_proj", tok, f, h, conv1d=conv),
          *_dropout("mlp_dropout", tok, h, train), vec("resid_add2", "add", tok, h, tag="residual")]
    post = [ln("ln_f", tok, h), linear("lm_head", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def rotary_dim(cfg: ModelConfig, default_fraction: float) -> int:
    """Width of each head that RoPE rotates: head_dim times the config's `rotary_pct` (GPT-NeoX) or
    `partial_rotary_factor` (top level, or in `rope_parameters` / `rope_scaling`), else `default_fraction`."""
    rope = cfg.raw.get("rope_parameters") or cfg.raw.get("rope_scaling") or {}
    fraction = cfg.raw.get("rotary_pct") or cfg.raw.get("partial_rotary_factor") or rope.get("partial_rotary_factor")
    return int(cfg.head_dim * float(fraction or default_fraction))


def neox_layout(cfg: ModelConfig) -> dict:
    """GPT-NeoX's options: rotated width per head (`rotary_pct`, 0.25 in Pythia), parallel residual,
    biases, and whether training launches dropout kernels (Pythia's dropouts are 0)."""
    return {"rotary_dim": rotary_dim(cfg, 0.25), "parallel": bool(cfg.raw.get("use_parallel_residual", True)),
            "bias": bool(cfg.raw.get("attention_bias", True)),
            "attn_dropout": float(cfg.raw.get("attention_dropout") or 0) > 0,
            "hidden_dropout": float(cfg.raw.get("hidden_dropout") or 0) > 0}


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
            misc(f"{p}_rope_pass", "copy", 2 * tok * heads * hd * F32),
            *grad_sums(f"{p}_rope_parts", tok, heads * hd, 2, train),
            *slice_grads(f"{p}_rope_parts", tok, heads * hd, 2 if rot < hd else 1, train)]  # no rest: one slice


def neox_rope(tok: int, heads: int, hd: int, rot: int, train: bool) -> list:
    """GPT-NeoX's RoPE on q and k (`cat_rope`)."""
    return cat_rope("q", tok, heads, hd, rot, train) + cat_rope("k", tok, heads, hd, rot, train)


def _gpt_neox(cfg: ModelConfig, B, S, train) -> list:
    """GPTNeoXForCausalLM (HF eager, TorchDispatchMode-counted): LayerNorm, a fused QKV GEMM whose output
    is chunked (its gradient is one concatenation), partial RoPE ending in a torch.cat (q and k come out
    contiguous: only v needs a layout copy), softmax in fp32, and with the parallel residual
    x + attn(ln1(x)) + mlp(ln2(x)) (two adds; x read by both norms and the sum)."""
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    o = neox_layout(cfg)
    pre = [gather("embed_in", tok, h, V), *_dropout("emb_dropout", tok, h, train and o["hidden_dropout"]),
           *causal_and_rotary_setup(B, S, o["rotary_dim"])]
    L = [*grad_sums("resid_in", tok, h, 3 if o["parallel"] else 2, train), ln("input_layernorm", tok, h),
         linear("query_key_value", tok, h, 3 * h, bias=o["bias"]), *grad_cat("qkv_out", tok * 3 * h, train),
         *neox_rope(tok, cfg.heads, cfg.head_dim, o["rotary_dim"], train)]
    L += _attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="mulu", mask_op=("addu",),
                         dropout=o["attn_dropout"], softmax_fp32=True, layout=("v",))
    L += [linear("dense", tok, h, h, bias=o["bias"]),
          *_dropout("attn_dropout_out", tok, h, train and o["hidden_dropout"])]
    mlp = [linear("dense_h_to_4h", tok, h, f), *_activation("mlp", cfg.activation, tok, f, train),
           linear("dense_4h_to_h", tok, f, h), *_dropout("mlp_dropout", tok, h, train and o["hidden_dropout"])]
    if o["parallel"]:
        L += [ln("post_attention_layernorm", tok, h), *mlp, vec("resid_add1", "add", tok, h, tag="residual"),
              vec("resid_add2", "add", tok, h, tag="residual")]
    else:
        L += [vec("resid_add1", "add", tok, h, tag="residual"), *grad_sums("resid_mid", tok, h, 2, train),
              ln("post_attention_layernorm", tok, h), *mlp, vec("resid_add2", "add", tok, h, tag="residual")]
    post = [ln("final_layer_norm", tok, h), linear("embed_out", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def _num_labels(cfg: ModelConfig) -> int:
    """Classifier width: the config's `num_labels` / `id2label`, else HF's default of 2."""
    n = cfg.raw.get("num_labels") or len(cfg.raw.get("id2label") or {}) or 2
    return int(n)


def _bert(cfg: ModelConfig, B, S, train) -> list:
    """BERT as NeuSight ran it: `inf` is BertForSequenceClassification (pooler + classifier), `train`
    is BertForPreTraining (pooler + MLM head over the vocabulary + NSP head); both per the traced graphs
    in NeuSight's `results/opgraph/bert_large-{inf,train}-*.csv`. RoBERTa's layers are BERT's
    (TorchDispatchMode, transformers 5.23); it counts position ids from the input ids, and trains as
    RobertaForMaskedLM (MLM head only)."""
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    roberta = cfg.family in ROBERTA_LIKE
    tt = int(cfg.raw.get("type_vocab_size", 1 if roberta else 2) or 1)
    pre = [misc("ones_mask", "mask", B * S * F32), misc("ext_mask_sub", "mask", 2 * B * S * F32),
           misc("ext_mask_mul", "mask", 2 * B * S * F32)]
    if roberta:  # position ids from the input ids: ne(pad), casts, cumsum, mul, add (8 tiny kernels)
        pre += [misc(f"positions_{i}", "mask", 2 * B * S * 8) for i in range(8)]
    pre += [gather("word_embeddings", tok, h, V), gather("token_type_embeddings", tok, h, tt),
            vec("embed_add1", "add", tok, h),
            gather("position_embeddings", tok if roberta else S, h, max(cfg.max_positions, S) + (2 if roberta else 0)),
            vec("embed_add2", "add", tok, h), ln("embed_ln", tok, h), *_dropout("embed_dropout", tok, h, train)]
    L = [*grad_sums("layer_in", tok, h, 4, train), linear("query", tok, h, h), linear("key", tok, h, h),
         linear("value", tok, h, h)]
    L += _attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="divu", mask_op=("addu",))
    L += [linear("attn_out", tok, h, h), *_dropout("attn_out_dropout", tok, h, train), vec("resid_add1", "add", tok, h),
          ln("attn_ln", tok, h), *grad_sums("attn_ln_out", tok, h, 2, train), linear("intermediate", tok, h, f),
          *_activation("mlp", cfg.activation, tok, f, train),
          linear("output", tok, f, h), *_dropout("out_dropout", tok, h, train), vec("resid_add2", "add", tok, h),
          ln("out_ln", tok, h)]
    mlm = [linear("transform", tok, h, h), *_activation("transform", cfg.activation, tok, h, train),
           ln("transform_ln", tok, h), linear("decoder", tok, h, V)]
    if train and roberta:  # RobertaForMaskedLM: the MLM head alone
        post = mlm
    elif train:  # BertForPreTraining: pooler, MLM transform + decoder over the vocabulary, NSP head
        post = [linear("pooler", B, h, h), vec("pooler_tanh", "tanh", B, h), *mlm, linear("seq_relationship", B, h, 2)]
    else:  # *ForSequenceClassification: the first token through dense + tanh (BERT's pooler), then the classifier
        post = [linear("pooler", B, h, h), vec("pooler_tanh", "tanh", B, h),
                linear("classifier", B, h, _num_labels(cfg))]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def opt_layout(cfg: ModelConfig) -> tuple[int, bool, bool]:
    """(embedding width, pre-LN, final LayerNorm) of an OPT config: OPT-350m embeds in
    `word_embed_proj_dim` (512) and projects in and out of the 1024-wide layers (`project_in`/
    `project_out`), and normalises after each residual add (`do_layer_norm_before=False`, no final
    LayerNorm); the other sizes are pre-LN with a final LayerNorm (unless `_remove_final_layer_norm`)."""
    proj = int(cfg.raw.get("word_embed_proj_dim") or cfg.hidden)
    pre_ln = bool(cfg.raw.get("do_layer_norm_before", True))
    return proj, pre_ln, pre_ln and not cfg.raw.get("_remove_final_layer_norm")


def _opt(cfg: ModelConfig, B, S, train) -> list:
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    proj, pre_ln, final_ln = opt_layout(cfg)
    pre = [gather("embed_tokens", tok, proj, V), misc("causal_full", "mask", S * S * F32),
           misc("causal_fill", "mask", 2 * S * S * F32)]
    pre += [misc(f"mask_{i}", "mask", 2 * B * S * S * F32) for i in range(5)]  # sub, to, masked_fill, bool, masked_fill
    pre += [misc(f"positions_{i}", "mask", 2 * B * S * 8) for i in range(6)]  # ones, long, cumsum, mul, sub, add
    if proj != h:
        pre.append(linear("project_in", tok, proj, h, bias=False))
    pre += [gather("embed_positions", tok, h, max(cfg.max_positions, S) + 2),
            vec("embed_add", "add", tok, h, tag="residual")]
    # pre-LN: the layer input feeds the LayerNorm and the residual add, the normed tokens q, k and v;
    # post-LN: the layer input (the previous layer's LayerNorm) feeds q, k, v and the residual add
    L = [*grad_sums("resid_in", tok, h, 2, train), ln("self_attn_ln", tok, h),
         *grad_sums("self_attn_ln_out", tok, h, 3, train)] if pre_ln else [*grad_sums("resid_in", tok, h, 4, train)]
    L += [linear("q_proj", tok, h, h), vec("q_scale", "mulu", tok, h), linear("k_proj", tok, h, h),
          linear("v_proj", tok, h, h)]
    L += _attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op=None,
                         mask_op=("add", ("addu", "where")), softmax_fp32=True)  # OPT's softmax(dtype=float32)
    L += [linear("out_proj", tok, h, h), *_dropout("attn_dropout_out", tok, h, train),
          vec("resid_add1", "add", tok, h, tag="residual")]
    L += [*grad_sums("resid_mid", tok, h, 2, train), ln("final_ln", tok, h)] if pre_ln \
        else [ln("self_attn_ln", tok, h), *grad_sums("resid_mid", tok, h, 2, train)]
    L += [linear("fc1", tok, h, f), *_activation("mlp", cfg.activation, tok, f, train), linear("fc2", tok, f, h),
          *_dropout("mlp_dropout", tok, h, train), vec("resid_add2", "add", tok, h, tag="residual")]
    if not pre_ln:
        L.append(ln("final_ln", tok, h))
    post = [ln("final_layer_norm", tok, h)] if final_ln else []
    if proj != h:
        post.append(linear("project_out", tok, h, proj, bias=False))
    post.append(linear("lm_head", tok, proj, V, bias=False))
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def _rms_norm(p, tok, h, train=False, unit_offset=False, fp32_weight=False):
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


def _switch_ff(p, cfg, tok, train):
    """T5's dense feed-forward (Switch's non-expert layers): wi, act, dropout, wo; gated (T5 v1.1):
    act(wi_0 x) * wi_1 x, the normed x read by both."""
    h, f = cfg.hidden, cfg.ffn
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *_rms_norm(f"{p}.norm", tok, h, train)]
    if cfg.gated_ffn:
        ks += [*grad_sums(f"{p}.norm_out", tok, h, 2, train), linear(f"{p}.wi_0", tok, h, f, bias=False),
               *_activation(p, cfg.activation, tok, f, train), linear(f"{p}.wi_1", tok, h, f, bias=False),
               vec(f"{p}.gate_mul", "mul", tok, f)]
    else:
        ks += [linear(f"{p}.wi", tok, h, f, bias=False), *_activation(p, cfg.activation, tok, f, train)]
    return ks + [*_dropout(f"{p}.drop_act", tok, f, train), linear(f"{p}.wo", tok, f, h, bias=False),
                 *_dropout(f"{p}.dropout", tok, h, train), vec(f"{p}.resid_add", "add", tok, h, tag="residual")]


def _switch_moe(p, cfg, B, S, train):
    h, f, E, tok = cfg.hidden, cfg.ffn, cfg.num_experts, B * S
    # top-1 routing with a per-sequence capacity: each expert takes at most `expert_capacity` tokens of
    # every sequence (HF's cumsum over the sequence), so ~B * min(capacity, S/E) tokens per expert
    per_expert = B * min(cfg.expert_capacity, max(1, -(-S // E)))
    # the normed tokens are read by the router and by every expert's gather
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *_rms_norm(f"{p}.norm", tok, h, train),
          *grad_sums(f"{p}.norm_out", tok, h, E + 1, train), linear(f"{p}.router", tok, h, E, bias=False),
          vec(f"{p}.router_softmax", "softmax", tok, E)]
    if train:
        ks.append(misc(f"{p}.jitter", "route", 3 * tok * h * F32))
    ks += [misc(f"{p}.route_{i}", "route", 4 * tok * E * 8) for i in range(5)]  # argmax, one_hot, cumsum, le, mul, max
    ks.append(misc(f"{p}.clone", "copy", 2 * tok * h * F32))
    for e in range(E):
        ks += [misc(f"{p}.e{e}.gather", "index", (2 * per_expert * h + tok) * F32),
               linear(f"{p}.e{e}.wi", per_expert, h, f, bias=False), *_activation(f"{p}.e{e}", cfg.activation, per_expert, f, train),
               *_dropout(f"{p}.e{e}.drop_act", per_expert, f, train),
               linear(f"{p}.e{e}.wo", per_expert, f, h, bias=False),
               misc(f"{p}.e{e}.scatter", "index", (2 * per_expert * h + tok) * F32)]
    ks += [vec(f"{p}.router_scale", "mul", tok, h), *_dropout(f"{p}.dropout", tok, h, train),
           vec(f"{p}.resid_add", "add", tok, h, tag="residual")]
    return ks


def _switch_attn(p, cfg, B, S, train, S_kv=None, kv_tok=None):
    h, tok, ad = cfg.hidden, B * S, cfg.attn_dim
    kv_tok = tok if kv_tok is None else kv_tok
    # self-attention reads the normed tokens three times; cross-attention reads the encoder output
    # twice (k, v) in every decoder layer
    reads = grad_sums(f"{p}.enc_out", kv_tok, h, 3, train) if p == "cross_attn" \
        else grad_sums(f"{p}.norm_out", tok, h, 3, train)
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *_rms_norm(f"{p}.norm", tok, h, train), *reads,
          linear(f"{p}.q", tok, h, ad, bias=False),
          linear(f"{p}.k", kv_tok, h, ad, bias=False), linear(f"{p}.v", kv_tok, h, ad, bias=False)]
    # T5's position bias (relative buckets or zeros, plus the padding mask) is a full (B, heads, S, S_kv)
    # tensor: `scores += position_bias` reads two score-sized tensors (NeuSight's trace: VECadd)
    ks += _attention_core(p, B, S, cfg.heads, cfg.head_dim, train, scale_op=None, mask_op=("add",), S_kv=S_kv)
    ks += [linear(f"{p}.o", tok, ad, h, bias=False), *_dropout(f"{p}.dropout", tok, h, train),
           vec(f"{p}.resid_add", "add", tok, h, tag="residual")]
    return ks


def _switch(cfg: ModelConfig, B, S, train) -> list:
    """Encoder-decoder with decoder length = encoder length = S (as NeuSight ran it)."""
    h, V, tok, n = cfg.hidden, cfg.vocab, B * S, cfg.heads
    bias_pre = [misc(f"relpos_{i}", "mask", 2 * S * S * 8) for i in range(10)]  # bucket arithmetic on (S, S)
    bias_pre += [gather("relpos_embedding", S * S, n, 32), misc("relpos_permute", "copy", 2 * S * S * n * F32),
                 misc("mask_add", "copy", 3 * B * n * S * S * F32)]
    # every layer of a stack adds the same (B, n, S, S) position bias to its scores, so autograd sums
    # its gradient over the stack's layers (it reaches the relative-attention embedding)
    enc_pre = [gather("embed_tokens", tok, h, V), *_dropout("enc_dropout", tok, h, train), *[
        {**k, "name": "enc." + k["name"]} for k in bias_pre],
        *grad_sums("enc.position_bias", B * n * S, S, cfg.layers, train)]
    # cross-attention's bias: zeros((1, n, S, S)) plus the encoder mask, built once (no gradient)
    dec_pre = [gather("dec_embed_tokens", tok, h, 0), *_dropout("dec_dropout", tok, h, train), *[
        {**k, "name": "dec." + k["name"]} for k in bias_pre], misc("dec.causal_mask", "mask", 4 * B * S * S * F32),
        *grad_sums("dec.position_bias", B * n * S, S, cfg.decoder_layers, train),
        misc("dec.cross_zeros", "mask", n * S * S * F32),
        misc("dec.cross_bias", "copy", (n * S * S + B * n * S * S) * F32)]

    def layer_counts(n_layers, step):
        sparse = sum(1 for i in range(n_layers) if step > 0 and (step == 1 or i % step == 1))
        return n_layers - sparse, sparse

    e_dense, e_sparse = layer_counts(cfg.layers, cfg.encoder_sparse_step)
    d_dense, d_sparse = layer_counts(cfg.decoder_layers, cfg.decoder_sparse_step)
    enc_attn = _switch_attn("self_attn", cfg, B, S, train)
    dec_attn = _switch_attn("self_attn", cfg, B, S, train) + _switch_attn("cross_attn", cfg, B, S, train)
    blocks = [Block("encoder_embeddings", 1, enc_pre, "pre")]
    if e_dense:
        blocks.append(Block("encoder_dense", e_dense, enc_attn + _switch_ff("ff", cfg, tok, train)))
    if e_sparse:
        blocks.append(Block("encoder_sparse", e_sparse, enc_attn + _switch_moe("moe", cfg, B, S, train)))
    blocks.append(Block("encoder_final", 1, [*_rms_norm("enc_final_norm", tok, h, train),
                                             *_dropout("enc_final_dropout", tok, h, train)], "post"))
    blocks.append(Block("decoder_embeddings", 1, dec_pre, "pre"))
    if d_dense:
        blocks.append(Block("decoder_dense", d_dense, dec_attn + _switch_ff("ff", cfg, tok, train)))
    if d_sparse:
        blocks.append(Block("decoder_sparse", d_sparse, dec_attn + _switch_moe("moe", cfg, B, S, train)))
    # a tied LM head first scales the decoder output by d_model ** -0.5 (T5 v1.0, Switch; not T5 v1.1)
    head = [*_rms_norm("dec_final_norm", tok, h, train), *_dropout("dec_final_dropout", tok, h, train),
            *([vec("tied_scale", "mulu", tok, h)] if cfg.tied_embeddings else []),
            linear("lm_head", tok, h, V, bias=False)]
    blocks.append(Block("head", 1, head, "post"))
    return blocks


def _rope(p, tok, width):
    """apply_rotary_pos_emb on one projection: x*cos, -x2 (half), cat(-x2, x1), rot*sin, sum."""
    return [vec(f"{p}_cos", "mul", tok, width, tag="constant"), vec(f"{p}_neg", "mulu", tok, width // 2),
            misc(f"{p}_cat", "copy", 2 * tok * width * F32), vec(f"{p}_sin", "mul", tok, width, tag="constant"),
            vec(f"{p}_add", "add", tok, width)]


def llama_variant(cfg: ModelConfig) -> dict:
    """What a llama-like family changes in Llama's layer (the prefill, training and decode graphs share it):
    biases on q/k/v (qwen2 and qwen2_moe, or `attention_bias`) and on the MLP (`mlp_bias`), an RMSNorm over
    each head of q and k before RoPE (qwen3, qwen3_moe and gemma3), Gemma's (1 + weight) norms and
    sqrt(hidden)-scaled embeddings, Gemma 2 and 3's sandwich norms (`sandwich`), Gemma 2's soft-capped scores
    and logits (`softcap`, `final_softcap`; HF's defaults when the keys are absent), a rotary table per layer
    type (gemma3), and Phi-3's fused q/k/v and gate/up GEMMs with RoPE on the first `partial_rotary_factor`
    of each head."""
    oss = cfg.family == "gpt_oss"
    qkv_bias = cfg.family == "qwen2" or bool(cfg.raw.get("attention_bias", oss))  # GptOssConfig: on by default
    if cfg.family == "qwen2_moe":  # Qwen2MoeConfig's own key, on by default
        qkv_bias = bool(cfg.raw.get("qkv_bias", True))
    gemma2 = cfg.family == "gemma2"
    return {"qkv_bias": qkv_bias,
            "mlp_bias": bool(cfg.raw.get("mlp_bias", False)),
            "qk_norm": cfg.family in ("qwen3", "qwen3_moe", "gemma3_text"),
            "gemma": cfg.family in GEMMA, "sandwich": cfg.family in SLIDING_GEMMA,
            "softcap": bool(cfg.raw.get("attn_logit_softcapping", 50.0 if gemma2 else None)),
            "final_softcap": bool(cfg.raw.get("final_logit_softcapping", 30.0 if gemma2 else None)),
            "rotary_tables": len(set(cfg.layer_types)) if cfg.family == "gemma3_text" else 1,
            "fused": cfg.family == "phi3", "oss": oss, "o_bias": oss and qkv_bias,
            "rotary_dim": rotary_dim(cfg, 1.0) if cfg.family == "phi3" else cfg.head_dim}


def second_rotary_table(cfg: ModelConfig, rows: int) -> list:
    """Gemma 3 with both layer types builds a rotary table per type (local and global theta): the second
    one's position cast, freqs, cat, cos, sin and two scalings, and in a half-precision model three casts
    (TorchDispatchMode, transformers 5.23; prefill and decode alike, over `rows` tokens)."""
    if llama_variant(cfg)["rotary_tables"] < 2:
        return []
    return [*(misc(f"rotary_local_{i}", "mask", 2 * rows * cfg.head_dim * F32) for i in range(7)),
            *(cast(f"rotary_local_cast_{i}", rows * cfg.head_dim) for i in range(3))]


def llama_layout_copies(cfg: ModelConfig) -> tuple:
    """Which of q, k, v eager attention copies into a contiguous batch (`_attention_core`'s `layout`).
    Phi-3's RoPE ends in a torch.cat, which leaves q and k contiguous: only repeat_kv's k (grouped-query)
    and the strided v slice of the fused output are copied (TorchDispatchMode, transformers 5.23)."""
    v = llama_variant(cfg)
    if not (v["fused"] or v["oss"]):  # GPT-OSS's RoPE also ends in a torch.cat
        return ("q", "k", "v")
    return ("k", "v") if cfg.num_kv_heads < cfg.heads else ("v",)


def llama_qkv(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """q/k/v projections, qwen3's per-head q/k norms, and RoPE on q and k over `tok` tokens."""
    v = llama_variant(cfg)
    h, hd = cfg.hidden, cfg.head_dim
    q_w, kv_w = cfg.heads * hd, cfg.num_kv_heads * hd
    if v["fused"]:  # Phi-3: one GEMM, q, k and v are slices of its output (the backward adds their gradients)
        ks = [linear("qkv_proj", tok, h, q_w + 2 * kv_w, bias=v["qkv_bias"]),
              *grad_sums("qkv_out", tok, q_w + 2 * kv_w, 3, train),
              *slice_grads("qkv_out", tok, q_w + 2 * kv_w, 3, train)]
    else:
        ks = [linear("q_proj", tok, h, q_w, bias=v["qkv_bias"]), linear("k_proj", tok, h, kv_w, bias=v["qkv_bias"]),
              linear("v_proj", tok, h, kv_w, bias=v["qkv_bias"])]
    if v["qk_norm"]:  # Qwen3RMSNorm (Gemma3RMSNorm) over head_dim, one row per token and head
        ks += [*_rms_norm("q_norm", tok * cfg.heads, hd, train, v["gemma"]),
               *_rms_norm("k_norm", tok * cfg.num_kv_heads, hd, train, v["gemma"])]
    if v["fused"]:  # Phi-3 rotates the first rotary_dim of each head and concatenates the rest back
        return ks + cat_rope("q", tok, cfg.heads, hd, v["rotary_dim"], train) \
            + cat_rope("k", tok, cfg.num_kv_heads, hd, v["rotary_dim"], train)
    if v["oss"]:  # GPT-OSS: RoPE on the two chunks of each head
        return ks + [*halves_rope("q_rope", tok, q_w, train, strided=False),
                     *halves_rope("k_rope", tok, kv_w, train, strided=False)]
    # RoPE reads x three times: x * cos, and its two halves in rotate_half
    return ks + [*_rope("q_rope", tok, q_w), *grad_sums("q_rope_x", tok, q_w, 3, train),
                 *slice_grads("q_rope_x", tok, q_w, 2, train),
                 *_rope("k_rope", tok, kv_w), *grad_sums("k_rope_x", tok, kv_w, 3, train),
                 *slice_grads("k_rope_x", tok, kv_w, 2, train)]


def llama_mlp(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """Gated MLP: gate and up projections (Phi-3: one GEMM, chunked), the activation times up, the down
    projection."""
    h, f = cfg.hidden, cfg.ffn
    v = llama_variant(cfg)
    bias = v["mlp_bias"]
    if v["fused"]:
        up = [linear("gate_up_proj", tok, h, 2 * f, bias=bias), *grad_cat("gate_up_out", tok * 2 * f, train)]
    else:
        up = [linear("gate_proj", tok, h, f, bias=bias), linear("up_proj", tok, h, f, bias=bias)]
    return [*up, *_activation("mlp", cfg.activation, tok, f, train), vec("mlp.gate_mul", "mul", tok, f),
            linear("down_proj", tok, f, h, bias=bias)]


def moe_block(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """A top-k MoE in place of the MLP (MOE_LLAMA families; HF eager, `experts_implementation="grouped_mm"`,
    transformers 5.23's default), over `tok` normed tokens.

    Router: a GEMM to one logit per expert, softmax in fp32, top-k, and (Mixtral always, Qwen with
    `norm_topk_prob`) the k weights divided by their sum. Mixtral keeps the weights in fp32, so in a
    half-precision model its weighted expert outputs and their sum over k are fp32 and cast back;
    Qwen casts the k weights to the model dtype. Experts: sort the (token, expert) pairs by expert,
    gather their tokens, count them per expert (histc, cumsum), the gate/up grouped GEMM, act(gate) * up,
    the down grouped GEMM, times the routing weight, un-permute (arange, index_put, gather) and sum over
    the k experts of each token. Qwen2-MoE adds a gated MLP every token passes through (the shared
    expert), scaled by sigmoid(x w) and added; DeepSeek-V3 routes with `deepseek_router` and adds its shared
    experts unscaled; GPT-OSS routes with a biased GEMM and a softmax over the k chosen logits, and its experts
    are `oss_experts`. Counted with TorchDispatchMode (`experiments/gpu/graph_trace.py`);
    the tiny integer bookkeeping kernels are `misc:route`. In the backward each gather (tag `gather`)
    zero-fills its gradient and scatters into it."""
    h, E, k, f, tok = cfg.hidden, cfg.num_experts, cfg.experts_per_token, cfg.expert_ffn, int(tok)
    mixtral = cfg.family == "mixtral"
    pairs = tok * k
    groups, rows = expert_groups(E, k, tok)
    fs = cfg.shared_ffn

    def route(name, nbytes, tag=""):
        return misc(f"moe.{name}", "route", nbytes, tag=tag)

    deepseek = cfg.family == "deepseek_v3"
    fp32_weights = mixtral or deepseek  # the k routing weights stay fp32, and so do the weighted outputs
    # router and gather, and the shared expert's gate and up projections (Qwen2-MoE: and its sigmoid gate)
    ks = [*grad_sums("moe.x", tok, h, 2 + (2 if deepseek else 3 if fs else 0), train)]
    if fs:
        ks += [linear("shared.gate_proj", tok, h, fs, bias=False), linear("shared.up_proj", tok, h, fs, bias=False),
               *_activation("shared", cfg.activation, tok, fs, train), vec("shared.gate_mul", "mul", tok, fs),
               linear("shared.down_proj", tok, fs, h, bias=False)]
    oss = cfg.family == "gpt_oss"
    if deepseek:
        ks += deepseek_router(cfg, tok, train)
    elif oss:  # GPT-OSS: logits with a bias, top-k of them, a softmax over the k (all in the model dtype)
        ks += [linear("moe.router", tok, h, E, bias=True),
               route("topk", tok * E * F32 + pairs * (F32 + 8), tag="gather"),
               vec("moe.router_softmax", "softmax", tok, k)]
    else:
        ks += [linear("moe.router", tok, h, E, bias=False),
               cast("moe.router_to_fp32", tok * E, dtypes=HALF_DTYPES if mixtral else ("bf16",)),
               vec("moe.router_softmax", "softmax", tok, E, fp32=True),
               route("topk", tok * E * F32 + pairs * (F32 + 8), tag="gather")]
    if mixtral or cfg.raw.get("norm_topk_prob", deepseek):  # the k weights are read by their sum and the division
        ks += [*grad_sums("moe.topk_w", tok, k, 2, train, fp32=True),
               misc("moe.topk_sum", "reduce", pairs * F32, fp32=True),
               *([misc("moe.topk_eps", "mask", 2 * tok * F32, fp32=True)] if deepseek else []),
               _k("moe.topk_norm", "div", tok, H=k, tag="broadcast", fp32=True)]
    if deepseek:  # DeepSeek scales the k weights by `routed_scaling_factor` and keeps them in fp32
        ks.append(vec("moe.routed_scale", "mulu", tok, k, fp32=True))
    elif not (mixtral or oss):
        ks.append(cast("moe.weights_to_half", pairs))
    ks += [route("sort", 3 * pairs * 8), route("token_of_pair", 2 * pairs * 8),
           misc("moe.gather_tokens", "index", 2 * pairs * h * F32 + pairs * 8, tag="gather"),
           route("weights_of_pair", pairs * (2 * F32 + 8), tag="gather"), route("ids_to_int", pairs * 12),
           route("histc", pairs * 4 + E * 4), route("offsets", 2 * E * 4),
           *(oss_experts(cfg, pairs, groups, rows, train) if oss else [
               grouped_gemm("experts.gate_up", groups, rows, h, 2 * f, E),
               *grad_cat("experts.gate_up_out", pairs * 2 * f, train),
               *_activation("experts", cfg.activation, pairs, f, train), vec("experts.gate_mul", "mul", pairs, f),
               grouped_gemm("experts.down", groups, rows, f, h, E)]),
           vec("moe.weight_mul", "mul", pairs, h, tag="broadcast", fp32=fp32_weights),
           *(grad_cast("moe.weight_mul", pairs * h, train) if fp32_weights else []),
           misc("moe.arange", "mask", pairs * 8), route("inverse_perm", 3 * pairs * 8),
           misc("moe.unpermute", "index", 2 * pairs * h * F32 + pairs * 8, tag="gather", fp32=fp32_weights),
           misc("moe.sum_k", "reduce", pairs * h * F32, fp32=fp32_weights)]
    if fp32_weights:
        ks.append(cast("moe.to_half", tok * h))
    if deepseek:
        ks.append(vec("moe.add_shared", "add", tok, h))
    elif fs:
        ks += [linear("shared.expert_gate", tok, h, 1, bias=False), vec("shared.sigmoid", "tanh", tok, 1),
               vec("shared.scale", "mul", tok, h, tag="broadcast"), vec("moe.add_shared", "add", tok, h)]
    return ks


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


def deepseek_router(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """DeepSeek-V3's router over `tok` tokens (DeepseekV3TopkRouter, transformers 5.23): the logits in fp32
    (x and the weight cast up in a half-precision model), a sigmoid, the score-correction bias, the best
    two scores of each of `n_group` groups summed, the `topk_group` best groups kept (a mask: zeros,
    scatter, expand, cast, not, masked_fill), top-k of the rest, and the chosen scores gathered, which is
    where the gradient flows (tag `gather`). Counted with TorchDispatchMode (`experiments/gpu/graph_trace.py`)."""
    h, E, k = cfg.hidden, cfg.num_experts, cfg.experts_per_token
    G = int(cfg.raw.get("n_group", 8))

    def route(name, nbytes, tag=""):
        return misc(f"moe.{name}", "route", nbytes, tag=tag)

    return [cast("moe.router_x_to_fp32", tok * h), cast("moe.router_w_to_fp32", E * h),
            {**linear("moe.router", tok, h, E, bias=False), "fp32": True},
            vec("moe.router_sigmoid", "tanh", tok, E, fp32=True), route("score_bias", 3 * tok * E * F32),
            route("group_top2", tok * E * F32 + tok * G * 2 * 12), route("group_sum", tok * G * 3 * F32),
            route("group_topk", tok * G * (F32 + 8)), route("group_zeros", tok * G * F32),
            route("group_scatter", tok * G * (F32 + 8)), route("group_expand", 2 * tok * E * F32),
            route("mask_to_bool", tok * E * 5), route("mask_not", 2 * tok * E),
            route("mask_fill", tok * E * (2 * F32 + 1)),
            route("topk", tok * E * F32 + tok * k * (F32 + 8)),
            misc("moe.gather_weights", "index", tok * E * F32 + tok * k * (F32 + 8), tag="gather", fp32=True)]


def mla_dims(cfg: ModelConfig) -> dict:
    """DeepSeek-V3's latent-attention widths: q_lora (0: one q_proj), kv_lora, nope, rope, v; interleaved RoPE."""
    raw = cfg.raw
    keys = {"kv_lora": "kv_lora_rank", "qk_nope": "qk_nope_head_dim", "qk_rope": "qk_rope_head_dim", "v": "v_head_dim"}
    return {"q_lora": int(raw.get("q_lora_rank", DEEPSEEK_DEFAULTS["q_lora_rank"]) or 0),
            "interleave": bool(raw.get("rope_interleave", True)),
            **{k: int(raw.get(key, DEEPSEEK_DEFAULTS[key])) for k, key in keys.items()}}


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


def mla_query_and_latent(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """The first half of DeepSeek-V3's latent attention over `tok` tokens (the prefill, training and decode
    graphs share it): the input norm, q through a low-rank `q_a_proj`, RMSNorm and `q_b_proj` (or one
    q_proj), the key/value latent and the shared rotary key from `kv_a_proj_with_mqa`, RMSNorm over the
    latent, RoPE on the rotated part of q and k, and q re-assembled (torch.cat). In the backward each split
    is a torch.cat of its parts' gradients and each head-split view a layout copy."""
    d = mla_dims(cfg)
    h, H = cfg.hidden, cfg.heads
    rope, r, qk = d["qk_rope"], d["kv_lora"], d["qk_nope"] + d["qk_rope"]
    bias = bool(cfg.raw.get("attention_bias", False))
    ks = [*grad_sums("resid_in", tok, h, 2, train), *_rms_norm("input_norm", tok, h, train),
          *grad_sums("input_norm_out", tok, h, 2, train)]
    if d["q_lora"]:
        ks += [linear("q_a_proj", tok, h, d["q_lora"], bias=bias), *_rms_norm("q_a_norm", tok, d["q_lora"], train),
               linear("q_b_proj", tok, d["q_lora"], H * qk, bias=False)]
    else:
        ks.append(linear("q_proj", tok, h, H * qk, bias=False))

    def rot(p, rows, w):
        if d["interleave"]:
            return halves_rope(p, rows, w, train)
        return [*_rope(p, rows, w), *grad_sums(f"{p}_x", rows, w, 3, train), *slice_grads(f"{p}_x", rows, w, 2, train)]

    return ks + [*grad_cat("q_split", tok * H * qk, train), *grad_cat("q_layout", tok * H * qk, train),
                 linear("kv_a_proj", tok, h, r + rope, bias=bias), *grad_cat("kv_a_split", tok * (r + rope), train),
                 *_rms_norm("kv_a_norm", tok, r, train), *rot("q_rope", tok, H * rope), *rot("k_rope", tok, rope),
                 misc("q_cat", "copy", 2 * tok * H * qk * F32)]


def mla_attention(cfg: ModelConfig, B: int, S: int, train: bool = False) -> list:
    """DeepSeek-V3's multi-head latent attention in HF eager code (DeepseekV3Attention, transformers 5.23),
    from the input norm to the post-attention norm: `mla_query_and_latent`, the latent expanded to every
    head's key and value (`kv_b_proj`), the keys assembled into a new tensor (two copies: the shared rotary
    key broadcast to every head, whose gradient is summed over the heads), then eager attention with
    (nope + rope)-wide keys and v_head_dim-wide values."""
    d = mla_dims(cfg)
    h, H, tok = cfg.hidden, cfg.heads, B * S
    nope, rope, v, r = d["qk_nope"], d["qk_rope"], d["v"], d["kv_lora"]
    qk = nope + rope
    bias = bool(cfg.raw.get("attention_bias", False))
    ks = [*mla_query_and_latent(cfg, tok, train),
          linear("kv_b_proj", tok, r, H * (nope + v), bias=False),
          *grad_cat("kv_b_layout", tok * H * (nope + v), train), *grad_cat("kv_b_split", tok * H * (nope + v), train),
          misc("k_nope_copy", "copy", 2 * tok * H * nope * F32),
          misc("k_rope_copy", "copy", 2 * tok * H * rope * F32, tag="broadcast_copy"),
          # autograd's copies for the two slot copies into the new key tensor (CopySlices): the key gradient
          # twice, each slot's part, and the zeroed rotary slot
          *(k for n, w in (("key_a", qk), ("rope", rope), ("rope_zero", rope), ("rope_in", rope), ("key_b", qk),
                           ("nope", nope)) for k in grad_cat(f"k_slots.{n}", tok * H * w, train))]
    core = _attention_core("attn", B, S, H, qk, train, scale_op="mulu", mask_op=("addu",), dropout=False,
                           softmax_fp32=True, layout=("v",), v_dim=v)
    # v is a slice of kv_b_proj's output: its gradient reaches the split's torch.cat, no layout copy of its own
    ks += [{**k, "tag": ""} if k["name"] == "attn.v_copy" else k for k in core]
    return ks + [linear("o_proj", tok, H * v, h, bias=bias), vec("resid_add1", "add", tok, h, tag="residual"),
                 *grad_sums("resid_mid", tok, h, 2, train), *_rms_norm("post_norm", tok, h, train)]


def _deepseek(cfg: ModelConfig, B, S, train) -> list:
    """DeepseekV3ForCausalLM (HF eager): Llama's embeddings, mask, rotary table and head around layers of
    multi-head latent attention (`mla_attention`) and a dense MLP (the first `first_k_dense_replace`,
    block `dense_layer`) or the top-k MoE with its shared experts (`moe_block`, block `layer`)."""
    h, V, tok = cfg.hidden, cfg.vocab, B * S
    pre = [gather("embed_tokens", tok, h, V), *causal_and_rotary_setup(B, S, mla_dims(cfg)["qk_rope"])]
    post = [*_rms_norm("final_norm", tok, h, train), linear("lm_head", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, mla_attention(cfg, B, S, train), tok, train),
            Block("head", 1, post, "post")]


def llama_layer_blocks(cfg: ModelConfig, attn: list, tok: int, train: bool = False,
                       sliding_attn: list | None = None) -> list:
    """The repeated layers of a llama-like decoder (the prefill, training and decode graphs share them):
    `attn` (the layer up to its post-attention norm), then the MLP over `tok` tokens (Gemma 2 and 3: and its
    norm) and the residual add. A MOE_LLAMA family's sparse layers (block `layer`) run `moe_block`, its dense
    ones (`dense_layer`) the gated MLP. `sliding_attn`: the attention of the sliding-window layers where it
    differs from the full layers' (a decode step's shorter cache; block `sliding_layer`)."""
    h = cfg.hidden
    v = llama_variant(cfg)
    end = [*(_rms_norm("post_ffw_norm", tok, h, train, True) if v["sandwich"] else []),
           vec("resid_add2", "add", tok, h, tag="residual")]
    # the normed x feeds gate and up (Phi-3: one fused GEMM)
    dense = [*grad_sums("post_norm_out", tok, h, 1 if v["fused"] else 2, train), *llama_mlp(cfg, tok, train)]
    sparse = cfg.sparse_layers
    if sliding_attn is not None:  # Gemma 2 and 3 (dense) and GPT-OSS (every layer sparse)
        n = cfg.layer_types.count("sliding_attention")
        mlp = moe_block(cfg, tok, train) if sparse else dense
        layers = [Block("layer", cfg.layers - n, attn + mlp + end, "layer"),
                  Block("sliding_layer", n, sliding_attn + mlp + end, "layer")]
        return [b for b in layers if b.count]
    if not sparse:
        return [Block("layer", cfg.layers, attn + dense + end, "layer")]
    layers = [Block("layer", sparse, attn + moe_block(cfg, tok, train) + end, "layer"),
              Block("dense_layer", cfg.layers - sparse, attn + dense + end, "layer")]
    return [b for b in layers if b.count]


def _llama(cfg: ModelConfig, B, S, train) -> list:
    """LlamaForCausalLM-style decoder (HF eager): RMSNorm, RoPE, grouped-query attention, gated MLP (a
    top-k MoE in the sparse layers of MOE_LLAMA families: block `layer`, their dense layers `dense_layer`).
    No dropout kernels (attention_dropout = 0); the families' changes are `llama_variant`'s."""
    h, V, tok = cfg.hidden, cfg.vocab, B * S
    v = llama_variant(cfg)
    gemma = v["gemma"]
    # embeddings, the causal mask (full, triu, arange compare, mul, expand+clone) and the rotary tables
    pre = [gather("embed_tokens", tok, h, V), *([vec("embed_scale", "mulu", tok, h)] if gemma else []),
           *causal_and_rotary_setup(B, S, cfg.head_dim),
           *[misc(f"sliding_mask_{i}", "mask", 2 * S * S * F32)
             for i in range(SLIDING_MASK_KERNELS.get(cfg.family, 0))],
           *second_rotary_table(cfg, tok)]
    oss = v["oss"]
    attn = [*grad_sums("resid_in", tok, h, 2, train), *_rms_norm("input_norm", tok, h, train, gemma, oss),
            *grad_sums("input_norm_out", tok, h, 1 if v["fused"] else 3, train), *llama_qkv(cfg, tok, train)]
    attn += _attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="mulu", mask_op=("addu",),
                            dropout=False, softmax_fp32=not v["oss"], layout=llama_layout_copies(cfg),
                            softcap=v["softcap"], kv_groups=cfg.heads // cfg.num_kv_heads, sinks=v["oss"])
    if v["oss"] or v["fused"]:  # RoPE ends in a torch.cat: q's (and without grouped-query, k's) gradient is
        # laid back out of the head-split view by a copy of its own
        attn += grad_cat("q_layout", tok * cfg.heads * cfg.head_dim, train)
        if cfg.num_kv_heads == cfg.heads:
            attn += grad_cat("k_layout", tok * cfg.heads * cfg.head_dim, train)
    attn += [linear("o_proj", tok, cfg.heads * cfg.head_dim, h, bias=v["o_bias"]),
             *(_rms_norm("post_attn_norm", tok, h, train, True) if v["sandwich"] else []),
             vec("resid_add1", "add", tok, h, tag="residual"),
             *grad_sums("resid_mid", tok, h, 2, train), *_rms_norm("post_norm", tok, h, train, gemma, oss)]
    post = [*_rms_norm("final_norm", tok, h, train, gemma, oss), linear("lm_head", tok, h, V, bias=False),
            *(soft_cap("logit_softcap", tok, V) if v["final_softcap"] else [])]
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, attn, tok, train),
            Block("head", 1, post, "post")]


#: one decode step's blocks by family, (cfg, batch, seq) -> blocks: `hybridperf.graphs.decode` builds them
#: from this module's layers and registers them here (the package imports it), so this module does not
#: import it back
DECODE_BUILDERS: dict = {}

_FAMILIES = {"gpt2": _gpt2, "gpt_neo": _gpt2, "gpt_neox": _gpt_neox, "bert": _bert, **{f: _bert for f in ROBERTA_LIKE},
             "opt": _opt,
             "switch_transformers": _switch, "t5": _switch,
             **{f: _llama for f in LLAMA_LIKE}, "deepseek_v3": _deepseek}


def loss_kernels(cfg: ModelConfig, B, S) -> list:
    """Cross-entropy over the vocabulary: log_softmax + nll (their backward follows the usual rules).
    A causal LM's loss (HF's ForCausalLMLoss) first casts the logits to fp32, so in a half-precision
    model the loss runs in fp32; BERT's and Switch's CrossEntropyLoss takes the logits as they are."""
    tok, V = B * S, cfg.vocab
    upcast = cfg.family in CAUSAL_LM
    return [*([cast("logits_to_fp32", tok * V)] if upcast else []), vec("log_softmax", "softmax", tok, V, fp32=upcast),
            _k("nll", "misc:mask", tok, H=V, nbytes=tok * 16, tag="nll", fp32=upcast)]


def build_graph(config, batch: int, seq: int, mode: str = "inf", dtype: str = "fp32", fused: bool = False,
                optimizer: str | None = None, recompute: bool = False, attn: str = "eager",
                amp: bool = False) -> ModelGraph:
    """The kernel graph of one forward (`inf`) or forward+backward (`train`) pass, or of one decode step
    (`decode`: `batch` sequences, one new token each, `seq` tokens in the cache), every float tensor
    in `dtype` (fp32 as NeuSight measured; fp16/bf16 = the model cast to that dtype, GEMMs on tensor
    cores, and fp32 where HF's eager code upcasts: RMSNorm, Llama's and OPT's softmax, GPT-Neo's QK^T and
    softmax, a causal LM's loss; not mixed-precision autocast). `fused`: pointwise chains fused as a
    compiler does (`fuse_pointwise`, NeuSight's `-fusion` runs); inference only. `optimizer` (train only): add the
    optimizer step (`hybridperf.graphs.optimizer`; its kernels depend on the device, so the composition
    adds them). `recompute` (train only): activation checkpointing of every transformer layer. `attn`: the
    attention implementation (`hybridperf.graphs.attention`; this graph's default is eager, a request's sdpa).
    `amp`: an fp32 model under bf16 autocast (`hybridperf.graphs.amp`)."""
    cfg = load_config(config)
    impl = attention_impl(attn)
    dtype = dtype_key(dtype)
    if dtype not in MODEL_DTYPES:
        raise InputError(f"model dtype must be one of {', '.join(MODEL_DTYPES)}, got {dtype!r}")
    if amp and dtype != "fp32":
        raise InputError(f"--amp runs an fp32 model under bf16 autocast; the model dtype must be fp32, got {dtype}")
    if amp and fused:
        raise InputError("--amp is modelled for eager execution, not with --fused")
    if amp:
        dtype = "bf16"  # the graph's kernels in bf16, rewritten per kernel below
    for v, what in ((batch, "batch"), (seq, "seq")):
        if isinstance(v, bool) or not isinstance(v, (int,)) and not (isinstance(v, float) and v.is_integer()):
            raise InputError(f"{what} must be a positive integer, got {v!r}")
        if int(v) < 1:
            raise InputError(f"{what} must be >= 1, got {v}")
    batch, seq = int(batch), int(seq)
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    positions = seq + 1 if mode == "decode" else seq  # a decode step's new token takes position seq
    if cfg.max_positions and positions > cfg.max_positions and cfg.family in POSITION_LIMITED:
        raise InputError(f"{'seq + 1' if mode == 'decode' else 'seq'} = {positions} exceeds the model's maximum of "
                         f"{cfg.max_positions} positions")
    train = mode == "train"
    if fused and mode != "inf":
        raise InputError("fused kernels are modelled for inference only (--mode inf); training and decode run eager")
    if optimizer is not None:
        if not train:
            raise InputError("an optimizer step belongs to training (--mode train)")
        optimizer_spec(optimizer)  # InputError for an unknown name
        optimizer = str(optimizer).strip().lower()
    if recompute and not train:
        raise InputError("activation recomputation belongs to training (--mode train)")
    if mode == "decode":
        if cfg.family not in DECODE_BUILDERS:
            raise InputError(f"a decode step needs a decoder-only causal LM ({', '.join(DECODE_BUILDERS)}); "
                             f"{cfg.family} has none")
        blocks = DECODE_BUILDERS[cfg.family](cfg, batch, seq)
    else:
        blocks = _FAMILIES[cfg.family](cfg, batch, seq, train)
    blocks = impl.rewrite(blocks, cfg, dtype, mode)
    if train:
        blocks.append(Block("loss", 1, loss_kernels(cfg, batch, seq), "post"))
    if amp:
        from hybridperf.graphs.amp import amp_blocks

        blocks = amp_blocks(blocks)
    if fused:
        blocks = [Block(b.name, b.count, fuse_pointwise(b.kernels), b.kind) for b in blocks]
    return ModelGraph(cfg, batch, seq, mode, blocks, dtype, fused=bool(fused), optimizer=optimizer,
                      recompute=bool(recompute), amp=bool(amp), attn=impl.name)


def layer_gemms(config, batch: int, seq: int, mode: str = "inf", block: str = "layer") -> pd.DataFrame:
    """The GEMMs (linear and bmm rows) of one repeated layer block, forward and backward."""
    g = build_graph(config, batch, seq, mode)
    t = g.kernel_table()
    t = t[(t["block"] == block) & t["op"].isin(("linear", "bmm"))].copy()
    t["flops"] = 2.0 * t["B"] * t["M"] * t["N"] * t["K"]
    return t.reset_index(drop=True)
