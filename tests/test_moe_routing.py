"""The power-law routing of MoE benchmarks, vectorised, against a one-pair-at-a-time reference."""
import numpy as np
import pytest

from hybridperf.devices import get_device
from hybridperf.priors import moe_routing as R
from hybridperf.priors.moe import EXPERT_TILE_M, moe_parts

H100 = get_device("NVIDIA H100 80GB HBM3")


def _reference(tokens, topk, experts, ep, alpha):
    """The collector's procedure as written (round, cap, round-robin one pair at a time, swap the heaviest
    rank to 0) on the same uniforms as `moe_routing`."""
    u = np.random.default_rng(R._SEED).random((R.SAMPLES, experts))
    many = tokens * topk > experts
    lo, hi = (1.0, 0.8 * tokens) if many else (0.01, 2.0)
    out = []
    ties = R.tie_break(experts)
    for row, tie in zip(u, ties):
        x = R._power_law(row, alpha, lo, max(hi, 1.5 * lo))
        c = np.round(x / x.sum() * tokens * topk)
        over = int(np.clip(c - tokens, 0, None).sum())
        c = np.minimum(c, tokens).reshape(ep, experts // ep)

        def spread(left, up):
            while left > 0:
                moved = False
                for r in range(ep):
                    ok = np.flatnonzero(c[r] < tokens) if up else np.flatnonzero(c[r] > 0)
                    if not len(ok):
                        continue
                    j = ok[np.argmin(c[r, ok])] if up else ok[np.argmax(c[r, ok])]
                    c[r, j] += 1 if up else -1
                    left, moved = left - 1, True
                    if left == 0:
                        break
                if not moved:
                    break

        spread(over, True)
        delta = int(tokens * topk - c.sum())
        spread(abs(delta), delta > 0)
        heavy = c.sum(1).argmax()
        c[[0, heavy]] = c[[heavy, 0]]
        flat = c.ravel()
        order = np.argsort(-flat - tie)  # the collector's `_assign_experts_from_counts`, ties at random
        ids = np.repeat(order, flat[order].astype(int)).reshape(topk, tokens).T
        local = experts // ep
        mine = c[0]
        act = max(int((mine > 0).sum()), 1)
        tile = np.clip(2.0 ** np.ceil(np.log2(max(mine.sum() / act, 1.0))), *EXPERT_TILE_M)
        out.append([mine.sum(), act, (np.ceil(mine / tile) * tile).sum(), (ids < local).any(1).sum()])
    return np.mean(out, 0)


@pytest.mark.parametrize("shape", [(4, 8, 128, 8, 1.2), (16, 8, 256, 8, 1.01), (64, 8, 128, 4, 1.2),
                                   (1024, 8, 128, 8, 1.2), (2048, 8, 256, 256, 1.2), (8192, 2, 8, 2, 1.2),
                                   (10, 15, 16, 4, 1.01)])
def test_vectorised_routing_matches_the_one_pair_at_a_time_procedure(shape):
    t, k, e, ep, a = shape
    got = R.skewed_rank0(np.array([t]), k, e, ep, a, EXPERT_TILE_M, touching=True)
    want = _reference(t, k, e, ep, a)
    np.testing.assert_allclose([got[key][0] for key in R.KEYS], want, rtol=1e-9)


def test_rank0_is_the_heaviest_rank_and_within_its_bounds():
    t, k, e, ep = 512.0, 8, 128, 8
    got = R.skewed_rank0(np.array([t, t]), k, e, ep, np.array([1.01, 1.2]), EXPERT_TILE_M)
    assert np.all(got["routed"] >= t * k / ep) and np.all(got["routed"] <= t * e / ep)
    assert np.all(got["active"] <= e / ep) and np.all(got["padded"] >= got["routed"])
    again = R.skewed_rank0(np.array([t, t]), k, e, ep, np.array([1.01, 1.2]), EXPERT_TILE_M)
    assert np.array_equal(got["routed"], again["routed"])  # a fixed seed: one prediction per shape
    assert np.isnan(R.skewed_rank0(np.array([t]), k, e, ep, 0.0, EXPERT_TILE_M)["routed"][0])  # balanced: not drawn


@pytest.mark.parametrize("shape", [(1, 8, 128, 8), (16, 8, 256, 8), (16, 8, 256, 16), (100, 6, 64, 4),
                                   (8192, 8, 256, 16), (300, 22, 512, 64)])
def test_balanced_tokens_on_rank0_follow_the_collectors_pattern(shape):
    t, k, e, ep = shape
    stride = -(-e // k)
    i, j = np.arange(t)[:, None], np.arange(k)[None, :]
    first = i if t >= stride else i * stride / t
    ids = np.mod(first + j * stride, e).astype(int)
    assert R.balanced_rank0_tokens(t, k, e, ep) == (ids < e // ep).any(1).sum()


def test_skewed_decode_reads_fewer_experts_than_it_routes_pairs_to():
    """With few tokens a power law piles pairs on a few experts: fewer distinct weights to read than pairs."""
    p = moe_parts(np.array([16.0]), 4096, 1536, 8, 256, H100, "bfloat16", 1, 8, np.array(["power_law_1.2"]))
    assert p["active"][0] < p["routed"][0]


def test_sglang_before_0_5_14_computes_every_pair_of_the_tokens_on_rank0():
    """Balanced routing gives each token a pair on every rank of 32+ experts, so up to EP 8 of 256 experts
    rank 0 computes all pairs, at EP 16 half of them: as SGLang 0.5.10's tables run."""
    from hybridperf.priors.moe import computes_remote_pairs

    assert computes_remote_pairs("SGLang", "0.5.10") and not computes_remote_pairs("SGLang", "0.5.14")
    assert not computes_remote_pairs("VLLM", "0.5.10") and not computes_remote_pairs(None, None)
    pairs = {ep: moe_parts(np.array([8192.0]), 4096, 1536, 8, 256, H100, "bfloat16", 1, ep,
                           whole_tokens=True)["routed"][0] for ep in (1, 8, 16)}
    assert pairs[1] == pairs[8] == 8192 * 8
    assert pairs[16] == pytest.approx(8192 * 8 / 2)
    local = moe_parts(np.array([8192.0]), 4096, 1536, 8, 256, H100, "bfloat16", 1, 8)["routed"][0]
    assert local == pytest.approx(8192 * 8 / 8)


def test_warp_mma_kernels_are_capped_on_hopper_not_on_ampere():
    from hybridperf.priors.llm_gemm import matrix_peak, warp_mma_peak

    a100 = get_device("NVIDIA A100-SXM4-80GB")
    assert warp_mma_peak(a100, "bfloat16") == matrix_peak(a100, "bfloat16")
    cap = H100.num_sms * H100.boost_clock_mhz * 1e6 * 2048
    assert warp_mma_peak(H100, "bfloat16") == pytest.approx(cap) and cap < matrix_peak(H100, "bfloat16")
    slow = moe_parts(np.array([8192.0]), 4096, 1536, 8, 128, H100, "bfloat16", warp_mma=True)["compute"][0]
    fast = moe_parts(np.array([8192.0]), 4096, 1536, 8, 128, H100, "bfloat16")["compute"][0]
    assert slow / fast == pytest.approx(matrix_peak(H100, "bfloat16") / cap)


def test_zero_filled_buffers_cost_every_pair_only_under_expert_parallelism():
    def nbytes(ep, zero_fill):
        p = moe_parts(np.array([4096.0]), 4096, 1536, 8, 128, H100, "bfloat16", 1, ep, zero_fill=zero_fill)
        return p["bytes"][0]
    assert nbytes(1, True) == nbytes(1, False)
    assert nbytes(8, True) > nbytes(8, False)
