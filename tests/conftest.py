"""Tiny weights for the engine and batch tests: made here, saved to tmp folders, passed by path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sr.models import NetConfig, SRNet
from sr.models.registry import ASA
from sr.weights import save_weights


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked cpu_bf16 skip, saying why, on CPUs where torch has no bf16 convolutions."""
    from sr.cpu import cpu_runs_bf16

    if cpu_runs_bf16():
        return
    skip = pytest.mark.skip(reason="this CPU cannot run bf16 convolutions (oneDNN needs AVX-512 or "
                                   "AVX-NE-CONVERT; AVX2-only here)")
    for item in items:
        if "cpu_bf16" in item.keywords:
            item.add_marker(skip)


def tiny_net(scale: int = 2, seed: int = 0, channels: int = 8) -> SRNet:
    """An adaptive-attention SRNet small enough to run 2048x2048 on one CPU thread in seconds."""
    torch.manual_seed(seed)
    cfg = NetConfig(scale=scale, channels=channels, blocks=2, attn_every=2, heads=2, attention="adaptive",
                    attn_options=dict(ASA))
    return SRNet(cfg).eval()


@pytest.fixture(scope="session")
def make_tiny_net():
    """tiny_net itself, for test modules that save their own families of tiny weights."""
    return tiny_net


@pytest.fixture(scope="session")
def weights_dir(tmp_path_factory) -> Path:
    """A folder holding the family 'tiny' at x2, x3 and x4."""
    folder = tmp_path_factory.mktemp("weights")
    for s in (2, 3, 4):
        scores = '{"Set5": {"psnr": 30.5, "ssim": 0.9}, "Set14": {"psnr": 28.25, "ssim": 0.8}}'
        save_weights(tiny_net(s, seed=s), folder / f"tiny-x{s}.safetensors", preset="tiny", validation=scores)
    return folder


@pytest.fixture(scope="session")
def tiny_x2(weights_dir) -> Path:
    return weights_dir / "tiny-x2.safetensors"
