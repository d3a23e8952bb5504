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
    misc:strided       a kernel on PyTorch's unvectorised path (generic strided torch.cat, misaligned softmax)
    misc:reduce        a reduction (bias gradient = sum over tokens, T5 LayerNorm variance): read once
    misc:mask          building attention masks / position ids (arange, full, cumsum, masked_fill, ...)
    misc:route         MoE routing bookkeeping (argmax, one_hot, cumsum, capacity mask, max)
    misc:index         boolean-mask gather/scatter of the tokens routed to one expert

A model is a list of `Block`s (embeddings, repeated layer types, head), each a forward kernel list with a
repeat `count`; pipeline or tensor parallel variants can partition or rescale blocks. Each family's blocks
come from its module in `hybridperf.graphs.families` (one `Family` declaration each), built from the shared
layers of `hybridperf.graphs.layers`; the backward's rules are `hybridperf.graphs.backward`'s.
`build_graph(..., fused=True)` runs each block through `fuse_pointwise` (inference as a fusing compiler
runs it, NeuSight's `-fusion` runs).
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from hybridperf.devices import dtype_key
from hybridperf.errors import InputError
from hybridperf.graphs import families  # noqa: F401  registers every family module
from hybridperf.graphs.attention import attention_impl
from hybridperf.graphs.backward import tensor_numels  # noqa: F401  (re-exported: this module's former contents)
from hybridperf.graphs.config import ModelConfig, check_positions, load_config, model_dtype  # noqa: F401
from hybridperf.graphs.decode import CACHE_LAYOUTS, static_cache, strided_cache
from hybridperf.graphs.family import decode_families, family_of
from hybridperf.graphs.fusion import fuse_pointwise
from hybridperf.graphs.optimizer_specs import optimizer_spec
from hybridperf.graphs.model_graph import (KERNEL_COLUMNS, LAUNCHES, MODES, ModelGraph, kernel_group,  # noqa: F401
                                           param_numels)  # noqa: F401  (re-exported)
from hybridperf.graphs.primitives import (F32, MODEL_DTYPES, Block, _k, cast,  # noqa: F401
                                         expert_groups, linear, ln, vec)

def loss_kernels(cfg: ModelConfig, B, S) -> list:
    """Cross-entropy over the vocabulary: log_softmax + nll (their backward follows the usual rules).
    A causal LM's loss (HF's ForCausalLMLoss) first casts the logits to fp32, so in a half-precision
    model the loss runs in fp32; BERT's and Switch's CrossEntropyLoss takes the logits as they are."""
    tok, V = B * S, cfg.vocab
    upcast = family_of(cfg.family).causal_lm
    return [*([cast("logits_to_fp32", tok * V)] if upcast else []), vec("log_softmax", "softmax", tok, V, fp32=upcast),
            _k("nll", "misc:mask", tok, H=V, nbytes=tok * 16, tag="nll", fp32=upcast)]


def build_graph(config, batch: int, seq: int, mode: str = "inf", dtype: str | None = "fp32", fused: bool = False,
                optimizer: str | None = None, recompute: bool = False, attn: str = "eager",
                amp: bool = False, launch: str = "eager", cache: str = "contiguous") -> ModelGraph:
    """The kernel graph of one forward (`inf`) or forward+backward (`train`) pass, or of one decode step
    (`decode`: `batch` sequences, one new token each, `seq` tokens in the cache), every float tensor
    in `dtype` (None: the one transformers builds the config in, `config.model_dtype`, as `predict-model`
    defaults it; fp32 as NeuSight measured; fp16/bf16 = the model cast to that dtype, GEMMs on tensor
    cores, and fp32 where HF's eager code upcasts: RMSNorm, Llama's and OPT's softmax, GPT-Neo's QK^T and
    softmax, a causal LM's loss; not mixed-precision autocast). `fused`: pointwise chains fused as a
    compiler does (`fuse_pointwise`, NeuSight's `-fusion` runs); inference only. `optimizer` (train only): add the
    optimizer step (`hybridperf.graphs.optimizer`; its kernels depend on the device, so the composition
    adds them). `recompute` (train only): activation checkpointing of every transformer layer. `attn`: the
    attention implementation (`hybridperf.graphs.attention`; this graph's default is eager, a request's sdpa).
    `amp`: an fp32 model under bf16 autocast (`hybridperf.graphs.amp`). `launch`: eager or graph
    (`model_graph.LAUNCHES`; a graph-launched decode step writes a static cache, `decode.static_cache`). `cache`
    (decode): the dynamic cache's layout, `decode.CACHE_LAYOUTS` (strided: cropped back between steps)."""
    cfg = load_config(config)
    if dtype is None:
        dtype = model_dtype(cfg, None, amp)[0]
    key = str(launch).strip().lower()
    if key not in LAUNCHES:
        raise InputError(f"unknown launch {launch!r}; one of {', '.join(LAUNCHES)}")
    launch = key
    if cache not in CACHE_LAYOUTS:
        raise InputError(f"unknown cache layout {cache!r}; one of {', '.join(CACHE_LAYOUTS)}")
    if cache != "contiguous" and (mode != "decode" or launch == "graph"):
        raise InputError("a strided cache belongs to an eager decode step (--mode decode; a CUDA graph writes a "
                         "static cache)")
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
    family = family_of(cfg.family)
    if mode == "decode" and family.decode is None:  # before the position limit: no length helps a non-causal LM
        raise InputError(f"a decode step needs a decoder-only causal LM ({', '.join(decode_families())}); "
                         f"{cfg.family} has none")
    if mode == "train" and not family.trains:
        raise InputError(f"training {cfg.family} is not modelled (its backward is not counted); inf and decode are")
    if family.position_limited:  # a decode step's new token takes position seq
        positions, what = (seq + 1, "seq + 1") if mode == "decode" else (seq, "seq")
        check_positions(positions, cfg.max_positions, what)
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
        blocks = family.decode(cfg, batch, seq)
        if launch == "graph":
            blocks = static_cache(blocks)
        elif cache == "strided":
            blocks = strided_cache(blocks)
    else:
        blocks = family.forward(cfg, batch, seq, train)
    # transformers turns the key/value cache off under gradient checkpointing, as a config's use_cache false does
    no_cache = dataclasses.replace(cfg, raw={**cfg.raw, "use_cache": False}) if recompute else cfg
    blocks = impl.rewrite(blocks, no_cache, dtype, mode)
    if train:
        blocks.append(Block("loss", 1, loss_kernels(cfg, batch, seq), "post"))
    if amp:
        from hybridperf.graphs.amp import amp_blocks

        blocks = amp_blocks(blocks)
    if fused:
        blocks = [Block(b.name, b.count, fuse_pointwise(b.kernels), b.kind) for b in blocks]
    return ModelGraph(cfg, batch, seq, mode, blocks, dtype, fused=bool(fused), optimizer=optimizer,
                      recompute=bool(recompute), amp=bool(amp), attn=impl.name, launch=launch)


def layer_gemms(config, batch: int, seq: int, mode: str = "inf", block: str = "layer") -> pd.DataFrame:
    """The GEMMs (linear and bmm rows) of one repeated layer block, forward and backward."""
    g = build_graph(config, batch, seq, mode)
    t = g.kernel_table()
    t = t[(t["block"] == block) & t["op"].isin(("linear", "bmm"))].copy()
    t["flops"] = 2.0 * t["B"] * t["M"] * t["N"] * t["K"]
    return t.reset_index(drop=True)
