"""The perceptual fine-tune: the U-Net discriminator's shapes, its losses, and a GAN training run."""

from __future__ import annotations

import json

import pytest
import torch

from sr.train.adversarial import (
    UNetDiscriminator,
    adversarial_loss,
    artefact_loss,
    artefact_map,
    feature_matching_loss,
    frequency_loss,
    phase_loss,
    phase_means,
)
from sr.train.loop import Trainer
from tests.train.runs import export_checkpoint, read_log, tiny_config


def test_discriminator_judges_every_pixel_and_returns_its_decoder_features():
    disc = UNetDiscriminator(width=8)
    logits, feats = disc(torch.rand(2, 3, 32, 40))
    assert logits.shape == (2, 1, 32, 40)
    assert [f.shape[1:] for f in feats] == [(32, 8, 10), (16, 16, 20), (8, 32, 40), (8, 32, 40)]
    with pytest.raises(ValueError, match="multiples of 8"):
        disc(torch.rand(1, 3, 30, 32))


def test_spectral_norm_bounds_the_discriminator_convs():
    disc = UNetDiscriminator(width=8)
    for _ in range(20):  # power iterations converge in training mode
        disc(torch.rand(1, 3, 16, 16))
    conv = disc.down[1]
    sigma = torch.linalg.matrix_norm(conv.weight.detach().flatten(1), ord=2)
    assert float(sigma) == pytest.approx(1.0, rel=0.1)


def test_losses_are_zero_for_a_perfect_output_and_grow_with_error():
    hr = torch.rand(2, 3, 16, 16)
    assert frequency_loss(hr, hr) == 0
    noisy, slightly = hr + 0.1 * torch.randn_like(hr), hr + 0.01 * torch.randn_like(hr)
    assert frequency_loss(noisy, hr) > frequency_loss(slightly, hr)
    feats = [torch.rand(2, 4, 8, 8), torch.rand(2, 4, 16, 16)]
    assert feature_matching_loss(feats, feats) == 0
    logits = torch.full((1, 1, 4, 4), 5.0)
    assert adversarial_loss(logits, real=True) < 0.01 < adversarial_loss(logits, real=False)


def test_artefact_map_weights_only_pixels_worse_than_the_ema_where_the_residual_is_noisy():
    torch.manual_seed(0)
    hr = torch.full((1, 3, 32, 32), 0.5)  # a flat patch
    ema_out = hr.clone()
    out = hr.clone()
    out[..., 8:16, 8:16] += 0.2 * torch.randn(1, 3, 8, 8)  # invented texture in one corner only
    weight = artefact_map(out, ema_out, hr)
    assert weight.shape == (1, 1, 32, 32)
    assert weight[..., 8:16, 8:16].mean() > 0.5 and weight[..., 24:, 24:].sum() == 0
    assert weight.max() <= 10 and 0.1 < weight.mean() <= 1 + 1e-6  # mean 1 before the cap of 10
    assert artefact_map(out, out, hr).sum() == 0  # no worse than the EMA: nothing to pull back
    assert artefact_loss(out, hr, weight) > 0 and artefact_loss(hr, hr, weight) == 0


def test_gan_run_trains_the_discriminator_logs_its_terms_snapshots_and_resumes(tmp_path):
    cfg = tiny_config(tmp_path, steps=6, val=[], gan_weight=0.1, frequency_weight=0.05, disc_width=8,
               log_every=3, snapshot_every=3, ckpt_every=3, phase_weight=0.5)
    trainer = Trainer(cfg)
    disc = trainer.learner.gan.disc
    disc_before = {k: v.clone() for k, v in disc.state_dict().items()}
    trainer.fit(stop_at=3)
    assert any(not torch.equal(disc_before[k], v) for k, v in disc.state_dict().items())
    rec = next(r for r in read_log(cfg.run_dir) if "loss" in r)
    assert {"gan", "feature", "artefact", "phase", "disc"} <= set(rec)
    resumed = Trainer(tiny_config(tmp_path, steps=6, val=[], gan_weight=0.1, frequency_weight=0.05,
                                  disc_width=8, log_every=3, snapshot_every=3, ckpt_every=3), resume=True)
    for k, v in disc.state_dict().items():  # the discriminator comes back with the run
        torch.testing.assert_close(resumed.learner.gan.disc.state_dict()[k], v)
    resumed.fit()
    snaps = sorted(p.name for p in cfg.run_dir.glob("snap-*.pt"))
    assert snaps == ["snap-000003.pt", "snap-000006.pt"]
    out = tmp_path / "natural.safetensors"
    assert export_checkpoint(cfg.run_dir / "snap-000006.pt", out).returncode == 0
    assert json.loads((cfg.run_dir / "config.json").read_text())["gan_weight"] == 0.1


