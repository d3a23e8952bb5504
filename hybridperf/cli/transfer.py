"""`hybridperf transfer` and `hybridperf suggest`: adapt to a new GPU from a few measured kernels."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def transfer(
    measured: Path = typer.Argument(..., help="Kernels measured on the target GPU (NeuSight columns + Latency in ms)."),
    device: str = typer.Option(..., "--device", help="The target GPU: catalog name/alias or JSON spec."),
    out: Path = typer.Option(..., "--out", help="Directory for the adapted bundle (ONNX + manifest)."),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="Zero-shot bundle (default: shipped)."),
    host: str = typer.Option(
        "current", "--host",
        help="Whose per-call overhead the measured calls carry: 'current' or 'neusight' (PyTorch 2.1 hosts); "
             "rows with a `host` column keep theirs. Predict with the same --host.",
    ),
) -> None:
    """Adapt the zero-shot predictor to DEVICE with the measured kernels; save it as a bundle."""
    from hybridperf.csvio import read_csv
    from hybridperf.datasets.schema import canonicalize
    from hybridperf.errors import InputError
    from hybridperf.guard import check_predictions
    from hybridperf.predictor import Predictor
    from hybridperf.priors.launch import check_host
    from hybridperf.transfer import adapt_predictor, save_adapted

    rows = canonicalize(read_csv(measured), source=str(measured), require_latency=True, host=check_host(host))
    if rows.empty:
        raise InputError(f"{measured}: no measured rows to adapt with (only a header?)")
    adapted = adapt_predictor(Predictor.load(model_bundle), rows, device)
    check = adapted.predict(rows, device)
    check_predictions(check["pred_ms"], check["lo_ms"], check["hi_ms"], f"the adapted model on {measured}")
    dest = save_adapted(adapted, out)
    info = adapted.adaptation
    typer.echo(f"adapted to {info['device']} with {info['k']} kernels "
               f"({', '.join(f'{c}: {n}' for c, n in info['per_class_rows'].items())}); bundle in {dest}")
    typer.echo(f"use it with: hybridperf predict-kernels IN.csv --device '{info['device']}' --model-bundle {dest} --output OUT.csv")


def suggest(
    device: str = typer.Option(..., "--device", help="The target GPU."),
    k: int = typer.Option(16, "--k", "-k", help="How many kernels to measure."),
    out: Path = typer.Option(Path("suggested_shapes.csv"), "--out", help="Shapes file for `hybridperf collect`."),
    candidates: Optional[Path] = typer.Option(
        None, "--candidates", help="Candidate kernels CSV (default: a built-in transformer grid, or with --config "
        "the model's own kernels that `hybridperf collect` can run)."),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle"),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Design for this model's latency (a Hugging Face config.json, as in predict-model): "
        "pick the kernels whose measurement best pins the summed time of its kernels, each weighted by its share."),
    batch: Optional[int] = typer.Option(None, "--batch", help="With --config: batch size."),
    seq: Optional[int] = typer.Option(None, "--seq", help="With --config: sequence length."),
    mode: str = typer.Option("inf", "--mode", help="With --config: inf, train or decode (as in predict-model)."),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help="With --config: the model's dtype (default: the config's, else fp32, as in "
        "predict-model)."),
    schema: str = typer.Option(
        "neusight", "--schema", help="neusight (kernels for `transfer`) or aiconfigurator (gemm and attention rows "
        "for `predict-kernels --calibration`)."),
) -> None:
    """List the K kernels whose measurement on DEVICE would help transfer most; write a shapes file.
    With --config, the kernels that would help predict that model's latency most."""
    from hybridperf.errors import InputError

    if schema == "aiconfigurator":
        if config is not None or model_bundle is not None:
            raise InputError("--config and --model-bundle go with --schema neusight")
        return _suggest_aic(device, k, out, candidates)
    if schema != "neusight":
        raise InputError(f"--schema must be neusight or aiconfigurator, got {schema!r}")
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from hybridperf.atomic import write_csv
    from hybridperf.csvio import read_csv
    from hybridperf.guard import check_predictions
    from hybridperf.predictor import Predictor
    from hybridperf.transfer.suggest import default_candidates, suggest_kernels, target_shares, to_shapes_csv

    target, dtype_why = None, ""
    if config is not None:
        from hybridperf.datasets.collector import COLLECTABLE_OPS
        from hybridperf.graphs import build_graph
        from hybridperf.graphs.compose import model_kernel_requests
        from hybridperf.graphs.config import model_dtype

        if batch is None or seq is None:
            raise InputError("--config needs --batch and --seq")
        if not config.is_file():
            raise InputError(f"config file not found: {config}")
        dtype, dtype_why = model_dtype(config, dtype, False)
        target = model_kernel_requests(build_graph(config, batch, seq, mode, dtype), device)
        own = target[target["OPName"].isin(COLLECTABLE_OPS) & (target["dtype"] == dtype)]
        if candidates is None and own.empty:
            raise InputError(f"{config}: the model has no {dtype} kernels `hybridperf collect` can run; "
                             "pass --candidates")
    elif any(v is not None for v in (batch, seq)):
        raise InputError("--batch and --seq go with --config")
    cand = read_csv(candidates) if candidates else (own.drop(columns="count") if target is not None
                                                     else default_candidates())
    predictor = Predictor.load(model_bundle)
    from hybridperf.devices import get_device

    predictor.check_device(get_device(device))
    picks = suggest_kernels(predictor, cand, device, k, target=target)
    check_predictions(picks["pred_ms"], picks["lo_ms"], picks["hi_ms"], "suggested kernels")
    write_csv(to_shapes_csv(picks), out)  # before the table: a failed write is the only thing printed
    t = Table(title=f"{len(picks)} kernels to measure on {device}")
    if target is not None:
        tpred, _, share = target_shares(predictor, target, get_device(device))
        by_class = pd.Series(share).groupby(tpred["op_class"].to_numpy()).sum().sort_values(ascending=False)
        t.caption = f"for {config.name}'s kernel time: " + ", ".join(f"{c} {v:.0%}" for c, v in by_class.items())
    for c in ("op", "B", "M", "N", "K", "H", "pred_ms", "90% interval"):
        t.add_column(c)
    fmt = lambda v: "" if v != v else f"{v:g}"  # noqa: E731
    for r in picks.itertuples():
        t.add_row(r.op, fmt(r.B), fmt(r.M), fmt(r.N), fmt(r.K), fmt(r.H), f"{r.pred_ms:.4g}", f"{r.lo_ms:.3g}-{r.hi_ms:.3g}")
    Console(stderr=True).print(t)
    dt = f" --dtype {dtype}" if config is not None and dtype != "fp32" else ""
    model = f" for a {dtype} model ({dtype_why})" if dtype_why else ""
    typer.echo(f"wrote {out}{model}; next: hybridperf collect --shapes {out}{dt} --out measured.csv, "
               f"then hybridperf transfer measured.csv --device '{device}' --out adapted/")


