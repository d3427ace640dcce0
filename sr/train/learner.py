"""The network being trained, its EMA and optimiser, and the one training step they take.

:meth:`Learner.train_step` is the step of ``sr train``'s loop and of ``sr bench train``: forward
(collecting the budget loss), the generator loss (pixel + budget, and the frequency, phase, flat and
GAN terms when weighted), backward, clipping, AdamW, EMA. The perceptual fine-tune's discriminator is a
part it holds (:class:`sr.train.gan.Adversary`) when ``gan_weight`` > 0.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ..cpu import cpu_has_amx
from ..models import SRNet, build_config
from .adversarial import flat_loss, frequency_loss, phase_loss
from .config import AMP_CHOICES, TrainConfig
from .gan import Adversary

PIXEL_LOSSES = {"l1": F.l1_loss, "mse": F.mse_loss}  # keyed as LOSS_CHOICES (the flag's choices)


def use_bf16_autocast(amp: str, device: torch.device) -> bool:
    """``--amp``: 'bf16' / 'off' as given; 'auto' = bf16 where it was measured to pay: on CUDA, and on
    CPUs with AMX (1.55x the asa-base steps per second at equal PSNR on an AMX Xeon). Other CPUs stay
    fp32: on an AVX2 EPYC bf16 was far slower (8.7 s against 0.6 s a step), the rest is unmeasured."""
    if amp not in AMP_CHOICES:
        raise ValueError(f"--amp {amp!r} is not one of: {', '.join(AMP_CHOICES)}")
    if amp != "auto":
        return amp == "bf16"
    return device.type == "cuda" or (device.type == "cpu" and cpu_has_amx())


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    # one multi-tensor kernel per step on a GPU, not one small launch per parameter
    ema_params, params = list(ema.parameters()), [p.detach() for p in model.parameters()]
    if len(ema_params) != len(params):
        raise ValueError("EMA and model differ in their parameters")
    torch._foreach_lerp_(ema_params, params, 1 - decay)
    for e, b in zip(ema.buffers(), model.buffers(), strict=True):
        e.copy_(b)


class Learner:
    """Model, EMA, optimiser (and the discriminator part of a GAN run) on ``device``, and their step.

    Built from ``cfg`` after seeding torch with ``cfg.seed``, so equal configs start from equal
    weights. ``net`` is what the forward runs: the model, or the DDP wrapper the loop puts around it.
    """

    def __init__(
        self, cfg: TrainConfig, device: torch.device, memory_format: torch.memory_format = torch.channels_last
    ) -> None:
        torch.manual_seed(cfg.seed)
        self.cfg, self.device = cfg, torch.device(device)
        self.pixel_loss = PIXEL_LOSSES[cfg.loss]
        overrides = {"attention": cfg.attention} if cfg.attention else {}
        # Channels-last on every device: oneDNN's and cuDNN's native conv layout (on the AMX CPU, bf16:
        # 1.25x the steps/s alone, 1.56x with the written-out soft attention; `sr bench train --layouts`).
        self.model = SRNet(build_config(cfg.preset, cfg.scale, **overrides)).to(
            self.device, memory_format=memory_format
        )
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay
        )
        self.net: torch.nn.Module = self.model
        self.autocast = dict(device_type=self.device.type, dtype=torch.bfloat16,
                             enabled=use_bf16_autocast(cfg.amp, self.device))
        self.step = 0
        # built after the model: the discriminator's initial weights come next off the seeded RNG
        self.gan = Adversary(cfg, self.device, self.autocast, memory_format) if cfg.gan_weight > 0 else None

    def train_step(self, lr: torch.Tensor, hr: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """One optimiser step on a batch on the device: forward (collecting the budget loss), pixel
        + ``budget_weight`` x budget loss (+ the weighted frequency, phase, flat and GAN terms), backward,
        clipping, AdamW, the discriminator's own step in a GAN run, EMA; ``step`` counts it.

        Returns the pixel loss (detached, still on the device: reading it makes the host wait for
        the GPU) and the forward's aux dict (budget maps, the terms' detached values). The learning
        rate is the caller's to set.
        """
        cfg = self.cfg
        aux: dict = {}
        with torch.autocast(**self.autocast):
            out = self.net(lr, aux)  # lr: (N, 3, h, w) -> out: (N, 3, h*s, w*s)
        pixel = self.pixel_loss(out.float(), hr)
        loss = pixel + cfg.budget_weight * aux.get("budget_loss", 0.0)
        if cfg.frequency_weight > 0:
            loss = loss + cfg.frequency_weight * frequency_loss(out, hr)
        if cfg.phase_weight > 0:
            phase = phase_loss(out, hr, cfg.scale)
            aux["phase"] = phase.detach()
            loss = loss + cfg.phase_weight * phase
        if cfg.flat_weight > 0:
            flat = flat_loss(out, hr)
            aux["flat"] = flat.detach()
            loss = loss + cfg.flat_weight * flat
        if self.gan is not None:
            loss = loss + self.gan.generator_terms(lr, out, hr, self.ema, aux)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.opt.step()
        if self.gan is not None:
            self.gan.discriminator_step(out.detach(), hr, aux)
        self.step += 1
        ema_update(self.ema, self.model, min(cfg.ema_decay, (1 + self.step) / (10 + self.step)))
        return pixel.detach(), aux

    def state_dict(self) -> dict:
        """The checkpoint's share of the learner: weights, EMA, optimiser, step (and the discriminator's)."""
        return {
            "model": self.model.state_dict(), "ema": self.ema.state_dict(), "opt": self.opt.state_dict(),
            "step": self.step, **(self.gan.state_dict() if self.gan is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        """Back to a checkpoint's state; a pixel-loss checkpoint resumed as a GAN run starts D fresh."""
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.opt.load_state_dict(state["opt"])
        self.step = state["step"]
        if self.gan is not None and "disc" in state:
            self.gan.load_state_dict(state)
