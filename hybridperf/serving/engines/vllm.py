"""vLLM (V1 engine, 0.8-0.19): chunked prefill mixed with decodes under one token budget (8192 tokens and
1024 running sequences from 70 GiB, A100s excepted, else 2048 and 256; offline 16384 and 8192), paged KV in
16-token blocks, preemption by recompute, CUDA graphs for decode batches up to 512, custom all-reduce
up to 8 MiB (vllm/config, vllm/distributed/device_communicators/custom_all_reduce.py)."""
from hybridperf.serving.engines.registry import EngineDefaults, register

VLLM = register(EngineDefaults(
    name="vllm", max_batched_tokens=((0, 2048), (70, 8192)), offline_batched_tokens=16384, max_running=1024,
    cuda_graph_max_batch=512, mem_utilization=0.9, block_size=16, mixed_batches=True, budget_counts_decodes=True,
    preempts=True, activation_reserve_gb=4.0, staggered_clients=True, small_defaults_for=("a100",),
    small_offline_tokens=8192, small_max_running=256,
    attention=(("ampere", "vllm_flash_attn", "vllm_flash_attn"), ("hopper", "vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
               ("blackwell", "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"))))
