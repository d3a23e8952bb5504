"""The collectives one pipeline stage's iteration pays, per layer or per stage, from the collective model.

TP all-reduces after attention and the MLP; the experts' all-to-all under attention data-parallel; and, under
pipeline parallelism, the activations a stage hands to the next (vLLM's and SGLang's `send_tensor_dict`: the hidden
states and the residual, each TP rank sending its 1/tp slice to its peer, the receiving stage all-gathering them).
TensorRT-LLM's hand-off is priced alike. All are timed as kernels (graph timing); the engines send between stages
outside their CUDA graphs, whose host time is not priced, and a send overlapping the next micro-batch's work is
charged in full.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import NodeSpec
from hybridperf.priors.collectives import custom_all_reduce_ms
from hybridperf.priors.moe_routing import expert_ranks
from hybridperf.serving.arch import Arch

#: tensors a pipeline stage sends the next per token (hidden states and residual), 16-bit; DeepSeek-V4 sends its
#: residual stream alone, `hc_mult` hidden states wide
STAGE_TENSORS = 2


class StageComm:
    """Collective times (ms, arrays over token counts `n`) of one GPU of one stage."""

    def __init__(self, arch: Arch, node: NodeSpec, engine: str, par, collectives):
        self.arch, self.node, self.engine, self.par, self.collectives = arch, node, engine, par, collectives
        self.crossing = self.crossing_hand_offs()

    def _nccl(self, collective: str, nbytes: np.ndarray, gpus: int, gpus_per_node: int) -> np.ndarray:
        return self.collectives.predict(collective, nbytes, gpus, gpus_per_node, self.node, timing="graph")["ms"]

    def allreduce(self, nbytes: np.ndarray, gpus: int) -> np.ndarray:
        """The engine's all-reduce: its own one-/two-shot kernel for small messages where every pair of GPUs
        is linked, NCCL otherwise (the collective model's `--impl` prediction, with its fitted constants)."""
        if gpus > self.node.gpus_per_node:
            return self._nccl("all_reduce", nbytes, gpus, self.node.gpus_per_node)
        c = self.collectives  # its prediction without the interval, which serving does not use
        return custom_all_reduce_ms(nbytes, gpus, self.node, self.engine, c.constants, c.custom)

    def tp_allreduce(self, n: np.ndarray) -> np.ndarray:
        """One TP all-reduce of `n` tokens' 16-bit hidden states."""
        if self.par.tp == 1:
            return np.zeros_like(n, dtype=float)
        return self.allreduce(n * self.arch.hidden * 2.0, self.par.tp)

    def moe(self, n: np.ndarray) -> np.ndarray:
        """Expert dispatch and combine under attention data-parallel: an all-to-all each way over the MoE group
        (DeepEP-style: FP8 tokens out, BF16 back), a token to every rank holding a slice of one of its experts
        (`expert_ranks`), each split over `moe_tp` ranks, an attention TP group's ranks each sending its 1/tp.
        Without attention-DP the TP all-reduce already combines the experts."""
        p, a = self.par, self.arch
        if p.adp == 1:
            return np.zeros_like(n, dtype=float)
        g = p.moe_tp * p.moe_ep
        gpn = min(g, self.node.gpus_per_node)
        copies = p.moe_tp * expert_ranks(p.moe_ep, a.topk, a.expert_groups, a.topk_groups, a.experts) / p.tp
        width = a.moe_latent or a.hidden  # a latent MoE dispatches its latent activations
        return self._nccl("all_to_all", n * width * copies * 1.0, g, gpn) \
            + self._nccl("all_to_all", n * width * copies * 2.0, g, gpn)

    def crossing_hand_offs(self) -> int:
        """How many of the pp - 1 hand-offs cross nodes: stage s holds GPUs s x stage .. (s + 1) x stage - 1 (tp x
        attention-DP each, filling nodes in order), and a GPU sends to its peer one stage on."""
        p, gpn = self.par, self.node.gpus_per_node
        stage = p.tp * p.adp
        return sum(any((s * stage + i) // gpn != ((s + 1) * stage + i) // gpn for i in range(stage))
                   for s in range(p.pp - 1))

    def stage_send(self, n: np.ndarray) -> np.ndarray:
        """A stage's share of the pp - 1 hand-offs of one iteration's `n` tokens: (pp - 1) / pp of one, those
        between nodes over the network (`crossing`); `n` is one attention-DP rank's tokens, which its TP
        group sends."""
        p, a = self.par, self.arch
        if p.pp == 1:
            return np.zeros_like(n, dtype=float)
        width = a.hidden * (a.compressed.hc_mult if a.compressed else STAGE_TENSORS)
        nbytes = n * width * 2.0
        gpn = self.node.gpus_per_node
        t = (self.crossing * self._nccl("send_recv", nbytes / p.tp, 2, 1)
             + (p.pp - 1 - self.crossing) * self._nccl("send_recv", nbytes / p.tp, 2, 2))
        if p.tp > 1:  # the receiving TP group gathers the slices
            t = t + (p.pp - 1) * self._nccl("all_gather", nbytes, p.tp, min(p.tp, gpn))
        return t / p.pp
