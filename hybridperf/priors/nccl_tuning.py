"""NCCL's own published constants (src/graph/tuning.cc, topo.h, comm.h, device.h; NCCL 2.27-2.29) and the
rules it applies with them that the collective prior (`hybridperf.priors.collectives`) reproduces.
Nothing here is fitted."""
from __future__ import annotations

import numpy as np

PROTOS = ("LL", "LL128", "Simple")
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
            "pat": (8.0, 8.0, 8.0)}
HW_LAT = {  # (LL, LL128, Simple) us
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25),
               "pat": (0, 0, 4.0)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
             "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9),
            "pat": (0, 0, 14)},
}
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
NVLS_EFF = (0.0, 0.0, 0.85, 0.74)
NVLS_TREE_MAX = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
TREE_CORR = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
NVLS_CHANNEL_FACTOR = 15.0 / 16.0  # (nChannels - 1) / nChannels with NCCL's 16 NVLS channels
NCCL_P2P_LL_THRESHOLD = 16384  # send/recv and all-to-all run LL up to this many bytes per peer
#: one NVLink channel's rate in NCCL's graph search (topo.h SM80/SM90/SM100_NVLINK_BW), by `arch` index
NVLINK_CHANNEL_BW = (20.0, 20.0, 20.6, 40.1)
#: the tuner's NVLink rate over the spec (the same SMxx_NVLINK_BW over a link's 25 / 25 / 50 GB/s)
TUNER_NVLINK_EFF = 0.8
#: threads per channel (device.h NCCL_LL/LL128/SIMPLE_MAX_NTHREADS) and bytes per thread before NCCL adds a
#: channel (comm.h NCCL_*_THREAD_THRESHOLD; a ring's LL threshold is x nRanks)
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
#: a channel's share of the link the protocol moves payload at (the tuner's LL x 0.5 and LL128 x 0.92)
PROTO_LINK_SHARE = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


def tree_correction(n: np.ndarray, k: int) -> np.ndarray:
    """NCCL's treeCorrectionFactor of protocol index `k` at `n` bytes (powers of two, 64 B to 256 MB)."""
    log = np.floor(np.log2(np.maximum(n / 64.0, 1.0))).astype(int)
    out = np.ones_like(n)
    ok = log < 23
    out[ok] = np.asarray(TREE_CORR[k])[log[ok]]
    return out


def active_channels(n: np.ndarray, pr: str, ranks: int, ring: bool = True) -> np.ndarray:
    """Channels NCCL runs a ring/tree on for `n` bytes (enqueue.cc topoGetAlgoInfo: `while (nBytes < nc * nt *
    threadThreshold) nc--`, at least one). NCCL's tuner prices every size at all its channels; a small
    message really moves on these few, each at one channel's rate: why a 64-256 KB all-reduce on 8 ranks
    is slower than the tuner's LL bandwidth says. Uncapped by the communicator's channel count (the caller
    caps the rate at the full bus). Below one channel NCCL also halves the threads; a channel's rate is
    taken to hold there (charging it would price 4 KB messages 20-30% over measured). The count is taken
    continuous, equal to NCCL's at each step: NCCL's whole channels price a message just below a step up to
    ~20% over one just above it, which a prediction monotone in size does not (Vidur's dense A100 rows are
    as close either way)."""
    thr = THREAD_THRESHOLD[pr] * (ranks if (pr == "LL" and ring) else 1)
    return np.maximum(n / (MAX_THREADS[pr] * thr), 1.0)
