"""`ModelGraph`: the blocks of one model run and what is read off them (the kernel table, device memory)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES
from hybridperf.graphs.backward import accumulation_kernels, backward_kernels, tensor_numels
from hybridperf.graphs.config import ModelConfig, kv_length
from hybridperf.graphs.memory import MemoryEstimate, saved_activation_bytes, score_saved_bytes
from hybridperf.graphs.optimizer_specs import optimizer_state_bytes
from hybridperf.graphs.family import family_of
from hybridperf.graphs.primitives import BACKWARD_ONLY, F32, HALF_DTYPES
from hybridperf.ops import OP_CLASS


#: `grouped`: a top-k MoE's grouped expert GEMM (`grouped_gemm`), one launch or one per expert by device
KERNEL_COLUMNS = ("block", "name", "op", "B", "M", "N", "K", "H", "nbytes", "extra_nbytes", "phase", "count", "group",
                  "dtype", "grouped", "form", "attn")


#: inf: one forward of batch x seq tokens; train: forward + backward; decode: one generated token per
#: sequence against a key/value cache of seq tokens (`hybridperf.graphs.decode`)
MODES = ("inf", "train", "decode")
#: eager: PyTorch dispatches every kernel from Python (transformers' default); graph: the step is replayed from
#: one CUDA graph, as serving engines run decode and torch.compile(mode="reduce-overhead") runs a step (a decode
#: step then writes a static cache)
LAUNCHES = ("eager", "graph")


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
    launch: str = "eager"  # how kernels are issued: eager PyTorch dispatch or one CUDA graph (`LAUNCHES`)

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
            extra = family_of(cfg.family).saved_extra
            for per_layer, layers in (extra(cfg, self.batch * self.seq, eb) if extra else ()):
                act += per_layer * (1 if self.recompute else layers)  # recompute: only the layer being re-run
            act /= 1e9
            if self.optimizer:
                state, temp = optimizer_state_bytes(params, self.optimizer, F32 if self.amp else eb)
                return MemoryEstimate(weights, weights, act, state / 1e9, temp / 1e9)
            return MemoryEstimate(weights, weights, act)
        return MemoryEstimate(weights, 0.0, (self._kv_cache_bytes() + self._largest_op_bytes()) / 1e9)

    def _kv_cache_bytes(self) -> float:
        """Bytes of the keys and values a causal LM returns from an inference forward (HF's `use_cache`,
        on unless the config turns it off) or holds after a decode step: two (batch, tokens, kv heads x
        head_dim) tensors per layer (or the family's `kv_cache_width`). Sliding-window layers (Gemma 2 and 3's,
        GPT-OSS's, and with a window every layer of Mistral and Phi-3) keep their window's last tokens only."""
        cfg = self.config
        sliding = cfg.total_layers if cfg.every_layer_slides else cfg.layer_types.count("sliding_attention")
        if self.mode == "decode":
            tokens, sliding_tokens = kv_length(cfg, self.seq), kv_length(cfg, self.seq, sliding=True)
        elif not family_of(cfg.family).causal_lm or not cfg.raw.get("use_cache", True):
            return 0.0
        else:  # HF's sliding cache keeps window - 1 tokens
            tokens = self.seq
            sliding_tokens = min(self.seq, cfg.sliding_window - 1) if sliding else self.seq
        layer_tokens = (cfg.total_layers - sliding) * tokens + sliding * sliding_tokens
        family = family_of(cfg.family)
        fixed = self.batch * family.state_bytes(cfg, self.dtype_bytes) if family.state_bytes else 0.0
        width = family.kv_cache_width(cfg) if family.kv_cache_width else None
        if isinstance(width, dict):  # per layer type (Gemma 4's full layers: heads and a head width of their own)
            return fixed + self.batch * self.dtype_bytes * ((cfg.total_layers - sliding) * tokens * width[
                "full_attention"] + sliding * sliding_tokens * width["sliding_attention"])
        if width is not None:  # a cache of its own layout (DeepSeek-V3: the latent and rotary key)
            return fixed + self.batch * layer_tokens * width * self.dtype_bytes
        return fixed + 2.0 * self.batch * layer_tokens * cfg.num_kv_heads * cfg.head_dim * self.dtype_bytes

    def _largest_op_bytes(self) -> float:
        """Inputs plus output of the forward's largest op: what is live at once under no_grad. In a
        half-precision model, eager attention of a family's `softmax_fp32` model_types takes its softmax in fp32
        and casts back, so there three score-sized tensors are live (input, fp32 output, cast)."""
        eb = self.dtype_bytes
        upcast = self.config.family in family_of(self.config.family).softmax_fp32 and self.dtype in HALF_DTYPES
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


def param_numels(graph: ModelGraph) -> list[int]:
    """Element counts of every parameter tensor of the graph's model, in `model.parameters()` order."""
    tied = bool(graph.config.tied_embeddings)
    return [n for blk in graph.blocks for _ in range(blk.count) for n in tensor_numels(blk.kernels, tied)]
