"""Degraded evaluation sets: a fixed, seeded LR copy of an HR folder at one level, saved as the files a
user would upload (the JPEG itself), with a manifest of every parameter and checksum.

The levels use the chain of :mod:`sr.data.degrade` with their own ranges, and every set its own
seed stream, so a model tuned to the training pipeline's exact ranges shows it here:

- ``web``: area downscale + JPEG q60-85; no blur, no noise (a photo shrunk by a site or an app);
- ``mild``: slight blur, 1-5 levels of noise, JPEG q75-95 (a good camera, a careful export);
- ``medium``: moderate blur, 4-12 levels of noise, JPEG q50-80, sometimes re-saved (a phone photo
  passed through a messenger);
- ``heavy``: strong blur, 10-25 levels of noise, JPEG q30-55, often re-saved (low light, re-shared);
- ``chain``: a chain of saves, no blur, no noise: the camera's full-size JPEG (q80-95), shrunk by an
  app (area, bicubic or bilinear) and saved again at q60-90 with 4:2:0 or 4:4:4 chroma.

Scoring is the standard protocol against the clean, modcropped HR (:mod:`.protocol`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from ..data.degrade import DegradeConfig, apply_with_file, sample_params
from ..io import atomic_write
from ..resize import modcrop
from .protocol import list_images, load_hr, set_name

_BLIND = dict(clean_share=0.0, blur_prob=1.0, aniso_prob=0.5, noise_prob=1.0, jpeg_prob=1.0)

LEVELS: dict[str, DegradeConfig] = {
    "web": DegradeConfig(
        clean_share=0.0, blur_prob=0.0, resize_kernels=("area",), resize_weights=(1.0,), noise_prob=0.0,
        jpeg_prob=1.0, jpeg_quality=(60, 85), second_prob=0.0,
    ),
    "mild": DegradeConfig(
        **_BLIND, blur_sigma=(0.2, 0.5), gauss_sigma=(1.0, 5.0), poisson_prob=0.3,
        poisson_peak=(1500.0, 4000.0), jpeg_quality=(75, 95), second_prob=0.0,
    ),
    "medium": DegradeConfig(
        **_BLIND, blur_sigma=(0.35, 0.75), gauss_sigma=(4.0, 12.0), poisson_prob=0.3,
        poisson_peak=(400.0, 1500.0), jpeg_quality=(50, 80), second_prob=0.2,
    ),
    "heavy": DegradeConfig(
        **_BLIND, blur_sigma=(0.6, 1.0), gauss_sigma=(10.0, 25.0), poisson_prob=0.3,
        poisson_peak=(100.0, 400.0), jpeg_quality=(30, 55), second_prob=0.4,
        second_gauss_sigma=(1.0, 5.0), second_jpeg_quality=(60, 85),
    ),
    "chain": DegradeConfig(
        clean_share=0.0, blur_prob=0.0, resize_kernels=("area", "bicubic", "bilinear"),
        resize_weights=(0.5, 0.25, 0.25), noise_prob=0.0, jpeg_prob=1.0, jpeg_quality=(60, 90),
        second_prob=0.0,
        camera_jpeg_prob=1.0, camera_jpeg_quality=(80, 95), subsampling=("4:2:0", "4:4:4"),
    ),
}
LEVEL_CHOICES = (*LEVELS, "all")
DEFAULT_SEED = 2026
MANIFEST = "manifest.json"


def levels_for(choice: str) -> list[str]:
    """``web``, ``all`` or a comma list (``mild,heavy``) -> level names in the order given, once each."""
    names = list(LEVELS) if choice == "all" else [c.strip() for c in choice.split(",") if c.strip()]
    bad = [n for n in names if n not in LEVELS]
    if bad or not names:
        raise ValueError(f"unknown degradation level {(bad or [choice])[0]!r}; choose from "
                         f"{', '.join(LEVEL_CHOICES)} (or a comma list)")
    return list(dict.fromkeys(names))


def set_folder_name(hr_dir: str | Path, level: str, scale: int) -> str:
    return f"{set_name(hr_dir)}-{level}-x{scale}"


def _stream(seed: int, level: str, name: str) -> np.random.Generator:
    # per image: adding or removing one image leaves every other image's degradation as it was
    return np.random.default_rng([seed, zlib.crc32(level.encode()), zlib.crc32(name.encode())])


def _header(hr_dir: str | Path, scale: int, level: str, seed: int) -> dict:
    if level not in LEVELS:
        raise ValueError(f"unknown degradation level {level!r}; choose from {', '.join(LEVELS)}")
    header = {"hr_dir": str(Path(hr_dir).resolve()), "scale": scale, "level": level, "seed": seed,
              "config": LEVELS[level].to_dict()}
    # as it reads back from manifest.json (tuples become lists), so that the two compare equal
    return json.loads(json.dumps(header))


def _hr_images(hr_dir: str | Path) -> list[Path]:
    images = list_images(hr_dir)
    if not images:
        raise ValueError(f"no images in {hr_dir}")
    stems = [p.stem for p in images]
    dup = sorted({s for s in stems if stems.count(s) > 1})
    if dup:
        raise ValueError(f"{hr_dir}: several images named {dup[0]!r} (their LR files would collide)")
    return images


def existing_set(
    hr_dir: str | Path, out_dir: str | Path, scale: int, level: str, seed: int = DEFAULT_SEED
) -> dict | None:
    """The manifest of the set already at ``out_dir`` when it is this very set (same HR files by
    checksum, scale, level, seed, ranges; every LR file intact), None when ``out_dir`` is absent or an
    empty folder. Anything else there raises ValueError: it is never overwritten."""
    header, out = _header(hr_dir, scale, level, seed), Path(out_dir)
    if not out.exists():
        return None
    if not out.is_dir():
        raise ValueError(f"{out} exists and is not a folder")
    if not (out / MANIFEST).is_file():
        if any(out.iterdir()):
            raise ValueError(f"{out} is not empty and holds no degraded set ({MANIFEST} missing); "
                             "remove it or choose another folder")
        return None
    try:
        old = json.loads((out / MANIFEST).read_text())
        same = {k: old.get(k) for k in header} == header and _intact(out, old) and _same_hr(hr_dir, old)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        same = False
    if not same:
        raise ValueError(f"{out} holds another degraded set (other HR images, scale, level or seed, or "
                         "files changed since); remove it or choose another folder")
    return old


def build_degraded_set(
    hr_dir: str | Path, out_dir: str | Path, scale: int, level: str, seed: int = DEFAULT_SEED
) -> dict:
    """Write ``out_dir/<stem>_x<scale>.jpg`` (PNG where the chain ends lossless) for every image of
    ``hr_dir`` and ``out_dir/manifest.json``; return the manifest. Gray HR images are degraded as RGB
    (a gray photo is still uploaded as a colour JPEG more often than not). An existing set built with
    the same inputs and settings is kept (see :func:`existing_set`); any other content is an error.

    The set is written into a hidden sibling folder and renamed into place when complete, so
    ``out_dir`` never holds a partial set (an interrupted build leaves nothing behind)."""
    header, out = _header(hr_dir, scale, level, seed), Path(out_dir)
    old = existing_set(hr_dir, out, scale, level, seed)
    if old is not None:
        return old
    cfg = LEVELS[level]
    images = _hr_images(hr_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir()
    try:
        files = []
        for path in images:
            hr = modcrop(load_hr(path), scale)
            rgb = np.repeat(hr[:, :, None], 3, axis=2) if hr.ndim == 2 else hr
            rng = _stream(seed, level, path.name)
            params = sample_params(cfg, scale, rng)
            lr, data = apply_with_file(rgb, scale, params, rng)
            target = tmp / f"{path.stem}_x{scale}{'.jpg' if data is not None else '.png'}"
            payload = data if data is not None else _png(lr)
            atomic_write(target, payload)
            files.append({
                "hr": path.name, "hr_sha256": _sha256(path), "lr": target.name,
                "lr_sha256": hashlib.sha256(payload).hexdigest(),
                "params": params.to_dict(),
            })
        manifest = {**header, "files": files}
        atomic_write(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
        try:
            if out.is_dir():
                out.rmdir()  # an empty folder (existing_set refused any other); rename wants it gone
            os.rename(tmp, out)
        except OSError:
            # another process finished the same set first: keep its copy when it is this set
            if existing_set(hr_dir, out, scale, level, seed) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return json.loads((out / MANIFEST).read_text())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return json.loads(json.dumps(manifest))


def _png(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _intact(out: Path, manifest: dict) -> bool:
    return all(
        (out / f["lr"]).is_file() and _sha256(out / f["lr"]) == f["lr_sha256"] for f in manifest["files"]
    )


def _same_hr(hr_dir: str | Path, manifest: dict) -> bool:
    """The HR folder still holds exactly the images the set was made from, byte for byte."""
    images = list_images(hr_dir)
    files = manifest["files"]
    return [p.name for p in images] == [f["hr"] for f in files] and all(
        _sha256(p) == f["hr_sha256"] for p, f in zip(images, files, strict=True)
    )
