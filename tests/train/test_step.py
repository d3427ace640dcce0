"""Learner.train_step: the one training step, used by the loop and by ``sr bench train``."""

from __future__ import annotations

import io

import pytest
import torch

from sr.train import TrainConfig
from sr.train.learner import Learner
from sr.train.loop import Trainer


def _cfg(**kw) -> TrainConfig:
    base = dict(preset="asa-small", scale=2, lr=1e-3, seed=0, amp="off", device="cpu")
    return TrainConfig(**{**base, **kw})


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    hr = torch.rand(2, 3, 24, 24, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.avg_pool2d(hr, 2), hr


def test_a_learner_builds_model_ema_and_optimiser_without_data(tmp_path) -> None:
    t = Learner(_cfg(out=str(tmp_path / "never")), torch.device("cpu"))
    assert t.step == 0 and t.model.training and not t.ema.training
    assert t.model.head.weight.is_contiguous(memory_format=torch.channels_last)  # the trainer's layout
    ema_before = [p.clone() for p in t.ema.parameters()]
    weights_before = t.model.head.weight.detach().clone()
    pixel, aux = t.train_step(*_batch())
    assert pixel.ndim == 0 and not pixel.requires_grad and pixel.item() > 0
    assert aux["budget_maps"] and "budget_loss" in aux  # asa-small has adaptive attention
    assert t.step == 1 and not torch.equal(t.model.head.weight, weights_before)
    assert any(not torch.equal(a, b) for a, b in zip(ema_before, t.ema.parameters(), strict=True))
    assert not (tmp_path / "never").exists()  # no run folder


def test_same_seed_same_steps() -> None:
    a, b = (Learner(_cfg(), torch.device("cpu")) for _ in range(2))
    for seed in range(2):
        la, _ = a.train_step(*_batch(seed))
        lb, _ = b.train_step(*_batch(seed))
        assert torch.equal(la, lb)
    assert all(torch.equal(p, q) for p, q in zip(a.ema.parameters(), b.ema.parameters(), strict=True))


def test_the_loop_trains_through_train_step(tmp_path, monkeypatch) -> None:
    import numpy as np
    from PIL import Image

    data = tmp_path / "train"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(data / f"{i}.png")
    calls = []
    real = Learner.train_step

    def counting(self, lr, hr):
        calls.append(tuple(lr.shape))
        return real(self, lr, hr)

    monkeypatch.setattr(Learner, "train_step", counting)
    cfg = _cfg(train=[str(data)], patch=8, batch=2, steps=3, warmup=1, out=str(tmp_path / "runs"),
               cache=str(tmp_path / "cache"), threads=1, log_every=1, ckpt_every=100)
    Trainer(cfg).fit()
    assert calls == [(2, 3, 8, 8)] * 3


@pytest.mark.parametrize("gan", [False, True], ids=["pixel", "gan"])
def test_a_learner_loaded_from_another_s_state_steps_on_exactly_as_it(gan) -> None:
    extra = dict(gan_weight=0.1, phase_weight=0.5, disc_width=8) if gan else {}
    a = Learner(_cfg(**extra), torch.device("cpu"))
    _, aux = a.train_step(*_batch(0))
    assert ({"gan", "feature", "artefact", "disc"} <= set(aux)) is gan
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)  # as a checkpoint holds it: no tensor shared with ``a``
    saved.seek(0)
    state = torch.load(saved, weights_only=False)
    assert state["step"] == 1 and ({"disc", "disc_opt"} <= set(state)) is gan
    b = Learner(_cfg(seed=1, **extra), torch.device("cpu"))  # other weights, until loaded
    b.load_state_dict(state)
    assert b.step == 1
    la, aux_a = a.train_step(*_batch(1))
    lb, aux_b = b.train_step(*_batch(1))
    assert torch.equal(la, lb)
    assert all(torch.equal(aux_a[k], aux_b[k]) for k in ("gan", "disc") if gan)
    for x, y in zip(a.state_dict()["ema"].values(), b.state_dict()["ema"].values(), strict=True):
        assert torch.equal(x, y)
