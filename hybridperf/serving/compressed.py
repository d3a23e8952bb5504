"""DeepSeek-V4's compressed attention, as a serving step sees it.

Every layer keeps its last `window` tokens' KV (one 512-wide vector per token, keys and values shared by
the heads: MQA). A layer's compress ratio says what it keeps of older tokens: 0, nothing (sliding window
only); 4 (CSA), one compressed entry per 4 tokens, of which a lightning indexer (`index_heads` heads of
`index_dim` over per-entry index keys) picks `index_topk` per query; 128 (HCA), one entry per 128 tokens,
all attended. The output projection is grouped low-rank (`o_groups` groups of heads to `o_lora` each);
the residual stream is `hc_mult` copies of the hidden state (manifold hyper-connections). Cache layout as
aiconfigurator's DeepSeek-V4 model counts it (`sdk/models/deepseek_v4.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hybridperf.priors.attention import CONSTANTS, AttentionConstants, Fitted, context_attention_ms
from hybridperf.priors.llm_gemm import GEMM_DTYPES, matrix_peak
from hybridperf.priors.memory import achievable_bandwidth
from hybridperf.priors.mla import SPARSE_CONSTANTS, SPARSE_HEADS_PER_CTA, SparseMlaConstants, index_topk_ms, \
    sparse_mla_ms, topk_work

#: the indexer's cached key per compressed entry: FP8 values plus one FP32 scale
INDEX_SCALE_BYTES = 4.0
#: kernel floors a layer's hyper-connections take, in place of its residual norms': aiconfigurator's `mhc_module`
#: tables time a layer's mHC pre and post (both sites, the norms fused in) at a median 14 floors up to 16 tokens on
#: B200, H100 and L40S (per framework 12.7-20.2; `experiments/kernels/dsv4_attention.py` holds each system out)
HC_KERNELS = 14


@dataclass(frozen=True)
class CompressedConstants:
    """What a layer's attention module runs besides its GEMMs and its attention, indexer and top-k kernels, fitted on
    aiconfigurator's `dsv4_{csa,hca}_generation_module` tables: kernels each at least the launch-and-drain floor
    (norms, RoPE, cache stores, the compressor's pooling, the indexer's quantization; a window-only layer counts as
    an HCA one, as aiconfigurator folds it) and per token, DRAM passes over the rank's query heads, over FlashMLA's
    64-head query tile (its input and output) and over the hidden state."""

    csa_kernels: Fitted = Fitted(32.0, "kernels", "default")
    hca_kernels: Fitted = Fitted(21.0, "kernels", "default")
    q_passes: Fitted = Fitted(9.0, "passes", "default")
    tile_passes: Fitted = Fitted(1.5, "passes", "default")
    hidden_passes: Fitted = Fitted(35.0, "passes", "default")


_MODULE_TABLES = ("h100_sxm, b200_sxm aiconfigurator dsv4_csa/hca_generation_module tables (SGLang 0.5.14, vLLM 0.24, "
                  "TensorRT-LLM 1.3)")
_MODULE_SCRIPT = "experiments/kernels/dsv4_attention.py"
#: shipped constants, `python -m experiments.kernels.dsv4_attention --write-constants` (fitted on both GPUs; the
#: held-out errors are in experiments/results/dsv4_attention.md)
MODULE_CONSTANTS = CompressedConstants(
    *(Fitted(v, unit, _MODULE_TABLES, _MODULE_SCRIPT) for v, unit in (
        (31.8, "kernels"), (19.9, "kernels"), (8.50, "passes"), (3.78, "passes"), (19.8, "passes"))))


def indexer_ms(pairs: float, keys: float, heads: int, dim: int, device, key_bytes: float | None = None,
               dtype: str = GEMM_DTYPES["fp8"][2]) -> float:
    """A lightning indexer on one layer (DeepSeek-V3.2's and GLM-5's DSA, DeepSeek-V4's CSA; MiniMax-M3's MSA in
    16-bit): `pairs` (query, index key) dot products per index head in `dtype`, `keys` cached index keys of
    `key_bytes` each (default: FP8 values and a scale) read once."""
    flops = 2.0 * pairs * heads * dim
    read = keys * (dim + INDEX_SCALE_BYTES if key_bytes is None else key_bytes)
    return (flops / matrix_peak(device, dtype) + read / achievable_bandwidth(device)) * 1e3


@dataclass(frozen=True)
class CompressedAttention:
    ratios: tuple  # per layer: 0 (window only), 4 (CSA) or 128 (HCA)
    window: int
    head_dim: int
    q_lora: int
    o_groups: int
    o_lora: int
    index_heads: int
    index_dim: int
    index_topk: int
    hc_mult: int

    def _count(self, ratio: int) -> int:
        return sum(r == ratio for r in self.ratios)

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """Cache bytes one more token adds to a sequence's compressed entries (past the window): entries in the
        cache dtype (`kv_bytes` per element), the indexer's keys in FP8."""
        out = 0.0
        for r in set(self.ratios) - {0}:
            index = (self.index_dim + INDEX_SCALE_BYTES) if r == 4 else 0.0
            out += self._count(r) * (self.head_dim * kv_bytes + index) / r
        return out

    def window_bytes(self, kv_bytes: float) -> float:
        """Per sequence: every layer's raw window and its compressor's FP32 running state."""
        state = sum(2 * r * (2 if r == 4 else 1) * self.head_dim * 4.0 for r in self.ratios if r)
        return len(self.ratios) * self.window * self.head_dim * kv_bytes + state

    def weights(self, hidden: int, heads: int) -> float:
        """Attention weight elements over all layers: q (low-rank), the shared KV, the grouped output
        projection, each compressed layer's compressor and each CSA layer's indexer."""
        hd = self.head_dim
        per_layer = hidden * self.q_lora + self.q_lora * heads * hd + hidden * hd \
            + heads * hd * self.o_lora + self.o_groups * self.o_lora * hidden
        compressors = sum(2 * hidden * hd for r in self.ratios if r)
        index = self._count(4) * (self.q_lora * self.index_heads * self.index_dim + hidden * self.index_dim
                                  + hidden * self.index_heads + 2 * hidden * self.index_dim)
        return per_layer * len(self.ratios) + compressors + index

    def projections_ms(self, n, hidden: int, heads: int, tp: int, dtype: str, device, gemm, bmm) -> np.ndarray:
        """GEMMs of all layers' attention for `n` tokens on one GPU of a `tp`-way group (`gemm`, `bmm`: the
        iteration's GEMM and batched-GEMM pricing); the shared KV and the indexer keys are computed on every
        rank."""
        hd, lh = self.head_dim, heads / tp
        groups = max(self.o_groups / tp, 1.0)
        per_layer = gemm(n, self.q_lora, hidden, dtype, device) + gemm(n, lh * hd, self.q_lora, dtype, device) \
            + gemm(n, hd, hidden, dtype, device) \
            + bmm(groups, n, self.o_lora, lh * hd / groups, dtype, device) \
            + gemm(n, hidden, groups * self.o_lora, dtype, device)
        compress = gemm(n, 2 * hd, hidden, dtype, device)
        index = gemm(n, self.index_heads * self.index_dim, self.q_lora, dtype, device) \
            + gemm(n, 3 * self.index_dim + self.index_heads, hidden, dtype, device)
        return per_layer * len(self.ratios) + compress * sum(1 for r in self.ratios if r) + index * self._count(4)

    def _index_ms(self, pairs: float, keys: float, device) -> float:
        return indexer_ms(pairs, keys, self.index_heads, self.index_dim, device)

    def select_ms(self, seqs, new, cached, device, sparse: SparseMlaConstants = SPARSE_CONSTANTS) -> float:
        """One CSA layer's top-k selection for `seqs` sequences of `new` query tokens after `cached` ones: a query's
        row holds a compressed entry per 4 of its keys and selects once it holds more than `index_topk`."""
        rows, scores, longest = topk_work(seqs, new, cached, 4 * self.index_topk)
        return float(index_topk_ms(rows, scores / 4.0, longest / 4.0, device, sparse))

    def layer_entries(self, ratio: int, ctx) -> np.ndarray:
        """Entries one decode query attends on a layer of `ratio`, `ctx` tokens cached: its window, plus the
        indexer's top-k of the compressed entries (CSA) or all of them (HCA)."""
        ctx = np.asarray(ctx, dtype=np.float64)
        extra = {4: np.minimum(ctx / 4.0, self.index_topk), 128: ctx / 128.0}.get(ratio, 0.0)
        return np.minimum(ctx, self.window) + extra

    def module_ms(self, n, hidden: int, heads: float, device, floor_ms: float,
                  constants: CompressedConstants = MODULE_CONSTANTS) -> np.ndarray:
        """Every layer's module work beyond its GEMMs and attention kernels for `n` tokens (`CompressedConstants`),
        `heads` query heads on this GPU (FlashMLA's query tile: their 64-head multiple, as with an FP8 cache, which
        the tables ran), `floor_ms` a kernel's floor."""
        c = constants
        kernels = self._count(4) * c.csa_kernels.value + (len(self.ratios) - self._count(4)) * c.hca_kernels.value
        tile = math.ceil(heads / SPARSE_HEADS_PER_CTA) * SPARSE_HEADS_PER_CTA
        per_token = 2.0 * (c.q_passes.value * heads * self.head_dim + c.tile_passes.value * tile * self.head_dim
                           + c.hidden_passes.value * hidden) * len(self.ratios)
        return kernels * floor_ms + np.asarray(n, dtype=np.float64) * per_token / achievable_bandwidth(device) * 1e3

    def decode_ms(self, keys: float, seqs: int, heads: float, device, kv_dtype: str, source, queries: int = 1,
                  sparse: SparseMlaConstants = SPARSE_CONSTANTS, constants: AttentionConstants = CONSTANTS) -> float:
        """One decode step of `seqs` sequences holding `keys` tokens in all, `queries` query tokens each (drafts
        verified), over every layer: FlashMLA's sparse kernel over each layer's attended entries, `head_dim` wide as
        keys and as values (a 64-row tile of heads per token; heads padded to the architecture's multiple over a
        16-bit cache), each CSA layer's indexer scan of the compressed index keys and its top-k selection. Its kernels'
        floors are among `module_ms`'s."""
        if seqs <= 0:
            return 0.0
        ctx, tokens = keys / seqs, seqs * queries
        t = 0.0
        for r in set(self.ratios):
            t += self._count(r) * float(sparse_mla_ms(
                tokens, heads, self.head_dim, 0, float(self.layer_entries(r, ctx)), device, kv_dtype,
                kernel_source=source, constants=sparse, attention=constants, padded=kv_dtype != "fp8"))
        if self._count(4):
            select = self.select_ms(seqs, queries, max(ctx - queries, 0.0), device, sparse)
            t += self._count(4) * (self._index_ms(tokens * ctx / 4.0, keys / 4.0, device) + select)
        return t

    def prefill_ms(self, chunk: int, prefix: int, heads: float, device, kv_dtype: str, source,
                   sparse: SparseMlaConstants = SPARSE_CONSTANTS, constants: AttentionConstants = CONSTANTS,
                   seqs: int = 1) -> float:
        """`seqs` sequences' prefill chunks of `chunk` tokens after `prefix` cached ones in one launch per kernel
        (serving prices each request's chunk on its own), over every layer: each query attends its window plus its
        layer's compressed entries (the indexer's top-k on CSA layers)."""
        ctx = prefix + chunk / 2.0  # a query's mean context within the chunk
        attended = {0: self.window, 4: self.window + min(ctx / 4.0, self.index_topk),
                    128: self.window + ctx / 128.0}
        t = 0.0
        for r in set(self.ratios):
            w = int(max(1, round(attended.get(r, self.window))))
            t += self._count(r) * float(context_attention_ms(seqs, chunk, heads, 1, self.head_dim, device,
                                                             kv_dtype=kv_dtype, window=w, prefix=prefix,
                                                             kernel_source=source, constants=constants))
        if self._count(4):  # the indexer scores each query's compressed entries and picks its top-k of them
            scan = self._index_ms(seqs * chunk * ctx / 4.0, seqs * (prefix + chunk) / 4.0, device)
            t += self._count(4) * (scan + self.select_ms(seqs, chunk, prefix, device, sparse))
        return t
