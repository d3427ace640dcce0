"""Outside model files through the command line: ``sr upscale --model FILE [--pre FILE]`` on RGB, gray,
RGBA and 16-bit images, sizes, videos with sound and resume; ``sr info FILE``; ``sr eval --model FILE``;
and every refusal as one line with exit status 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sr.cli import main
from sr.evaluation.protocol import make_lr
from sr.external.describe import EXTRA_HINT
from sr.inference import precision as sr_precision
from sr.io import read_image
from sr.metrics import psnr
from tests.external.models import photo, save_model, spandrel_call

spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
pytestmark = pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning")


@pytest.fixture(autouse=True)
def _restore_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # sr.cli.main rewrites sys.argv


def upscale(*args: object) -> int:
    return main(["upscale", *map(str, args), "--threads", "1", "--precision", "fp32"])


def as8(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, 0, 1) * 255).astype(np.uint8)


def save(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def levels(got: np.ndarray, want: np.ndarray, top: int = 255) -> float:
    """Largest difference in output levels between the written samples and a float answer."""
    return float(np.abs(got.astype(np.float64) - np.clip(want, 0, 1).astype(np.float64) * top).max())


# -- upscale -----------------------------------------------------------------------------------
def test_a_folder_of_rgb_gray_alpha_and_16_bit(tmp_path, model_files, capsys):
    files = model_files["esrgan-x2"]
    rgb = as8(photo(20, 24, seed=1))
    gray = as8(photo(18, 16, seed=2)[:, :, 0])
    alpha = np.linspace(0, 255, 14 * 12).reshape(14, 12).astype(np.uint8)
    rgba = np.dstack([as8(photo(14, 12, seed=3)), alpha])
    deep = np.round(photo(9, 11, seed=4)[:, :, 0] * 65535).astype(np.uint16)
    src = tmp_path / "in"
    save(src / "rgb.png", rgb)
    save(src / "gray.png", gray)
    save(src / "alpha.png", rgba)
    save(src / "deep.png", deep)  # 16-bit gray
    out = tmp_path / "out"
    assert upscale(src, "-o", out, "--model", files.safetensors, "--tile", "0") == 0
    assert "4 done, 0 skipped, 0 failed" in capsys.readouterr().out
    written = sorted(p.name for p in out.iterdir())
    assert written == ["alpha_x2.png", "deep_x2.png", "gray_x2.png", "rgb_x2.png"]

    got = read_image(out / "rgb_x2.png")
    assert got.pixels.shape == (40, 48, 3) and got.alpha is None and got.bit_depth == 8
    assert levels(np.round(got.pixels * 255), spandrel_call(files.pth, rgb / np.float32(255))) <= 1

    got = read_image(out / "gray_x2.png")
    assert got.pixels.shape == (36, 32, 1)  # gray stays gray: the model's channels averaged back
    want = spandrel_call(files.pth, np.repeat(gray[:, :, None] / np.float32(255), 3, axis=2)).mean(axis=2)
    assert levels(np.round(got.pixels[:, :, 0] * 255), want) <= 1

    got = read_image(out / "alpha_x2.png")
    assert got.pixels.shape == (28, 24, 3) and got.alpha is not None and got.alpha.shape == (28, 24)
    assert abs(float(got.alpha.min())) < 0.01 and float(got.alpha.max()) > 0.99  # the ramp kept
    assert np.all(np.diff(got.alpha.mean(axis=1)) >= -1e-6)  # still rising down the image
    # the colour under a visible alpha is the model's answer on the colour alone
    visible = got.alpha > 0.5
    want = spandrel_call(files.pth, rgba[:, :, :3] / np.float32(255))
    assert levels(np.round(got.pixels[visible] * 255), want[visible]) <= 1

    got = read_image(out / "deep_x2.png")
    assert got.bit_depth == 16 and got.pixels.shape == (18, 22, 1)
    want = spandrel_call(files.pth, np.repeat(deep[:, :, None] / np.float32(65535), 3, axis=2)).mean(axis=2)
    assert levels(np.round(got.pixels[:, :, 0] * 65535), want, 65535) <= 2


def test_a_gray_model_and_an_rgba_model_on_the_command_line(tmp_path, model_files):
    x = as8(photo(16, 18, seed=5))
    save(tmp_path / "in" / "x.png", x)
    for key in ("esrgan-gray-x2", "esrgan-rgba-x2"):
        files = model_files[key]
        out = tmp_path / key
        assert upscale(tmp_path / "in", "-o", out, "--model", files.pth, "--tile", "0") == 0
        got = np.round(read_image(out / "x_x2.png").pixels * 255)
        xf = x / np.float32(255)
        if key == "esrgan-gray-x2":
            want = np.concatenate([spandrel_call(files.pth, xf[:, :, c:c + 1]) for c in range(3)], axis=2)
        else:
            want = spandrel_call(files.pth, np.dstack([xf, np.ones_like(xf[:, :, 0])]))[:, :, :3]
        assert got.shape == (32, 36, 3) and levels(got, want) <= 1


def test_glob_exif_orientation_and_icc_profile(tmp_path, model_files):
    from PIL import ImageCms

    path = model_files["span-x2"].pth
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    (tmp_path / "in").mkdir()
    rot = Image.fromarray(as8(photo(10, 20, seed=9)))
    rot.save(tmp_path / "in" / "rot.jpg", exif=exif.tobytes(), quality=95)
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(as8(photo(8, 8, seed=10))).save(tmp_path / "in" / "icc.png", icc_profile=icc)
    save(tmp_path / "in" / "other.png", as8(photo(6, 6)))
    assert upscale(str(tmp_path / "in" / "[ri]*.*"), "-o", tmp_path / "out", "--model", path) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["icc_x2.png", "rot_x2.png"]  # the glob's
    with Image.open(tmp_path / "out" / "rot_x2.png") as im:
        assert im.size == (20, 40)  # displayed 10 wide x 20 high, doubled
    with Image.open(tmp_path / "out" / "icc_x2.png") as im:
        assert im.info.get("icc_profile") == icc


def test_outscale_width_and_scale(tmp_path, model_files):
    path = model_files["compact-x2"].pth
    save(tmp_path / "x.png", as8(photo(10, 16, seed=6)))
    assert upscale(tmp_path / "x.png", "-o", tmp_path / "a", "--model", path, "--outscale", "3") == 0
    assert read_image(tmp_path / "a" / "x_x3.png").pixels.shape == (30, 48, 3)
    assert upscale(tmp_path / "x.png", "-o", tmp_path / "b", "--model", path, "--width", "40") == 0
    assert read_image(tmp_path / "b" / "x_w40.png").pixels.shape == (25, 40, 3)
    assert upscale(tmp_path / "x.png", "-o", tmp_path / "c", "--model", path, "--scale", "2") == 0
    assert read_image(tmp_path / "c" / "x_x2.png").pixels.shape == (20, 32, 3)


def test_tiled_on_the_command_line_is_the_untiled_answer(tmp_path, model_files):
    path = model_files["esrgan-x4"].safetensors
    save(tmp_path / "x.png", as8(photo(80, 100, seed=7)))
    assert upscale(tmp_path / "x.png", "-o", tmp_path / "whole", "--model", path, "--tile", "0") == 0
    assert upscale(tmp_path / "x.png", "-o", tmp_path / "tiled", "--model", path, "--tile", "56") == 0
    whole = read_image(tmp_path / "whole" / "x_x4.png").pixels
    tiled = read_image(tmp_path / "tiled" / "x_x4.png").pixels
    assert whole.shape == (320, 400, 3) and np.abs(whole - tiled).max() <= 1 / 255 + 1e-6


@pytest.mark.parametrize("pre", ["nafnet", "dncnn-gray"])
def test_pre_runs_before_the_upscaler(tmp_path, model_files, pre, capsys):
    p, m = model_files[pre], model_files["compact-x2"]
    x = as8(photo(18, 20, seed=8))
    save(tmp_path / "x.png", x)
    out = tmp_path / "out"
    assert upscale(tmp_path / "x.png", "-o", out, "--model", m.pth, "--pre", p.safetensors, "-v") == 0
    assert f"({p.safetensors.stem} in fp32 + {m.pth.stem} in fp32)" in capsys.readouterr().out  # -v: both
    xf = x / np.float32(255)
    if p.tiny.channels == 1:
        restored = np.concatenate([spandrel_call(p.pth, xf[:, :, c:c + 1]) for c in range(3)], axis=2)
    else:
        restored = spandrel_call(p.pth, xf)
    want = spandrel_call(m.pth, np.clip(restored, 0, 1))
    got = np.round(read_image(out / "x_x2.png").pixels * 255)
    assert levels(got, want) <= 1
    assert levels(got, spandrel_call(m.pth, xf)) > 3  # not the upscaler alone


# -- refusals: one line, exit 2, nothing written -------------------------------------------------
def _torchscript(path: Path) -> Path:
    class Identity(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    torch.jit.save(torch.jit.trace(Identity(), torch.zeros(1, 3, 4, 4)), str(path))
    return path


def _random_keys(path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({"encoder.layer.0.weight": torch.ones(4, 4), "head.bias": torch.zeros(4)}, str(path))
    return path


def refused(capsys, *args: object) -> str:
    code = upscale(*args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sr upscale: error: "), err
    assert "Traceback" not in err
    return lines[0].removeprefix("sr upscale: error: ")


@pytest.mark.filterwarnings("ignore:`torch.jit.:FutureWarning")
def test_each_refusal_is_one_line_with_exit_2(tmp_path, model_files, capsys):
    x = save(tmp_path / "x.png", as8(photo(8, 8)))
    out = tmp_path / "out"
    up, one = model_files["compact-x2"].pth, model_files["nafnet"].pth
    missing = tmp_path / "nope.pth"
    assert refused(capsys, x, "-o", out, "--model", missing) == f"weights file not found: {missing}"
    assert refused(capsys, x, "-o", out, "--model", up, "--pre", missing) == \
        f"--pre: weights file not found: {missing}"
    unknown = _random_keys(tmp_path / "random.safetensors")
    message = refused(capsys, x, "-o", out, "--model", unknown)
    assert message.startswith(f"{unknown}: ") and "not a model architecture spandrel knows" in message
    assert refused(capsys, x, "-o", out, "--model", one) == (
        "nafnet is a 1x restoration model (NAFNet): pass it as --pre (pre= in the service), to run before an "
        "upscaling model")
    assert refused(capsys, x, "-o", out, "--model", up, "--pre", model_files["esrgan-x2"].pth) == (
        "pre: esrgan-x2 is a x2 upscaling model; pre takes a 1x restoration model (denoise, de-JPEG, deblur)")
    assert refused(capsys, x, "-o", out, "--model", up, "--scale", "4") == (
        "scale 4 is not available for model 'compact-x2' (available: 2); use outscale for other factors")
    scripted = _torchscript(tmp_path / "scripted.pth")
    assert refused(capsys, x, "-o", out, "--model", scripted) == (
        f"{scripted}: a TorchScript file, which runs its own code when loaded: refused (export the model's "
        "state dict as .safetensors or .pth)")
    message = refused(capsys, x, "-o", out, "--model", up, "--pre", scripted)
    assert f"pre: {scripted}: a TorchScript file" in message
    assert not out.exists()


class WritesAFile:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (eval, (f"open({str(self.target)!r}, 'w').write('pwned')",))


@pytest.mark.parametrize("flag", ["--model", "--pre"])
def test_a_pickle_that_would_write_a_file_is_refused_and_writes_nothing(tmp_path, model_files, capsys, flag):
    target = tmp_path / "pwned.txt"
    evil = tmp_path / "evil.pth"
    torch.save({"model.0.weight": torch.zeros(8, 3, 3, 3), "x": WritesAFile(target)}, evil)
    x = save(tmp_path / "x.png", as8(photo(8, 8)))
    upscaler = model_files["compact-x2"].pth
    args = ["--model", evil] if flag == "--model" else ["--model", upscaler, "--pre", evil]
    message = refused(capsys, x, "-o", tmp_path / "out", *args)
    assert f"{evil}: refused: the file asks to run code while loading" in message
    assert message.endswith("(Unsupported global: GLOBAL eval was not an allowed global by default)")
    assert not target.exists() and not (tmp_path / "out").exists()
    with pytest.raises(Exception):  # noqa: B017 - only a restricted load is tried here, never a full one
        torch.load(evil, weights_only=True)
    assert not target.exists()


def test_without_spandrel_the_extra_is_named(tmp_path, tiny, monkeypatch, capsys):
    files = save_model(tiny["compact-x2"], tmp_path / "m")  # a file no earlier test described
    monkeypatch.setitem(sys.modules, "spandrel", None)  # `import spandrel` now raises ImportError
    x = save(tmp_path / "x.png", as8(photo(8, 8)))
    message = refused(capsys, x, "-o", tmp_path / "out", "--model", files.pth)
    assert message.startswith(f"{files.pth}: ") and "needs spandrel, which is not installed (" in message
    assert message.endswith(f"): {EXTRA_HINT}") and "models" in EXTRA_HINT
    assert main(["info", str(files.safetensors)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sr info: error: ") and err[0].endswith(EXTRA_HINT)


def test_srs_own_model_still_runs_without_spandrel(tmp_path, tiny_x2, monkeypatch):
    monkeypatch.setitem(sys.modules, "spandrel", None)
    x = save(tmp_path / "x.png", as8(photo(8, 8)))
    assert upscale(x, "-o", tmp_path / "out", "--model", tiny_x2) == 0
    assert read_image(tmp_path / "out" / "x_x2.png").pixels.shape == (16, 16, 3)


# -- sr info -----------------------------------------------------------------------------------
def _info(capsys, path: Path) -> dict[str, str]:
    assert main(["info", str(path), "--size", "64x48"]) == 0  # MACs counted on a small output: fast
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == path.stem
    return {line[:15].strip(): line[15:].strip() for line in lines[1:]}


def test_info_names_architecture_scale_and_precision(model_files, capsys, monkeypatch):
    monkeypatch.setattr(sr_precision, "bf16_speed", lambda: (None, "simulated CPU without fast bf16"))
    info = _info(capsys, model_files["span-x2"].pth)
    assert info["architecture"].startswith("SPAN")
    assert info["purpose"] == "upscale x2"
    assert info["channels in"] == "3 (RGB)"
    found = spandrel.ModelLoader().load_from_file(str(model_files["span-x2"].pth))
    assert info["params"].startswith(f"{sum(p.numel() for p in found.model.parameters()):,} (")
    assert info["CPU precision"] == "auto here: fp32: simulated CPU without fast bf16"
    info = _info(capsys, model_files["dncnn-gray"].safetensors)
    assert info["architecture"].startswith("DnCNN") and info["purpose"].startswith("1x restoration")
    assert info["channels in"].startswith("1")
    info = _info(capsys, model_files["safmn-x2"].pth)
    assert info["input size"] == "multiple of 8 (padded by the network)"
    assert info["MACs"].endswith("for a 64x48 output (32x24 input)")


def test_info_says_bf16_and_why_where_the_check_passes(model_files, capsys, monkeypatch, _private_cache):
    from sr.external import bf16_check

    monkeypatch.setattr(sr_precision, "bf16_speed", lambda: (0, "simulated AMX"))
    monkeypatch.setattr(bf16_check, "measure_agreement", lambda desc: 61.25)
    info = _info(capsys, model_files["compact-x2"].pth)
    assert info["CPU precision"] == ("auto here: bf16: simulated AMX; output 61.2 dB from fp32 on the check "
                                     "image")
    monkeypatch.setattr(bf16_check, "measure_agreement", lambda desc: 40.0)
    info = _info(capsys, model_files["compact-x3"].pth)
    assert info["CPU precision"] == ("auto here: fp32: bf16 output 40.0 dB from fp32 on the check image "
                                     "(bf16 needs >= 50 dB)")
    assert len(json.loads((_private_cache / "bf16-checks.json").read_text())) == 2


# -- sr eval -----------------------------------------------------------------------------------
def test_eval_scores_an_outside_model_by_the_protocol(tmp_path, model_files, capsys):
    files = model_files["compact-x2"]
    hr_dir = tmp_path / "hr"
    hrs = {f"im{i}": as8(photo(24, 28, seed=20 + i)) for i in range(2)}
    for name, hr in hrs.items():
        save(hr_dir / f"{name}.png", hr)
    report = tmp_path / "r.json"
    args = ["eval", "--hr", str(hr_dir), "--scale", "2", "--model", str(files.pth), "--json", str(report),
            "--save", str(tmp_path / "sr"), "-q"]
    assert main(args) == 0
    capsys.readouterr()
    result = json.loads(report.read_text())
    assert result["scale"] == 2 and "RealESRGAN Compact" in result["description"]
    per_image = {r["image"]: r["psnr"] for r in result["sets"][0]["per_image"]}
    for name, hr in hrs.items():
        lr = make_lr(hr, 2)  # the protocol's LR: MATLAB bicubic of the HR, rounded to 8 bits
        want = spandrel_call(files.pth, lr / np.float32(255))
        saved = np.asarray(Image.open(next((tmp_path / "sr").rglob(f"{name}.png")))).astype(np.float64)
        assert levels(saved, want) <= 1
        ref = hr.astype(np.float64)
        assert per_image[name] == pytest.approx(psnr(saved, ref, crop_border=2), abs=1e-6)
        assert per_image[name] == pytest.approx(psnr(np.round(want * 255), ref, crop_border=2), abs=0.05)


def test_eval_refuses_a_scale_the_model_has_not(tmp_path, model_files, capsys):
    save(tmp_path / "hr" / "a.png", as8(photo(24, 24)))
    assert main(["eval", "--hr", str(tmp_path / "hr"), "--scale", "3", "--model",
                 str(model_files["compact-x2"].pth)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"sr eval: error: {model_files['compact-x2'].pth} is a x2 model but --scale is 3"

