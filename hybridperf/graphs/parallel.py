"""Multi-GPU training (and inference) step time: data, tensor and pipeline parallelism (Megatron-style).

    from hybridperf.graphs.parallel import predict_parallel
    predict_parallel("gpt2_large.json", batch=16, seq=1024, mode="train", device="DGX-A100", dp=1, tp=4, pp=1).to_dict()
    # {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms", "compute_ms", "comm_ms", "bubble_ms",
    #  "tp_comm_ms", "dp_comm_ms", "pp_comm_ms", "gpus", "nodes", "microbatches"}

The per-GPU kernel graph is the single-GPU graph (`hybridperf.graphs.kernels`) of one micro-batch,
re-shaped for tensor parallelism, cut into pipeline stages, predicted with the same kernel predictor
and composition (`compose`); collectives come from the collective model
(`hybridperf.residual_models.collectives.CollectiveModel`) on the node's fabric, sizes as NCCL's
tests count them (an all-gather's gathered output, a reduce-scatter's input).

Batch and ranks
    `batch` is the global batch B. Each of the dp data-parallel ranks takes B/dp sequences (an error if
    not integral), split into M micro-batches of b = B/(dp*M) sequences (an error if not integral).
    Default M: the largest divisor of B/dp that is <= pp (so M = pp when possible, 1 without pipeline).
    GPUs = dp*tp*pp, ranks laid out as Megatron does: tp innermost, then dp, then pp; rank r sits on
    node r // gpus_per_node. A group's collective runs on its (ranks, ranks per node) as they fall.

Tensor parallelism (gpt2, gpt_neo, gpt_neox, bert, roberta, xlm_roberta, opt, llama, mistral, qwen2, qwen3, gemma,
gemma2, gemma3_text, phi3)
    Column-parallel QKV and MLP-up GEMMs (output dim / tp), row-parallel attention-out and MLP-down
    GEMMs (reduction dim / tp); attention heads / tp, so QK^T, AV, scale, mask, softmax, dropout and the
    head copies run on B*heads/tp; the MLP activation on ffn/tp columns; rotary embeddings on the
    sharded q/k columns and Qwen3's per-head q/k norms on their heads / tp (llama-like: gate/up are
    column-, o/down row-parallel). LayerNorms, residual adds and
    dropouts on the hidden state are replicated. Vocab-parallel embedding table and LM head / MLM
    decoder: ceil(V/tp) rows per rank (Megatron pads V; the slowest rank sets the pace), and the loss
    (vocab-parallel cross-entropy) on ceil(V/tp) logits per token.
    Collectives (in the model dtype: b*S*hidden*4 bytes in fp32 unless said): per layer two all-reduces in the forward
    (after the row-parallel GEMMs) and two in the backward (input gradients of the column-parallel
    GEMMs); the embedding's all-reduce (forward); the LM head's input-gradient all-reduce (backward);
    vocab-parallel cross-entropy's three all-reduces of b*S*4 bytes (max, sum-exp, target logit).
    Inference (`inf`) has the forward ones only, and gathers the vocab-split logits with an all-gather of
    b*S*ceil(V/tp)*4 bytes per rank. TP collectives sit on the critical path (no overlap, as Megatron
    without sequence-parallel overlap). Not modelled for switch_transformers (tp must be 1).
    Requirements: tp divides the heads, the key/value heads, the hidden size and the FFN width.

Pipeline parallelism
    The L layers are cut into pp contiguous stages of L/pp layers (an error if pp does not divide L, as in
    Megatron); stage 0 also runs the embeddings, the last stage the final norm, LM head and loss.
    With t_s = forward+backward time of stage s for one micro-batch (compute + its TP collectives),
    GPipe / 1F1B take
        T_pipe = sum_s t_s + (M - 1) * max_s t_s
    (fill and drain through every stage once, then M-1 more micro-batches at the bottleneck stage);
    for balanced stages T_pipe = (M + pp - 1) t, bubble fraction (pp-1)/(M+pp-1).
    compute_ms = M x the bottleneck stage's compute, tp_comm_ms = M x its TP collectives, and
    bubble_ms = T_pipe - M * max_s t_s (the bottleneck GPU's idle time).
    Activations (b*S*hidden*4 bytes) go stage to stage by send/recv, forward and (train) backward, not
    overlapped with compute: pp_comm_ms = sum over directions of [sum_boundaries t_p2p + (M-1) max t_p2p].
    With tied word embeddings (GPT-2, OPT, BERT) and pp > 1 the first and last stages also all-reduce
    the embedding gradient (ceil(V/tp)*hidden*4 bytes) after the backward, as Megatron does; this is
    counted in pp_comm_ms. Not modelled for switch_transformers (pp must be 1).

Data parallelism (train only)
    Each rank all-reduces the gradients of the parameters it holds (its stage, TP-sharded; tied weights
    once per stage) over its dp peers, fp32, once per step, after the last micro-batch's backward.
    --no-overlap: one all-reduce of the whole gradient buffer after the backward (fully exposed).
    --overlap (default, DDP/Megatron bucketing): gradients become ready in reverse layer order at a
    uniform rate within each layer's backward (of the last micro-batch); they are cut into buckets of
    `bucket_mb` MiB (default 25, PyTorch DDP's) and all-reduced one after the other as soon as each is
    full; exposed = max(0, end of the last bucket's all-reduce - end of the backward). The last bucket
    (the first layers and the embedding table) is always exposed. Link contention between DP and TP
    traffic is ignored. Under pipelining stage s ends its backward sum_{s'<s} (b_s' + p2p) before stage 0,
    and that slack absorbs part of its exposed all-reduce; dp_comm_ms is the largest remainder.

Step time
    e2e = compute + tp_comm + bubble + pp_comm + dp_comm(exposed) [+ opt];  comm_ms = tp + pp + dp.
    fw_ms / bw_ms split every term into its forward and backward parts (exposed DP goes to bw), so
    e2e = fw_ms + bw_ms as for one GPU. With dp = tp = pp = M = 1 every number equals `predict_model`.
    `optimizer` (as in `predict_model`): every GPU then steps the parameters it holds (its stage,
    TP-sharded), after the gradient all-reduce; opt_ms is the slowest stage's step, added to e2e
    (e2e = fw_ms + bw_ms + opt_ms).

ZeRO (`zero`, train with dp >= 2 and an optimizer; DeepSpeed's stages, stage 3 = FSDP full shard)
    1: each rank keeps and steps 1/dp of the optimizer state (the step runs on a 1/dp slice of the
       flat parameter buffer). The gradient buckets are reduce-scattered (each rank gets 1/dp of each
       bucket) with the same overlap as the all-reduce, and after the step every rank all-gathers the
       others' updated slices (exposed; counted in opt_ms and reported as zero_gather_ms).
    2: as 1, and each rank keeps only its 1/dp of the gradients (memory).
    3: as 2, and each rank keeps only 1/dp of the parameters. Each unit (a layer, the embeddings, the
       head) all-gathers its parameters before it runs, in the forward and again in the backward,
       prefetched one unit ahead on one communication stream that also carries the backward's
       reduce-scatters (`_prefetched`); every micro-batch gathers again. The forward's exposed part is
       zero_gather_ms (in fw_ms), the backward's dp_comm_ms. Memory adds two gathered units (the one
       running and the one prefetched). Stages 2 and 3 need pp = 1, as in DeepSpeed.
    comm_ms then includes zero_gather_ms. Not validated against measurements.

Interval (90%)
    The compute part (compute + bubble) keeps the single-GPU composition's relative interval (kernel
    errors inside a model are strongly correlated); each communication term takes its collectives'
    intervals summed linearly (one fitted model: correlated), the exposed DP time re-simulated at the
    all-reduce bounds. Compute and communication come from independent models, so their deviations add
    in quadrature: lo = e2e - sqrt(dc_lo^2 + dm_lo^2), hi = e2e + sqrt(dc_hi^2 + dm_hi^2).

Memory (per GPU, `ParallelPrediction.memory`: the fullest stage)
    Weights and gradients of the stage's TP-sharded parameters; for training, the activations eager
    autograd saves (`hybridperf.graphs.memory`) for the stage's layers with ffn and heads / tp (the
    hidden-sized tensors counted whole, as without sequence parallelism), plus the head's and loss's on
    the last stage, times the micro-batches a stage holds under 1F1B: min(M, pp - s) on stage s.
    With an optimizer, its state for the stage's parameters. With `recompute` (every layer
    checkpointed) a micro-batch in flight keeps only its layers' inputs (b*S*hidden each), plus one
    layer's saved set while it is re-run; the re-run forward is part of the backward time. Inference:
    the stage's weights plus one GPU's inference activations (the whole key/value cache and the largest
    op, neither sharded: an upper bound).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec, NodeSpec
from hybridperf.errors import InputError
from hybridperf.graphs.config import load_config
from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.memory import MemoryEstimate, layer_stack_bytes, outside_saved_bytes, score_saved_bytes
from hybridperf.graphs.model_graph import ModelGraph
from hybridperf.graphs.optimizer import optimizer_state_bytes, optimizer_table, tensor_numels
from hybridperf.graphs.parallel_comm import (_Comm, dp_sync, pp_transfers, rank_layout, resolve_parallel_device,
                                             tp_collectives, tp_stage_cost)
from hybridperf.graphs.tensor_parallel import (TP_FAMILIES, _pos_int, _tied, block_params,  # noqa: F401
                                               default_microbatches, parallel_graph, shard_graph, validate,
                                               validate_zero)

#: PyTorch DDP's default gradient bucket (bucket_cap_mb=25)
DEFAULT_BUCKET_MB = 25.0


# ----------------------------------------------------------------------------------------------------
# the prediction
# ----------------------------------------------------------------------------------------------------

@dataclass
class ParallelPrediction:
    """The step-time prediction plus the pieces it was built from: `result` holds the contract's numbers,
    `ms`, `lo_ms`, `hi_ms` the step time and its 90% interval."""

    result: dict
    prediction: object  # ModelPrediction of the per-GPU micro-batch graph (all stages)
    stages: pd.DataFrame  # per stage: layers, fw/bw compute, TP fw/bw comm, params, DP all-reduce
    node: NodeSpec
    device: DeviceSpec
    layout: dict
    memory: MemoryEstimate | None = None  # the fullest GPU's
    notes: list = field(default_factory=list)
    zero: int = 0  # ZeRO stage

    @property
    def ms(self) -> float:
        return self.result["e2e_ms"]

    @property
    def lo_ms(self) -> float:
        return self.result["lo_ms"]

    @property
    def hi_ms(self) -> float:
        return self.result["hi_ms"]

    def to_dict(self) -> dict:
        return dict(self.result)

    def components(self) -> pd.DataFrame:
        r = self.result
        rows = [("compute", r["compute_ms"]), ("tp all-reduce", r["tp_comm_ms"]),
                ("pp send/recv", r["pp_comm_ms"]), ("dp all-reduce (exposed)", r["dp_comm_ms"]),
                ("pipeline bubble", r["bubble_ms"])]
        zero = r.get("zero_gather_ms")
        if zero is not None:
            rows.append(("zero param all-gather (exposed)", zero))
        if "opt_ms" in r:
            # ZeRO-1/2 count their post-step gather in opt_ms; the row above shows it
            rows.append(("optimizer step", r["opt_ms"] - (zero if self.zero in (1, 2) else 0.0)))
        df = pd.DataFrame(rows, columns=["component", "ms"])
        df["share"] = df["ms"] / max(r["e2e_ms"], 1e-12)
        return df


def stage_layers(blocks: list, pp: int) -> list:
    """Each pipeline stage's repetitions of each layer block: every block's layers spread as evenly as they go, and
    each stage holding as many layers as the others when pp divides their total (SmolLM3's NoPE layers and Gemma's
    sliding ones need not divide by pp themselves)."""
    shares, offset = [[0] * len(blocks) for _ in range(pp)], 0
    for j, b in enumerate(blocks):
        base, extra = divmod(b.count, pp)
        for s in range(pp):
            shares[s][j] = base + int((s - offset) % pp < extra)
        offset = (offset + extra) % pp
    return shares


def predict_parallel(config, batch: int, seq: int, mode: str = "train", device="DGX-H100", dp: int = 1, tp: int = 1,
                     pp: int = 1, microbatches: int | None = None, overlap: bool = True, predictor=None,
                     collective_model=None, bucket_mb: float = DEFAULT_BUCKET_MB, correction: bool = True,
                     dtype: str | None = None, optimizer: str | None = None, recompute: bool = False, zero: int = 0,
                     calibration: dict | None = None, attn: str = "eager", amp: bool = False) -> ParallelPrediction:
    """Step time of `mode` (train: forward + backward + gradient sync; inf: forward) of a HF transformer
    on dp*tp*pp GPUs of `device` (a node such as DGX-H100, a node JSON, or a GPU placed in a default node).

    `batch` is the global batch; `microbatches` defaults to the largest divisor of batch/dp that is <= pp.
    Returns the `ParallelPrediction`: `ms`, `lo_ms`, `hi_ms`, the stage table, the per-GPU kernel prediction
    and memory; `to_dict()` is the contract's {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"} plus compute_ms,
    comm_ms, bubble_ms, tp_comm_ms, dp_comm_ms, pp_comm_ms, gpus, nodes, microbatches (and opt_ms with an
    optimizer, zero_gather_ms with ZeRO). `collective_model`: default the shipped one (when any of dp, tp,
    pp > 1); `bucket_mb`, `zero`: as in the module doc; `correction`, `dtype`, `optimizer`, `recompute`, `attn`,
    `amp`: as in `hybridperf.graphs.predict_model`. `calibration`: composition constants fitted to single-GPU
    runs on the node's GPU (`hybridperf.graphs.measured_runs.calibrate_from_runs`); default: the shipped ones.
    """
    from hybridperf.graphs.compose import BACKWARD_PHASES, compose, resolve_predictor

    cfg = load_config(config)
    batch = _pos_int(batch, "batch")
    seq = _pos_int(seq, "seq")
    dp, tp, pp = _pos_int(dp, "dp"), _pos_int(tp, "tp"), _pos_int(pp, "pp")
    if not (isinstance(bucket_mb, (int, float)) and not isinstance(bucket_mb, bool) and bucket_mb > 0):
        raise InputError(f"bucket_mb must be > 0, got {bucket_mb!r}")
    m = validate(cfg, batch, mode, dp, tp, pp, microbatches)
    b_mb = batch // (dp * m)
    train = mode == "train"
    zero = validate_zero(zero, mode, dp, pp, optimizer)
    node, dev, note = resolve_parallel_device(device)
    layout = rank_layout(dp, tp, pp, node.gpus_per_node)
    if tp > node.gpus_per_node and tp % node.gpus_per_node:
        raise InputError(f"tp={tp} must fit in one {node.gpus_per_node}-GPU node or be a multiple of it")
    if collective_model is None and (dp > 1 or tp > 1 or pp > 1):
        from hybridperf.residual_models.collectives import CollectiveModel

        collective_model = CollectiveModel.load()
    comm = _Comm(node, collective_model)
    pred = predictor if predictor is not None else resolve_predictor()

    graph = shard_graph(build_graph(cfg, b_mb, seq, mode, dtype, optimizer=optimizer, recompute=recompute, attn=attn,
                                    amp=amp), tp)
    res = compose(graph, dev, pred, correction=correction, calibration=calibration)
    eb = 4.0 if graph.amp else graph.dtype_bytes  # bytes per element of parameters and gradients (fp32 under autocast)
    scale = float(np.exp(res.log_bias))
    tab = res.kernels
    is_fw = (tab["phase"] == "fw").to_numpy()
    blk_fw = tab.loc[is_fw].groupby("block")["total_ms"].sum() * scale
    blk_bw = tab.loc[tab["phase"].isin(BACKWARD_PHASES).to_numpy()].groupby("block")["total_ms"].sum() * scale
    blocks = {b.name: b for b in graph.blocks}

    def per_rep(name, s):  # time of one repetition of block `name`
        return float(s.get(name, 0.0)) / blocks[name].count

    L = cfg.layers
    layer_blocks = [b for b in graph.blocks if b.kind == "layer"]
    pre_blocks = [b for b in graph.blocks if b.kind == "pre"]
    post_blocks = [b for b in graph.blocks if b.kind == "post"]

    # ---- TP collectives (per micro-batch) -----------------------------------------------------------
    act = b_mb * seq * cfg.hidden * eb
    c = tp_collectives(comm, layout["tp"], act, b_mb * seq, -(-cfg.vocab // tp), eb)

    # ---- stages --------------------------------------------------------------------------------------
    rows, shares = [], stage_layers(layer_blocks, pp)
    for s in range(pp):
        first, last = s == 0, s == pp - 1
        mine = [(b, n) for b, n in zip(layer_blocks, shares[s]) if n]
        if first:
            mine = [(b, b.count) for b in pre_blocks] + mine
        if last:
            mine = mine + [(b, b.count) for b in post_blocks]
        if pp == 1:  # exactly the composition's numbers (bit-identical to predict_model)
            f_c, b_c = res.fw_ms, res.bw_ms
        else:
            f_c = sum(per_rep(b.name, blk_fw) * n for b, n in mine)
            b_c = sum(per_rep(b.name, blk_bw) * n for b, n in mine)
        n_layers = L // pp
        tpf, tpb = tp_stage_cost(c, first, last, n_layers, train)
        # backward order of gradient production: units (bw ms of one repetition incl. TP, grad bytes)
        units = []
        for b, n in reversed(mine):
            per_bw = per_rep(b.name, blk_bw)
            if b.kind == "layer" and tp > 1 and train:
                per_bw += 2 * c["act"][0]
            units += [(per_bw, block_params(graph, b, pp) * eb)] * n
        params = sum(u[1] for u in units) / eb
        if not graph.optimizer:
            opt_c = 0.0
        elif pp == 1 and not zero:
            opt_c = res.opt_ms
        else:  # the stage's own parameters (a tied head keeps its copy of the table on the last stage)
            numels = [n for b, reps in mine for _ in range(reps)
                      for n in tensor_numels(b.kernels, tied_head=pp == 1 and bool(cfg.tied_embeddings))]
            if zero:  # each rank steps its 1/dp slice of the flat parameter buffer
                numels = [-(-sum(numels) // dp)]
            opt_c = _optimizer_ms(numels, graph, dev, pred, correction, calibration) * scale
        rows.append({"stage": s, "layers": n_layers, "fw_ms": f_c, "bw_ms": b_c, "tp_fw_ms": tpf, "tp_bw_ms": tpb,
                     "params": params, "opt_ms": opt_c, "_units": units, "_mine": mine, "first": first,
                     "last": last})

    t_stage = np.array([r["fw_ms"] + r["bw_ms"] + r["tp_fw_ms"] + r["tp_bw_ms"] for r in rows])
    bot = int(np.argmax(t_stage))
    bn = rows[bot]
    compute_fw, compute_bw = m * bn["fw_ms"], m * bn["bw_ms"]
    tp_fw, tp_bw = m * bn["tp_fw_ms"], m * bn["tp_bw_ms"]
    others = [r for i, r in enumerate(rows) if i != bot]
    bubble_fw = sum((r["fw_ms"] + r["tp_fw_ms"] for r in others), 0.0)
    bubble_bw = sum((r["bw_ms"] + r["tp_bw_ms"] for r in others), 0.0)

    # ---- PP send/recv, DP gradient sync (all-reduce, or ZeRO's reduce-scatter) and ZeRO's all-gathers ------
    tied = -(-cfg.vocab // tp) * cfg.hidden * eb if train and pp > 1 and _tied(cfg) else 0.0
    pp_fw, pp_bw, pp_lo, pp_hi, p2p = pp_transfers(comm, layout, act, m, train, tied)
    dp_ms = dp_lo = dp_hi = 0.0
    gather = [0.0, 0.0, 0.0]  # ZeRO: exposed parameter all-gathers outside the backward (ms, lo, hi)
    for r in rows:
        r["dp_allreduce_ms"] = 0.0
    if train and dp > 1:
        fw_units = None
        if zero == 3:  # pp == 1: one stage
            fw_units = [(per_rep(b.name, blk_fw), block_params(graph, b, pp) * eb) for b, n in rows[0]["_mine"]
                        for _ in range(n)]
        (dp_ms, dp_lo, dp_hi), gather = dp_sync(comm, rows, layout["dp"], m, zero, overlap, bucket_mb * 2**20, eb,
                                                p2p, fw_units)

    # ---- totals --------------------------------------------------------------------------------------
    fw_gather = gather[0] if zero == 3 else 0.0
    step_gather = gather[0] if zero in (1, 2) else 0.0
    fw_ms = compute_fw + tp_fw + bubble_fw + pp_fw + fw_gather
    bw_ms = compute_bw + tp_bw + bubble_bw + pp_bw + dp_ms
    # every GPU steps its own parameters once the gradients are in (ZeRO-1/2: then gathers the others')
    opt_ms = max(r["opt_ms"] for r in rows) + step_gather
    e2e = fw_ms + bw_ms + opt_ms
    compute = compute_fw + compute_bw
    bubble = bubble_fw + bubble_bw
    tp_ms = tp_fw + tp_bw
    pp_ms = pp_fw + pp_bw
    comm_ms = tp_ms + pp_ms + dp_ms + gather[0]

    # interval: compute (+ bubble) at the composition's relative interval; comm summed; quadrature
    if dp == tp == pp == m == 1:
        lo, hi = res.lo_ms, res.hi_ms
    else:
        rel_lo = res.lo_ms / res.ms if res.ms > 0 else 1.0
        rel_hi = res.hi_ms / res.ms if res.ms > 0 else 1.0
        cpart = compute + bubble + opt_ms - step_gather
        dc_lo, dc_hi = cpart * (1 - rel_lo), cpart * (rel_hi - 1)
        tpf_lo, tpb_lo = tp_stage_cost(c, bn["first"], bn["last"], bn["layers"], train, 1)
        tpf_hi, tpb_hi = tp_stage_cost(c, bn["first"], bn["last"], bn["layers"], train, 2)
        dm_lo = (max(0.0, tp_ms - m * (tpf_lo + tpb_lo)) + max(0.0, pp_ms - pp_lo) + max(0.0, dp_ms - dp_lo)
                 + max(0.0, gather[0] - gather[1]))
        dm_hi = (max(0.0, m * (tpf_hi + tpb_hi) - tp_ms) + max(0.0, pp_hi - pp_ms) + max(0.0, dp_hi - dp_ms)
                 + max(0.0, gather[2] - gather[0]))
        lo = e2e - math.sqrt(dc_lo**2 + dm_lo**2)
        hi = e2e + math.sqrt(dc_hi**2 + dm_hi**2)
    result = {"e2e_ms": e2e, "lo_ms": lo, "hi_ms": hi, "fw_ms": fw_ms, "bw_ms": bw_ms, "compute_ms": compute,
              "comm_ms": comm_ms, "bubble_ms": bubble, "tp_comm_ms": tp_ms, "dp_comm_ms": dp_ms,
              "pp_comm_ms": pp_ms}
    if graph.optimizer:
        result["opt_ms"] = opt_ms
    if zero:
        result["zero_gather_ms"] = gather[0]
    result = {k: float(v) for k, v in result.items()}
    result.update(gpus=int(layout["gpus"]), nodes=int(layout["nodes"]), microbatches=int(m))
    mems = [_stage_memory(graph, r, tp, pp, m, train, dp, zero) for r in rows]
    for r, mem in zip(rows, mems):
        r["mem_gb"] = mem.total
    st = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    notes = [note] if note else []
    memory = max(mems, key=lambda e: e.total)
    return ParallelPrediction(result=result, prediction=res, stages=st, node=node, device=dev, layout=layout,
                              memory=memory, notes=notes, zero=zero)


def _stage_memory(graph: ModelGraph, row: dict, tp: int, pp: int, m: int, train: bool, dp: int = 1,
                  zero: int = 0) -> MemoryEstimate:
    """Device memory of one GPU of pipeline stage `row` (see the module docstring)."""
    mem = _unsharded_stage_memory(graph, row, tp, pp, m, train)
    if not zero:
        return mem
    units = [block_params(graph, b, pp) * graph.dtype_bytes / 1e9 for b, n in row["_mine"]]
    return replace(mem, optimizer=mem.optimizer / dp, step_temp=mem.step_temp / dp,
                   grads=mem.grads / dp if zero >= 2 else mem.grads,
                   # ZeRO-3: a slice of every parameter, plus the gathered unit in use and the one prefetched
                   weights=mem.weights / dp + 2 * max(units) if zero == 3 else mem.weights)


def _unsharded_stage_memory(graph: ModelGraph, row: dict, tp: int, pp: int, m: int, train: bool) -> MemoryEstimate:
    if tp == pp == 1:  # one GPU's graph, as `predict-model` counts it
        return graph.memory()
    cfg, eb = graph.config, graph.dtype_bytes
    wb = 4.0 if graph.amp else eb  # fp32 weights, gradients and optimizer state under autocast
    weights = row["params"] * wb / 1e9
    if not train:
        return MemoryEstimate(weights, 0.0, graph.memory().activations)
    per_mb, once = layer_stack_bytes(cfg.family, cfg.hidden, cfg.ffn // tp, cfg.heads // tp, row["layers"],
                                     graph.batch, graph.seq, eb, cfg.max_positions, graph.recompute)
    if any(k["op"] == "attention" for b in graph.blocks for k in b.kernels):  # fused: no score-sized tensors
        score = score_saved_bytes(cfg.family, cfg.heads // tp, graph.batch, graph.seq, eb)
        if graph.recompute:
            once -= score
        else:
            per_mb -= row["layers"] * score
    if row["last"]:  # the logits, their loss and the head's own layers
        per_mb += outside_saved_bytes(cfg.family, cfg.hidden, -(-cfg.vocab // tp), graph.batch, graph.seq, eb)
    state, temp = optimizer_state_bytes(row["params"], graph.optimizer, wb) if graph.optimizer else (0.0, 0.0)
    act = per_mb * min(m, pp - row["stage"]) + once
    return MemoryEstimate(weights, weights, act / 1e9, state / 1e9, temp / 1e9)


def _optimizer_ms(numels: list, graph: ModelGraph, device: DeviceSpec, predictor, correction: bool,
                  calibration: dict | None = None) -> float:
    """In-model time (ms, before the mode's log-bias) of one optimizer step over tensors `numels`."""
    from hybridperf.graphs.compose import composition_params, in_model_ms, predict_table, predictor_kind

    t = predict_table(optimizer_table(numels, graph.optimizer, device, graph.dtype), device, predictor)
    par = composition_params(predictor_kind(predictor), graph.mode, calibration, correction=correction)
    per_launch = in_model_ms(t["pred_ms"].to_numpy(), t["floor_ms"].to_numpy(), par["scale"], par["gap_ms"],
                             par["cpu_ms"], par["raw"])
    return float((per_launch * t["count"].to_numpy()).sum())
