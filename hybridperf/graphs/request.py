"""One typed request for a whole-model prediction on one GPU: the workload as transformers runs it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.model_graph import ModelGraph

#: the request's default attention implementation: transformers' own default
DEFAULT_ATTN = "sdpa"


@dataclass(frozen=True)
class ModelRequest:
    """A model run: `config` (HF config.json path, dict or ModelConfig), `batch` sequences of `seq` tokens,
    `mode` (inf, train, decode), the model `dtype` (fp32, fp16, bf16; with `amp`, fp32 weights under bf16
    autocast; None, the default: the one transformers builds the config in, as `predict-model` takes it), the
    attention implementation `attn` (eager, sdpa), and the options `fused`, `optimizer`, `recompute`, `launch`
    (eager, graph: one CUDA graph) and `cache` (contiguous, strided: a DynamicCache cropped back between decode
    steps) of `hybridperf.graphs.build_graph`, and for a decode step `cudnn_plans` (build, cached:
    `hybridperf.graphs.attention.CUDNN_PLAN_MODES`). NeuSight's labels are dtype fp32, attn eager."""

    config: Any
    batch: int
    seq: int
    mode: str = "inf"
    dtype: str | None = None
    attn: str = DEFAULT_ATTN
    amp: bool = False
    fused: bool = False
    optimizer: str | None = None
    recompute: bool = False
    cudnn_plans: str = "build"
    launch: str = "eager"
    cache: str = "contiguous"

    def graph(self) -> ModelGraph:
        return build_graph(self.config, self.batch, self.seq, self.mode, self.dtype, fused=self.fused,
                           optimizer=self.optimizer, recompute=self.recompute, attn=self.attn, amp=self.amp,
                           launch=self.launch, cache=self.cache)
