"""``sr upscale`` end to end (tiny weights from tmp folders), plus ``sr bench upscale``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageCms

from sr import NEAR_LOSSLESS_QUALITY
from sr.cli import main
from sr.io import read_image
from sr.models import NetConfig, SRNet, build_model
from sr.models.registry import ASA
from sr.weights import save_weights

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    torch.manual_seed(0)
    net = SRNet(NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention="adaptive",
                          attn_options=dict(ASA)))
    return str(save_weights(net, tmp_path_factory.mktemp("w") / "tiny-x2.safetensors"))


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) % 64 * 4], axis=2)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def save(path: Path, array: np.ndarray, **options) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **options)  # uint16 (H, W) -> 16-bit gray
    return path


def sr(*args: str) -> int:
    return main(["upscale", *args, "--threads", "1"])


def outputs(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_folder_of_rgb_gray_alpha_and_16_bit(tmp_path, tiny, capsys):
    src = tmp_path / "in"
    save(src / "rgb.png", photo(20, 30))
    save(src / "gray.png", photo(16, 16)[:, :, 0])
    ramp = np.linspace(0, 255, 120).reshape(10, 12).astype(np.uint8)
    save(src / "rgba.png", np.dstack([photo(10, 12), ramp]))
    save(src / "deep.png", (np.arange(63).reshape(7, 9) * 1000).astype(np.uint16))
    assert sr(str(src), "-o", str(tmp_path / "out"), "--model", tiny) == 0
    assert "4 done, 0 skipped, 0 failed" in capsys.readouterr().out
    out = tmp_path / "out"
    assert outputs(out) == ["deep_x2.png", "gray_x2.png", "rgb_x2.png", "rgba_x2.png"]
    rgb, gray, rgba, deep = (read_image(out / f"{n}_x2.png") for n in ("rgb", "gray", "rgba", "deep"))
    assert (rgb.width, rgb.height, rgb.is_gray, rgb.has_alpha) == (60, 40, False, False)
    assert (gray.width, gray.height, gray.is_gray) == (32, 32, True)
    assert (rgba.width, rgba.height, rgba.has_alpha) == (24, 20, True)
    assert rgba.alpha.min() < 0.1 and rgba.alpha.max() > 0.9  # the gradient survived
    assert (deep.width, deep.height, deep.bit_depth, deep.is_gray) == (18, 14, 16, True)


def test_reading_and_writing_overlap_with_the_model(tmp_path, tiny, monkeypatch, capsys):
    """Slow I/O (0.25 s to read and to write each image) hides behind a slow model (0.25 s each)."""
    from sr import io as sr_io
    from sr.inference import Upscaler

    for i in range(6):
        save(tmp_path / "in" / f"{i}.png", photo(8, 8, seed=i))
    delay = 0.25

    def slow(fn):
        def wrapped(*args, **kwargs):
            time.sleep(delay)
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(sr_io, "read_image", slow(sr_io.read_image))
    monkeypatch.setattr(sr_io, "prepare_image", slow(sr_io.prepare_image))  # the writer's encode
    monkeypatch.setattr(Upscaler, "upscale", slow(Upscaler.upscale))
    start = time.perf_counter()
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny) == 0
    elapsed = time.perf_counter() - start
    assert "6 done" in capsys.readouterr().out
    serial = 6 * 3 * delay  # read + upscale + write, one after another
    assert elapsed < 0.75 * serial, f"{elapsed:.2f} s: no overlap (serial: {serial:.1f} s)"


STAGES = re.compile(r"decode (\d+\.\d+) s, upscale (\d+\.\d+) s, encode (\d+\.\d+) s")


def test_verbose_reports_each_stage_and_they_add_up_to_the_wall_time(tmp_path, tiny, monkeypatch, capsys):
    """Each stage made slow by a known delay: -v's seconds show each one, and for one file they sum
    to the batch's wall time."""
    from sr import io as sr_io
    from sr.inference import Upscaler

    save(tmp_path / "in" / "a.png", photo(8, 8))
    delays = {"read": 0.2, "upscale": 0.4, "write": 0.3}

    def slow(fn, delay):
        def wrapped(*args, **kwargs):
            time.sleep(delay)
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(sr_io, "read_image", slow(sr_io.read_image, delays["read"]))
    # the writer encodes through prepare_image (then writes the prepared image): delay that
    monkeypatch.setattr(sr_io, "prepare_image", slow(sr_io.prepare_image, delays["write"]))
    monkeypatch.setattr(Upscaler, "upscale", slow(Upscaler.upscale, delays["upscale"]))
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny, "-v") == 0
    out = capsys.readouterr().out
    per_file = [line for line in out.splitlines() if "a.png -> " in line]
    assert len(per_file) == 1
    decode, upscale, encode = (float(v) for v in STAGES.search(per_file[0]).groups())
    for seconds, delay in zip((decode, upscale, encode), delays.values(), strict=True):
        assert delay <= seconds < delay + 1.0
    wall = float(re.search(r"1 done, 0 skipped, 0 failed in (\d+\.\d+) s", out).group(1))
    assert abs(decode + upscale + encode - wall) < 0.3, out
    total = next(line for line in out.splitlines() if line.startswith("stages over 1 file:"))
    assert [float(v) for v in STAGES.search(total).groups()] == [decode, upscale, encode]
    # without -v: neither the per-file line nor the total
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "quiet"), "--model", tiny) == 0
    assert "decode" not in capsys.readouterr().out


