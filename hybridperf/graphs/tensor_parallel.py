"""Tensor and pipeline parallelism of one GPU's graph (Megatron-style): the validation of a parallel layout, each
kernel's share on a tensor-parallel rank, and the parameters a pipeline stage holds (`hybridperf.graphs.parallel`
composes them into a step time)."""
from __future__ import annotations

import numpy as np

from hybridperf.errors import InputError
from hybridperf.graphs.attention import attn_spec, parse_spec
from hybridperf.graphs.config import ModelConfig, load_config
from hybridperf.graphs.family import FAMILIES
from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.model_graph import MODES, ModelGraph
from hybridperf.graphs.primitives import Block
from hybridperf.ops import FUSED_OPS


#: model_types with a tensor/pipeline-parallel model (`Family.tensor_parallel`; a top-k MoE's experts are not
#: sharded: data parallel only)
TP_FAMILIES = tuple(n for n, f in FAMILIES.items() if n in f.tensor_parallel)


# Kernel roles under tensor parallelism, by kernel name (see the builders of hybridperf.graphs.families).
_COLUMN = {"c_attn", "q_proj", "k_proj", "v_proj", "c_fc", "query", "key", "value", "intermediate", "fc1",
           "gate_proj", "up_proj", "qkv_proj", "gate_up_proj", "query_key_value", "dense_h_to_4h"}


_ROW = {"attn_proj", "mlp_proj", "attn_out", "output", "out_proj", "fc2", "o_proj", "down_proj", "dense",
        "dense_4h_to_h"}


#: elementwise on a (sharded) projection's output: RoPE (with GPT-NeoX's and Phi-3's pass-through cats) and
#: the backward's sum or concatenation of a fused projection's output gradients
_SPLIT_H = ("q_scale", "q_rope_", "k_rope_", "qkv_out.", "gate_up_out.")


_ATTN_PREFIX = ("attn.", "q_norm.", "k_norm.")  # attention_core and per-head norm kernels: heads / tp


_MLP_PREFIX = "mlp."  # the MLP activation: ffn / tp columns


_VOCAB_TABLE = {"wte", "word_embeddings", "embed_tokens", "embed_in"}


_VOCAB_HEAD = {"lm_head", "decoder", "embed_out"}


_VOCAB_LOSS = {"log_softmax", "nll"}


#: elementwise work on the logits, on each rank's vocabulary slice: Gemma 2's soft-cap, Granite's scaling
_VOCAB_LOGITS = ("logit_softcap_", "logits_scaling")


def _pos_int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (isinstance(v, float) and v.is_integer()):
        raise InputError(f"{what} must be a positive integer, got {v!r}")
    if int(v) < 1:
        raise InputError(f"{what} must be >= 1, got {v}")
    return int(v)


def default_microbatches(per_rank_batch: int, pp: int) -> int:
    """The largest divisor of the per-rank batch that is <= pp (pp when it divides; 1 without pipeline)."""
    for m in range(min(pp, per_rank_batch), 0, -1):
        if per_rank_batch % m == 0:
            return m
    return 1


def refuse_decode(mode: str) -> None:
    """InputError for a parallel decode step: the decode graph is one GPU's."""
    if mode == "decode":
        raise InputError("a decode step is modelled on one GPU; --dp/--tp/--pp are not supported with --mode decode")


def validate(cfg: ModelConfig, batch: int, mode: str, dp: int, tp: int, pp: int, microbatches) -> int:
    """Check the parallel configuration; returns the number of micro-batches. InputError otherwise."""
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    refuse_decode(mode)
    if batch % dp:
        raise InputError(f"batch {batch} is not divisible by dp={dp} (batch is the global batch)")
    per_rank = batch // dp
    m = default_microbatches(per_rank, pp) if microbatches is None else _pos_int(microbatches, "microbatches")
    if per_rank % m:
        raise InputError(f"per-rank batch {per_rank} (= batch {batch} / dp {dp}) is not divisible by "
                         f"{m} micro-batches")
    if (tp > 1 or pp > 1) and cfg.family not in TP_FAMILIES:
        raise InputError(f"tensor/pipeline parallelism is modelled for {', '.join(TP_FAMILIES)}; "
                         f"{cfg.family} supports dp only (tp=pp=1)")
    if tp > 1:
        for n, what in ((cfg.heads, "attention heads"), (cfg.num_kv_heads, "key/value heads"),
                        (cfg.hidden, "hidden size"), (cfg.ffn, "FFN width")):
            if n % tp:
                raise InputError(f"tp={tp} does not divide the model's {what} ({n})")
    if pp > 1 and cfg.layers % pp:
        raise InputError(f"pp={pp} does not divide the model's {cfg.layers} layers")
    return m


