"""Measure what eager PyTorch autograd keeps for backward in Hugging Face transformers, on the CPU.

A training step's device memory is weights + gradients + the activations autograd saves for backward,
and the saved set of an *eager* HF model (fp32, dropout active) is much larger than the Megatron-style
count (Korthikanti et al., 34*s*b*h + 5*a*s^2*b bytes at 16 bit): GPT-2's gelu_new alone keeps five
ffn-sized tensors. This script counts the saved tensors exactly (`torch.autograd.graph.saved_tensors_hooks`,
each storage once, parameters excluded) for small random-weight models of each family, then fits, per
family, the per-layer bytes

    saved = tokens * (c_h * h + c_f * ffn) + c_a * batch * heads * seq * seq        (tokens = batch * seq)
            [+ c_m * max_positions^2 for GPT-Neo, whose every layer keeps its own causal-mask buffer]

on the difference between an L+1 and an L layer model, and the rest of the model (embeddings, head and
loss) as tokens * (d_h * h + d_v * vocab). Memory saved does not depend on the GPU, so a CPU count is
the device count (the caching allocator's rounding and fragmentation come on top).

    python -m experiments.models.activation_memory      # needs torch and transformers; ~1 min on 2 cores
    python -m experiments.models.activation_memory --moe   # MoE layers (Mixtral, Qwen-MoE, DeepSeek-V3) against the graph
    python -m experiments.models.activation_memory --mla   # fit DeepSeek-V3's latent-attention term

writes experiments/data/activation_memory.csv (the raw counts) and prints the coefficients that each
family module of `hybridperf/graphs/families/` declares (`ACTIVATION`). GPT-Neo's models alternate global
and local attention layers, as its released configs do, so its per-layer fit is the mean of the two kinds; each
of its layers also saves a slice of a (max_positions, max_positions) bool buffer, i.e. the whole buffer.
Switch Transformers are not counted: what their expert layers keep depends on how many tokens the
router sends under the expert capacity, which random weights do not reproduce.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import INPUTS


def _imports():
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - a developer tool
        sys.exit(f"error: this experiment needs torch and transformers ({e.name} is missing)")
    return torch, transformers


#: families whose layers each save a (max_positions x max_positions) mask buffer
MASK_BUFFER_FAMILIES = ("gpt_neo",)
MAX_POSITIONS = 512
#: HF config keys of each family: hidden, heads, layers, ffn, vocab
HF_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size")


def _family(model_type: str, keys=HF_KEYS) -> dict:
    return dict(model_type=model_type, keys=keys, extra={"max_position_embeddings": MAX_POSITIONS})


FAMILIES = {
    "gpt2": dict(model_type="gpt2", keys=("n_embd", "n_head", "n_layer", "n_inner", "vocab_size"),
                 extra={"n_positions": MAX_POSITIONS}),
    "bert": _family("bert"),
    "opt": _family("opt", ("hidden_size", "num_attention_heads", "num_hidden_layers", "ffn_dim", "vocab_size")),
    "llama": _family("llama"),
    "gpt_neo": _family("gpt_neo", ("hidden_size", "num_heads", "num_layers", "intermediate_size", "vocab_size")),
    "gpt_neox": _family("gpt_neox"),
    "qwen3": _family("qwen3"),
    "gemma": _family("gemma"),
    # Gemma 2 (soft-capped scores, sliding and full layers alternating) and Gemma 3 (q/k norms)
    "gemma2": _family("gemma2"),
    "gemma3_text": _family("gemma3_text"),
    # OLMo 2: norms on the sublayer outputs and over the whole q and k projections, fp32 RoPE tables
    "olmo2": _family("olmo2"),
}
#: families whose config sets head_dim on its own (Qwen3 128, Gemma 256 by default): counted at hidden / heads
OWN_HEAD_DIM = ("qwen3", "gemma", "gemma2", "gemma3_text", "olmo2")


#: model dtypes counted: fp32, and bf16 for both 16-bit dtypes (fp16 saves the same tensors: HF's upcasts
#: are explicit `.to(float32)` / `softmax(dtype=float32)` calls, whatever the half type)
TORCH_DTYPES = {"fp32": lambda torch: torch.float32, "bf16": lambda torch: torch.bfloat16}


def saved_bytes(torch, model, inputs) -> int:
    """Bytes of the distinct non-parameter storages autograd saves during forward + loss."""
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**inputs)  # with labels, forward also computes the loss
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(v for k, v in seen.items() if k not in params)


def measure(torch, transformers, family: str, h, a, layers, f, vocab, batch, seq, dtype: str = "fp32") -> int:
    spec = FAMILIES[family]
    kw = dict(zip(spec["keys"], (h, a, layers, f, vocab)), **spec["extra"])
    if family == "opt":
        kw["word_embed_proj_dim"] = h
    if family in OWN_HEAD_DIM:
        kw.update(head_dim=h // a, num_key_value_heads=a)
    if family == "gpt_neo":  # global and local attention layers alternate (the layer counts are even)
        kw["attention_types"] = [[["global", "local"], layers // 2]]
    cfg = transformers.AutoConfig.for_model(spec["model_type"], **kw)
    torch.manual_seed(0)
    if family == "bert":
        model = transformers.AutoModelForPreTraining.from_config(cfg, attn_implementation="eager")
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model.to(TORCH_DTYPES[dtype](torch)).train()
    ids = torch.randint(0, vocab, (batch, seq))
    inputs = {"input_ids": ids, "labels": ids}
    if family == "bert":
        inputs["next_sentence_label"] = torch.zeros(batch, dtype=torch.long)
    return saved_bytes(torch, model, inputs)


def run(out_csv: Path, families=tuple(FAMILIES)) -> pd.DataFrame:
    """Count `families` (all by default) and write the CSV; other families' rows already there are kept."""
    torch, transformers = _imports()
    torch.set_num_threads(2)
    rows = []
    grid = list(itertools.product((128, 192), (2, 4), (2, 4), (64, 128), (1, 2)))  # h, heads, ffn/h, seq, batch
    for dtype, family in itertools.product(TORCH_DTYPES, families):
        for h, a, fr, s, b in grid:
            f, vocab = fr * h, 500
            one = measure(torch, transformers, family, h, a, 2, f, vocab, b, s, dtype)
            two = measure(torch, transformers, family, h, a, 4, f, vocab, b, s, dtype)
            rows.append({"family": family, "dtype": dtype, "hidden": h, "heads": a, "ffn": f, "vocab": vocab, "seq": s,
                         "batch": b, "max_positions": MAX_POSITIONS,
                         "saved_2_layers": one, "saved_4_layers": two, "torch": torch.__version__,
                         "transformers": transformers.__version__})
        print(f"{family} ({dtype}): {len(grid)} configurations", flush=True)
    df = pd.DataFrame(rows)
    if out_csv.is_file():
        kept = pd.read_csv(out_csv)
        df = pd.concat([kept[~kept["family"].isin(families)], df], ignore_index=True)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    return df