def test_verbose_sums_the_stages_over_several_files(tmp_path, tiny, capsys):
    for i in range(3):
        save(tmp_path / "in" / f"{i}.png", photo(12, 12, seed=i))
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny, "-v") == 0
    out = capsys.readouterr().out
    files = [[float(v) for v in STAGES.search(line).groups()] for line in out.splitlines() if " -> " in line]
    assert len(files) == 3 and min(min(f) for f in files) >= 0
    total = next(line for line in out.splitlines() if line.startswith("stages over 3 files:"))
    sums = [float(v) for v in STAGES.search(total).groups()]
    for stage, summed in enumerate(sums):
        assert summed == pytest.approx(sum(f[stage] for f in files), abs=0.015)  # each printed rounded


def test_bad_files_are_reported_and_the_batch_goes_on(tmp_path, tiny, capsys):
    src = tmp_path / "in"
    save(src / "a_good.png", photo(12, 12))
    (src / "b_corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    (src / "c_empty.jpg").write_bytes(b"")
    save(src / "d_good.jpg", photo(10, 14))
    code = sr(str(src), "-o", str(tmp_path / "out"), "--model", tiny, "--max-pixels", "10000")
    captured = capsys.readouterr()
    assert code == 1
    assert "b_corrupt.png" in captured.err and "c_empty.jpg" in captured.err and "empty" in captured.err
    assert "2 done, 0 skipped, 2 failed" in captured.out
    assert outputs(tmp_path / "out") == ["a_good_x2.png", "d_good_x2.png"]
    save(src / "e_big.png", photo(101, 100))  # over --max-pixels: refused, not decoded
    big = str(src / "e_big.png")
    assert sr(big, "-o", str(tmp_path / "o2"), "--model", tiny, "--max-pixels", "10000") == 1
    assert "over the limit" in capsys.readouterr().err


def test_existing_outputs_skip_overwrite_or_error(tmp_path, tiny, capsys):
    src, out = tmp_path / "in", tmp_path / "out"
    save(src / "x.png", photo(8, 8))
    assert sr(str(src), "-o", str(out), "--model", tiny) == 0
    first = (out / "x_x2.png").stat().st_mtime_ns
    capsys.readouterr()
    assert sr(str(src), "-o", str(out), "--model", tiny) == 1
    assert f"output {out / 'x_x2.png'} exists (use --overwrite or --skip-existing)" in capsys.readouterr().err
    assert sr(str(src), "-o", str(out), "--model", tiny, "--skip-existing") == 0
    assert "0 done, 1 skipped, 0 failed" in capsys.readouterr().out
    assert (out / "x_x2.png").stat().st_mtime_ns == first
    time.sleep(0.01)
    assert sr(str(src), "-o", str(out), "--model", tiny, "--overwrite") == 0
    assert (out / "x_x2.png").stat().st_mtime_ns > first


def test_never_overwrites_an_input(tmp_path, tiny, capsys):
    src = tmp_path / "in"
    original = save(src / "x.png", photo(8, 8)).read_bytes()
    assert sr(str(src), "-o", str(src), "--model", tiny, "--suffix", "", "--overwrite") == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert (src / "x.png").read_bytes() == original
    assert sr(str(src), "-o", str(src), "--model", tiny) == 0  # same folder, distinct names: fine
    assert outputs(src) == ["x.png", "x_x2.png"]


def test_dry_run_lists_and_writes_nothing(tmp_path, tiny, capsys):
    save(tmp_path / "in" / "x.png", photo(8, 8))
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny, "--dry-run",
              "--save-budget-map") == 0
    text = capsys.readouterr().out
    assert f"-> {tmp_path / 'out' / 'x_x2.png'} + {tmp_path / 'out' / 'x_x2_budget.png'}" in text
    assert "1 to write" in text and not (tmp_path / "out").exists()


