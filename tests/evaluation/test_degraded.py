"""sr.evaluation.degraded: seeded degraded sets written whole, described by their manifest, reused only
when they are the very same set, and ordered in difficulty as their names say."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.evaluation import plan_sets, score_pairs
from sr.evaluation.degraded import (
    DEFAULT_SEED,
    LEVELS,
    MANIFEST,
    build_degraded_set,
    existing_set,
    levels_for,
    set_folder_name,
)
from sr.lossy import inspect_compression
from sr.resize import modcrop


@pytest.fixture(scope="module")
def hr_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three HR images: two RGB (one not a multiple of the scale), one gray."""
    folder = tmp_path_factory.mktemp("sets") / "photos"
    folder.mkdir()
    Image.fromarray(data.astronaut()[80:181, 160:281]).save(folder / "astro.png")  # 121x101
    Image.fromarray(data.chelsea()[50:146, 100:220]).save(folder / "cat.png")
    Image.fromarray(data.camera()[200:296, 180:300]).save(folder / "cam.png")  # gray
    return folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(src: Path, dst: Path, names: list[str] | None = None) -> Path:
    dst.mkdir(parents=True)
    for p in sorted(src.iterdir()):
        if names is None or p.name in names:
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_levels_and_names(hr_dir: Path) -> None:
    assert levels_for("all") == ["web", "mild", "medium", "heavy", "chain"] == list(LEVELS)
    assert levels_for("heavy") == ["heavy"]
    assert levels_for("mild, heavy,mild") == ["mild", "heavy"]
    for bad in ("extreme", "mild,extreme", "", ","):
        with pytest.raises(ValueError, match="unknown degradation level"):
            levels_for(bad)
    assert set_folder_name(hr_dir, "mild", 3) == "photos-mild-x3"
    assert set_folder_name(hr_dir.parent / "Set5" / "HR", "web", 2) == "Set5-web-x2"  # generic names skipped


