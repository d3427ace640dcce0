"""``sr bench attention`` on tiny maps: the table, the JSON, memory figures, skips and errors."""

from __future__ import annotations

import json

import pytest

from benchmarks.attention import METHODS, checks
from sr.cli import main


def test_tiny_run_writes_rows_for_every_method(tmp_path, capsys):
    out = tmp_path / "attn.json"
    rc = main(["bench", "attention", "--sizes", "16,32", "--repeat", "1", "--threads", "1",
               "--channels", "12", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "dense-textbook" in text and "adaptive-b2" in text and "speed-up" in text
    data = json.loads(out.read_text())
    rows = {(r["size"], r["method"]): r for r in data["rows"]}
    assert set(rows) == {(s, m) for s in (16, 32) for m in (*METHODS, "projections")}
    for (size, method), r in rows.items():
        assert r["tokens"] == size * size and r["skipped"] is None
        assert r["fwd_ms"] > 0
        if method != "projections":
            assert r["fwd_peak_mib"] > 0  # the profiler's allocation events were read
    # The materialised matrix: (HW)^2 per head, so 16x more memory for 4x the tokens.
    growth = data["checks"]["peak_memory_growth_exponent"]
    assert growth["dense-textbook"] == pytest.approx(2.0, abs=0.25)
    assert rows[(32, "dense-textbook")]["fwd_peak_mib"] > 3 * 32**4 * 4 / 2**20 * 0.9  # >= one matrix
    # Tier t gathers t regions per query region: about budget x regions in all.
    a4, a2 = rows[(32, "adaptive-b4")]["extra"], rows[(32, "adaptive-b2")]["extra"]
    assert a4["regions"] == 64
    assert a4["gathered_regions"] == pytest.approx(4 * 64, rel=0.1)
    assert a2["gathered_regions"] == pytest.approx(2 * 64, rel=0.1)
    assert data["config"]["threads"] == 1 and data["config"]["channels"] == 12


def test_photo_features_use_the_trained_block_and_spend_by_content(tmp_path, capsys):
    out = tmp_path / "photo.json"
    rc = main(["bench", "attention", "--sizes", "32", "--methods", "topk,adaptive-b4,adaptive-b2",
               "--repeat", "1", "--threads", "1", "--features", "photo", "--json", str(out)])
    assert rc == 0
    assert "photo features of asa-base-x2" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["config"]["channels"] == 48 and data["config"]["heads"] == 3  # the block's own shape
    rows = {r["method"]: r for r in data["rows"]}
    a4, a2 = rows["adaptive-b4"]["extra"], rows["adaptive-b2"]["extra"]
    assert a4["mean_k"] == pytest.approx(4, abs=0.2) and a2["mean_k"] == pytest.approx(2, abs=0.2)
    assert a2["gathered_regions"] < 0.6 * a4["gathered_regions"]


def test_photo_features_reject_a_map_larger_than_the_photo(capsys):
    rc = main(["bench", "attention", "--sizes", "512", "--methods", "adaptive-b4", "--features", "photo"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "supports sizes up to 256" in err and "Traceback" not in err


def test_textbook_dense_is_skipped_when_it_would_not_fit(capsys):
    rc = main(["bench", "attention", "--sizes", "8,16", "--methods", "dense-textbook,window", "--repeat", "1",
               "--channels", "6", "--max-gib", "0.0001", "--backward"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "skipped: est." in text and "GiB > 0.0001 GiB" in text
    assert "window" in text and "fwd+bwd ms" in text


def test_checks_compute_speedups_and_budget_cuts():
    from benchmarks.attention import Row

    rows = [Row(64, 4096, "dense-sdpa", fwd_ms=100.0, fwd_peak_mib=4.0),
            Row(64, 4096, "adaptive-b4", fwd_ms=10.0, fwd_peak_mib=2.0),
            Row(64, 4096, "adaptive-b2", fwd_ms=7.0, fwd_peak_mib=2.0),
            Row(128, 16384, "adaptive-b4", fwd_ms=40.0, fwd_peak_mib=8.0)]
    result = checks(rows)
    assert result["speedup_vs_dense_sdpa"] == {64: 10.0}
    assert result["budget_halving_time_cut"] == {64: 0.3}
    assert result["peak_memory_growth_exponent"]["adaptive-b4"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "dense,window"], "unknown method(s) dense"),
        (["--repeat", "0"], "--repeat must be >= 1"),
        (["--channels", "10", "--heads", "3"], "must be a positive multiple of --heads"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["--clock", "cpu", "--device", "cuda"], "cuda"),
    ],
)
def test_bad_options_are_clear_errors(argv, message, capsys):
    rc = main(["bench", "attention", "--sizes", "8", *argv])
    assert rc != 0
    err = capsys.readouterr().err
    assert err.startswith("sr bench: error:") and message in err
    assert "Traceback" not in err


def test_bad_sizes_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "attention", "--sizes", "0,32"])
    assert exc.value.code == 2
    assert "expected positive integers" in capsys.readouterr().err
