"""Every status code of the API, through FastAPI's TestClient on tiny real weights."""

from __future__ import annotations

import io
import shutil
import struct
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

import sr.service.running as service_running
from sr.descriptor import family_of
from sr.service.answer import download_name


def _post(client, data: bytes, name: str = "photo.png", **fields):
    return client.post("/v1/upscale", files={"file": (name, data, "application/octet-stream")},
                       data={k: str(v) for k, v in fields.items()})


def _size(content: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(content)).size


# --- 200 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, mime, pil_format", [
    ("png", "image/png", "PNG"), ("jpg", "image/jpeg", "JPEG"), ("webp", "image/webp", "WEBP"),
    ("same", "image/png", "PNG"),
])
def test_upscale_each_format(make_client, make_image, fmt: str, mime: str, pil_format: str) -> None:
    client = make_client()
    r = _post(client, make_image(24, 20), format=fmt, scale=2)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == mime
    im = Image.open(io.BytesIO(r.content))
    assert (im.format, im.size) == (pil_format, (48, 40))
    ext = {"png": "png", "jpg": "jpg", "webp": "webp", "same": "png"}[fmt]
    assert r.headers["content-disposition"] == f'attachment; filename="photo_x2.{ext}"'
    assert r.headers["x-model"] == "asa-small-x2" and r.headers["x-scale"] == "2"
    assert r.headers["x-image-size"] == "48x40"
    stages = dict(p.strip().split(";dur=") for p in r.headers["server-timing"].split(","))
    assert set(stages) == {"queue", "decode", "upscale", "encode", "total"}
    assert all(float(v) >= 0 for v in stages.values())
    assert float(stages["total"]) >= float(stages["upscale"])


def test_scale_outscale_and_model_names(make_client, make_image) -> None:
    client = make_client()
    png = make_image(20, 10)
    assert _size(_post(client, png, scale=3).content) == (60, 30)
    assert _size(_post(client, png).content) == (40, 20)  # default: the smallest scale
    r = _post(client, png, outscale=1.5)
    assert r.status_code == 200 and _size(r.content) == (30, 15)
    assert r.headers["content-disposition"].endswith('_x1.5.png"')
    r = _post(client, png, width=50)  # height follows the aspect ratio
    assert _size(r.content) == (50, 25) and r.headers["content-disposition"].endswith('_w50.png"')
    r = _post(client, png, model="asa-small-x3")
    assert r.headers["x-model"] == "asa-small-x3" and _size(r.content) == (60, 30)


def test_budget_map_returns_a_heat_map_png_of_the_output_size(make_client, make_image) -> None:
    r = _post(make_client(), make_image(24, 20), scale=2, budget_map="true", format="jpg")
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/png"
    assert r.headers["content-disposition"] == 'attachment; filename="photo_budget.png"'
    assert r.headers["x-budget-max"] == "8"  # asa-small's k_max: the heat map's top colour
    im = Image.open(io.BytesIO(r.content))
    assert (im.size, im.mode) == ((48, 40), "RGB")


def test_tta_quality_mode(make_client, make_image) -> None:
    client, png = make_client(), make_image(24, 20)
    plain, tta = _post(client, png, scale=2), _post(client, png, scale=2, tta="true")
    assert plain.status_code == tta.status_code == 200, tta.text
    assert _size(tta.content) == (48, 40) and tta.content != plain.content
    assert _post(client, png, tta="maybe").status_code == 422


