"""The tiered soft training path equals the fixed-K one, values and gradients, at a fraction of the work."""

from __future__ import annotations

import pytest
import torch

from sr.models.attention import AdaptiveSparseAttention
from sr.models.attention.routing import rank_mask_bias, soft_region_attention, tiered_soft_region_attention


def _routes(b: int, n: int, k: int, g: torch.Generator) -> torch.Tensor:
    rows = [torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(n)]) for _ in range(b)]
    return torch.stack(rows)


def _fixed_k(q, k, v, idx, budget):
    """The reference: every region gathers all K ranks, masked by the rank weights, faded by rank 0."""
    weights, bias = rank_mask_bias(budget, idx.shape[-1])
    return soft_region_attention(q, k, v, idx, bias) * weights[:, None, :, :1, None]


@pytest.mark.parametrize("caps", [(1, 2, 3, 4, 6, 8), (2, 5), ()])
def test_tiered_soft_path_equals_the_fixed_k_path_with_gradients(caps):
    g = torch.Generator().manual_seed(0)
    b, heads, n, pp, d, kk = 2, 3, 20, 16, 8, 8
    q, k, v = (torch.randn(b, heads, n, pp, d, generator=g).requires_grad_() for _ in range(3))
    idx = _routes(b, n, kk, g)
    budget = torch.rand(b, n, generator=g) * kk
    budget[0, :4] = torch.tensor([1.0, 8.0, 1e-3, 0.5])  # integer k, k = K, and tiny budgets
    budget.requires_grad_()
    ref = _fixed_k(q, k, v, idx, budget)
    out = tiered_soft_region_attention(q, k, v, idx, budget, caps=caps)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    grad = torch.randn(ref.shape, generator=g)
    got = torch.autograd.grad((out * grad).sum(), [q, k, v, budget])
    want = torch.autograd.grad((ref * grad).sum(), [q, k, v, budget])
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)
    assert got[3].abs().max() > 0  # the gate learns through the tiers


def test_each_region_gathers_only_the_ranks_its_budget_counts(monkeypatch):
    # Budget 0.3 counts one rank, 2.5 three, 8 all eight: with caps (1, 4, 8) the gathers are 1, 4, 8.
    gathered = []
    real = torch.Tensor.index_select

    def spy(t, dim, index):
        if t.dim() == 4 and dim == 1 and t.shape[-1] == 8:  # the (heads, B*N, P, d) rows
            gathered.append(index.numel())
        return real(t, dim, index)

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 3, 4, 8, generator=g) for _ in range(3))
    idx = _routes(1, 3, 3, g)  # K = 3 of N = 3
    budget = torch.tensor([[0.3, 2.5, 3.0]])
    monkeypatch.setattr(torch.Tensor, "index_select", spy)
    tiered_soft_region_attention(q, k, v, idx, budget, caps=(1, 2))
    # tier 1 (budget 0.3): its query and 1 key region (k, v); tier K = 3 (2.5 and 3.0): 2 queries and
    # 6 key regions; then the 3 outputs put back in region order
    assert sorted(gathered) == [1, 1, 1, 2, 3, 6, 6]


def test_the_adaptive_block_trains_on_the_tiered_path_as_on_the_fixed_k_path(monkeypatch):
    # The whole block's training forward and its gradients, tiered vs. every region at K ranks.
    torch.manual_seed(3)
    block = AdaptiveSparseAttention(24, 3, region=4, k_max=8, budget=2.0, detail_prior=1.0).train()
    torch.nn.init.normal_(block.proj.weight, std=0.5)  # an O(1) projection: core errors show at full size
    x = torch.randn(2, 24, 22, 17, requires_grad=True)
    out = block(x)
    grads = torch.autograd.grad(out.square().sum(), [x, *block.parameters()])

    from sr.models.attention import adaptive

    monkeypatch.setattr(adaptive, "tiered_soft_region_attention", _fixed_k)
    ref = block(x)
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, *block.parameters()])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for a, e in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