def fit(df: pd.DataFrame) -> dict:
    """Per (dtype, family): (c_h, c_f, c_a[, c_m]) bytes per layer and (d_h, d_v) bytes outside the layers."""
    coeffs = {}
    for (dtype, family), g in df.groupby(["dtype", "family"]):
        tok = g["batch"] * g["seq"]
        per_layer = (g["saved_4_layers"] - g["saved_2_layers"]) / 2.0
        cols = [tok * g["hidden"], tok * g["ffn"], g["batch"] * g["heads"] * g["seq"] ** 2]
        if family in MASK_BUFFER_FAMILIES:
            cols.append(g["max_positions"].astype(float) ** 2)
        X = np.column_stack(cols)
        c, *_ = np.linalg.lstsq(X, per_layer, rcond=None)
        rest = g["saved_2_layers"] - 2 * X @ c
        Xr = np.column_stack([tok * g["hidden"], tok * g["vocab"]])
        d, *_ = np.linalg.lstsq(Xr, rest, rcond=None)
        fit_all = 4 * X @ c + Xr @ d
        err = float(np.max(np.abs(fit_all / g["saved_4_layers"] - 1)))
        coeffs[(dtype, family)] = {"c_h": round(float(c[0]), 2), "c_f": round(float(c[1]), 2), "c_a": round(float(c[2]), 2),
                          **({"c_m": round(float(c[3]), 2)} if len(c) > 3 else {}),
                          "d_h": round(float(d[0]), 2), "d_v": round(float(d[1]), 2), "max_rel_err": round(err, 4)}
    return coeffs


