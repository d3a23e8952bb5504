"""SGLang (0.5): a prefill batch (chunks of `chunked_prefill_size`: 2048 tokens, 4096 from 35 GB, 8192 from
60 GB, 16384 from 160 GB) pauses the decode batch; radix KV with 1-token pages, admitted by the tokens in use
(an estimate of the tokens still to come decays towards zero) and retracted when decoding runs out of pages;
CUDA graphs for decode batches up to `cuda_graph_max_bs` (8 to 512 by GPU memory and TP); custom all-reduce
for small messages (sglang server_args)."""
from hybridperf.serving.engines.registry import EngineDefaults, register

SGLANG = register(EngineDefaults(
    name="sglang", max_batched_tokens=((0, 2048), (35, 4096), (60, 8192), (160, 16384)), offline_batched_tokens=16384,
    cuda_graph_tiers=((0, 8, 8), (20, 24, 80), (35, 32, 160), (60, 256, 512), (160, 512, 512)),
    max_running=1024, cuda_graph_max_batch=512, mem_utilization=0.88, block_size=1, mixed_batches=False,
    budget_counts_decodes=False, preempts=True, activation_reserve_gb=5.0,
    attention=(("ampere", "flashinfer", "flashinfer"), ("hopper", "fa3", "fa3"), ("blackwell", "trtllm_mha", "trtllm_mha"))))
