"""`hybridperf predict-kernels`: per-kernel latency with a 90% interval (docs/predict-kernels.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from hybridperf.atomic import write_table
from hybridperf.csvio import integers_restored, read_csv, read_table
from hybridperf.errors import InputError
from hybridperf.guard import check_predictions

#: rows whose out-of-distribution score (`Predictor.predict`'s `ood`) reaches this get a note
OOD_NOTE = 1.0


def predict_kernels(
    input_csv: Path = typer.Argument(
        ..., help="Kernels (CSV or parquet): NeuSight test-CSV columns (OPName, B, M, N, K, H [, dtype]) or "
                  "aiconfigurator's perf-table columns (op_name gemm|context_attention|generation_attention|moe, ...)."),
    device: str = typer.Option(..., "--device", help="Catalog name/alias or a JSON spec path."),
    output: Path = typer.Option(..., "--output",
                                help="Where to write the predictions: CSV, or parquet by a .parquet or .pq suffix."),
    calibration: Optional[Path] = typer.Option(
        None, "--calibration", help="Kernels measured on the target device (with Latency, ms) for few-shot transfer."
    ),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="Kernel bundle directory (default: shipped)."),
    prior_only: bool = typer.Option(False, "--prior-only", help="Use the analytical prior alone."),
    allow_other_device: bool = typer.Option(
        False, "--allow-other-device",
        help="Use a bundle adapted (by `hybridperf transfer`) to another GPU anyway: its corrections were measured "
             "there, not on DEVICE; with aiconfigurator rows, also a --calibration measured on another device."),
    timing: str = typer.Option(
        "call", "--timing",
        help="How latency is measured: 'call' = CUDA events around one eager PyTorch call (NeuSight, "
             "`hybridperf collect`); 'kernel' = a profiler's kernel duration (torch.profiler, Nsight, Vidur). "
             "Rows with their own `timing` column keep it.",
    ),
    host: str = typer.Option(
        "current", "--host",
        help="Whose per-call overhead a timed call carries, and whose PyTorch picks the softmax kernel: "
             "'current' = a current server and PyTorch; 'neusight' = the hosts of NeuSight's artifact "
             "(PyTorch 2.1), whose calls cost 1.7-2.6x more. Rows with their own `host` column keep it.",
    ),
) -> None:
    """Predict the latency of every kernel in INPUT.csv on DEVICE; adds pred_ms, pred_lo_ms, pred_hi_ms."""
    from hybridperf.datasets.schema import canonicalize, measured_elsewhere
    from hybridperf.cli.devices import note_generic_spec
    from hybridperf.devices import get_device
    from hybridperf.predictor import Predictor
    from hybridperf.priors.launch import check_host, check_timing

    if prior_only and model_bundle is not None:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    dev = get_device(device)
    note_generic_spec(dev)
    raw = read_table(input_csv)
    if is_aiconfigurator(raw):
        return _predict_aiconfigurator(raw, dev, output, calibration, model_bundle, prior_only, str(input_csv),
                                       allow_other_device)
    kernels = canonicalize(raw, source=str(input_csv), timing=check_timing(timing), host=check_host(host))
    predictor = Predictor.prior_only() if prior_only else Predictor.load(model_bundle)
    predictor.check_device(dev, allow_other_device)
    if calibration is not None:
        from hybridperf.transfer import adapt_predictor

        measured = canonicalize(read_csv(calibration), source=str(calibration), require_latency=True, timing=timing,
                                host=host)
        if measured.empty:
            raise InputError(f"{calibration}: no measured rows to calibrate with (only a header?)")
        predictor = adapt_predictor(predictor, measured, dev)
    res = predictor.predict(kernels, dev)  # each row's timing: its own column, else --timing
    check_predictions(res["pred_ms"], res["lo_ms"], res["hi_ms"], f"predictions for {input_csv}")
    out = integers_restored(raw)  # shapes stay integers where a blank cell made pandas read floats
    out["pred_ms"] = res["pred_ms"].to_numpy()
    out["pred_lo_ms"] = res["lo_ms"].to_numpy()
    out["pred_hi_ms"] = res["hi_ms"].to_numpy()
    write_table(out, output)
    typer.echo(f"wrote {len(out)} predictions for {dev.name} to {output}", err=True)
    note = accuracy_note(kernels["latency_ms"].to_numpy(), res, measured_elsewhere(kernels, dev))
    if note:
        typer.echo(note, err=True)
    far = res[res["ood"] >= OOD_NOTE]
    if len(far) and calibration is None:
        kinds = ", ".join(sorted({f"{d} {c}" for d, c in zip(far["dtype"], far["op_class"])}))
        rows = f"{len(far)} rows ({kinds}) lie" if len(far) > 1 else f"1 row ({kinds}) lies"
        typer.echo(f"note: {rows} outside what the kernel models were trained on; their "
                   f"intervals are widened, not calibrated (measured rows through --calibration calibrate them)",
                   err=True)


def is_aiconfigurator(raw) -> bool:
    """aiconfigurator's perf-table schema (an `op_name` column) rather than NeuSight's (`OPName`)."""
    return "op_name" in raw.columns and "OPName" not in raw.columns


def _predict_aiconfigurator(raw, dev, output: Path, calibration, model_bundle, prior_only: bool, source: str,
                            allow_other_device: bool) -> None:
    """predict-kernels on rows in aiconfigurator's schema (hybridperf.aic_kernels)."""
    import numpy as np

    from hybridperf.aic_kernels import AicPredictor, harness_of
    from hybridperf.transfer.aic_calibrate import calibrate_to
    from hybridperf.aic_rows import validate
    from hybridperf.datasets.schema import measured_elsewhere

    rows = validate(raw, source)
    predictor = AicPredictor.load(model_bundle)
    if calibration is not None:
        measured = validate(read_table(calibration, "calibration file"), str(calibration))
        elsewhere = measured_elsewhere(measured, dev)
        if elsewhere and not allow_other_device:
            raise InputError(f"{calibration} was measured on {', '.join(elsewhere[:2])}, not {dev.name}: its shift "
                             "would move this device's rows by another's errors; calibrate with rows measured on "
                             "the target GPU (or fix --device, or pass --allow-other-device)")
        if elsewhere:
            typer.echo(f"warning: {calibration} was measured on {', '.join(elsewhere[:2])}, not {dev.name}; "
                       "its shift is applied to this device anyway (--allow-other-device)", err=True)
        predictor = calibrate_to(predictor, measured, dev)
        timed_by, predicted = harness_of(measured), harness_of(rows)
        if len(rows) and not set(timed_by) & set(predicted):
            typer.echo(f"note: {calibration} was timed by {harness_name(timed_by)} and these rows by "
                       f"{harness_name(predicted)}; a calibration shifts only rows of its own harness, so these "
                       "predictions are zero-shot", err=True)
        elif len(rows) and not set(predictor.offsets) & {f"{h}{op}" for h, op in zip(predicted, rows["op_name"])}:
            ops = ", ".join(sorted(set(rows["op_name"])))
            typer.echo(f"note: {calibration} holds no rows of these rows' ops ({ops}); a calibration shifts only the "
                       "ops it measured, so these predictions are zero-shot", err=True)
    res = predictor.predict(rows, dev, prior_only=prior_only)
    check_predictions(res["pred_ms"], res["lo_ms"], res["hi_ms"], f"predictions for {source}")
    notes = absent_dtype_notes(raw, rows) + dtype_notes(rows, dev)
    out = integers_restored(raw)  # shapes stay integers where another op's blank cells made pandas read floats
    out["pred_ms"] = res["pred_ms"].to_numpy()
    out["pred_lo_ms"] = res["lo_ms"].to_numpy()
    out["pred_hi_ms"] = res["hi_ms"].to_numpy()
    write_table(out, output)
    typer.echo(f"wrote {len(out)} predictions for {dev.name} to {output}", err=True)
    for note in notes:
        typer.echo(note, err=True)
    if "latency" in raw.columns:
        y = np.asarray(__import__("pandas").to_numeric(raw["latency"], errors="coerce"), dtype=np.float64)
        note = accuracy_note(y, res.assign(op_class=rows["op_name"].to_numpy()), measured_elsewhere(raw, dev))
        if note:
            typer.echo(note, err=True)


