"""A new attention variant is one file: registered here, it is built, aligned and budget-scaled by the
engine from a weights file's config, with no edit anywhere else."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sr.inference import Upscaler, list_models
from sr.inference.tiling import run_tiled
from sr.io import DecodedImage
from sr.models import NetConfig, SRNet
from sr.models.attention import AttentionBranch, register_attention
from sr.models.attention.common import pad_to_multiple
from sr.weights import save_weights

KIND = "test-region-mean"


class RegionMean(AttentionBranch):
    """Test-only: each token takes its region's mean v, so the output depends on where the region grid
    lies (as routed attention does), and every pixel reports ``cap`` as its budget."""

    def __init__(self, dim: int, heads: int, region: int, cap: int, stride: int) -> None:
        super().__init__(dim, heads, stride=stride)
        self.region, self.cap = region, cap

    @property
    def align(self) -> int:
        return self.stride * self.region

    def attend(self, q, k, v, x, aux):
        b, _, h, w = v.shape
        p = self.region
        means = F.avg_pool2d(pad_to_multiple(v, p)[0], p)
        out = F.interpolate(means, scale_factor=p, mode="nearest")[:, :, :h, :w]
        if aux is not None:
            aux.setdefault("budget_maps", []).append(v.new_full((b, 1, h, w), float(self.cap)))
        return out


@register_attention(KIND, budget_option="cap")
def build_region_mean(dim: int, heads: int, index: int, *, region: int = 2, cap: int = 3,
                      stride: int = 1) -> RegionMean:
    return RegionMean(dim, heads, region=region, cap=cap, stride=stride)


@pytest.fixture(scope="module")
def variant_x2(tmp_path_factory):
    torch.manual_seed(0)
    cfg = NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention=KIND,
                    attn_options={"region": 3, "stride": 2, "cap": 5})
    net = SRNet(cfg).eval()
    with torch.no_grad():  # a strong branch (the default starts near zero), so misalignment shows
        for m in net.modules():
            if isinstance(m, RegionMean):
                m.proj.weight.normal_(std=0.5)
    path = tmp_path_factory.mktemp("variant") / "regionmean-x2.safetensors"
    save_weights(net, path)
    return path


def texture(h: int, w: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.random((h, w, 3), dtype=np.float32)


def test_engine_uses_a_variant_registered_by_a_test_module(variant_x2):
    up = Upscaler(variant_x2, device="cpu", tile=None, threads=1)
    assert up.k_max == 5.0  # the variant's own budget option, read from the metadata before loading
    assert [m["k_max"] for m in list_models(variant_x2.parent)] == [5.0]
    res = up.upscale(DecodedImage(texture(37, 41)), with_budget_map=True)
    assert res.image.pixels.shape == (74, 82, 3)
    assert float(res.budget_map.min()) == float(res.budget_map.max()) == 5.0
    assert [type(m) for m in up.network(2).modules() if isinstance(m, AttentionBranch)] == [RegionMean]
    assert up.tile_runner(2)[1] == 6  # tiles align to stride 2 x region 3, as the variant states it


def test_the_variants_alignment_makes_tiles_match_the_whole_image(variant_x2):
    pixels = texture(150, 160)
    run, align = Upscaler(variant_x2, device="cpu", tile=None, threads=1).tile_runner(2)
    assert align == 6
    with torch.inference_mode():
        whole, _ = run(pixels)
        aligned, _ = run_tiled(pixels, run, 2, tile=110, overlap=32, align=align)
        unaligned, _ = run_tiled(pixels, run, 2, tile=110, overlap=32, align=1)  # starts off the 6 px grid
    # Same tiles and overlap: only where the region grid lies differs (measured 1e-4 vs 0.08).
    assert np.abs(aligned - whole).max() < 1e-3
    assert np.abs(unaligned - whole).max() > 0.02


def test_the_descriptor_reports_the_variants_own_budget_and_alignment(variant_x2):
    from sr.weights import describe, load_model

    desc = describe(variant_x2)  # metadata only: no tensor read, yet the variant's own statements
    assert (desc.attention, desc.k_max, desc.has_budget, desc.align) == (KIND, 5.0, True, 6)
    loaded = load_model(variant_x2)
    assert [type(m) for m in loaded.net.modules() if isinstance(m, AttentionBranch)] == [RegionMean]
    assert Upscaler(loaded, device="cpu", tile=None, threads=1).tile_runner(2)[1] == desc.align
