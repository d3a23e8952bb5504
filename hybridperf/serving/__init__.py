"""LLM serving (vLLM, SGLang, TensorRT-LLM): one scheduler core, one file per engine, kernel priors per
iteration. `predict_serving` returns a `ServingResult` (docs/serving.md)."""
from hybridperf.serving.api import Latency, ServingResult, Worker, predict_serving

__all__ = ["Latency", "ServingResult", "Worker", "predict_serving"]