def test_recursive_keeps_the_tree_and_globs_work(tmp_path, tiny):
    src = tmp_path / "in"
    for rel in ("top.png", "a/x.png", "b/c/y.jpg", "b/.hidden.png"):
        save(src / rel, photo(6, 6))
    (src / "notes.txt").write_text("not an image")
    assert sr(str(src), "-o", str(tmp_path / "flat"), "--model", tiny) == 0
    assert outputs(tmp_path / "flat") == ["top_x2.png"]
    assert sr(str(src), "-o", str(tmp_path / "tree"), "--model", tiny, "--recursive") == 0
    assert outputs(tmp_path / "tree") == ["a/x_x2.png", "b/c/y_x2.png", "top_x2.png"]
    assert sr(str(src / "**" / "*.png"), "-o", str(tmp_path / "glob"), "--model", tiny, "-r") == 0
    assert outputs(tmp_path / "glob") == ["top_x2.png", "x_x2.png"]


def test_outputs_inside_the_input_folder_are_not_new_inputs(tmp_path, tiny, capsys):
    src = tmp_path / "in"
    save(src / "x.png", photo(6, 6))
    for _ in range(2):  # the second run must not pick up in/out/x_x2.png as an input
        assert sr(str(src), "-o", str(src / "out"), "--model", tiny, "-r", "--skip-existing") == 0
    assert outputs(src) == ["out/x_x2.png", "x.png"]
    assert "0 done, 1 skipped" in capsys.readouterr().out


def test_missing_input_is_a_failure_but_others_run(tmp_path, tiny, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    inputs = (str(tmp_path / "x.png"), str(tmp_path / "nope.png"))
    assert sr(*inputs, "-o", str(tmp_path / "out"), "--model", tiny) == 1
    assert "no such file" in capsys.readouterr().err
    assert outputs(tmp_path / "out") == ["x_x2.png"]


def test_only_missing_inputs_exit_2_and_create_no_folder(tmp_path, tiny, capsys):
    """Nothing found (a missing file, an empty glob) is one class of problem: one line, exit 2, and
    no output folder left behind."""
    for missing in (str(tmp_path / "nope.png"), str(tmp_path / "*.none")):
        assert sr(missing, "-o", str(tmp_path / "out"), "--model", tiny) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no input images found" in err, err
        assert not (tmp_path / "out").exists()


def test_nothing_found_names_each_input_and_why(tmp_path, tiny, capsys):
    (tmp_path / "empty").mkdir()
    save(tmp_path / "nested" / "deeper" / "x.png", photo(6, 6))
    (tmp_path / "nested" / "notes.txt").write_text("not an image")
    inputs = [str(tmp_path / n) for n in ("nope.png", "*.none", "empty", "nested")]
    assert sr(*inputs, "-o", str(tmp_path / "out"), "--model", tiny) == 2
    err = capsys.readouterr().err
    assert err == (f"sr upscale: error: no input images found ({inputs[0]}: no such file or folder; "
                   f"{inputs[1]}: no image or video matches this pattern; "
                   f"{inputs[2]}: no images or videos in this folder; ...)\n")
    assert sr(inputs[3], "-o", str(tmp_path / "out"), "--model", tiny) == 2
    assert (f"({inputs[3]}: no images or videos in this folder, and without -r its subfolders are not "
            "read)") in capsys.readouterr().err
    assert sr(inputs[3], "-o", str(tmp_path / "out"), "--model", tiny, "-r") == 0


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/nope.png", "--model", "asa-base"],
     "no input images found ({tmp}/nope.png: no such file or folder)"),
    (["{tmp}/*.none", "--model", "asa-base"],
     "no input images found ({tmp}/*.none: no image or video matches"),
    (["{tmp}/x.png", "--model", "no-such-model"],
     "unknown model 'no-such-model': no no-such-model-x{{2,3,4}}"),
    (["{tmp}/x.png", "--model", "{tmp}/gone.safetensors"],
     "weights file not found: {tmp}/gone.safetensors"),
])
def test_a_missing_input_or_unknown_model_is_reported_before_torch_loads(tmp_path, argv, message):
    """Checked before the engine is built: no torch import (seconds on a loaded machine), exit 2."""
    save(tmp_path / "x.png", photo(6, 6))
    code = ("import sys; from sr.cli import main; rc = main(sys.argv[1:]); "
            "print('torch loaded' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    args = ["upscale", *(a.format(tmp=tmp_path) for a in argv), "-o", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.strip() == "no torch"
    assert proc.stderr.startswith("sr upscale: error: " + message.format(tmp=tmp_path)), proc.stderr
    assert not (tmp_path / "out").exists()


def test_budget_map_file_at_output_size(tmp_path, tiny):
    save(tmp_path / "in" / "x.png", photo(20, 28))
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny, "--save-budget-map",
              "--outscale", "1.5") == 0
    heat = read_image(tmp_path / "out" / "x_x1.5_budget.png")
    out = read_image(tmp_path / "out" / "x_x1.5.png")
    assert (heat.width, heat.height) == (out.width, out.height) == (42, 30)
    assert not heat.is_gray


