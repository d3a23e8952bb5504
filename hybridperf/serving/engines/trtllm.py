"""TensorRT-LLM (PyTorch backend, 1.0-1.3): in-flight batching mixes context chunks with generation
under `max_num_tokens` (8192), KV in 32-token blocks sized from `free_gpu_memory_fraction` (0.9) of the
memory left after weights, CUDA graphs for generation batches, its own NVLink all-reduce (MNNVL/one-shot)
for small messages (tensorrt_llm/llmapi/llm_args.py)."""
from hybridperf.serving.engines.registry import EngineDefaults, register

TRTLLM = register(EngineDefaults(
    name="trtllm", max_batched_tokens=((0, 8192),), offline_batched_tokens=8192, max_running=2048,
    cuda_graph_max_batch=512, mem_utilization=0.9, block_size=32, mixed_batches=True, budget_counts_decodes=True,
    preempts=False, activation_reserve_gb=4.0,
    attention=(("ampere", "torch_flow", "torch_flow"),), nvidia_only=True))
