"""Few-shot transfer on a GPU we measured ourselves: zero-shot vs `--calibration` with the kernels
`hybridperf suggest` picked, scored on the disjoint fp32 grid of `gpu_check`.

For each saved GPU directory of `experiments/data/measured/` (see its README for the method): the
calibration set is `suggested_measured.csv` (32 kernels picked by `suggest` before anything was
measured). Two test sets, none of their kernels in the calibration set:
`gpu_check`, the fp32 rows of `kernels.csv` (81 kernels), and, where it was measured, `neusight_test`,
the sample of NeuSight's own test shapes in `grid/test_*.csv` (1,398 kernels). Where the GPU also
measured NeuSight's training shapes (`grid/train_*.csv`), a second table: transfer with k of them
drawn at random (10 draws), scored on the NeuSight test shapes. A third: the test shapes measured in
fp16 and bf16, zero-shot. A fourth (`model_runs`, GPUs the shipped bundle did not train on): the
GPU's fp32 whole-model runs (`models.csv`), zero-shot and after transfer with 16 of its NeuSight test
shapes picked by `suggest`. The zero-shot predictor is scored with the batched-SGEMM tiles of the other
GPUs' traces only. The shipped bundle trained on the H200's grids (not the H100's): `trained on it`
marks the rows that are not held out.

    python -m experiments.transfer.measured_transfer            # about 2 min; writes experiments/out/measured_transfer.md
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO, add_out_argument, ape, inside

from hybridperf.datasets.schema import canonicalize  # noqa: E402
from hybridperf.devices import get_device  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.training.kernel_data import load_measured_grid  # noqa: E402
from hybridperf.transfer import adapt_predictor  # noqa: E402

MEASURED = REPO / "experiments" / "data" / "measured"
COLUMNS = ["OPName", "B", "M", "N", "K", "H", "Latency"]


def test_sets(gpu_dir: Path) -> dict[str, pd.DataFrame]:
    """{name: canonical fp32 test kernels} of one measured GPU (see the module docstring)."""
    grid = pd.read_csv(gpu_dir / "kernels.csv")
    sets = {"gpu_check": canonicalize(grid.loc[grid["dtype"] == "fp32", COLUMNS], source=str(gpu_dir / "kernels.csv"),
                                      require_latency=True)}
    if list((gpu_dir / "grid").glob("test_*.csv")):
        sets["neusight_test"] = load_measured_grid(gpu_dir, splits=("test",))
    return sets


def class_scores(pred: Predictor, dev, test: pd.DataFrame, **labels) -> list[dict]:
    """Per op class (and `all`): MAPE and 90%-interval coverage of `pred` on `test`, with `labels`."""
    res = pred.predict(test, dev)
    y = test["latency_ms"].to_numpy()
    errors = ape(res["pred_ms"], y)
    cov = inside(y, res["lo_ms"], res["hi_ms"])
    rows = []
    for cls in [*sorted(test["op_class"].unique()), "all"]:
        m = (test["op_class"] == cls).to_numpy() if cls != "all" else np.ones(len(y), bool)
        rows.append({**labels, "op_class": cls, "n": int(m.sum()), "mape": errors[m].mean(),
                     "coverage_pct": cov[m].mean() * 100})
    return rows


def _device(gpu_dir: Path):
    return get_device(str(pd.read_csv(gpu_dir / "kernels.csv", usecols=["Device"])["Device"].iloc[0]))


def score(gpu_dir: Path) -> pd.DataFrame:
    """Per test set and op class: MAPE and 90%-interval coverage, zero-shot and after transfer."""
    sets, dev = test_sets(gpu_dir), _device(gpu_dir)
    calib = canonicalize(pd.read_csv(gpu_dir / "suggested_measured.csv"), source="suggested", require_latency=True)
    rows = []
    zero = Predictor.load().with_constants(fitted_constants(dev.name))
    seen = dev.name in zero.training_devices
    for name, pred in (("zero-shot", zero), (f"transfer, k={len(calib)}", adapt_predictor(zero, calib, dev))):
        for set_name, test in sets.items():
            rows += class_scores(pred, dev, test, device=dev.name, **{"trained on it": seen, "test set": set_name},
                                 predictor=name)
    return pd.DataFrame(rows)


def random_curve(gpu_dir: Path, ks=(4, 8, 16, 32, 64), draws: int = 10) -> pd.DataFrame:
    """Transfer with k kernels drawn at random from NeuSight's training shapes measured on the GPU
    (`grid/train_*.csv`, fp32), scored on its NeuSight test shapes: mean over `draws` seeded draws."""
    dev = _device(gpu_dir)
    pool = load_measured_grid(gpu_dir, splits=("train",))
    test = load_measured_grid(gpu_dir, splits=("test",))
    rows = []
    zero = Predictor.load().with_constants(fitted_constants(dev.name))
    label = dev.name + " (trained on it)" * (dev.name in zero.training_devices)
    rows += class_scores(zero, dev, test, device=label, k=0, draw=0)
    for k in ks:
        for draw in range(draws):
            calib = pool.sample(n=k, random_state=draw).reset_index(drop=True)
            rows += class_scores(adapt_predictor(zero, calib, dev), dev, test, device=label, k=k, draw=draw)
    return pd.DataFrame(rows).groupby(["device", "k", "op_class"])[["mape", "coverage_pct"]].mean().reset_index()


def half_precision(gpu_dir: Path, bundle: str | None) -> pd.DataFrame:
    """Zero-shot, per dtype (fp16, bf16) and op class, on the GPU's NeuSight test shapes measured in half
    precision: MAPE, 90%-interval coverage and the median interval width hi/lo. `trained on it` says
    whether the bundle's training data held the GPU (then its own bias applies and nothing is held out)."""
    dev = _device(gpu_dir)
    test = load_measured_grid(gpu_dir, splits=("test",), dtypes=("fp16", "bf16"))
    pred = (Predictor.load(bundle) if bundle else Predictor.load()).with_constants(fitted_constants(dev.name))
    seen = dev.name in pred.training_devices
    rows = []
    for dtype, t in test.groupby("dtype"):
        t = t.reset_index(drop=True)
        res = pred.predict(t, dev)
        log_width = pd.Series(np.log(res["hi_ms"] / res["lo_ms"]).to_numpy())
        width = {**log_width.groupby(t["op_class"].to_numpy()).median().to_dict(), "all": log_width.median()}
        for r in class_scores(pred, dev, t, device=dev.name, dtype=dtype, **{"trained on it": seen}):
            rows.append({**r, "median hi/lo": float(np.exp(width[r["op_class"]]))})
    return pd.DataFrame(rows)


