"""Neighbourhood attention ('local'): NATTEN's clamped k x k window, against a dense masked reference."""

from __future__ import annotations

import pytest
import torch

from sr.models.attention import ATTENTION_KINDS, get_attention, make_attention
from sr.models.attention.local import LocalAttention, neighbourhood_attention
from tests.models import attention_checks as checks


def window(i: int, n: int, kernel: int) -> range:
    """The key positions along a side of n that a query at i sees: kernel of them centred on i, the
    window moved back inside the side where it would leave it; the whole side when it is shorter."""
    if n <= kernel:
        return range(n)
    start = i - kernel // 2
    if start < 0:
        start = 0
    if start + kernel > n:
        start = n - kernel
    return range(start, start + kernel)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, kernel: int) -> torch.Tensor:
    h, w = q.shape[-2:]
    blocked = torch.ones(h * w, h * w, dtype=torch.bool)
    for i in range(h):
        for j in range(w):
            for y in window(i, h, kernel):
                for x in window(j, w, kernel):
                    blocked[i * w + j, y * w + x] = False
    return checks.masked_dense(q, k, v, heads, blocked)


# odd sizes; a side shorter than the kernel (the window is the whole side); a single token
@pytest.mark.parametrize("h, w, kernel", [(9, 11, 5), (13, 7, 3), (4, 11, 5), (12, 3, 7), (1, 1, 7)])
def test_equals_dense_attention_under_the_window_mask(h, w, kernel):
    q, k, v = checks.qkv(6, h, w)
    want = reference(q, k, v, 3, kernel)
    block = LocalAttention(6, 3, kernel=kernel).eval()
    for static in (False, True):
        block.static = static
        got = block.attend(q, k, v, q, None)
        assert got.shape == (2, 6, h, w) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for rows in (1, 2, 4):  # bands of query rows, as eager inference runs a large map
        torch.testing.assert_close(neighbourhood_attention(q, k, v, 3, kernel, band_rows=rows), want,
                                   atol=1e-5, rtol=0)


def test_every_query_sees_exactly_its_clamped_window():
    """The keys a query's output depends on (a non-zero gradient on their values), at a corner, an edge
    and the centre: always kernel^2 of them, the window moved inside the image at the borders."""
    q, k, v = checks.qkv(4, 9, 10, b=1)
    v.requires_grad_()
    out = neighbourhood_attention(q, k, v, 2, 5)
    for (i, j), rows, cols in [((0, 0), (0, 5), (0, 5)), ((8, 4), (4, 9), (2, 7)), ((4, 9), (2, 7), (5, 10)),
                               ((5, 5), (3, 8), (3, 8))]:
        (grad,) = torch.autograd.grad(out[0, :, i, j].sum(), v, retain_graph=True)
        seen = grad[0].abs().sum(0) > 0  # (H, W)
        expected = torch.zeros(9, 10, dtype=torch.bool)
        expected[rows[0] : rows[1], cols[0] : cols[1]] = True
        assert torch.equal(seen, expected), (i, j)


def test_translation_equivariant_away_from_the_borders():
    """Shifting the input by (3, 2) shifts the block's output by (3, 2) wherever the query's window
    (and the positional conv around it) lies inside both crops."""
    block = checks.strong_block("local", 8, 2, kernel=5)
    big = torch.randn(1, 8, 30, 31, generator=torch.Generator().manual_seed(3))
    a, b = big[:, :, :24, :24], big[:, :, 3:27, 2:26]
    with torch.no_grad():
        ya, yb = block(a), block(b)
    m = 5 // 2 + 1  # the window's half width, plus the 3x3 positional conv's reach
    torch.testing.assert_close(ya[:, :, 3 + m : 24 - m, 2 + m : 24 - m], yb[:, :, m : 21 - m, m : 22 - m],
                               atol=1e-5, rtol=0)
    assert (ya[:, :, :3, :] - yb[:, :, :3, :]).abs().max() > 1e-2  # the test can fail: crops do differ


def test_module_shapes_dtypes_and_bf16_autocast():
    block = checks.strong_block("local", 8, 2, kernel=3, stride=2)
    assert type(block) is LocalAttention and block.align == 2
    q, k, v = checks.qkv(8, 13, 10)
    checks.bf16_core_follows_reference(block, torch.rand(2, 8, 13, 10), q, k, v, reference(q, k, v, 2, 3))


@pytest.mark.cpu_bf16
def test_block_runs_under_bf16_autocast():
    block = checks.strong_block("local", 8, 2, kernel=5)
    checks.follows_fp32_under_bf16_autocast(block, torch.rand(1, 8, 11, 14))


def test_gradients_reach_the_input_and_every_parameter():
    checks.gradients_reach_everything(make_attention("local", 8, 2, kernel=3), torch.rand(2, 8, 7, 9))


def test_registered_with_its_options():
    assert "local" in ATTENTION_KINDS
    variant = get_attention("local")
    assert dict(variant.defaults) == {"kernel": 7, "stride": 1} and variant.k_max() is None


def test_bad_kernels_are_refused():
    for kernel in (0, 4, -3):
        with pytest.raises(ValueError, match="odd and positive"):
            make_attention("local", 8, 2, kernel=kernel)


@checks.needs_onnx
@pytest.mark.slow
def test_onnx_export_matches_torch_at_any_size():
    block = checks.strong_block("local", 8, 2, kernel=5)
    checks.onnx_matches_torch(block, [(19, 23), (12, 31), (3, 4), (1, 1)])


@pytest.mark.slow
def test_static_path_compiles_without_graph_breaks_for_any_size():
    block = checks.strong_block("local", 8, 2, kernel=5)
    checks.compiles_without_graph_breaks(block, [(24, 40), (31, 17), (3, 4)])


def test_sr_train_builds_a_local_network():
    blocks = checks.sr_train_builds("local")
    assert len(blocks) == 2 and all(type(b) is LocalAttention and b.kernel == 7 for b in blocks)


def test_sr_info_describes_a_local_network(tmp_path, capsys):
    rows = checks.sr_info_lines("local", {"kernel": 5, "stride": 2, "region": 4}, tmp_path, capsys)
    assert rows["attention"] == "local (kernel=5, stride=2)"
    assert rows["input align"].startswith("2 px")
