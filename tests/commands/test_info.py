"""``sr info``: presets, weights files (with their metadata), the --all table and errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from sr.cli import main
from sr.commands.info import attention_summary
from sr.descriptor import preset_of
from sr.models import PRESETS, build_config, build_model, count_macs, count_params
from sr.weights import save_weights


def _info(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["info", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _fields(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines()[1:]:
        key, _, value = line.strip().partition("  ")
        rows[key] = value.strip()
    return rows


def test_preset_summary_default_size(capsys: pytest.CaptureFixture) -> None:
    # MACs of the adaptive blocks follow the gate, so both sides get the same (seeded) random weights.
    torch.manual_seed(0)
    code, out, err = _info(capsys, "asa-small-x4")  # x4 is the cheapest to count at 1280x720
    assert code == 0 and err == ""
    torch.manual_seed(0)
    model = build_model("asa-small-x4").eval()
    f = _fields(out)
    assert out.splitlines()[0] == "asa-small-x4"
    assert f["preset"] == "asa-small" and f["scale"] == "x4"
    assert f["channels"] == str(PRESETS["asa-small"]["channels"])
    assert f["params"].startswith(f"{count_params(model):,} ")
    assert f["attention"] == "adaptive (region=4, k_min=0, k_max=8, budget=4.0, stride=2, own_first=False)"
    # estimated from a count at an eighth of the side (a full count runs the network on the whole input)
    est = count_macs(model, (88, 160)) * (720 * 1280) / (88 * 160)
    assert f["MACs"] == (f"{est / 1e9:.2f} G for a 1280x720 output (320x180 input; estimated: counted for "
                         "160x88, scaled by the area)")
    assert est == pytest.approx(count_macs(model, (720, 1280)), rel=0.004)
    assert "random weights" in f["source"]


def test_a_model_is_not_run_at_full_size_for_its_macs(capsys: pytest.CaptureFixture, monkeypatch) -> None:
    """`sr info MODEL` counts MACs on a small probe: a full count of photo-x2 at 1280x720 took 4.9 s of
    CPU and 1 GB; small sizes are counted as they are."""
    import sr.commands.info as info

    counted = []
    real = info.count_macs
    monkeypatch.setattr(info, "count_macs", lambda model, hw: counted.append(hw) or real(model, hw))
    assert _info(capsys, "asa-small-x2")[0] == 0
    assert counted == [(90, 160)]
    assert _info(capsys, "asa-small-x2", "--size", "96x64")[0] == 0
    assert counted[1:] == [(64, 96)]


def test_weights_file_shows_metadata(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    model = build_model("asa-small-x2", attention="window")
    path = save_weights(
        model, tmp_path / "w.safetensors", name="win-x2", steps="1500", train_seconds="5400",
        validation=json.dumps({"Set5": {"psnr": 35.123, "ssim": 0.9412}}), note="ablation",
    )
    code, out, _ = _info(capsys, str(path), "--size", "96x64")
    assert code == 0
    f = _fields(out)
    assert out.splitlines()[0] == "w"  # the model's name (its file's stem), not the training run's
    assert f["trained as"] == "win-x2"
    assert f["source"] == f"weights file {path}"
    assert f["preset"] == "asa-small (attention: window)"
    assert f["attention"] == "window (window=8, stride=2)"
    assert f["params"].startswith(f"{count_params(model):,} ")
    assert f["MACs"].endswith("G for a 96x64 output (48x32 input)")
    assert f["training steps"] == "1500"
    assert f["training time"] == "1.50 h (5400 s)"
    assert f["validation"] == "Set5 35.123 dB / 0.9412"
    assert f["note"] == "ablation"


def test_all_table(capsys: pytest.CaptureFixture) -> None:
    code, out, _ = _info(capsys, "--all", "--size", "48x48")
    assert code == 0
    lines = out.splitlines()
    assert "48x48 output" in lines[0] and lines[1].split()[0] == "model"
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert sorted(rows) == sorted(f"{p}-x{s}" for p in PRESETS for s in (2, 3, 4))
    base = build_model("asa-base-x3")
    assert rows["asa-base-x3"][4] == f"{count_params(base):,}"
    assert float(rows["asa-base-x3"][5]) == pytest.approx(count_macs(base.eval(), (48, 48)) / 1e9, abs=0.005)


def test_all_table_estimates_large_outputs_from_a_smaller_count() -> None:
    """--all counts at 1/8 of the side and scales by the area: within 1% of the full count."""
    from sr.commands.info import estimated_macs, probe_size

    model = build_model("asa-small-x4").eval()
    assert probe_size((720, 1280), 4) == (88, 160) and probe_size((48, 48), 4) == (48, 48)
    assert estimated_macs(model, (720, 1280)) == pytest.approx(count_macs(model, (720, 1280)), rel=0.01)


def test_shipped_name_prefers_the_weights_file(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    path = save_weights(build_model("asa-small-x3"), tmp_path / "asa-small-x3.safetensors", steps="42")
    code, out, _ = _info(capsys, "asa-small-x3", "--size", "48x48", "--weights-dir", str(tmp_path))
    assert code == 0
    f = _fields(out)
    assert f["source"] == f"weights file {path}" and f["training steps"] == "42"
    code, out, _ = _info(capsys, "--all", "--size", "24x24", "--weights-dir", str(tmp_path))
    shipped = [line.split() for line in out.splitlines() if not line.endswith(" -")]
    assert [(row[0], row[-1]) for row in shipped[2:]] == [("asa-small-x3", "asa-small-x3")]


def test_experimental_family_is_marked(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    save_weights(build_model("conv-base-x2"), tmp_path / "photo-conv-x2.safetensors", preset="conv-base",
                 experimental="the conv-only arm of a paired comparison")
    code, out, _ = _info(capsys, "--weights-dir", str(tmp_path))
    assert code == 0
    assert "photo-conv  x2, 0.32 M params (experimental)" in out
    assert "experimental: the conv-only arm of a paired comparison" in out
    code, out, _ = _info(capsys, "--all", "--size", "24x24", "--weights-dir", str(tmp_path))
    row = next(line.split() for line in out.splitlines() if line.startswith("conv-base-x2 "))
    assert row[3] == "none" and row[-2:] == ["photo-conv-x2", "(experimental)"]


def test_helpers() -> None:
    assert preset_of(build_config("asa-medium", 3)) == "asa-medium"
    assert preset_of(build_config("asa-medium", 3, channels=30)) == "custom"
    assert attention_summary(build_config("asa-base", 2, attention="none")) == "none"
    topk = build_config("asa-base", 2, attention="topk")
    assert attention_summary(topk) == "topk (region=4, k=4, stride=2)"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no-such-model"], "unknown model 'no-such-model'"),
        (["asa-base-x5"], "unknown model 'asa-base-x5'"),
        (["{tmp}/missing.safetensors"], "weights file not found"),
        (["{tmp}/bad.safetensors"], "not a readable safetensors file"),
        (["asa-base-x2", "--all"], "give either a MODEL or --all"),
        (["asa-base-x2", "--size", "big"], "--size must look like 1280x720"),
    ],
)
def test_errors(capsys: pytest.CaptureFixture, tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json")
    code, out, err = _info(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2 and out == ""
    assert err.startswith("sr info: error: ") and message in err


def test_no_argument_lists_the_shipped_families_from_metadata_alone(
    capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sr.weights

    torch.manual_seed(0)
    data = json.dumps(["../shared/datasets/train", "../shared/datasets/train-extra/polyu_half"])
    for s in (2, 4):
        save_weights(build_model(f"asa-small-x{s}"), tmp_path / f"mine-x{s}.safetensors", train_data=data,
                     validation=json.dumps({"Set5": {"psnr": 30 + s, "ssim": 0.9}}))
    monkeypatch.setattr(sr.weights, "load_weights", None)  # listing must not read any tensor
    code, out, err = _info(capsys, "--weights-dir", str(tmp_path))
    assert code == 0 and err == ""
    header, lines = out.splitlines()[:2], out.splitlines()[2:]
    assert header[1].endswith(f"{tmp_path / 'README.md'}, Licence and terms")
    assert lines[0].startswith("mine  x2 / x4, ") and lines[0].endswith(" M params")
    assert lines[1].strip() == "PSNR Set5 32.00 / 34.00 dB (x2 / x4)"
    assert lines[2].strip() == "terms: non-commercial research only (PolyU)"
    assert lines[3].strip() == "not stated at the source (BSD200, T91, Kodak24, McMaster)"
    assert lines[3].index("not") == lines[2].index("non")  # aligned under the first condition
    assert "asa-small" not in out  # untrained presets: only with --all


def test_every_condition_is_listed_div2k_included(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    data = json.dumps([f"../shared/datasets/{d}" for d in (
        "train", "train-extra/polyu_half", "train-extra/sunhays80_half", "train-extra/bsds500test",
        "train-extra/div2k_gray")])
    save_weights(build_model("asa-small-x2"), tmp_path / "mine-x2.safetensors", train_data=data)
    code, out, _ = _info(capsys, "--weights-dir", str(tmp_path))
    assert code == 0
    listed = [line.strip().removeprefix("terms: ") for line in out.splitlines()[4:]]
    assert listed == ["non-commercial research only (PolyU)", "no licence stated (Sun-Hays 80)",
                      "academic research (DIV2K)", "research use (BSDS500)",
                      "not stated at the source (BSD200, T91, Kodak24, McMaster)"]


def test_a_family_name_shows_each_scale(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    for s in (2, 3):
        save_weights(build_model(f"asa-small-x{s}"), tmp_path / f"mine-x{s}.safetensors", name=f"run-x{s}")
    code, out, _ = _info(capsys, "mine", "--weights-dir", str(tmp_path))
    assert code == 0
    blocks = out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["mine-x2", "mine-x3"]
    assert [_fields(b)["trained as"] for b in blocks] == ["run-x2", "run-x3"]
    assert [_fields(b)["scale"] for b in blocks] == ["x2", "x3"]


def test_the_heading_is_the_public_name_and_a_same_run_name_is_not_repeated(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    save_weights(build_model("asa-small-x2"), tmp_path / "asa-small-x2.safetensors", name="x2-extra")
    save_weights(build_model("asa-small-x3"), tmp_path / "mine-x3.safetensors", name="mine-x3")
    folder = ("--weights-dir", str(tmp_path))
    code, out, _ = _info(capsys, "asa-small-x2", "--size", "48x48", *folder)
    assert code == 0 and out.splitlines()[0] == "asa-small-x2" and _fields(out)["trained as"] == "x2-extra"
    assert out.count("x2-extra") == 1
    code, out, _ = _info(capsys, "mine-x3", "--size", "48x48", *folder)
    assert code == 0 and out.splitlines()[0] == "mine-x3" and "trained as" not in out


def test_notes_are_shown_without_tracker_references(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """A weights file's note may cite the project's tracker; sr info, listing or in full, does not."""
    from sr.commands.info import public_text

    save_weights(build_model("conv-base-x2"), tmp_path / "photo-conv-x2.safetensors", preset="conv-base",
                 experimental="issue 53's conv-only arm: a research baseline",
                 note="measured (issue 54, row E) on a Xeon, as asked in issue 42")
    for argv in ((), ("photo-conv-x2", "--size", "48x48")):
        code, out, _ = _info(capsys, *argv, "--weights-dir", str(tmp_path))
        assert code == 0 and "the conv-only arm: a research baseline" in out
        assert "issue" not in out.lower()
    assert _fields(out)["note"] == "measured on a Xeon, as asked"
    assert public_text("no tracker here") == "no tracker here"


def test_all_table_is_the_same_on_every_run_and_leaves_the_rng_alone() -> None:
    from sr.commands.info import table_all

    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = table_all((48, 48))
    assert torch.rand(1) == expected_next  # the caller's random stream is untouched
    assert table_all((48, 48)) == first


@pytest.mark.slow
def test_the_docs_gmacs_table_is_what_sr_info_all_prints() -> None:
    """docs/evaluation.md quotes `sr info --all`'s GMACs at 1280x720: the same figures."""
    from sr.commands.info import table_all

    docs = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text(encoding="utf-8")
    quoted = {}
    for m in re.finditer(r"^\| (asa-\w+)-x2 / x3 / x4 \|.*\| ([\d.]+) / ([\d.]+) / ([\d.]+) \|$", docs, re.M):
        for scale, value in zip((2, 3, 4), m.groups()[1:], strict=True):
            quoted[f"{m.group(1)}-x{scale}"] = value
    assert len(quoted) == 12
    printed = {row[0]: row[5] for row in table_all((720, 1280))[1:]}
    assert {name: printed[name] for name in quoted} == quoted


