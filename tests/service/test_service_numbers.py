"""No form value makes a 5xx: random numeric strings into every field of
POST /v1/upscale, and the two values that did (outscale=1e308, a 401-digit width: OverflowError in
the size plan, a 500 that dropped the keep-alive connection)."""

from __future__ import annotations

import random

import pytest

FIELDS = ("scale", "outscale", "width", "height", "quality", "denoise", "look", "tta", "budget_map",
          "keep_budget_map", "model", "format")
SPECIAL = ("1e308", "-1e308", "1e309", "1e-400", "5e-324", "nan", "NaN", "inf", "-inf", "Infinity", "-0", "0",
           "0.0", "+3", " 2 ", "2.", ".5", "2_0", "0x10", "1e5", "\u0662", "\uff12", "1" + "0" * 400,
           "9" * 5000, "-" + "9" * 30, "16384", "16385", "268435456", "268435457", "3.0000000000000001")


def numeric_text(rng: random.Random) -> str:
    """A string a form field might get: a special value, an integer of 1-500 digits, or a float."""
    kind = rng.random()
    if kind < 0.25:
        return rng.choice(SPECIAL)
    if kind < 0.5:  # plausible: what a form sends for a size, a quality, a strength
        return rng.choice((str(rng.randint(0, 12)), f"{rng.uniform(0, 4):.3g}", str(rng.randint(1, 100))))
    if kind < 0.7:
        digits = rng.choice((1, 1, 2, 3, 5, 10, 20, 50, 310, 500))
        return rng.choice(("", "-", "+")) + str(rng.randrange(10 ** (digits - 1), 10 ** digits))
    return repr(rng.uniform(-5, 5) * 10 ** rng.randint(-320, 308))


@pytest.mark.slow
def test_random_numeric_strings_in_every_field_never_get_a_5xx(make_client, make_image) -> None:
    # Small output limits: a valid random size stays a small job, and the limits' own 422 is exercised.
    client = make_client(max_output_pixels=4096, max_work_pixels=8192)
    image = make_image(8, 6)
    rng = random.Random(72)
    # every field alone with every special value and 25 random ones, then 200 random pairs
    cases = [{f: v} for f in FIELDS for v in (*SPECIAL, *(numeric_text(rng) for _ in range(25)))]
    cases += [{f: numeric_text(rng) for f in rng.sample(FIELDS, 2)} for _ in range(200)]
    statuses: dict[int, int] = {}
    for fields in cases:
        r = client.post("/v1/upscale", files={"file": ("a.png", image, "image/png")}, data=fields)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code < 500, (fields, r.status_code, r.text[:300])
        if r.status_code != 200:
            detail = r.json()["detail"]
            assert isinstance(detail, str) and "\n" not in detail and len(detail) < 2000, (fields, detail)
    # the mix reached both the engine and the refusals (a generator that only made 422s tests nothing)
    assert statuses.get(200, 0) >= 50 and statuses.get(422, 0) >= 300, statuses


@pytest.mark.parametrize("field, value, says", [
    ("outscale", "1e308", "outscale must be at most 16384"),
    ("width", "1" + "0" * 400, "width must be at most 268435456 pixels"),
    ("height", "1" + "0" * 400, "height must be at most 268435456 pixels"),
    ("scale", "1" + "0" * 400, "scale must be at most 16384"),
])
def test_the_overflowing_sizes_get_a_422_that_keeps_the_connection(make_client, make_image, field: str,
                                                                   value: str, says: str) -> None:
    r = make_client().post("/v1/upscale", files={"file": ("a.png", make_image(8, 6), "image/png")},
                           data={field: value})
    assert r.status_code == 422 and r.json()["detail"].startswith(says), r.text
    assert "close" not in r.headers.get("connection", "")
