"""hybridperf: analytical priors + learned residuals for GPU latency prediction.

Prediction needs only numpy, pandas and onnxruntime; training needs the `train` extra.
"""
__version__ = "0.1.0"
