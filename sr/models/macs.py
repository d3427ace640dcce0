"""Multiply-accumulates of one forward pass, counted by the project itself as the network runs.

A torch-function mode sees every convolution, linear layer, matrix product and scaled dot-product
attention call, with their real shapes, so each attention kind (dense, window, routed, sparse) is
counted as it actually runs without a cost formula per kind. Torch's own FLOP counter works one
level lower (a dispatch mode), and entering any dispatch mode imports torch._dynamo: ~20 s once on
a loaded machine, most of what ``sr info --all`` took.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["MacCounter", "count_forward_macs"]


def _conv(args: tuple, kwargs: dict, out: torch.Tensor) -> int:
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    # every output element: (input channels per group) x kernel taps; bias adds are not counted
    return out.numel() * prod(weight.shape[1:])


def _linear(args: tuple, kwargs: dict, out: torch.Tensor) -> int:
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    return out.numel() * weight.shape[-1]


def _matmul(args: tuple, kwargs: dict, out: torch.Tensor) -> int:
    a = args[0] if args else kwargs["input"]
    return out.numel() * a.shape[-1]


def _sdpa(args: tuple, kwargs: dict, out: torch.Tensor) -> int:
    q = args[0] if args else kwargs["query"]
    k = args[1] if len(args) > 1 else kwargs["key"]
    # scores (L x S x E) and weights times values (L x S x Ev) for every batch and head
    return prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + out.shape[-1])


_Rule = Callable[[tuple, dict, torch.Tensor], int]
_RULES: dict[Callable, _Rule] = {
    F.conv1d: _conv,
    F.conv2d: _conv,
    F.conv3d: _conv,
    F.linear: _linear,
    torch.matmul: _matmul,
    torch.Tensor.matmul: _matmul,
    torch.Tensor.__matmul__: _matmul,
    torch.bmm: _matmul,
    torch.Tensor.bmm: _matmul,
    torch.mm: _matmul,
    torch.Tensor.mm: _matmul,
    torch.baddbmm: lambda args, kwargs, out: out.numel() * args[1].shape[-1],
    F.scaled_dot_product_attention: _sdpa,
}


class MacCounter(TorchFunctionMode):
    """``with MacCounter() as c: model(x)``; then ``c.macs``. A call inside a counted call (a
    matmul inside an attention call) is not counted twice: the mode is off while a call runs."""

    def __init__(self) -> None:
        super().__init__()
        self.macs = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rule = _RULES.get(func)
        if rule is not None and isinstance(out, torch.Tensor):
            self.macs += rule(args, kwargs, out)
        return out


@torch.no_grad()
def count_forward_macs(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Multiply-accumulates of ``model(x)`` in eval mode (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        with MacCounter() as counter:
            model(x)
    finally:
        model.train(was_training)
    return counter.macs