def test_tta_quality_mode_writes_the_ensembled_image(tmp_path, tiny):
    save(tmp_path / "in" / "x.png", photo(20, 28))
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "plain"), "--model", tiny) == 0
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "tta"), "--model", tiny, "--tta") == 0
    plain, tta = (read_image(tmp_path / d / "x_x2.png") for d in ("plain", "tta"))
    assert tta.pixels.shape == plain.pixels.shape == (40, 56, 3)
    assert not np.array_equal(tta.pixels, plain.pixels)


def test_sizes_suffixes_and_formats(tmp_path, tiny):
    src = tmp_path / "in"
    save(src / "a.webp", photo(10, 20), lossless=True)
    assert sr(str(src), "-o", str(tmp_path / "o1"), "--model", tiny, "--width", "50", "--format", "same") == 0
    assert outputs(tmp_path / "o1") == ["a_w50.webp"]
    assert read_image(tmp_path / "o1" / "a_w50.webp").pixels.shape == (25, 50, 3)
    assert sr(str(src), "-o", str(tmp_path / "o2"), "--model", tiny, "--outscale", "3.7", "-f", "jpg",
              "--suffix", "_big") == 0
    assert read_image(tmp_path / "o2" / "a_big.jpg").pixels.shape == (37, 74, 3)


def test_quality_is_long_form_only_and_q_is_not_quality(tmp_path, tiny, capsys):
    """-q means --quiet wherever it exists (sr eval); sr upscale has no quiet mode, so no -q."""
    save(tmp_path / "in" / "a.png", photo(10, 12))
    with pytest.raises(SystemExit) as e:
        sr(str(tmp_path / "in"), "-o", str(tmp_path / "o1"), "--model", tiny, "-f", "jpg", "-q", "92")
    assert e.value.code == 2
    assert "unrecognized arguments: -q" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists()
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "o2"), "--model", tiny, "-f", "jpg",
              "--quality", "92") == 0
    assert outputs(tmp_path / "o2") == ["a_x2.jpg"]


