"""Package layout that pyproject.toml alone cannot express: the repository's exported_models/
folder (the shipped ONNX bundles) is installed as the package `hybridperf._exported_models`, and the
device catalog's data files (hybridperf/devices/data/) ship inside `hybridperf.devices`."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["hybridperf", "hybridperf.*"]) + ["hybridperf._exported_models"],
    package_dir={"hybridperf._exported_models": "exported_models"},
    package_data={"hybridperf._exported_models": ["*/*.onnx", "*/*.json", "*.json", "*.md"],
                  "hybridperf.devices": ["data/gpus/*.json", "data/nodes/*.json"],
                  "hybridperf.priors": ["data/*.json"],
                  "hybridperf.serving": ["calibration.json"]},
    include_package_data=False,
)