def _suggest_aic(device: str, k: int, out: Path, candidates: Optional[Path]) -> None:
    """`suggest --schema aiconfigurator`: the rows that pin `calibrate_to`'s per-(op, dtype) shifts."""
    from rich.console import Console
    from rich.table import Table

    from hybridperf.aic_kernels import AicPredictor
    from hybridperf.atomic import write_csv
    from hybridperf.csvio import integers_restored, read_table
    from hybridperf.devices import get_device
    from hybridperf.guard import check_predictions
    from hybridperf.transfer.aic_suggest import default_candidates, suggest_rows

    dev = get_device(device)
    cand = read_table(candidates, "candidates file") if candidates else default_candidates()
    picks = suggest_rows(AicPredictor.load(), cand, dev, k)
    check_predictions(picks["pred_ms"], picks["pred_lo_ms"], picks["pred_hi_ms"], "suggested rows")
    write_csv(integers_restored(picks), out)  # each op's blanks in the others' columns made its sizes floats
    t = Table(title=f"{len(picks)} rows to measure on {dev.name}")
    for c in ("op_name", "shape", "dtype", "pred_ms", "90% interval"):
        t.add_column(c)
    for r in picks.to_dict("records"):
        gemm = r["op_name"] == "gemm"
        if gemm:
            shape = f"m={r['m']:g} n={r['n']:g} k={r['k']:g}"
        else:
            tokens = f"isl={r['isl']:g}" if r["op_name"] == "context_attention" else f"step={r['step']:g}"
            shape = (f"b={r['batch_size']:g} {tokens} heads={r['num_heads']:g}/{r['num_key_value_heads']:g} "
                     f"d={r['head_dim']:g}")
        t.add_row(r["op_name"], shape, str(r["gemm_dtype"] if gemm else r["attn_dtype"]), f"{r['pred_ms']:.4g}",
                  f"{r['pred_lo_ms']:.3g}-{r['pred_hi_ms']:.3g}")
    Console(stderr=True).print(t)
    typer.echo(f"wrote {out}; next: hybridperf collect --schema aiconfigurator --shapes {out} --out measured.csv, "
               f"then hybridperf predict-kernels ROWS.csv --device '{dev.name}' --calibration measured.csv "
               "--output OUT.csv")


def register(app: typer.Typer) -> None:
    app.command("transfer")(transfer)
    app.command("suggest")(suggest)
