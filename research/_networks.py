"""The project's own networks, as the research scripts compare them (peers, real-input peers)."""

from __future__ import annotations

from sr.errors import CLIError


def our_networks(model: str, scales: list[int], precision: str = "fp32"):
    """(the engine, {scale: (name, network)}) for the scales of ``scales`` that the model has."""
    from sr.inference import UpscaleError, Upscaler

    try:
        up = Upscaler(model, device="cpu", tile=0, precision=precision)
    except UpscaleError as e:
        raise CLIError(str(e)) from None
    have = [s for s in scales if s in up.scales]
    if not have:
        raise CLIError(f"--model {model!r} has scales {up.scales}, none of --scales {scales}")
    name = up.name if len(up.scales) == 1 else None
    return up, {s: (name or f"{up.name}-x{s}", up.network(s)) for s in have}