def harness_name(harness) -> str:
    """Who timed rows of these harnesses (`aic_kernels.harness_of`), in words: PyTorch's own kernels
    (`collect`), or a serving engine's."""
    from hybridperf.aic_kernels import TORCH_HARNESS

    return "PyTorch's own kernels" if (harness == TORCH_HARNESS).all() else "a serving engine's kernels"


def absent_dtype_notes(raw, rows) -> list[str]:
    """One `note:` line per dtype column an op of the rows reads but the input leaves out or blank for some of its rows
    (`aic_rows.DEFAULTS` fills them): decode rows without `kv_cache_dtype` are priced as bf16 caches, whose time an fp8
    cache's differs from by 0.5-2x in aiconfigurator's tables."""
    from hybridperf.aic_rows import DEFAULTS, DTYPE_COLUMNS

    ops = raw["op_name"].astype(str).str.strip().str.lower().to_numpy()
    absent = {}
    for op in sorted(set(rows["op_name"])):
        for c in DTYPE_COLUMNS[op]:
            cells = raw.loc[ops == op, c].astype(object) if c in raw.columns else None
            if c in DEFAULTS and (cells is None or (cells.isna() | (cells.astype(str).str.strip() == "")).any()):
                absent.setdefault(c, []).append(op)
    return [f"note: {c} not given for some {', '.join(names)} rows; they are priced with {c} = {DEFAULTS[c]}"
            for c, names in absent.items()]


