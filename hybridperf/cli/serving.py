"""`hybridperf predict-serving`: TTFT, TPOT, end-to-end latency and throughput of an LLM served by vLLM,
SGLang or TensorRT-LLM, with 90% intervals (docs/serving.md)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from hybridperf.atomic import write_csv
from hybridperf.cli.outputs import check_outputs
from hybridperf.errors import InputError
from hybridperf.guard import check_predictions


#: what `--precision` takes (`serving.cost.PRECISIONS`), for both serving commands
PRECISION_HELP = "weights: fp16, bf16, fp8, fp4, int8 (W8A8) or int4 (weight-only)"
DEFAULT_HELP = "; default: what the checkpoint's quantization states, else bf16"


def _precisions(config: Path, precision: str | None, moe_precision: str | None, notes: list) -> tuple[str, str]:
    """--precision and --moe-precision as given, else the checkpoint's (`serving.checkpoint`, said in a note added
    to `notes`), else bf16: an FP8 or NVFP4 checkpoint is served in its own format, not cast up."""
    if precision is not None:
        return precision, moe_precision or ""
    from hybridperf.jsonio import read_json_object
    from hybridperf.serving.checkpoint import checkpoint_precision, quantization
    from hybridperf.serving.load import as_arch

    raw = read_json_object(config)
    found = checkpoint_precision(config, raw, bool(as_arch(str(config)).experts))
    if found is None:
        where = quantization(Path(config), raw)[1]
        if where:
            notes.append(f"note: the checkpoint's quantization ({where}) mixes formats or names one not read here; "
                         "priced in bf16: pass --precision (and --moe-precision)")
        return "bf16", moe_precision or ""
    moe = found.moe_precision if moe_precision is None else moe_precision
    chosen = f"--precision {found.precision}" + (f" --moe-precision {moe}" if moe else "")
    notes.append(f"note: {chosen}, the checkpoint's ({found.what}); pass --precision to choose another")
    return found.precision, moe


def _kv_dtype(config: Path, kv_dtype: str, precision: str, notes: list) -> str:
    """--kv-dtype as given, else the checkpoint's stated KV-cache format where it is not the precision's default
    (said in a note added to `notes`), else "" (the precision's default, `serving.cost.default_kv_dtype`)."""
    if kv_dtype:
        return kv_dtype
    from hybridperf.serving.checkpoint import kv_dtype_of_file
    from hybridperf.serving.cost import default_kv_dtype

    found = kv_dtype_of_file(str(Path(config).resolve()))
    if found is None or found == default_kv_dtype(precision):
        return ""
    notes.append(f"note: --kv-dtype {found}, the checkpoint's KV-cache format; pass --kv-dtype to choose another")
    return found


def _note_precision_fallback(precision: str, dev) -> None:
    """Say so on stderr when the GPU lacks the precision's tensor cores: bf16 then runs in fp16, FP8/FP4
    weights weight-only (`serving.cost.gemm_dtype`)."""
    from hybridperf.serving.cost import PRECISIONS, gemm_dtype

    dt = gemm_dtype(precision, dev)
    if dt == "float16" and precision == "bf16":
        typer.echo(f"note: {dev.name} has no bf16 tensor cores; bf16 weights are priced in fp16, as the engines' "
                   "automatic dtype runs them there", err=True)
    elif dt != PRECISIONS[precision][0]:
        typer.echo(f"note: {dev.name} has no {precision} tensor cores; {precision} weights are priced as weight-only "
                   f"GEMMs dequantized to bf16 ({dt}), as Marlin-style kernels run them", err=True)


def predict_serving_cmd(
    config: Optional[Path] = typer.Option(None, "--config", help="Hugging Face config.json of the model"),
    device: Optional[str] = typer.Option(None, "--device", help="catalog GPU or aiconfigurator system id (h100_sxm)"),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm, sglang or trtllm"),
    isl: Optional[int] = typer.Option(None, "--isl", help="input (prompt) tokens per request"),
    osl: Optional[int] = typer.Option(None, "--osl", help="output tokens per request (EOS ignored)"),
    batch: Optional[int] = typer.Option(None, "--batch", help="offline: B requests submitted at once (LLM.generate)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="closed-loop benchmark keeping C in flight"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel GPUs"),
    pp: int = typer.Option(1, "--pp", help="pipeline stages"),
    ep: int = typer.Option(1, "--ep", help="expert-parallel GPUs (MoE; the rest of --tp splits inside experts)"),
    attention_dp: int = typer.Option(1, "--attention-dp", help="attention data-parallel ranks (MoE)"),
    precision: Optional[str] = typer.Option(None, "--precision", help=PRECISION_HELP + DEFAULT_HELP),
    moe_precision: Optional[str] = typer.Option(None, "--moe-precision",
                                                help="MoE experts' weights where they differ from --precision "
                                                     "(gpt-oss: bf16 with MXFP4 experts is --precision bf16 "
                                                     "--moe-precision int4 on Hopper, fp4 where MXFP4 runs on tensor "
                                                     "cores)"),
    kv_dtype: str = typer.Option("", "--kv-dtype", help="KV cache: bf16, fp16 or fp8 (default: the checkpoint's "
                                                    "stated format, else fp8 for fp8/fp4 weights, else bf16)"),
    spec_tokens: int = typer.Option(0, "--spec-tokens",
                                    help="speculative decoding (MTP, EAGLE): tokens drafted per decode step"),
    acceptance: float = typer.Option(0.7, "--acceptance", help="with --spec-tokens: each draft token's acceptance rate"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object (last line)"),
    rows: Optional[Path] = typer.Option(None, "--rows", help="CSV of runs in silicon_sample.csv's columns"),
    configs: Optional[Path] = typer.Option(None, "--configs",
                                           help="with --rows: directory of <org>--<name>_config.json"),
    output: Optional[Path] = typer.Option(None, "--output", help="with --rows: CSV to write"),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="runs measured on your deployment (--rows' columns plus "
                                                    "silicon_ttft_ms, silicon_tpot_ms) to calibrate by; for one "
                                                    "run, those of its engine, GPU and precision, taken to run "
                                                    "--config's model"),
) -> None:
    """Predict a serving run (one engine instance on tp x pp x attention-dp GPUs of DEVICE), or with --rows
    a CSV of runs (aggregated and disaggregated), adding pred_ttft_ms / pred_tpot_ms and their intervals."""
    if rows is not None:
        if configs is None or output is None:
            raise InputError("--rows needs --configs CONFIG_DIR and --output OUT.csv")
        single = [f for f, v in (("--config", config), ("--device", device), ("--engine", engine), ("--isl", isl),
                                 ("--osl", osl), ("--batch", batch), ("--concurrency", concurrency),
                                 ("--precision", precision), ("--moe-precision", moe_precision), ("--json", as_json),
                                 ("--kv-dtype", kv_dtype or None), ("--tp", tp != 1 or None), ("--pp", pp != 1 or None),
                                 ("--ep", ep != 1 or None), ("--attention-dp", attention_dp != 1 or None),
                                 ("--spec-tokens", spec_tokens or None), ("--acceptance", acceptance != 0.7 or None))
                  if v not in (None, False)]
        if single:  # each row states its own run: a one-run option would be ignored
            raise InputError(f"{', '.join(single)} {'describe' if len(single) > 1 else 'describes'} one run; with --rows "
                             f"each row states its own (drop {'them' if len(single) > 1 else 'it'})")
        check_outputs(output)
        from hybridperf.csvio import read_csv
        from hybridperf.serving.measured import calibrate, offsets
        from hybridperf.serving.rows import predict_rows

        runs = read_csv(rows, "rows CSV")
        measured = _read_measured(calibration) if calibration is not None else None
        out = predict_rows(runs, configs)
        if measured is not None:
            mp = predict_rows(measured, configs)
            used, disagg, refused = _usable_counts(mp)
            if not used:
                raise _no_usable_run(calibration, mp)
            out = calibrate(out, offsets(mp))
            typer.echo(f"calibrated {int((out['calibration_runs'] > 0).sum())} of {len(out)} rows by {used} of "
                       f"{len(mp)} measured runs ({disagg} disaggregated and {refused} unpredictable ones unused)",
                       err=True)
        ok = (out["reason"] == "").to_numpy()
        for k in ("ttft", "tpot"):
            check_predictions(out[f"pred_{k}_ms"][ok], out[f"pred_{k}_lo_ms"][ok], out[f"pred_{k}_hi_ms"][ok],
                              f"{k.upper()} predictions for {rows}")
        write_csv(out, output)
        n_ok = int((out["reason"] == "").sum())
        typer.echo(f"wrote {output}: {n_ok} of {len(out)} rows predicted")
        return
    missing = [f for f, v in (("--config", config), ("--device", device), ("--engine", engine), ("--isl", isl),
                              ("--osl", osl)) if v is None]
    if missing:
        raise InputError(f"missing {', '.join(missing)} (or use --rows)")
    rows_only = [f for f, v in (("--configs", configs), ("--output", output)) if v is not None]
    if rows_only:  # one run prints its result: nothing would read them
        raise InputError(f"{', '.join(rows_only)} only {'work' if len(rows_only) > 1 else 'works'} with --rows")
    from hybridperf.devices import get_device
    from hybridperf.serving import predict_serving

    dev = get_device(device)
    if ep > 1 or moe_precision:
        from hybridperf.serving.load import as_arch

        if not as_arch(str(config)).experts:
            what = f"--ep {ep}" if ep > 1 else f"--moe-precision {moe_precision}"
            raise InputError(f"{what}: {Path(config).name} has no experts; leave it out")
    notes: list[str] = []  # said once the run is predicted: bad input stays a one-line error
    precision, moe_precision = _precisions(config, precision, moe_precision, notes)
    kv_dtype = _kv_dtype(config, kv_dtype, precision, notes)
    scale = _measured_scale(calibration, config, dev, engine, precision) if calibration is not None else (1.0, 1.0)
    res = predict_serving(str(config), device, engine, isl, osl, batch=batch, concurrency=concurrency,
                          tp=tp, pp=pp, ep=ep, attention_dp=attention_dp, precision=precision,
                          moe_precision=moe_precision, kv_dtype=kv_dtype,
                          spec_tokens=spec_tokens, acceptance=acceptance, scale=scale)
    for note in notes:
        typer.echo(note, err=True)
    _note_precision_fallback(precision, dev)
    if moe_precision and moe_precision != precision:
        _note_precision_fallback(moe_precision, dev)
    raw = res.to_json()
    what = f"{engine} serving {Path(config).name} on {device}"
    for k in ("ttft", "tpot", "e2e"):
        check_predictions(raw[f"{k}_ms"], raw[f"{k}_lo_ms"], raw[f"{k}_hi_ms"], f"{k.upper()} of {what}")
    check_predictions([raw["tokens_per_s"], raw["tokens_per_s_per_gpu"]], what=f"tokens/s of {what}",
                      max_value=float("inf"))
    out = {k: (round(v, 4) if abs(v) >= 1e-3 else float(f"{v:.4g}")) for k, v in raw.items()}
    if not as_json:
        mode = f"batch {batch}" if batch is not None else f"concurrency {concurrency}"
        typer.echo(f"{engine} on {res.gpus} x {device}, ISL {isl} OSL {osl}, {mode}:")
        for k in ("ttft", "tpot", "e2e"):
            typer.echo(f"  {k.upper():5s} {out[f'{k}_ms']:.2f} ms  [{out[f'{k}_lo_ms']:.2f}, {out[f'{k}_hi_ms']:.2f}]")
        typer.echo(f"  {out['tokens_per_s']:.1f} tokens/s, {out['tokens_per_s_per_gpu']:.1f} per GPU")
    typer.echo(json.dumps(out))


def _read_measured(calibration: Path):
    """The measured runs of `calibration` (at least one, with a run's and the measured columns); InputError
    otherwise."""
    from hybridperf.csvio import read_csv, with_rows
    from hybridperf.serving.measured import check_measured

    measured = with_rows(read_csv(calibration, "calibration CSV"), calibration, "calibration CSV")
    check_measured(measured)
    return measured


def _usable_counts(mp) -> tuple[int, int, int]:
    """Of measured runs `mp` (predicted): how many can calibrate (aggregated, predicted), how many are
    disaggregated and how many were refused."""
    from hybridperf.serving.measured import aggregated

    refused, usable = mp["reason"] != "", aggregated(mp)
    return int(usable.sum()), int((~refused & ~usable).sum()), int(refused.sum())


def _no_usable_run(calibration: Path, mp) -> InputError:
    """The error for measured runs (`mp`, predicted) none of which can calibrate: how many were disaggregated and
    how many refused, and why the first was."""
    _, disagg, refused = _usable_counts(mp)
    why = f"; first refusal: {mp.loc[mp['reason'] != '', 'reason'].iloc[0]}" if refused else ""
    return InputError(f"no aggregated run of {calibration} could be predicted to calibrate by "
                      f"({disagg} disaggregated, {refused} refused{why})")


def _measured_scale(calibration: Path, config: Path, dev, engine: str, precision: str) -> tuple[float, float]:
    """(TTFT, TPOT) factors from the measured runs of `calibration` that ran this engine on this GPU at this
    precision, each predicted with --config's model at its own lengths, concurrency and split (`pooled_offset`);
    InputError if none can be."""
    from hybridperf.serving.measured import pooled_offset, same_deployment
    from hybridperf.serving.rows import predict_rows

    measured = _read_measured(calibration)
    mine = same_deployment(measured, engine, dev, precision)
    if not mine.any():
        raise InputError(f"none of the {len(measured)} runs of {calibration} ran {engine} on {dev.name} with "
                         f"{precision} weights (backend, system, gemm_quant_mode or precision columns)")
    mp = predict_rows(measured[mine], None, config=str(config))
    off = pooled_offset(mp)
    if not off["runs"]:
        raise _no_usable_run(calibration, mp)
    scale = math.exp(off["ttft"]), math.exp(off["tpot"])
    models = sorted(set(measured.loc[mine, "model_path"].fillna("").astype(str)))
    typer.echo(f"calibrated by {off['runs']} of {len(measured)} measured runs (TTFT x {scale[0]:.3f}, TPOT x "
               f"{scale[1]:.3f}), each taken to run {Path(config).name}; their model_path: {', '.join(models)}",
               err=True)
    return scale


def _int_list(text: str, flag: str) -> tuple:
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"{flag} takes comma-separated positive integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{flag} takes comma-separated positive integers, got {text!r}")
    return vals


