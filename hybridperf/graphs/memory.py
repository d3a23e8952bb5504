"""Device memory of one eager Hugging Face run: weights, gradients and what autograd saves.

Training keeps, until backward, every tensor autograd saved. For eager fp32 HF models that set is
counted exactly on the CPU by `experiments/models/activation_memory.py` (saved-tensor hooks, each storage
once; torch 2.13, transformers 5.23, the families' default dropout, which NeuSight's configs keep) and
fitted, per family, as bytes per layer (each family module's `Family.activation`)

    tokens * (c_h * hidden + c_f * ffn) + c_a * batch * heads * seq * seq  [+ c_m * max_positions^2]

plus tokens * (d_h * hidden + d_v * vocab) for the embeddings, head and loss. The last per-layer term
is GPT-Neo's: each of its layers saves a slice of its own (max_positions, max_positions) bool
causal-mask buffer, which keeps the whole buffer alive. The fit is within 0.3% of the count for BERT,
OPT, GPT-NeoX and GPT-Neo (alternating global and local layers, as released), 0.8% for Llama, Qwen3 and Gemma 1-3
(counted with head_dim = hidden / heads; their released configs set their own) and 6% for GPT-2. In eager
HF every layer keeps ~10 hidden-sized fp32 tensors per token (c_h ~ 40 bytes), GPT-2's eight-kernel
gelu_new five ffn-sized ones, and attention with dropout three score-sized ones: more than twice the
Megatron count (34*s*b*h + 5*a*s^2*b bytes at 16 bit, Korthikanti et al.) for these models.

A model cast to fp16/bf16 is counted on its own (bf16 on the CPU), not as half the fp32 count: HF's
upcasts save fp32 tensors. Llama's, OPT's and GPT-Neo's attention keeps the fp32 softmax output beside
its 16-bit copy (c_a 6 bytes where half of fp32 would be 2), GPT-Neo its fp32 q and k, Llama's RMSNorm
its fp32 input, and a causal LM's loss the fp32 log-probabilities (d_v 4, not 2). Inference
saves nothing for a backward: its peak is the weights, a causal LM's key/value cache (HF's `use_cache`)
and the largest op's inputs and output (`ModelGraph.memory`).
"""
from __future__ import annotations

from dataclasses import dataclass

from hybridperf.errors import InputError
from hybridperf.graphs.family import family_of

#: fraction of device memory above which eager PyTorch's caching allocator starts freeing and
#: re-allocating blocks (cudaFree/cudaMalloc synchronise the device); measured runs in that band take
#: longer than their kernels (RESULTS section 4)
PRESSURE_FRACTION = 0.85
#: above this fraction the run is reported as not fitting. Not 1.0: the count is of one transformers
#: version (others save a few percent more or less), and NeuSight's MI210 ran a GPT-3-XL training step
#: counted here at 1.03 of its memory
OVERFLOW_FRACTION = 1.10


@dataclass(frozen=True)
class MemoryEstimate:
    """Device memory (GB = 1e9 bytes) of one run, by part."""

    weights: float
    grads: float
    activations: float
    optimizer: float = 0.0  # optimizer state kept between steps
    step_temp: float = 0.0  # temporaries of the optimizer step, live once the activations are freed

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + max(self.activations, self.step_temp)

    def fraction_of(self, device) -> float:
        """Share of `device`'s allocatable memory (`DeviceSpec.mem_bytes`) that the run needs."""
        return self.total * 1e9 / device.mem_bytes

def _coeffs(family: str, dtype_bytes: float) -> dict:
    """Counted coefficients of model_type `family` (its `Family.activation`, or that of the counted model_type
    it names as closest) for a model with `dtype_bytes` bytes per float (4: fp32, 2: fp16/bf16)."""
    if dtype_bytes not in (2, 4):
        raise ValueError(f"saved activations are counted for 2- and 4-byte models, not {dtype_bytes}-byte ones")
    entry = family_of(family).activation.get(family)
    if isinstance(entry, str):  # not counted: the counted model_type whose layer it resembles most
        entry = family_of(entry).activation.get(entry)
    if entry is None:
        raise InputError(f"no saved-activation coefficients counted for {family} (`Family.activation`)")
    return entry[0 if dtype_bytes == 4 else 1]


def layer_saved_bytes(family: str, hidden: int, ffn: int, heads: int, batch: int, seq: int,
                      dtype_bytes: float = 4.0, max_positions: int = 0) -> float:
    """Bytes autograd keeps for backward per transformer layer of a model with `dtype_bytes` bytes per
    float (plus a bool mask buffer of `max_positions`^2 bytes where the family keeps one). Under tensor
    parallelism pass the rank's share of `ffn` and `heads`."""
    c = _coeffs(family, dtype_bytes)
    tok = float(batch) * seq
    act = tok * (c["c_h"] * hidden + c["c_f"] * ffn) + c["c_a"] * float(batch) * heads * seq * seq
    return act + c.get("c_m", 0.0) * float(max_positions) ** 2


def score_saved_bytes(family: str, heads: int, batch: int, seq: int, dtype_bytes: float = 4.0) -> float:
    """The part of `layer_saved_bytes` that eager attention's score-sized tensors take (scores, probabilities,
    dropout masks): a fused kernel (SDPA) keeps none of them, only its output and one row statistic."""
    return _coeffs(family, dtype_bytes)["c_a"] * float(batch) * heads * seq * seq