def dtype_notes(rows, dev) -> list[str]:
    """One `note:` line per way validated aiconfigurator rows are priced other than their dtype says, once
    per run: a GEMM/MoE dtype the prior does not model as its modelled kin (`aic_kernels.priced_dtype`), or (a
    blank cell, `collect`'s float32) as bfloat16; on a GPU without FP4 or FP8 matrix units, such a dtype as the
    weight-only mode engines run it in (`llm_gemm.device_dtype`, the rule `predict-serving` follows); a dtype
    whose matrix rate is under half the 16-bit one (B300's int8; for a path that runs another dtype's kernels,
    theirs: SGLang's int8_wo is W8A8) at that rate; an attention or KV-cache dtype no table holds as the format its
    name reads as (`aic_rows.attn_kin`); fp8 attention without fp8 units at the 16-bit rate
    (`llm_gemm.PEAK_FALLBACK`)."""
    from hybridperf.aic_kernels import priced_dtype
    from hybridperf.aic_rows import DTYPE_COLUMNS, DTYPE_NAMES, attn_kin
    from hybridperf.priors.llm_gemm import GEMM_DTYPES, device_dtype, kernel_dtype, matrix_peak

    pairs = sorted({(op, str(d)) for op in set(rows["op_name"]) for d in
                    rows.loc[rows["op_name"] == op, DTYPE_COLUMNS[op][0]].unique()})
    gemm_like = [(op, d) for op, d in pairs if op in ("gemm", "moe")]
    notes = []
    priced = {d: priced_dtype(d) for _, d in gemm_like}
    kin = {d: k for d, k in priced.items() if d not in GEMM_DTYPES}
    unknown = sorted(repr(d) for d, k in kin.items() if k not in GEMM_DTYPES)
    if unknown:
        notes.append(f"note: GEMM/MoE dtype(s) {', '.join(unknown)} are not modelled; those rows are priced as "
                     "bfloat16 with a widened interval (a --calibration with rows of the same dtype shifts them)")
    read_as = sorted(f"{d!r} as {k}" for d, k in kin.items() if k in GEMM_DTYPES)
    if read_as:
        notes.append(f"note: GEMM/MoE dtype(s) no table here holds are priced as the modelled mode their name reads "
                     f"as, with a widened interval: {', '.join(read_as)}")
    weight_only = sorted({f"{d} as {device_dtype(k, dev)}" for d, k in priced.items() if device_dtype(k, dev) != k})
    if weight_only:
        notes.append(f"note: {dev.name} lacks the matrix units of some rows' dtypes; they are priced weight-only, as "
                     f"engines run such checkpoints there (weights dequantized into the 16-bit MMA): "
                     f"{', '.join(weight_only)}")
    half = matrix_peak(dev, "bf16")
    # the kernels a row runs (`kernel_dtype`: SGLang's int8_wo path is W8A8 int8), at their dtype's rate; a dtype
    # priced weight-only for want of units has the note above
    gemm = rows.loc[rows["op_name"] == "gemm"].reindex(columns=[DTYPE_COLUMNS["gemm"][0], "kernel_source"])
    paths = gemm.fillna("").astype(str).drop_duplicates().itertuples(index=False)
    runs = {(d, kernel_dtype(priced_dtype(d), src, dev)) for d, src in paths}
    runs |= {(d, priced[d]) for op, d in gemm_like if op == "moe"}
    rates = {(d, kd): (GEMM_DTYPES[kd][2], matrix_peak(dev, GEMM_DTYPES[kd][2])) for d, kd in runs
             if (k := priced_dtype(d)) in GEMM_DTYPES and kd in GEMM_DTYPES and device_dtype(k, dev) == k}
    slow = sorted(f"{d if kd == d else f'{d} run as {kd}'} ({key}: {rate / 1e12:,.0f} TFLOP/s)"
                  for (d, kd), (key, rate) in rates.items() if rate < 0.5 * half)
    if slow:
        notes.append(f"note: {dev.name}'s catalog matrix rate for some rows' dtypes is under half its 16-bit rate "
                     f"({half / 1e12:,.0f} TFLOP/s); they are priced at it: {', '.join(slow)}")
    attn = rows.loc[rows["op_name"].astype(str).str.endswith("attention")]
    names = {str(d) for c in DTYPE_COLUMNS["context_attention"] if c in attn for d in attn[c].unique()}
    read_as = sorted(f"{d!r} as {attn_kin(d)}" for d in names if d and d not in DTYPE_NAMES["context_attention"])
    if read_as:
        notes.append("note: attention/KV-cache dtype(s) no table here holds are priced as the format their name reads "
                     f"as, with a widened interval: {', '.join(read_as)}")
    fp8 = sorted({f"{op} {d}" for op, d in pairs if op.endswith("attention") and attn_kin(d) == "fp8"})
    if fp8 and not dev.has_matrix_units("fp8"):
        notes.append(f"note: {dev.name} has no fp8 matrix units; {', '.join(fp8)} rows are priced at its 16-bit "
                     "matrix rate")
    return notes


