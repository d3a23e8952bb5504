"""BERT and RoBERTa encoders (sequence classification for inference, pre-training / MLM heads for training)."""
from __future__ import annotations

from hybridperf.graphs.config import ROBERTA_LIKE, ModelConfig
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.activation import mlp_activation, dropout
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_sums
from hybridperf.graphs.primitives import F32, Block, gather, linear, ln, misc, vec


def _num_labels(cfg: ModelConfig) -> int:
    """Classifier width: the config's `num_labels` / `id2label`, else HF's default of 2."""
    n = cfg.raw.get("num_labels") or len(cfg.raw.get("id2label") or {}) or 2
    return int(n)


def forward(cfg: ModelConfig, B, S, train) -> list:
    """BERT as NeuSight ran it: `inf` is BertForSequenceClassification (pooler + classifier), `train`
    is BertForPreTraining (pooler + MLM head over the vocabulary + NSP head); both per the traced graphs
    in NeuSight's `results/opgraph/bert_large-{inf,train}-*.csv`. RoBERTa's layers are BERT's
    (TorchDispatchMode, transformers 5.23); it counts position ids from the input ids, and trains as
    RobertaForMaskedLM (MLM head only)."""
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    roberta = cfg.family in ROBERTA_LIKE
    tt = int(cfg.raw.get("type_vocab_size", 1 if roberta else 2) or 1)
    pre = [misc("ones_mask", "mask", B * S * F32), misc("ext_mask_sub", "mask", 2 * B * S * F32),
           misc("ext_mask_mul", "mask", 2 * B * S * F32)]
    if roberta:  # position ids from the input ids: ne(pad), casts, cumsum, mul, add (8 tiny kernels)
        pre += [misc(f"positions_{i}", "mask", 2 * B * S * 8) for i in range(8)]
    pre += [gather("word_embeddings", tok, h, V), gather("token_type_embeddings", tok, h, tt),
            vec("embed_add1", "add", tok, h),
            gather("position_embeddings", tok if roberta else S, h, max(cfg.max_positions, S) + (2 if roberta else 0)),
            vec("embed_add2", "add", tok, h), ln("embed_ln", tok, h), *dropout("embed_dropout", tok, h, train)]
    L = [*grad_sums("layer_in", tok, h, 4, train), linear("query", tok, h, h), linear("key", tok, h, h),
         linear("value", tok, h, h)]
    L += attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="divu", mask_op=("addu",))
    L += [linear("attn_out", tok, h, h), *dropout("attn_out_dropout", tok, h, train), vec("resid_add1", "add", tok, h),
          ln("attn_ln", tok, h), *grad_sums("attn_ln_out", tok, h, 2, train), linear("intermediate", tok, h, f),
          *mlp_activation("mlp", cfg.activation, tok, f, train),
          linear("output", tok, f, h), *dropout("out_dropout", tok, h, train), vec("resid_add2", "add", tok, h),
          ln("out_ln", tok, h)]
    mlm = [linear("transform", tok, h, h), *mlp_activation("transform", cfg.activation, tok, h, train),
           ln("transform_ln", tok, h), linear("decoder", tok, h, V)]
    if train and roberta:  # RobertaForMaskedLM: the MLM head alone
        post = mlm
    elif train:  # BertForPreTraining: pooler, MLM transform + decoder over the vocabulary, NSP head
        post = [linear("pooler", B, h, h), vec("pooler_tanh", "tanh", B, h), *mlm, linear("seq_relationship", B, h, 2)]
    else:  # *ForSequenceClassification: the first token through dense + tanh (BERT's pooler), then the classifier
        post = [linear("pooler", B, h, h), vec("pooler_tanh", "tanh", B, h),
                linear("classifier", B, h, _num_labels(cfg))]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured)
ACTIVATION = {
    "bert": ({"c_h": 40.08, "c_f": 8.0, "c_a": 12.01, "d_h": 23.88, "d_v": 4.16},
             {"c_h": 20.04, "c_f": 4.0, "c_a": 6.0, "d_h": 11.94, "d_v": 2.11}),
    "roberta": "bert",
    "xlm_roberta": "bert",
}
FAMILY = Family(("bert", *ROBERTA_LIKE), forward, tensor_parallel=("bert", *ROBERTA_LIKE),
                activation=ACTIVATION, position_limited=True)
