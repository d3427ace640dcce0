"""The batch's stages and memory: the input stays integer samples, and the writer takes the output's
samples so that they are freed before the encoder allocates its buffers."""

from __future__ import annotations

import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.batch.jobs import Job
from sr.batch.options import DEFAULT_REQUEST, BatchOptions
from sr.batch.samples import pack
from sr.batch.stages import Output, read_input, upscale_input, write_output
from sr.io import DecodedImage, encode_image, read_image


def photo(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "in.jpg"
    Image.fromarray(rng.integers(0, 256, (30, 44, 3), dtype=np.uint8)).save(path, quality=90)
    return path


def options(tmp_path: Path, model: Path | None = None) -> BatchOptions:
    request = replace(DEFAULT_REQUEST, format="jpg", **({"model": str(model)} if model else {}))
    return BatchOptions(inputs=(str(tmp_path),), output=str(tmp_path / "out"), request=request, threads=1,
                        overwrite=True)


def test_an_8bit_input_is_read_as_samples(tmp_path):
    src = photo(tmp_path)
    image, problem = read_input(Job(src, Path("in")), max_pixels=10**8)
    assert problem is None and image.pixels.dtype == np.uint8
    assert image.pixels.tobytes() == np.rint(read_image(src).pixels * 255).astype(np.uint8).tobytes()


def test_the_writer_takes_the_samples_and_writes_them(tmp_path):
    planes = np.random.default_rng(1).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    expected = encode_image(DecodedImage(planes.copy()), "jpg", DEFAULT_REQUEST.quality)
    output = Output(pack(DecodedImage(planes)), None, no_budget_map=False, model="m")
    alive = weakref.ref(planes)
    del planes
    job = Job(tmp_path / "in.png", Path("in"), out=tmp_path / "out" / "in_x2.jpg")
    written = write_output(job, output, options(tmp_path))
    assert written.problem is None and written.pixels == 24 * 32 == output.pixels
    assert alive() is None  # the caller still holds the Output, but no longer its samples
    assert job.out.read_bytes() == expected
    with pytest.raises(RuntimeError, match="already taken"):
        output.take_image()


def test_a_job_through_the_stages_writes_what_its_float_decode_gives(tmp_path, tiny_x2):
    """Samples in, tiles converted as they are cut: the file is the one a float32 input gives."""
    from sr.batch.stages import make_upscaler
    from sr.io import write_image

    src = photo(tmp_path)
    opts = options(tmp_path, tiny_x2)
    job = Job(src, Path("in"), out=tmp_path / "out" / "in_x2.jpg")
    image, _ = read_input(job, opts.max_pixels)
    up = make_upscaler(opts)
    output, problem = upscale_input(up, image, job, opts)
    assert problem is None and write_output(job, output, opts).problem is None
    floats = up.run(read_image(src), opts.request).image
    again = write_image(tmp_path / "floats.jpg", floats, "jpg", opts.request.quality)
    assert job.out.read_bytes() == again.read_bytes()
