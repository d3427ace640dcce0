"""The CLI and the service name (and size) the same request's output identically (sr.request's rule)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from sr.cli import main


@pytest.mark.parametrize("fields", [
    {"width": 50}, {"height": 30}, {"width": 50, "height": 30}, {"outscale": 1.5}, {}, {"scale": 3},
])
def test_cli_and_service_name_and_size_a_request_alike(make_client, make_image, weights_dir: Path,
                                                      tmp_path: Path, fields: dict) -> None:
    data = make_image(20, 10)
    r = make_client().post("/v1/upscale", files={"file": ("photo.png", data, "image/png")},
                           data={k: str(v) for k, v in fields.items()}|{"format": "png"})
    assert r.status_code == 200, r.text
    service_name = re.fullmatch(r'attachment; filename="(.+)"', r.headers["content-disposition"]).group(1)

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "photo.png").write_bytes(data)
    scale = fields.get("scale", 2)
    flags = [f"--{k}={v}" for k, v in fields.items() if k != "scale"]
    assert main(["upscale", str(tmp_path / "in" / "photo.png"), "-o", str(tmp_path / "out"), "--threads", "1",
                 "--model", str(weights_dir / f"asa-small-x{scale}.safetensors"), *flags]) == 0
    written = [p.name for p in (tmp_path / "out").iterdir()]
    assert written == [service_name]
    with Image.open(tmp_path / "out" / service_name) as cli_out:
        assert cli_out.size == Image.open(io.BytesIO(r.content)).size
