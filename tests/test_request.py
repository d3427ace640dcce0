"""sr.request.UpscaleRequest: one validation, one output-naming rule, one same-format rule."""

from __future__ import annotations

import pytest

from sr.request import (
    MAX_OUTSCALE,
    MAX_SIDE,
    RequestError,
    UpscaleRequest,
    parse_look,
    same_format,
    takes_denoise,
    takes_look,
)


def test_a_plain_request_is_valid_and_frozen() -> None:
    req = UpscaleRequest(scale=2, format="jpg", quality=80, tta=True)
    assert req.validate() is req
    with pytest.raises(AttributeError):
        req.scale = 3  # type: ignore[misc]


@pytest.mark.parametrize("fields, message", [
    ({"scale": 0}, "scale must be a positive integer"),
    ({"scale": True}, "scale must be a positive integer"),
    ({"outscale": 2.0, "width": 10}, "either outscale or width/height"),
    ({"outscale": float("nan")}, "outscale must be a number > 0"),
    ({"outscale": -1}, "outscale must be a number > 0"),
    ({"width": 0}, "width must be a positive number of pixels"),
    ({"height": 2.5}, "height must be a positive number of pixels"),
    ({"quality": 101}, "quality must be 1-100"),
    ({"alpha_mode": "nearest"}, "alpha_mode must be one of bicubic, model"),
    ({"format": "gif"}, "format must be an output format or 'same'"),
    ({"precision": "fp16"}, "precision must be one of auto, fp32, bf16"),
    ({"denoise": 2}, "denoise must be a number from 0 to 1"),
    ({"denoise": 0.5, "model": "asa-base"}, "denoise applies only to the models photo and auto"),
    ({"look": 1.5, "model": "photo"}, r"look must be a number from 0 to 1 \(0 = photo, 1 = photo-natural\)"),
    ({"look": "abc", "model": "photo"}, "look must be a number from 0 to 1, got 'abc'"),
    ({"look": True, "model": "photo"}, "look must be a number from 0 to 1"),
    ({"look": 0.5, "model": "asa-base"}, "look applies only to the models photo and auto, not 'asa-base'"),
    ({"look": 0, "model": "photo-natural"}, "look applies only to the models photo and auto"),
])
def test_validation_names_the_bad_value(fields: dict, message: str) -> None:
    with pytest.raises(RequestError, match=message) as e:
        UpscaleRequest(**fields).validate()
    assert e.value.field in fields  # the field at fault, whatever the caller calls it


@pytest.mark.parametrize("fields, message", [
    ({"outscale": 2.0, "height": 10}, "give either --outscale or --width/--height, not both"),
    ({"alpha_mode": "x"}, "--alpha-mode must be one of bicubic, model, got 'x'"),
    ({"denoise": 0.5, "model": "asa-base"},
     "--denoise applies only to the models photo and auto, not 'asa-base'"),
    ({"denoise": -1, "model": "photo"}, "--denoise must be a number from 0 to 1"),
    ({"look": 0.5, "model": "asa-base"}, "--look applies only to the models photo and auto, not 'asa-base'"),
    ({"look": -0.1, "model": "auto"}, "--look must be a number from 0 to 1"),
])
def test_validation_speaks_the_callers_names(fields: dict, message: str) -> None:
    # The CLI renders a field as its flag; the message is otherwise the one the service sends.
    with pytest.raises(RequestError) as e:
        UpscaleRequest(**fields).validate(name=lambda f: "--" + f.replace("_", "-"))
    assert str(e.value).startswith(message)
    with pytest.raises(RequestError) as plain:
        UpscaleRequest(**fields).validate()
    assert str(plain.value) == str(e.value).replace("--alpha-mode", "alpha_mode").replace("--", "")


def test_formats_by_either_name_or_same_are_valid() -> None:
    for fmt in ("png", "jpg", "jpeg", "webp", "same"):
        req = UpscaleRequest(format=fmt)
        assert req.validate() is req, fmt  # the request itself, as given, when every value is usable


def test_denoise_goes_with_photo_and_auto_only() -> None:
    for model in ("photo", "photo-x2", "photo-x4", "auto"):
        req = UpscaleRequest(model=model, denoise=0.3)
        assert takes_denoise(model) and req.validate() is req, model
    for model in ("asa-base", "photo-x7", "photos", "w/photo.safetensors", "photo.safetensors"):
        assert not takes_denoise(model)
        with pytest.raises(RequestError, match="denoise applies only to the models photo and auto"):
            UpscaleRequest(model=model, denoise=0.3).validate()