def accuracy_note(measured, res, elsewhere=()) -> str:
    """'scored N rows with a measured Latency: MAPE x% (per op class), 90% interval covers y%', or ''
    when no row carries a Latency: a user checking the predictor on their own GPU reads it at once. `elsewhere`:
    the devices the rows name that are not the one predicted (`measured_elsewhere`), said with the score."""
    import numpy as np

    y = np.asarray(measured, dtype=np.float64)
    m = np.isfinite(y) & (y > 0)
    if not m.any():
        return ""
    ape = np.abs(res["pred_ms"].to_numpy()[m] / y[m] - 1.0) * 100.0
    covered = (y[m] >= res["lo_ms"].to_numpy()[m]) & (y[m] <= res["hi_ms"].to_numpy()[m])
    classes = res["op_class"].to_numpy()[m]
    per = ", ".join(f"{oc} {ape[classes == oc].mean():.1f}" for oc in sorted(set(classes)))
    other = (f" (rows measured on {', '.join(elsewhere)}, not the --device predicted: this compares two devices)"
             if len(elsewhere) else "")
    return (f"scored {int(m.sum())} rows with a measured Latency{other}: MAPE {ape.mean():.1f}% ({per}); "
            f"the 90% interval covers {covered.mean() * 100:.1f}% of them")


def register(app: typer.Typer) -> None:
    app.command("predict-kernels")(predict_kernels)
