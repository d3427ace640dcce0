"""research.pipeline_stages: one job's CPU time by stage, the rows adding up to the stages."""

from __future__ import annotations

import numpy as np
from PIL import Image

from research.pipeline_stages import breakdown, rows


def test_the_rows_add_up_to_the_three_stages(tmp_path):
    rng = np.random.default_rng(0)
    jpeg = tmp_path / "in.jpg"
    Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(jpeg, quality=90)
    b = breakdown(jpeg, tmp_path / "out")
    assert (tmp_path / "out" / "in_x2.jpg").is_file()
    with Image.open(tmp_path / "out" / "in_x2.jpg") as im:
        assert im.size == (112, 80)
    s = b["seconds"]
    assert s["net"] > 0 and 0 < s["attention"] < s["net"]  # the default model's attention ran inside
    assert b["calls"]["net"] == b["tiles"] == 1  # a small image runs whole
    table = rows(b)
    stages = s["decode"] + s["upscale"] + s["write"]
    top = sum(v for label, v in table if not label.startswith(" "))
    assert abs(top - stages) < 1e-9  # every stage's time is in exactly one row
    assert all(v >= -1e-3 for _, v in table)
    assert {"decode", "upscale", "encode"} <= set(b["peak_rss_mb"])
