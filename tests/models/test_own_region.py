"""Own region first (asa3): rank 0 is each region's own keys, the routed regions follow in order."""

from __future__ import annotations

import pytest
import torch

from sr.models import build_model, set_attention_path
from sr.models.attention import AdaptiveSparseAttention, attention
from sr.models.attention.common import from_head_regions, to_head_regions
from sr.models.attention.routing import own_region_first


def test_own_region_goes_first_and_the_routed_order_is_kept():
    # 3 regions, K = 3: region 0 routed to (2, 0, 1) (itself at rank 1), region 1 to (0, 2, 1)
    # (itself last), region 2 to (0, 1, 2)... and (1, 0, 2) in image 2 (itself last there too)
    idx = torch.tensor([[[2, 0, 1], [0, 2, 1], [0, 1, 2]], [[1, 2, 0], [0, 2, 1], [1, 0, 2]]])
    out = own_region_first(idx)
    expected = torch.tensor([[[0, 2, 1], [1, 0, 2], [2, 0, 1]], [[0, 1, 2], [1, 0, 2], [2, 1, 0]]])
    assert torch.equal(out, expected)
    # where routing did not pick the region itself, its last pick makes room
    assert torch.equal(own_region_first(torch.tensor([[[3, 2], [3, 0], [1, 0], [1, 2]]])),
                       torch.tensor([[[0, 3], [1, 3], [2, 1], [3, 1]]]))
    assert torch.equal(own_region_first(torch.tensor([[[1], [0]]])), torch.tensor([[[0], [1]]]))


def test_ids_stay_distinct_on_random_routes():
    g = torch.Generator().manual_seed(0)
    n, k = 30, 8
    idx = torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(2 * n)]).view(2, n, k)
    out = own_region_first(idx)
    assert out.shape == idx.shape
    assert torch.equal(out[..., 0], torch.arange(n).expand(2, n))
    for row_in, row_out in zip(idx.flatten(0, 1), out.flatten(0, 1), strict=True):
        assert len(set(row_out.tolist())) == k
        rest = [i for i in row_in.tolist() if i != row_out[0]]
        assert row_out[1:].tolist() == rest[: k - 1]


def asa3_module(c: int = 24, heads: int = 3, **kw) -> AdaptiveSparseAttention:
    torch.manual_seed(0)
    return AdaptiveSparseAttention(c, heads, region=4, own_first=True, two_level_above=None, **kw)


@torch.no_grad()
def test_budget_one_attends_within_the_own_region_only():
    m = asa3_module(k_min=1, k_max=1, budget=1).eval()
    x = torch.randn(2, 24, 12, 16)  # N = 3 * 4 regions, no padding
    q, k, v = m.qkv(x).chunk(3, dim=1)
    ref, _ = attention(*(to_head_regions(t, 4, 3) for t in (q, k, v)))  # (B, heads, N, 16, d) per region
    ref = from_head_regions(ref, 12, 16, 4)
    for path in ("tiered", "static"):
        set_attention_path(m, path)
        out = m.attend(q, k, v, x, {})
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    # the first design's routing would have looked elsewhere: the outputs differ without own_first
    m.own_first = False
    set_attention_path(m, "tiered")
    assert (m.attend(q, k, v, x, {}) - ref).abs().max() > 1e-2


@pytest.mark.parametrize("k", [1, 3])
def test_training_path_equals_inference_at_integer_k(k):
    m = asa3_module(k_min=k, k_max=k, budget=k)
    x = torch.randn(2, 24, 18, 13)  # padded to 20 x 16: N = 20 regions
    soft = m.train()(x)
    with torch.no_grad():
        hard = m.eval()(x)
    torch.testing.assert_close(hard, soft.detach(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("hw", [(17, 23), (8, 8), (40, 9)])
@torch.no_grad()
def test_static_path_equals_tiered_with_k_zero_regions_and_few_regions(hw):
    m = asa3_module(16, 2, k_min=0, k_max=8, budget=3.0).eval()
    g = torch.Generator().manual_seed(1)
    x = 0.5 + 1e-4 * torch.randn(1, 16, *hw, generator=g)
    x[..., : hw[0] // 2, : hw[1] // 2] += torch.randn(1, 16, hw[0] // 2, hw[1] // 2, generator=g)
    q, k, v = m.qkv(x).chunk(3, dim=1)
    outs = []
    for path in ("tiered", "static"):  # (8, 8): N = 4 regions < k_max, the static path pads its ranks
        set_attention_path(m, path)
        outs.append(m.attend(q, k, v, x, {}))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    assert outs[0].abs().max() > 0.05


def test_the_asa3_preset_puts_the_own_region_first_and_the_older_ones_do_not():
    blocks = lambda name: [m for m in build_model(name).modules() if isinstance(m, AdaptiveSparseAttention)]  # noqa: E731
    assert [m.own_first for m in blocks("asa3-base-x4")] == [True, True]
    assert not any(m.own_first for name in ("asa-base-x4", "asa2-base-x4") for m in blocks(name))


@torch.no_grad()
def test_recorded_routes_start_with_the_own_region():
    m = asa3_module(k_min=0, k_max=4, budget=2.0).eval()
    aux: dict = {"record_routes": True}
    m(torch.randn(1, 24, 16, 20), aux)  # N = 4 x 5 regions
    (idx, k, grid), = aux["routes"]
    assert grid == (4, 5) and idx.shape[:2] == k.shape == (1, 20)
    assert torch.equal(idx[0, :, 0], torch.arange(20))
    plain: dict = {}
    m(torch.randn(1, 24, 16, 20), plain)
    assert "routes" not in plain  # recorded only when asked
