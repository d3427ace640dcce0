"""Training data: cached bicubic LR, aligned augmented crops, a step-deterministic sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from sr.data import PatchDataset, PatchSampler, build_pairs
from sr.data.patches import CHANNEL_ORDERS
from sr.resize import imresize


def _save(folder, name, size, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / name)


def test_pairs_are_modcropped_bicubic_and_cached(tmp_path):
    _save(tmp_path / "hr", "a.png", (50, 61))
    _save(tmp_path / "hr", "tiny.png", (20, 20), seed=1)
    pairs, skipped = build_pairs([tmp_path / "hr"], scale=3, lr_patch=8, cache_dir=tmp_path / "cache")
    assert skipped == 1 and len(pairs) == 1
    hr, lr = pairs[0]
    assert hr.shape == (48, 60, 3) and lr.shape == (16, 20, 3) and lr.dtype == np.uint8
    np.testing.assert_array_equal(lr, imresize(hr, 1 / 3))
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1
    # A second build reads the cache: poison it and see the poisoned LR come back.
    f = next((tmp_path / "cache").glob("*.npy"))
    np.save(f, np.zeros_like(lr))
    again, _ = build_pairs([tmp_path / "hr"], scale=3, lr_patch=8, cache_dir=tmp_path / "cache")
    assert again[0][1].max() == 0


def test_runs_filling_one_cache_at_once_do_not_collide(tmp_path, monkeypatch):
    # Two training runs started together both miss the cache and write the same entry; make them
    # interleave deterministically (both save, then both rename) as they did in the wild.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    _save(tmp_path / "hr", "a.png", (40, 40))
    barrier, save = threading.Barrier(2, timeout=30), np.save

    def save_then_wait(path, arr):
        save(path, arr)
        barrier.wait()

    monkeypatch.setattr(np, "save", save_then_wait)
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(build_pairs, [tmp_path / "hr"], 2, 8, tmp_path / "cache") for _ in range(2)]
        results = [j.result() for j in jobs]
    assert all(len(pairs) == 1 for pairs, _ in results)
    assert [p.name.count(".") for p in (tmp_path / "cache").iterdir()] == [1]  # no temp file left


def test_missing_or_too_small_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="training folder not found"):
        build_pairs([tmp_path / "nope"], 2, 8)
    _save(tmp_path / "small", "s.png", (10, 10))
    with pytest.raises(ValueError, match="smaller than the HR patch"):
        build_pairs([tmp_path / "small"], 2, 8)


def test_rescale_adds_cached_downscaled_copies(tmp_path):
    _save(tmp_path / "hr", "a.png", (60, 90))
    full = np.asarray(Image.open(tmp_path / "hr" / "a.png"))
    cache = tmp_path / "cache"
    pairs, skipped = build_pairs([tmp_path / "hr"], 2, 8, cache, rescale=[0.5, 0.8, 0.1])
    assert skipped == 1 and len(pairs) == 3  # x0.1 (6x9 px) is smaller than the 16 px HR patch
    assert [hr.shape[:2] for hr, _ in pairs] == [(60, 90), (30, 44), (48, 72)]  # ceil, then modcrop
    np.testing.assert_array_equal(pairs[1][0], imresize(full, 0.5)[:30, :44])
    for hr, lr in pairs:
        np.testing.assert_array_equal(lr, imresize(hr, 1 / 2))
    # LR of the original; HR and LR of each kept copy; the too-small copy's HR only
    assert len(list(cache.glob("*.npy"))) == 1 + 2 * 2 + 1
    again, _ = build_pairs([tmp_path / "hr"], 2, 8, cache, rescale=[0.5, 0.8, 0.1])
    for (hr, lr), (hr2, lr2) in zip(pairs, again, strict=True):
        np.testing.assert_array_equal(hr, hr2)
        np.testing.assert_array_equal(lr, lr2)
    plain, _ = build_pairs([tmp_path / "hr"], 2, 8, cache)
    assert len(plain) == 1
    for bad in ([1.0], [0.0], [-0.5]):
        with pytest.raises(ValueError, match="must lie in"):
            build_pairs([tmp_path / "hr"], 2, 8, rescale=bad)


def test_crops_stay_aligned_under_every_augmentation():
    rng = np.random.default_rng(0)
    lr = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
    hr = lr.repeat(2, axis=0).repeat(2, axis=1)  # 2x2 blocks: alignment checkable exactly under flips
    ds = PatchDataset([(hr, lr)], scale=2, lr_patch=6)
    for fh in (0, 1):
        for fv in (0, 1):
            for rot in (0, 1):
                for order in range(len(CHANNEL_ORDERS)):
                    lr_t, hr_t = ds[(0, 3, 5, fh, fv, rot, order)]
                    assert lr_t.shape == (3, 6, 6) and hr_t.shape == (3, 12, 12)
                    torch.testing.assert_close(hr_t[:, ::2, ::2], lr_t)


def test_channel_order_reorders_both_images_the_same_way():
    lr = np.zeros((8, 8, 3), dtype=np.uint8)
    lr[..., 0], lr[..., 1], lr[..., 2] = 10, 20, 30
    hr = lr.repeat(2, axis=0).repeat(2, axis=1)
    ds = PatchDataset([(hr, lr)], scale=2, lr_patch=4)
    plain_lr, _ = ds[(0, 0, 0, 0, 0, 0, 0)]
    assert plain_lr[:, 0, 0].mul(255).round().tolist() == [10, 20, 30]
    lr_t, hr_t = ds[(0, 0, 0, 0, 0, 0, 5)]  # (2, 1, 0): blue, green, red
    assert lr_t[:, 0, 0].mul(255).round().tolist() == [30, 20, 10]
    assert hr_t[:, 0, 0].mul(255).round().tolist() == [30, 20, 10]


def test_rgb_perm_share_and_replay():
    sizes = [(50, 50)]
    off = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3)
    on = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, rgb_perm=0.5)
    assert all(s[6] == 0 for batch in off for s in batch)
    orders = [s[6] for step in range(400) for s in on.batch_specs(step)]
    share = np.mean(np.array(orders) > 0)
    assert 0.45 < share < 0.55 and set(orders) == set(range(len(CHANNEL_ORDERS)))
    resumed = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, rgb_perm=0.5, start=4)
    assert list(resumed) == list(on)[4:]
    always = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, rgb_perm=1.0)
    assert all(s[6] > 0 for batch in always for s in batch)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="--rgb-perm"):
            PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, rgb_perm=bad)


def test_sampler_is_a_pure_function_of_step_and_rank():
    sizes = [(30, 40), (100, 100)]
    a = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3)
    b = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, start=6)
    assert list(a)[6:] == list(b) and len(b) == 4
    other_rank = PatchSampler(sizes, lr_patch=8, batch=4, steps=10, seed=3, rank=1)
    assert list(other_rank) != list(a)
    for spec in [s for batch in a for s in batch]:
        i, y, x = spec[:3]
        h, w = sizes[i]
        assert 0 <= y <= h - 8 and 0 <= x <= w - 8
    # Bigger images are sampled more often (by area).
    counts = np.bincount([s[0] for step in range(500) for s in a.batch_specs(step)], minlength=2)
    assert counts[1] > 3 * counts[0]


def test_training_decodes_as_evaluation_and_inference_do(tmp_path):
    """16-bit samples are scaled (Image.open().convert("RGB") clipped them at 255) and EXIF orientation
    is applied (it was ignored): the training HR is sr.io's decode, the one evaluation and the engine use."""
    from sr.evaluation import load_hr
    from sr.io import read_array, read_image

    hr_dir = tmp_path / "hr"
    hr_dir.mkdir()
    rng = np.random.default_rng(0)
    deep = rng.integers(0, 65536, (32, 40), dtype=np.uint16)  # 16-bit gray PNG
    Image.fromarray(deep).save(hr_dir / "deep.png")
    photo = rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)  # stored landscape, shown portrait
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    Image.fromarray(photo).save(hr_dir / "turned.jpg", exif=exif.tobytes(), quality=95)

    pairs, _ = build_pairs([hr_dir], scale=2, lr_patch=4, cache_dir=tmp_path / "cache")
    by_shape = {hr.shape: hr for hr, _ in pairs}
    for name in ("deep.png", "turned.jpg"):
        decoded = read_image(hr_dir / name).pixels  # float in [0, 1], as the engine gets it
        expected = np.clip(np.round(decoded * 255), 0, 255).astype(np.uint8)
        expected = np.repeat(expected, 3, axis=2) if expected.shape[2] == 1 else expected
        got = by_shape[expected.shape]
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got, read_array(hr_dir / name, rgb=True))
        gray_or_rgb = load_hr(hr_dir / name)  # evaluation: the same pixels (gray kept as gray)
        np.testing.assert_array_equal(got, gray_or_rgb if gray_or_rgb.ndim == 3 else expected)
        assert gray_or_rgb.ndim == 3 or np.array_equal(gray_or_rgb, expected[:, :, 0])
    assert by_shape[(40, 24, 3)].shape == (40, 24, 3)  # portrait, as displayed
    deep_hr = by_shape[(32, 40, 3)]
    assert int(deep_hr.max()) > 200 and len(np.unique(deep_hr)) > 200  # scaled, not clipped at 255


