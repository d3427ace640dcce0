"""Dilated window attention ('dilated'): w x w windows of each (y mod d, x mod d) group, against a dense
masked reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sr.models.attention import ATTENTION_KINDS, WindowAttention, get_attention, make_attention
from sr.models.attention.dilated import DilatedAttention
from tests.models import attention_checks as checks


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, window: int, dilation: int):
    """Dense attention where (y, x) and (y', x') may attend iff they share a dilation group (y mod d,
    x mod d) and a window of that group's own map (the group's map rows y // d, split every w rows).
    Needs H and W to be multiples of w * d."""
    h, w = q.shape[-2:]

    def place(y: int, x: int) -> tuple[int, int, int, int]:
        return y % dilation, x % dilation, (y // dilation) // window, (x // dilation) // window

    places = [place(y, x) for y in range(h) for x in range(w)]
    blocked = torch.tensor([[a != b for b in places] for a in places])
    return checks.masked_dense(q, k, v, heads, blocked)


# whole spans (window * dilation) of odd and even windows; the span is the whole map; no dilation
@pytest.mark.parametrize("h, w, window, dilation", [
    (12, 18, 3, 2), (9, 18, 3, 3), (8, 8, 2, 4), (6, 4, 2, 1),
])
def test_equals_dense_attention_under_the_group_and_window_mask(h, w, window, dilation):
    q, k, v = checks.qkv(6, h, w)
    want = reference(q, k, v, 3, window, dilation)
    block = DilatedAttention(6, 3, window=window, dilation=dilation).eval()
    for static in (False, True):
        block.static = static
        got = block.attend(q, k, v, q, None)
        assert got.shape == (2, 6, h, w) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("h, w", [(7, 11), (13, 5), (1, 2)])
def test_unaligned_maps_attend_as_their_reflect_padded_map_does(h, w):
    """Sizes that are not whole spans (w * d) pad on the bottom and right like window attention:
    reflected (replicated where the map is too small to reflect), attended, cropped."""
    q, k, v = checks.qkv(4, h, w, seed=1)
    ph, pw = (-h) % 6, (-w) % 6  # window 3 x dilation 2
    mode = "reflect" if ph < h and pw < w else "replicate"
    padded = [F.pad(t, (0, pw, 0, ph), mode=mode) for t in (q, k, v)]
    want = reference(*padded, 2, 3, 2)[:, :, :h, :w]
    block = DilatedAttention(4, 2, window=3, dilation=2).eval()
    for static in (False, True):
        block.static = static
        torch.testing.assert_close(block.attend(q, k, v, q, None), want, atol=1e-5, rtol=0)


def test_dilation_one_is_unshifted_window_attention():
    q, k, v = checks.qkv(8, 16, 12, seed=2)
    dilated = DilatedAttention(8, 2, window=4, dilation=1).attend(q, k, v, q, None)
    torch.testing.assert_close(dilated, WindowAttention(8, 2, window=4).attend(q, k, v, q, None), atol=1e-6,
                               rtol=0)


def test_module_shapes_dtypes_alignment_and_bf16_autocast():
    block = checks.strong_block("dilated", 8, 2, window=3, dilation=2, stride=2)
    assert type(block) is DilatedAttention and block.align == 12
    q, k, v = checks.qkv(8, 12, 18)
    checks.bf16_core_follows_reference(block, torch.rand(2, 8, 13, 10), q, k, v, reference(q, k, v, 2, 3, 2))


@pytest.mark.cpu_bf16
def test_block_runs_under_bf16_autocast():
    block = checks.strong_block("dilated", 8, 2, window=3, dilation=2)
    checks.follows_fp32_under_bf16_autocast(block, torch.rand(1, 8, 11, 14))


def test_gradients_reach_the_input_and_every_parameter():
    attn = make_attention("dilated", 8, 2, window=2, dilation=2)
    checks.gradients_reach_everything(attn, torch.rand(2, 8, 7, 9))


def test_registered_with_its_options():
    assert "dilated" in ATTENTION_KINDS
    variant = get_attention("dilated")
    assert dict(variant.defaults) == {"window": 8, "dilation": 2, "stride": 1} and variant.k_max() is None
    with pytest.raises(ValueError, match="must be positive"):
        make_attention("dilated", 8, 2, dilation=0)


@checks.needs_onnx
@pytest.mark.slow
def test_onnx_export_matches_torch_at_any_size():
    # from one span (6) up: reflect padding in the graph needs more pixels than it pads, as for
    # window attention (sr export's graph has the same floor)
    block = checks.strong_block("dilated", 8, 2, window=3, dilation=2)
    checks.onnx_matches_torch(block, [(19, 23), (12, 31), (6, 6), (24, 7)], min_side=6)


@pytest.mark.slow
def test_static_path_compiles_without_graph_breaks_for_any_size():
    block = checks.strong_block("dilated", 8, 2, window=3, dilation=2)
    checks.compiles_without_graph_breaks(block, [(24, 40), (31, 17), (6, 9)])


def test_sr_train_builds_a_dilated_network():
    blocks = checks.sr_train_builds("dilated")
    assert len(blocks) == 2 and all(type(b) is DilatedAttention for b in blocks)
    assert [(b.window, b.dilation, b.stride) for b in blocks] == [(8, 2, 2)] * 2  # asa-small's stride


def test_sr_info_describes_a_dilated_network(tmp_path, capsys):
    rows = checks.sr_info_lines("dilated", {"window": 4, "dilation": 3, "stride": 2}, tmp_path, capsys)
    assert rows["attention"] == "dilated (window=4, dilation=3, stride=2)"
    assert rows["input align"].startswith("24 px")
