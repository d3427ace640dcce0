"""The perceptual fine-tune's part of a training step: the discriminator, its optimiser, its terms.

With ``gan_weight`` > 0 the :class:`~sr.train.learner.Learner` holds an :class:`Adversary`: it adds
the adversarial, feature-matching and LDL artefact terms to the generator's loss, then takes the
discriminator's own AdamW step on the same batch. The losses themselves are
:mod:`sr.train.adversarial`'s.
"""

from __future__ import annotations

import torch

from .adversarial import (
    UNetDiscriminator,
    adversarial_loss,
    artefact_loss,
    artefact_map,
    feature_matching_loss,
)
from .config import TrainConfig


class Adversary:
    """A U-Net discriminator (``disc``) with its AdamW optimiser, on ``device``."""

    def __init__(
        self, cfg: TrainConfig, device: torch.device, autocast: dict,
        memory_format: torch.memory_format = torch.channels_last,
    ) -> None:
        self.cfg, self.autocast = cfg, autocast
        self.disc = UNetDiscriminator(cfg.disc_width).to(device, memory_format=memory_format)
        self.opt = torch.optim.AdamW(self.disc.parameters(), lr=cfg.disc_lr, betas=(0.9, 0.99),
                                     weight_decay=0.0)

    def generator_terms(
        self, lr: torch.Tensor, out: torch.Tensor, hr: torch.Tensor, ema: torch.nn.Module, aux: dict
    ) -> torch.Tensor:
        """The generator's GAN loss on output ``out`` of ``lr``: adversarial + feature matching + LDL
        artefacts (against the ``ema`` model's output), weighted.

        The discriminator is frozen for this backward (its own step follows); ``aux`` gets the terms'
        detached values for the log.
        """
        cfg = self.cfg
        self.disc.requires_grad_(False)
        with torch.autocast(**self.autocast):
            fake_logits, fake_feats = self.disc(out)  # (N, 1, H, W), decoder features
            with torch.no_grad():
                _, real_feats = self.disc(hr)
                ema_out = ema(lr)
        gan = adversarial_loss(fake_logits, real=True)
        feature = feature_matching_loss(fake_feats, real_feats)
        artefact = artefact_loss(out, hr, artefact_map(out.detach(), ema_out, hr))
        self.disc.requires_grad_(True)
        aux["gan"], aux["feature"], aux["artefact"] = gan.detach(), feature.detach(), artefact.detach()
        return cfg.gan_weight * gan + cfg.feature_weight * feature + cfg.artefact_weight * artefact

    def discriminator_step(self, fake: torch.Tensor, hr: torch.Tensor, aux: dict) -> None:
        """One AdamW step of the discriminator: HR toward real, the (detached) output toward fake."""
        with torch.autocast(**self.autocast):
            real_logits, _ = self.disc(hr)
            fake_logits, _ = self.disc(fake)
        loss = adversarial_loss(real_logits, real=True) + adversarial_loss(fake_logits, real=False)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        aux["disc"] = loss.detach()

    def state_dict(self) -> dict:
        """The checkpoint's ``disc`` and ``disc_opt`` entries."""
        return {"disc": self.disc.state_dict(), "disc_opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.disc.load_state_dict(state["disc"])
        self.opt.load_state_dict(state["disc_opt"])
