"""research.openvino_eval: a tiny run's figures and JSON (skipped without OpenVINO), bad input."""

from __future__ import annotations

import json

import pytest

from research.openvino_eval import main


def test_tiny_run_times_every_arm_and_compares_outputs(tmp_path, capsys):
    pytest.importorskip("openvino")
    pytest.importorskip("onnxscript")
    out = tmp_path / "ov.json"
    assert main(["--models", "asa-base-x2", "--tile", "32", "--rounds", "1", "--json", str(out)]) == 0
    assert "| asa-base-x2 (" in capsys.readouterr().out
    row = json.loads(out.read_text())["rows"][0]
    arms = {"torch engine", "torch static", "torch fp32", "openvino f32", "openvino bf16"}
    assert set(row["cpu_ms"]) == arms
    assert all(v > 0 for v in row["cpu_ms"].values())
    psnr = row["psnr_vs_torch_fp32_db"]
    assert "torch fp32" not in psnr and psnr["openvino f32"] > 50  # same graph, same precision
    assert psnr["openvino bf16"] > 40 and row["onnx_mb"] > 0.1
    assert row["dynamic"]["first_call_s"]["edge"] >= 0 and row["dynamic"]["steady_ms"] > 0


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--models", " , "], ["--tile", "8"]])
def test_bad_options_are_one_clear_line(argv, capsys):
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
