"""Measure kernel latencies on the local machine, the way NeuSight's artifact measured its data set.

Methodology (NeuSight `neusight/Dataset/collect.py`, plus an explicit warm-up):

* One (op, shape) at a time, under `torch.no_grad()`, inputs created once on the device before timing
  (seeded with torch.manual_seed(0); NeuSight uses randn for GEMM operands and zeros for the others):
    - bmm      torch.bmm(x, y), x (B,M,N), y (B,N,K); form `mm_t`: torch.bmm(a.transpose(1, 2), b), a (B,N,M)
    - linear   torch.nn.functional.linear(x, w, b), x (B,M,N), w (K,N), b (K); a row of `form` `mm`
               (hybridperf.ops.LINEAR_FORMS) runs torch.mm(x, w) instead, x (B*M,N), w (N,K), no bias:
               a plain GEMM like the backward's, which cuBLAS may split where it does not split F.linear;
               form `mm_t` (a weight gradient) runs torch.mm(a.t(), b), a (N,B*M), b (N,K)
    - add/mul/div/pow         torch.<op>(x, y), two (B,H) tensors
    - addu/mulu/divu/powu     torch.<op>(x, s), a (B,H) tensor and a python float s (0.5)
    - relu/gelu/tanh          the torch function on a (B,H) tensor
    - softmax  torch.softmax(x, dim=-1) over H;  ln  F.layer_norm(x, (H,), weight, bias)
* fp32 runs with TF32 disabled for matmul and cuDNN (NeuSight's labels are true fp32).
* `warmup` untimed calls, then `repeats` calls each timed on its own:
    - CUDA: a CUDA event recorded before and after the call, `torch.cuda.synchronize()` after each
      call, `start.elapsed_time(end)` (ms);
    - CPU: `time.perf_counter_ns()` around the call.
* Latency = the mean of the `fastest` fastest of the `repeats` calls, in ms (NeuSight: 5 of 25).
  Taking the fastest calls discards interference (clock ramp, other processes) rather than averaging it.
* Each row records the device name (`torch.cuda.get_device_name()`, or the CPU's name), the torch and
  CUDA versions. Shapes that run out of memory are skipped and reported.

The output table has the canonical columns (hybridperf.datasets.schema.COLUMNS) plus NeuSight's
`OPName`, `Latency` and `Device`, so that the CSV is both a `predict-kernels --calibration` input and
a training input. torch is imported only inside `collect_kernels`.
"""
from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.atomic import write_csv
from hybridperf.datasets.schema import canonicalize
from hybridperf.errors import HybridperfError, InputError
from hybridperf.ops import GEMM_OPS, TRANSPOSED_FORM, canonical_op

BINARY_OPS = ("add", "mul", "div", "pow")
SCALAR_OPS = {"addu": "add", "mulu": "mul", "divu": "div", "powu": "pow"}
SCALAR = 0.5
#: every op `build_op` can run
COLLECTABLE_OPS = ("bmm", "linear", *BINARY_OPS, *SCALAR_OPS, "relu", "gelu", "tanh", "softmax", "ln")
TORCH_HINT = "`pip install torch==2.13.0`"
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}


def import_torch():
    try:
        import torch  # noqa: PLC0415  (lazy on purpose: the prediction path never imports torch)
    except ImportError:
        raise InputError(f"collecting kernels needs PyTorch, which is not installed; {TORCH_HINT}") from None
    return torch


