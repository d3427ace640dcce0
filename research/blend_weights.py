"""``python -m research.blend_weights A B T -o OUT``: a weights file whose every tensor is (1 - T) A + T B.

Network interpolation (ESRGAN's) of two of our files of one architecture, with B's metadata, the
name given by ``--name`` and a ``weight_average`` entry saying what was averaged; how a shipped file
that is a blend is made (photo-x2, photo-natural), the choice of T made on valid.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sr.models import SRNet
from sr.weights import blend_state_dicts, load_weights, save_weights

OWN_KEYS = ("format", "config", "scale", "params")  # save_weights writes these itself


def blend(a: str, b: str, amount: float, out: str, name: str | None = None) -> Path:
    net_a, meta_a = load_weights(a)
    net_b, meta_b = load_weights(b)
    if net_a.cfg.to_dict() != net_b.cfg.to_dict():
        raise SystemExit(f"{a} and {b} are different architectures")
    net = SRNet(net_b.cfg)
    net.load_state_dict(blend_state_dicts(net_a.state_dict(), net_b.state_dict(), amount))
    info = {k: v for k, v in meta_b.items() if k not in OWN_KEYS}
    info["weight_average"] = json.dumps({"base": Path(a).name, "base_name": meta_a.get("name", ""),
                                         "other": Path(b).name, "other_name": meta_b.get("name", ""),
                                         "amount_of_other": amount})
    if name:
        info["name"] = name
    return save_weights(net, out, **info)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.blend_weights", description=__doc__.split("\n")[0])
    p.add_argument("a", help="weights file A (T = 0)")
    p.add_argument("b", help="weights file B (T = 1); its metadata is kept")
    p.add_argument("amount", type=float, help="T in [0, 1]")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--name", help="the metadata name of the result")
    args = p.parse_args(argv)
    if not 0 <= args.amount <= 1:
        raise SystemExit("T must lie in [0, 1]")
    print(f"wrote {blend(args.a, args.b, args.amount, args.out, args.name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
