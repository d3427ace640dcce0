"""What the perceptual fine-tune adds to the pixel loss: a small U-Net discriminator and its losses.

Real texture instead of the waxy average an L1/MSE model settles on comes from an adversarial term
(a discriminator that judges every pixel, as Real-ESRGAN's U-Net with spectral norm does). Around it
three terms keep the generator honest, all computable here without a downloaded VGG:

- feature matching: L1 between the discriminator's inner features of the output and of HR, a
  perceptual distance in a feature space the discriminator learns on these photos;
- a frequency term: L1 between the 2-D spectra, so fine detail counts as much as flat area;
- artefact weighting after LDL (Liang et al., CVPR 2022): where the output's residual is locally
  noisy *and* worse than the EMA model's, its pixel loss is weighted up, so invented texture on
  smooth regions is pulled back to the target (LDL's weights, scaled to mean 1 over the batch).

Two terms aimed at what a GAN paints on HR's smooth areas follow: the grid-locked dot lattice
(:func:`phase_loss`) and invented texture or noise (:func:`flat_loss`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm


class UNetDiscriminator(nn.Module):
    """Per-pixel real/fake logits for an RGB image: three stride-2 steps down, three up with skips.

    ``width`` channels at full resolution, doubling at each step down (16 -> 32 -> 64 -> 128). Every
    conv after the first is spectral-normalised (a Lipschitz bound that keeps the adversarial game
    stable without a gradient penalty). ``forward`` returns the logits (N, 1, H, W) and the decoder's
    features, for feature matching.
    """

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        c = width
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.down = nn.ModuleList(
            spectral_norm(nn.Conv2d(c * 2**i, c * 2 ** (i + 1), 4, stride=2, padding=1, bias=False))
            for i in range(3)
        )
        self.up = nn.ModuleList(
            spectral_norm(nn.Conv2d(c * 2 ** (i + 1), c * 2**i, 3, padding=1, bias=False))
            for i in reversed(range(3))
        )
        self.refine = nn.Sequential(
            spectral_norm(nn.Conv2d(c, c, 3, padding=1, bias=False)), nn.LeakyReLU(0.2, inplace=True),
            spectral_norm(nn.Conv2d(c, c, 3, padding=1, bias=False)), nn.LeakyReLU(0.2, inplace=True),
        )
        self.head = nn.Conv2d(c, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # x: (N, 3, H, W), H and W multiples of 8
        if x.shape[-1] % 8 or x.shape[-2] % 8:
            raise ValueError(f"the discriminator needs sides that are multiples of 8, got "
                             f"{tuple(x.shape[-2:])}")
        h = F.leaky_relu(self.stem(x), 0.2)  # (N, c, H, W)
        skips = [h]
        for conv in self.down:
            h = F.leaky_relu(conv(h), 0.2)  # (N, 2c, H/2, W/2) ... (N, 8c, H/8, W/8)
            skips.append(h)
        skips.pop()  # the bottom is h itself
        feats = []
        for conv in self.up:
            h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            h = F.leaky_relu(conv(h), 0.2) + skips.pop()  # (N, 4c, H/4, W/4) ... (N, c, H, W)
            feats.append(h)
        h = self.refine(h)
        feats.append(h)
        return self.head(h), feats  # (N, 1, H, W)


def adversarial_loss(logits: torch.Tensor, real: bool) -> torch.Tensor:
    """Non-saturating binary cross-entropy on per-pixel logits, toward 'real' or 'fake'."""
    target = torch.ones_like(logits) if real else torch.zeros_like(logits)
    return F.binary_cross_entropy_with_logits(logits.float(), target)


def feature_matching_loss(fake: list[torch.Tensor], real: list[torch.Tensor]) -> torch.Tensor:
    """Mean L1 between the discriminator's features of the output and of HR (HR's held fixed)."""
    return sum(F.l1_loss(f.float(), r.detach().float()) for f, r in zip(fake, real, strict=True)) / len(fake)


def frequency_loss(out: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
    """L1 between the orthonormal 2-D spectra of output and HR (complex difference magnitude)."""
    diff = torch.fft.rfft2(out.float(), norm="ortho") - torch.fft.rfft2(hr.float(), norm="ortho")
    return diff.abs().mean()


def _box_mean(x: torch.Tensor, size: int) -> torch.Tensor:
    # x: (N, 1, H, W) -> the mean of each size x size window (reflect-padded), same shape
    pad = size // 2
    return F.avg_pool2d(F.pad(x, (pad, pad, pad, pad), mode="reflect"), size, stride=1)


def _local_variance(x: torch.Tensor, size: int = 7) -> torch.Tensor:
    # x: (N, 1, H, W) -> the variance in each size x size window (reflect-padded), same shape
    mean = _box_mean(x, size)
    return (_box_mean(x * x, size) - mean * mean).clamp_min(0)


def artefact_map(out: torch.Tensor, ema_out: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
    """LDL's artefact weight per pixel (N, 1, H, W), held fixed (no gradient).

    The residual |HR - out| (mean over RGB) has a local variance (7 x 7) that is high where texture
    was invented or broken, and a patch variance that scales it (to the power 1/5, LDL's choice) so
    flat patches with a lone wrong pixel do not dominate. Only pixels where the training model's
    residual is larger than the EMA model's keep their weight: those are the unstable ones.
    """
    with torch.no_grad():
        residual = (hr - out).abs().float().mean(1, keepdim=True)  # (N, 1, H, W)
        ema_residual = (hr - ema_out).abs().float().mean(1, keepdim=True)
        patch_var = residual.flatten(1).var(1).clamp_min(0).pow(0.2).view(-1, 1, 1, 1)  # (N, 1, 1, 1)
        weight = _local_variance(residual) * patch_var
        weight = torch.where(residual > ema_residual, weight, torch.zeros_like(weight))
        # LDL's raw weights are ~1e-5, too small to move anything beside an L1 of mean weight 1: scaled
        # to mean 1 over the batch (at most 10 per pixel), the term compares with the pixel loss
        return (weight / weight.mean().clamp_min(1e-12)).clamp_max(10.0)


def artefact_loss(out: torch.Tensor, hr: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """L1 between output and HR, weighted per pixel by :func:`artefact_map`."""
    return (weight * (out.float() - hr).abs()).mean()


# The grid-locked pattern term. A GAN fine-tune learns to stamp a faint per-LR-pixel pattern through
# the sub-pixel upsampler (every output phase (row mod s, column mod s) gets its own small offset),
# which the discriminator does not punish and which shows as a dot lattice on smooth areas. The term
# pulls each image's per-phase mean of its luminance high-pass, over HR's smooth pixels, toward HR's
# (the lattice measure of sr.evaluation.perceptual, made differentiable). Per image, not pooled over
# the batch: the pattern depends on the content (brightness, colour), and patterns of opposite sign
# in two images cancel in a pooled mean while both show.
PHASE_SIGMA = 2.0
PHASE_WINDOW = 7
PHASE_SMOOTH_STD = 4.0 / 255.0  # grey levels in [0, 1] units
PHASE_MIN_PIXELS = 8  # smooth pixels a phase needs in an image for that image to count


def _gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    # x: (N, 1, H, W) -> the same, blurred separably with a Gaussian of ``sigma`` (reflect-padded)
    radius = int(3 * sigma + 0.5)
    t = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-0.5 * (t / sigma) ** 2)
    kernel = kernel / kernel.sum()
    x = F.pad(x, (radius, radius, radius, radius), mode="reflect")
    x = F.conv2d(x, kernel.view(1, 1, 1, -1))
    return F.conv2d(x, kernel.view(1, 1, -1, 1))


def _luma(x: torch.Tensor) -> torch.Tensor:
    # x: (N, 3, H, W) RGB in [0, 1] -> (N, 1, H, W) Y in [0, 1] units (BT.601 weights, as PSNR's Y)
    weights = x.new_tensor([65.481, 128.553, 24.966]).view(1, 3, 1, 1) / 255.0
    return (x * weights).sum(1, keepdim=True)


def _high_pass(y: torch.Tensor) -> torch.Tensor:
    # y: (N, 1, H, W) -> y less its Gaussian blur of sigma PHASE_SIGMA (the lattice measure's high-pass)
    return y - _gaussian_blur(y, PHASE_SIGMA)


def smooth_mask(hr_y: torch.Tensor) -> torch.Tensor:
    """HR's smooth pixels (N, 1, H, W) bool: the local standard deviation of its luminance ``hr_y``
    (N, 1, H, W) in [0, 1] over PHASE_WINDOW x PHASE_WINDOW under PHASE_SMOOTH_STD (the lattice measure's
    sky, wall or skin)."""
    return _local_variance(hr_y, PHASE_WINDOW).sqrt() < PHASE_SMOOTH_STD


def phase_means(
    out: torch.Tensor, hr: torch.Tensor, scale: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-image, per-phase means (N, scale, scale) of the luminance high-pass of ``out`` and ``hr``, in
    grey levels, over HR's smooth pixels, each less its mean over the phases; and (N,) which images
    have enough smooth pixels on every phase to count.

    ``out`` and ``hr``: (N, 3, H, W) in [0, 1], H and W multiples of ``scale``, top-left pixel at
    phase (0, 0) of the LR grid (a training patch is).
    """
    out_y, hr_y = _luma(out.float()), _luma(hr.float())
    with torch.no_grad():
        smooth = smooth_mask(hr_y).to(out_y.dtype)
        n, _, h, w = smooth.shape
        weight = smooth.view(n, h // scale, scale, w // scale, scale).sum((1, 3))  # (N, s, s)
        counted = (weight >= PHASE_MIN_PIXELS).flatten(1).all(1)  # (N,)
    result = []
    for y in (out_y, hr_y):
        hp = _high_pass(y) * smooth  # (N, 1, H, W)
        total = hp.view(n, h // scale, scale, w // scale, scale).sum((1, 3))  # (N, s, s)
        mean = total / weight.clamp_min(1.0) * 255.0
        result.append(mean - mean.mean((1, 2), keepdim=True))
    return result[0], result[1], counted


def phase_loss(out: torch.Tensor, hr: torch.Tensor, scale: int) -> torch.Tensor:
    """L1, in grey levels, between the output's and HR's per-phase high-pass means
    (:func:`phase_means`), over the images with enough smooth area (0 when none has)."""
    if scale < 2:
        return out.new_zeros((), dtype=torch.float32)
    fake, real, counted = phase_means(out, hr, scale)
    if not counted.any():
        return (fake * 0).sum()  # keeps the graph; no image to score
    return (fake - real).abs()[counted].mean()


# The invented-texture term. On heavily compressed input a GAN fine-tune paints noise on areas HR has
# flat (research.perceptual_photo's "flat" ratio of local standard deviations rises well above 1).
# On HR's smooth pixels the term compares the local energy of the luminance high-pass (its RMS over a
# PHASE_WINDOW box, in grey levels) of output and HR and charges only the excess: energies, not the
# pixels themselves, so the output may carry HR's own faint grain without drawing the same grains
# (the pixel loss already pulls toward those), and one-sided, so an output smoother than HR costs
# nothing here. Per image, as the phase term: an image's value is its mean over its own smooth
# pixels, and images with too little smooth area are left out rather than counted as 0.
FLAT_MIN_PIXELS = 64  # smooth pixels an image needs to count: fewer are a textured area's fringes
_FLAT_EPS = 1e-4  # grey levels^2 under the root: a finite gradient where the high-pass is exactly 0


def flat_energy(out: torch.Tensor, hr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The local high-pass RMS, in grey levels, of ``out``'s and ``hr``'s luminance (each (N, 1, H, W))
    and HR's smooth pixels (N, 1, H, W) bool; ``out`` and ``hr``: (N, 3, H, W) in [0, 1]. Computed in
    fp32 with autocast off, so a bf16 output under autocast is scored as precisely as an fp32 one."""
    with torch.autocast(out.device.type, enabled=False):
        out_y = _luma(out.float())
        with torch.no_grad():
            hr_y = _luma(hr.float())
            smooth = smooth_mask(hr_y)
        energies = []
        for y in (out_y, hr_y):
            hp = _high_pass(y) * 255.0  # (N, 1, H, W) grey levels
            energies.append((_box_mean(hp * hp, PHASE_WINDOW) + _FLAT_EPS).sqrt())
    return energies[0], energies[1].detach(), smooth


def flat_loss(out: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
    """Invented texture on HR's smooth areas, in grey levels (fp32 scalar): per image, the mean over
    HR's smooth pixels of relu(E(out) - E(HR)), E the local high-pass RMS of :func:`flat_energy`; then
    the mean over the images with at least FLAT_MIN_PIXELS smooth pixels (0 when none has)."""
    fake, real, smooth = flat_energy(out, hr)
    excess = (fake - real).clamp_min(0) * smooth  # (N, 1, H, W)
    count = smooth.flatten(1).sum(1)  # (N,)
    counted = count >= FLAT_MIN_PIXELS
    if not counted.any():
        return (excess * 0).sum()  # keeps the graph; no image to score
    per_image = excess.flatten(1).sum(1) / count.clamp_min(1)  # (N,)
    return per_image[counted].mean()
