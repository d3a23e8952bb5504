"""Check the GEMM prior against public GEMM throughput of GPUs outside the NeuSight and Vidur data.

`experiments/data/public_gemm_tflops.csv` holds crowd-sourced square-GEMM throughputs (see
`experiments/data/README.md` for sources and method): torch.mm of n x n x n, n in 1024..10240, 6 warm-up
and 30 timed back-to-back calls. `max` rows are the best size, `size` rows one size, `sustained` rows a
long run of one size. For every row the script prices the same GEMMs with the project's prior (kernel
timing: back-to-back calls hide the launch) and reports prior / public throughput.

Some rows set constants (the `anchor` column): the T4, L4 and H200 half-precision power caps
(`hybridperf.priors.power.MATRIX_ENERGY_RATIO`; the H200's is set by its kernel trace, and its public rows
agree with it) and the bf16 rows of GPUs without bf16 units
(`EMULATED_BF16_GEMM_RATE`). Every other row is a check. The `before` column is the prior with one
matrix-unit energy ratio for every architecture and dtype and bf16 at the fp32 rate, as it was before
those anchors.

    python -m experiments.kernels.public_gemm_check --out experiments/out/public_gemm
"""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd


from experiments.common import INPUTS, OUT
from hybridperf.datasets.schema import canonicalize  # noqa: E402
from hybridperf.devices import get_device  # noqa: E402
from hybridperf.priors import power  # noqa: E402
from hybridperf.priors.kernel_prior import prior_ms  # noqa: E402
from hybridperf.priors.power import issue_limited_peak, sustained_flops  # noqa: E402

DATA = INPUTS / "public_gemm_tflops.csv"
SIZES = (1024, 2048, 4096, 8192, 10240)
#: rows whose numbers set a constant of the prior (not checks): (device, dtype, source)
ANCHORS = {("Tesla T4", "fp16", "nvidia-forum-264462"), ("NVIDIA L4", "fp16", "torch-performance-test-data-issue-120"),
           ("NVIDIA H200", "fp16", "torch-performance-test-data"), ("NVIDIA H200", "bf16", "torch-performance-test-data")}


def prior_tflops(device_name: str, dtype: str, sizes) -> float:
    """Best prior throughput (TFLOP/s) of square torch.mm over `sizes` on `device_name`."""
    n = np.asarray(sizes, dtype=np.int64)
    table = canonicalize(pd.DataFrame({"OPName": "linear", "B": 1, "M": n, "N": n, "K": n, "dtype": dtype}))
    ms = prior_ms(table, get_device(device_name), timing="kernel")
    return float(np.max(2.0 * n.astype(float) ** 3 / (ms * 1e-3)) / 1e12)


@contextlib.contextmanager
def _before():
    """Context: one matrix-unit energy ratio for every architecture and operand width, and bf16 at
    the fp32 rate on GPUs without bf16 units (the earlier prior, for comparison)."""
    with mock.patch.object(power, "MATRIX_ENERGY_RATIO", {}), \
            mock.patch.object(power, "MATRIX_ENERGY_BY_DTYPE", {"fp32": power.MATRIX_ENERGY_BY_DTYPE["fp32"]}), \
            mock.patch.object(power, "EMULATED_BF16_GEMM_RATE", 1.0):
        yield


def is_anchor(row, device) -> bool:
    """Whether a public row set a constant of the prior (not a check)."""
    return (row.device, row.dtype, row.source) in ANCHORS or (row.dtype == "bf16" and power.emulates_bf16(device))


def check_table(data: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r in data.itertuples():
        sizes = SIZES if r.stat == "max" else (int(r.size),)
        dev = get_device(r.device)
        now = prior_tflops(r.device, r.dtype, sizes)
        with _before():
            before = prior_tflops(r.device, r.dtype, sizes)
        capped = sustained_flops(dev, r.dtype, True) < issue_limited_peak(dev, r.dtype, True)
        rows.append({"device": r.device, "dtype": r.dtype, "stat": r.stat if r.stat != "size" else f"n={int(r.size)}",
                     "public": r.tflops, "prior": round(now, 1), "ratio": round(now / r.tflops, 2),
                     "before": round(before / r.tflops, 2), "power_capped": bool(capped),
                     "anchor": is_anchor(r, dev)})
    return pd.DataFrame(rows)


def summary(t: pd.DataFrame) -> pd.DataFrame:
    """Median and max |log(prior/public)| of the check rows (not anchors), by dtype and power cap."""
    checks = t[~t["anchor"]]
    out = []
    for (dt, capped), g in checks.groupby(["dtype", "power_capped"]):
        for col in ("before", "ratio"):
            e = np.abs(np.log(g[col].to_numpy()))
            out.append({"dtype": dt, "power_capped": capped, "prior": "now" if col == "ratio" else "before",
                        "rows": len(g), "median_abs_log": round(float(np.median(e)), 3),
                        "max_abs_log": round(float(np.max(e)), 3)})
    return pd.DataFrame(out)


def plot(t: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for dt, color in (("fp32", "tab:blue"), ("fp16", "tab:red"), ("bf16", "tab:green")):
        for capped, marker in ((False, "o"), (True, "^")):
            g = t[(t["dtype"] == dt) & (t["power_capped"] == capped)]
            check, anchor = g[~g["anchor"]], g[g["anchor"]]
            ax.scatter(check["public"], check["prior"], c=color, marker=marker, alpha=0.8,
                       label=f"{dt}{', power-capped' if capped else ''}")
            ax.scatter(anchor["public"], anchor["prior"], facecolors="none", edgecolors=color, marker=marker)
    lo, hi = 1.5, 3000
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 1.25, hi / 1.25], "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="public measurement (TFLOP/s)",
           ylabel="prior (TFLOP/s)", title="Square GEMM throughput: prior vs public numbers\n(±25% dotted; hollow: anchors that set a constant)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default=str(OUT / "public_gemm"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = check_table(pd.read_csv(args.data))
    s = summary(t)
    md = ["# GEMM prior vs public square-GEMM throughput", "",
          "ratio = prior / public; before = the same with one matrix-unit energy ratio for all "
          "architectures and dtypes and bf16 at the fp32 rate. Anchor rows set constants; the summary "
          "counts the other rows only.", "",
          t.to_markdown(index=False), "", "## Summary (check rows)", "", s.to_markdown(index=False), ""]
    (out / "public_gemm_check.md").write_text("\n".join(md))
    plot(t, out / "public_gemm_check.png")
    print("\n".join(md))


if __name__ == "__main__":
    main()