ZERO_STAGES = (0, 1, 2, 3)


def validate_zero(zero, mode: str, dp: int, pp: int, optimizer) -> int:
    """Check a ZeRO stage against the run; returns it as an int. InputError otherwise."""
    if isinstance(zero, bool) or zero not in ZERO_STAGES:
        raise InputError(f"zero must be one of 0, 1, 2, 3, got {zero!r}")
    zero = int(zero)
    if not zero:
        return 0
    if mode != "train" or dp < 2:
        raise InputError(f"ZeRO-{zero} shards training state over data-parallel ranks: it needs --mode train and --dp >= 2")
    if not optimizer:
        raise InputError(f"ZeRO-{zero} shards the optimizer's state: name one with --optimizer")
    if zero >= 2 and pp > 1:
        raise InputError(f"ZeRO-{zero} does not run with pipeline parallelism (as in DeepSpeed): use --zero 1 or --pp 1")
    return zero


def _shard_kernel(k: dict, tp: int) -> dict:
    k = dict(k)
    name, op = k["name"], k["op"]
    if op == "linear" and name in _COLUMN:
        k["K"] //= tp
        k["params"] = k["N"] * k["K"] + (k["K"] if k["bias"] else 0)
    elif op == "linear" and name in _ROW:
        k["N"] //= tp
        k["params"] = k["N"] * k["K"] + (k["K"] if k["bias"] else 0)  # the bias is replicated
    elif op == "linear" and name in _VOCAB_HEAD:
        k["K"] = -(-k["K"] // tp)
        k["params"] = k["N"] * k["K"] + (k["K"] if k["bias"] else 0)
    elif op in FUSED_OPS:  # fused attention: this rank's heads and key/value heads
        k["H"] //= tp
        s = parse_spec(k["attn"])
        k["attn"] = attn_spec(s["backend"], max(s["kv_heads"] // tp, 1), s["vd"], s["causal"])
    elif name.startswith(_ATTN_PREFIX):
        if op.startswith("misc:"):
            k["nbytes"] = k["nbytes"] / tp
        else:  # bmm batch or the rows of a vector op: batch * heads (* S)
            k["B"] //= tp
    elif name.startswith((_MLP_PREFIX, *_SPLIT_H)):
        if op.startswith("misc:"):
            k["nbytes"] = k["nbytes"] / tp
        else:
            k["H"] //= tp
    elif op == "misc:gather" and name in _VOCAB_TABLE:
        rows = -(-(k["params"] // max(k["H"], 1)) // tp)
        k["params"] = rows * k["H"]
    elif name in _VOCAB_LOSS or name.startswith(_VOCAB_LOGITS):
        k["H"] = -(-k["H"] // tp)
    return k


def shard_graph(graph: ModelGraph, tp: int) -> ModelGraph:
    """The kernels one of `tp` tensor-parallel ranks runs (Megatron column/row/vocab parallel)."""
    if tp == 1:
        return graph
    if graph.config.family not in TP_FAMILIES:
        raise InputError(f"tensor parallelism is not modelled for {graph.config.family}")
    blocks = [Block(b.name, b.count, [_shard_kernel(k, tp) for k in b.kernels], b.kind) for b in graph.blocks]
    return ModelGraph(graph.config, graph.batch, graph.seq, graph.mode, blocks, graph.dtype, optimizer=graph.optimizer,
                      recompute=graph.recompute, amp=graph.amp, attn=graph.attn)


def parallel_graph(config, micro_batch: int, seq: int, mode: str = "train", tp: int = 1,
                   dtype: str = "fp32") -> ModelGraph:
    """Per-GPU kernel graph of one micro-batch under tensor parallelism `tp` (all layers; see `stages`)."""
    cfg = load_config(config)
    if tp > 1:
        validate(cfg, micro_batch, mode, 1, tp, 1, 1)
    return shard_graph(build_graph(cfg, micro_batch, seq, mode, dtype), tp)


def _tied(cfg: ModelConfig) -> bool:
    return cfg.family in TP_FAMILIES and cfg.tied_embeddings


def block_params(graph: ModelGraph, block: Block, pp: int) -> int:
    """Parameters of one repetition of `block` on one GPU (tied LM-head weight counted on its stage
    only when pipelining puts it on a different GPU from the embedding table)."""
    n = 0
    for k in block.kernels:
        p = int(k.get("params", 0))
        if k["op"] == "linear" and k["name"] in _VOCAB_HEAD and _tied(graph.config) and pp == 1:
            p -= k["N"] * k["K"]
        n += p
    return n