def test_models_health_ready_docs_and_page(make_client) -> None:
    client = make_client()
    models = client.get("/v1/models").json()
    assert models["default"] == "asa-small"
    assert models["families"] == [{"name": "asa-small", "scales": [2, 3], "default": True, "denoise": False,
                                   "look": False}]
    by_name = {m["name"]: m for m in models["models"]}
    assert set(by_name) == {"asa-small-x2", "asa-small-x3"}
    assert by_name["asa-small-x2"]["params"] > 100_000 and by_name["asa-small-x2"]["set5_psnr"] == 30.5
    assert by_name["asa-small-x2"]["k_max"] == 8
    assert "path" not in by_name["asa-small-x2"]  # no server paths leak
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["scales"] == [2, 3] and ready.json()["device"] == "cpu"
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    form = spec["paths"]["/v1/upscale"]["post"]
    assert {"400", "401", "413", "415", "422", "503", "504"} <= set(form["responses"])
    assert "401" in spec["paths"]["/v1/models"]["get"]["responses"]  # behind the key like every /v1 route
    page = client.get("/")
    assert page.status_code == 200 and 'id="upscale"' in page.text
    assert client.get("/static/app.js").status_code == 200


def test_download_name_is_sanitised() -> None:
    assert download_name("../../etc/pass wd.png", "_x2", "png") == "pass_wd_x2.png"
    assert download_name("C:\\Users\\me\\évé.jpeg", "_x2", "jpg") == "v_x2.jpg"
    assert download_name('a"b;c\r\n.png', "_x4", "webp") == "a_b_c_x4.webp"
    assert download_name(None, "_budget", "png") == "image_budget.png"
    assert len(download_name("x" * 500 + ".png", "_x2", "png")) == 80 + len("_x2.png")


# --- 4xx ------------------------------------------------------------------------------------------

