"""``sr bench attention`` on tiny maps: every registered kind in the table, the JSON, memory figures,
crossings with dense, out-of-memory cells, skips and errors."""

from __future__ import annotations

import json

import pytest

from benchmarks.attention import Row, checks, crossing, kind_methods, main, method_names
from sr.cli import main as sr_main
from sr.cpu import cpu_runs_bf16
from sr.models.attention import AttentionBranch, attention_kinds, register_attention, registry

# bf16 rows where this CPU runs bf16 convolutions (the projections are convs); fp32 everywhere
DTYPES = ("fp32", "bf16") if cpu_runs_bf16() else ("fp32",)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test vanish after it (a copy of the registry stands in)."""
    monkeypatch.setattr(registry, "_VARIANTS", dict(registry._VARIANTS))


def test_tiny_run_lists_every_registered_kind_with_rows_in_each_precision(tmp_path, capsys):
    out = tmp_path / "attn.json"
    rc = sr_main(["bench", "attention", "--sizes", "16,32", "--repeat", "1", "--threads", "1",
                  "--channels", "12", "--dtypes", ",".join(DTYPES), "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    legend, table = text.split("  fp32 16x16 done")
    kinds = attention_kinds()
    assert {"channel", "channel-sa", "spatial", "cbam"} <= set(kinds)
    methods_of = kind_methods()
    for kind in kinds:  # every registered kind: its line in the legend and, but for none, its rows
        assert f"\n  {kind} " in legend
        assert bool(methods_of[kind]) == (kind != "none"), kind
        for method in methods_of[kind]:
            assert all(f"  {dtype}  {method} " in table for dtype in DTYPES), method
    assert "O(N C^2 / heads)" in legend and "O(N^2 d)" in legend
    assert "crosses dense-sdpa's" in text

    data = json.loads(out.read_text())
    assert set(data["complexity"]) == set(kinds)
    rows = {(r["size"], r["dtype"], r["method"]): r for r in data["rows"]}
    methods = method_names()
    assert "none" not in methods
    assert {"dense-textbook", "dense-sdpa", "adaptive-b4", "channel-sa"} <= set(methods)
    expected = [*methods, "projections", "projections-v"]
    assert set(rows) == {(s, d, m) for s in (16, 32) for d in DTYPES for m in expected}
    for (size, dtype, method), r in rows.items():
        assert r["tokens"] == size * size and r["skipped"] is None, (size, dtype, method, r["skipped"])
        assert r["fwd_ms"] > 0
        if not method.startswith("projections"):
            assert r["fwd_peak_mib"] > 0  # the profiler's allocation events were read
            assert r["kind"] in kinds
    assert {r["kind"] for r in data["rows"]} == {*kinds, ""} - {"none"}  # "": the projection rows
    for dtype in DTYPES:
        summary = data["checks"][dtype]
        assert set(summary["crossing_vs_dense_sdpa"]) == set(methods) - {"dense-sdpa"}
        assert all(c["how"] in ("measured", "below", "extrapolated", "never")
                   for c in summary["crossing_vs_dense_sdpa"].values())
    # The materialised matrix: (HW)^2 per head, so 16x more memory for 4x the tokens.
    growth = data["checks"]["fp32"]["peak_memory_growth_exponent"]
    assert growth["dense-textbook"] == pytest.approx(2.0, abs=0.25)
    assert rows[(32, "fp32", "dense-textbook")]["fwd_peak_mib"] > 3 * 32**4 * 4 / 2**20 * 0.9  # >= one matrix
    # Tier t gathers t regions per query region: about budget x regions in all.
    a4, a2 = rows[(32, "fp32", "adaptive-b4")]["extra"], rows[(32, "fp32", "adaptive-b2")]["extra"]
    assert a4["regions"] == 64
    assert a4["gathered_regions"] == pytest.approx(4 * 64, rel=0.1)
    assert a2["gathered_regions"] == pytest.approx(2 * 64, rel=0.1)
    assert data["config"]["threads"] == 1 and data["config"]["channels"] == 12


class Halved(AttentionBranch):
    def attend(self, q, k, v, x, aux):
        return v * 0.5


def test_a_kind_registered_later_is_benchmarked_and_one_that_cannot_build_is_reported(
    scratch_registry, capsys
):
    @register_attention("t-halved")
    def build(dim: int, heads: int, index: int) -> Halved:
        return Halved(dim, heads)

    @register_attention("t-odd-only")
    def build_odd(dim: int, heads: int, index: int) -> Halved:
        raise ValueError(f"needs an odd width, got {dim}")

    assert method_names()[-2:] == ["t-halved", "t-odd-only"]
    rc = main(["--sizes", "8", "--repeat", "1", "--threads", "1", "--channels", "6", "--dtypes", "fp32",
               "--methods", "dense-sdpa,t-halved,t-odd-only"])  # python -m benchmarks.attention
    assert rc == 0
    text = capsys.readouterr().out
    assert "  t-halved     t-halved" in text and "not stated" in text  # no expected cost known for it
    assert "fp32  t-halved " in text and "t-halved        time e" in text
    assert "fp32  t-odd-only      cannot build: needs an odd width, got 6" in text


def test_textbook_dense_that_cannot_hold_its_matrix_is_marked_out_of_memory(capsys):
    rc = sr_main(["bench", "attention", "--sizes", "8,16", "--methods", "dense-textbook,dense-sdpa,window",
                  "--repeat", "1", "--channels", "6", "--max-gib", "0.0001", "--backward",
                  "--dtypes", "fp32"])
    assert rc == 0
    text = capsys.readouterr().out
    # 3 matrices of 3 heads x 64^2 fp32 values at 8x8, twice with backward: 288 KiB > 0.0001 GiB (105 KiB)
    assert "dense-textbook  out of memory: N x N scores need 288.0 KiB (over --max-gib 0.0001)" in text
    assert "dense-textbook at 8x8 (64 tokens, fp32): out of memory" in text
    assert "dense-sdpa ran there" in text and "never holds the N x N matrix" in text
    assert "window" in text and "fwd+bwd ms" in text


def _rows(method: str, times: dict[int, float]) -> list[Row]:
    return [Row(side, side * side, method, fwd_ms=ms) for side, ms in times.items()]


def test_crossings_with_dense_are_interpolated_bounded_or_extrapolated():
    sides = (16, 32, 64, 128)
    dense = _rows("dense-sdpa", {s: 1e-6 * (s * s) ** 2 for s in sides})  # time ~ N^2
    linear = _rows("lin", {s: 1e-3 * s * s for s in sides})  # ~ N: equal to dense at N = 1000
    cheap = _rows("cheap", {s: 1e-7 * s * s for s in sides})  # below dense from the start
    slow = _rows("slow", {s: 1e-2 * s * s for s in sides})  # ~ N: equal at N = 10000 (64^2 - 128^2)
    worse = _rows("worse", {s: 2e-6 * (s * s) ** 2.5 for s in sides})  # grows faster than dense
    rows = dense + linear + cheap + slow + worse
    measured = crossing(rows, "lin")
    assert measured["how"] == "measured" and measured["tokens"] == 1000 and measured["between"] == [256, 1024]
    assert measured["side"] == pytest.approx(31.6, abs=0.1)
    assert crossing(rows, "cheap")["how"] == "below"
    cross = crossing(rows, "slow")
    assert cross["how"] == "measured" and cross["tokens"] == 10000 and cross["between"] == [4096, 16384]
    beyond = crossing([r for r in rows if r.tokens <= 64 * 64], "slow")  # only up to 64x64: extrapolated
    assert beyond["how"] == "extrapolated" and beyond["tokens"] == 10000
    assert crossing(rows, "worse")["how"] == "never"
    assert crossing(dense, "lin") is None


def test_checks_compute_speedups_budget_cuts_and_growth_per_precision():
    rows = [Row(64, 4096, "dense-sdpa", fwd_ms=100.0, fwd_peak_mib=4.0),
            Row(64, 4096, "adaptive-b4", fwd_ms=10.0, fwd_peak_mib=2.0),
            Row(64, 4096, "adaptive-b2", fwd_ms=7.0, fwd_peak_mib=2.0),
            Row(128, 16384, "adaptive-b4", fwd_ms=40.0, fwd_peak_mib=8.0),
            Row(64, 4096, "dense-sdpa", fwd_ms=50.0, dtype="bf16"),
            Row(64, 4096, "adaptive-b4", fwd_ms=10.0, dtype="bf16")]
    result = checks(rows)
    assert set(result) == {"fp32", "bf16"}
    assert result["fp32"]["speedup_vs_dense_sdpa"] == {64: 10.0}
    assert result["bf16"]["speedup_vs_dense_sdpa"] == {64: 5.0}
    assert result["fp32"]["budget_halving_time_cut"] == {64: 0.3}
    assert result["fp32"]["peak_memory_growth_exponent"]["adaptive-b4"] == pytest.approx(1.0)
    assert result["fp32"]["time_growth_exponent"]["adaptive-b4"] == pytest.approx(1.0)
    assert result["fp32"]["crossing_vs_dense_sdpa"]["adaptive-b4"]["how"] == "below"


def test_photo_features_use_the_trained_block_and_spend_by_content(tmp_path, capsys):
    out = tmp_path / "photo.json"
    rc = sr_main(["bench", "attention", "--sizes", "32", "--methods", "topk,adaptive-b4,adaptive-b2,channel",
                  "--repeat", "1", "--threads", "1", "--features", "photo", "--dtypes", "fp32",
                  "--json", str(out)])
    assert rc == 0
    assert "photo features of asa-base-x2" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["config"]["channels"] == 48 and data["config"]["heads"] == 3  # the block's own shape
    rows = {r["method"]: r for r in data["rows"]}
    a4, a2 = rows["adaptive-b4"]["extra"], rows["adaptive-b2"]["extra"]
    assert a4["mean_k"] == pytest.approx(4, abs=0.2) and a2["mean_k"] == pytest.approx(2, abs=0.2)
    assert a2["gathered_regions"] < 0.6 * a4["gathered_regions"]
    assert rows["channel"]["fwd_ms"] > 0  # the gating kind takes the block's v projection


def test_photo_features_reject_a_map_larger_than_the_photo(capsys):
    rc = sr_main(["bench", "attention", "--sizes", "512", "--methods", "adaptive-b4", "--features", "photo"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "supports sizes up to 256" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "dense,window"], "unknown method(s) dense"),
        (["--dtypes", "fp16"], "unknown dtype(s) fp16"),
        (["--repeat", "0"], "--repeat must be >= 1"),
        (["--channels", "10", "--heads", "3"], "must be a positive multiple of --heads"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["--clock", "cpu", "--device", "cuda"], "cuda"),
    ],
)
def test_bad_options_are_clear_errors(argv, message, capsys):
    rc = sr_main(["bench", "attention", "--sizes", "8", *argv])
    assert rc != 0
    err = capsys.readouterr().err
    assert err.startswith("sr bench: error:") and message in err
    assert "Traceback" not in err


def test_bad_options_through_python_m_are_clear_errors_too(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--sizes", "8", "--dtypes", "fp16"])
    assert exc.value.code == 2
    assert "python -m benchmarks.attention: error: unknown dtype(s) fp16" in capsys.readouterr().err


def test_bad_sizes_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        sr_main(["bench", "attention", "--sizes", "0,32"])
    assert exc.value.code == 2
    assert "expected positive integers" in capsys.readouterr().err
