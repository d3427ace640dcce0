"""Tiny random models of other architectures, built with spandrel's own classes and saved as community
files are (.pth state dicts, a BasicSR ``params_ema`` wrapper, .safetensors), for the tests of
:mod:`sr.external` and of every sr path that runs such a file.

Nothing here imports spandrel at import time: the safe-loading tests of ``sr.external.files`` run
without it; :func:`tiny_models` skips the calling test (saying why) where it is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch


@dataclass(frozen=True)
class Tiny:
    """One tiny model: how to build it and what spandrel must say of it."""

    key: str  # the test id and the file stem
    architecture: str  # spandrel's architecture id
    scale: int
    channels: int  # input channels spandrel states
    build: Callable[[], torch.nn.Module]
    # output layer -> (gain, added bias): keeps a random model's output mostly inside (0, 1), where
    # spandrel's clamp does not hide differences (default inits give SPAN +-40, ESRGAN +-0.1)
    tweak: tuple[tuple[str, float, float], ...] = ()


def tiny_models() -> dict[str, Tiny]:
    spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
    del spandrel
    from spandrel.architectures.Compact import Compact
    from spandrel.architectures.DnCNN import DnCNN
    from spandrel.architectures.ESRGAN import ESRGAN
    from spandrel.architectures.HAT import HAT
    from spandrel.architectures.NAFNet import NAFNet
    from spandrel.architectures.OmniSR import OmniSR
    from spandrel.architectures.PLKSR import PLKSR
    from spandrel.architectures.SAFMN import SAFMN
    from spandrel.architectures.SPAN import SPAN
    from spandrel.architectures.SwinIR import SwinIR

    models = [
        # RRDBNet as the original ESRGAN repository saves it (model.0 ... model.1.sub.N.RDB1...)
        Tiny("esrgan-x2", "ESRGAN", 2, 3, lambda: ESRGAN(num_filters=8, num_blocks=1, scale=2),
             (("model.7", 4, 0.5),)),
        Tiny("esrgan-x4", "ESRGAN", 4, 3, lambda: ESRGAN(num_filters=8, num_blocks=1, scale=4),
             (("model.10", 3, 0.5),)),
        Tiny("compact-x2", "Compact", 2, 3,
             lambda: Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=2)),
        Tiny("compact-x3", "Compact", 3, 3,
             lambda: Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=3)),
        Tiny("swinir-x2", "SwinIR", 2, 3,
             lambda: SwinIR(in_chans=3, embed_dim=12, depths=[1], num_heads=[2], window_size=4, upscale=2,
                            img_size=16, mlp_ratio=2.0, upsampler="pixelshuffledirect"),
             (("upsample.0", 0.6, 0.1),)),
        Tiny("hat-x2", "HAT", 2, 3,
             lambda: HAT(in_chans=3, embed_dim=12, depths=[1], num_heads=[2], window_size=4, upscale=2,
                         img_size=16, compress_ratio=3, squeeze_factor=3, mlp_ratio=2.0, num_feat=8)),
        Tiny("span-x2", "SPAN", 2, 3, lambda: SPAN(num_in_ch=3, num_out_ch=3, feature_channels=8, upscale=2),
             (("upsampler.0", 0.01, 0.5),)),
        Tiny("omnisr-x2", "OmniSR", 2, 3,
             lambda: OmniSR(num_feat=8, block_num=1, window_size=4, res_num=1, up_scale=2),
             (("up.0", 0.6, 0.4),)),
        # multiple_of 8: sizes that are not are padded by spandrel's call
        Tiny("safmn-x2", "SAFMN", 2, 3, lambda: SAFMN(dim=8, n_blocks=1, upscaling_factor=2),
             (("to_img.0", 0.3, 0.5),)),
        Tiny("plksr-x2", "PLKSR", 2, 3, lambda: PLKSR(dim=8, n_blocks=1, upscaling_factor=2, kernel_size=7)),
        # gray models: one channel in and out
        Tiny("esrgan-gray-x2", "ESRGAN", 2, 1,
             lambda: ESRGAN(in_nc=1, out_nc=1, num_filters=8, num_blocks=1, scale=2),
             (("model.7", 3, 0.3),)),
        # RGBA models: four channels in and out
        Tiny("esrgan-rgba-x2", "ESRGAN", 2, 4,
             lambda: ESRGAN(in_nc=4, out_nc=4, num_filters=8, num_blocks=1, scale=2),
             (("model.7", 6, 0.5),)),
        # 1x restoration models (--pre): a gray denoiser with act_mode R needs nb >= 9 to be detected
        Tiny("dncnn-gray", "DnCNN", 1, 1, lambda: DnCNN(in_nc=1, out_nc=1, nc=8, nb=9, act_mode="R")),
        Tiny("nafnet", "NAFNet", 1, 3,
             lambda: NAFNet(img_channel=3, width=8, middle_blk_num=1, enc_blk_nums=[1], dec_blk_nums=[1])),
        Tiny("compact-1x", "Compact", 1, 3,
             lambda: Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=1)),
    ]
    return {m.key: m for m in models}


UPSCALERS = ["esrgan-x2", "esrgan-x4", "compact-x2", "compact-x3", "swinir-x2", "hat-x2", "span-x2",
             "omnisr-x2", "safmn-x2", "plksr-x2", "esrgan-gray-x2", "esrgan-rgba-x2"]
RESTORERS = ["dncnn-gray", "nafnet", "compact-1x"]


def state_of(tiny: Tiny, seed: int) -> dict[str, torch.Tensor]:
    """The seeded model's state dict (contiguous, as safetensors needs), its output layer tweaked."""
    torch.manual_seed(seed)
    state = {k: v.detach().clone().contiguous() for k, v in tiny.build().state_dict().items()}
    for layer, gain, add in tiny.tweak:
        state[f"{layer}.weight"] = state[f"{layer}.weight"] * gain
        state[f"{layer}.bias"] = state[f"{layer}.bias"] * gain + add
    return state