def test_exif_orientation_and_icc_profile(tmp_path, tiny):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    save(tmp_path / "in" / "rot.jpg", photo(10, 20), exif=exif.tobytes(), quality=95)
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    save(tmp_path / "in" / "icc.png", photo(8, 8), icc_profile=icc)
    assert sr(str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", tiny) == 0
    with Image.open(tmp_path / "out" / "rot_x2.png") as im:
        assert im.size == (20, 40)  # displayed 10 wide x 20 high, doubled
    with Image.open(tmp_path / "out" / "icc_x2.png") as im:
        assert im.info.get("icc_profile") == icc


@pytest.mark.parametrize(
    "args,message",
    [(["--outscale", "2", "--width", "9"], "either"), (["--outscale", "-1"], "outscale"),
     (["--tile", "big"], "--tile"), (["--quality", "0"], "quality"), (["--device", "quantum"], "device"),
     (["--scale", "4"], "not available"), (["--tile", "10"], "too small")],
)
def test_bad_arguments_are_clear_errors(tmp_path, tiny, capsys, args, message):
    save(tmp_path / "x.png", photo(6, 6))
    assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", tiny, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def unwritable_folder(tmp_path: Path) -> Path:
    """An existing folder this process cannot write to: a read-only one, or for root (whom
    permission bits do not stop) sysfs, where nobody may create files."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError:
        return Path("/sys")
    os.close(fd)
    os.unlink(probe)
    pytest.skip("running as root with a writable /sys: no folder here that root cannot write to")


def test_an_unusable_output_folder_fails_before_any_image_is_computed(tmp_path, tiny, monkeypatch, capsys):
    from sr.inference import Upscaler

    calls = []
    monkeypatch.setattr(Upscaler, "upscale", lambda *a, **k: calls.append(a))
    save(tmp_path / "x.png", photo(6, 6))
    (tmp_path / "a-file").write_text("not a folder")
    cases = [(unwritable_folder(tmp_path), "cannot write to output folder"),
             (tmp_path / "a-file" / "out", "cannot create output folder")]
    for outdir, message in cases:
        assert sr(str(tmp_path / "x.png"), "-o", str(outdir), "--model", tiny) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"sr upscale: error: {message} {outdir} (") and "\n" not in err
    assert calls == []


def test_unknown_model_and_no_inputs(tmp_path, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", "no-such-model") == 2
    assert "unknown model" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert sr(str(tmp_path / "empty"), "-o", str(tmp_path / "out"), "--model", str(tmp_path / "x.png")) == 2


def _sigint_as_a_shell_gives_it() -> None:
    """In the child: SIGINT unblocked and at its default, as a terminal's shell starts a command. A
    blocked or ignored SIGINT survives exec, and in the full suite the batch then ran to its end
    (exit 0, nothing on stderr) after an earlier test's library had left the test process so."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_mid_batch_leaves_only_complete_files(tmp_path):
    torch.manual_seed(0)
    weights = save_weights(build_model("asa-small-x2"), tmp_path / "small-x2.safetensors")
    src, out = tmp_path / "in", tmp_path / "out"
    # Seconds of work uninterrupted (one thread; the whole test took 4 s in bf16 on the AMX Xeon,
    # fp32 is ~2.5x slower): a window between the first output and the last wide enough that a slow
    # poll on a loaded machine still signals mid-batch. 160 px images finished in 2 s once bf16 came,
    # and on a loaded machine the batch was done before the signal.
    count = 120
    for i in range(count):
        save(src / f"img{i:03d}.png", photo(320, 320, seed=i))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sr", "upscale", str(src), "-o", str(out), "--model", str(weights),
         "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
        preexec_fn=_sigint_as_a_shell_gives_it,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (out.exists() and any(out.glob("*_x2.png"))):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr and "Traceback" not in stderr
    written = sorted(out.iterdir())
    assert 1 <= len(written) < count, "the batch was not interrupted mid-way"
    for f in written:  # no temp files, and every output decodes completely
        assert f.name.endswith("_x2.png") and not f.name.startswith(".")
        assert read_image(f).pixels.shape == (640, 640, 3)


def test_bench_upscale_reports_models_and_bicubic(tmp_path, tiny, capsys):
    for i in range(2):
        save(tmp_path / "hr" / f"{i}.png", photo(96, 80, seed=i))
    report = tmp_path / "bench.json"
    assert main(["bench", "upscale", "--model", tiny, "--images", str(tmp_path / "hr"), "--threads", "1",
                 "--json", str(report)]) == 0
    rows = json.loads(report.read_text())
    assert [r["method"] for r in rows] == ["tiny-x2", "bicubic (sr imresize)", "bicubic (PIL)"]
    assert all(r["mp_per_s"] > 0 and r["images"] == 2 for r in rows)
    assert all(r["output_mp"] == round(2 * 96 * 80 / 1e6, 3) for r in rows)
    assert all("mp_per_s_repeat" not in r for r in rows)
    assert rows[0]["attention_path"] == "tiered"  # the CPU default
    assert "MP/s" in capsys.readouterr().out
    assert main(["bench", "upscale", "--model", tiny, "--images", str(tmp_path / "hr"), "--threads", "1",
                 "--repeat", "--json", str(report)]) == 0
    rows = json.loads(report.read_text())
    assert all(r["mp_per_s_repeat"] > 0 and r["seconds_repeat"] >= 0 for r in rows)
    assert "MP/s again" in capsys.readouterr().out
    sweep = tmp_path / "sweep.json"
    assert main(["bench", "upscale", "--model", tiny, "--images", str(tmp_path / "hr"), "--threads", "1",
                 "--sweep-tile", "32", "--sweep-overlaps", "0,4", "--json", str(sweep)]) == 0
    rows = json.loads(sweep.read_text())
    assert [(r["overlap"], r["blend"]) for r in rows] == [(0, "none"), (4, "cut"), (4, "fade"), (4, "linear")]
    assert all(r["mean_psnr"] > rows[0]["mean_psnr"] + 5 for r in rows[1:])  # overlap pays off
    assert all(r["compute"] >= 1 and r["tiles"] == 8 for r in rows)


def test_static_attention_path_writes_the_same_image(tmp_path, tiny, capsys):
    src = save(tmp_path / "in" / "rgb.png", photo(37, 29))
    assert sr(str(src), "-o", str(tmp_path / "tiered"), "--model", tiny) == 0
    assert sr(str(src), "-o", str(tmp_path / "static"), "--model", tiny, "--attention-path", "static") == 0
    a = np.asarray(Image.open(tmp_path / "tiered" / "rgb_x2.png")).astype(int)
    b = np.asarray(Image.open(tmp_path / "static" / "rgb_x2.png")).astype(int)
    assert a.shape == b.shape == (74, 58, 3) and np.abs(a - b).max() <= 1  # 8-bit rounding at most
    capsys.readouterr()
    with pytest.raises(SystemExit):
        sr(str(src), "-o", str(tmp_path / "x"), "--model", tiny, "--attention-path", "fast")
    assert "invalid choice" in capsys.readouterr().err


def test_bench_paths_compares_inference_paths_side_by_side(tmp_path, tiny, capsys):
    save(tmp_path / "in" / "a.png", photo(40, 56))
    args = ["bench", "paths", "--model", tiny, "--images", str(tmp_path / "in"), "--threads", "1",
            "--rounds", "1"]
    assert main([*args, "--paths", "tiered,static"]) == 0
    out = capsys.readouterr().out
    assert "tiered" in out and "(reference)" in out
    static_row = next(line for line in out.splitlines() if line.startswith("static"))
    assert "dB" in static_row or "identical" in static_row
    assert main([*args, "--paths", "tiered,bogus"]) == 2
    assert "unknown path(s) bogus" in capsys.readouterr().err


# --- --model photo / auto and --denoise ----------------------------------------------------------

@pytest.fixture(scope="module")
def photo_weights(tmp_path_factory) -> Path:
    """A weights folder with asa-base-x2 and photo-x2: tiny networks of one architecture, other weights."""
    folder = tmp_path_factory.mktemp("photo-weights")
    for name, seed in (("asa-base", 0), ("photo", 1)):
        torch.manual_seed(seed)
        net = SRNet(NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention="adaptive",
                              attn_options=dict(ASA)))
        save_weights(net, folder / f"{name}-x2.safetensors")
    return folder