def test_400_empty_and_corrupt(make_client, make_image) -> None:
    client = make_client()
    r = _post(client, b"")
    assert r.status_code == 400 and r.json()["detail"] == "the uploaded file is empty"
    png = make_image(24, 20)
    r = _post(client, png[: len(png) // 2])
    assert r.status_code == 400 and "corrupt or truncated" in r.json()["detail"]


def test_401_api_key(make_client, make_image) -> None:
    client = make_client(api_key="s3cret")
    r = client.get("/v1/models")
    assert r.status_code == 401 and "X-API-Key" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "ApiKey"
    assert client.get("/v1/models", headers={"X-API-Key": "wrong"}).status_code == 401
    assert _post(client, make_image()).status_code == 401
    assert client.get("/v1/models", headers={"X-API-Key": "s3cret"}).status_code == 200
    r = client.post("/v1/upscale", headers={"X-API-Key": "s3cret"}, files={"file": ("a.png", make_image())})
    assert r.status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open


def test_413_bytes_declared_and_streamed(make_client, make_image) -> None:
    client = make_client(max_upload_bytes=2000)
    big = make_image(64, 64)  # ~12 KB of noise
    assert len(big) > 2000
    r = _post(client, big)
    assert r.status_code == 413 and "limit is 2000 bytes" in r.json()["detail"]
    # Chunked upload without Content-Length: counted as it arrives.
    boundary = "sr-test-boundary"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n").encode()

    def stream():
        yield head
        for _ in range(20):
            yield b"\0" * 10_000
        yield f"\r\n--{boundary}--\r\n".encode()

    r = client.post("/v1/upscale", content=stream(),
                    headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 413 and "upload too large" in r.json()["detail"]
    # A file just over the file limit but within the form allowance is caught by its real size.
    r = _post(make_client(max_upload_bytes=len(big) - 1), big)
    assert r.status_code == 413 and f"{len(big)} bytes" in r.json()["detail"]


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (a decompression bomb's calling card)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)) + b"\0\0\0\0IEND\xaeB`\x82")


def test_413_pixels(make_client, make_image) -> None:
    client = make_client(max_pixels=400)
    r = _post(client, make_image(24, 20))  # 480 pixels
    assert r.status_code == 413 and "image too large" in r.json()["detail"]
    r = _post(make_client(), _png_header_only(100_000, 100_000))  # 10 gigapixels, 60 bytes
    assert r.status_code == 413 and "pixels" in r.json()["detail"]


def test_415_not_an_image_and_animated(make_client) -> None:
    client = make_client()
    r = _post(client, b"%PDF-1.4 definitely not a picture" * 10, name="doc.pdf")
    assert r.status_code == 415 and "not a supported image" in r.json()["detail"]
    frames = [Image.new("RGB", (8, 8), c) for c in ("red", "blue")]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    r = _post(client, buf.getvalue(), name="anim.gif")
    assert r.status_code == 415 and "frames" in r.json()["detail"]


@pytest.mark.parametrize("fields, needle", [
    ({"model": "nope"}, "unknown model 'nope'; available: asa-small, asa-small-x2, asa-small-x3"),
    ({"model": "../../etc/passwd"}, "unknown model"),
    ({"scale": 4}, "scale 4 is not available for model 'asa-small' (available: 2, 3); use outscale"),
    ({"scale": "two"}, "scale: Input should be a valid integer"),
    ({"model": "asa-small-x2", "scale": 3}, "x2 model but scale=3"),
    ({"outscale": 0}, "outscale must be a number > 0, got 0.0"),
    ({"outscale": 1.5, "width": 30}, "either outscale or width/height"),
    ({"format": "gif"}, "format: Input should be"),
    ({"quality": 101}, "quality must be 1-100, got 101"),
    ({"width": 0}, "width must be a positive number of pixels, got 0"),
    ({"scale": 0}, "scale must be a positive integer, got 0"),
])
def test_422_bad_fields(make_client, make_image, fields: dict, needle: str) -> None:
    r = _post(make_client(), make_image(), **fields)
    assert r.status_code == 422
    assert needle in r.json()["detail"]


def test_422_missing_file(make_client) -> None:
    r = make_client().post("/v1/upscale", data={"scale": "2"})
    assert r.status_code == 422 and r.json()["detail"] == "file: Field required"


# --- 5xx (load shedding) and robustness -----------------------------------------------------------


def test_503_queue_full_with_retry_after(make_client, make_image, gate_jobs) -> None:
    gate = gate_jobs()
    client = make_client(workers=1, max_queue=0)
    first: dict = {}
    worker = threading.Thread(target=lambda: first.setdefault("r", _post(client, make_image())))
    worker.start()
    try:
        assert gate.started.wait(20)
        r = _post(client, make_image())
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) >= 1
        assert "server busy" in r.json()["detail"]
    finally:
        gate.release.set()
        worker.join(30)
    assert first["r"].status_code == 200  # the admitted job still completes


def test_504_timeout_and_the_server_recovers(make_client, make_image, gate_jobs) -> None:
    gate = gate_jobs()
    # 2 s, not less: the last request below must really run (probe, sandboxed decode, upscale)
    # within the limit on a loaded machine.
    client = make_client(workers=1, max_queue=0, timeout_s=2)
    # A tiny job, predicted well under the limit whatever the calibration measured on a loaded
    # machine (it predicted ~1 s under a load of 10 and answered 422 instead of running).
    model = client.app.state.service.pool.model
    model.fixed_factor = model.forward_factor = model.mp_factor = 0.02
    t0 = time.monotonic()
    r = _post(client, make_image())
    assert r.status_code == 504 and "limit of 2 s" in r.json()["detail"], r.text
    assert time.monotonic() - t0 < 10
    # The job that timed out still holds the only worker: a new request is shed, not queued forever.
    shed = _post(client, make_image())
    assert shed.status_code == 503
    gate.release.set()
    deadline = time.monotonic() + 20
    while client.get("/healthz").json()["jobs"]["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(int(shed.headers["retry-after"]))  # the freed slot is held for the 503's place in line
    assert _post(client, make_image()).status_code == 200


def test_503_while_the_model_is_loading(make_client, make_image, monkeypatch) -> None:
    release = threading.Event()
    from sr.service.hub import ModelHub

    real = ModelHub.load_default
    monkeypatch.setattr(ModelHub, "load_default", lambda self: (release.wait(20), real(self))[1])
    client = make_client(wait=False)
    try:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["detail"] == "model is still loading"
        r = _post(client, make_image())
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert client.get("/healthz").status_code == 200
    finally:
        release.set()


def test_unexpected_engine_error_is_a_json_500_and_the_server_keeps_serving(make_client, make_image,
                                                                             monkeypatch) -> None:
    def broken(*args):
        raise RuntimeError("boom")

    client = make_client()
    # Same app (already started); this client returns the 500 instead of re-raising it in the test.
    quiet = TestClient(client.app, raise_server_exceptions=False)
    monkeypatch.setattr(service_running, "run_job", broken)
    r = _post(quiet, make_image())
    assert r.status_code == 500 and r.json() == {"detail": "internal server error (RuntimeError)"}
    monkeypatch.undo()
    assert _post(client, make_image()).status_code == 200


def test_cors_is_off_unless_configured(make_client) -> None:
    origin = {"Origin": "http://elsewhere.test"}
    assert "access-control-allow-origin" not in make_client().get("/v1/models", headers=origin).headers
    r = make_client(cors_origins=("http://elsewhere.test",)).get("/v1/models", headers=origin)
    assert r.headers["access-control-allow-origin"] == "http://elsewhere.test"
    assert "X-Model" in r.headers["access-control-expose-headers"]


def test_uploads_leave_no_files_behind(make_client, make_image, monkeypatch, tmp_path: Path) -> None:
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    client = make_client(max_pixels=1000)
    big = make_image(700, 700)  # > 1 MiB: python-multipart spools it past memory
    assert len(big) > 2**20
    assert _post(client, big, name="../../escape.png").status_code == 413
    assert _post(client, make_image(), name="../../escape.png").status_code == 200
    assert list(spool.iterdir()) == []
    assert not (tmp_path / "escape.png").exists() and not Path("escape.png").exists()


def test_serving_one_weights_file_by_path(make_client, make_image, weights_dir: Path) -> None:
    client = make_client(model=str(weights_dir / "asa-small-x3.safetensors"))
    models = client.get("/v1/models").json()
    assert models["default"] == "asa-small-x3"
    assert models["families"] == [{"name": "asa-small-x3", "scales": [3], "default": True, "denoise": False,
                                   "look": False}]
    assert [m["name"] for m in models["models"]] == ["asa-small-x3"]
    r = _post(client, make_image(20, 10))
    assert r.status_code == 200 and r.headers["x-model"] == "asa-small-x3" and _size(r.content) == (60, 30)
    assert _post(client, make_image(), scale=2).status_code == 422
    assert _post(client, make_image(), model="asa-small").status_code == 422  # only the served file


def test_families_come_from_file_names(weights_dir: Path, tmp_path: Path, make_client, make_image) -> None:
    names = ("asa-base-x2", "asa-base-x7", "mine")
    assert [family_of(n) for n in names] == ["asa-base", "asa-base-x7", "mine"]
    shutil.copy(weights_dir / "asa-small-x2.safetensors", tmp_path / "asa-small-x2.safetensors")
    # Metadata says preset asa-small; the client still asks for it by its file name.
    shutil.copy(weights_dir / "asa-small-x3.safetensors", tmp_path / "custom.safetensors")
    client = make_client(weights_dir=tmp_path)
    families = {f["name"]: f["scales"] for f in client.get("/v1/models").json()["families"]}
    assert families == {"asa-small": [2], "custom": [3]}
    r = _post(client, make_image(20, 10), model="custom")
    assert r.status_code == 200 and r.headers["x-model"] == "custom" and _size(r.content) == (60, 30)


# --- photo, auto and denoise -----------------------------------------------------------------------

def test_photo_and_auto_models_with_denoise(make_client, make_image, photo_weights: Path) -> None:
    client = make_client(weights_dir=photo_weights, model="asa-base")
    families = {f["name"]: f for f in client.get("/v1/models").json()["families"]}
    assert {n: (f["scales"], f["denoise"]) for n, f in families.items()} == {
        "asa-base": ([2], False), "photo": ([2], True), "auto": ([2], True)}
    assert "lossy" in families["auto"]["description"]
    png, jpg = make_image(24, 20), make_image(24, 20, fmt="JPEG", quality=72)
    r = _post(client, png, model="photo")
    assert r.status_code == 200, r.text
    assert r.headers["x-model"] == "photo-x2" and _size(r.content) == (48, 40)
    assert "x-model-choice" not in r.headers
    half = _post(client, png, model="photo", denoise="0.5")
    assert half.status_code == 200 and half.headers["x-model"] == "photo-x2@denoise=0.5"
    assert half.content != r.content
    r = _post(client, jpg, name="shot.jpg", model="auto", format="png")
    assert r.status_code == 200, r.text
    assert r.headers["x-model"] == "photo-x2"
    assert r.headers["x-model-choice"] == "auto: photo (JPEG, quality ~72)"
    r = _post(client, png, model="auto", denoise="0.3")  # a lossless upload: asa-base, denoise unused
    assert r.status_code == 200 and r.headers["x-model"] == "asa-base-x2"
    assert r.headers["x-model-choice"] == "auto: asa-base (PNG, lossless)"
    # denoise 0 is asa-base's weights exactly; 1 is photo's
    base, photo = _post(client, png, model="asa-base"), _post(client, png, model="photo")
    assert _post(client, png, model="photo", denoise="0").content == base.content
    assert _post(client, png, model="photo", denoise="1").content == photo.content
    r = _post(client, png, model="auto", budget_map="true")
    assert r.status_code == 200 and r.headers["x-budget-max"] == "8"


def test_422_bad_denoise(make_client, make_image, photo_weights: Path) -> None:
    client = make_client(weights_dir=photo_weights, model="asa-base")
    png = make_image(16, 12)
    for value in ("2", "-1", "nan", "inf", "abc", ""):
        r = _post(client, png, model="photo", denoise=value)
        if value == "":  # an empty field is an absent one, as for every optional field
            assert r.status_code == 200
            continue
        assert r.status_code == 422, (value, r.text)
        detail = r.json()["detail"]
        if value == "abc":  # not a number: the form's type says so
            assert detail.startswith("denoise: "), detail
        else:  # a number out of range: the request's own check, the CLI's words
            assert detail.startswith("denoise must be a number from 0 to 1"), detail
    r = _post(client, png, model="asa-base", denoise="0.5")
    assert r.status_code == 422
    assert r.json()["detail"].startswith("denoise applies only to the models photo and auto, not 'asa-base'")
    r = client.post("/v1/upscale", files={"file": ("a.png", png)},
                    data={"model": "photo", "denoise": ["0.1", "0.2"]})
    assert r.status_code == 422 and "repeated form field: denoise" in r.json()["detail"]


def test_look_blends_photo_with_photo_natural_and_the_header_says_so(make_client, make_image,
                                                                   natural_weights: Path) -> None:
    client = make_client(weights_dir=natural_weights, model="asa-base")
    families = {f["name"]: f for f in client.get("/v1/models").json()["families"]}
    assert {n: (f["scales"], f["look"]) for n, f in families.items()} == {
        "asa-base": ([2, 3], False), "photo": ([2, 3], True), "photo-natural": ([2], False),
        "auto": ([2, 3], True)}
    png, jpg = make_image(24, 20), make_image(24, 20, fmt="JPEG", quality=72)
    photo = _post(client, png, model="photo", format="png")
    natural = _post(client, png, model="photo-natural", format="png")
    assert photo.headers["x-model"] == "photo-x2" and natural.headers["x-model"] == "photo-natural-x2"
    at0 = _post(client, png, model="photo", look="0", format="png")
    assert at0.headers["x-model"] == "photo-x2" and at0.content == photo.content  # nothing blended
    assert _post(client, png, model="photo", look="1", format="png").content == natural.content
    half = _post(client, png, model="photo", look="0.5", format="png")
    assert half.status_code == 200 and half.headers["x-model"] == "photo-x2@look=0.5"
    assert half.content not in (photo.content, natural.content)
    both = _post(client, png, model="photo", look="0.25", denoise="0.5")
    assert both.headers["x-model"] == "photo-x2@denoise=0.5,look=0.25"
    r = _post(client, jpg, name="shot.jpg", model="auto", look="0.5")
    assert r.status_code == 200 and r.headers["x-model"] == "photo-x2@look=0.5"
    assert r.headers["x-model-choice"] == "auto: photo, look 0.5 (JPEG, quality ~72)"
    r = _post(client, png, model="auto", look="0.5")  # lossless: asa-base, the look unused
    assert r.headers["x-model"] == "asa-base-x2"
    hub = client.app.state.service.hub
    assert hub.engine("photo", None, 0.5) is hub.engine("photo", 1.0, 0.5)  # one engine per (family, D, L)
    assert hub.engine("photo", 0.5, 0.5) is not hub.engine("photo", 0.5, 0.25)


def test_422_bad_look(make_client, make_image, natural_weights: Path, photo_weights: Path) -> None:
    client = make_client(weights_dir=natural_weights, model="asa-base")
    png = make_image(16, 12)
    for value, start in (("2", "look must be a number from 0 to 1 (0 = photo, 1 = photo-natural)"),
                         ("-0.1", "look must be a number from 0 to 1"), ("nan", "look must be a number"),
                         ("abc", "look: ")):  # not a number: the form's type says so
        r = _post(client, png, model="photo", look=value)
        assert r.status_code == 422 and r.json()["detail"].startswith(start), (value, r.text)
    for model in ("asa-base", "photo-natural"):
        r = _post(client, png, model=model, look="0.5")
        assert r.status_code == 422
        assert r.json()["detail"].startswith(f"look applies only to the models photo and auto, not {model!r}")
    r = _post(client, png, model="photo", look="0.5", scale="3")
    assert r.status_code == 422 and "photo-natural has no x3 weights" in r.json()["detail"]
    assert _post(client, png, model="photo", scale="3").status_code == 200  # look 0: photo's x3
    r = client.post("/v1/upscale", files={"file": ("a.png", png)},
                    data={"model": "photo", "look": ["0", "1"]})
    assert r.status_code == 422 and "repeated form field: look" in r.json()["detail"]
    # a server without photo-natural offers no look, and says so
    other = make_client(weights_dir=photo_weights, model="asa-base")
    assert not any(f["look"] for f in other.get("/v1/models").json()["families"])
    r = _post(other, png, model="photo", look="0.5")
    assert r.status_code == 422 and r.json()["detail"].startswith("look needs photo-natural weights")
    assert _post(other, png, model="photo", look="0").status_code == 200
    schema = client.get("/openapi.json").json()
    form = next(iter(schema["components"]["schemas"][k] for k in schema["components"]["schemas"]
                     if k.startswith("Body_upscale")))
    assert "photo-natural" in form["properties"]["look"]["description"]


def test_page_has_photo_auto_and_a_denoise_slider(make_client) -> None:
    client = make_client()
    page = client.get("/").text
    assert 'id="denoise" type="range" min="0" max="1" step="0.05"' in page
    script = client.get("/static/app.js").text
    assert "fields.denoise" in script and "fam.denoise" in script  # sent only where the model takes it
    assert 'id="look" type="range" min="0" max="1" step="0.05" value="0"' in page
    assert "Natural texture" in page and "fields.look" in script and "fam.look" in script


def test_budget_map_kept_with_the_result_is_the_one_budget_map_true_returns(make_client, make_image) -> None:
    client = make_client()
    png = make_image(40, 30)
    r = _post(client, png, scale="2", keep_budget_map="true")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    kept = client.get(f"/v1/budget-maps/{r.headers['x-budget-map-id']}")
    direct = _post(client, png, scale="2", budget_map="true")
    assert kept.status_code == 200 and kept.headers["x-budget-max"] == direct.headers["x-budget-max"] == "8"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(kept.content))),
                          np.asarray(Image.open(io.BytesIO(direct.content))))
    assert "x-budget-map-id" not in _post(client, png, scale="2").headers  # only when asked
    missing = client.get("/v1/budget-maps/no-such-map")
    assert missing.status_code == 404 and "budget_map=true" in missing.json()["detail"]
