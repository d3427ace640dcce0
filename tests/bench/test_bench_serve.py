"""sr bench serve's soak: its mix of requests and its report (the run itself: docs/service.md)."""

from __future__ import annotations

from collections import Counter

from sr.bench.serve import HOSTILE_KINDS, RAW_REQUESTS, RssSampler, soak_kinds, soak_summary


def test_soak_cycle_mixes_valid_bad_and_every_hostile_kind() -> None:
    counts = Counter(soak_kinds())
    assert {k: counts[k] for k in HOSTILE_KINDS} == dict.fromkeys(HOSTILE_KINDS, 1)
    valid = counts["png"] + counts["jpg"]
    assert (valid, sum(counts.values()) - valid - len(HOSTILE_KINDS)) == (29, 7)  # 20 % of 36 bad
    assert set(RAW_REQUESTS) <= set(HOSTILE_KINDS)


def test_soak_summary_counts_5xx_and_reads_rss_at_start_middle_and_end() -> None:
    sampler = RssSampler(pid=0)
    sampler.samples = [100 * 2**20, 104 * 2**20, 130 * 2**20, 108 * 2**20, 109 * 2**20]
    sampler.times = [0.0, 1.0, 2.0, 3.0, 4.0]
    results = [("png", 200, 0.1, 0, 0.0), ("strip", 504, 30.0, 0, 0.0), ("head-stall", 408, 5.0, 0, 0.0),
               ("icc-bomb", "error:ReadError", 0.1, 0, 0.0), ("png", 503, 0.1, 0, 0.0)]
    report = soak_summary(results, sampler, 100 * 2**20, 0.1)
    assert report["5xx"] == 2 and report["connection_errors"] == 1
    assert report["rss_mb"] == {"start": 100.0, "middle": 130.0, "end": 109.0, "max": 130.0}
    assert report["rss_flat_within_10pct"] is False  # the middle is 30 % up
    sampler.samples[2] = 105 * 2**20
    assert soak_summary(results, sampler, 100 * 2**20, 0.1)["rss_flat_within_10pct"] is True
    assert report["by_kind"]["png"] == {"200": 1, "503": 1}