@pytest.mark.parametrize("scale", [2, 3])
def test_set_files_sizes_checksums_and_params(hr_dir: Path, tmp_path: Path, scale: int) -> None:
    out = tmp_path / "medium"
    manifest = build_degraded_set(hr_dir, out, scale, "medium")
    assert manifest == json.loads((out / MANIFEST).read_text())
    assert manifest["hr_dir"] == str(hr_dir.resolve()) and manifest["scale"] == scale
    assert manifest["level"] == "medium" and manifest["seed"] == DEFAULT_SEED
    assert manifest["config"] == json.loads(json.dumps(LEVELS["medium"].to_dict()))
    files = manifest["files"]
    assert [f["hr"] for f in files] == ["astro.png", "cam.png", "cat.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST] + [f"{s}_x{scale}.jpg" for s in
                                                                         ("astro", "cam", "cat")])
    for f in files:
        lr_path, hr_path = out / f["lr"], hr_dir / f["hr"]
        assert f["lr_sha256"] == _sha(lr_path) and f["hr_sha256"] == _sha(hr_path)
        hr = modcrop(np.asarray(Image.open(hr_path)), scale)
        lr = np.asarray(Image.open(lr_path))
        assert lr.shape == (hr.shape[0] // scale, hr.shape[1] // scale, 3)  # gray HR: an RGB upload
        p = f["params"]
        assert not p["clean"] and p["blur"] is not None and p["jpeg"] is not None
        assert (p["gauss"] is None) != (p["poisson"] is None)  # medium: always noise, of one kind
        last_q = p["second"]["jpeg"] if p["second"] else p["jpeg"]
        assert inspect_compression(lr_path).jpeg_quality == last_q
    # the set plans as an --lr folder of the HR folder
    (plan,) = plan_sets([str(hr_dir)], [str(out)], scale)
    assert [lr.name for _, lr in plan.pairs] == [f["lr"] for f in files]


def test_web_level_draws_within_its_ranges(hr_dir: Path, tmp_path: Path) -> None:
    files = build_degraded_set(hr_dir, tmp_path / "web", 2, "web")["files"]
    for f in files:
        p = f["params"]
        assert p["resize"] == "area" and p["blur"] is None and p["gauss"] is None and p["poisson"] is None
        assert 60 <= p["jpeg"] <= 85 and p["second"] is None


def test_same_seed_same_bytes_and_per_image_streams(hr_dir: Path, tmp_path: Path) -> None:
    a = build_degraded_set(hr_dir, tmp_path / "a", 2, "heavy")
    b = build_degraded_set(hr_dir, tmp_path / "b", 2, "heavy")
    assert [f["lr_sha256"] for f in a["files"]] == [f["lr_sha256"] for f in b["files"]]
    c = build_degraded_set(hr_dir, tmp_path / "c", 2, "heavy", seed=1)
    assert all(x["lr_sha256"] != y["lr_sha256"] for x, y in zip(a["files"], c["files"], strict=True))
    # one image fewer in the folder: the others keep their degradations
    fewer = _copy(hr_dir, tmp_path / "fewer" / "photos", ["cat.png", "astro.png"])
    d = build_degraded_set(fewer, tmp_path / "d", 2, "heavy")
    assert {f["hr"]: f["lr_sha256"] for f in d["files"]} == {
        f["hr"]: f["lr_sha256"] for f in a["files"] if f["hr"] != "cam.png"
    }


def test_rebuild_is_a_no_op(hr_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "mild"
    first = build_degraded_set(hr_dir, out, 2, "mild")
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert existing_set(hr_dir, out, 2, "mild") == first
    assert build_degraded_set(hr_dir, out, 2, "mild") == first
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert existing_set(hr_dir, tmp_path / "absent", 2, "mild") is None
    (tmp_path / "empty").mkdir()
    assert build_degraded_set(hr_dir, tmp_path / "empty", 2, "mild")["files"] == first["files"]


def test_another_or_tampered_set_is_an_error(hr_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "set"
    build_degraded_set(hr_dir, out, 2, "mild")
    for args in [(2, "medium"), (3, "mild")]:
        with pytest.raises(ValueError, match="holds another degraded set"):
            build_degraded_set(hr_dir, out, *args)
    with pytest.raises(ValueError, match="holds another degraded set"):
        build_degraded_set(hr_dir, out, 2, "mild", seed=5)
    # an LR file changed
    jpg = out / "cat_x2.jpg"
    jpg.write_bytes(jpg.read_bytes()[:-10])
    with pytest.raises(ValueError, match="holds another degraded set"):
        build_degraded_set(hr_dir, out, 2, "mild")
    # an HR image changed since the set was made
    hr_copy = _copy(hr_dir, tmp_path / "copy" / "photos")
    out2 = tmp_path / "set2"
    build_degraded_set(hr_copy, out2, 2, "mild")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(hr_copy / "cat.png")
    with pytest.raises(ValueError, match="holds another degraded set"):
        build_degraded_set(hr_copy, out2, 2, "mild")
    # a folder of something else, a file, a level that is not one
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no degraded set"):
        build_degraded_set(hr_dir, other, 2, "mild")
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        build_degraded_set(hr_dir, tmp_path / "file", 2, "mild")
    for level in ("all", "extreme"):
        with pytest.raises(ValueError, match="unknown degradation level"):
            build_degraded_set(hr_dir, tmp_path / level, 2, level)
    with pytest.raises(ValueError, match="no images"):
        build_degraded_set(tmp_path / "other", tmp_path / "x", 2, "mild")


def test_a_failed_build_leaves_nothing(hr_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sr.evaluation.degraded as degraded

    real, calls = degraded.apply_with_file, []

    def fail_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(degraded, "apply_with_file", fail_on_the_second)
    root = tmp_path / "root"
    with pytest.raises(OSError, match="disk full"):
        build_degraded_set(hr_dir, root / "set", 2, "heavy")
    assert list(root.iterdir()) == []  # neither the set nor its hidden temporary folder


def test_levels_get_harder_in_order_for_bicubic(hr_dir: Path, tmp_path: Path) -> None:
    psnr = {}
    for level in LEVELS:
        out = tmp_path / level
        build_degraded_set(hr_dir, out, 2, level)
        (plan,) = plan_sets([str(hr_dir)], [str(out)], 2)
        psnr[level] = float(np.mean([p for _, _, p, _, _ in score_pairs(plan, None, 2)]))
    (clean,) = plan_sets([str(hr_dir)], None, 2)
    psnr["clean"] = float(np.mean([p for _, _, p, _, _ in score_pairs(clean, None, 2)]))
    assert psnr["clean"] > psnr["web"] > psnr["heavy"]
    assert psnr["clean"] > psnr["mild"] > psnr["medium"] > psnr["heavy"]
