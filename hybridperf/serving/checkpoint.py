"""The weight precision a quantized checkpoint states, which vLLM, SGLang and TensorRT-LLM serve it in when no
precision is asked for: the config's `quantization_config` (also a multimodal config's `text_config`'s), or
ModelOpt's `hf_quant_config.json` beside it (`<name>_hf_quant_config.json` beside `<name>_config.json`).

NVIDIA's NVFP4 checkpoints of MoE models quantize the routed experts only (attention and shared experts stay
16-bit: their `ignore` list names them, or `quantized_layers` lists only experts), and some mix formats per layer
(FP8 attention with NVFP4 experts): such a checkpoint is read as `--precision` for the rest and
`--moe-precision` for the experts. A dense model whose layers mix formats (16-bit attention beside NVFP4 MLPs
included) has no single precision to serve it in. A checkpoint that states an FP8 KV cache is served with one
(`checkpoint_kv_dtype`), whatever its weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hybridperf.jsonio import read_json_object

#: a quantization format's name (upper case) -> the serving precision (`serving.cost.PRECISIONS`)
FORMATS = {"FP8": "fp8", "FP8_BLOCK": "fp8", "FP8_PB_WO": "fp8", "MXFP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
           "NVFP4": "fp4", "MXFP4": "fp4", "W4A8_NVFP4_FP8": "fp4", "W4A8_MXFP4_MXFP8": "fp4",
           "W4A16_NVFP4": "int4", "W4A16_MXFP4": "int4", "W4A16_AWQ": "int4", "INT4_AWQ": "int4", "AWQ": "int4",
           "GPTQ": "int4", "W4A8_AWQ": "int4", "W8A8_SQ_PER_CHANNEL": "int8", "INT8_SQ": "int8", "W8A16": "int8"}
#: compressed-tensors' weight (bits, type, whether activations are quantized too) -> precision (4-bit weights over
#: 16-bit activations: int4, the weight-only format)
TENSOR_FORMATS = {(8, "float", True): "fp8", (8, "float", False): "fp8", (4, "float", True): "fp4",
                  (4, "float", False): "int4", (4, "int", False): "int4", (4, "int", True): "int4",
                  (8, "int", True): "int8", (8, "int", False): "int8"}
#: the ends of module names that are attention projections (an `ignore` entry ending so leaves attention 16-bit)
ATTENTION = ("attn", "q_proj", "q_a_proj", "q_b_proj", "qkv_proj", "kv_a_proj_with_mqa", "kv_b_proj")


@dataclass(frozen=True)
class CheckpointPrecision:
    """What a checkpoint's quantization says: `precision` of the layers outside the routed experts, `moe_precision`
    of the routed experts ("" = as `precision`), and `what` (for notes)."""

    precision: str
    moe_precision: str
    what: str


def _format(name) -> str | None:
    return FORMATS.get(str(name).upper()) if name else None


def quantization(config: Path, raw: dict) -> tuple[dict, str]:
    """The quantization description of a checkpoint and where it was found ({} where none)."""
    for d in (raw, raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}):
        q = d.get("quantization_config")
        if isinstance(q, dict) and q:
            return q, "quantization_config"
    stem = config.name.removesuffix("config.json")
    beside = config.with_name(f"{stem}hf_quant_config.json")
    if beside.is_file():
        q = read_json_object(beside).get("quantization")
        if isinstance(q, dict):
            return q, beside.name
    return {}, ""


def _expert(module: str) -> bool:
    return "expert" in module and "shared_expert" not in module


def _attention_left_out(patterns: list) -> bool:
    """Whether an ignore list names attention itself (`self_attn*`, `re:.*self_attn.*`, `*.attn.*`, MLA's
    projections), not only modules inside it (GLM-5's indexer)."""
    return any(str(p).rstrip("*.").endswith(ATTENTION) for p in patterns)


def checkpoint_precision(config, raw: dict, has_experts: bool) -> CheckpointPrecision | None:
    """The precision the checkpoint of `config` (its path; `raw`: its parsed JSON) is served in, or None where it is
    not quantized or its format is one this does not read."""
    q, where = quantization(Path(str(config)), raw)
    if not q:
        return None
    method = str(q.get("quant_method") or "").lower()
    layers = q.get("quantized_layers")
    if isinstance(layers, dict) and layers:  # ModelOpt's per-module formats
        experts = {_format(v.get("quant_algo")) for k, v in layers.items() if isinstance(v, dict) and _expert(k)}
        rest = {_format(v.get("quant_algo")) for k, v in layers.items() if isinstance(v, dict) and not _expert(k)}
        if method == "fp8" and q.get("weight_block_size"):  # block-scaled fp8 outside the listed modules
            rest.add("fp8")
    else:
        if method == "compressed-tensors":
            groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
            found = {TENSOR_FORMATS.get(((g.get("weights") or {}).get("num_bits"), (g.get("weights") or {}).get("type"),
                                         bool(g.get("input_activations")))) for g in groups}
        elif method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
            found = {"int4" if q.get("bits", q.get("w_bit", 4)) == 4 else None}
        else:  # fp8, mxfp4, modelopt: one format for every quantized module
            found = {_format(q.get("quant_algo")) if method in ("modelopt", "") else _format(method)}
        if _attention_left_out(q.get("ignore") or q.get("modules_to_not_convert") or q.get("exclude_modules") or []):
            if not has_experts:  # a dense model: 16-bit attention beside quantized MLPs mixes formats
                return None
            experts, rest = found, set()  # NVIDIA's MoE checkpoints: the experts quantized only
        else:
            experts, rest = found, found
    if q.get("moe_quant_algo"):
        experts = {_format(q["moe_quant_algo"])}
    if None in experts | rest or len(experts) > 1 or len(rest) > 1:
        return None
    dense = next(iter(rest), "bf16")
    moe = next(iter(experts), dense) if has_experts else ""
    return CheckpointPrecision(dense, "" if moe == dense else moe, f"{where}, quant_method {method or 'modelopt'}")


def checkpoint_kv_dtype(config, raw: dict) -> str | None:
    """The KV-cache dtype the checkpoint of `config` states, which vLLM, SGLang and TensorRT-LLM take under their
    default `--kv-cache-dtype auto` (SGLang's `configure_kv_cache_dtype`, vLLM since PR 29980): "fp8" for ModelOpt's
    `kv_cache_quant_algo` FP8 or compressed-tensors' 8-bit float `kv_cache_scheme`; None where it states none or
    another format."""
    q, _ = quantization(Path(str(config)), raw)
    algo = q.get("kv_cache_quant_algo")
    scheme = q.get("kv_cache_scheme")
    if isinstance(algo, str) and algo.upper() == "FP8":
        return "fp8"
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8 and scheme.get("type") == "float":
        return "fp8"
    return None


@lru_cache(maxsize=64)
def kv_dtype_of_file(path: str) -> str | None:
    """`checkpoint_kv_dtype` of the config file at `path`, read once (a `--rows` CSV names one config many times)."""
    return checkpoint_kv_dtype(path, read_json_object(path))
