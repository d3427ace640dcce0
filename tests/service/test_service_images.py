"""The API keeps what the CLI keeps: gray, alpha, 16-bit, EXIF orientation, ICC profile."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageCms


def _post(client, data: bytes, **fields) -> Image.Image:
    r = client.post("/v1/upscale", files={"file": ("in", data)}, data={k: str(v) for k, v in fields.items()})
    assert r.status_code == 200, r.text
    return Image.open(io.BytesIO(r.content))


@pytest.mark.parametrize("mode, fmt, out_format, out_mode", [
    ("L", "PNG", "png", "L"),            # gray stays gray
    ("RGBA", "PNG", "png", "RGBA"),      # alpha kept in PNG
    ("RGBA", "PNG", "webp", "RGBA"),     # ... and in WebP
    ("RGBA", "PNG", "jpg", "RGB"),       # JPEG has no alpha: composited
    ("I;16", "PNG", "same", "I;16"),     # 16-bit stays 16-bit in PNG
    ("RGB", "JPEG", "same", "RGB"),      # same: JPEG in, JPEG out
])
def test_modes_survive(make_client, make_image, mode: str, fmt: str, out_format: str, out_mode: str) -> None:
    im = _post(make_client(), make_image(16, 12, mode=mode, fmt=fmt), format=out_format, scale=2)
    assert im.size == (32, 24)
    assert im.mode == out_mode or (out_mode == "I;16" and im.mode in ("I;16", "I"))
    if fmt == "JPEG" and out_format == "same":
        assert im.format == "JPEG"


def test_alpha_values_follow_the_input(make_client) -> None:
    rgba = np.zeros((12, 16, 4), np.uint8)
    rgba[..., :3] = 128
    rgba[:, :8, 3] = 255  # left half opaque, right half transparent
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="PNG")
    alpha = np.asarray(_post(make_client(), buf.getvalue(), scale=2))[..., 3]
    assert alpha[:, :12].min() >= 250 and alpha[:, 20:].max() <= 5


def test_exif_orientation_is_applied(make_client, make_image) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display: a 20x10 file shows as 10x20
    data = make_image(20, 10, fmt="JPEG", exif=exif.tobytes())
    assert _post(make_client(), data, scale=2).size == (20, 40)


def test_icc_profile_is_written_back(make_client, make_image) -> None:
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    im = _post(make_client(), make_image(16, 12, icc_profile=icc), format="png", scale=2)
    assert im.info.get("icc_profile") == icc