@pytest.fixture
def shipped(photo_weights, monkeypatch) -> Path:
    """Make photo_weights the folder family names are looked up in (SR_WEIGHTS_DIR, as --weights-dir)."""
    monkeypatch.setenv("SR_WEIGHTS_DIR", str(photo_weights))
    return photo_weights


def test_model_auto_picks_per_file_and_says_so(tmp_path, shipped, capsys):
    src = tmp_path / "in"
    save(src / "a.jpg", photo(12, 16), quality=72)
    save(src / "b.png", photo(12, 16))
    save(src / "c.webp", photo(12, 16), quality=80)
    save(src / "d.webp", photo(12, 16), lossless=True)
    assert sr(str(src), "-o", str(tmp_path / "dry"), "--model", "auto", "-n") == 0
    assert "a.jpg -> " in capsys.readouterr().out  # the dry run names the choice too
    assert sr(str(src), "-o", str(tmp_path / "auto"), "-v") == 0  # auto is the default
    out = capsys.readouterr().out
    # the choice and why, then the network that ran and its number type
    assert "(auto: photo (JPEG, quality ~72): photo-x2 in " in out
    assert "(auto: asa-base (PNG, lossless): asa-base-x2 in " in out
    assert "(auto: photo (WebP, quality ~" in out
    assert "(auto: asa-base (WEBP, lossless): asa-base-x2 in " in out
    assert "auto: asa-base for 2 files, photo for 2 files" in out
    for model in ("photo", "asa-base"):
        assert sr(str(src), "-o", str(tmp_path / model), "--model", model) == 0
    capsys.readouterr()
    for name, model in (("a", "photo"), ("b", "asa-base"), ("c", "photo"), ("d", "asa-base")):
        got = np.asarray(Image.open(tmp_path / "auto" / f"{name}_x2.png"))
        np.testing.assert_array_equal(got, np.asarray(Image.open(tmp_path / model / f"{name}_x2.png")))


def test_denoise_0_is_asa_base_and_1_is_photo(tmp_path, shipped, capsys):
    src = save(tmp_path / "in" / "a.png", photo(12, 16))
    runs = {"base": ["--model", "asa-base"], "photo": ["--model", "photo"],
            "d0": ["--model", "photo", "--denoise", "0"], "d1": ["--model", "photo", "--denoise", "1"],
            "half": ["--model", "photo", "--denoise", "0.5", "-v"]}
    for name, args in runs.items():
        assert sr(str(src), "-o", str(tmp_path / name), *args) == 0
    assert "(photo-x2@denoise=0.5 in " in capsys.readouterr().out
    img = {name: np.asarray(Image.open(tmp_path / name / "a_x2.png")) for name in runs}
    np.testing.assert_array_equal(img["d0"], img["base"])
    np.testing.assert_array_equal(img["d1"], img["photo"])
    assert not np.array_equal(img["base"], img["photo"])


@pytest.mark.parametrize("value", ["2", "-1", "nan", "inf", "abc"])
def test_bad_denoise_values_exit_2_with_a_message(tmp_path, shipped, capsys, value):
    save(tmp_path / "x.png", photo(6, 6))
    with pytest.raises(SystemExit) as e:
        sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", "photo", "--denoise", value)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --denoise: denoise must be a number from 0 to 1" in err and repr(value) in err
    assert not (tmp_path / "out").exists()