def test_the_shipped_catalogue_shows_no_tracker_words(capsys: pytest.CaptureFixture) -> None:
    """The shipped photo-conv files' note cites a tracker issue; what sr info prints does not."""
    code, out, _ = _info(capsys)
    assert code == 0 and "photo-conv" in out
    assert re.search(r"\bissue\b|\bsessions?\b", out, re.I) is None


@pytest.mark.parametrize(("kind", "said"), [
    ("amx", "auto here: bf16: AMX-BF16, measured 2.4-2.7x fp32 end to end"),
    ("avx512_bf16", "auto here: bf16: AVX512_BF16, measured 1.9-2.3x fp32 from 800 px "
                    "(inputs under 0.26 MP: fp32)"),
    ("emulated", "auto here: fp32: no AMX or AVX512_BF16 on this CPU (bf16 is slower than fp32 there, or "
                 "cannot run)"),
])
def test_info_says_the_cpu_precision_and_why(kind: str, said: str, capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sr.inference.precision.cpu_bf16_kind", lambda: kind)
    monkeypatch.setattr("sr.cpu.cpu_bf16_kind", lambda: kind)
    monkeypatch.setattr("sr.inference.precision.cpu_model", lambda: None)  # the kind's rule, not a model's
    assert main(["info", "asa-base-x2"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "CPU precision" in ln)
    assert line.split("CPU precision", 1)[1].strip() == said


def test_the_weights_folder_comes_from_the_flag_else_sr_weights_dir(
    capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag, env = tmp_path / "flag", tmp_path / "env"
    save_weights(build_model("asa-small-x2"), flag / "fromflag-x2.safetensors")
    save_weights(build_model("asa-small-x2"), env / "fromenv-x2.safetensors")
    monkeypatch.setenv("SR_WEIGHTS_DIR", f" {env} ")  # blanks around it dropped, as sr serve reads it
    code, out, _ = _info(capsys)
    assert code == 0 and f"shipped models ({env})" in out and "fromenv" in out and "asa-base" not in out
    code, out, _ = _info(capsys, "--weights-dir", str(flag))
    assert code == 0 and "fromflag" in out and "fromenv" not in out
    monkeypatch.setenv("SR_WEIGHTS_DIR", " ")  # blank: unset
    code, out, _ = _info(capsys)
    assert code == 0 and "asa-base" in out and "fromenv" not in out


def test_a_missing_weights_folder_is_an_error(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = _info(capsys, "asa-base-x2", "--weights-dir", str(tmp_path / "nowhere"))
    assert (code, out) == (2, "")
    assert err == f"sr info: error: weights folder not found: {tmp_path / 'nowhere'}\n"


def test_an_unknown_name_lists_the_models_of_the_weights_folder(capsys: pytest.CaptureFixture,
                                                                tmp_path: Path) -> None:
    save_weights(build_model("asa-small-x2"), tmp_path / "mine-x2.safetensors")
    code, _, err = _info(capsys, "nope", "--weights-dir", str(tmp_path))
    assert code == 2 and "a shipped model (mine-x2)" in err
