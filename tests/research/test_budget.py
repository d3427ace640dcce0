"""``python -m research.budget``: the allocation statistics on known maps, a tiny model end to end, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from research.budget import allocation, block_means, gradient_energy, main, route_locality
from sr.models import build_model
from sr.weights import save_weights


def test_block_means_average_whole_blocks_and_drop_the_ragged_edge():
    a = np.arange(6 * 9, dtype=np.float64).reshape(6, 9)
    got = block_means(a, 4)  # one row of two whole 4x4 blocks; rows 4-5 and column 8 are left out
    assert got.tolist() == [a[:4, :4].mean(), a[:4, 4:8].mean()]


def test_allocation_ranks_blocks_and_measures_the_top_fifth_share():
    energy = np.kron(np.arange(10, dtype=np.float64).reshape(2, 5), np.ones((4, 4)))  # 10 blocks, 0..9
    n, rho, share = allocation(energy, energy, 4)  # budget equal to the energy: the same ranking
    assert n == 10 and rho == pytest.approx(1.0)
    assert share == pytest.approx((9 + 8) / 45)  # the top 2 of 10 blocks hold 17 of 45
    _, rho, share = allocation(9 - energy + 1, energy, 4)  # budget against detail
    assert rho == pytest.approx(-1.0) and share == pytest.approx((1 + 2) / 55)
    _, rho, share = allocation(np.ones_like(energy), energy, 4)  # uniform: no ranking, a fifth
    assert np.isnan(rho) and share == pytest.approx(0.2)


def test_gradient_energy_is_zero_on_flat_and_positive_on_edges():
    lr = np.zeros((8, 8, 3), np.uint8)
    lr[:, 4:] = 255
    e = gradient_energy(lr)
    # studio-swing luminance: black to white is a step of 219/255, squared 0.74
    assert e.shape == (8, 8) and e[:, 3].min() > 0.7 and e[:, :3].max() == 0 and e[:, 5:].max() == 0


def test_route_locality_counts_only_the_kept_ranks():
    # a 3 x 4 grid of regions; region 0 keeps (itself, its right neighbour); region 5 keeps region 7
    # (2 columns away); region 11 keeps nothing; the other ranks are past each region's k
    idx = torch.zeros(1, 12, 2, dtype=torch.long)
    idx[0, 0] = torch.tensor([0, 1])
    idx[0, 5] = torch.tensor([7, 0])
    k = torch.zeros(1, 12, dtype=torch.long)
    k[0, 0], k[0, 5] = 2, 1
    own, near, dist = route_locality([(idx, k, (3, 4)), (None, torch.zeros(1, 12), (3, 4))])
    assert (own, near, dist) == (pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx((0 + 1 + 2) / 3))
    assert all(np.isnan(v) for v in route_locality([(None, k, (3, 4))]))


def _images(folder, n=2, size=96):
    rng = np.random.default_rng(0)
    folder.mkdir()
    for i in range(n):
        img = np.full((size, size, 3), 120, np.uint8)  # flat left half, texture on the right
        img[:, size // 2:] = rng.integers(0, 256, (size, size // 2, 3))
        Image.fromarray(img).save(folder / f"im{i}.png")
    return folder


def test_a_tiny_model_end_to_end_with_json_and_figure(tmp_path, capsys):
    torch.manual_seed(0)
    weights = save_weights(build_model("asa-small-x2"), tmp_path / "tiny.safetensors", name="tiny")
    hr = _images(tmp_path / "hr")
    out, fig = tmp_path / "budget.json", tmp_path / "fig.png"
    rc = main(["--model", str(weights), "--hr", str(hr), "--threads", "1", "--rounds", "1",
               "--block", "8", "--json", str(out), "--figure", str(fig), "--figure-image", "im1"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["name"] for r in data["images"]] == ["im0", "im1"]
    s = data["summary"]
    # the detail prior alone sends the budget to the textured half: a strong rank correlation
    assert s["spearman_mean"] > 0.5 and s["top_share_mean"] > 0.2
    assert s["psnr_off"] != s["psnr"] and s["attention_ms"] > 0
    assert 0 <= s["own_share_mean"] <= s["near_share_mean"] <= 1 and s["route_distance_px_mean"] >= 0
    printed = capsys.readouterr().out
    assert "the 20% most detailed blocks hold" in printed and "are the region itself" in printed
    with Image.open(fig) as im:
        assert im.size == (3 * 48 + 8, 48)  # LR | budget | energy, with two 4-px gaps


def test_errors_are_one_line_messages(tmp_path, capsys):
    plain = save_weights(build_model("asa-small-x2", attention="none"), tmp_path / "plain.safetensors")
    hr = _images(tmp_path / "hr", n=1)
    assert main(["--model", str(plain), "--hr", str(hr)]) != 0
    assert "no adaptive attention" in capsys.readouterr().err
    assert main(["--model", str(plain), "--hr", str(tmp_path / "missing")]) != 0
    assert "no such folder" in capsys.readouterr().err
