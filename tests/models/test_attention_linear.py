"""Linear attention ('linear'): phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1) with phi = elu + 1, against the
same sums written out token by token."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sr.models.attention import ATTENTION_KINDS, get_attention, make_attention
from sr.models.attention.linear import LinearAttention, linear_attention
from tests.models import attention_checks as checks


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Per head and query n: sum_m s(n, m) v_m / sum_m s(n, m), s(n, m) = phi(q_n) . phi(k_m), in
    float64 with explicit loops over the queries: the quadratic form that the linear one regroups."""
    b, c, h, w = q.shape
    d = c // heads
    fq, fk, vv = (t.double().reshape(b, heads, d, h * w) for t in (F.elu(q) + 1, F.elu(k) + 1, v))
    out = torch.empty(b, heads, d, h * w, dtype=torch.float64)
    for n in range(h * w):
        s = (fq[:, :, :, n, None] * fk).sum(2)  # (B, heads, N): the similarity of query n to every key
        out[:, :, :, n] = (s[:, :, None, :] * vv).sum(-1) / s.sum(-1)[:, :, None]
    return out.reshape(b, c, h, w).float()


@pytest.mark.parametrize("h, w, heads", [(7, 9, 3), (5, 1, 1), (1, 1, 2), (11, 6, 6)])
def test_equals_the_quadratic_form(h, w, heads):
    q, k, v = checks.qkv(6, h, w)
    got = LinearAttention(6, heads).eval().attend(q, k, v, q, None)
    assert got.shape == (2, 6, h, w) and got.dtype == torch.float32
    torch.testing.assert_close(got, reference(q, k, v, heads), atol=1e-5, rtol=0)


def test_global_every_query_depends_on_every_key():
    q, k, v = checks.qkv(4, 6, 7, b=1)
    v.requires_grad_()
    out = linear_attention(q, k, v, 2)
    (grad,) = torch.autograd.grad(out[0, :, 0, 0].sum(), v)
    assert (grad[0].abs().sum(0) > 0).all()  # the corner query reads the whole map


def test_stays_finite_where_sums_over_a_large_map_would_overflow_half_precision():
    """Sums of phi(k) v over 512 x 512 tokens reach ~3e5, past fp16's 65504: the kernel works with means
    (the ratio is the same), so an fp16 run agrees with fp32."""
    q, k, v = (t + 2 for t in checks.qkv(2, 512, 512, b=1))
    want = linear_attention(q, k, v, 1)
    got = linear_attention(q.half(), k.half(), v.half(), 1)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.01)


def test_module_shapes_dtypes_and_bf16_autocast():
    block = checks.strong_block("linear", 8, 2, stride=2)
    assert type(block) is LinearAttention and block.align == 1
    q, k, v = checks.qkv(8, 13, 10)
    checks.bf16_core_follows_reference(block, torch.rand(2, 8, 13, 10), q, k, v, reference(q, k, v, 2))


@pytest.mark.cpu_bf16
def test_block_runs_under_bf16_autocast():
    checks.follows_fp32_under_bf16_autocast(checks.strong_block("linear", 8, 2), torch.rand(1, 8, 11, 14))


def test_gradients_reach_the_input_and_every_parameter():
    checks.gradients_reach_everything(make_attention("linear", 8, 2), torch.rand(2, 8, 7, 9))


def test_registered_with_its_options():
    assert "linear" in ATTENTION_KINDS
    variant = get_attention("linear")
    assert dict(variant.defaults) == {"stride": 1} and variant.k_max() is None


@checks.needs_onnx
@pytest.mark.slow
def test_onnx_export_matches_torch_at_any_size():
    checks.onnx_matches_torch(checks.strong_block("linear", 8, 2), [(19, 23), (12, 31), (3, 4), (1, 1)])


@pytest.mark.slow
def test_static_path_compiles_without_graph_breaks_for_any_size():
    checks.compiles_without_graph_breaks(checks.strong_block("linear", 8, 2), [(24, 40), (31, 17), (1, 1)])


def test_sr_train_builds_a_linear_network():
    blocks = checks.sr_train_builds("linear")
    assert len(blocks) == 2 and all(type(b) is LinearAttention and b.stride == 2 for b in blocks)


def test_sr_info_describes_a_linear_network(tmp_path, capsys):
    rows = checks.sr_info_lines("linear", {"stride": 2, "kernel": 5}, tmp_path, capsys)
    assert rows["attention"] == "linear (stride=2)"
    assert rows["input align"].startswith("1 px")
