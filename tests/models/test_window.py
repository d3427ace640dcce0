"""Shifted-window attention: the Swin mask against a hand-built expectation, and against dense+mask."""

from __future__ import annotations

import torch

from sr.models.attention import WindowAttention, attention, shift_mask
from sr.models.attention.common import merge_heads, split_heads

# A 14 x 14 map, window 7, shift 3. After the cyclic shift (roll by -3) rows 0-6 are one image area,
# rows 7-10 a second and rows 11-13 (wrapped from the top) a third; the same for columns. Area labels
# of the four windows, written out by hand (row-major windows: top-left, top-right, bottom-left,
# bottom-right):
WINDOW_LABELS = [
    """
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    0 0 0 0 0 0 0
    """,
    """
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    1 1 1 1 2 2 2
    """,
    """
    3 3 3 3 3 3 3
    3 3 3 3 3 3 3
    3 3 3 3 3 3 3
    3 3 3 3 3 3 3
    6 6 6 6 6 6 6
    6 6 6 6 6 6 6
    6 6 6 6 6 6 6
    """,
    """
    4 4 4 4 5 5 5
    4 4 4 4 5 5 5
    4 4 4 4 5 5 5
    4 4 4 4 5 5 5
    7 7 7 7 8 8 8
    7 7 7 7 8 8 8
    7 7 7 7 8 8 8
    """,
]


def _labels(text: str) -> torch.Tensor:
    return torch.tensor([int(v) for v in text.split()]).view(7, 7)


def test_shift_mask_matches_the_hand_built_windows():
    blocked = shift_mask(14, 14, window=7, shift=3)
    assert blocked.shape == (4, 49, 49) and blocked.dtype == torch.bool
    for w, text in enumerate(WINDOW_LABELS):
        lab = _labels(text).flatten()
        torch.testing.assert_close(blocked[w], lab[:, None] != lab[None, :])  # True = blocked
    # Blocked pairs counted by hand: 0; 2 * 28 * 21; 2 * 28 * 21; 49^2 - (16^2 + 12^2 + 12^2 + 9^2).
    assert blocked.sum(dim=(1, 2)).tolist() == [0, 1176, 1176, 1776]
    assert not blocked.diagonal(dim1=1, dim2=2).any()  # a token always sees itself: no empty row


def _reference_mask(size: int, window: int, shift: int, areas: bool = True) -> torch.Tensor:
    """(HW, HW) blocked mask in the original (unshifted) token order: allowed iff same shifted window
    and (with ``areas``) same area, built from the hand-written labels."""
    grid = torch.zeros(size, size, dtype=torch.long)  # area label of each rolled position
    win = torch.zeros(size, size, dtype=torch.long)
    for w, text in enumerate(WINDOW_LABELS):
        r, c = divmod(w, 2)
        grid[r * 7 : r * 7 + 7, c * 7 : c * 7 + 7] = _labels(text)
        win[r * 7 : r * 7 + 7, c * 7 : c * 7 + 7] = w
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    ry, rx = (ys - shift) % size, (xs - shift) % size  # roll by -shift moves token y to y - shift
    key = (win[ry, rx] * 100 + grid[ry, rx] * areas).flatten()
    return key[:, None] != key[None, :]


def test_shifted_window_attention_equals_dense_attention_under_the_mask():
    torch.manual_seed(0)
    c, heads = 12, 3
    module = WindowAttention(c, heads, window=7, shift=True)
    assert module.shift == 3
    q, k, v = (torch.randn(2, c, 14, 14) for _ in range(3))
    got = module.attend(q, k, v, q, None)  # (B, C, H, W)
    mask = _reference_mask(14, 7, 3)
    qt, kt, vt = (split_heads(t.flatten(2).transpose(1, 2), heads) for t in (q, k, v))
    ref, _ = attention(qt, kt, vt, mask)
    expected = merge_heads(ref).transpose(1, 2).reshape(2, c, 14, 14)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # The area mask matters: plain windows on the shifted map (no area mask) give something else.
    plain = attention(qt, kt, vt, _reference_mask(14, 7, 3, areas=False))[0]
    assert (merge_heads(plain).transpose(1, 2).reshape(2, c, 14, 14) - got).abs().max() > 1e-2


def test_unshifted_windows_are_independent_blocks():
    torch.manual_seed(1)
    module = WindowAttention(8, 2, window=4, shift=False)
    q, k, v = (torch.randn(1, 8, 8, 8) for _ in range(3))
    out = module.attend(q, k, v, q, None)
    v2 = v.clone()
    v2[:, :, 4:, 4:] += 10.0  # change only the bottom-right window's values
    out2 = module.attend(q, k, v2, q, None)
    assert torch.equal(out[:, :, :4, :], out2[:, :, :4, :])
    assert torch.equal(out[:, :, 4:, :4], out2[:, :, 4:, :4])
    assert (out[:, :, 4:, 4:] - out2[:, :, 4:, 4:]).abs().min() > 1.0
