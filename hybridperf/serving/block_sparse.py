"""MiniMax-M3's block-sparse attention (MSA), as serving prices it beside the attention it shares with GQA layers.

Past its first `dense_layers` layers (which attend the whole context), a layer's queries attend `attended` keys: the
top `sparse_topk_blocks` blocks of `sparse_block_size` keys and the local block, picked by an indexer of
`index_heads` heads that scores a 16-bit `index_dim`-wide index key cached per token and layer (block max). The
attention over those keys is the GQA layer's, capped (`Arch.max_keys`); what this adds: the dense layers' reads of
the rest of the context, and each sparse layer's index scan, which reads every cached index key each decode step
(a kernel at least), and scores every earlier key per prefill query. aiconfigurator's `msa_generation_module` tables
(B200, vLLM 0.24 and SGLang 0.5.16) grow by 230-290 bytes per cached key and layer at long contexts, the index key's
256; selecting the top blocks (one candidate per block) is not priced.
"""
from __future__ import annotations

from dataclasses import dataclass

from hybridperf.serving.compressed import indexer_ms

INDEX_ELEM_BYTES = 2.0  # 16-bit index keys


@dataclass(frozen=True)
class BlockSparse:
    dense_layers: int  # leading layers that attend the whole context
    sparse_layers: int  # layers that attend `attended` keys picked by the indexer
    index_heads: int
    index_dim: int
    attended: int  # keys a sparse layer's query attends: (top blocks + local block) x block size

    @property
    def index_key_bytes(self) -> float:
        """Index-key bytes one token adds over all sparse layers (not split by TP)."""
        return self.index_dim * INDEX_ELEM_BYTES * self.sparse_layers

    def index_params(self, hidden: int) -> int:
        """The indexer's query and key projections over all sparse layers."""
        return (self.index_heads + 1) * self.index_dim * hidden * self.sparse_layers

    def scan_ms(self, pairs: float, keys: float, device) -> float:
        """One sparse layer's index scan: `pairs` (query, cached key) scores per index head, `keys` index keys read."""
        return indexer_ms(pairs, keys, self.index_heads, self.index_dim, device,
                          key_bytes=self.index_dim * INDEX_ELEM_BYTES, dtype="bfloat16")

    def decode_ms(self, keys: float, capped: float, per_key_layer_ms: float, floor_ms: float, device,
                  queries: int = 1) -> float:
        """What a decode step adds over all layers to the capped attention: the dense layers' `keys - capped` further
        keys at `per_key_layer_ms` a key and layer, and each sparse layer's scan of the `keys` cached index keys
        (`queries` query tokens a sequence), at least a kernel floor."""
        dense = self.dense_layers * per_key_layer_ms * max(keys - capped, 0.0)
        return dense + self.sparse_layers * max(self.scan_ms(keys * queries, keys, device), floor_ms)

    def prefill_index_ms(self, chunk: int, prefix: int, device) -> float:
        """A prefill chunk's index scans over all sparse layers: each of its queries scores every key before it."""
        return self.sparse_layers * self.scan_ms(chunk * (prefix + chunk / 2.0), prefix + chunk, device)
