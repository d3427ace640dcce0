"""The degraded training pool: shapes, seeded and prefix-stable entries, the cache, clean entries that
are exact bicubic pairs."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from PIL import Image

from sr.data.degrade import TRAINING_CONFIGS, DegradeConfig
from sr.data.pool import MARGIN, build_pool, make_pool
from sr.resize import imresize, modcrop

PHOTO = TRAINING_CONFIGS["photo"]
SCALE, PATCH = 2, 8


def _textures(sizes=((96, 96), (96, 104), (100, 96)), seed: int = 0) -> list[np.ndarray]:
    """Smooth colour textures plus fine noise: every patch is unique."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in sizes:
        yy, xx = np.mgrid[0:h, 0:w] / 96
        img = np.zeros((h, w, 3))
        for c in range(3):
            fx, fy, ph = rng.uniform(1, 6, 2).tolist() + [rng.uniform(0, 6)]
            img[:, :, c] = np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
        img = (img - img.min()) / (img.max() - img.min()) * 200 + rng.uniform(0, 40, img.shape)
        out.append(img.astype(np.uint8))
    return out


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    return _textures()


def test_shapes_and_dtypes(images: list[np.ndarray]) -> None:
    hr, lr, clean = make_pool(images, SCALE, PATCH, 10, 0, PHOTO)
    assert hr.shape == (10, PATCH * SCALE, PATCH * SCALE, 3) and hr.dtype == np.uint8
    assert lr.shape == (10, PATCH, PATCH, 3) and lr.dtype == np.uint8
    assert clean.shape == (10,) and clean.dtype == bool
    hr3, lr3, _ = make_pool(images, 3, 6, 4, 0, PHOTO)
    assert hr3.shape == (4, 18, 18, 3) and lr3.shape == (4, 6, 6, 3)


def test_seeded_and_any_prefix_is_the_smaller_pool(images: list[np.ndarray]) -> None:
    a = make_pool(images, SCALE, PATCH, 12, 7, PHOTO)
    b = make_pool(images, SCALE, PATCH, 12, 7, PHOTO)
    small = make_pool(images, SCALE, PATCH, 5, 7, PHOTO)
    for x, y, s in zip(a, b, small, strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x[:5], s)
    other = make_pool(images, SCALE, PATCH, 12, 8, PHOTO)
    assert not np.array_equal(a[0], other[0]) and not np.array_equal(a[1], other[1])


def test_clean_share_follows_the_config(images: list[np.ndarray]) -> None:
    assert make_pool(images, SCALE, PATCH, 20, 0, DegradeConfig(clean_share=1.0))[2].all()
    assert not make_pool(images, SCALE, PATCH, 20, 0, DegradeConfig(clean_share=0.0))[2].any()
    share = make_pool(images, SCALE, PATCH, 300, 0, DegradeConfig(clean_share=0.25))[2].mean()
    assert share == pytest.approx(0.25, abs=0.1)


def _locate(img: np.ndarray, patch: np.ndarray, scale: int) -> tuple[int, int]:
    """Where ``patch`` sits in ``img`` (on the scale grid, as make_pool crops), or (-1, -1)."""
    side = patch.shape[0]
    windows = sliding_window_view(img, (side, side, 3))[::scale, ::scale, 0]
    hits = np.argwhere((windows == patch).all(axis=(2, 3, 4)))
    if len(hits) != 1:
        return -1, -1
    return int(hits[0][0]) * scale, int(hits[0][1]) * scale


@pytest.mark.parametrize("scale", [2, 3])
def test_clean_entries_are_exact_bicubic_pairs(images: list[np.ndarray], scale: int) -> None:
    """A clean entry's LR is the benchmark bicubic LR of the whole image at the HR patch's place: the
    patch lies at least MARGIN[0] LR pixels inside the degraded region, beyond the bicubic taps' reach."""
    hr, lr, clean = make_pool(images, scale, PATCH, 12, 3, DegradeConfig(clean_share=1.0))
    assert clean.all()
    for h, low in zip(hr, lr, strict=True):
        found = [(i, _locate(img, h, scale)) for i, img in enumerate(images)]
        (i, (y, x)), = [(i, pos) for i, pos in found if pos != (-1, -1)]
        assert y >= MARGIN[0] * scale and x >= MARGIN[0] * scale
        full_lr = imresize(modcrop(images[i], scale), 1 / scale)
        ly, lx = y // scale, x // scale
        np.testing.assert_array_equal(low, full_lr[ly : ly + PATCH, lx : lx + PATCH])


def test_degraded_entries_stay_aligned_with_their_hr(images: list[np.ndarray]) -> None:
    hr, lr, clean = make_pool(images, SCALE, PATCH, 40, 5, DegradeConfig(clean_share=0.0))
    assert not clean.any()
    for h, low in zip(hr, lr, strict=True):
        assert low.shape == (PATCH, PATCH, 3)
        ref = imresize(h, 1 / SCALE).astype(float)
        shifted = imresize(np.roll(h, 4 * SCALE, axis=1), 1 / SCALE).astype(float)
        # degraded, yet nearer its own HR's bicubic LR than a shifted copy's (no misregistration)
        assert np.abs(low - ref).mean() < np.abs(low - shifted).mean()