def test_look_goes_with_photo_and_auto_only_and_parses_text() -> None:
    for model in ("photo", "photo-x2", "auto"):
        req = UpscaleRequest(model=model, look=0.5, denoise=0.3)
        assert takes_look(model) and req.validate() is req, model
    for model in ("asa-base", "photo-natural", "photo-natural-x2", "w/photo.safetensors"):
        assert not takes_look(model)
        with pytest.raises(RequestError, match="look applies only to the models photo and auto"):
            UpscaleRequest(model=model, look=0.5).validate()
    assert UpscaleRequest(model="photo").look is None  # not given: photo as trained
    assert parse_look(" 0.25 ") == 0.25 and parse_look(0) == 0.0 and parse_look(1) == 1.0
    for bad in ("nan", "inf", "-0.5", "", None, [0.5]):
        with pytest.raises(RequestError) as e:
            parse_look(bad)
        assert e.value.field == "look"


@pytest.mark.parametrize("fields, suffix", [
    ({}, "_x2"), ({"scale": 4}, "_x4"), ({"outscale": 1.5}, "_x1.5"), ({"outscale": 3.0}, "_x3"),
    ({"width": 800}, "_w800"), ({"height": 600}, "_h600"), ({"width": 800, "height": 600}, "_800x600"),
    ({"width": 800, "budget_map": True}, "_budget"),
])
def test_output_suffix_follows_the_request(fields: dict, suffix: str) -> None:
    assert UpscaleRequest(**fields).output_suffix(2) == suffix


@pytest.mark.parametrize("source, fmt", [
    ("PNG", "png"), ("JPEG", "jpg"), (".jpeg", "jpg"), (".JPG", "jpg"), ("webp", "webp"), (".webp", "webp"),
    (".bmp", "png"), ("BMP", "png"), (".gif", "png"), (None, "png"), ("", "png"), (".nope", "png"),
])
def test_same_format_by_decoded_name_or_suffix_agree(source: str | None, fmt: str) -> None:
    assert same_format(source) == fmt


@pytest.mark.parametrize("fields, message", [
    ({"outscale": 1e308}, "outscale must be at most 16384"),
    ({"outscale": float("inf")}, "outscale must be a number > 0"),
    ({"outscale": 16384.5}, "outscale must be at most 16384"),
    ({"width": 10**400}, "width must be at most 268435456 pixels"),
    ({"height": 2**28 + 1}, "height must be at most 268435456 pixels"),
    ({"scale": 10**400}, "scale must be at most 16384"),
    ({"quality": 10**400}, "quality must be 1-100"),
    ({"denoise": 10**400, "model": "photo"}, "denoise must be a number from 0 to 1"),
    ({"look": -(10**400), "model": "photo"}, "look must be a number from 0 to 1"),
])
def test_absurd_numbers_are_refused_before_any_arithmetic_in_one_line(fields: dict, message: str) -> None:
    # outscale=1e308 or a 401-digit width must not reach sizing's arithmetic (an OverflowError, a 500)
    with pytest.raises(RequestError, match=message) as e:
        UpscaleRequest(**fields).validate()
    assert e.value.field in fields and len(str(e.value)) < 200 and "\n" not in str(e.value)


def test_the_caps_refuse_no_size_the_engine_could_make() -> None:
    from sr.inference.sizing import MAX_OUTPUT_PIXELS, output_size

    # the largest factor and side still plan (a 1x1 input), one more is the request's refusal
    assert output_size(1, 1, None, float(MAX_OUTSCALE), None, None, [2])[0] == (MAX_OUTSCALE, MAX_OUTSCALE)
    assert output_size(1, 1, None, None, MAX_SIDE, 1, [2])[0] == (1, MAX_SIDE)
    assert MAX_OUTSCALE ** 2 == MAX_SIDE == MAX_OUTPUT_PIXELS
    assert UpscaleRequest(outscale=float(MAX_OUTSCALE), width=None).validate()
    assert UpscaleRequest(width=MAX_SIDE, height=1).validate()
    for fields in ({"outscale": MAX_OUTSCALE + 0.01}, {"width": MAX_SIDE + 1}):
        with pytest.raises(RequestError):
            UpscaleRequest(**fields).validate()
