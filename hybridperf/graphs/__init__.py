"""Whole-model op graphs of Hugging Face transformers and their latency composition.

    from hybridperf.graphs import predict_model, sweep
    predict_model("gpt2_large.json", batch=4, seq=1024, mode="inf", device="NVIDIA H100 80GB HBM3").to_dict()
    # {"e2e_ms": ..., "lo_ms": ..., "hi_ms": ..., "fw_ms": ..., "bw_ms": 0.0}
"""
from hybridperf.graphs.compare import compare_devices
from hybridperf.graphs.compose import (
    ModelPrediction,
    compose,
    predict_model,
    predict_request,
    resolve_predictor,
    sweep,
)
from hybridperf.graphs.config import SUPPORTED_MODEL_TYPES, ModelConfig, load_config
from hybridperf.graphs.kernels import build_graph, layer_gemms
from hybridperf.graphs.model_graph import ModelGraph
from hybridperf.graphs.measured_runs import calibrate_from_runs, read_runs
from hybridperf.graphs.plot import plot_device_comparison, plot_latency_vs_batch
from hybridperf.graphs.primitives import Block
from hybridperf.graphs.request import ModelRequest

__all__ = [
    "SUPPORTED_MODEL_TYPES", "Block", "ModelConfig", "ModelGraph", "ModelPrediction", "ModelRequest", "build_graph",
    "calibrate_from_runs", "compare_devices", "compose", "layer_gemms", "load_config", "plot_device_comparison",
    "plot_latency_vs_batch", "predict_model", "predict_request", "read_runs",
    "resolve_predictor", "sweep",
]
