"""Few-shot transfer to a new GPU: adapt the zero-shot predictor, choose what to measure, save."""
from hybridperf.transfer.adapt import adapt_predictor, fit_corrections
from hybridperf.transfer.export import save_adapted

__all__ = ["adapt_predictor", "fit_corrections", "save_adapted"]
