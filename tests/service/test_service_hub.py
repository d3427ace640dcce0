"""ModelHub and its catalogue: each model's budget cap from its descriptor (as the engine and sr info
read it), engines per precision, denoise strength and look, bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sr.models import NetConfig, SRNet
from sr.service.hub import ModelHub
from sr.service.settings import Settings
from sr.weights import describe, save_weights


def _save(folder: Path, name: str, attention: str, options: dict) -> Path:
    torch.manual_seed(0)
    cfg = NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention=attention,
                    attn_options=options)
    return save_weights(SRNet(cfg), folder / f"{name}.safetensors")


def test_catalog_k_max_is_the_descriptors(tmp_path: Path) -> None:
    # the edge cases the hub's own reading got wrong: a cap left at the variant's default, and
    # a kind without a budget whose options still carry a k_max
    capped = _save(tmp_path, "dflt-x2", "adaptive", {"region": 4, "stride": 2})
    window = _save(tmp_path, "win-x2", "window", {"window": 4, "k_max": 8})
    hub = ModelHub(Settings(weights_dir=tmp_path, model="dflt", preload=False))
    by_name = {m["name"]: m for m in hub.catalog.catalog()}
    assert by_name["dflt-x2"]["k_max"] == describe(capped).k_max == 8.0  # adaptive's default cap
    assert by_name["win-x2"]["k_max"] is describe(window).k_max is None
    assert hub.catalog.budget_k_max("dflt") == 8.0 and hub.catalog.budget_k_max("win") is None
    assert "path" not in by_name["dflt-x2"]  # server paths stay hidden


def test_engines_run_in_the_configured_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # only the configuration is checked (nothing runs): as on a CPU that has bf16 convolutions
    monkeypatch.setattr("sr.inference.precision.cpu_runs_bf16", lambda: True)
    for name in ("asa-base-x2", "photo-x2"):
        _save(tmp_path, name, "adaptive", {"region": 4, "stride": 2})
    hub = ModelHub(Settings(weights_dir=tmp_path, model="asa-base", preload=False, precision="bf16"))
    assert hub.engine("asa-base").dtype_for(2) == torch.bfloat16
    assert hub.engine("auto").dtype_for(2) == torch.bfloat16  # auto's sides too


def _assert_the_last_used_are_kept(engine) -> None:
    """``engine(i)``, the i-th strength's engine: the MAX_DENOISE_ENGINES most recently used are kept
    (asked again: the same engine), an older one was dropped (asked again: built anew)."""
    from sr.service.hub import MAX_DENOISE_ENGINES as kept

    built = [engine(i) for i in range(kept + 3)]
    assert all(engine(i) is built[i] for i in range(3, kept + 3))
    assert engine(2) is not built[2]


def test_denoise_engines_are_offered_for_photo_and_auto_and_bounded(tmp_path: Path) -> None:
    for name in ("asa-base-x2", "photo-x2"):
        _save(tmp_path, name, "adaptive", {"region": 4, "stride": 2})
    hub = ModelHub(Settings(weights_dir=tmp_path, model="asa-base", preload=False))
    assert hub.catalog.families() == {"asa-base": [2], "auto": [2], "photo": [2]}
    assert hub.engine("photo") is hub.engine("photo", 1.0)  # the default strength: one engine
    assert hub.engine("auto", 0.5) is hub.engine("auto", 0.5) and hub.engine("photo", 0.5).denoise == 0.5
    _assert_the_last_used_are_kept(lambda i: hub.engine("photo", i / 100))
    with pytest.raises(ValueError, match="denoise applies only to the models photo and auto"):
        hub.engine("asa-base", 0.5)


def test_look_engines_are_kept_per_family_denoise_and_look(tmp_path: Path) -> None:
    for name in ("asa-base-x2", "photo-x2", "photo-natural-x2"):
        _save(tmp_path, name, "adaptive", {"region": 4, "stride": 2})
    hub = ModelHub(Settings(weights_dir=tmp_path, model="asa-base", preload=False))
    assert {f["name"]: f["look"] for f in hub.catalog.family_list()} == {
        "asa-base": False, "auto": True, "photo": True, "photo-natural": False}
    assert hub.engine("photo") is hub.engine("photo", None, 0.0)  # the default look: the one engine
    half = hub.engine("photo", None, 0.5)
    assert half is hub.engine("photo", 1.0, 0.5) and half.look == 0.5 and half.denoise == 1.0
    assert hub.engine("photo", 0.5, 0.5) is not half and hub.engine("auto", None, 0.5).look == 0.5
    _assert_the_last_used_are_kept(lambda i: hub.engine("photo", None, i / 100 + 0.01))
    with pytest.raises(ValueError, match="look applies only to the models photo and auto"):
        hub.engine("photo-natural", None, 0.5)