def test_cache_entries_of_the_old_decode_are_reused_only_where_its_pixels_were_the_same(tmp_path):
    from sr.data.patches import DECODE_VERSION, cache_key

    hr_dir, cache = tmp_path / "hr", tmp_path / "cache"
    hr_dir.mkdir()
    _save(hr_dir, "plain.png", (32, 32))  # 8-bit RGB: both decoders agree
    deep = np.random.default_rng(1).integers(0, 65536, (32, 32), dtype=np.uint16)
    Image.fromarray(deep).save(hr_dir / "deep.png")  # 16-bit: the old decode clipped it
    # entries as the old loader keyed them (no version), poisoned: read back only where still valid
    cache.mkdir()
    for name in ("plain.png", "deep.png"):
        np.save(cache / f"{cache_key(hr_dir / name, 'x2')}.npy", np.full((16, 16, 3), 7, np.uint8))
    pairs, _ = build_pairs([hr_dir], 2, 4, cache)
    by_max = sorted(pairs, key=lambda p: int(p[1].max()))
    assert int(by_max[0][1].max()) == 7  # plain.png: the old entry reused (no recomputation)
    assert int(by_max[1][1].max()) > 7  # deep.png: its old (clipped) entry is not read
    assert (cache / f"{cache_key(hr_dir / 'deep.png', 'x2', DECODE_VERSION)}.npy").is_file()
