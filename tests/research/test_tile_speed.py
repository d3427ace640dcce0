"""research.tile_speed: every tile size sees the same picture; the engine's table is each model's
ratios to its own fastest size, averaged."""

from __future__ import annotations

import json

import pytest
import torch

from research import tile_speed
from research.tile_speed import TileRow, covering, relative_table


@pytest.mark.parametrize("tile", [128, 192, 256, 384, 512])
def test_the_tiles_of_every_size_cover_the_whole_picture(tile):
    picture = torch.arange(512 * 512 * 3, dtype=torch.float32).reshape(1, 3, 512, 512)
    tiles = covering(picture, tile)
    assert len(tiles) == (-(-512 // tile)) ** 2
    seen = set()
    for t in tiles:
        assert t.shape == (tile, tile, 3)
        seen.update(t[:, :, 0].ravel().tolist())
    assert seen == set(picture[0, 0].ravel().tolist())


def test_relative_table_is_the_mean_of_each_models_own_ratios(tmp_path, capsys):
    rows = [TileRow("a", "bf16", 256, 0, 2.0, 0), TileRow("a", "bf16", 512, 0, 3.0, 0),
            TileRow("b", "bf16", 256, 0, 4.0, 0), TileRow("b", "bf16", 512, 0, 4.0, 0),
            TileRow("a", "fp32", 256, 0, 5.0, 0), TileRow("a", "fp32", 512, 0, 4.0, 0)]
    assert relative_table(rows) == {"bf16": {256: 1.0, 512: 1.25}, "fp32": {256: 1.25, 512: 1.0}}
    # --merge reads runs' JSON; a model measured twice counts its mean per size once
    for i, part in enumerate((rows[:2], rows[2:], [TileRow("a", "bf16", 256, 0, 2.0, 0),
                                                   TileRow("a", "bf16", 512, 0, 5.0, 0)])):
        (tmp_path / f"{i}.json").write_text(json.dumps({"rows": [r.__dict__ for r in part]}))
    assert tile_speed.main(["--merge", *(str(tmp_path / f"{i}.json") for i in range(3))]) == 0
    out = capsys.readouterr().out
    assert "bf16 (mean over a, b): {256: 1.0, 512: 1.5}" in out
    (tmp_path / "bad.json").write_text("{}")
    assert tile_speed.main(["--merge", str(tmp_path / "bad.json")]) != 0
    assert "not a tile_speed JSON" in capsys.readouterr().err


def test_the_job_at_each_overlap_costs_its_tiled_pixels(capsys):
    rows = [TileRow("m", "bf16", 256, 0, 2.0, 0), TileRow("m", "bf16", 48, 0, 1.0, 0)]
    table = tile_speed.print_overlaps(rows, {"m": (8, 2)}, 1000, 600, [0, 16, 32])
    # 1000 x 600 in 256 px tiles: more overlap, more pixels computed twice
    for overlap in (0, 16, 32):
        px = tile_speed.tiled_pixels(1000, 600, 256, overlap, 8)
        assert table["m bf16"][256][overlap] == px * 2.0 / (1000 * 600 * 4)
    assert tile_speed.tiled_pixels(1024, 512, 256, 0, 8) == 1024 * 512  # no overlap, even cut: once each
    c = table["m bf16"][256]
    assert c[0] < c[16] < c[32]
    assert 32 not in table["m bf16"][48]  # a 48 px tile is too small for a 32 px overlap
    assert "too small" in capsys.readouterr().out
