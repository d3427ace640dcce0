"""``--precision auto|fp32|bf16``: the one definition ``sr upscale``, ``sr serve`` and ``sr eval`` share."""

from __future__ import annotations

import argparse

from ..request import PRECISIONS

PRECISION_HELP = ("the network's number type: auto (CPU: bf16 where it was measured faster on this kind "
                  "of CPU, AMX or AVX512_BF16, and the model's measured bf16 cost is within 0.01 dB, "
                  "else fp32; sr info says which; GPU: bf16/fp16), fp32 or bf16")


def add_precision_argument(p: argparse.ArgumentParser, default: str | None = "auto", note: str = "") -> None:
    """Add ``--precision``; a bad value exits 2 with the choices (argparse)."""
    default_text = f"; default {default}" if default is not None else ""
    p.add_argument("--precision", default=default, type=str.lower, choices=PRECISIONS,
                   help=f"{PRECISION_HELP}{note}{default_text}")
