"""Make the small sample images in data/ from scikit-image's bundled photos (no downloads).

Each photo is shrunk with the project's MATLAB-bicubic ``imresize`` (the degradation the models are
trained on), so ``sr upscale data -o out`` has realistic low-resolution inputs. Run from the repo
root: ``python data/make_samples.py``. Deterministic: the same files every time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from skimage import data

from sr.resize import imresize

HERE = Path(__file__).resolve().parent
# name -> (loader, scale, crop (top, left, height, width) of the shrunk image or None)
SAMPLES = {
    "astronaut": (data.astronaut, 0.5, (0, 32, 192, 192)),
    "chelsea": (data.chelsea, 0.5, None),
    "coffee": (data.coffee, 0.4, None),
    "rocket": (data.rocket, 0.375, None),
    "camera": (data.camera, 0.375, None),  # gray: the gray path (replicated to RGB, averaged back)
}


def make(name: str) -> Path:
    load, scale, crop = SAMPLES[name]
    img = imresize(load(), scale)  # uint8 in, uint8 out (rounded like MATLAB)
    if crop is not None:
        top, left, h, w = crop
        img = img[top : top + h, left : left + w]
    path = HERE / f"{name}.png"
    Image.fromarray(np.ascontiguousarray(img)).save(path, optimize=True)
    return path


def main() -> None:
    total = 0
    for name in SAMPLES:
        path = make(name)
        total += path.stat().st_size
        with Image.open(path) as im:
            print(f"{path.name}: {im.width}x{im.height} {im.mode}, {path.stat().st_size / 1024:.0f} KB")
    print(f"total {total / 1024:.0f} KB")


if __name__ == "__main__":
    main()
