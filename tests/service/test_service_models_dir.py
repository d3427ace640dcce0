"""The models folder: community model files offered by stem, picked with model= and pre=,
loaded on first use and unloaded least-recently-used within the memory cap; never taken as uploads."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("spandrel")

from safetensors.torch import save_file  # noqa: E402
from spandrel import ModelLoader  # noqa: E402
from spandrel.architectures.Compact import Compact  # noqa: E402
from spandrel.architectures.DnCNN import DnCNN  # noqa: E402

from sr.models import build_model  # noqa: E402
from sr.service.settings import Settings  # noqa: E402
from sr.weights import save_weights  # noqa: E402

from .conftest import image_bytes  # noqa: E402


def _compact(scale: int, feat: int = 8, convs: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    net = Compact(num_in_ch=3, num_out_ch=3, num_feat=feat, num_conv=convs, upscale=scale)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(0.5)  # tame random weights: outputs inside [0, 1] mostly, so clamping hides nothing
    return net.state_dict()


def _dncnn() -> dict[str, torch.Tensor]:
    torch.manual_seed(5)
    net = DnCNN(in_nc=3, out_nc=3, nc=8, nb=17)  # spandrel recognises DnCNN at 17 or 20 layers
    return net.state_dict()


@pytest.fixture(autouse=True)
def _bf16_checks_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """precision auto's first-use bf16 check of an outside model caches its answer: not in ~/.cache."""
    monkeypatch.setenv("SR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """compact-x2.pth, compact-x4.safetensors, dncnn.pth (1x), own-x2.safetensors (sr's own),
    broken.pth (not a model), asa-small.pth (a stem the weights folder answers to), a text file."""
    folder = tmp_path_factory.mktemp("models")
    torch.save(_compact(2), folder / "compact-x2.pth")
    save_file(_compact(4, seed=1), str(folder / "compact-x4.safetensors"))
    torch.save(_dncnn(), folder / "dncnn.pth")
    torch.manual_seed(3)
    save_weights(build_model("asa-small-x2"), folder / "own-x2.safetensors", preset="asa-small")
    (folder / "broken.pth").write_bytes(b"not a pickle at all")
    torch.save(_compact(2, seed=2), folder / "asa-small.pth")
    (folder / "README.txt").write_text("not a model")
    return folder


@pytest.fixture(scope="module")
def big_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two Compact x2 of 156,748 parameters each (0.6 MB in fp32): a 1 MB cap holds one of them."""
    folder = tmp_path_factory.mktemp("big-models")
    for name, seed in (("big-a", 0), ("big-b", 1)):
        torch.save(_compact(2, feat=64, convs=4, seed=seed), folder / f"{name}.pth")
    return folder


def _upscale(client, data: bytes, **fields: str):
    return client.post("/v1/upscale", files={"file": ("a.png", data)}, data=fields)


def _png(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float32) / 255


def _spandrel_call(state: dict[str, torch.Tensor], pixels: np.ndarray) -> np.ndarray:
    model = ModelLoader().load_from_state_dict(state).eval()
    with torch.inference_mode():
        out = model(torch.from_numpy(pixels).permute(2, 0, 1)[None])
    return out[0].permute(1, 2, 0).numpy()


def test_models_lists_each_file_by_stem(make_client, models_dir, caplog) -> None:
    caplog.set_level(logging.INFO, "sr.service")
    models = make_client(models_dir=models_dir).get("/v1/models").json()
    families = {f["name"]: f for f in models["families"]}
    assert families["asa-small"]["default"] and "architecture" not in families["asa-small"]  # as before
    assert families["compact-x2"] == {
        "name": "compact-x2", "scales": [2], "default": False, "denoise": False, "look": False,
        "architecture": "RealESRGAN Compact", "purpose": "upscale", "params": 2292, "bf16": True,
        "input_channels": 3, "tiling": "supported", "size_requirements": "any size"}
    assert families["compact-x4"]["scales"] == [4]
    assert families["own-x2"]["architecture"] == "sr"
    assert "dncnn" not in families  # a restoration model is a pre choice, not a model
    pre = [(p["name"], p["architecture"], p["purpose"]) for p in models["pre"]]
    assert pre == [("dncnn", "DnCNN", "restore")]
    listed = {m["name"]: m for m in models["models"]}
    assert {"compact-x2", "compact-x4", "dncnn", "own-x2", "asa-small-x2"} <= set(listed)
    assert listed["dncnn"]["scale"] == 1 and listed["compact-x2"]["source"] == "models_dir"
    assert not any("path" in m for m in models["models"])  # server paths stay on the server
    # the unreadable file and the taken name: skipped, one line each
    assert "broken" not in listed and "asa-small" not in {f for f in families if f != "asa-small"}
    lines = [r.getMessage() for r in caplog.records]
    assert sum("broken.pth skipped" in line for line in lines) == 1
    assert sum("asa-small.pth skipped" in line and "taken" in line for line in lines) == 1


def test_model_picks_a_file_and_matches_spandrel(make_client, models_dir) -> None:
    client = make_client(models_dir=models_dir, precision="fp32")  # auto may run bf16 (a checked 50 dB)
    data = image_bytes(24, 20, seed=1)
    r = client.post("/v1/upscale", files={"file": ("a.png", data)}, data={"model": "compact-x2"})
    assert r.status_code == 200, r.text
    assert r.headers["X-Model"] == "compact-x2" and r.headers["X-Scale"] == "2"
    assert r.headers["X-Image-Size"] == "48x40"
    expected = _spandrel_call(torch.load(models_dir / "compact-x2.pth"), _png(data))
    assert np.abs(_png(r.content) - np.clip(expected, 0, 1)).max() <= 1 / 255 + 1e-6
    # a .safetensors file of another architecture, and sr's own file from the models folder
    r4 = client.post("/v1/upscale", files={"file": ("a.png", data)}, data={"model": "compact-x4"})
    assert r4.status_code == 200, r4.text
    assert r4.headers["X-Image-Size"] == "96x80"
    own = client.post("/v1/upscale", files={"file": ("a.png", data)}, data={"model": "own-x2"})
    assert own.status_code == 200 and own.headers["X-Model"] == "own-x2"


def test_pre_runs_the_restoration_model_first(make_client, models_dir) -> None:
    client = make_client(models_dir=models_dir, precision="fp32")
    data = image_bytes(24, 20, seed=2)
    r = _upscale(client, data, model="compact-x2", pre="dncnn")
    assert r.status_code == 200, r.text
    assert r.headers["X-Model"] == "dncnn+compact-x2"
    restored = np.clip(_spandrel_call(_dncnn(), _png(data)), 0, 1)
    expected = np.clip(_spandrel_call(torch.load(models_dir / "compact-x2.pth"), restored), 0, 1)
    assert np.abs(_png(r.content) - expected).max() <= 1 / 255 + 1e-6
    # before sr's own family too
    own = _upscale(client, data, model="asa-small", pre="dncnn")
    assert own.status_code == 200 and own.headers["X-Model"] == "dncnn+asa-small-x2"


@pytest.mark.parametrize(("fields", "words"), [
    ({"model": "dncnn"}, ["1x restoration model", "pre="]),
    ({"model": "compact-x2", "pre": "compact-x4"}, ["upscaling model", "dncnn"]),
    ({"model": "compact-x2", "pre": "asa-small"}, ["upscaling model", "dncnn"]),
    ({"model": "nope"}, ["unknown model 'nope'", "compact-x2", "asa-small"]),
    ({"pre": "nope"}, ["unknown pre model 'nope'", "dncnn"]),
    ({"model": "broken"}, ["unknown model"]),
    ({"model": str(Path("x") / "compact-x2.pth")}, ["unknown model"]),
    ({"pre": "/etc/passwd"}, ["unknown pre model"]),
    ({"model": "compact-x2", "denoise": "0.5"}, ["denoise applies only"]),
    ({"model": "compact-x2", "scale": "4"}, ["scale 4 is not available", "available: 2"]),
])
def test_refusals_name_the_reason(make_client, models_dir, fields, words) -> None:
    client = make_client(models_dir=models_dir)
    r = client.post("/v1/upscale", files={"file": ("a.png", image_bytes())}, data=fields)
    assert r.status_code == 422, r.text
    for word in words:
        assert word in r.json()["detail"]


def test_engines_are_evicted_least_recently_used(make_client, big_dir) -> None:
    client = make_client(models_dir=big_dir, models_memory_mb=1)
    hub = client.app.state.service.hub
    assert hub.catalog.engine_bytes("big-a") == 156_748 * 4
    data = image_bytes(16, 16)

    def run(model: str) -> None:
        r = client.post("/v1/upscale", files={"file": ("a.png", data)}, data={"model": model})
        assert r.status_code == 200, r.text
        assert r.headers["X-Model"] == model

    run("big-a")
    assert hub.held() == ["big-a"] and hub.evictions == 0
    run("big-b")  # both would be 1.2 MB: big-a goes
    assert hub.held() == ["big-b"] and hub.evictions == 1
    run("big-b")
    assert hub.evictions == 1  # a hit loads nothing
    run("big-a")  # loaded again on use
    assert hub.held() == ["big-a"] and hub.evictions == 2
    assert hub.capped_bytes <= 2**20


def test_a_model_over_the_cap_is_not_offered(make_client, big_dir, caplog) -> None:
    caplog.set_level(logging.INFO, "sr.service")
    client = make_client(models_dir=big_dir, models_memory_mb=1)
    assert {f["name"] for f in client.get("/v1/models").json()["families"]} >= {"big-a", "big-b"}
    tight = Settings(model="asa-small", models_dir=big_dir, models_memory_mb=1)
    assert tight.models_memory_mb == 1
    from sr.service.models_dir import scan_models_dir

    assert scan_models_dir(big_dir, set(), cap=600_000) == {}
    assert sum("over the model memory" in r.getMessage() for r in caplog.records) == 2


def test_model_plus_pre_over_the_cap_is_refused(make_client, big_dir, models_dir, tmp_path) -> None:
    (tmp_path / "big-a.pth").write_bytes((big_dir / "big-a.pth").read_bytes())
    (tmp_path / "dncnn.pth").write_bytes((models_dir / "dncnn.pth").read_bytes())
    torch.manual_seed(6)
    torch.save(DnCNN(in_nc=3, out_nc=3, nc=32, nb=17).state_dict(), tmp_path / "dncnn-wide.pth")
    client = make_client(models_dir=tmp_path, models_memory_mb=1)
    hub = client.app.state.service.hub
    assert hub.catalog.engine_bytes("big-a", "dncnn") == (156_748 + 9_443) * 4  # within 1 MB: allowed
    ok = _upscale(client, image_bytes(), model="big-a", pre="dncnn")
    assert ok.status_code == 200, ok.text
    assert hub.held() == ["big-a+dncnn"]
    # each alone fits; together over the cap: refused before any upload is read, nothing evicted
    wide = hub.catalog.folder().models["dncnn-wide"]
    assert hub.catalog.engine_bytes("big-a", "dncnn-wide") > 2**20 > wide.params * 4
    r = client.post("/v1/upscale", files={"file": ("a.png", image_bytes())},
                    data={"model": "big-a", "pre": "dncnn-wide"})
    assert r.status_code == 422
    assert re.fullmatch(r"model big-a with pre dncnn-wide needs 1\.\d MB of parameters, over this server's "
                        r"model memory of 1 MB \(SR_MODELS_MEMORY_MB\)", r.json()["detail"])
    assert hub.held() == ["big-a+dncnn"]


def test_admission_counts_the_models_cost(make_client, models_dir) -> None:
    client = make_client(models_dir=models_dir)
    service = client.app.state.service
    hub = service.hub
    ref = hub.catalog.catalog()[0]["params"] / 4  # asa-small x2: the default's smallest scale
    model_cost, pre_cost = hub.catalog.cost("compact-x4", "dncnn")
    assert model_cost == pytest.approx(hub.catalog.folder().models["compact-x4"].params / 16 / ref)
    assert pre_cost == pytest.approx(9_443 / 1 / ref)
    assert hub.catalog.cost("asa-small") == (1.0, 0.0)  # the weights folder's families: as before
    from sr.request import UpscaleRequest
    from sr.service.planning import JobLimits, UpscaleJob, plan_work

    limits = JobLimits.of(service.settings)
    plain = UpscaleJob(b"", UpscaleRequest(scale=4, model="compact-x4.safetensors"), limits,
                       cost=hub.catalog.cost("compact-x4"))
    with_pre = UpscaleJob(b"", UpscaleRequest(scale=4, pre="dncnn"), limits,
                          cost=hub.catalog.cost("compact-x4", "dncnn"))
    engine = hub.engine("compact-x4")
    _, work = plan_work(engine, 100, 100, plain)
    assert work.tiled_mp == pytest.approx(400 * 400 * model_cost / 1e6)
    _, work_pre = plan_work(hub.engine("compact-x4", pre="dncnn"), 100, 100, with_pre)
    assert work_pre.tiled_mp == pytest.approx(work.tiled_mp + 100 * 100 * pre_cost / 1e6)


def test_only_the_weights_folders_models_teach_the_work_model(make_client, models_dir) -> None:
    client = make_client(models_dir=models_dir)
    model = client.app.state.service.pool.model
    before = (model.load, model.fixed_factor, model.taught)
    for name in ("compact-x2", "own-x2"):
        assert _upscale(client, image_bytes(), model=name).status_code == 200
    assert _upscale(client, image_bytes(), model="asa-small", pre="dncnn").status_code == 200
    assert (model.load, model.fixed_factor, model.taught) == before
    assert _upscale(client, image_bytes(), model="asa-small").status_code == 200
    # taught by the job's network seconds: the load and the size of its teachers moved
    assert model.load != before[0] and model.taught != before[2]


def test_a_heavy_model_is_refused_before_it_runs(make_client, models_dir, monkeypatch) -> None:
    client = make_client(models_dir=models_dir, timeout_s=5)
    hub = client.app.state.service.hub
    # as a 10^4-times heavier model
    monkeypatch.setattr(hub.catalog, "cost", lambda family, pre=None: (1e4, 0.0))
    r = _upscale(client, image_bytes(64, 64), model="compact-x2")
    assert r.status_code == 422 and "time limit" in r.json()["detail"]


@pytest.mark.parametrize("name", ["compact-x2.pth", "compact-x4.safetensors", "own-x2.safetensors",
                                  "dncnn.pth"])
def test_model_files_are_not_accepted_as_uploads(make_client, models_dir, name) -> None:
    client = make_client(models_dir=models_dir)
    body = (models_dir / name).read_bytes()
    for route in ("/v1/upscale", "/v1/preview"):
        r = client.post(route, files={"file": ("image.png", body)})
        assert r.status_code == 415, (route, r.text)
        assert "model files are never accepted as uploads" in r.json()["detail"]


def test_the_model_file_sniff_passes_every_image(make_image) -> None:
    import pickle

    from sr.service.upload import model_file_kind

    for fmt, mode in (("PNG", "RGB"), ("JPEG", "RGB"), ("WEBP", "RGB"), ("BMP", "RGB"), ("TIFF", "RGB"),
                      ("GIF", "P"), ("PNG", "I;16"), ("TIFF", "L")):
        assert model_file_kind(make_image(mode=mode, fmt=fmt)) is None, fmt
    assert model_file_kind(pickle.dumps({"a": 1}, protocol=2)) is not None
    assert model_file_kind(b"{}" * 8) is None  # JSON is no safetensors header: no length in front


def test_without_spandrel_only_srs_own_models_are_offered(make_client, models_dir, monkeypatch,
                                                         caplog) -> None:
    caplog.set_level(logging.INFO, "sr.service")
    monkeypatch.setitem(sys.modules, "spandrel", None)  # import spandrel -> ImportError
    client = make_client(models_dir=models_dir)
    models = client.get("/v1/models").json()
    assert {f["name"] for f in models["families"]} == {"asa-small", "own-x2"}
    assert models["pre"] == []
    extra = [r.getMessage() for r in caplog.records if "pip install spandrel" in r.getMessage()]
    assert len(extra) == 1 and "compact-x2.pth" in extra[0]
    r = client.post("/v1/upscale", files={"file": ("a.png", image_bytes())}, data={"model": "compact-x2"})
    assert r.status_code == 422


def test_settings_and_flags(models_dir, tmp_path) -> None:
    s = Settings.from_env({"SR_MODELS_DIR": str(models_dir), "SR_MODELS_MEMORY_MB": "64"})
    assert s.models_dir == models_dir and s.models_memory_mb == 64
    assert Settings().models_dir is None and Settings().models_memory_mb == 1024
    from sr.service.settings import SettingsError

    with pytest.raises(SettingsError, match="models memory must be >= 1 MB"):
        Settings.from_env({"SR_MODELS_MEMORY_MB": "0"})
    import argparse

    from sr.commands import serve
    from sr.errors import CLIError

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--models-dir", str(models_dir), "--models-memory-mb", "32"])
    built = serve.build_settings(args)
    assert built.models_dir == models_dir and built.models_memory_mb == 32
    missing = parser.parse_args(["--models-dir", str(tmp_path / "nowhere"), "--port", "0"])
    with pytest.raises(CLIError, match="models folder not found"):
        serve.run(missing)


def test_a_models_folder_file_as_the_default_model(make_client, models_dir, caplog) -> None:
    from sr.commands.serve import check_model

    caplog.set_level(logging.INFO, "sr.service")
    settings = Settings(model="compact-x2", models_dir=models_dir, device="cpu")
    check_model(settings)  # before the port is bound: the file is there; the app reads the folder, once
    assert not any("skipped" in r.getMessage() for r in caplog.records)
    from sr.errors import CLIError

    with pytest.raises(CLIError, match="model 'nope' not found"):
        check_model(Settings(model="nope", models_dir=models_dir, device="cpu"))
    client = make_client(model="compact-x2", models_dir=models_dir)
    assert client.get("/readyz").json()["model"] == "compact-x2"
    families = {f["name"]: f for f in client.get("/v1/models").json()["families"]}
    assert families["compact-x2"]["default"] and not families["asa-small"]["default"]
    r = _upscale(client, image_bytes())
    assert r.status_code == 200 and r.headers["X-Model"] == "compact-x2"
    # the calibrated model itself
    assert client.app.state.service.hub.catalog.cost("compact-x2") == (1.0, 0.0)


def test_page_offers_the_pre_choices(make_client, models_dir) -> None:
    client = make_client(models_dir=models_dir)
    page = client.get("/").text
    assert 'id="pre"' in page
    script = client.get("/static/app.js").text
    assert "fields.pre" in script and "data.pre" in script
