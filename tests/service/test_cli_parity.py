"""The CLI and the service write the same bytes for the same request."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr.cli import main

from .conftest import image_bytes


@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_semi_transparent_input_gives_the_same_bytes_from_cli_and_service(
    make_client, weights_dir: Path, tmp_path: Path, fmt: str
) -> None:
    # random RGBA: every alpha level, so compositing on white before or after rounding differs
    data = image_bytes(80, 64, mode="RGBA", seed=3)
    (tmp_path / "in.png").write_bytes(data)
    code = main(["upscale", str(tmp_path / "in.png"), "-o", str(tmp_path / "out"), "-f", fmt,
                 "--model", "asa-small", "--weights-dir", str(weights_dir), "--threads", "1"])
    assert code == 0
    (written,) = (tmp_path / "out").iterdir()
    client = make_client()
    r = client.post("/v1/upscale", files={"file": ("in.png", data)}, data={"format": fmt, "scale": "2"})
    assert r.status_code == 200, r.text
    assert written.read_bytes() == r.content


@pytest.mark.parametrize("spelling", ["off", "0", "none", "OFF"])
def test_cli_takes_the_tile_spellings_the_service_takes(tmp_path: Path, spelling: str) -> None:
    src = tmp_path / "in.png"
    src.write_bytes(image_bytes(40, 32, seed=1))
    code = main(["upscale", str(src), "-o", str(tmp_path / spelling), "--model", "asa-base",
                 "--tile", spelling, "--threads", "1"])
    assert code == 0
    code = main(["upscale", str(src), "-o", str(tmp_path / "whole"), "--model", "asa-base", "--tile", "0",
                 "--threads", "1"])
    assert code == 0
    assert (tmp_path / spelling / "in_x2.png").read_bytes() == (tmp_path / "whole" / "in_x2.png").read_bytes()