def outside_saved_bytes(family: str, hidden: int, vocab: int, batch: int, seq: int, dtype_bytes: float = 4.0) -> float:
    """Bytes autograd keeps outside the layers: embeddings, head and loss (the logits dominate)."""
    c = _coeffs(family, dtype_bytes)
    return float(batch) * seq * (c["d_h"] * hidden + c["d_v"] * vocab)


#: bytes per (token, expert) pair that a top-k MoE layer saves beyond a Llama layer of the token's expert width
#: (`ModelConfig.token_ffn`), besides two hidden-sized tensors per pair (the gathered tokens and the expert
#: outputs): int64 indices and the router's state. Counted with saved-tensor hooks on small Mixtral and
#: Qwen3-MoE models (fp32 and bf16, transformers 5.23): 59.6-60.7
MOE_PAIR_BYTES = 60.0


def moe_layer_extra_bytes(tokens: int, top_k: int, hidden: int, dtype_bytes: float = 4.0,
                          shared: bool = False, clamped_ffn: int = 0) -> float:
    """Bytes a top-k MoE layer (`graphs.layers.moe.moe_block`) saves for backward beyond Llama's layer with its
    experts' width: per (token, expert) pair two hidden-sized tensors and `MOE_PAIR_BYTES`, with a
    sigmoid-gated shared expert (Qwen2-MoE) its scaled output, one hidden-sized tensor per token, and with
    GPT-OSS's clamped SwiGLU (`clamped_ffn`, the experts' width) three more expert-wide tensors per pair
    (the hook count's residual: 12.0 and 12.1 fp32 bytes per pair and width on two configurations)."""
    pairs = float(tokens) * top_k
    shared_scale = float(tokens) * dtype_bytes * hidden if shared else 0.0
    clamped = 3 * dtype_bytes * clamped_ffn
    return pairs * (2 * dtype_bytes * hidden + MOE_PAIR_BYTES + clamped) + shared_scale


#: bytes per token that DeepSeek-V3's latent attention saves beyond Llama's attention, per unit of each width:
#: q_lora_rank, kv_lora_rank + qk_rope_head_dim, heads * (nope + rope), heads * (nope + v), hidden. Fitted on
#: the saved-tensor-hook residuals of 8 small configurations (`experiments/models/activation_memory.py --mla`,
#: `data/mla_memory.csv`); leave one configuration out, the layer's saved bytes are within 2.4% (fp32) and
#: 2.1% (bf16) of the count over three refits (random routing moves the counts), against up to 19% and 25%
#: with Llama's layer alone.
MLA_EXTRA_COEFFS = {4: (11.06, 14.63, 0.67, 9.03, -16.57), 2: (7.81, 7.69, 0.33, 4.35, -3.15)}


def mla_layer_extra_bytes(tokens: int, widths: tuple, dtype_bytes: float = 4.0) -> float:
    """Bytes a DeepSeek-V3 layer's latent attention saves beyond Llama's, over `tokens` tokens; `widths` in
    MLA_EXTRA_COEFFS's order."""
    coeffs = MLA_EXTRA_COEFFS[2 if dtype_bytes == 2 else 4]
    return float(tokens) * sum(c * w for c, w in zip(coeffs, widths))


def checkpoint_bytes(hidden: int, batch: int, seq: int, dtype_bytes: float = 4.0) -> float:
    """Bytes a checkpointed layer keeps until backward: its input hidden states."""
    return float(batch) * seq * hidden * dtype_bytes


def layer_stack_bytes(family: str, hidden: int, ffn: int, heads: int, layers: int, batch: int, seq: int,
                      dtype_bytes: float = 4.0, max_positions: int = 0, recompute: bool = False) -> tuple[float, float]:
    """(bytes kept per micro-batch in flight, bytes kept once) by `layers` layers until their backward.
    With `recompute` (every layer checkpointed) the layers keep only their inputs, and the one layer
    being back-propagated holds its full saved set again; a family's mask buffers stay alive in every
    layer (they are the modules' own buffers)."""
    layer = layer_saved_bytes(family, hidden, ffn, heads, batch, seq, dtype_bytes, max_positions)
    if not recompute:
        return layers * layer, 0.0
    mask = _coeffs(family, dtype_bytes).get("c_m", 0.0) * float(max_positions) ** 2
    return layers * checkpoint_bytes(hidden, batch, seq, dtype_bytes), layer + (layers - 1) * mask


def saved_activation_bytes(family: str, hidden: int, ffn: int, heads: int, vocab: int, layers: int, batch: int,
                           seq: int, dtype_bytes: float = 4.0, max_positions: int = 0,
                           recompute: bool = False) -> float:
    """Bytes autograd keeps for backward in one eager training step of a model with `dtype_bytes` bytes
    per float (`recompute`: see `layer_stack_bytes`)."""
    per_run, once = layer_stack_bytes(family, hidden, ffn, heads, layers, batch, seq, dtype_bytes, max_positions,
                                      recompute)
    return per_run + once + outside_saved_bytes(family, hidden, vocab, batch, seq, dtype_bytes)
