"""One validation: the CLI and the service refuse the same bad request with the same sentence
(sr.request.UpscaleRequest.validate), the CLI naming flags (exit 2), the service form fields (422)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sr.cli import main


def _as_fields(cli_message: str) -> str:
    """The CLI's sentence with each ``--flag`` written as the request field it stands for."""
    return re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), cli_message)


@pytest.mark.parametrize("fields", [
    {"outscale": 0}, {"outscale": -1.5}, {"outscale": "nan"}, {"outscale": 1.5, "width": 30},
    {"width": 0}, {"height": -3}, {"quality": 0}, {"quality": 101},
    {"model": "asa-small", "denoise": 0.5},
])
def test_the_same_bad_request_gets_the_same_sentence(make_client, make_image, tmp_path: Path, capsys,
                                                     fields: dict) -> None:
    detail = _service(make_client, make_image, fields)
    code, err = _cli(make_image, tmp_path, capsys, fields)
    assert code == 2 and len(err.splitlines()) == 1, err
    cli_message = err.removeprefix("sr upscale: error: ")
    assert "--" in cli_message, cli_message  # the CLI names its flags
    assert _as_fields(cli_message) == detail
    assert not (tmp_path / "out").exists()


def test_a_denoise_out_of_range_is_refused_by_the_one_parser(make_client, make_image, tmp_path: Path,
                                                             capsys) -> None:
    # The CLI parses --denoise's text as argparse reads it (sr.request.parse_denoise, the check the
    # request's validate runs): the same sentence, with the text as typed.
    fields = {"model": "asa-small", "denoise": 2}
    detail = _service(make_client, make_image, fields)
    code, err = _cli(make_image, tmp_path, capsys, fields)
    sentence = "denoise must be a number from 0 to 1 (0 = asa-base, 1 = photo), got "
    assert detail == sentence + "2.0"
    assert code == 2 and f"argument --denoise: {sentence}'2'" in err and len(err.splitlines()) == 1


def _service(make_client, make_image, fields: dict) -> str:
    r = make_client().post("/v1/upscale", files={"file": ("photo.png", make_image(20, 10), "image/png")},
                           data={k: str(v) for k, v in fields.items()})
    assert r.status_code == 422, r.text
    return r.json()["detail"]


def _cli(make_image, tmp_path: Path, capsys, fields: dict) -> tuple[int, str]:
    (tmp_path / "photo.png").write_bytes(make_image(20, 10))
    flags = [f"--{k}={v}" for k, v in fields.items()]
    if "model" not in fields:
        flags.append("--model=asa-small")
    try:
        code = main(["upscale", str(tmp_path / "photo.png"), "-o", str(tmp_path / "out"), *flags])
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    return code, capsys.readouterr().err.strip()


def test_a_scale_the_model_lacks_gets_the_engines_sentence_from_both(
    make_client, make_image, weights_dir: Path, tmp_path: Path, capsys
) -> None:
    # Known only once the model is: the engine's plan_size says it, before any upload is read or
    # any output folder is made.
    weights = str(weights_dir / "asa-small-x2.safetensors")
    r = make_client(model=weights).post("/v1/upscale", files={"file": ("a.png", make_image(20, 10))},
                                        data={"scale": "3"})
    assert r.status_code == 422
    (tmp_path / "a.png").write_bytes(make_image(20, 10))
    code = main(["upscale", str(tmp_path / "a.png"), "-o", str(tmp_path / "out"), "--model", weights,
                 "--scale", "3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"sr upscale: error: {r.json()['detail']}"
    assert "scale 3 is not available for model 'asa-small-x2' (available: 2)" in err
    assert not (tmp_path / "out").exists()
