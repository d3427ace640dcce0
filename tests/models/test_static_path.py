"""The fixed-shape inference path: the tiered path's output, no host reads, one graph for every size."""

from __future__ import annotations

import pytest
import torch

from sr.models import NetConfig, SRNet, set_attention_path
from sr.models.attention import AdaptiveSparseAttention, TopkAttention
from sr.models.attention.routing import pooled_topk, static_topk
from sr.models.registry import ASA


def core_outputs(module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention core's output (not x + proj(...), whose near-zero proj would hide core errors)
    on the tiered and on the static path, with the same weights and input."""
    q, k, v = module.qkv(x).chunk(3, dim=1)
    out = []
    for path in ("tiered", "static"):
        set_attention_path(module, path)
        aux: dict = {}
        out.append(module.attend(q, k, v, x, aux))
    return out[0], out[1]


def detail_and_flat(c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """(1, C, H, W): strong noise on the top-left, near-constant elsewhere, so many regions get k = 0."""
    g = torch.Generator().manual_seed(seed)
    x = 0.5 + 1e-4 * torch.randn(1, c, h, w, generator=g)
    hh, ww = max(1, h // 2), max(1, w // 2)
    x[..., :hh, :ww] += torch.randn(1, c, hh, ww, generator=g)
    return x


@pytest.mark.parametrize("hw", [(17, 23), (16, 16), (5, 3), (1, 1), (40, 9)])
@torch.no_grad()
def test_static_adaptive_equals_tiered_on_odd_sizes_with_k_zero_regions(hw):
    torch.manual_seed(0)
    m = AdaptiveSparseAttention(16, 2, region=4, k_min=0, k_max=8, budget=4.0, two_level_above=None).eval()
    x = detail_and_flat(16, *hw)
    tiered, static = core_outputs(m, x)
    assert static.shape == tiered.shape == (1, 16, *hw)
    assert torch.allclose(static, tiered, atol=1e-5, rtol=1e-5), (static - tiered).abs().max()
    assert tiered.abs().max() > 0.05  # the attended regions carry a real signal, not zeros
    if hw == (40, 9):  # the flat regions really get k = 0: their core output is exactly zero on both paths
        set_attention_path(m, "static")
        aux: dict = {}
        m(x, aux)
        k_map = aux["budget_maps"][0][0, 0]
        assert (k_map == 0).any() and (k_map > 0).any()
        assert torch.equal(static[0, :, k_map == 0], torch.zeros_like(static[0, :, k_map == 0]))


@torch.no_grad()
def test_static_adaptive_equals_tiered_with_more_regions_than_k_max_and_fewer():
    torch.manual_seed(1)
    m = AdaptiveSparseAttention(12, 3, region=4, k_min=1, k_max=6, budget=3.0, two_level_above=None).eval()
    for hw in [(8, 8), (12, 8), (32, 36)]:  # N = 4 and 6 (<= k_max: ranks past N masked), then 72
        tiered, static = core_outputs(m, torch.randn(2, 12, *hw))
        assert torch.allclose(static, tiered, atol=1e-5, rtol=1e-5), (hw, (static - tiered).abs().max())


@pytest.mark.parametrize("hw", [(13, 21), (32, 32)])
@torch.no_grad()
def test_static_topk_attention_equals_tiered(hw):
    torch.manual_seed(2)
    m = TopkAttention(16, 2, region=4, k=3, two_level_above=None).eval()
    tiered, static = core_outputs(m, torch.randn(1, 16, *hw))
    assert torch.allclose(static, tiered, atol=1e-5, rtol=1e-5)


def test_static_topk_equals_pooled_topk_and_pads_past_n():
    g = torch.Generator().manual_seed(3)
    qc, kc = torch.randn(2, 30, 8, generator=g), torch.randn(2, 30, 8, generator=g)
    assert torch.equal(static_topk(qc, kc, 5), pooled_topk(qc, kc, 5))
    few = static_topk(qc[:, :3], kc[:, :3], 5)  # k > N: the first N ranks are the real order
    assert few.shape == (2, 3, 5) and int(few.max()) <= 2
    assert torch.equal(few[..., :3], pooled_topk(qc[:, :3], kc[:, :3], 3))


def tiny_net(scale: int = 2) -> SRNet:
    torch.manual_seed(0)
    cfg = NetConfig(scale=scale, channels=8, blocks=2, attn_every=1, heads=2, attention="adaptive",
                    attn_options=dict(ASA))
    return SRNet(cfg).eval()


@torch.no_grad()
def test_whole_network_static_equals_tiered_and_training_is_unchanged():
    net = tiny_net()
    # a trained-like output projection, so the attention's share of the output is not negligible
    for m in net.modules():
        if isinstance(m, AdaptiveSparseAttention):
            torch.nn.init.normal_(m.proj.weight, std=0.3)
    x = torch.rand(1, 3, 27, 35)
    assert set_attention_path(net, "tiered") == 2
    tiered = net(x)
    set_attention_path(net, "static")
    assert torch.allclose(net(x), tiered, atol=1e-5)
    with pytest.raises(ValueError, match="unknown attention path"):
        set_attention_path(net, "fast")
    assert set_attention_path(SRNet(NetConfig(attention="none")), "static") == 0


@pytest.mark.slow
def test_static_network_compiles_without_graph_breaks_for_any_size():
    """fullgraph=True fails on any graph break (a host read of a tensor value, a data-dependent
    shape); dynamic=True traces sizes symbolically, so one graph must serve several sizes. The eager
    backend checks the tracing, not C++ code generation, which keeps this test within CI's time."""
    torch._dynamo.reset()
    net = tiny_net()
    set_attention_path(net, "static")
    compiled = torch.compile(net, fullgraph=True, dynamic=True, backend="eager")
    with torch.no_grad():
        for hw in [(24, 40), (31, 17), (48, 48)]:
            x = torch.rand(1, 3, *hw)
            assert torch.allclose(compiled(x), net(x), atol=1e-5)


def test_tiered_network_does_break_the_graph():
    """The check above can fail: the tiered path reads budgets on the host, which fullgraph refuses."""
    torch._dynamo.reset()
    net = tiny_net()
    set_attention_path(net, "tiered")
    compiled = torch.compile(net, fullgraph=True, dynamic=True, backend="eager")
    with torch.no_grad(), pytest.raises(Exception):  # noqa: B017 - dynamo's error type varies by version
        compiled(torch.rand(1, 3, 24, 40))
