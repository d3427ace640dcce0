"""The spatial kinds, ``spatial`` (CBAM's spatial attention) and ``cbam`` (channel gate, then spatial
map): against naive references written with loops over pixels and channels, locality, and what
``sr info`` and ``sr train --attention`` make of them (shapes, bf16, gradients and ONNX, alike for the
channel kinds: test_attention_channel_spatial.py)."""

from __future__ import annotations

import math

import pytest
import torch

from sr.commands.info import attention_summary
from sr.models import NetConfig
from sr.models.attention import get_attention, make_attention
from sr.models.registry import ASA
from tests.models.attention_checks import frame, strong_block, trains_through_sr_train

KINDS = ("spatial", "cbam")


def sigmoid(t: float) -> float:
    return 1 / (1 + math.exp(-t))


def spatial_map(w: dict, v: torch.Tensor) -> list:
    """CBAM's spatial map, pixel by pixel: [b][y][x] sigmoid weights from the channel mean and max at
    every pixel of the k x k neighbourhood (zero outside the map) through the conv's taps."""
    kernel, bias = w["spatial.conv.weight"][0].tolist(), float(w["spatial.conv.bias"][0])  # (2, k, k)
    b, c, h, wd = v.shape
    r = len(kernel[0]) // 2
    vals = v.tolist()
    out = []
    for i in range(b):
        stats = [[[sum(vals[i][ch][y][x] for ch in range(c)) / c, max(vals[i][ch][y][x] for ch in range(c))]
                  for x in range(wd)] for y in range(h)]
        rows = []
        for y in range(h):
            row = []
            for x in range(wd):
                logit = bias
                for dy in range(-r, r + 1):
                    for dx in range(-r, r + 1):
                        if 0 <= y + dy < h and 0 <= x + dx < wd:
                            mean, peak = stats[y + dy][x + dx]
                            logit += kernel[0][dy + r][dx + r] * mean + kernel[1][dy + r][dx + r] * peak
                row.append(sigmoid(logit))
            rows.append(row)
        out.append(rows)
    return out


def spatial_core(w: dict, q, k, v: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor(spatial_map(w, v), dtype=v.dtype)  # (B, H, W)
    return v * weights[:, None]


def cbam_core(w: dict, q, k, v: torch.Tensor) -> torch.Tensor:
    """CBAM, channel by channel, then pixel by pixel: sigmoid(MLP(mean) + MLP(max)) per channel, one
    MLP shared by both poolings, then the spatial map of the channel-gated features."""
    b, c, _, _ = v.shape
    w1, b1 = w["excite.fc1.weight"][:, :, 0, 0].tolist(), w["excite.fc1.bias"].tolist()
    w2, b2 = w["excite.fc2.weight"][:, :, 0, 0].tolist(), w["excite.fc2.bias"].tolist()

    def mlp(s: list) -> list:
        hidden = [max(sum(w1[j][ch] * s[ch] for ch in range(c)) + b1[j], 0.0) for j in range(len(b1))]
        return [sum(w2[ch][j] * hidden[j] for j in range(len(b1))) + b2[ch] for ch in range(c)]

    gated = torch.empty_like(v)
    for i in range(b):
        avg = [float(v[i, ch].mean()) for ch in range(c)]
        peak = [float(v[i, ch].max()) for ch in range(c)]
        logits = [a + m for a, m in zip(mlp(avg), mlp(peak), strict=True)]
        for ch in range(c):
            gated[i, ch] = v[i, ch] * sigmoid(logits[ch])
    return spatial_core(w, q, k, gated)


@pytest.mark.parametrize("spatial_kernel", [7, 3, 1])
def test_spatial_matches_the_naive_pixel_loop(spatial_kernel):
    block = strong_block("spatial", 8, 2, spatial_kernel=spatial_kernel, all_weights=True)
    x = torch.randn(2, 8, 6, 9, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = block(x.contiguous(memory_format=torch.channels_last))  # the engine's layout
    torch.testing.assert_close(got, frame(block, x, spatial_core).float(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("reduction, spatial_kernel", [(4, 7), (2, 5)])
def test_cbam_matches_the_naive_channel_then_pixel_loops(reduction, spatial_kernel):
    block = strong_block("cbam", 8, 2, reduction=reduction, spatial_kernel=spatial_kernel, all_weights=True)
    x = torch.randn(2, 8, 7, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = block(x)
    torch.testing.assert_close(got, frame(block, x, cbam_core).float(), atol=1e-5, rtol=0)


def test_spatial_sees_only_its_neighbourhood_and_cbam_the_whole_map():
    # spatial: a pixel's output depends on the k x k neighbourhood (LePE's 3 x 3 inside it), so a tile
    # with an overlap of k // 2 computes what the whole image does; cbam's channel gate pools the map
    x = torch.randn(1, 8, 20, 20, generator=torch.Generator().manual_seed(2))
    far = x.clone()
    far[..., 19, 19] += 5.0
    for kind, local in (("spatial", True), ("cbam", False)):
        # (spatial ignores reduction)
        block = strong_block(kind, 8, 2, spatial_kernel=5, reduction=1, all_weights=True)
        with torch.no_grad():
            change = (block(far) - block(x)).abs().amax(dim=1)[0]  # (H, W)
        assert change[19, 19] > 0
        assert (change[:17, :17].max() == 0) == local, kind
        assert (change[17:, 17:] > 0).all()


def test_spatial_on_a_tile_that_starts_on_its_grid_matches_the_whole_map_inside():
    # the engine tiles at multiples of ``align``; at stride 2 that is the pooling grid
    block = strong_block("spatial", 8, 2, spatial_kernel=3, stride=2, all_weights=True)
    assert block.align == 2 and strong_block("spatial", 8, 2, all_weights=True).align == 1
    x = torch.randn(1, 8, 24, 26, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        whole, tile = block(x), block(x[..., 4:20, 6:24])
    m = 6  # the tile's border, within the block's reach (pooling, LePE, the 3 x 3 map, upsampling)
    torch.testing.assert_close(tile[..., m:-m, m:-m], whole[..., 4 + m : 20 - m, 6 + m : 24 - m],
                               atol=1e-5, rtol=0)


def test_options_are_stated_in_the_registry_and_checked():
    assert get_attention("spatial").defaults == {"spatial_kernel": 7, "stride": 1}
    assert get_attention("cbam").defaults == {"reduction": 4, "spatial_kernel": 7, "stride": 1}
    assert all(get_attention(k).k_max() is None for k in KINDS)  # no per-region budget
    for kind in KINDS:
        with pytest.raises(ValueError, match="spatial_kernel must be an odd positive integer"):
            make_attention(kind, 8, 2, spatial_kernel=4)
    with pytest.raises(ValueError, match="reduction must be an integer in"):
        make_attention("cbam", 8, 2, reduction=0)


@pytest.mark.parametrize("kind, summary", [("spatial", "spatial (spatial_kernel=7, stride=2)"),
                                           ("cbam", "cbam (reduction=4, spatial_kernel=7, stride=2)")])
def test_sr_info_names_the_kind_and_its_options(kind, summary):
    assert attention_summary(NetConfig(attention=kind, attn_options=dict(ASA))) == summary


@pytest.mark.slow
def test_sr_train_attention_cbam_trains_and_checkpoints(tmp_path):
    trains_through_sr_train("cbam", tmp_path)
