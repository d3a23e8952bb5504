"""SGLang (0.5): a prefill batch (chunks of `chunked_prefill_size`, 8192 tokens, 16384 from 160 GB)
pauses the decode batch; radix KV with 1-token pages, admitted by the tokens in use (an estimate of the
tokens still to come decays towards zero) and retracted when decoding runs out of pages; CUDA graphs for
decode batches up to `cuda_graph_max_bs`; custom all-reduce for small messages (sglang server_args)."""
from hybridperf.serving.engines.registry import EngineDefaults, register

SGLANG = register(EngineDefaults(
    name="sglang", max_batched_tokens=((0, 2048), (60, 8192), (160, 16384)), offline_batched_tokens=16384,
    max_running=1024, cuda_graph_max_batch=512, mem_utilization=0.88, block_size=1, mixed_batches=False,
    budget_counts_decodes=False, preempts=True, activation_reserve_gb=5.0,
    attention=(("ampere", "flashinfer", "flashinfer"), ("hopper", "fa3", "fa3"), ("blackwell", "trtllm_mha", "trtllm_mha"))))
