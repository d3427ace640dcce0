"""A seeded pool of degraded (HR, LR) patch pairs, made once per run so training never waits on JPEG.

Degrading on the fly costs a JPEG encode/decode, a blur and a resize per patch: on a 2-core machine
that would starve the network. The pool is drawn up front from ``default_rng([seed, i])`` per patch
(so any prefix of a bigger pool is the smaller pool), cached as ``.npy`` beside the LR cache, and
then sampled exactly like :class:`sr.data.PatchDataset` samples whole images: each pool entry is a
(HR, LR) pair of one patch, cropped at (0, 0) and flipped/rotated per step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..io import read_array
from ..resize import modcrop
from .degrade import DegradeConfig, degrade
from .patches import cached, find_images

log = logging.getLogger(__name__)

# LR pixels cropped around each patch after degrading: the blur kernel and the resize taps reach
# past the patch, and the JPEG block grid starts at a random offset within them.
MARGIN = (4, 12)


def _pool_key(paths: Sequence[Path], scale: int, patch: int, size: int, seed: int, cfg: DegradeConfig,
              any_pixel: bool = False) -> str:
    ident = json.dumps({
        "images": [f"{p.resolve()}|{p.stat().st_size}|{p.stat().st_mtime_ns}" for p in paths],
        "scale": scale, "patch": patch, "size": size, "seed": seed, "cfg": cfg.to_dict(), "version": 1,
        **({"any_pixel": True} if any_pixel else {}),  # today's pools keep their keys
    })
    return "pool-" + hashlib.sha1(ident.encode()).hexdigest()[:20]


def make_pool(
    images: Sequence[np.ndarray], scale: int, patch: int, size: int, seed: int, cfg: DegradeConfig,
    any_pixel: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``size`` degraded pairs from uint8 RGB ``images``: (HR (N, ps, ps, 3), LR (N, p, p, 3),
    clean flags (N,)). Images are drawn in proportion to their area.

    A patch starts on a multiple of ``scale`` of its source unless ``any_pixel``: then at any pixel,
    so a grid the source carries (a JPEG's 8 x 8 blocks: at x4 every patch would hold them on the same
    output phases) is not locked to the patch's LR grid, and a model cannot learn it as a dot lattice."""
    hr_side, big = patch * scale, patch + 2 * MARGIN[1]
    usable = [i for i, im in enumerate(images) if min(im.shape[:2]) >= big * scale]
    if not usable:
        raise ValueError(
            f"every training image is smaller than {big * scale} px, the degraded patch with margins"
        )
    area = np.array([images[i].shape[0] * images[i].shape[1] for i in usable], dtype=np.float64)
    weights = area / area.sum()
    hr_out = np.empty((size, hr_side, hr_side, 3), np.uint8)
    lr_out = np.empty((size, patch, patch, 3), np.uint8)
    clean = np.zeros(size, bool)
    for n in range(size):
        rng = np.random.default_rng([seed, n])
        img = images[usable[int(rng.choice(len(usable), p=weights))]]
        h, w = img.shape[:2]
        oy, ox = (int(v) for v in rng.integers(MARGIN[0], MARGIN[1] + 1, size=2))
        if any_pixel:
            y, x = int(rng.integers(0, h - big * scale + 1)), int(rng.integers(0, w - big * scale + 1))
        else:
            y = int(rng.integers(0, (h // scale) - big + 1)) * scale
            x = int(rng.integers(0, (w // scale) - big + 1)) * scale
        lr, params = degrade(img[y : y + big * scale, x : x + big * scale], scale, cfg, rng)
        lr_out[n] = lr[oy : oy + patch, ox : ox + patch]
        hr_out[n] = img[y + oy * scale : y + oy * scale + hr_side, x + ox * scale : x + ox * scale + hr_side]
        clean[n] = params.clean
    return hr_out, lr_out, clean


def build_pool(
    folders: Sequence[str | Path],
    scale: int,
    patch: int,
    size: int,
    seed: int,
    cfg: DegradeConfig,
    cache_dir: str | Path | None = None,
    any_pixel: bool = False,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """The run's pool as PatchDataset pairs [(HR patch, LR patch)], from cache when it was made before.
    Returns (pairs, info) with the seconds it took and the clean share."""
    if size < 1:
        raise ValueError(f"--pool must be at least 1, got {size}")
    paths = find_images(folders)
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)
    t = time.time()

    def make() -> np.ndarray:
        images = [modcrop(read_array(p, rgb=True), scale) for p in paths]
        hr, lr, clean = make_pool(images, scale, patch, size, seed, cfg, any_pixel)
        # one uint8 array, a row per entry: the HR patch's bytes, then the LR patch's, then the clean flag
        flags = clean[:, None].astype(np.uint8)
        return np.concatenate([hr.reshape(size, -1), lr.reshape(size, -1), flags], axis=1)

    flat = cached(cache, _pool_key(paths, scale, patch, size, seed, cfg, any_pixel), make)
    hs, ls = (patch * scale) ** 2 * 3, patch * patch * 3
    hr = flat[:, :hs].reshape(size, patch * scale, patch * scale, 3)
    lr = flat[:, hs : hs + ls].reshape(size, patch, patch, 3)
    clean = flat[:, hs + ls].astype(bool)
    info = {"pool": size, "pool_seconds": round(time.time() - t, 1), "pool_clean_share": float(clean.mean())}
    return [(hr[i], lr[i]) for i in range(size)], info
