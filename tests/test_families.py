"""sr.families: the product rules of sr's own families, read by every caller from one table."""

from __future__ import annotations

import pytest

from sr import AUTO_MODEL, DEFAULT_MODEL, NATURAL_MODEL, PHOTO_MODEL
from sr.families import AUTO, BY_NAME, DENOISE_MODELS, LOOK_MODELS, family_of_model, takes_denoise, takes_look
from sr.request import RequestError, UpscaleRequest


@pytest.mark.parametrize("model,denoise,look", [
    (PHOTO_MODEL, True, True), (f"{PHOTO_MODEL}-x3", True, True), (AUTO_MODEL, True, True),
    (DEFAULT_MODEL, False, False), (NATURAL_MODEL, False, False), (f"{NATURAL_MODEL}-x4", False, False),
    ("photo.safetensors", False, False), ("weights/photo-x2.safetensors", False, False),
    ("realesr.pth", False, False), (f"{PHOTO_MODEL}-x7", False, False), (None, False, False),
])
def test_which_models_take_denoise_and_look(model, denoise, look) -> None:
    assert takes_denoise(model) is denoise
    assert takes_look(model) is look


def test_the_blend_partners_are_the_table_s() -> None:
    photo = BY_NAME[PHOTO_MODEL]
    assert (photo.denoise_base, photo.look_with) == (DEFAULT_MODEL, NATURAL_MODEL)
    assert AUTO.sides == (DEFAULT_MODEL, PHOTO_MODEL)
    assert DENOISE_MODELS == LOOK_MODELS == (PHOTO_MODEL, AUTO_MODEL)
    assert family_of_model(f"{DEFAULT_MODEL}-x2") is BY_NAME[DEFAULT_MODEL]
    assert family_of_model("x.pth") is None


def test_a_request_is_refused_what_its_model_does_not_take() -> None:
    with pytest.raises(RequestError, match="denoise applies only to the models photo and auto"):
        UpscaleRequest(model=DEFAULT_MODEL, denoise=0.5).validate()
    with pytest.raises(RequestError, match="look"):
        UpscaleRequest(model="model.pth", look=0.5).validate()
    UpscaleRequest(model=f"{PHOTO_MODEL}-x2", denoise=0.5, look=0.25).validate()


def test_the_engine_blends_photo_with_the_table_s_partners() -> None:
    import numpy as np

    from sr.inference import Upscaler
    from sr.io import DecodedImage

    img = DecodedImage(np.random.default_rng(0).random((12, 16, 3), dtype=np.float32))
    result = Upscaler(PHOTO_MODEL, denoise=0.5, look=0.5, device="cpu", threads=1).upscale(img)
    assert result.model == f"{PHOTO_MODEL}-x2@denoise=0.5,look=0.5"
    plain = Upscaler(PHOTO_MODEL, device="cpu", threads=1).upscale(img)
    assert plain.model == f"{PHOTO_MODEL}-x2"
    assert not np.array_equal(result.image.pixels, plain.image.pixels)
