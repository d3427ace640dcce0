"""Convolutions with their element-wise epilogue fused, at CPU inference (oneDNN post-ops).

A ReLU or a residual add after a convolution is a separate pass over a full-size map; in bf16 on
CPU such a pass costs a third of the 3x3 conv itself (48 x 256^2: conv 2.5 ms, ``relu_`` 0.7 ms,
``add_`` 0.9 ms, one thread), because PyTorch's bf16 element-wise kernels convert every element.
oneDNN applies both to the conv's fp32 accumulator before it writes the output, through
``torch.ops.mkldnn._convolution_pointwise`` (the op inductor's CPU fusions emit):

- ``conv_relu``: bit-identical to ``relu(conv(x))`` (ReLU commutes with rounding to bf16);
- ``conv_add``: ``conv(x) + other`` rounded once instead of twice: identical in fp32, within bf16's
  last bit in bf16.

Only where nothing else should run: CPU tensors, fp32 or bf16, no autograd, no tracing, export or
``torch.compile`` (which fuse on their own or must see plain ops); everywhere else, and with a
PyTorch that lacks the op, the same eager ops as before.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
import torch.overrides
from torch import nn

FUSED_DTYPES = (torch.float32, torch.bfloat16)


def add_in_place_ok() -> bool:
    """Whether a residual may be added into its branch's fresh output: at eager inference only.

    Training needs the branch output for autograd; a graph being exported (ONNX, torch.export,
    tracing) must keep the out-of-place add, or the exporter bakes the traced shapes in."""
    if torch.is_grad_enabled() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
        return False
    is_exporting = getattr(torch.compiler, "is_exporting", None)  # torch >= 2.5
    return not (is_exporting and is_exporting())


# Private in torch; where missing, assume no mode (tests/models/test_macs.py and test_fused.py show it).
_function_mode = getattr(torch.overrides, "_is_torch_function_mode_enabled", lambda: False)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


def _watched() -> bool:
    """A torch-function mode (our MAC counter) or a dispatch mode (torch's FLOP counter) is active."""
    return bool(_function_mode() or _dispatch_modes())


@functools.cache
def pointwise_op():
    """oneDNN's fused conv op, or None where this PyTorch build has no working one (checked once on
    a tiny input against the eager ops, so a changed signature falls back rather than fails)."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        op = torch.ops.mkldnn._convolution_pointwise
        x = torch.arange(2 * 5 * 5, dtype=torch.float32).view(1, 2, 5, 5).div(50).sub(0.5)
        w = torch.linspace(-1, 1, 2 * 2 * 9).view(2, 2, 3, 3)
        b = torch.tensor([0.1, -0.2])
        eager = F.conv2d(x, w, b, padding=1)
        ok = torch.allclose(op(x, w, b, [1, 1], [1, 1], [1, 1], 1, "relu", [], ""), eager.relu(), atol=1e-5)
        ok &= torch.allclose(_binary(op, x, x, w, b, [1, 1]), eager + x, atol=1e-5)
    except (AttributeError, RuntimeError, TypeError):
        return None
    return op if ok else None


def _binary(op, x: torch.Tensor, other: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
            padding: list[int]) -> torch.Tensor:
    return op.binary(x, other, w, b, padding, [1, 1], [1, 1], 1, "add", None, None, [], None)


def fusable(conv: nn.Conv2d, x: torch.Tensor) -> bool:
    """Whether ``conv`` on ``x`` may take the fused op: a plain zero-padded, unit-stride, ungrouped
    conv on a 4-D CPU map in fp32 or bf16, at eager inference, with nobody watching the plain ops: no
    forward hooks on the module and no torch-function or dispatch mode (MAC and FLOP counters see
    module calls, ``F.conv2d`` or aten's convolution, and the fused op is none of them)."""
    if torch.compiler.is_compiling() or not add_in_place_ok():  # compiling first: dynamo stops here
        return False  # torch.compile fuses on its own; autograd, tracing and export need the plain ops
    return (
        x.device.type == "cpu"
        and x.dim() == 4
        and x.dtype in FUSED_DTYPES
        and conv.weight.dtype == x.dtype
        and conv.groups == 1
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.padding_mode == "zeros"
        and isinstance(conv.padding, tuple)
        and not (conv._forward_hooks or conv._forward_pre_hooks)
        and not _watched()
        and pointwise_op() is not None
    )


def _output_shape(conv: nn.Conv2d, x: torch.Tensor) -> torch.Size:
    """The output shape of a unit-stride, undilated ``conv`` on ``x``."""
    (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
    h, w = x.shape[2] + 2 * ph - kh + 1, x.shape[3] + 2 * pw - kw + 1
    return torch.Size((x.shape[0], conv.out_channels, h, w))


# (H, W) of the real map inside a zero-margined one (sr.models.network's aligned bf16 forward), or None
_valid_extent: ContextVar[tuple[int, int] | None] = ContextVar("sr_valid_extent", default=None)


@contextlib.contextmanager
def valid_extent(h: int, w: int) -> Iterator[None]:
    """While inside, :func:`conv_relu` and :func:`conv_add` zero their outputs below row ``h`` and
    right of column ``w``: the next conv then reads zeros there, as its own zero padding would give."""
    token = _valid_extent.set((h, w))
    try:
        yield
    finally:
        _valid_extent.reset(token)


def clear_margin(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its margin outside :func:`valid_extent` zeroed in place (a no-op outside one)."""
    if torch.compiler.is_compiling():  # never inside one there (SRNet._margin), and dynamo cannot trace get
        return t
    extent = _valid_extent.get()
    if extent is not None:
        h, w = extent
        if t.shape[-2] > h:
            t[..., h:, :].zero_()
        if t.shape[-1] > w:
            t[..., w:].zero_()
    return t


def conv_relu(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``relu(conv(x))``, fused where :func:`fusable`."""
    if not fusable(conv, x):
        # in place on the fresh conv output, as nn.ReLU(inplace=True)
        return clear_margin(F.relu(conv(x), inplace=True))
    op = pointwise_op()
    return clear_margin(op(x, conv.weight, conv.bias, list(conv.padding), [1, 1], [1, 1], 1, "relu", [], ""))


def conv_add(conv: nn.Conv2d, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``conv(x) + other`` (a new map; ``other`` is left as it is), fused where :func:`fusable`
    and ``other`` has the output's shape and dtype."""
    if not fusable(conv, x) or other.dtype != x.dtype or other.shape != _output_shape(conv, x):
        y = conv(x)
        return clear_margin(y.add_(other) if add_in_place_ok() else y + other)
    return clear_margin(_binary(pointwise_op(), x, other, conv.weight, conv.bias, list(conv.padding)))