def sweep_serving_cmd(
    config: Path = typer.Option(..., "--config", help="Hugging Face config.json of the model"),
    devices: str = typer.Option(..., "--devices", help="comma-separated GPUs or aiconfigurator system ids"),
    engine: str = typer.Option(..., "--engine", help="vllm, sglang or trtllm"),
    isl: int = typer.Option(..., "--isl", help="input (prompt) tokens per request"),
    osl: int = typer.Option(..., "--osl", help="output tokens per request"),
    tps: str = typer.Option("1,2,4,8", "--tp", help="tensor-parallel sizes to try, comma-separated"),
    concurrencies: str = typer.Option("1,4,16,64,256", "--concurrency", help="closed-loop concurrencies to try"),
    precision: Optional[str] = typer.Option(None, "--precision", help=PRECISION_HELP + DEFAULT_HELP),
    ttft_sla_ms: float = typer.Option(float("inf"), "--ttft-sla-ms", help="TTFT limit (its 95% bound must meet it)"),
    tpot_sla_ms: float = typer.Option(float("inf"), "--tpot-sla-ms", help="TPOT limit (its 95% bound must meet it)"),
    executor: str = typer.Option("local", "--executor", help="local, or ray (the cluster RAY_ADDRESS names, else "
                                                              "a local one; pip install 'hybridperf\\[ray]')"),
    output: Optional[Path] = typer.Option(None, "--output", help="CSV of every point"),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="PNG of tokens/s per GPU against TPOT (needs "
                                                                  "matplotlib)"),
) -> None:
    """Which GPU, TP and concurrency serve the model within the SLA at the most tokens/s per GPU: every
    (device, tp, concurrency) of the grid through predict-serving; prints the best point."""
    import pandas as pd
    from dataclasses import asdict

    from hybridperf.serving.sweep import best, plot, sweep, why_none_fit

    check_outputs(output, plot_path)
    devs = [d.strip() for d in devices.split(",") if d.strip()]
    if not devs:
        raise InputError("--devices names no GPU")
    notes: list[str] = []
    precision, moe_precision = _precisions(config, precision, None, notes)
    kv = {"kv_dtype": found} if (found := _kv_dtype(config, "", precision, notes)) else {}
    pts = sweep(str(config), devs, engine, isl, osl, tps=_int_list(tps, "--tp"),
                concurrencies=_int_list(concurrencies, "--concurrency"), precision=precision,
                ttft_sla_ms=ttft_sla_ms, tpot_sla_ms=tpot_sla_ms, executor=executor, moe_precision=moe_precision, **kv)
    ok = [p for p in pts if not p.reason]
    if not ok:
        raise InputError(f"no configuration of the sweep fits ({why_none_fit(pts)})")
    from hybridperf.devices import get_device

    for note in notes:
        typer.echo(note, err=True)
    for name in devs:
        _note_precision_fallback(precision, get_device(name))
    for k in ("ttft", "tpot"):
        check_predictions([getattr(p, f"{k}_ms") for p in ok], [getattr(p, f"{k}_lo_ms") for p in ok],
                          [getattr(p, f"{k}_hi_ms") for p in ok], f"{k.upper()} of the sweep")
    if output is not None:
        write_csv(pd.DataFrame([asdict(p) for p in pts]), output)
        typer.echo(f"wrote {output}: {len(pts)} points, {len(ok)} fit in memory")
    if plot_path is not None:
        plot(pts, plot_path, f"{engine}, ISL {isl} OSL {osl}")
        typer.echo(f"wrote {plot_path}")
    b = best(pts)
    if b is None:
        raise InputError(f"no (device, tp, concurrency) of the {len(pts)} meets the SLA ({len(ok)} fit in memory)")
    typer.echo(f"best: {b.device} tp {b.tp} concurrency {b.concurrency}: {b.tokens_per_s_per_gpu:.1f} tokens/s per GPU, "
               f"TTFT {b.ttft_ms:.1f} ms (90% interval up to {b.ttft_hi_ms:.1f}), TPOT {b.tpot_ms:.2f} ms "
               f"(up to {b.tpot_hi_ms:.2f})")


def register(app: typer.Typer) -> None:
    app.command("predict-serving")(predict_serving_cmd)
    app.command("sweep-serving")(sweep_serving_cmd)