def model_runs(gpu_dir: Path, k: int = 16) -> pd.DataFrame:
    """The GPU's fp32 whole-model runs (`models.csv`), zero-shot and after transfer with `k` of its
    measured NeuSight test shapes picked by `suggest`: per class (`suggest_kernels` alone), for all the
    runs' models at once (`target=`: every run's kernels, each run's zero-shot time scaled to 1), and
    for each run's own model (`suggest --config`, one transfer per run). Returns one row per run."""
    from experiments.gpu import gpu_check as gc

    from hybridperf.graphs import build_graph, compose
    from hybridperf.graphs.compose import model_kernel_requests
    from hybridperf.transfer.suggest import equal_weight_target, suggest_kernels

    dev = _device(gpu_dir)
    runs = pd.read_csv(gpu_dir / "models.csv")
    runs = runs[runs["dtype"] == "fp32"].reset_index(drop=True)
    family = {c.removesuffix(".json"): f for c, f, *_ in gc.MODELS}
    pool = load_measured_grid(gpu_dir, splits=("test",))
    zero = Predictor.load().with_constants(fitted_constants(dev.name))

    def graph(r):
        cfg = gc._config(f"{r['model']}.json")
        cfg[gc.LAYER_KEY[family[r["model"]]]] = int(r["layers"])
        return build_graph(cfg, int(r["batch"]), int(r["seq"]), r["mode"], recompute=bool(r["recompute"]),
                           attn="eager")

    def target(rs):
        return equal_weight_target(zero, [model_kernel_requests(graph(r), dev) for r in rs], dev)

    def adapted(tgt=None):
        return adapt_predictor(zero, suggest_kernels(zero, pool, dev, k, target=tgt), dev)

    records = runs.to_dict("records")
    per_class, all_models = adapted(), adapted(target(records))
    rows = []
    for r in records:
        g = graph(r)
        out = {"run": f"{r['model']} {r['mode']} b{r['batch']} s{r['seq']}" + " recompute" * bool(r["recompute"]),
               "measured ms": r["measured_ms"]}
        for name, pred in (("zero-shot", zero), (f"k={k} per class", per_class),
                           (f"k={k} for all runs", all_models), (f"k={k} for this run", adapted(target([r])))):
            out[f"{name} err %"] = (compose(g, dev, pred).ms / r["measured_ms"] - 1) * 100
        rows.append(out)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out_argument(ap, "measured_transfer.md")
    ap.add_argument("--bundle", default=None,
                    help="kernel bundle for the half-precision table (default: the shipped one)")
    a = ap.parse_args(argv)
    dirs = sorted(d for d in MEASURED.iterdir() if (d / "suggested_measured.csv").is_file())
    table = pd.concat([score(d) for d in dirs], ignore_index=True)
    wide = table.pivot_table(index=["device", "trained on it", "test set", "op_class", "n"], columns="predictor",
                             values=["mape", "coverage_pct"]).round(1)
    order = [(v, p) for v in ("mape", "coverage_pct") for p in ("zero-shot", next(c for c in table["predictor"].unique() if c != "zero-shot"))]
    wide = wide[order]
    wide.columns = [f"{p} {v}" for v, p in wide.columns]
    md = ("# Transfer on our own measurements (fp32, MAPE % and 90% coverage %)\n\n"
          + wide.reset_index().to_markdown(index=False) + "\n")
    grids = [d for d in dirs if list((d / "grid").glob("train_*.csv"))]
    if grids:
        curve = pd.concat([random_curve(d) for d in grids], ignore_index=True)
        curve = curve.pivot_table(index=["device", "k"], columns="op_class", values=["mape", "coverage_pct"]).round(1)
        curve.columns = [f"{c} {v}" for v, c in curve.columns]
        md += ("\n## Random k from NeuSight's training shapes measured on the GPU, scored on its NeuSight test shapes "
               "(mean of 10 draws)\n\n" + curve.reset_index().to_markdown(index=False) + "\n")
    runs = [d for d in dirs if (d / "models.csv").is_file() and list((d / "grid").glob("test_*.csv"))]
    for d in runs:
        dev = _device(d)
        if dev.name in Predictor.load().training_devices:
            continue  # the shipped bundle trained on this GPU's kernels: nothing would be held out
        t = model_runs(d)
        mape = t.filter(like="err %").abs().mean().round(1)
        md += (f"\n## Whole models after transfer ({dev.name}, fp32 runs of `models.csv`): 16 of its measured "
               "NeuSight test shapes picked by `suggest` per class, for all runs' models, or for each run's own "
               "model (`suggest --config`)\n\n" + t.round(1).to_markdown(index=False)
               + "\n\nMAPE %: " + ", ".join(f"{c.removesuffix(' err %')} {v}" for c, v in mape.items()) + "\n")
    half = pd.concat([half_precision(d, a.bundle) for d in dirs if list((d / "grid").glob("test_*.csv"))],
                     ignore_index=True)
    md += ("\n## Half precision, zero-shot: NeuSight's test shapes measured in fp16 and bf16\n\n"
           + half.round({"mape": 1, "coverage_pct": 1, "median hi/lo": 2}).to_markdown(index=False) + "\n")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