@dataclass(frozen=True)
class ModelFiles:
    """One tiny model saved three ways."""

    tiny: Tiny
    pth: Path  # torch.save of the state dict
    wrapped: Path  # torch.save of {"params_ema": state dict}, as BasicSR saves
    safetensors: Path

    @property
    def key(self) -> str:
        return self.tiny.key

    @property
    def scale(self) -> int:
        return self.tiny.scale


def save_model(tiny: Tiny, folder: Path, seed: int = 0) -> ModelFiles:
    from safetensors.torch import save_file

    state = state_of(tiny, seed)
    folder.mkdir(parents=True, exist_ok=True)
    pth = folder / f"{tiny.key}.pth"
    torch.save(state, pth)
    wrapped = folder / f"{tiny.key}-ema.pth"
    torch.save({"params_ema": state, "iter": 1000}, wrapped)
    st = folder / f"{tiny.key}.safetensors"
    save_file(state, str(st))
    return ModelFiles(tiny, pth, wrapped, st)


def spandrel_call(path: Path, x: np.ndarray) -> np.ndarray:
    """spandrel's own answer: load the file with its loader and call the descriptor on ``x``
    ((H, W, C) float32), in fp32 on the CPU; (sH, sW, C') float32."""
    import spandrel

    desc = spandrel.ModelLoader(device="cpu").load_from_file(str(path))
    desc.model.eval()
    t = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))[None]
    with torch.inference_mode():
        y = desc(t)
    return y[0].permute(1, 2, 0).numpy()


def photo(h: int, w: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Smooth gradients, edges and noise, float32 in [0, 1]: an image-like input."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([xx / max(w - 1, 1), yy / max(h - 1, 1), ((xx + yy) % 16) / 16], axis=2)[:, :, :channels]
    return np.clip(base * 0.8 + 0.1 + rng.normal(0, 0.05, base.shape), 0, 1).astype(np.float32)
