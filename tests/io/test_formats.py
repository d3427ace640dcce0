"""sr.io.formats: the FORMATS table and every list and helper derived from it.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.io import (
    ImageEncodeError,
    format_from_path,
    normalize_format,
    read_image,
    suffix_for,
    write_image,
)
from tests.io.images import small_image

pytestmark = pytest.mark.filterwarnings("error")


def test_format_helpers():
    assert [normalize_format(f) for f in ("PNG", ".jpg", "JPEG", "webp")] == ["png", "jpeg", "jpeg", "webp"]
    assert [suffix_for(f) for f in ("png", "jpeg", "WEBP")] == [".png", ".jpg", ".webp"]
    assert format_from_path("a/b.JPG") == "jpeg"
    with pytest.raises(ImageEncodeError, match=r"unsupported output format 'gif' \(use png, jpg or webp\)"):
        normalize_format("gif")
    with pytest.raises(ImageEncodeError, match=r"no file suffix .*\(use \.png, \.jpg or \.webp\)"):
        format_from_path("out")


def test_every_format_list_is_derived_from_the_formats_table():
    import typing

    import sr.service.routes.upscale
    from sr.batch.jobs import same_format
    from sr.commands.upscale import format_choices
    from sr.io import FORMATS, listed_suffixes, read_formats, read_suffixes
    from sr.service.formats import mime_types, output_format, request_formats

    assert read_formats() == ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF", "PPM", "AVIF")
    assert tuple(f.name for f in FORMATS.values() if f.writable) == ("png", "jpeg", "webp")
    assert format_choices() == ("png", "jpg", "webp", "same")
    assert read_suffixes() == {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm",
                               ".pgm", ".pbm", ".pnm", ".avif"}
    assert listed_suffixes() == {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
    same = [same_format(Path(f"a{s}")) for s in (".JPEG", ".webp", ".png", ".tif")]
    assert same == ["jpg", "webp", "png", "png"]
    assert request_formats() == ("png", "jpg", "jpeg", "webp", "same")
    want = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp"}
    assert mime_types() == sr.service.routes.upscale.MIME == want
    assert [output_format("same", s) for s in ("PNG", "JPEG", "MPO", "WEBP", "TIFF", None)] == [
        "png", "jpg", "jpg", "webp", "png", "png"]
    assert output_format("jpeg", None) == "jpg"
    hint = typing.get_type_hints(sr.service.routes.upscale.upscale, include_extras=True)["fmt"]
    assert typing.get_args(typing.get_args(hint)[0]) == request_formats()


def test_a_new_format_is_one_row(tmp_path, monkeypatch):
    """One row added to FORMATS reaches the readers, the writers, the CLI and the dataset listings."""
    import sr.io
    import sr.service.formats
    from sr.batch.jobs import collect_inputs, same_format
    from sr.cli import build_parser
    from sr.data.patches import find_images
    from sr.evaluation import list_images

    monkeypatch.setitem(sr.io.FORMATS, "tga", sr.io.ImageFormat(
        "tga", "TGA", (".tga",), "image/x-tga", writable=True, max_side=65_535, signatures=(b"\0\0\x02",)))
    Image.fromarray(np.full((4, 6, 3), 99, np.uint8)).save(tmp_path / "a.tga")
    assert read_image(tmp_path / "a.tga").width == 6
    write_image(tmp_path / "b.tga", small_image())
    with Image.open(tmp_path / "b.tga") as im:
        assert im.format == "TGA" and suffix_for("TGA") == ".tga"
    assert [p.name for p in list_images(tmp_path)] == ["a.tga", "b.tga"]
    assert [p.name for p in find_images([tmp_path])] == ["a.tga", "b.tga"]
    assert [j.src.name for j in collect_inputs([str(tmp_path)], False)] == ["a.tga", "b.tga"]
    assert same_format(tmp_path / "a.tga") == "tga"
    args = build_parser("upscale").parse_args(["upscale", "x.png", "-o", "out", "-f", "tga"])
    assert args.format == "tga"
    assert sr.service.formats.request_formats()[-2:] == ("tga", "same")
    assert sr.service.formats.mime_types()["tga"] == "image/x-tga"
    assert sr.service.formats.output_format("same", "TGA") == "tga"
    assert sr.io.looks_like_image((tmp_path / "a.tga").read_bytes())
