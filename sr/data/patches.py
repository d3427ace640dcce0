"""HR/LR pairs with a disk cache, and a sampler whose randomness is a pure function of the step.

HR images are decoded by :func:`sr.io.read_array`, as evaluation and inference decode them. LR
images are made once per image and scale with the project's MATLAB-compatible bicubic and kept in
memory (and in an ``.npy`` cache on disk keyed by path, size, mtime and scale, plus the decoder's
version for the few images whose pixels a decoder change moved).
Each batch's crops and augmentations are drawn from ``default_rng([seed, rank, step])``, so resuming
at step N replays exactly the batches a run that never stopped would have seen, with any number of
loader workers.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ..io import atomic_write, listed_suffixes, read_array
from ..resize import imresize, modcrop

log = logging.getLogger(__name__)


def find_images(folders: Sequence[str | Path]) -> list[Path]:
    paths: list[Path] = []
    suffixes = listed_suffixes()
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"training folder not found: {folder}")
        paths += sorted(p for p in folder.rglob("*") if p.suffix.lower() in suffixes)
    if not paths:
        raise FileNotFoundError(f"no images in {', '.join(map(str, folders))}")
    return paths


# Part of the cache key of images whose pixels the decoder changed: bump it when decoding changes
# what an image file yields. Version 2 decodes through sr.io (16-bit samples scaled, not clipped;
# EXIF orientation applied); version 1 was Image.open().convert("RGB").
DECODE_VERSION = 2


def cache_key(path: Path, tag: str, decode: int = 1) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{tag}"
    if decode != 1:  # version 1 keys are the keys written before versions existed
        ident += f"|decode{decode}"
    return hashlib.sha1(ident.encode()).hexdigest()[:20]


def _decode_version(path: Path, full: np.ndarray) -> int:
    """1 where version 1's decode gave exactly these pixels (plain 8-bit images, nearly all: their
    cached LR stays valid and is reused, not recomputed), else :data:`DECODE_VERSION`, so no entry
    made from other pixels is read. Costs one more decode per image and start (~20 ms a megapixel)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            old = np.asarray(im.convert("RGB"))
    except (OSError, ValueError):
        return DECODE_VERSION
    return 1 if old.shape == full.shape and np.array_equal(old, full) else DECODE_VERSION