def test_images_too_small_for_a_patch_with_margins() -> None:
    small = [np.zeros((60, 60, 3), np.uint8)]  # (8 + 2 * 12) * 2 = 64 px needed
    with pytest.raises(ValueError, match="smaller than 64 px"):
        make_pool(small, SCALE, PATCH, 2, 0, PHOTO)


def test_build_pool_caches_and_reuses(tmp_path, images: list[np.ndarray], monkeypatch) -> None:
    folder = tmp_path / "train"
    folder.mkdir()
    for i, img in enumerate(images):
        Image.fromarray(img).save(folder / f"{i}.png")
    cache = tmp_path / "cache"
    pairs, info = build_pool([folder], SCALE, PATCH, 16, 1, PHOTO, cache)
    assert len(pairs) == 16 and info["pool"] == 16
    assert all(h.shape == (16, 16, 3) and lr.shape == (8, 8, 3) for h, lr in pairs)
    files = sorted(cache.glob("pool-*.npy"))
    assert len(files) == 1
    # the pairs are make_pool's entries, in order (the images listed sorted, as they were saved)
    hr, lr, clean = make_pool(images, SCALE, PATCH, 16, 1, PHOTO)
    np.testing.assert_array_equal(np.stack([p[0] for p in pairs]), hr)
    np.testing.assert_array_equal(np.stack([p[1] for p in pairs]), lr)
    assert info["pool_clean_share"] == pytest.approx(clean.mean())

    def no_rebuild(*a, **k):
        raise AssertionError("the cached pool was rebuilt")

    monkeypatch.setattr("sr.data.pool.make_pool", no_rebuild)
    again, _ = build_pool([folder], SCALE, PATCH, 16, 1, PHOTO, cache)
    for (h1, l1), (h2, l2) in zip(pairs, again, strict=True):
        np.testing.assert_array_equal(h1, h2)
        np.testing.assert_array_equal(l1, l2)
    monkeypatch.undo()
    build_pool([folder], SCALE, PATCH, 16, 2, PHOTO, cache)  # another seed: another entry
    build_pool([folder], SCALE, PATCH, 16, 1, DegradeConfig(clean_share=0.5), cache)  # another config
    assert len(list(cache.glob("pool-*.npy"))) == 3
    with pytest.raises(ValueError, match="--pool must be at least 1"):
        build_pool([folder], SCALE, PATCH, 0, 1, PHOTO, cache)


def test_build_pool_without_a_cache_writes_nothing(tmp_path, images: list[np.ndarray]) -> None:
    folder = tmp_path / "train"
    folder.mkdir()
    Image.fromarray(images[0]).save(folder / "a.png")
    pairs, info = build_pool([folder], SCALE, PATCH, 4, 0, PHOTO, None)
    assert len(pairs) == 4 and sorted(p.name for p in tmp_path.iterdir()) == ["train"]


def test_patches_start_anywhere_with_any_pixel_so_a_source_grid_is_not_locked_to_them() -> None:
    """A source carrying an 8 px grid (a JPEG's blocks): on the LR grid at x4 every HR patch holds it on
    the same output phases; starting at any pixel spreads it over all of them."""
    scale, patch = 4, 8
    h = w = 160
    grid = np.zeros((h, w, 3), np.uint8) + 100
    grid[::8, :, :] = 140  # a line every 8 rows: at x4 phase 0 or 4 of every LR-aligned patch
    on_lr, _, _ = make_pool([grid], scale, patch, 60, 3, DegradeConfig(clean_share=1.0))
    anywhere, lr, _ = make_pool([grid], scale, patch, 60, 3, DegradeConfig(clean_share=1.0), any_pixel=True)
    assert lr.shape == (60, patch, patch, 3)
    rows_on_lr = {int(np.argmax(p[:8, 0, 0])) % 4 for p in on_lr}
    rows_anywhere = {int(np.argmax(p[:8, 0, 0])) % 4 for p in anywhere}
    assert rows_on_lr == {0} and rows_anywhere == {0, 1, 2, 3}
    for hr_patch, lr_patch in zip(anywhere, lr, strict=True):  # still registered pairs (inner pixels)
        ref = imresize(hr_patch, 1 / scale).astype(int)
        assert np.abs(lr_patch.astype(int) - ref)[2:-2, 2:-2].max() <= 1
    # the default pool is today's, draw for draw
    again = make_pool([grid], scale, patch, 60, 3, DegradeConfig(clean_share=1.0), any_pixel=False)
    np.testing.assert_array_equal(on_lr, again[0])
