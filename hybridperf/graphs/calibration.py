"""Whole-model composition constants per kernel-predictor kind ('prior', 'bundle'); see
`hybridperf.graphs.compose` for the model:

    t_k = max(scale * max(pred_k - floor_k, 0) + gap_ms, cpu_ms),  e2e = exp(log_bias[mode]) * sum t_k count_k

Fitted on ALL of NeuSight's eager whole-model labels (every label device), so these shipped numbers are
meant for GPUs outside the label set; `q_lo`/`q_hi` (90% model interval, log space) are the 5% / 95%
quantiles of the leave-one-device-out residuals. `variant` names the constants that were free (here
only `gap_ms`: a fitted scale, per-kernel CPU bound or per-mode log bias did not help on held-out
devices). Regenerate with
`python -m experiments.models.model_latency --bundles experiments/out/logo_bundles --write-calibration`, which also
reports the leave-one-device-out accuracy these numbers do not see. A kind missing here means
`compose.DEFAULT_GAP_MS` and an interval built from the kernels' own intervals.

`cpu_ms` is not fitted on the labels: it is what a current host spends dispatching one kernel of a
transformers 5.x model in eager PyTorch, read off the lent H200's host (PyTorch 2.11, transformers 5.17)
where the GPU idles: a bf16 decode step of Llama-3-8B takes 21.0 ms for 1,494 kernels (14.1 us each)
against 6.8 ms of GPU busy time, Qwen3-8B 31.5 ms for 2,254 (14.0 us)
(`experiments/data/measured/h200/modern/`). With it the H200's 155 modern runs go from 27.6% to 17.7%
MAPE (decode 35.3 -> 16.5%; in-sample for this host constant), and the H100's fp32 runs, on another
machine's host, from 7.9% to 7.5% (`python -m experiments.models.modern_models`).
"""
from __future__ import annotations

CALIBRATION: dict = {
    "prior": {
        "scale": 1.0,
        "gap_ms": 0.00841,
        "cpu_ms": 0.014,
        "inf": {
            "log_bias": 0.0,
            "q_lo": -0.1364,
            "q_hi": 0.5124
        },
        "train": {
            "log_bias": 0.0,
            "q_lo": -0.1364,
            "q_hi": 0.5124
        },
        "variant": "gap",
        "n_labels": 67,
        "devices": [
            "AMD Instinct MI100",
            "AMD Instinct MI210",
            "NVIDIA A100-PCIE-40GB",
            "Tesla P100-PCIE-16GB",
            "Tesla P4",
            "Tesla T4",
            "Tesla V100-PCIE-32GB"
        ]
    },
    "bundle": {
        "scale": 1.0,
        "gap_ms": 0.00841,
        "cpu_ms": 0.014,
        "inf": {
            "log_bias": 0.0,
            "q_lo": -0.1364,
            "q_hi": 0.5124
        },
        "train": {
            "log_bias": 0.0,
            "q_lo": -0.1364,
            "q_hi": 0.5124
        },
        "variant": "gap",
        "n_labels": 67,
        "devices": [
            "AMD Instinct MI100",
            "AMD Instinct MI210",
            "NVIDIA A100-PCIE-40GB",
            "Tesla P100-PCIE-16GB",
            "Tesla P4",
            "Tesla T4",
            "Tesla V100-PCIE-32GB"
        ]
    }
}
