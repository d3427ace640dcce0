"""The invented-texture term (``sr train --flat-weight``): what it charges, what it leaves alone, and
a training run that logs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sr.cli import main
from sr.train.adversarial import flat_loss
from sr.train.loop import Trainer
from tests.train.runs import read_log, tiny_config

SIDE = 48


def _flat(n: int = 1) -> torch.Tensor:
    # (n, 3, SIDE, SIDE) gentle gradients in [0.3, 0.7]: every pixel is smooth (local std << 4 levels)
    ramp = torch.linspace(0.3, 0.7, SIDE)
    img = (ramp[None, :] * 0.5 + ramp[:, None] * 0.5).expand(3, SIDE, SIDE)
    return torch.stack([img * (0.9 + 0.1 * i) for i in range(n)])


def _noise(seed: int, levels: float, n: int = 1) -> torch.Tensor:
    # (n, 1, SIDE, SIDE) grey noise of ``levels`` grey levels standard deviation, the same in R, G, B
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, SIDE, SIDE, generator=g) * levels / 255


def _half_textured() -> tuple[torch.Tensor, torch.Tensor]:
    # a flat left half, a strongly textured right half; and the right half's mask (1, 1, SIDE, SIDE)
    g = torch.Generator().manual_seed(7)
    hr = _flat()
    hr[..., SIDE // 2:] += torch.rand(1, 1, SIDE, SIDE // 2, generator=g) * 0.4 - 0.2
    right = torch.zeros(1, 1, SIDE, SIDE)
    right[..., SIDE // 2:] = 1
    return hr, right


def test_flat_loss_is_zero_for_hr_itself_and_grows_with_noise_on_flat_areas():
    hr = _flat(2)
    assert flat_loss(hr, hr).item() == 0
    values = [flat_loss(hr + _noise(0, levels, 2), hr).item() for levels in (1, 2, 4, 8)]
    assert values[0] > 0.3  # grey levels: one level of noise is charged
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    assert values[-1] > 4 * values[0]


def test_flat_loss_leaves_texture_alone():
    hr, right = _half_textured()
    noise = _noise(1, 6)
    on_flat = flat_loss(hr + noise * (1 - right), hr).item()
    on_texture = flat_loss(hr + noise * right, hr).item()
    assert on_flat > 2 and on_texture < 0.01 * on_flat
    # HR's own faint grain, drawn again, is not invented texture: energies are compared, not pixels
    grain, other = _noise(2, 1.5), _noise(3, 1.5)
    redrawn = flat_loss(_flat() + other, _flat() + grain).item()
    assert redrawn < 0.1 * flat_loss(_flat() + 3 * grain, _flat() + grain).item()
    # smoother than HR costs nothing here (the pixel loss sees to that)
    assert flat_loss(_flat(), _flat() + grain).item() == 0


def test_flat_loss_is_per_image():
    g = torch.Generator().manual_seed(4)
    textured = torch.rand(1, 3, SIDE, SIDE, generator=g)  # no smooth pixel: nothing to score
    assert flat_loss(textured + _noise(5, 6), textured).item() == 0
    flat = _flat()
    noisy = flat + _noise(6, 4)
    alone = flat_loss(noisy, flat).item()
    mixed = flat_loss(torch.cat([noisy, textured + _noise(5, 6)]), torch.cat([flat, textured])).item()
    assert mixed == pytest.approx(alone, rel=1e-5)  # not halved by the image that has no flat area


def test_flat_loss_gradient_reaches_the_output_and_removes_the_noise():
    hr = _flat()
    out = (hr + _noise(8, 4)).requires_grad_(True)
    before = flat_loss(out, hr)
    before.backward()
    assert out.grad is not None and out.grad.abs().sum() > 0 and torch.isfinite(out.grad).all()
    opt = torch.optim.SGD([out], lr=1e-2)
    for _ in range(30):
        opt.zero_grad()
        flat_loss(out, hr).backward()
        opt.step()
    assert flat_loss(out, hr).item() < 0.5 * before.item()


def test_flat_loss_is_fp32_and_finite_under_bf16_autocast():
    hr = _flat(2)
    conv = torch.nn.Conv2d(3, 3, 1)
    with torch.no_grad():
        conv.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
        conv.bias.zero_()
    noisy = hr + _noise(9, 4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(noisy)  # (2, 3, SIDE, SIDE) bf16
        assert out.dtype == torch.bfloat16
        value = flat_loss(out, hr)
    assert value.dtype == torch.float32 and torch.isfinite(value)
    value.backward()
    assert torch.isfinite(conv.weight.grad).all()
    assert value.item() == pytest.approx(flat_loss(out.float(), hr).item(), rel=1e-5)
    assert value.item() == pytest.approx(flat_loss(noisy, hr).item(), rel=0.1)  # bf16 rounding only


def test_a_negative_flat_weight_is_refused_in_one_line(tmp_path, capsys):
    code = main(["train", "--flat-weight", "-1", "--out", str(tmp_path), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "sr train: error: --flat-weight must be >= 0, got -1.0\n"
    assert not any(tmp_path.iterdir())  # nothing written


def _half_flat_photos(folder: Path, n: int = 4, size: int = 72) -> Path:
    # PNGs with a gentle gradient on the left half and coarse noise on the right: smooth area to score
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(n):
        ramp = np.linspace(60 + 30 * i, 120 + 30 * i, size)
        img = np.repeat(((ramp[None, :] + ramp[:, None]) / 2)[:, :, None], 3, axis=2)
        img[:, size // 2:] += rng.uniform(-40, 40, (size, size - size // 2, 3))
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(folder / f"f{i}.png")
    return folder


def test_a_gan_run_with_the_flat_term_logs_it(tmp_path):
    data = _half_flat_photos(tmp_path / "flat")
    cfg = tiny_config(tmp_path, train=[str(data)], steps=2, val=[], log_every=1, ckpt_every=2,
                      gan_weight=0.1, disc_width=8, flat_weight=1.0)
    Trainer(cfg).fit()
    records = [r for r in read_log(cfg.run_dir) if "loss" in r]
    assert len(records) == 2
    for rec in records:
        assert {"gan", "feature", "artefact", "flat", "disc"} <= set(rec) and "phase" not in rec
        assert rec["flat"] > 0  # a fresh model's output is not as flat as HR's gradients
