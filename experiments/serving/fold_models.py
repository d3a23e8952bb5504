"""The kernel and collective models a held-out serving system is scored with, fitted without its tables.

Serving prices attention with the attention prior's constants, MLA decode, sparse (DSA) MLA and linear attention
with their own, and the TP all-reduce and MoE all-to-all with the collective model; the shipped constants of each
were fitted on aiconfigurator's tables of every system, the scored ones included. A fold refits each without the
held-out system (`experiments/kernels/attention_prior.py`, `mla_decode.py`, `dsa_attention.py`, `gdn_kernels.py`,
`experiments/collectives/collectives_nvswitch.py` fit them so), so that nothing measured on that system enters its
score. A system with no tables of a kind keeps the shipped fit of that kind, which never saw it. A family only the
held-out GPU has (FA3 on the H100) takes its kin's matrix efficiency (FA3: FA2's) and the median of the engines'
families elsewhere (`AttentionConstants.eff`, `.bw`), which PyTorch SDPA's entries, read off our H100's kernels, do
not join.
"""
from __future__ import annotations

import time
from dataclasses import replace
from functools import cached_property

import pandas as pd

from experiments.collectives import collectives_nvswitch as nccl_experiment
from experiments.common import DATA
from experiments.kernels import attention_prior, dsa_attention, gdn_kernels, mla_decode
from hybridperf.devices import get_device
from hybridperf.priors.collectives import DEFAULT_CONSTANTS
from hybridperf.priors.mla import native_mla
from hybridperf.residual_models.collectives import CollectiveModel
from hybridperf.serving.api import default_models
from hybridperf.serving.cost import KernelModels
from hybridperf.training.collectives import fit_constants, fit_custom_all_reduce

COLLECTIVE_MAXITER = 800  # as collectives_nvswitch's folds


class FoldModels:
    """Loads the tables once; `for_held_out(system)` fits the models without that system."""

    def __init__(self, data=DATA):
        self.data = data

    @cached_property
    def attention(self) -> pd.DataFrame:
        return attention_prior.load_tables(self.data)

    @cached_property
    def mla(self) -> pd.DataFrame:
        return mla_decode.load_tables(self.data)

    @cached_property
    def dsa(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return dsa_attention.load_tables(self.data), dsa_attention.load_tables(self.data, dsa_attention.TOPK_TABLE)

    @cached_property
    def gdn(self) -> pd.DataFrame:
        return gdn_kernels.load_tables(self.data)

    @cached_property
    def nccl(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return nccl_experiment.load(self.data)

    def for_held_out(self, held: str) -> KernelModels:
        t0 = time.time()
        shipped = default_models()
        attention = attention_prior.fit_on(self.attention, [s for s in attention_prior.SYSTEMS if s != held])
        native = [s for s in mla_decode.SYSTEMS if s != held and native_mla(get_device(s))]
        sparse = dsa_attention.fit_on(*self.dsa, [s for s in dsa_attention.SYSTEMS if s != held])
        models = KernelModels(shipped.collectives, attention=attention, mla=mla_decode.fit_on(self.mla, native),
                              sparse_mla=sparse, linear=gdn_kernels.fit_all(self.gdn[self.gdn["system"] != held]
                                                                            .reset_index(drop=True)))
        nccl, custom = self.nccl
        if held in set(nccl["system"]):
            c = fit_constants(nccl[nccl["system"] != held], DEFAULT_CONSTANTS, maxiter=COLLECTIVE_MAXITER).constants
            k = fit_custom_all_reduce(custom[custom["system"] != held], c)  # the defaults where no rows are left
            models = replace(models, collectives=CollectiveModel(c, shipped.collectives.interval, custom=k))
        print(f"kernel and collective models without {held}: {time.time() - t0:.0f} s", flush=True)
        return models
