"""sr.batch.BatchOptions: carries one UpscaleRequest, checked by the request's own validation."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from sr import DEFAULT_CHOICE
from sr.batch import BatchError, BatchOptions
from sr.commands.upscale import add_arguments, flag
from sr.request import UpscaleRequest


def _parse(*argv: str) -> BatchOptions:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return BatchOptions.from_namespace(p.parse_args(["x.png", "-o", "out", *argv]))


def test_the_request_fields_live_in_the_request_only() -> None:
    own = {f.name for f in fields(BatchOptions)}
    assert not own & {f.name for f in fields(UpscaleRequest)}, "a request field copied into BatchOptions"


def test_arguments_become_the_request() -> None:
    opts = _parse("--model", "photo", "--denoise", "0.3", "--outscale", "1.5", "-f", "jpg", "--quality", "80",
                  "--tta", "--alpha-mode", "model", "--precision", "fp32", "--save-budget-map")
    assert opts.request == UpscaleRequest(outscale=1.5, model="photo", denoise=0.3, tta=True,
                                          alpha_mode="model", format="jpg", quality=80, precision="fp32")
    assert opts.save_budget_map and not opts.request.budget_map
    assert _parse().request == UpscaleRequest(model=DEFAULT_CHOICE)


@pytest.mark.parametrize("argv, message", [
    (("--outscale", "2", "--width", "9"), "give either --outscale or --width/--height, not both"),
    (("--outscale", "-1"), "--outscale must be a number > 0, got -1.0"),
    (("--height", "0"), "--height must be a positive number of pixels, got 0"),
    (("--quality", "0"), "--quality must be 1-100, got 0"),
    (("--model", "asa-base", "--denoise", "0.5"),
     "--denoise applies only to the models photo and auto, not 'asa-base'"),
])
def test_checked_says_the_requests_message_with_the_flag(argv: tuple[str, ...], message: str) -> None:
    opts = _parse(*argv)
    with pytest.raises(BatchError) as e:
        opts.checked()
    assert e.value.message(flag) == message
    assert str(e.value) == message.replace("--", "")  # the batch's own words: field names
    assert flag(e.value.field) in message  # the field at fault
    with pytest.raises(ValueError) as plain:  # the same sentence, field names for flags
        opts.request.validate()
    assert str(plain.value) == message.replace("--", "")


def test_checked_keeps_the_batchs_own_checks() -> None:
    for argv, message in ((("--tile", "big"), "--tile must be"),
                          (("--threads", "0"), "--threads must be >= 1"),
                          (("--suffix", "a/b"), "--suffix must not contain")):
        with pytest.raises(BatchError) as e:
            _parse(*argv).checked()
        assert e.value.message(flag).startswith(message)
        assert e.value.field == argv[0].removeprefix("--") and str(e.value).startswith(message[2:])
    with pytest.raises(BatchError, match="budget maps"):
        BatchOptions(inputs=(), output="o", request=UpscaleRequest(budget_map=True)).checked()


def test_a_ray_run_gives_its_actors_the_weights_folder_as_an_absolute_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    opts = BatchOptions(inputs=("x.png",), output="out", ray="", weights_dir="mine").checked()
    assert opts.weights_dir == str(tmp_path / "mine")  # an actor's working folder is not the driver's
    assert BatchOptions(inputs=("x.png",), output="out", weights_dir="mine").checked().weights_dir == "mine"
    assert BatchOptions(inputs=("x.png",), output="out", ray="").checked().weights_dir is None
