"""How far k measured kernels of one op class take that class (issue: few-shot transfer, k = 16 target).

`fewshot_curve.py` spends k kernels across all op classes. This asks the bound question: if all k were
spent on a single op class (suggested among that class's kernels of a random half of the table, or drawn
at random from the class), what MAPE does the transfer reach on the class's other kernels? A class that
misses a target here misses it at that k however the k kernels are split between classes, so long as the
transfer is this one. Leave-one-GPU-out as in `fewshot_curve.py`: the same per-fold bundles and the same
transfer prior, chosen on the other GPUs only; a k larger than half of a class's kernels is skipped.

    python -m experiments.transfer.class_budget --bundles experiments/out/logo_bundles --out experiments/out/class_budget
    python -m experiments.transfer.class_budget --vidur --bundles experiments/out/vidur_bundles --out DIR   # a100 -> a40
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


from experiments.common import OUT
from experiments.transfer.fewshot_curve import evaluate, fold_arguments, fold_transfer_prior, load_folds
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.transfer import adapt_predictor  # noqa: E402
from hybridperf.transfer.suggest import suggest_kernels  # noqa: E402

KS = (4, 16, 64)


def one_class_budget(base: Predictor, pool: pd.DataFrame, device: str, op_class: str, k: int, strategy: str,
                     draw: int, prior, class_scale) -> pd.DataFrame:
    """`evaluate`d predictions for the rest of `op_class`'s kernels after transfer from k of them."""
    rng = np.random.default_rng(1000 * draw + k)
    rows = np.flatnonzero(pool["op_class"].to_numpy() == op_class)
    if strategy == "random":
        picked = rng.choice(rows, size=k, replace=False)
    else:
        half = pool.iloc[rng.choice(len(pool), size=len(pool) // 2, replace=False)]
        picked = suggest_kernels(base, half, device, k, op_classes=(op_class,),
                                 class_scale=class_scale)["pool_idx"].to_numpy()
    rest = np.setdiff1d(rows, picked)
    adapted = adapt_predictor(base, pool.iloc[picked], device, prior, class_scale)
    return evaluate(adapted.predict(pool.iloc[rest], device))


def run_device(device: str, bundle: Path, pool: pd.DataFrame, draws: int, prior, class_scale, log) -> list:
    base = Predictor.load(bundle).with_constants(fitted_constants(device))
    pool = pool.reset_index(drop=True)
    pool = pool.assign(pool_idx=np.arange(len(pool)), op_class=base.predict(pool, device)["op_class"].to_numpy())
    out = []
    for op_class, n in pool["op_class"].value_counts().sort_index().items():
        for k in [k for k in KS if k <= n // 2]:
            for strategy in ("suggest", "random"):
                for draw in range(draws):
                    res = one_class_budget(base, pool, device, op_class, k, strategy, draw, prior, class_scale)
                    out.append({"heldout": device, "op_class": op_class, "k": k, "strategy": strategy,
                                "draw": draw, "mape": res["ape"].mean(), "coverage": res["covered"].mean()})
        log(f"{device}: {op_class} done")
    return out


def main() -> None:
    args = fold_arguments(__doc__, str(OUT / "class_budget")).parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    name, folds = load_folds(Path(args.data), Path(args.bundles), args.vidur)
    rows = []
    for device, (bundle, pool) in folds.items():
        _, prior, class_scale = fold_transfer_prior(folds, device)
        rows += run_device(device, bundle, pool, args.draws, prior, class_scale, log)
    draws = pd.DataFrame(rows)
    draws.to_csv(out / f"{name}_class_budget_draws.csv", index=False)
    per_gpu = draws.groupby(["strategy", "k", "op_class", "heldout"])[["mape", "coverage"]].mean()
    mean = per_gpu.groupby(level=["strategy", "k", "op_class"]).mean()
    n_gpus = per_gpu.groupby(level=["strategy", "k", "op_class"]).size().rename("GPUs")
    md = [f"# k kernels of one op class only: that class's MAPE (%) after transfer ({name}, leave-one-GPU-out)", "",
          "All k measured kernels are of the scored class (`experiments/transfer/class_budget.py`); the class is scored on its",
          "other kernels. Mean over held-out GPUs (those with at least 2k kernels of the class) and draws.", "",
          mean["mape"].unstack("op_class").round(1).to_markdown(), "",
          "## Coverage of the 90% interval (%)", "", mean["coverage"].unstack("op_class").round(1).to_markdown(), "",
          "## GPUs in each mean", "", n_gpus.unstack("op_class").to_markdown(), "",
          "## Per held-out GPU, k = 16 suggested", "",
          per_gpu.xs(("suggest", 16), level=["strategy", "k"])["mape"].unstack("op_class").round(1).to_markdown(), ""]
    (out / f"{name}_class_budget.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
