"""``import sr.spandrel``: spandrel's ModelLoader loads sr's weights files from their tensors alone,
and its call gives what sr gives."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

spandrel = pytest.importorskip("spandrel")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from spandrel import ArchRegistry, ArchSupport, ModelLoader, ModelTiling  # noqa: E402

import sr.spandrel as srs  # noqa: E402
from sr.models import NetConfig, SRNet, build_config  # noqa: E402
from sr.models.registry import ASA, ASA2  # noqa: E402
from sr.weights import load_weights, save_weights  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "weights").glob("*.safetensors"))


def sr_output(net: SRNet, x: torch.Tensor) -> torch.Tensor:
    """What sr writes: the forward pass clamped to [0, 1] (sr.inference.passes)."""
    with torch.inference_mode():
        return net.eval()(x).clamp(0, 1)


def shaken(cfg: NetConfig, seed: int = 0) -> SRNet:
    """A random network whose attention matters: SRNet starts its attention projections near zero,
    which would hide wrong heads or options from an output comparison."""
    torch.manual_seed(seed)
    net = SRNet(cfg)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net.eval()


def photo_crop(size: int = 48) -> torch.Tensor:
    img = np.asarray(Image.open(ROOT / "data" / "astronaut.png").convert("RGB"), dtype=np.float32) / 255
    return torch.from_numpy(img[100:100 + size, 100:100 + size]).permute(2, 0, 1)[None].contiguous()


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return -10 * math.log10(max(torch.mean((a.float() - b.float()) ** 2).item(), 1e-20))


def test_shipped_weights_exist():
    assert len(SHIPPED) >= 10  # the parametrised tests below would pass vacuously without them


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_weights_load_and_match_sr(path: Path):
    desc = ModelLoader().load_from_file(path)
    net, meta = load_weights(path)
    assert desc.architecture.id == srs.ARCH_ID
    assert desc.model.cfg == net.cfg  # the config rebuilt from shapes is the one the metadata names
    assert desc.tags[0] == meta["preset"]
    assert (desc.purpose, desc.scale, desc.input_channels, desc.output_channels) == ("SR", net.scale, 3, 3)
    assert desc.tiling is ModelTiling.SUPPORTED
    # SRNet pads inside its attention blocks, so no size requirement: spandrel never pads, and a
    # size that is not a multiple of the alignment (8 for asa-base) gives sr's own output
    assert desc.size_requirements.none
    torch.manual_seed(1)
    for h, w in ((16, 24), (21, 27)):
        x = torch.rand(1, 3, h, w)
        out = desc(x)
        assert out.shape == (1, 3, h * net.scale, w * net.scale)
        assert (out - sr_output(net, x)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("path", SHIPPED[:1] + SHIPPED[-1:], ids=lambda p: p.stem)
def test_no_spandrel_architecture_claims_sr_weights(path: Path):
    state = load_file(path)
    registry = spandrel.MAIN_REGISTRY
    others = [a.architecture.id for a in registry.architectures() if a.architecture.id != srs.ARCH_ID]
    assert len(others) >= 40
    assert [a for a in others if registry[a].detect(state)] == []


def test_sr_is_detected_first():
    # a looser detector elsewhere must not get to claim sr's tensors first
    assert spandrel.MAIN_REGISTRY.architectures("detection")[0].architecture.id == srs.ARCH_ID


@pytest.mark.parametrize("cfg", [
    # asa-small's width: its heads (2) and options; ECA in the residual blocks; x3
    NetConfig(scale=3, channels=40, blocks=2, attn_every=1, heads=2, attention="adaptive",
              channel_attention="eca", attn_options=ASA),
    # asa-medium's width (4 heads), attention after every second block, one block after it
    NetConfig(scale=2, channels=64, blocks=3, attn_every=2, heads=4, attention="adaptive", attn_options=ASA),
    # no attention, SE channel attention, x4
    NetConfig(scale=4, channels=24, blocks=3, attention="none", channel_attention="se"),
], ids=["adaptive-40-eca-x3", "adaptive-64-x2", "none-se-x4"])
def test_tiny_networks_round_trip(cfg: NetConfig, tmp_path: Path):
    net = shaken(cfg)
    path = save_weights(net, tmp_path / "tiny.safetensors")
    desc = ModelLoader().load_from_file(path)
    loaded = desc.model.cfg
    if cfg.attention == "none":  # heads, attn_every and options change nothing without attention
        assert (loaded.scale, loaded.channels, loaded.blocks, loaded.attention, loaded.channel_attention) == (
            cfg.scale, cfg.channels, cfg.blocks, "none", cfg.channel_attention)
    else:
        assert loaded == cfg
    torch.manual_seed(2)
    x = torch.rand(1, 3, 19, 13)
    assert (desc(x) - sr_output(net, x)).abs().max().item() <= 1e-5


def test_shape_equal_experimental_preset_loads_as_the_default(tmp_path: Path):
    # asa2-base has asa-base's tensors exactly; the documented tie rule takes the default preset
    cfg = build_config("asa2-base", 2)
    assert cfg.attn_options == ASA2 and cfg.attn_options != ASA
    desc = ModelLoader().load_from_file(save_weights(shaken(cfg), tmp_path / "asa2.safetensors"))
    assert desc.model.cfg == build_config("asa-base", 2)
    assert desc.tags[0] == "asa-base"


@pytest.mark.parametrize("attention", ["window", "topk", "dense"])
def test_attention_kinds_with_equal_tensors_are_refused(attention: str, tmp_path: Path):
    cfg = NetConfig(scale=2, channels=48, blocks=2, attn_every=2, heads=3, attention=attention,
                    attn_options=ASA)
    path = save_weights(shaken(cfg), tmp_path / f"{attention}.safetensors")
    with pytest.raises(srs.SRStateDictError, match=r"attention dense, (\S+, )*topk, window") as err:
        ModelLoader().load_from_file(path)
    assert "\n" not in str(err.value) and "load it with sr" in str(err.value)


def test_width_without_a_preset_is_refused(tmp_path: Path):
    cfg = NetConfig(scale=2, channels=32, blocks=2, attn_every=2, heads=2, attention="adaptive",
                    attn_options=ASA)
    path = save_weights(shaken(cfg), tmp_path / "w32.safetensors")
    with pytest.raises(srs.SRStateDictError, match="32 channels with attention"):
        ModelLoader().load_from_file(path)


def _asa_base_x2() -> dict[str, torch.Tensor]:
    return load_file(ROOT / "weights" / "asa-base-x2.safetensors")


def _drop(state: dict, key: str) -> dict:
    state.pop(key)
    return state


def _set(state: dict, key: str, value: torch.Tensor) -> dict:
    state[key] = value
    return state


@pytest.mark.parametrize("damage, message", [
    (lambda s: _drop(s, "body.3.qkv.bias"), r"missing body\.3\.qkv\.bias"),
    (lambda s: _drop(s, "head.bias"), r"missing head\.bias"),
    (lambda s: _set(s, "body.1.conv2.weight", s["body.1.conv2.weight"][..., :2]),
     r"body\.1\.conv2\.weight has shape \(48, 48, 3, 2\), expected \(48, 48, 3, 3\)"),
    (lambda s: _set(s, "body.0.conv1.bias", s["body.0.conv1.bias"] * float("nan")), "NaN"),
    (lambda s: _set(s, "upsample.weight", torch.zeros(20, 48, 3, 3)), "20 output channels"),
    (lambda s: _set(s, "body.11.conv1.weight", s["body.0.conv1.weight"]), r"body layer\(s\) 9, 10 have no"),
    (lambda s: _set(s, "body.2.extra", torch.zeros(3)), r"unexpected body\.2\.extra"),
], ids=["missing", "missing-head", "shape", "nan", "upsampler", "gap", "extra"])
def test_damaged_sr_state_dicts_give_a_clear_error(damage, message):
    with pytest.raises(srs.SRStateDictError, match=message) as err:
        ModelLoader().load_from_state_dict(damage(_asa_base_x2()))
    assert str(err.value).startswith("sr network: ") and "\n" not in str(err.value)


def _foreign_state_dicts() -> dict[str, dict]:
    from spandrel.architectures.Compact import Compact
    from spandrel.architectures.ESRGAN import ESRGAN
    from spandrel.architectures.RCAN import RCAN
    from spandrel.architectures.SPAN import SPAN

    nets = {
        "Compact": Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=2),
        "ESRGAN": ESRGAN(in_nc=3, out_nc=3, num_filters=8, num_blocks=1, scale=2),
        "SPAN": SPAN(num_in_ch=3, num_out_ch=3, feature_channels=8, upscale=2),
        # head/body/tail, the nearest naming to sr's
        "RCAN": RCAN(scale=2, n_resgroups=1, n_resblocks=1, n_feats=16, reduction=4),
    }
    return {k: n.state_dict() for k, n in nets.items()}


def test_other_architectures_are_not_claimed():
    for arch, state in _foreign_state_dicts().items():
        assert not srs.detect(state), arch
        # sr's architecture is detected first and leaves it to its own
        assert ModelLoader().load_from_state_dict(state).architecture.id == arch
    # sr's keys plus a module SRNet does not have: not sr's
    assert srs.detect(_asa_base_x2())
    assert not srs.detect({**_asa_base_x2(), "tail.weight": torch.zeros(3)})


def test_precision_flags_hold_for_a_shipped_model():
    desc = ModelLoader().load_from_file(ROOT / "weights" / "asa-base-x2.safetensors")
    x = photo_crop()
    ref = desc(x)
    assert desc.supports_half and desc.supports_bfloat16
    half = desc.half()(x.half())
    assert half.dtype == torch.float16 and psnr(half, ref) >= 60  # measured 72-77 dB on photo crops


@pytest.mark.cpu_bf16
def test_bfloat16_flag_holds_for_a_shipped_model():
    desc = ModelLoader().load_from_file(ROOT / "weights" / "asa-base-x2.safetensors")
    x = photo_crop()
    ref = desc(x)
    bf16 = desc.bfloat16()(x.bfloat16())
    assert bf16.dtype == torch.bfloat16 and psnr(bf16, ref) >= 45  # measured 54-59 dB


def test_register_is_idempotent():
    registry = ArchRegistry()
    registry.add(spandrel.MAIN_REGISTRY["Compact"])
    first = srs.register(registry)
    assert srs.register(registry) is first and len(registry) == 2
    assert registry.architectures("detection")[0].architecture.id == srs.ARCH_ID
    # a registry holding sr's architecture under another object (a host registered it) is left alone
    held = ArchRegistry()
    other = ArchSupport(srs.SRNetArch(), srs.detect)
    held.add(other)
    assert srs.register(held) is other and len(held) == 1


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_importing_twice_registers_once():
    done = _run(
        "import importlib, spandrel, sr.spandrel as s\n"
        "importlib.reload(s); import sr.spandrel\n"
        "ids = [a.architecture.id for a in spandrel.MAIN_REGISTRY.architectures()]\n"
        "print(ids.count(s.ARCH_ID))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_without_spandrel_sr_imports_and_sr_spandrel_names_the_extra():
    done = _run(
        "import sys\n"
        "sys.modules['spandrel'] = None  # as if not installed: importing it raises ModuleNotFoundError\n"
        "import sr, sr.models, sr.weights\n"
        "try:\n"
        "    import sr.spandrel\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'sr.spandrel needs spandrel: pip install spandrel (the "models" extra)\n'
