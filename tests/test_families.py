"""Model families are plugins: each module of `hybridperf.graphs.families` declares one `Family`, and a new
family is one new module there, picked up by `build_graph` with no other file changed."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybridperf.errors import InputError
from hybridperf.graphs import build_graph
from hybridperf.graphs.config import config_from_dict
from hybridperf.graphs.family import FAMILIES, Family, decode_families, family_of, register

PACKAGE = Path(__file__).resolve().parents[1] / "hybridperf"

#: one small HF config that every built-in family parses (each reads the keys of its own spelling)
SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
         "vocab_size": 100, "max_position_embeddings": 256, "n_embd": 64, "n_head": 4, "n_layer": 2,
         "n_positions": 256, "d_model": 64, "num_heads": 4, "num_layers": 2, "d_ff": 128, "d_kv": 16,
         "num_decoder_layers": 2, "num_local_experts": 4, "num_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32, "n_routed_experts": 4, "n_group": 2, "topk_group": 1, "ffn_dim": 128,
         "word_embed_proj_dim": 64, "encoder_sparse_step": 2, "decoder_sparse_step": 2, "expert_capacity": 8,
         "num_key_value_heads": 2, "head_dim": 16, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
         "qk_rope_head_dim": 8, "v_head_dim": 16, "hidden_size_per_layer_input": 0, "global_head_dim": 32,
         "enable_moe_block": True, "top_k_experts": 2, "hybrid_override_pattern": "M*"}

#: a family written from scratch: its config parser, forward and decode builders, in one module
TOY_FAMILY = '''
from hybridperf.graphs.config import ModelConfig
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.primitives import Block, gather, linear, ln


def parse(d, source):
    h = int(d["width"])
    return ModelConfig(family="toy_lm", hidden=h, heads=2, layers=int(d["depth"]), ffn=4 * h, vocab=50,
                       head_dim=h // 2, raw=d)


def forward(cfg, B, S, train):
    tok, h = B * S, cfg.hidden
    layer = [ln("norm", tok, h), linear("qkv", tok, h, 3 * h),
             *attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, "mulu", ("addu",))]
    return [Block("embeddings", 1, [gather("embed", tok, h, cfg.vocab)], "pre"),
            Block("layer", cfg.layers, layer, "layer"), Block("head", 1, [linear("lm_head", tok, h, cfg.vocab)], "post")]


FAMILY = Family(("toy_lm",), forward, parse=parse)
'''

PROBE = '''
import json, sys
from hybridperf.graphs import build_graph, predict_model
from hybridperf.predictor import Predictor
g = build_graph(sys.argv[1], 2, 8, "train")
t = g.kernel_table()
p = predict_model(sys.argv[1], 2, 8, "inf", predictor=Predictor.prior_only())
print(json.dumps({"family": g.config.family, "blocks": [[b.name, b.count] for b in g.blocks],
                  "qkv": sorted(t.loc[t["name"].str.startswith("qkv"), "name"]), "e2e_ms": p.ms}))
'''


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_registered_family_builds(name):
    fam = family_of(name)
    cfg = config_from_dict({**SMALL, "model_type": name})
    for mode in ("inf",) + (("train",) if fam.trains else ()) + (("decode",) if fam.decode else ()):
        graph = build_graph(cfg, 2, 16, mode)
        table = graph.kernel_table()
        assert len(table) > 0 and (table["count"] > 0).all()
        assert graph.memory().activations > 0  # training: the family's declared (or borrowed) coefficients
    if not fam.trains:
        with pytest.raises(InputError, match="not modelled"):
            build_graph(cfg, 2, 16, "train")
    if fam.decode is None:
        with pytest.raises(InputError, match="decode step needs a decoder-only causal LM"):
            build_graph(cfg, 2, 16, "decode")
    else:
        assert fam.setup_kernels[name] > 0  # every decode step builds its position ids and mask first


def test_registry_holds_every_module_of_the_folder_and_refuses_a_taken_name():
    modules = {p.stem for p in (PACKAGE / "graphs" / "families").glob("*.py")} - {"__init__"}
    # a module declares its builders, or (GLM-4.7-Flash, read as DeepSeek-V3's architecture) its parser
    declared = {sys.modules[(f.parse or f.forward).__module__].__name__.rpartition(".")[2] for f in FAMILIES.values()}
    assert declared == modules
    assert set(decode_families()) >= {"gpt2", "llama", "deepseek_v3"} and "bert" not in decode_families()
    with pytest.raises(InputError, match="already registered: gpt2"):
        register(Family(("gpt2",), FAMILIES["gpt2"].forward))
    with pytest.raises(InputError, match="non-empty tuple of model_types"):
        register(Family("toy", FAMILIES["gpt2"].forward))
    with pytest.raises(InputError, match="no model family registered for 'nope'"):
        family_of("nope")


def test_a_new_family_is_one_file(tmp_path):
    """A copy of the package plus one module in graphs/families/: its HF config parses, and build_graph and
    predict_model use its builders, with no other file of the package changed."""
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "hybridperf", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "hybridperf" / "graphs" / "families" / "toy.py").write_text(TOY_FAMILY)
    config = tmp_path / "toy.json"
    config.write_text(json.dumps({"model_type": "toy_lm", "width": 32, "depth": 3}))
    before = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts}
    after = {p.relative_to(root / "hybridperf") for p in (root / "hybridperf").rglob("*")
             if "__pycache__" not in p.parts}
    assert after - before == {Path("graphs/families/toy.py")}
    run = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["family"] == "toy_lm"
    assert out["blocks"] == [["embeddings", 1], ["layer", 3], ["head", 1], ["loss", 1]]
    assert out["qkv"] == ["qkv", "qkv.acc_b", "qkv.acc_w", "qkv.dW", "qkv.dX", "qkv.db"]  # the shared backward rules apply
    assert out["e2e_ms"] > 0
    # the installed package, without the module, does not know the family
    with pytest.raises(InputError, match="unsupported model_type 'toy_lm'"):
        build_graph(str(config), 2, 8)
