"""The textbook attention function and dense attention: hand example, softmax rows, MHA, permutations."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sr.models.attention import DenseAttention, attention
from sr.models.attention.common import large_negative
from sr.models.attention.routing import soft_region_attention


def test_two_token_hand_example():
    # X = [[1, 0], [0, 1]], Wq = Wk = Wv = I, one head: scores = X X^T / sqrt(2).
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    out, weights = attention(x, x, x)
    expected = torch.tensor([[0.670, 0.330], [0.330, 0.670]])
    torch.testing.assert_close(weights, expected, atol=5e-4, rtol=0)
    e = math.exp(1 / math.sqrt(2))
    assert weights[0, 0].item() == pytest.approx(e / (e + 1), abs=1e-6)
    torch.testing.assert_close(out, expected, atol=5e-4, rtol=0)  # V = I: the output is the weights


def test_rows_sum_to_one_with_masks_and_a_fully_blocked_row():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 10, 8, generator=g) for _ in range(3))
    mask = torch.rand(10, 10, generator=g) > 0.6
    mask[4] = True  # fully blocked: must not become NaN (uniform weights instead)
    out, weights = attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 10), atol=1e-6, rtol=0)
    open_rows = ~mask.all(-1)
    assert (weights[..., open_rows, :][..., mask[open_rows]] < 1e-30).all()  # True = blocked


def test_dense_equals_torch_multihead_attention():
    torch.manual_seed(0)
    c, heads = 24, 3
    dense = DenseAttention(c, heads, positional=False).eval()
    mha = nn.MultiheadAttention(c, heads, batch_first=True).eval()
    with torch.no_grad():
        dense.qkv.weight.copy_(mha.in_proj_weight[:, :, None, None])
        dense.qkv.bias.copy_(mha.in_proj_bias)
        dense.proj.weight.copy_(mha.out_proj.weight[:, :, None, None])
        dense.proj.bias.copy_(mha.out_proj.bias)
        x = torch.randn(2, c, 5, 7)
        tokens = x.flatten(2).transpose(1, 2)  # (B, HW, C)
        expected = tokens + mha(tokens, tokens, tokens, need_weights=False)[0]
        got = dense(x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_dense_without_positional_terms_is_permutation_equivariant():
    torch.manual_seed(1)
    dense = DenseAttention(12, 2, positional=False).eval()
    x = torch.randn(1, 12, 4, 6)
    perm = torch.randperm(24)
    with torch.no_grad():
        out = dense(x).flatten(2)
        out_perm = dense(x.flatten(2)[:, :, perm].view(1, 12, 4, 6)).flatten(2)
    torch.testing.assert_close(out_perm, out[:, :, perm], atol=1e-5, rtol=0)
    # LePE is positional: with it, the same permutation does change the result.
    torch.manual_seed(1)
    positional = DenseAttention(12, 2, positional=True).eval()
    with torch.no_grad():
        moved = positional(x.flatten(2)[:, :, perm].view(1, 12, 4, 6)).flatten(2)
        diff = moved - positional(x).flatten(2)[:, :, perm]
    assert diff.abs().max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_fully_blocked_rows_stay_finite(dtype):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    mask = torch.zeros(6, 6, dtype=torch.bool)
    mask[0] = True
    mask[3, :4] = True
    out, weights = attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    ref, _ = attention(q, k, v, mask)
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(out[..., 1:, :].float(), ref[..., 1:, :], atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_soft_region_attention_blocked_bias_with_half_precision_values(dtype):
    # A "blocked" bias (what rank_mask_bias gives for k = 0) must give finite outputs in v's dtype.
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 4, 16, 6, generator=g).to(dtype) for _ in range(3))  # (B, heads, N, P, d)
    idx = torch.tensor([[[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1]]])  # (B, N, K)
    bias = torch.zeros(1, 4, 3)
    bias[0, 0] = large_negative(torch.float32)  # every key region of query region 0 blocked
    bias[0, 1, 1:] = large_negative(torch.float32)
    out = soft_region_attention(q, k, v, idx, bias)
    assert out.shape == (1, 2, 4, 16, 6) and out.dtype == dtype
    assert torch.isfinite(out).all()
