"""Which GPU? One model step predicted on several devices, ranked.

    from hybridperf.graphs.compare import compare_devices
    compare_devices("gpt2_large.json", batch=8, seq=1024, devices=["H100-SXM", "A100-80GB", "L4"])

The graph is built once; each device composes the same kernels with its own priors, bundle and
intervals. A device's memory check says whether the step fits (`graphs.memory`); a run that does not fit
is still predicted (as if it did) and flagged, so a ranking never silently drops a GPU.
"""
from __future__ import annotations

import pandas as pd

from hybridperf.devices import DeviceSpec, get_device, list_devices
from hybridperf.errors import InputError
from hybridperf.graphs.compose import compose, resolve_predictor
from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.request import DEFAULT_ATTN
from hybridperf.graphs.memory import OVERFLOW_FRACTION, PRESSURE_FRACTION
from hybridperf.predictor import Predictor

COLUMNS = ("device", "e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms", "tokens_per_s", "mem_gb", "device_mem_gb",
           "mem_fraction", "fits", "vs_fastest", "validated", "plan_ms")
#: architectures whose whole-model predictions were scored on a GPU held out of fitting
#: (experiments/RESULTS.md: NeuSight's labels on Pascal, Volta, Turing, Ampere and CDNA 1-2; our H100 and
#: H200 runs on Hopper). Ada and Blackwell were checked on kernel tables only (aiconfigurator's L40S, B200).
MODEL_VALIDATED_ARCHS = ("pascal", "volta", "turing", "ampere", "hopper", "cdna1", "cdna2")


def resolve_devices(devices) -> list[DeviceSpec]:
    """DeviceSpecs for a list of names/aliases/JSON paths, a comma-separated string, or "all" (every
    catalog GPU). Duplicates (two aliases of one GPU) are kept once; an unknown name raises."""
    if isinstance(devices, str):
        devices = [d for d in (x.strip() for x in devices.split(",")) if d]
    if not devices:
        raise InputError("no devices to compare: give at least one name, or 'all'")
    if len(devices) == 1 and str(devices[0]).lower() == "all":
        return list_devices()
    out, seen = [], set()
    for d in devices:
        spec = get_device(d)
        if spec.name not in seen:
            seen.add(spec.name)
            out.append(spec)
    return out


def compare_devices(config, batch: int, seq: int, devices, mode: str = "inf", predictor: Predictor | None = None,
                    dtype: str | None = None, fused: bool = False, optimizer: str | None = None,
                    recompute: bool = False, attn: str = DEFAULT_ATTN, amp: bool = False, cudnn_plans: str = "build",
                    launch: str = "eager") -> pd.DataFrame:
    """One row per device, fastest first: the contract's latencies (ms, 90% interval), tokens per second
    (batch x seq per step; batch per step in decode), the memory the step needs against the device's,
    whether it fits (needs at most `OVERFLOW_FRACTION` of it), e2e relative to the fastest device that
    fits, whether the device's architecture has whole-model runs scored held out (`validated`), and the host
    time its decode step spends building cuDNN plans (`plan_ms`). `devices`: as `resolve_devices`. `attn`,
    `amp`, `cudnn_plans`, `launch`: as in `predict_model`."""
    specs = resolve_devices(devices)
    graph = build_graph(config, batch, seq, mode, dtype, fused=fused, optimizer=optimizer, recompute=recompute,
                        attn=attn, amp=amp, launch=launch)
    need = graph.memory()
    pred = predictor if predictor is not None else resolve_predictor()
    tokens = batch if mode == "decode" else batch * seq
    rows = []
    for dev in specs:
        res = compose(graph, dev, pred, cudnn_plans=cudnn_plans)
        r = res.to_dict()
        frac = need.fraction_of(dev)
        rows.append({"device": dev.name, **r, "tokens_per_s": tokens * 1000.0 / r["e2e_ms"], "mem_gb": need.total,
                     "device_mem_gb": dev.mem_bytes / 1e9, "mem_fraction": frac, "fits": bool(frac <= OVERFLOW_FRACTION),
                     "validated": dev.arch in MODEL_VALIDATED_ARCHS, "plan_ms": res.plan_ms})
    df = pd.DataFrame(rows).sort_values(["fits", "e2e_ms"], ascending=[False, True], kind="stable")
    best = df.loc[df["fits"], "e2e_ms"].min() if df["fits"].any() else df["e2e_ms"].min()
    df["vs_fastest"] = df["e2e_ms"] / best
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    return df[cols].reset_index(drop=True)


def fit_note(row) -> str:
    """'yes', 'tight' (near capacity: allocator churn makes the prediction a lower bound) or 'no'."""
    if not row["fits"]:
        return "no"
    return "tight" if row["mem_fraction"] >= PRESSURE_FRACTION else "yes"