def load_shapes(path: str | Path, ops=None) -> pd.DataFrame:
    """Read a shapes CSV (NeuSight columns) into rows of (op, B, M, N, K, H).

    With an `OPName` column each row keeps its op (and `ops`, when given, filters rows). Without one,
    every row is expanded to each op of `ops` its columns fit: B,M,N,K for bmm/linear, B,H otherwise.
    A linear row's B is folded into M (the one GEMM PyTorch runs over the flattened input).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such shapes file")
    try:
        raw = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    want = None
    if ops:
        want = []
        for o in ops:
            try:
                want.append(canonical_op(o))
            except HybridperfError as e:
                raise InputError(f"--ops: {e}") from None
    opcol = "OPName" if "OPName" in raw.columns else ("op" if "op" in raw.columns else None)
    groups = []  # frames indexed by (file line - 2), each with unique index, validated separately
    if opcol is not None:
        df = raw.rename(columns={opcol: "OPName"})
        if want is not None:
            df = df[df["OPName"].map(lambda o: _safe_op(o) in want)]
        groups.append(df)
    else:
        if want is None:
            raise InputError(f"{path}: no OPName column; pass --ops to say which ops to measure")
        for op in want:
            need = ("B", "M", "N", "K") if op in GEMM_OPS else ("B", "H")
            if all(c in raw.columns for c in need):
                sub = raw.loc[raw[list(need)].notna().all(axis=1)].copy()
                sub["OPName"] = op
                groups.append(sub)
        if not groups:
            raise InputError(f"{path}: no rows with the shape columns the requested ops need "
                             "(B,M,N,K for bmm/linear, B,H for the others)")
    frames = []
    for g in groups:
        # validate through the canonical schema: unknown op, NaN / non-positive shape -> file:line error
        g = g.drop(columns=[c for c in ("Latency", "latency_ms", "Device", "device") if c in g.columns])
        if not g.empty:
            frames.append(canonicalize(g, source=str(path), on_bad="raise").loc[:, ["op", "B", "M", "N", "K", "H",
                                                                                   "form"]])
    if not frames:
        raise InputError(f"{path}: no shapes to measure" + (f" for ops {want}" if want else ""))
    out = pd.concat(frames, ignore_index=True)
    gemm = out["op"].isin(GEMM_OPS)
    out.loc[gemm, "H"] = np.nan  # the canonical table keeps unused shape fields NaN
    out.loc[~gemm, ["M", "N", "K"]] = np.nan
    return out


def _safe_op(name) -> str | None:
    try:
        return canonical_op(name)
    except HybridperfError:
        return None


def cpu_name() -> str:
    name = ""
    try:  # the marketing name, where Linux exposes it
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine() or "cpu"


def build_op(torch, op: str, B: int, M: int, N: int, K: int, H: int, device: str, dtype, form: str = "linear"):
    """(callable, args) that run `op` (a linear in `form`) once on inputs created on `device`, as NeuSight
    measures it."""
    F = torch.nn.functional
    kw = {"device": device, "dtype": dtype}
    if op == "bmm" and form == TRANSPOSED_FORM:
        return (lambda a, b: torch.bmm(a.transpose(1, 2), b)), (torch.randn(B, N, M, **kw), torch.randn(B, N, K, **kw))
    if op == "bmm":
        return torch.bmm, (torch.randn(B, M, N, **kw), torch.randn(B, N, K, **kw))
    if op == "linear" and form == TRANSPOSED_FORM:
        return (lambda a, b: torch.mm(a.t(), b)), (torch.randn(N, B * M, **kw), torch.randn(N, K, **kw))
    if op == "linear" and form == "mm":
        return torch.mm, (torch.randn(B * M, N, **kw), torch.randn(N, K, **kw))
    if op == "linear":
        return F.linear, (torch.randn(B, M, N, **kw), torch.randn(K, N, **kw), torch.randn(K, **kw))
    x = torch.zeros(B, H, **kw)
    if op in BINARY_OPS:
        return getattr(torch, op), (x, torch.zeros(B, H, **kw))
    if op in SCALAR_OPS:
        fn = getattr(torch, SCALAR_OPS[op])
        return (lambda t: fn(t, SCALAR)), (x,)
    if op == "relu":
        return torch.relu, (x,)
    if op == "gelu":
        return F.gelu, (x,)
    if op == "tanh":
        return torch.tanh, (x,)
    if op == "softmax":
        return (lambda t: torch.softmax(t, dim=-1)), (x,)
    if op == "ln":
        w, b = torch.ones(H, **kw), torch.zeros(H, **kw)
        return (lambda t: F.layer_norm(t, (H,), w, b)), (x,)
    raise InputError(f"collector cannot build op {op!r}")


def resolve_device(torch, device: str | None) -> str:
    """The torch device a collector measures on ("cuda", "cuda:N" or "cpu"; default cuda when torch sees one);
    InputError for anything else or for cuda without a CUDA build."""
    dev = (device or ("cuda" if torch.cuda.is_available() else "cpu")).strip().lower()
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda: this torch build sees no CUDA device; use --device cpu")
    if not dev.startswith("cuda") and dev != "cpu":
        raise InputError(f"--device must be cuda or cpu, got {device!r}")
    return dev


def time_calls(torch, fn, args, *, cuda: bool, warmup: int, repeats: int) -> list[float]:
    """Per-call latencies (ms) of `repeats` calls of fn(*args) after `warmup` untimed calls."""
    for _ in range(warmup):
        fn(*args)
    if cuda:
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(repeats):
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            out.append(float(start.elapsed_time(end)))
        return out
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(*args)
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def fastest_mean(samples, fastest: int) -> float:
    """Mean of the `fastest` smallest samples."""
    s = np.sort(np.asarray(samples, dtype=float))
    return float(s[: max(1, min(fastest, len(s)))].mean())


def collect_kernels(
    shapes: pd.DataFrame,
    *,
    device: str | None = None,
    warmup: int = 5,
    repeats: int = 25,
    fastest: int = 5,
    dtype: str = "fp32",
    source: str = "",
    progress: bool = True,
) -> pd.DataFrame:
    """Measure every (op, shape) row of `shapes` (columns op, B, M, N, K, H and optionally a linear's
    `form`, e.g. from `load_shapes`).

    `device`: 'cuda' (or 'cuda:N'), 'cpu', or None for cuda when available else cpu.
    Returns the canonical table plus OPName, Latency, Device, `Torch Version`, `CUDA Version`,
    Repeats, Fastest. After the call `collect_kernels.last_report` lists the skipped shapes.
    """
    if repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {repeats}")
    if not 1 <= fastest <= repeats:
        raise InputError(f"--fastest must be between 1 and --repeats ({repeats}), got {fastest}")
    if warmup < 0:
        raise InputError(f"--warmup must be >= 0, got {warmup}")
    from hybridperf.devices import dtype_key

    try:
        dkey = dtype_key(dtype)
    except HybridperfError as e:
        raise InputError(f"--dtype: {e}") from None
    if dkey not in _TORCH_DTYPES:
        raise InputError(f"--dtype {dtype!r} cannot be collected; use fp32, fp16, bf16 or fp64")

    torch = import_torch()
    tdtype = getattr(torch, _TORCH_DTYPES[dkey])
    dev = resolve_device(torch, device)
    cuda = dev.startswith("cuda")
    if cuda:
        tdev = torch.device(dev)
        if tdev.index is not None:
            torch.cuda.set_device(tdev)
        device_name = torch.cuda.get_device_name(tdev).strip()
        cuda_version = f"cu{(torch.version.cuda or '').replace('.', '')}"
    else:
        device_name = cpu_name()
        cuda_version = ""
    torch_version = "p" + torch.__version__.split("+")[0]

    rows, report = [], []
    old_tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    forms = shapes["form"] if "form" in shapes.columns else pd.Series("", index=shapes.index)
    items = list(shapes[["op", "B", "M", "N", "K", "H"]].assign(form=forms.fillna("")).itertuples(index=False))
    try:
        with ProgressBar(progress, len(items), device_name) as advance, torch.no_grad():
            for op, B, M, N, K, H, form in items:
                op = canonical_op(op)
                dims = [int(v) if v == v else 0 for v in (B, M, N, K, H)]
                try:
                    fn, args = build_op(torch, op, *dims, device=dev, dtype=tdtype, form=form or "linear")
                    samples = time_calls(torch, fn, args, cuda=cuda, warmup=warmup, repeats=repeats)
                    del args
                except (RuntimeError, MemoryError) as e:  # OOM, or an op/dtype the backend lacks
                    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                    report.append(f"{op} B={dims[0]} M={dims[1]} N={dims[2]} K={dims[3]} H={dims[4]}: {msg}")
                    if cuda:
                        torch.cuda.empty_cache()
                    advance()
                    continue
                rows.append({"OPName": op, "B": B, "M": M, "N": N, "K": K, "H": H, "form": form or None,
                             "Latency": fastest_mean(samples, fastest)})
                advance()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old_tf32
    collect_kernels.last_report = report
    if not rows:
        first = f": {report[0]}" if report else ""
        raise InputError(f"no kernel could be measured on {device_name}{first}")
    raw = pd.DataFrame(rows)
    raw["dtype"] = dkey
    can = canonicalize(raw, device=device_name, source=source, require_latency=True, on_bad="raise")
    can["OPName"] = can["op"]
    can["Latency"] = can["latency_ms"]
    can["Device"] = device_name
    can["Torch Version"] = torch_version
    can["CUDA Version"] = cuda_version
    can["Repeats"] = repeats
    can["Fastest"] = fastest
    return can


collect_kernels.last_report = []


class ProgressBar:
    """A rich progress bar (or nothing) yielding an `advance()` callable."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled, self.total, self.label = enabled, total, label
        self._bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("collecting on {task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), transient=False)
        self._bar.__enter__()
        task = self._bar.add_task(self.label, total=self.total)
        return lambda: self._bar.advance(task)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False


def measure_to_csv(out: str | Path, measure) -> pd.DataFrame:
    """`measure()`'s table written to `out` (CSV), the folder checked first so that a typo fails before the
    measurements, not after them. Returns the table."""
    out = Path(out)
    if out.parent and not out.parent.exists():
        raise InputError(f"{out}: folder {out.parent} does not exist")
    df = measure()
    try:
        write_csv(df, out)
    except OSError as e:
        raise InputError(f"{out}: cannot write ({e.strerror})") from None
    return df


def collect_to_csv(shapes_path: str | Path, out: str | Path, *, ops=None, **kw) -> pd.DataFrame:
    """load_shapes + collect_kernels, written to `out` (CSV). Returns the table."""
    shapes = load_shapes(shapes_path, ops)
    return measure_to_csv(out, lambda: collect_kernels(shapes, source=str(out), **kw))


__all__ = ["load_shapes", "build_op", "time_calls", "fastest_mean", "collect_kernels", "collect_to_csv",
           "measure_to_csv", "import_torch", "cpu_name", "ProgressBar"]