#: top-k MoE layers checked with --moe: family, HF keys of the experts, hidden, ffn, batch, seq
MOE_CHECKS = [
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}, 128, 256, 2, 64),
    ("mixtral", {"num_local_experts": 32, "num_experts_per_tok": 4}, 256, 512, 4, 32),
    ("qwen3_moe", {"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 64, "norm_topk_prob": True},
     192, 384, 1, 128),
    ("qwen2_moe", {"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 256}, 256, 512, 4, 32),
    ("deepseek_v3", {"n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
                     "moe_intermediate_size": 64, "q_lora_rank": 96, "kv_lora_rank": 64, "qk_rope_head_dim": 16,
                     "qk_nope_head_dim": 32, "v_head_dim": 32, "first_k_dense_replace": 1}, 192, 384, 2, 64),
    ("gpt_oss", {"num_local_experts": 16, "num_experts_per_tok": 4, "sliding_window": 32}, 192, 192, 2, 64),
    ("gpt_oss", {"num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 16}, 256, 128, 4, 32),
]


def _one_layer_bytes(torch, transformers, cfg: dict, dtype: str, batch: int, seq: int) -> tuple[int, float]:
    """(hook-counted, `ModelGraph.memory`-estimated) bytes one layer saves for backward: a 3-layer minus a
    2-layer model of the causal-LM config `cfg`, `batch` x `seq` random tokens of a 1000-token vocabulary."""
    from hybridperf.graphs import build_graph

    counted, est = [], []
    for n in (2, 3):
        hf = transformers.AutoConfig.for_model(**{**cfg, "num_hidden_layers": n})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")
        model.to(TORCH_DTYPES[dtype](torch)).train()
        ids = torch.randint(0, 1000, (batch, seq))
        counted.append(saved_bytes(torch, model, {"input_ids": ids, "labels": ids, "use_cache": False}))
        est.append(build_graph({**cfg, "num_hidden_layers": n}, batch, seq, "train", dtype).memory().activations * 1e9)
    return counted[1] - counted[0], est[1] - est[0]


def moe_check() -> pd.DataFrame:
    """Bytes one MoE layer saves (a 3-layer minus a 2-layer model, fp32 and bf16) against `ModelGraph.memory`:
    Llama's (Qwen3's) layer at the token's expert width plus `graphs.memory.moe_layer_extra_bytes`."""
    torch, transformers = _imports()
    rows = []
    for family, experts, h, f, b, s in MOE_CHECKS:
        cfg = {"model_type": family, "hidden_size": h, "intermediate_size": f, "num_attention_heads": 4,
               "num_key_value_heads": 4, "head_dim": h // 4, "vocab_size": 1000, "max_position_embeddings": 512,
               **experts}
        if family == "deepseek_v3":  # HF sets DeepSeek's head_dim to its rotary width itself
            cfg.pop("head_dim")
        for dtype in TORCH_DTYPES:
            counted, est = _one_layer_bytes(torch, transformers, cfg, dtype, b, s)
            rows.append({"family": family, "dtype": dtype, "hidden": h, "batch": b, "seq": s,
                         "counted_per_layer": counted, "graph_per_layer": round(est), "ratio": round(est / counted, 4)})
    return pd.DataFrame(rows)


#: DeepSeek-V3 latent-attention shapes counted with --mla: hidden, heads, q_lora (0: none), kv_lora, rope, nope, v
MLA_GRID = [(192, 4, 96, 64, 16, 32, 32), (128, 4, 0, 32, 8, 16, 16), (256, 8, 128, 64, 16, 32, 48),
            (192, 6, 64, 48, 16, 48, 32), (128, 2, 32, 64, 8, 24, 24), (256, 4, 0, 96, 32, 32, 64),
            (160, 8, 48, 32, 8, 16, 40), (224, 4, 112, 80, 16, 40, 24)]


def mla_fit(out_csv: Path) -> pd.DataFrame:
    """What DeepSeek-V3's latent attention saves beyond Llama's layer: the hook count of one MoE layer minus
    the graph's estimate without the MLA term, per token, fitted on the widths of `graphs.memory.MLA_EXTRA_COEFFS`
    and scored leaving one configuration out. Writes the counts to `out_csv`."""
    from hybridperf.graphs import memory

    torch, transformers = _imports()
    torch.set_num_threads(2)
    rows = []
    saved = dict(memory.MLA_EXTRA_COEFFS)
    memory.MLA_EXTRA_COEFFS.update({4: (0,) * 5, 2: (0,) * 5})  # the graph without the term
    try:
        for (h, heads, ql, r, rope, nope, v), dtype in itertools.product(MLA_GRID, TORCH_DTYPES):
            cfg = {"model_type": "deepseek_v3", "hidden_size": h, "intermediate_size": 2 * h,
                   "num_attention_heads": heads, "num_key_value_heads": heads, "vocab_size": 1000,
                   "max_position_embeddings": 512, "q_lora_rank": ql or None, "kv_lora_rank": r,
                   "qk_rope_head_dim": rope, "qk_nope_head_dim": nope,
                   "v_head_dim": v, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                   "moe_intermediate_size": 64, "first_k_dense_replace": 1}
            b, s = 2, 32
            counted, est = _one_layer_bytes(torch, transformers, cfg, dtype, b, s)
            rows.append({"dtype": dtype, "hidden": h, "heads": heads, "q_lora": ql, "kv_lora": r, "rope": rope,
                         "nope": nope, "v": v, "tokens": b * s, "counted_per_layer": counted,
                         "llama_estimate_per_layer": round(est)})
    finally:
        memory.MLA_EXTRA_COEFFS.update(saved)
    df = pd.DataFrame(rows)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    for dtype, g in df.groupby("dtype"):
        X = np.column_stack([g["q_lora"], g["kv_lora"] + g["rope"], g["heads"] * (g["nope"] + g["rope"]),
                             g["heads"] * (g["nope"] + g["v"]), g["hidden"]]).astype(float)
        y = ((g["counted_per_layer"] - g["llama_estimate_per_layer"]) / g["tokens"]).to_numpy()
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        loo = []
        for i in range(len(g)):
            keep = np.arange(len(g)) != i
            c, *_ = np.linalg.lstsq(X[keep], y[keep], rcond=None)
            loo.append(abs(y[i] - X[i] @ c) * g["tokens"].iloc[i] / g["counted_per_layer"].iloc[i])
        print(f"{dtype}: coefficients {np.round(coef, 2).tolist()}, leave-one-out max error {100 * max(loo):.1f}%, "
              f"without the term max {100 * np.max(np.abs(y) * g['tokens'] / g['counted_per_layer']):.1f}%")
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=INPUTS / "activation_memory.csv")
    ap.add_argument("--refit", action="store_true", help="fit the stored CSV only (no torch needed)")
    ap.add_argument("--moe", action="store_true", help="check the MoE layers' saved bytes against the graph")
    ap.add_argument("--mla", action="store_true", help="fit DeepSeek-V3's latent-attention term (data/mla_memory.csv)")
    ap.add_argument("--families", nargs="+", choices=tuple(FAMILIES), default=tuple(FAMILIES),
                    help="count only these families (the CSV keeps the others' rows)")
    args = ap.parse_args(argv)
    if args.moe:
        print(moe_check().to_string(index=False))
        return 0
    if args.mla:
        mla_fit(INPUTS / "mla_memory.csv")
        return 0
    df = pd.read_csv(args.out) if args.refit else run(args.out, tuple(args.families))
    for (dtype, family), c in fit(df).items():
        print(f"{dtype:5s} {family:8s} {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
