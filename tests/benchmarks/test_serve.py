"""sr bench serve's soak: its mix of requests and its report (the run itself: docs/service.md)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from benchmarks.serve import (
    EVASIVE_KINDS,
    HOSTILE_KINDS,
    RAW_REQUESTS,
    RssSampler,
    evasive_payloads,
    soak_kinds,
    soak_summary,
    tree_cpu_seconds,
    tree_rss_bytes,
)


def test_soak_cycle_mixes_valid_bad_and_every_hostile_kind() -> None:
    counts = Counter(soak_kinds())
    assert {k: counts[k] for k in HOSTILE_KINDS} == dict.fromkeys(HOSTILE_KINDS, 1)
    valid = counts["png"] + counts["jpg"]
    assert (valid, sum(counts.values()) - valid - len(HOSTILE_KINDS)) == (52, 12)  # 20 % of 64 bad
    assert set(RAW_REQUESTS) <= set(HOSTILE_KINDS) and set(EVASIVE_KINDS) <= set(HOSTILE_KINDS)


def test_soak_summary_counts_5xx_and_reads_rss_at_start_middle_and_end() -> None:
    sampler = RssSampler(pid=0)
    sampler.samples = [100 * 2**20, 104 * 2**20, 130 * 2**20, 108 * 2**20, 109 * 2**20]
    sampler.times = [0.0, 1.0, 2.0, 3.0, 4.0]
    results = [("png", 200, 0.1, 0, 0.0), ("strip", 504, 30.0, 0, 0.0), ("head-stall", 408, 5.0, 0, 0.0),
               ("icc-bomb", "error:ReadError", 0.1, 0, 0.0), ("png", 503, 0.1, 0, 0.0)]
    report = soak_summary(results, sampler, 100 * 2**20, 0.1)
    assert report["5xx"] == 2 and report["5xx_not_503"] == 1 and report["connection_errors"] == 1
    assert report["longest_answer_s"] == 30.0
    assert report["rss_mb"] == {"start": 100.0, "middle": 130.0, "end": 109.0, "max": 130.0}
    assert report["rss_flat_within_10pct"] is False  # the middle is 30 % up
    sampler.samples[2] = 105 * 2**20
    assert soak_summary(results, sampler, 100 * 2**20, 0.1)["rss_flat_within_10pct"] is True
    assert report["by_kind"]["png"] == {"200": 1, "503": 1}


def test_tree_rss_and_cpu_count_this_process() -> None:
    pid = os.getpid()
    assert tree_rss_bytes(pid) >= 10 * 2**20
    assert tree_cpu_seconds(pid) > 0


def test_the_soaks_hostile_rows_are_refused_by_the_cheap_checks_or_read_as_expected() -> None:
    """The soak's row files: A, B and E are refused from their bytes alone, within a second each;
    G's header is read (its preview is the soak's 200)."""
    import time

    from sr.io import AnimatedImageError, DecodeLimitError, read_size

    rows = evasive_payloads()
    assert set(rows) == set(EVASIVE_KINDS)
    for kind in ("A-scan-junk", "B-itxt", "E-fill-jpeg", "E-rle8-bmp", "E-tiff-chain"):
        t0 = time.perf_counter()
        with pytest.raises(AnimatedImageError if kind == "E-tiff-chain" else DecodeLimitError):
            read_size(rows[kind][1])
        assert time.perf_counter() - t0 < 1.0, kind
    assert read_size(rows["G-preview"][1]) == (4096, 4096)
    assert read_size(rows["C-late-exif"][1]) == (600, 40)  # the header's; the sandbox's probe turns it
