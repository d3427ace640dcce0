"""Top-k and adaptive sparse attention: equivalences, tiers, budgets, the gate, precision, gradients."""

from __future__ import annotations

import pytest
import torch

from sr.models.attention import AdaptiveSparseAttention, DenseAttention, TopkAttention, attention
from sr.models.attention.common import from_head_regions, to_head_regions
from sr.models.attention.routing import (
    from_token_rows,
    pooled_topk,
    rank_mask_bias,
    region_token_ids,
    route,
    soft_region_attention,
    tiered_attention,
    token_rows,
    topk_indices,
    two_level_topk,
)


def textured_and_flat(c: int, h: int = 16, w: int = 16, seed: int = 0) -> torch.Tensor:
    """(1, C, H, W): noise on the left half, a constant on the right half."""
    g = torch.Generator().manual_seed(seed)
    x = torch.full((1, c, h, w), 0.5)
    x[..., : w // 2] = torch.randn(1, c, h, w // 2, generator=g)
    return x


def variance_gate(module: AdaptiveSparseAttention, gain: float = 0.1505, floor: float = 0.5413) -> None:
    """Hand-set gate: score = softplus(floor + gain * sum of the region's channel variances).

    Flat regions score softplus(0.5413) = 1; unit-variance noise over 16 channels scores
    softplus(0.5413 + 16 * 0.1505) = 3, so with half of each a budget of 4 splits into k = 6 / 2.
    """
    first, last = module.gate.net[0], module.gate.net[-1]
    c = module.dim
    module.gate.detail_prior = 0.0  # the hand-set net is the whole score
    with torch.no_grad():
        first.weight.zero_()
        first.bias.zero_()
        first.weight[0, c:, 0, 0] = 1.0  # hidden unit 0 = sum of the variances
        last.weight.zero_()
        last.weight[0, 0, 1, 1] = gain  # centre tap only: no spill into neighbouring regions
        last.bias.fill_(floor)


def adaptive_pair(budgets=(4.0, 2.0), c: int = 16, heads: int = 2, **kw) -> list[AdaptiveSparseAttention]:
    torch.manual_seed(0)
    first = AdaptiveSparseAttention(c, heads, region=4, k_min=0, k_max=8, budget=budgets[0], **kw)
    out = [first]
    for b in budgets[1:]:
        m = AdaptiveSparseAttention(c, heads, region=4, k_min=0, k_max=8, budget=b, **kw)
        m.load_state_dict(first.state_dict())
        out.append(m)
    return out


# --- equivalences -------------------------------------------------------------------------------


def _with_dense_weights(module, dense: DenseAttention):
    module.load_state_dict(dense.state_dict(), strict=False)  # qkv, lepe, proj; the gate stays
    return module


def test_topk_and_adaptive_with_k_all_regions_equal_dense():
    torch.manual_seed(0)
    c, heads = 24, 3
    dense = DenseAttention(c, heads).eval()
    x = torch.randn(2, c, 8, 12)  # regions of 4: N = 2 * 3 = 6, no padding
    n = 6
    topk = _with_dense_weights(TopkAttention(c, heads, region=4, k=n), dense).eval()
    adaptive = _with_dense_weights(AdaptiveSparseAttention(c, heads, 4, k_min=n, k_max=n, budget=n), dense)
    with torch.no_grad():
        ref = dense(x)
        torch.testing.assert_close(topk(x), ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(adaptive.eval()(x), ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(adaptive.train()(x), ref, atol=1e-5, rtol=0)  # the soft training path
    torch.testing.assert_close(topk.train()(x), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_inference_tiers_equal_the_soft_training_path_at_integer_k(k):
    # At integer k the soft rank mask is exactly hard top-k, so training and inference must agree.
    torch.manual_seed(k)
    module = AdaptiveSparseAttention(24, 3, region=4, k_min=k, k_max=k, budget=k)
    x = torch.randn(2, 24, 18, 13)  # padded to 20 x 16: N = 20 regions
    soft = module.train()(x)
    with torch.no_grad():
        hard = module.eval()(x)
    torch.testing.assert_close(hard, soft.detach(), atol=1e-5, rtol=0)


def test_tiered_attention_matches_a_per_region_reference():
    g = torch.Generator().manual_seed(0)
    b, c, heads, p, hw = 2, 8, 2, 2, (6, 4)
    n = (hw[0] // p) * (hw[1] // p)  # 6 regions per image
    q, k, v = (torch.randn(b, c, *hw, generator=g) for _ in range(3))
    idx = torch.stack([torch.stack([torch.randperm(n, generator=g)[:5] for _ in range(n)]) for _ in range(b)])
    k_int = torch.randint(0, 6, (b, n), generator=g)
    k_int[0, 0], k_int[1, 2] = 0, 5
    rows = [token_rows(t) for t in (q, k, v)]
    tokens = region_token_ids(b, *hw, p, q.device)
    stats: dict = {}
    out = from_token_rows(tiered_attention(*rows, tokens, idx, k_int, heads, stats=stats), b, *hw)
    # The same with at most 3 gathered regions per call (chunked tiers) must not change anything.
    chunked = from_token_rows(tiered_attention(*rows, tokens, idx, k_int, heads, max_gather=3), b, *hw)
    torch.testing.assert_close(chunked, out, atol=1e-6, rtol=0)
    assert stats["gathered"] == int(k_int.sum())
    # Channels-last maps give the same rows without a copy (the engine's layout).
    cl = [t.contiguous(memory_format=torch.channels_last) for t in (q, k, v)]
    assert token_rows(cl[0]).data_ptr() == cl[0].data_ptr()
    torch.testing.assert_close(
        from_token_rows(tiered_attention(*[token_rows(t) for t in cl], tokens, idx, k_int, heads), b, *hw),
        out, atol=1e-6, rtol=0,
    )

    def region_tokens(t, bi, r):  # (heads, p*p, d) tokens of region r of image bi
        ry, rx = divmod(r, hw[1] // p)
        blk = t[bi, :, ry * p : ry * p + p, rx * p : rx * p + p].reshape(heads, c // heads, p * p)
        return blk.transpose(1, 2)

    for bi in range(b):
        for r in range(n):
            ry, rx = divmod(r, hw[1] // p)
            got = out[bi, :, ry * p : ry * p + p, rx * p : rx * p + p].reshape(heads, c // heads, p * p)
            t = int(k_int[bi, r])
            if t == 0:
                assert torch.equal(got, torch.zeros_like(got))  # k = 0: attention skipped
                continue
            keys = torch.cat([region_tokens(k, bi, int(j)) for j in idx[bi, r, :t]], dim=1)
            vals = torch.cat([region_tokens(v, bi, int(j)) for j in idx[bi, r, :t]], dim=1)
            ref, _ = attention(region_tokens(q, bi, r), keys, vals)
            torch.testing.assert_close(got.transpose(1, 2), ref, atol=1e-5, rtol=0)


def test_region_means_of_q_and_k_come_from_pooled_x():
    torch.manual_seed(0)
    block = AdaptiveSparseAttention(24, 3, region=4)
    x = torch.randn(2, 24, 12, 16).contiguous(memory_format=torch.channels_last)
    q, k, _ = block.qkv(x).chunk(3, dim=1)
    qm, km = block.pooled_qk(x, 4)
    assert not qm.requires_grad and not km.requires_grad  # routing only: no autograd graph
    for got, full in ((qm, q), (km, k)):
        want = torch.nn.functional.avg_pool2d(full, 4).flatten(2).transpose(1, 2)  # (B, N, C)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("n, k", [(100, 3), (256, 5), (256, 8), (40, 8), (600, 8)])
def test_topk_indices_equal_torch_topk_with_or_without_padding(n, k):
    scores = torch.randn(3, 7, n, generator=torch.Generator().manual_seed(n + k))
    assert torch.equal(topk_indices(scores, k), scores.topk(k, dim=-1).indices)


def test_pooled_topk_picks_the_best_pooled_regions_first():
    g = torch.Generator().manual_seed(0)
    qc, kc = torch.randn(1, 5, 6, generator=g), torch.randn(1, 7, 6, generator=g)
    idx = pooled_topk(qc, kc, 3)
    scores = qc @ kc.transpose(1, 2)  # (1, 5, 7)
    assert torch.equal(idx, scores.argsort(dim=-1, descending=True)[..., :3])
    assert torch.equal(pooled_topk(qc, kc, 3, chunk=2), idx)  # query chunks change nothing


@pytest.mark.parametrize("channels_last", [False, True])
def test_head_regions_hold_each_heads_region_tokens_and_invert(channels_last):
    b, c, heads, p, h, w = 2, 12, 3, 2, 4, 6
    x = torch.randn(b, c, h, w)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    t = to_head_regions(x, p, heads)  # (B, heads, N, P, d)
    assert t.shape == (b, heads, (h // p) * (w // p), p * p, c // heads) and t.is_contiguous()
    d = c // heads
    for bi, hi, r, tok in [(0, 0, 0, 0), (1, 2, 4, 3), (0, 1, 5, 2), (1, 0, 3, 1)]:
        ry, rx = divmod(r, w // p)
        ty, tx = divmod(tok, p)
        assert torch.equal(t[bi, hi, r, tok], x[bi, hi * d : hi * d + d, ry * p + ty, rx * p + tx])
    back = from_head_regions(t, h, w, p)
    assert torch.equal(back, x) and back.is_contiguous(memory_format=torch.channels_last)


def _random_routes(b: int, n: int, k: int, g: torch.Generator) -> torch.Tensor:
    """(B, N, k) distinct random key region ids per query region."""
    rows = [torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(n)]) for _ in range(b)]
    return torch.stack(rows)


def test_soft_region_attention_matches_a_per_region_reference_with_rank_weights():
    # Fractional budgets: key region of rank r enters the scores with bias log(clamp(k - r, 0, 1)).
    g = torch.Generator().manual_seed(1)
    b, heads, n, pp, d, kk = 2, 2, 5, 4, 3, 3
    q, k, v = (torch.randn(b, heads, n, pp, d, generator=g, dtype=torch.float64) for _ in range(3))
    idx = _random_routes(b, n, kk, g)  # (B, N, K)
    budget = torch.rand(b, n, generator=g, dtype=torch.float64) * kk
    budget[0, 0] = 0.0  # fully blocked: its output is multiplied by weight 0 by the caller
    weights, bias = rank_mask_bias(budget, kk)
    out = soft_region_attention(q, k, v, idx, bias)
    assert out.shape == (b, heads, n, pp, d)
    for bi in range(b):
        for r in range(n):
            if budget[bi, r] == 0:
                continue
            keys = k[bi][:, idx[bi, r]].reshape(heads, kk * pp, d)
            vals = v[bi][:, idx[bi, r]].reshape(heads, kk * pp, d)
            scores = q[bi, :, r] @ keys.transpose(1, 2) / d**0.5 + bias[bi, r].repeat_interleave(pp)
            ref = scores.softmax(-1) @ vals  # (heads, P, d)
            torch.testing.assert_close(out[bi, :, r].double(), ref, atol=1e-5, rtol=0)


def test_soft_region_attention_under_bf16_autocast_is_close_and_trains_the_bias():
    g = torch.Generator().manual_seed(2)
    b, heads, n, pp, d, kk = 2, 3, 9, 16, 16, 4
    q, k, v = (torch.randn(b, heads, n, pp, d, generator=g) for _ in range(3))
    idx = _random_routes(b, n, kk, g)  # (B, N, K)
    budget = (torch.rand(b, n, generator=g) * kk).requires_grad_()
    ref = soft_region_attention(q, k, v, idx, rank_mask_bias(budget, kk)[1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = soft_region_attention(*(t.bfloat16() for t in (q, k, v)), idx, rank_mask_bias(budget, kk)[1])
    assert got.dtype == torch.bfloat16  # the weights meet v in v's dtype
    assert (got.float() - ref).abs().mean() < 2e-2 * ref.abs().mean()
    got.float().square().sum().backward()
    assert budget.grad is not None and budget.grad.abs().max() > 0  # the gate learns through the bias


def _smooth_region_means(b: int, hr: int, wr: int, c: int = 16, seed: int = 0) -> torch.Tensor:
    """(B, N, C) region means with spatial structure (like a photo's), on an (hr, wr) grid."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(b, c, (hr + 3) // 4, (wr + 3) // 4, generator=g)
    field = torch.nn.functional.interpolate(coarse, size=(hr, wr), mode="bilinear", align_corners=False)
    field = field + 0.3 * torch.randn(b, c, hr, wr, generator=g)
    return field.flatten(2).transpose(1, 2).contiguous()


@pytest.mark.parametrize("grid", [(10, 10), (9, 7), (5, 1)])
def test_two_level_routing_keeping_every_group_is_exact(grid):
    qc = _smooth_region_means(2, *grid, seed=1)
    kc = _smooth_region_means(2, *grid, seed=2)
    groups = ((grid[0] + 1) // 2) * ((grid[1] + 1) // 2)
    k = min(3, grid[0] * grid[1])
    assert torch.equal(two_level_topk(qc, kc, grid, k, keep=groups), pooled_topk(qc, kc, k))
    assert torch.equal(two_level_topk(qc, kc, grid, k, keep=groups, chunk=3), pooled_topk(qc, kc, k))


def test_two_level_routing_finds_nearly_the_exact_top_k():
    # On photo-like (spatially smooth) features the coarse-to-fine search keeps most of the exact
    # top-k and nearly all of its score; every row holds k distinct, valid regions.
    grid, k = (40, 36), 8
    qc = _smooth_region_means(1, *grid, seed=3)
    kc = qc + 0.1 * torch.randn(qc.shape, generator=torch.Generator().manual_seed(4))
    exact, fast = pooled_topk(qc, kc, k), two_level_topk(qc, kc, grid, k)
    n = grid[0] * grid[1]
    assert fast.shape == exact.shape and int(fast.min()) >= 0 and int(fast.max()) < n
    assert all(len(set(row.tolist())) == k for row in fast[0])
    overlap = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(exact[0], fast[0], strict=True))
    overlap /= exact.numel()
    assert overlap > 0.85  # 0.92 here

    def total(ids):
        return torch.einsum("bnc,bnkc->", qc, kc[0][ids])

    assert float(total(fast)) > 0.99 * float(total(exact))  # 0.9945 here
    # route() switches to it above the threshold and stays exact below
    assert torch.equal(route(qc, kc, grid, k, two_level_above=None), exact)
    assert torch.equal(route(qc, kc, grid, k, two_level_above=n), exact)
    assert torch.equal(route(qc, kc, grid, k, two_level_above=n - 1), fast)


# --- budgets and the gate -------------------------------------------------------------------------


def _budget(module, x) -> tuple[torch.Tensor, int]:
    aux: dict = {}
    with torch.no_grad():
        module.eval()(x, aux)
    return aux["budget_maps"][0], aux["gathered_regions"][0]


def test_budget_map_mean_matches_the_target_in_eval_mode():
    x = textured_and_flat(16)
    for module in adaptive_pair((4.0, 2.0, 3.0)):  # as initialised
        kmap, _ = _budget(module, x)
        assert kmap.shape == (1, 1, 16, 16)
        assert torch.equal(kmap, kmap.round()) and kmap.min() >= 0 and kmap.max() <= 8
        assert abs(kmap.mean().item() - module.budget) <= 0.25
    module = adaptive_pair((4.0,))[0]
    variance_gate(module)
    kmap, _ = _budget(module, x)
    assert abs(kmap.mean().item() - 4.0) <= 0.25


def test_the_gate_gives_textured_regions_a_larger_budget():
    module = adaptive_pair((4.0,))[0]
    variance_gate(module)
    kmap, _ = _budget(module, textured_and_flat(16))
    textured, flat = kmap[..., :8], kmap[..., 8:]
    assert textured.min() > flat.max()
    # Sample variances of 16-token regions are ~1, not exactly 1: about k = 6 and 2.
    assert textured.mean().item() == pytest.approx(6.0, abs=0.5)
    assert flat.mean().item() == pytest.approx(2.0, abs=0.5)


def test_the_detail_prior_sends_the_budget_to_texture_and_skips_flat_regions():
    """A fresh gate (no training, no hand-set weights): k follows the regions' feature variance."""
    for budget in (4.0, 2.0):
        module = adaptive_pair((budget,))[0]
        kmap, gathered = _budget(module, textured_and_flat(16))
        textured, flat = kmap[..., :8], kmap[..., 8:]
        assert (flat == 0).all()  # constant features: attention skipped there
        assert textured.mean().item() == pytest.approx(2 * budget, abs=0.5)  # water-filled to the mean
        assert abs(kmap.mean().item() - budget) <= 0.25
    off = adaptive_pair((4.0,), detail_prior=0.0)[0]
    kmap, _ = _budget(off, textured_and_flat(16))
    assert kmap.max() - kmap.min() <= 1  # without the prior a fresh gate is near-uniform


def test_halving_the_budget_halves_the_gathered_key_regions():
    x = textured_and_flat(16, 32, 32)  # 64 regions
    for gate in ("init", "variance"):
        b4, b2 = adaptive_pair((4.0, 2.0))
        if gate == "variance":
            variance_gate(b4)
            variance_gate(b2)
        k4, gathered4 = _budget(b4, x)
        k2, gathered2 = _budget(b2, x)
        # Tier t gathers exactly t regions per query region: the count is the budget map's sum.
        assert gathered4 == int(k4[..., ::4, ::4].sum()) and gathered2 == int(k2[..., ::4, ::4].sum())
        assert gathered4 == pytest.approx(4 * 64, rel=0.05)
        assert gathered2 / gathered4 == pytest.approx(0.5, abs=0.05)


def zero_for_flat_gate(module: AdaptiveSparseAttention) -> None:
    """A gate whose score underflows to exactly 0 on flat regions (k = 0 there, in every path)."""
    variance_gate(module, gain=20.0, floor=-200.0)


def test_k_zero_regions_skip_attention():
    module = adaptive_pair((4.0,))[0]
    zero_for_flat_gate(module)
    x = textured_and_flat(16)
    q, k, v = module.qkv(x).chunk(3, dim=1)
    aux: dict = {}
    with torch.no_grad():
        out = module.eval().attend(q, k, v, x, aux)
    assert (aux["budget_maps"][0][..., 8:] == 0).all()
    assert torch.equal(out[..., 8:], torch.zeros_like(out[..., 8:]))
    assert out[..., :8].abs().amin(dim=(0, 1)).max() > 0
    soft = module.train().attend(q, k, v, x, {})
    assert torch.equal(soft[..., 8:], torch.zeros_like(soft[..., 8:]))  # the soft path fades out too


# --- precision and gradients ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["topk", "adaptive"])
def test_half_precision_gives_no_nan(dtype, kind):
    torch.manual_seed(0)
    if kind == "topk":
        module = TopkAttention(16, 2, region=4, k=3)
    else:
        module = AdaptiveSparseAttention(16, 2, region=4, k_min=0, k_max=8, budget=4.0)
        zero_for_flat_gate(module)  # k = 0 regions: fully blocked rows in the soft path
    module = module.to(dtype)
    x = textured_and_flat(16, 18, 14).to(dtype)
    with torch.no_grad():
        y = module.eval()(x)
    assert y.dtype == dtype and torch.isfinite(y).all()
    y = module.train()(x)
    assert torch.isfinite(y).all()


def test_every_parameter_of_a_lone_adaptive_module_gets_a_gradient():
    torch.manual_seed(0)
    module = AdaptiveSparseAttention(16, 2, region=4, k_min=0, k_max=8, budget=4.0).train()
    x = torch.randn(2, 16, 16, 16)
    aux: dict = {}
    loss = module(x, aux).square().mean() + 0.01 * aux["budget_loss"]
    loss.backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name
