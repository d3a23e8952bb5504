"""The shipped model bundles (ONNX + manifest.json), installed as `hybridperf._exported_models`."""
