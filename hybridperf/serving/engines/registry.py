"""The engine registry: what an engine's scheduler and memory manager do by default (`EngineDefaults`), and
the table every engine module registers itself in."""
from __future__ import annotations

from dataclasses import dataclass

from hybridperf.errors import InputError


@dataclass(frozen=True)
class EngineDefaults:
    """What an engine's scheduler and memory manager do out of the box.

    `mixed_batches`: prefill chunks ride in the same iteration as running decodes (vLLM's chunked
    prefill, TensorRT-LLM's in-flight batching); else a prefill iteration pauses decoding (SGLang).
    `budget_counts_decodes`: decode tokens use up `max_batched_tokens` too. `max_batched_tokens`
    maps the GPU's memory (GB) to the engine's default chunk budget.
    """

    name: str
    max_batched_tokens: tuple  # ((min GPU memory GB, tokens), ...) ascending; the last that fits applies
    offline_batched_tokens: int  # the offline API's budget (vLLM's LLM class uses a larger one)
    max_running: int  # most sequences in one iteration (max_num_seqs / max_running_requests / max_batch_size)
    cuda_graph_max_batch: int  # decode batches up to this size replay a captured CUDA graph
    mem_utilization: float  # fraction of GPU memory the engine may use (weights + KV + activations)
    block_size: int  # KV-cache page, tokens
    mixed_batches: bool
    budget_counts_decodes: bool
    preempts: bool  # admits by the KV blocks in use and preempts (recompute) when full; else reserves in full
    activation_reserve_gb: float  # memory kept for activations, CUDA graphs and the sampler
    #: ((arch, prefill kernel_source, decode kernel_source), ...): the engine's default attention kernels per
    #: GPU generation, in aiconfigurator's kernel_source names (`priors.attention.KERNEL_FAMILIES`)
    attention: tuple = ()
    nvidia_only: bool = False  # the engine runs on NVIDIA GPUs only (TensorRT-LLM)
    #: a closed-loop benchmark's requests drift apart on this engine (each new one prefilled on its own, TTFT
    #: nearly flat in concurrency), else they keep the lock-step of their common start
    staggered_clients: bool = False

    def attention_sources(self, arch: str) -> tuple:
        """(prefill, decode) kernel sources on a GPU of `arch` (Blackwell variants as blackwell), the nearest
        older generation's where the table skips one; ("", "") -- PyTorch SDPA's constants -- on a GPU the
        table does not reach (AMD, pre-Ampere NVIDIA), whose kernels no table here measured."""
        order = ("ampere", "ada", "hopper", "blackwell")
        arch = "blackwell" if str(arch).startswith("blackwell") else str(arch)
        if arch not in order:
            return ("", "")
        table = {a: (p, d) for a, p, d in self.attention}
        for a in reversed(order[:order.index(arch) + 1]):
            if a in table:
                return table[a]
        return ("", "")

    #: ((min GPU memory GB, CUDA-graph max decode batch below TP 4, from TP 4), ...) ascending, the last that fits
    #: applies; none: `cuda_graph_max_batch` everywhere (SGLang captures fewer batch sizes on smaller GPUs)
    cuda_graph_tiers: tuple = ()
    #: GPUs the engine keeps to its smallest defaults whatever their memory (lowercase name fragments: vLLM
    #: gives an A100 80GB a 40 GB card's), and those defaults' offline budget and running limit (0: the same)
    small_defaults_for: tuple = ()
    small_offline_tokens: int = 0
    small_max_running: int = 0

    def limits(self, device) -> tuple[int, int, int]:
        """(max batched tokens when serving, offline, most running sequences) on `device` (a DeviceSpec)."""
        named = any(s in str(device.name).lower() for s in self.small_defaults_for)
        small = named or len(self.max_batched_tokens) < 2 or device.mem_gb < self.max_batched_tokens[1][0]
        tokens = self.max_batched_tokens[0][1] if named else self.batched_tokens(device.mem_gb)
        if small:
            return tokens, self.small_offline_tokens or self.offline_batched_tokens, \
                self.small_max_running or self.max_running
        return tokens, self.offline_batched_tokens, self.max_running

    def graph_batch(self, device, tp: int) -> int:
        """Largest decode batch replayed from a CUDA graph on `device` with `tp`-way tensor parallelism."""
        out = self.cuda_graph_max_batch
        for min_gb, small_tp, large_tp in self.cuda_graph_tiers:
            if device.mem_gb >= min_gb:
                out = small_tp if tp < 4 else large_tp
        return out

    def batched_tokens(self, mem_gb: float) -> int:
        tokens = self.max_batched_tokens[0][1]
        for min_gb, t in self.max_batched_tokens:
            if mem_gb >= min_gb:
                tokens = t
        return tokens


ENGINES: dict[str, EngineDefaults] = {}


def register(engine: EngineDefaults) -> EngineDefaults:
    ENGINES[engine.name] = engine
    return engine


def get_engine(name: str) -> EngineDefaults:
    key = str(name).strip().lower().replace("-", "").replace("_", "")
    key = {"tensorrtllm": "trtllm", "trt": "trtllm"}.get(key, key)
    if key not in ENGINES:
        raise InputError(f"unknown engine {name!r}; one of {', '.join(sorted(ENGINES))}")
    return ENGINES[key]
