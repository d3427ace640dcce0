"""The decoder's holes as requests: each hostile file gets a 4xx that names its reason,
costs the header read a small fraction of its 2 s of CPU (the sandbox's own CPU count, not a wall
clock), and no decoder process is killed or restarted for it.

The bombs are small versions of the real ones: the walk that refuses them does not read further
for a bigger one (tests/io/test_hostile_structures.py shows it refuses them before Pillow opens them).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from tests.io.test_hostile_structures import _chain, _float_rgb_tiff, _strips_tiff
from tests.service.test_service_sandbox import _xmp_number_tiff

ACCEPTED = "(accepted: PNG, JPEG, WEBP, BMP, TIFF, GIF, AVIF)"


def _png_header(width: int, height: int) -> bytes:
    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def _gif_with_a_junk_byte(make_image: Callable[..., bytes]) -> bytes:
    from tests.io.images import frames, save

    first, *rest = frames(5)
    gif = save(first, "GIF", save_all=True, append_images=rest)
    start = 13 + ((3 << ((gif[10] & 7) + 1)) if gif[10] & 0x80 else 0)
    return gif[:start] + b"\x00" + gif[start:]


HOSTILE: list[tuple[str, Callable[..., bytes], int, str]] = [
    ("plain PNM, comments in its pixels", lambda mi: b"P1\n8 8\n" + b"#\n" * 500_000 + b"01" * 32, 415,
     f"not a supported image file: PPM images are not accepted here {ACCEPTED}"),
    ("PGM, a long header comment", lambda mi: b"P5\n#" + b"x" * 500_000 + b"\n8 8\n255\n" + bytes(64), 415,
     f"not a supported image file: PPM images are not accepted here {ACCEPTED}"),
    ("TIFF chain behind II\\0*", lambda mi: _chain(b"II\x00*", 100_000), 415,
     "unsupported image: TIFF image with over 64 frames"),
    ("BigTIFF chain", lambda mi: _chain(b"II+\x00", 50_000), 415,
     "unsupported image: TIFF image with over 64 frames"),
    ("TIFF, next directory past the end", lambda mi: _chain(b"MM*\x00", 1)[:-4] + b"\x00\x10\x00\x00", 400,
     "corrupt or truncated image: truncated TIFF: image directory 2 is at byte 1,048,576, past the end"),
    ("TIFF of 65,537 one-row strips", lambda mi: _strips_tiff(1, 65_537), 422,
     "image refused before decoding: TIFF with 65,537 strips (over 65,536"),
    ("float RGB TIFF", lambda mi: _float_rgb_tiff(), 415,
     "unsupported pixel format: 3 samples of 32-bit floating point (a valid image, but only"),
    ("GIF, a junk byte before 5 frames", _gif_with_a_junk_byte, 415,
     "unsupported image: GIF image with 5 frames"),
]


def _cpu(client: TestClient) -> float:
    intake = client.app.state.service.intake
    return intake.small.stats["cpu_s"] + intake.large.stats["cpu_s"]


def _restarts(client: TestClient) -> tuple[int, int]:
    service = client.app.state.service
    boxes = (service.intake.small, service.intake.large, service.decoder)
    return sum(b.stats["killed"] for b in boxes), sum(b.stats["started"] for b in boxes)


@pytest.mark.parametrize("name, make, status, detail", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_file_is_refused_with_its_reason_for_little_cpu(make_client, make_image, name: str,
                                                                  make: Callable[..., bytes], status: int,
                                                                  detail: str) -> None:
    client = make_client()
    data = make(make_image)
    before, restarts = _cpu(client), _restarts(client)
    for route in ("/v1/upscale", "/v1/preview"):
        r = client.post(route, files={"file": ("upload", data, "application/octet-stream")})
        assert r.status_code == status, r.text
        assert r.json()["detail"].startswith(detail), r.json()["detail"]
    assert _cpu(client) - before < 0.5  # the header read's CPU, of its 2 s: the walk refused it
    assert _restarts(client) == restarts
    assert client.post("/v1/upscale", files={"file": ("a.png", make_image(8, 8))}).status_code == 200


def test_a_decoder_exception_is_a_400_with_its_reason_and_the_child_lives_on(make_client) -> None:
    # Before: answered 422 "refused before decoding", the child killed and restarted.
    client = make_client()
    restarts = _restarts(client)
    r = client.post("/v1/upscale", files={"file": ("a.tif", _xmp_number_tiff())})
    assert r.status_code == 400
    assert r.json()["detail"] == ("corrupt or truncated image: truncated or corrupt image data "
                                  "(expected string or bytes-like object, got 'int')")
    assert _restarts(client) == restarts


def test_over_pillows_bomb_limit_the_413_quotes_the_servers_own_limit(make_client) -> None:
    # Over 178,956,970 pixels the 413 used to quote Pillow's "decompression bomb" text.
    client = make_client()
    limit = client.app.state.service.settings.max_pixels
    for width, height in ((20_000, 9_000), (5_000, 5_000)):  # past Pillow's limit, and under it
        r = client.post("/v1/upscale", files={"file": ("a.png", _png_header(width, height))})
        assert r.status_code == 413
        assert r.json()["detail"].startswith("image too large: ")
        assert r.json()["detail"].endswith(f"{width * height:,} pixels, over the limit of {limit:,} "
                                           "(the server's SR_MAX_PIXELS)")


def test_the_service_takes_the_formats_people_upload_and_names_them_when_refusing(make_client,
                                                                                 make_image) -> None:
    client = make_client()
    for fmt in ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF"):
        r = client.post("/v1/upscale", files={"file": ("in", make_image(8, 6, fmt=fmt))})
        assert r.status_code == 200 and r.headers["x-image-size"] == "16x12", (fmt, r.text)
    r = client.post("/v1/upscale", files={"file": ("in.ppm", make_image(8, 6, fmt="PPM"))})
    assert r.status_code == 415
    assert r.json()["detail"] == f"not a supported image file: PPM images are not accepted here {ACCEPTED}"
