"""Whole-model composition correction: a scalar per (kernel-predictor kind, mode) in log space.

    e2e = exp(log_bias) * sum(kernel predictions x repeats)

`log_bias` is the median of log(measured / composed) over NeuSight's whole-model labels; `q_lo`/`q_hi`
are the 5% / 95% quantiles of the residual after the correction, on devices held out of the fit
(leave-one-device-out), and give the 90% model interval. Regenerate with
`python experiments/model_latency.py --write-calibration` (which also reports the leave-one-device-out
accuracy that these shipped numbers do not see). Kinds: 'prior' (the analytical prior alone) and
'bundle' (a trained kernel bundle). A kind missing here means no correction and an interval built
from the kernels' own intervals.
"""
from __future__ import annotations

CALIBRATION: dict = {
    "prior": {
        "inf": {
            "log_bias": -0.0681,
            "q_lo": -0.3907,
            "q_hi": 0.261,
            "n_labels": 55
        },
        "train": {
            "log_bias": -0.3211,
            "q_lo": -0.3655,
            "q_hi": 0.27,
            "n_labels": 12
        }
    }
}
