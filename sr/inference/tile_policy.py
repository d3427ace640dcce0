"""How a family engine cuts one pass into tiles: the tile side and the overlap, per network and input.

The tile side comes from :func:`~sr.inference.tiling.tile_for` (the caller's size, or "auto" from the
memory free now). The overlap is the engine's for sr's own networks; a model of another architecture
gets the overlap its measured receptive field needs (:mod:`sr.external.receptive`), so its tiles are
seam-free, narrowed again where the caller's own tile size leaves no room for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..descriptor import ModelDescriptor
from . import devices
from .errors import UpscaleError
from .tiling import TileGrid, TileTooSmall, min_tile, tile_for


@dataclass(frozen=True)
class TilePolicy:
    """The engine's tiling options: ``tile`` (pixels, "auto" or None: whole), ``overlap`` (its
    tile_overlap), the device whose memory the auto tile follows, and whether attention is static."""

    tile: int | str | None
    overlap: int
    device: torch.device
    static_attention: bool

    def cut(self, desc: ModelDescriptor, grid: TileGrid, h: int, w: int) -> tuple[int | None, int]:
        """(tile side, overlap) for the pass of ``desc``'s network on an h x w input; side None: whole."""
        side = self._side(desc, grid, h, w)
        return side, self._pass_overlap(desc, side, h, w)

    def _side(self, desc: ModelDescriptor, grid: TileGrid, h: int, w: int) -> int | None:
        if self.tile == "auto" and desc.tiling != "supported":
            return None  # spandrel advises against tiling this model (global context, or its own tiles)

        def side_for(overlap: int) -> int | None:
            try:
                return tile_for(self.tile, h, w, overlap, grid, self.device.type,
                                lambda: devices.available_memory(self.device), self.static_attention)
            except TileTooSmall as e:
                raise UpscaleError(str(e)) from None

        side = side_for(self.overlap)
        if desc.arch is None or side is None or side >= max(h, w):
            return side  # sr's own overlap, or one tile: no overlap to widen (nothing is measured)
        return side_for(self._pass_overlap(desc, side, h, w))

    def _pass_overlap(self, desc: ModelDescriptor, side: int | None, h: int, w: int) -> int:
        """The overlap of a pass that ``side`` cuts into several tiles; the engine's where it runs whole
        (no overlap is used, and an outside model's radius is not measured)."""
        if side is None or side >= max(h, w):
            return self.overlap
        wide = self._suited_overlap(desc)
        if isinstance(self.tile, int):  # the caller's tile size: widen only as far as it allows
            while wide > self.overlap and min_tile(wide, desc.align) > self.tile:
                wide -= 1
        return wide

    def _suited_overlap(self, desc: ModelDescriptor) -> int:
        """The engine's overlap for sr's own networks; for another architecture, widened to what its
        measured receptive field needs (measured once per file)."""
        if desc.arch is None:
            return self.overlap
        from ..external.receptive import suited_overlap  # sr.external serves outside models only

        return suited_overlap(desc, self.overlap)