def test_gan_settings_are_checked_before_training(tmp_path):
    with pytest.raises(ValueError, match="multiple of 8"):
        Trainer(tiny_config(tmp_path, gan_weight=0.1, patch=15))
    with pytest.raises(ValueError, match=">= 0"):
        Trainer(tiny_config(tmp_path / "b", gan_weight=-1))
    with pytest.raises(ValueError, match="--phase-weight"):
        Trainer(tiny_config(tmp_path / "c", phase_weight=-0.1))
    with pytest.raises(ValueError, match="--crop-start 'middle' is not one of: lr, any"):
        Trainer(tiny_config(tmp_path / "d", crop_start="middle"))


def test_pixel_only_training_has_no_discriminator(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, steps=1, val=[]))
    assert trainer.learner.gan is None
    trainer.fit()
    assert not {"disc", "disc_opt"} & set(torch.load(trainer.run_dir / "last.pt", weights_only=False))


def _smooth_batch(n: int, side: int) -> torch.Tensor:
    # (n, 3, side, side) smooth gradients in [0.2, 0.8]: every pixel is "smooth" (local std << 4/255)
    ramp = torch.linspace(0.2, 0.8, side)
    img = (ramp[None, :] * 0.5 + ramp[:, None] * 0.5).expand(3, side, side)
    return torch.stack([img * (0.9 + 0.05 * i) for i in range(n)])


def test_phase_loss_measures_a_grid_locked_pattern_and_nothing_else():
    hr = _smooth_batch(2, 48)
    g = torch.Generator().manual_seed(0)
    # a per-output-phase bias of +-2 grey levels, repeated on the LR grid (the dot lattice)
    pattern = (torch.randint(0, 2, (4, 4), generator=g).float() * 2 - 1) * 2 / 255
    stamped = hr + pattern.repeat(12, 12)[None, None]
    assert phase_loss(hr, hr, 4).item() == 0
    assert phase_loss(stamped, hr, 4).item() > 0.5  # grey levels: a 2-level stamp survives the high-pass
    fake, real, counted = phase_means(stamped, hr, 4)
    assert fake.shape == (2, 4, 4) and counted.tolist() == [True, True]
    assert fake.mean((1, 2)).abs().max().item() < 1e-4
    # per image: opposite stamps on two images do not cancel
    both = torch.cat([hr[:1] + pattern.repeat(12, 12), hr[1:] - pattern.repeat(12, 12)])
    assert phase_loss(both, hr, 4).item() == pytest.approx(phase_loss(stamped, hr, 4).item(), rel=1e-3)
    # the same stamp at a period the scale does not lock to averages out: no phase bias at period 4
    off_grid = hr + (torch.arange(48) % 3 == 0).float()[None, None, None, :] * 2 / 255
    assert phase_loss(off_grid, hr, 4).item() < 0.25 * phase_loss(stamped, hr, 4).item()
    # random noise of the same amplitude (no lock to the grid) scores far below the stamp
    noisy = hr + torch.randn(hr.shape, generator=g) * 2 / 255
    assert phase_loss(noisy, hr, 4).item() < 0.25 * phase_loss(stamped, hr, 4).item()
    assert phase_loss(stamped, hr, 1).item() == 0  # no sub-pixel grid at x1


def test_phase_loss_ignores_texture_and_its_gradient_removes_the_pattern():
    g = torch.Generator().manual_seed(1)
    textured = torch.rand(1, 3, 32, 32, generator=g)  # no smooth pixel: nothing to score
    assert phase_loss(textured + 0.01, textured, 2).item() == 0
    hr = _smooth_batch(1, 32)
    pattern = torch.tensor([[1.0, -1.0], [-1.0, 1.0]]) * 3 / 255
    out = (hr + pattern.repeat(16, 16)).requires_grad_(True)
    before = phase_loss(out, hr, 2).item()
    opt = torch.optim.SGD([out], lr=2e-4)
    for _ in range(50):
        opt.zero_grad()
        phase_loss(out, hr, 2).backward()
        opt.step()
    assert phase_loss(out, hr, 2).item() < 0.2 * before