def test_denoise_with_another_model_is_an_error(tmp_path, shipped, tiny, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    for model in ("asa-base", tiny):
        assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", model,
                  "--denoise", "0.5") == 2
        assert "--denoise applies only to the models photo and auto" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_help_documents_auto_and_denoise(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no line breaks inside the phrases (argparse breaks at hyphens)
    with pytest.raises(SystemExit):
        main(["upscale", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("'auto' (per input file, read from the file itself: photo for lossy files, JPEG or WebP below "
            f"quality {NEAR_LOSSLESS_QUALITY}; asa-base for the rest") in text
    assert "(default: auto)" in text
    assert "--denoise D" in text and "(1-D)*asa-base + D*photo" in text


# --- --look -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def natural_weights(tmp_path_factory) -> Path:
    """asa-base and photo at x2 and x3, photo-natural at x2 only: tiny networks of one architecture."""
    folder = tmp_path_factory.mktemp("natural-weights")
    names = [("asa-base", 2, 0), ("asa-base", 3, 1), ("photo", 2, 2), ("photo", 3, 3),
             ("photo-natural", 2, 4)]
    for name, scale, seed in names:
        torch.manual_seed(seed)
        net = SRNet(NetConfig(scale=scale, channels=8, blocks=2, attn_every=2, heads=2, attention="adaptive",
                              attn_options=dict(ASA)))
        save_weights(net, folder / f"{name}-x{scale}.safetensors")
    return folder


@pytest.fixture
def shipped_natural(natural_weights, monkeypatch) -> Path:
    monkeypatch.setenv("SR_WEIGHTS_DIR", str(natural_weights))
    return natural_weights


def test_look_0_is_photo_1_is_photo_natural_and_v_names_it(tmp_path, shipped_natural, capsys):
    src = save(tmp_path / "in" / "a.png", photo(12, 16))
    jpg = save(tmp_path / "jpg" / "b.jpg", photo(12, 16), quality=72)
    runs = {"photo": ["--model", "photo"], "natural": ["--model", "photo-natural"],
            "l0": ["--model", "photo", "--look", "0"], "l1": ["--model", "photo", "--look", "1"],
            "half": ["--model", "photo", "--look", "0.5", "-v"]}
    for name, args in runs.items():
        assert sr(str(src), "-o", str(tmp_path / name), "--precision", "fp32", *args) == 0
    assert "(photo-x2@look=0.5 in fp32)" in capsys.readouterr().out
    img = {name: (tmp_path / name / "a_x2.png").read_bytes() for name in runs}
    assert img["l0"] == img["photo"] and img["l1"] == img["natural"]
    assert len({img["photo"], img["natural"], img["half"]}) == 3
    assert sr(str(jpg), "-o", str(tmp_path / "auto"), "--look", "0.5", "--denoise", "0.5", "-v") == 0
    assert ("(auto: photo, denoise 0.5, look 0.5 (JPEG, quality ~72): photo-x2@denoise=0.5,look=0.5 in "
            in capsys.readouterr().out)


@pytest.mark.parametrize("value", ["2", "-0.5", "nan", "abc"])
def test_bad_look_values_exit_2_with_a_message(tmp_path, shipped_natural, capsys, value):
    save(tmp_path / "x.png", photo(6, 6))
    with pytest.raises(SystemExit) as e:
        sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", "photo", "--look", value)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --look: look must be a number from 0 to 1" in err and repr(value) in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_look_errors_name_the_model_and_the_missing_scale(tmp_path, shipped_natural, tiny, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    for model in ("asa-base", "photo-natural", tiny):
        assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", model,
                  "--look", "0.5") == 2
        assert "--look applies only to the models photo and auto" in capsys.readouterr().err
    for model in ("photo", "auto"):  # refused before any image is read
        assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", model, "--look", "0.5",
                  "--scale", "3") == 2
        err = capsys.readouterr().err
        assert "photo-natural has no x3 weights" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert sr(str(tmp_path / "x.png"), "-o", str(tmp_path / "out"), "--model", "photo", "--scale", "3") == 0


def test_help_documents_look(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main(["upscale", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("--look L 0..1, with --model photo or auto only: 0 = photo as trained (fidelity-first, default), "
            "1 = photo-natural: GAN-trained texture; in between blends the weights") in text


@pytest.mark.cpu_bf16  # forces bf16 on the CPU
def test_precision_flag_runs_bf16_close_to_fp32_and_rejects_other_names(tmp_path, tiny, capsys):
    src = save(tmp_path / "in" / "rgb.png", photo(37, 29))
    for p in ("fp32", "bf16"):
        assert sr(str(src), "-o", str(tmp_path / p), "--model", tiny, "--precision", p) == 0
    a = np.asarray(Image.open(tmp_path / "fp32" / "rgb_x2.png")).astype(float)
    b = np.asarray(Image.open(tmp_path / "bf16" / "rgb_x2.png")).astype(float)
    assert np.any(a != b) and 10 * np.log10(255**2 / np.mean((a - b) ** 2)) >= 45
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        sr(str(src), "-o", str(tmp_path / "x"), "--model", tiny, "--precision", "fp16")
    assert exit_info.value.code == 2 and "invalid choice: 'fp16'" in capsys.readouterr().err


def test_bf16_where_the_cpu_cannot_run_it_is_a_clear_error(tmp_path, tiny, capsys, monkeypatch):
    monkeypatch.setattr("sr.inference.precision.cpu_runs_bf16", lambda: False)  # an AVX2-only CPU
    src = save(tmp_path / "in" / "rgb.png", photo(37, 29))
    code = sr(str(src), "-o", str(tmp_path / "out"), "--model", tiny, "--precision", "bf16")
    err = capsys.readouterr().err
    assert code != 0 and "this CPU cannot run bf16 convolutions" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert sr(str(src), "-o", str(tmp_path / "auto"), "--model", tiny) == 0  # auto: fp32 there


def test_large_inputs_get_a_per_tile_bar_that_follows_the_engine():
    from io import StringIO

    from tqdm import tqdm

    from sr.batch.jobs import Job
    from sr.batch.local import TILE_BAR_PIXELS, tile_bar, tile_progress
    from sr.io import DecodedImage

    job = Job(Path("big.png"), Path("big"))
    small = DecodedImage(np.zeros((8, 8, 3), np.float32))
    assert tile_bar(job, small) is None
    side = int(TILE_BAR_PIXELS**0.5) + 1
    big = DecodedImage(np.broadcast_to(np.zeros((1, 1, 3), np.float32), (side, side, 3)))
    bar = tile_bar(job, big)
    assert bar is not None and bar.disable  # pytest's stderr is no terminal: drawn nowhere
    bar.close()
    shown = tqdm(total=1, file=StringIO())
    update = tile_progress(shown)
    update(3, 12)
    assert (shown.n, shown.total) == (3, 12)
    update(12, 12)
    update(1, 40)  # a chained pass starts again
    assert (shown.n, shown.total) == (1, 40)


@pytest.mark.cpu_bf16  # forces bf16 on the CPU
def test_bench_upscale_compares_precisions_side_by_side(tmp_path, tiny, capsys):
    for i in range(2):
        save(tmp_path / "hr" / f"{i}.png", photo(64, 48, seed=i))
    report = tmp_path / "bench.json"
    base = ["bench", "upscale", "--model", tiny, "--images", str(tmp_path / "hr"), "--threads", "1"]
    assert main([*base, "--precision", "fp32,bf16", "--profile", "3", "--json", str(report)]) == 0
    rows = json.loads(report.read_text())
    assert all(len(r["profile"]) == 3 and r["profile"][0]["self_ms"] > 0 for r in rows[:2])
    assert [r["method"] for r in rows] == ["tiny-x2 fp32", "tiny-x2 bf16", "bicubic (sr imresize)",
                                           "bicubic (PIL)"]
    fp32, bf16 = rows[:2]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert fp32["speedup"] == 1.0 and bf16["speedup"] > 0 and fp32["psnr_vs_first"] is None
    assert 45 <= bf16["psnr_vs_first"] < float("inf")
    assert "speed-up" in capsys.readouterr().out
    for bad, message in (("fp32,fp16", "precision must be one of"), ("bf16,bf16", "twice")):
        assert main([*base, "--precision", bad]) == 2
        assert message in capsys.readouterr().err
    assert main([*base, "--precision", "fp32,bf16", "--repeat"]) == 2
    assert "--repeat times one precision" in capsys.readouterr().err
    assert main([*base, "--profile", "3"]) == 2
    assert "--profile N (N >= 1) goes with --precision" in capsys.readouterr().err


def test_weights_dir_names_the_folder_family_names_are_looked_up_in(tmp_path, photo_weights, capsys):
    folder = tmp_path / "weights"
    folder.mkdir()
    shutil.copy(photo_weights / "photo-x2.safetensors", folder / "mine-x2.safetensors")
    src = tmp_path / "in"
    save(src / "b.png", photo(12, 16))
    assert sr(str(src), "-o", str(tmp_path / "out"), "--model", "mine", "--weights-dir", str(folder)) == 0
    assert outputs(tmp_path / "out") == ["b_x2.png"]
    capsys.readouterr()
    assert sr(str(src), "-o", str(tmp_path / "other"), "--model", "mine") == 2  # not a shipped family
    assert "unknown model 'mine'" in capsys.readouterr().err


def test_a_missing_weights_folder_is_one_line_exit_2(tmp_path, capsys):
    src = tmp_path / "in"
    save(src / "b.png", photo(12, 16))
    missing = tmp_path / "nowhere"
    assert sr(str(src), "-o", str(tmp_path / "out"), "--weights-dir", str(missing)) == 2
    assert capsys.readouterr().err == f"sr upscale: error: weights folder not found: {missing}\n"
    assert not (tmp_path / "out").exists()
