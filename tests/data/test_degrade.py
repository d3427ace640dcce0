"""The degradation model: each step does what it says, the draws are seeded, the clean path is the
benchmark's bicubic LR bit for bit."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.data.degrade import (
    RESIZE_KERNELS,
    TRAINING_CONFIGS,
    DegradeConfig,
    DegradeParams,
    add_gaussian_noise,
    add_poisson_noise,
    apply,
    apply_with_file,
    blur,
    decode_jpeg,
    degrade,
    downscale,
    gaussian_kernel,
    jpeg,
    jpeg_bytes,
    sample_params,
    to_uint8,
    training_config,
)
from sr.evaluation.protocol import make_lr
from sr.lossy import inspect_compression, jpeg_quality_from_tables
from sr.resize import imresize, modcrop


@pytest.fixture(scope="module")
def hr() -> np.ndarray:
    return data.astronaut()[100:196, 150:270].copy()  # 120x96: a multiple of 2, 3 and 4


def _noise_image(seed: int = 0, size: int = 96) -> np.ndarray:
    return np.random.default_rng(seed).random((size, size, 3)).astype(np.float32)


def _quality(data_: bytes) -> int:
    with Image.open(io.BytesIO(data_)) as im:
        return jpeg_quality_from_tables(im.quantization)


# -- noise --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [2.0, 10.0, 25.0])
def test_gaussian_noise_has_the_asked_std_in_8_bit_levels(sigma: float) -> None:
    img = np.full((200, 200, 3), 0.5, np.float32)
    noisy = add_gaussian_noise(img, sigma, False, np.random.default_rng(1))
    diff = (noisy - img) * 255
    assert noisy.shape == img.shape and noisy.dtype == np.float32
    assert diff.std() == pytest.approx(sigma, rel=0.03)
    assert abs(diff.mean()) < 0.05 * sigma
    # colour noise: the channels are drawn independently
    assert abs(np.corrcoef(diff[..., 0].ravel(), diff[..., 1].ravel())[0, 1]) < 0.05


def test_gray_noise_is_the_same_in_every_channel() -> None:
    flat = np.full((100, 100, 3), 0.4, np.float32)
    noisy = add_gaussian_noise(flat, 8.0, True, np.random.default_rng(2))
    assert noisy.shape == flat.shape
    np.testing.assert_array_equal(noisy[..., 0], noisy[..., 1])  # one draw, added to every channel
    np.testing.assert_array_equal(noisy[..., 0], noisy[..., 2])
    assert ((noisy[..., 0] - 0.4) * 255).std() == pytest.approx(8.0, rel=0.05)
    img = _noise_image()
    diff = add_gaussian_noise(img, 8.0, True, np.random.default_rng(2)) - img
    np.testing.assert_allclose(diff[..., 0], diff[..., 2], atol=1e-6)


@pytest.mark.parametrize("level, peak", [(0.2, 300.0), (0.6, 300.0), (0.6, 2000.0)])
def test_poisson_noise_std_is_sqrt_of_level_over_peak(level: float, peak: float) -> None:
    img = np.full((200, 200, 3), level, np.float32)
    noisy = add_poisson_noise(img, peak, np.random.default_rng(3))
    assert noisy.mean() == pytest.approx(level, rel=0.01)  # shot noise is unbiased
    assert noisy.std() == pytest.approx(math.sqrt(level / peak), rel=0.03)


def test_poisson_noise_grows_with_the_signal_unlike_gaussian() -> None:
    ramp = np.repeat(np.linspace(0.05, 0.95, 10, dtype=np.float32), 4000).reshape(10, 4000, 1)
    img = np.repeat(ramp, 3, axis=2)
    stds = (add_poisson_noise(img, 500.0, np.random.default_rng(4)) - img).std(axis=(1, 2))
    assert np.all(np.diff(stds) > 0)
    np.testing.assert_allclose(stds, np.sqrt(ramp[:, 0, 0] / 500.0), rtol=0.05)


# -- JPEG -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("quality", [30, 45, 60, 75, 85, 95])
def test_jpeg_quality_reads_back_from_the_tables(hr: np.ndarray, quality: int) -> None:
    data_ = jpeg_bytes(hr, quality)
    assert _quality(data_) == quality
    assert inspect_compression(data_).jpeg_quality == quality
    out = jpeg(hr, quality)
    assert out.shape == hr.shape and out.dtype == np.uint8


def test_lower_jpeg_quality_loses_more(hr: np.ndarray) -> None:
    err = [np.abs(jpeg(hr, q).astype(float) - hr).mean() for q in (30, 60, 95)]
    assert err[0] > err[1] > err[2] > 0


def test_the_uploaded_file_is_the_last_jpeg_and_decodes_to_the_lr(hr: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    once = DegradeParams(resize="area", jpeg=70)
    lr, data_ = apply_with_file(hr, 2, once, rng)
    assert _quality(data_) == 70
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data_)).convert("RGB")), lr)
    twice = DegradeParams(resize="area", jpeg=40, second={"blur": 0.4, "gauss": 2.0, "jpeg": 88})
    lr2, data2 = apply_with_file(hr, 2, twice, rng)
    assert _quality(data2) == 88 and lr2.shape == lr.shape
    lossless = DegradeParams(resize="bilinear")
    assert apply_with_file(hr, 2, lossless, rng)[1] is None


# -- blur -----------------------------------------------------------------------------------------------

def _high_freq_energy(img: np.ndarray) -> float:
    """Energy above half the Nyquist frequency (either axis), per channel summed."""
    spec = np.abs(np.fft.fft2(img - img.mean(axis=(0, 1)), axes=(0, 1))) ** 2
    f = np.abs(np.fft.fftfreq(img.shape[0]))
    high = (f[:, None] > 0.25) | (f[None, :] > 0.25)
    return float(spec[high].sum())


def test_gaussian_kernel_is_normalised_and_sized_by_sigma() -> None:
    for sx, sy, angle in [(0.5, 0.5, 0.0), (2.0, 0.7, 0.3), (1.0, 3.0, 2.0)]:
        k = gaussian_kernel(sx, sy, angle)
        assert k.sum() == pytest.approx(1.0, abs=1e-5) and k.dtype == np.float32
        assert k.shape == (2 * math.ceil(3 * max(sx, sy)) + 1,) * 2
    iso = gaussian_kernel(1.5, 1.5)
    np.testing.assert_allclose(iso, iso.T, atol=1e-7)
    np.testing.assert_allclose(iso, gaussian_kernel(1.5, 1.5, 1.1), atol=1e-6)  # angle is moot


def test_blur_removes_high_frequencies_more_with_larger_sigma() -> None:
    img = _noise_image()
    energies = [_high_freq_energy(img)] + [
        _high_freq_energy(blur(img, gaussian_kernel(s, s))) for s in (0.5, 1.0, 2.0)
    ]
    assert all(a > 2 * b for a, b in zip(energies, energies[1:], strict=False))
    out = blur(img, gaussian_kernel(2.0, 2.0))
    assert out.shape == img.shape and out.dtype == np.float32
    # reflected borders: a flat image stays flat (no darkened edges)
    flat = np.full((40, 40, 3), 0.7, np.float32)
    np.testing.assert_allclose(blur(flat, gaussian_kernel(3.0, 3.0)), 0.7, atol=1e-5)


def _gradient_energy(img: np.ndarray) -> tuple[float, float]:
    """(along x: horizontal differences, along y: vertical differences)."""
    return float((np.diff(img, axis=1) ** 2).mean()), float((np.diff(img, axis=0) ** 2).mean())


def test_anisotropic_kernels_blur_along_their_long_axis() -> None:
    img = _noise_image(5)
    gx, gy = _gradient_energy(blur(img, gaussian_kernel(3.0, 0.3, 0.0)))  # long axis horizontal
    assert gx < 0.2 * gy
    gx, gy = _gradient_energy(blur(img, gaussian_kernel(3.0, 0.3, math.pi / 2)))  # rotated: vertical
    assert gy < 0.2 * gx
    np.testing.assert_allclose(gaussian_kernel(3.0, 0.3, math.pi / 2), gaussian_kernel(0.3, 3.0), atol=1e-6)
    # at 45 degrees the blur runs along a diagonal: differences along it shrink the most
    diag = blur(img, gaussian_kernel(3.0, 0.3, math.pi / 4))[8:-8, 8:-8]
    along = float(((diag[1:, 1:] - diag[:-1, :-1]) ** 2).mean())
    across = float(((diag[1:, :-1] - diag[:-1, 1:]) ** 2).mean())
    assert along < 0.2 * across


# -- downscale ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", RESIZE_KERNELS)
@pytest.mark.parametrize("scale", [2, 3, 4])
def test_downscale_gives_exactly_a_1_over_s_image(hr: np.ndarray, kernel: str, scale: int) -> None:
    x = hr.astype(np.float32) / 255
    out = downscale(x, scale, kernel)
    assert out.shape == (hr.shape[0] // scale, hr.shape[1] // scale, 3)
    assert np.abs(out.mean() - x.mean()) < 0.01  # brightness kept


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_area_downscale_is_the_block_mean_and_bicubic_is_imresize(hr: np.ndarray, scale: int) -> None:
    x = hr.astype(np.float32) / 255
    area = downscale(x, scale, "area")
    for i, j in [(0, 0), (3, 7), (area.shape[0] - 1, area.shape[1] - 1)]:
        block = x[i * scale : (i + 1) * scale, j * scale : (j + 1) * scale]
        np.testing.assert_allclose(area[i, j], block.mean(axis=(0, 1)), rtol=1e-6)
    np.testing.assert_array_equal(downscale(x, scale, "bicubic"), imresize(x, 1 / scale))


def test_downscale_refuses_bad_sizes_and_kernels(hr: np.ndarray) -> None:
    x = hr.astype(np.float32) / 255
    with pytest.raises(ValueError, match="not a multiple of the factor 5"):
        downscale(x, 5, "area")
    with pytest.raises(ValueError, match="unknown resize kernel 'lanczos'"):
        downscale(x, 2, "lanczos")


# -- the chain ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [2, 3, 4])
def test_clean_path_is_the_benchmark_bicubic_lr_bit_for_bit(hr: np.ndarray, scale: int) -> None:
    params = DegradeParams(clean=True)
    lr, data_ = apply_with_file(hr, scale, params, np.random.default_rng(0))
    assert data_ is None and lr.dtype == np.uint8
    np.testing.assert_array_equal(lr, imresize(hr, 1 / scale))
    np.testing.assert_array_equal(lr, make_lr(modcrop(hr, scale), scale))
    # and whatever a config draws, a clean sample is that LR
    cfg = DegradeConfig(clean_share=1.0)
    out, p = degrade(hr, scale, cfg, np.random.default_rng(9))
    assert p.clean and p.blur is None and p.jpeg is None
    np.testing.assert_array_equal(out, lr)


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_every_sample_is_uint8_rgb_at_exactly_1_over_s(hr: np.ndarray, scale: int) -> None:
    cfg = DegradeConfig(clean_share=0.1, second_prob=0.5)
    for seed in range(12):
        lr, _ = degrade(hr, scale, cfg, np.random.default_rng(seed))
        assert lr.shape == (hr.shape[0] // scale, hr.shape[1] // scale, 3) and lr.dtype == np.uint8


def test_apply_refuses_non_uint8_rgb(hr: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected uint8"):
        apply(hr.astype(np.float32), 2, DegradeParams(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="expected uint8"):
        apply(hr[:, :, 0], 2, DegradeParams(), np.random.default_rng(0))


def test_same_seed_same_output_and_params_other_seed_other(hr: np.ndarray) -> None:
    cfg = DegradeConfig(clean_share=0.0, noise_prob=1.0)  # every sample noisy: the pixels need the rng too
    a_lr, a_p = degrade(hr, 2, cfg, np.random.default_rng(42))
    b_lr, b_p = degrade(hr, 2, cfg, np.random.default_rng(42))
    assert a_p == b_p and a_p.to_dict() == b_p.to_dict()
    np.testing.assert_array_equal(a_lr, b_lr)
    c_lr, c_p = degrade(hr, 2, cfg, np.random.default_rng(43))
    assert c_p != a_p and not np.array_equal(c_lr, a_lr)
    # the params alone fix the choices; the rng given to apply only draws the noise pixels
    again = apply(hr, 2, a_p, np.random.default_rng(7))
    assert again.shape == a_lr.shape


def test_a_config_change_in_one_step_keeps_the_other_steps_draws() -> None:
    base = DegradeConfig(clean_share=0.0, blur_prob=1.0, jpeg_prob=1.0)
    other = DegradeConfig(clean_share=0.0, blur_prob=1.0, jpeg_prob=1.0, jpeg_quality=(10, 20))
    for seed in range(20):
        a = sample_params(base, 3, np.random.default_rng(seed))
        b = sample_params(other, 3, np.random.default_rng(seed))
        assert a.blur == b.blur and a.resize == b.resize and a.gauss == b.gauss and a.poisson == b.poisson
        assert 30 <= a.jpeg <= 95 and 10 <= b.jpeg <= 20


def test_blur_sigmas_are_in_lr_pixels_scaled_to_hr() -> None:
    cfg = DegradeConfig(clean_share=0.0, blur_prob=1.0, aniso_prob=0.0, blur_sigma=(0.5, 0.8))
    for scale in (2, 4):
        for seed in range(10):
            p = sample_params(cfg, scale, np.random.default_rng(seed))
            sx, sy, angle = p.blur
            assert sx == sy and angle == 0.0 and 0.5 * scale <= sx <= 0.8 * scale


@pytest.mark.parametrize("share", [0.0, 0.25, 0.6, 1.0])
def test_clean_share_is_respected(share: float) -> None:
    cfg = DegradeConfig(clean_share=share)
    rng = np.random.default_rng(11)
    n = 3000
    clean = [sample_params(cfg, 2, rng).clean for _ in range(n)]
    assert np.mean(clean) == pytest.approx(share, abs=4 * math.sqrt(share * (1 - share) / n) + 1e-9)


@pytest.mark.parametrize("name", sorted(TRAINING_CONFIGS))
def test_step_probabilities_are_respected_among_the_degraded(name: str) -> None:
    cfg = TRAINING_CONFIGS[name]
    rng = np.random.default_rng(12)
    params = [p for p in (sample_params(cfg, 2, rng) for _ in range(3000)) if not p.clean]
    n = len(params)
    tol = 4 / math.sqrt(n)
    # the sharp share is resized (+ JPEG) only; blur and noise come at their rates in the rest
    blind = 1 - cfg.sharp_share
    assert np.mean([p.blur is not None for p in params]) == pytest.approx(blind * cfg.blur_prob, abs=tol)
    assert np.mean([p.jpeg is not None for p in params]) == pytest.approx(cfg.jpeg_prob, abs=tol)
    noisy = np.mean([p.gauss is not None or p.poisson is not None for p in params])
    assert noisy == pytest.approx(blind * cfg.noise_prob, abs=tol)
    kinds = [p.resize for p in params]
    for k, w in zip(cfg.resize_kernels, cfg.resize_weights, strict=True):
        assert kinds.count(k) / n == pytest.approx(w / sum(cfg.resize_weights), abs=tol)
    assert all(cfg.jpeg_quality[0] <= p.jpeg <= cfg.jpeg_quality[1] for p in params if p.jpeg)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(clean_share=1.5), "clean_share must lie in"),
        (dict(noise_prob=-0.1), "noise_prob must lie in"),
        (dict(resize_kernels=("bicubic", "lanczos"), resize_weights=(1, 1)), "unknown resize kernel"),
        (dict(resize_weights=(1.0, 1.0)), "one weight per resize kernel"),
        (dict(resize_weights=(0.0, 0.0, 0.0)), "positive sum"),
        (dict(resize_kernels=(), resize_weights=()), "at least one kernel"),
        (dict(jpeg_quality=(0, 90)), "jpeg_quality must be a range within 1..100"),
        (dict(jpeg_quality=(90, 30)), "jpeg_quality must be a range within 1..100"),
        (dict(second_jpeg_quality=(50, 101)), "second_jpeg_quality must be a range"),
        (dict(blur_sigma=(0.0, 1.0)), "blur_sigma must be a range"),
        (dict(blur_sigma=(1.0, 0.5)), "blur_sigma must be a range"),
        (dict(gauss_sigma=(-1.0, 5.0)), "gauss_sigma must be a range"),
        (dict(poisson_peak=(0.0, 100.0)), "poisson_peak must be a range"),
    ],
)
def test_config_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DegradeConfig(**kwargs)


def test_photo_sharp_shares_of_all_samples() -> None:
    # the documented split of the second cycle: 30% clean, 38.5% resized (+ JPEG) only, 31.5% full chain
    cfg = TRAINING_CONFIGS["photo-sharp"]
    rng = np.random.default_rng(13)
    params = [sample_params(cfg, 4, rng) for _ in range(4000)]
    sharp = [not p.clean and p.blur is None and p.gauss is None and p.poisson is None and p.second is None
             for p in params]
    tol = 4 * math.sqrt(0.25 / len(params))
    assert np.mean([p.clean for p in params]) == pytest.approx(0.30, abs=tol)
    # a full-chain sample may also draw no blur, noise or second round (0.4 x 0.5 x 0.8 of them): the
    # sharp-looking share is the sharp share plus those
    full = 0.7 * (1 - 0.55)
    assert np.mean(sharp) == pytest.approx(0.7 * 0.55 + full * 0.4 * 0.5 * 0.8, abs=tol)


def test_training_configs_by_name() -> None:
    assert training_config("photo") is TRAINING_CONFIGS["photo"]
    with pytest.raises(ValueError, match="unknown degradation 'nope'; choose from photo"):
        training_config("nope")


@pytest.mark.parametrize("share", [0.0, 0.4, 1.0])
def test_sharp_share_is_resize_and_jpeg_only(share: float) -> None:
    cfg = DegradeConfig(clean_share=0.0, sharp_share=share, blur_prob=1.0, noise_prob=1.0, jpeg_prob=1.0,
                        second_prob=1.0)
    rng = np.random.default_rng(13)
    n = 2000
    params = [sample_params(cfg, 2, rng) for _ in range(n)]
    sharp = [p.blur is None for p in params]
    assert np.mean(sharp) == pytest.approx(share, abs=4 * math.sqrt(share * (1 - share) / n) + 1e-9)
    for p, s in zip(params, sharp, strict=True):
        if s:  # nothing but the resize and the JPEG
            assert p.gauss is None and p.poisson is None and p.second is None and p.jpeg is not None
        else:
            assert p.second is not None


def test_a_zero_sharp_share_draws_nothing_more() -> None:
    """Configs without a sharp share keep their random streams (the evaluation levels' sets)."""
    a, b = np.random.default_rng(14), np.random.default_rng(14)
    for _ in range(50):
        sample_params(DegradeConfig(), 2, a)
        sample_params(DegradeConfig(sharp_share=0.0), 2, b)
    assert a.random() == b.random()
    c = np.random.default_rng(14)
    sample_params(DegradeConfig(sharp_share=0.5), 2, c)
    d = np.random.default_rng(14)
    sample_params(DegradeConfig(), 2, d)
    assert c.random() != d.random()


def test_the_save_chain_draws_nothing_in_configs_that_do_not_use_it() -> None:
    """The camera JPEG and the subsampling draw only where a config uses them: the streams of every
    older config, and so the training pools and the evaluation sets made before, stay as they were
    (the values after 50 samples were recorded before these fields existed)."""
    from sr.evaluation.degraded import LEVELS

    for cfg, after in ((DegradeConfig(), 0.8938020430331818),
                       (TRAINING_CONFIGS["photo-blind"], 0.6115077811951394),
                       (LEVELS["heavy"], 0.8938020430331818)):
        rng = np.random.default_rng(14)
        for _ in range(50):
            sample_params(cfg, 2, rng)
        assert rng.random() == after
        assert "camera_jpeg_prob" not in cfg.to_dict() and "subsampling" not in cfg.to_dict()
    params = sample_params(DegradeConfig(clean_share=0.0), 2, np.random.default_rng(1))
    assert "camera_jpeg" not in params.to_dict()


def _sampling(data_: bytes) -> int:
    """Pillow's code of a JPEG's chroma subsampling: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0."""
    from PIL import JpegImagePlugin

    with Image.open(io.BytesIO(data_)) as im:
        return JpegImagePlugin.get_sampling(im)


def test_save_chain_camera_jpeg_then_resize_then_jpeg_with_the_drawn_subsampling(hr: np.ndarray) -> None:
    cfg = DegradeConfig(clean_share=0.0, blur_prob=0.0, noise_prob=0.0, jpeg_prob=1.0, second_prob=0.0,
                        camera_jpeg_prob=1.0, camera_jpeg_quality=(80, 95), subsampling=("4:2:0", "4:4:4"))
    rng = np.random.default_rng(3)
    params = [sample_params(cfg, 2, rng) for _ in range(400)]
    assert all(p.camera_jpeg is not None and 80 <= p.camera_jpeg <= 95 for p in params)
    shares = np.mean([p.subsampling == "4:4:4" for p in params])
    assert shares == pytest.approx(0.5, abs=0.1)
    assert cfg.to_dict()["subsampling"] == ("4:2:0", "4:4:4")
    assert params[0].to_dict()["camera_jpeg"] is not None
    for sub, code in (("4:2:0", 2), ("4:4:4", 0)):
        p = DegradeParams(resize="area", jpeg=75, camera_jpeg=85, subsampling=sub)
        lr, data_ = apply_with_file(hr, 2, p, np.random.default_rng(0))
        assert _sampling(data_) == code and _quality(data_) == 75
        # the camera's file is what was shrunk: not the same LR as the clean HR shrunk and saved once
        direct = decode_jpeg(jpeg_bytes(to_uint8(downscale(hr.astype(np.float32) / 255, 2, "area")), 75, sub))
        assert np.array_equal(lr, decode_jpeg(data_)) and not np.array_equal(lr, direct)
    # 4:4:4 keeps colour edges that 4:2:0 halves: the chroma error against the clean LR is smaller
    clean = to_uint8(downscale(hr.astype(np.float32) / 255, 2, "area")).astype(np.float32)
    errs = {}
    for sub in ("4:2:0", "4:4:4"):
        lr = apply(hr, 2, DegradeParams(resize="area", jpeg=90, subsampling=sub), np.random.default_rng(0))
        errs[sub] = np.abs(lr.astype(np.float32) - clean).mean()
    assert errs["4:4:4"] < errs["4:2:0"]


def test_subsampling_must_be_known() -> None:
    with pytest.raises(ValueError, match="subsampling must name one or more of 4:2:0"):
        DegradeConfig(subsampling=("4:1:1",))
    with pytest.raises(ValueError, match="camera_jpeg_quality must be a range"):
        DegradeConfig(camera_jpeg_quality=(0, 90))
