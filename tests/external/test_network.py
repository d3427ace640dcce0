"""sr.external.network and .describe: spandrel's model behind sr's network interface (RGB in, RGB out
for RGB, gray and RGBA models), one fresh copy per engine, and the descriptor of a file."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from sr import weights as sr_weights
from sr.external.describe import describe_external, load_network
from sr.external.files import ModelFileError
from sr.inference import Upscaler
from sr.io import DecodedImage
from tests.external.models import photo, save_model, spandrel_call

spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
# spandrel's SwinIR and HAT call torch.meshgrid without indexing=: torch's notice, not ours
pytestmark = pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning")


def tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))[None]


def image(t: torch.Tensor) -> np.ndarray:
    return t[0].permute(1, 2, 0).numpy()


def run(net, x: np.ndarray, aux: dict | None = None) -> np.ndarray:
    with torch.inference_mode():
        return image(net(tensor(x)) if aux is None else net(tensor(x), aux))


def test_an_rgb_model_is_spandrels_call(model_files):
    path = model_files["span-x2"].pth
    net = load_network(describe_external(path))
    x = photo(13, 17, seed=1)
    y = run(net, x)
    assert y.shape == (26, 34, 3) and net.scale == 2 and (net.in_channels, net.out_channels) == (3, 3)
    np.testing.assert_allclose(y, spandrel_call(path, x), rtol=0, atol=1e-6)


def test_a_gray_model_runs_each_colour_channel(model_files):
    path = model_files["esrgan-gray-x2"].pth
    net = load_network(describe_external(path))
    x = photo(11, 9, seed=2)
    y = run(net, x)
    assert y.shape == (22, 18, 3) and net.in_channels == 1
    for c in range(3):
        np.testing.assert_allclose(y[:, :, c:c + 1], spandrel_call(path, x[:, :, c:c + 1]), rtol=0, atol=1e-5)


def test_a_gray_1x_model_restores_each_channel(model_files):
    path = model_files["dncnn-gray"].pth
    net = load_network(describe_external(path))
    x = photo(12, 10, seed=3)
    y = run(net, x)
    assert y.shape == x.shape and net.scale == 1
    want = np.concatenate([spandrel_call(path, x[:, :, c:c + 1]) for c in range(3)], axis=2)
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-5)


def test_an_rgba_model_gets_an_opaque_alpha_and_gives_rgb(model_files):
    path = model_files["esrgan-rgba-x2"].pth
    net = load_network(describe_external(path))
    x = photo(10, 12, seed=4)
    y = run(net, x)
    assert y.shape == (20, 24, 3) and net.in_channels == 4
    rgba = np.concatenate([x, np.ones_like(x[:, :, :1])], axis=2)
    np.testing.assert_allclose(y, spandrel_call(path, rgba)[:, :, :3], rtol=0, atol=1e-5)
    transparent = np.concatenate([x, np.zeros_like(x[:, :, :1])], axis=2)
    assert np.abs(y - spandrel_call(path, transparent)[:, :, :3]).max() > 1e-3  # the alpha fed matters


def test_budget_map_requests_get_none_and_the_same_pixels(model_files):
    path = model_files["compact-x2"].pth
    net = load_network(describe_external(path))
    x = photo(8, 8, seed=5)
    aux: dict = {}
    np.testing.assert_array_equal(run(net, x, aux), run(net, x))
    assert aux == {}
    up = Upscaler(path, device="cpu", threads=1, precision="fp32")
    res = up.upscale(DecodedImage(x), with_budget_map=True)
    assert res.budget_map is None and res.image.pixels.shape == (16, 16, 3)


def test_each_load_is_its_own_copy(model_files):
    """One engine's bf16 cast (or any change to its weights) never reaches another engine."""
    path = model_files["compact-x2"].pth
    desc = describe_external(path)
    first = load_network(desc).to(torch.bfloat16)
    with torch.no_grad():
        next(first.parameters()).zero_()
    second = load_network(desc)
    assert all(p.dtype == torch.float32 for p in second.parameters())
    assert not second.training and not any(p.requires_grad for p in second.parameters())
    x = photo(9, 9, seed=6)
    np.testing.assert_allclose(run(second, x), spandrel_call(path, x), rtol=0, atol=1e-6)


# -- describing files --------------------------------------------------------------------------
def test_a_rewritten_file_is_described_anew(tiny, tmp_path):
    files = save_model(tiny["compact-x2"], tmp_path / "a")
    path = tmp_path / "model.pth"
    path.write_bytes(files.pth.read_bytes())
    assert sr_weights.describe(path).scale == 2
    other = save_model(tiny["compact-x3"], tmp_path / "b")
    path.write_bytes(other.pth.read_bytes())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later modification time, as a copy has
    assert sr_weights.describe(path).scale == 3


def test_unrelated_tensors_are_not_a_model(tmp_path):
    path = tmp_path / "random.safetensors"
    g = torch.Generator().manual_seed(0)
    save_file({"encoder.layer.0.weight": torch.randn(4, 4, generator=g),
               "head.bias": torch.randn(4, generator=g)}, str(path))
    with pytest.raises(ModelFileError) as e:
        describe_external(path)
    n = len(spandrel.MAIN_REGISTRY.architectures())
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    assert str(e.value).endswith(f"not a model architecture spandrel knows (its keys match none of {n} "
                                 "architectures)")
    with pytest.raises(sr_weights.WeightsError, match="not a model architecture spandrel knows"):
        sr_weights.describe(path)


def test_a_known_architecture_with_broken_shapes_says_spandrel_could_not_load_it(model_files, tmp_path):
    state = torch.load(model_files["compact-x2"].pth, weights_only=True)
    state["body.2.weight"] = state["body.2.weight"][:, :3]  # a layer cut short: the keys still match
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    with pytest.raises(ModelFileError) as e:
        describe_external(path)
    assert str(e.value).startswith(f"{path}: spandrel could not load it (") and "\n" not in str(e.value)


def test_srs_own_files_are_read_without_spandrel_in_the_way(tiny_x2):
    desc = sr_weights.describe(tiny_x2)
    assert desc.own and desc.arch is None and desc.architecture == "sr" and desc.scale == 2