def cached(cache: Path | None, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
    """``make()``, or its result from ``cache/<key>.npy`` (written atomically on a miss)."""
    if cache is None:
        return make()
    f = cache / f"{key}.npy"
    if f.is_file():
        return np.load(f)
    arr = make()
    # a private temp name (atomic_write's): several runs may fill the same cache at once
    atomic_write(f, lambda out: np.save(out, arr))
    return arr


def check_rescale(factors: Sequence[float]) -> tuple[float, ...]:
    bad = [f for f in factors if not 0 < f < 1]
    if bad:
        raise ValueError(f"--rescale factors must lie in (0, 1), got {', '.join(map(str, bad))}")
    return tuple(dict.fromkeys(float(f) for f in factors))


def check_rgb_perm(share: float) -> float:
    if not 0 <= share <= 1:
        raise ValueError(f"--rgb-perm must lie in [0, 1], got {share}")
    return share


def build_pairs(
    folders: Sequence[str | Path],
    scale: int,
    lr_patch: int,
    cache_dir: str | Path | None = None,
    rescale: Sequence[float] = (),
) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Load HR images (RGB uint8), modcrop, make/cached LR. Returns (pairs, number skipped as too small).

    Each factor in ``rescale`` adds a bicubic-downscaled copy of every HR image as one more training
    image (scale augmentation, as FSRCNN used on its small training set): more distinct patches, and
    copies whose JPEG noise and softness shrink with them.
    """
    factors = check_rescale(rescale)
    pairs, skipped = [], 0
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)
    for path in find_images(folders):
        full = read_array(path, rgb=True)  # gray sources replicated: the network is RGB
        version = _decode_version(path, full) if cache else DECODE_VERSION
        for f in (1.0, *factors):
            if f == 1.0:
                hr, tag = modcrop(full, scale), f"x{scale}"  # the plain copy keeps its pre-rescale key
            else:
                key = cache_key(path, f"r{f:g}", version)
                hr = modcrop(cached(cache, key, partial(imresize, full, f)), scale)
                tag = f"x{scale}r{f:g}"
            if min(hr.shape[:2]) < lr_patch * scale:
                skipped += 1
                continue
            lr = cached(cache, cache_key(path, tag, version), partial(imresize, hr, 1 / scale))
            pairs.append((np.ascontiguousarray(hr), np.ascontiguousarray(lr)))
    if not pairs:
        raise ValueError(f"every training image is smaller than the HR patch ({lr_patch * scale} px)")
    return pairs, skipped


# the six orders of the RGB channels; spec index 0 keeps them
CHANNEL_ORDERS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


class PatchSampler(torch.utils.data.Sampler):
    """Yields one batch of crop specs (image, y, x, flip_h, flip_v, rot90, channel order) per step
    from ``start``. With ``rgb_perm`` > 0, that share of the crops gets one of the five other
    channel orders: the bicubic LR is made per channel, so a reordered pair is still an exact pair,
    and a small training set gains colours it lacks (as in Yoo et al. 2020, "Rethinking data
    augmentation for image super-resolution")."""

    def __init__(
        self,
        sizes: Sequence[tuple[int, int]],
        lr_patch: int,
        batch: int,
        steps: int,
        seed: int,
        start: int = 0,
        rank: int = 0,
        rgb_perm: float = 0.0,
    ) -> None:
        self.sizes, self.lr_patch, self.batch = list(sizes), lr_patch, batch
        self.rgb_perm = check_rgb_perm(rgb_perm)
        self.steps, self.seed, self.start, self.rank = steps, seed, start, rank
        area = np.array([h * w for h, w in self.sizes], dtype=np.float64)
        self.weights = area / area.sum()  # big images hold more distinct patches: sample them more

    def batch_specs(self, step: int) -> list[tuple[int, ...]]:
        rng = np.random.default_rng([self.seed, self.rank, step])
        images = rng.choice(len(self.sizes), size=self.batch, p=self.weights)
        specs = []
        for i in images:
            h, w = self.sizes[i]
            y, x = rng.integers(0, h - self.lr_patch + 1), rng.integers(0, w - self.lr_patch + 1)
            fh, fv, rot = rng.integers(0, 2, size=3)
            order = 0
            if self.rgb_perm > 0 and rng.random() < self.rgb_perm:  # draws nothing when off: old runs replay
                order = int(rng.integers(1, len(CHANNEL_ORDERS)))
            specs.append((int(i), int(y), int(x), int(fh), int(fv), int(rot), order))
        return specs

    def __iter__(self) -> Iterator[list[tuple[int, ...]]]:
        for step in range(self.start, self.steps):
            yield self.batch_specs(step)

    def __len__(self) -> int:
        return max(0, self.steps - self.start)


def _augment(img: np.ndarray, fh: int, fv: int, rot: int, order: int) -> np.ndarray:
    if order:
        img = img[:, :, CHANNEL_ORDERS[order]]
    if fh:
        img = img[:, ::-1]
    if fv:
        img = img[::-1]
    if rot:
        img = img.transpose(1, 0, 2)
    return img


class PatchDataset(torch.utils.data.Dataset):
    """Maps a crop spec to an (LR, HR) float pair in [0, 1], shapes (3, p, p) and (3, sp, sp)."""

    def __init__(self, pairs: list[tuple[np.ndarray, np.ndarray]], scale: int, lr_patch: int) -> None:
        self.pairs, self.scale, self.lr_patch = pairs, scale, lr_patch

    @property
    def lr_sizes(self) -> list[tuple[int, int]]:
        return [lr.shape[:2] for _, lr in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, spec: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        i, y, x, *aug = spec
        hr, lr = self.pairs[i]
        p, s = self.lr_patch, self.scale
        lr_crop = _augment(lr[y : y + p, x : x + p], *aug)
        hr_crop = _augment(hr[y * s : (y + p) * s, x * s : (x + p) * s], *aug)

        def to_tensor(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1).float().div_(255)

        return to_tensor(lr_crop), to_tensor(hr_crop)
