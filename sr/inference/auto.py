"""The auto engine: ``model="auto"``, two family engines and the rule that picks one per input.

The sides (:data:`~sr.inference.model_choice.AUTO_SIDES`: the default family for lossless inputs, the
photo family, with ``denoise`` and ``look``, for lossy ones) are found first (metadata only), their
common scales computed (:func:`~sr.inference.model_choice.auto_scales`), and each side built to run
just those, so both plan the same passes as auto itself. Everything else goes through the sides'
public surface: auto holds no weights of its own.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .. import AUTO_MODEL
from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..families import AUTO
from ..io import DecodedImage
from ..models import SRNet
from ..request import UpscaleRequest
from .engine import Plan, SizePlan, StopCheck, UpscaleError, Upscaler, UpscaleResult
from .family import FamilyEngine
from .model_choice import (
    AUTO_SIDES,
    ModelChoice,
    Source,
    auto_scales,
    choose,
    compression_of,
)
from .tiling import ProgressFn, TileFn


class AutoEngine(Upscaler):
    """:class:`~sr.inference.engine.Upscaler` for ``model="auto"``; ``sides`` holds its two family
    engines by family name (their weights load on first use, as every engine's do)."""

    def __init__(
        self, model: str | Path | ModelDescriptor = AUTO_MODEL, *args: object, **kwargs: object
    ) -> None:
        super().__init__(model, *args, **kwargs)  # Upscaler's arguments, checked there
        self.name = AUTO_MODEL
        found = {family: self._scales_of(family) for family in AUTO_SIDES}
        common = auto_scales(found)
        # the lossless side runs as trained; denoise and look are the lossy side's (sr.families)
        self.sides = {
            AUTO.lossless: FamilyEngine(AUTO.lossless, denoise=None, look=None, scales=common,
                                        **self._settings),
            AUTO.lossy: FamilyEngine(AUTO.lossy, denoise=self.denoise, look=self.look, scales=common,
                                     **self._settings),
        }
        if not common:
            lossless, lossy = AUTO.sides
            raise UpscaleError(f"{AUTO.name} needs {lossless} and {lossy} at a common scale "
                               f"({lossless}: {found[lossless]}, {lossy}: {found[lossy]})")
        self.scales: list[int] = common

    def _scales_of(self, family: str) -> list[int]:
        """The scales ``family`` has (metadata only); UpscaleError when it is missing."""
        try:
            return sorted(sr_weights.find_models(family, self.weights_dir)[1])
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None

    @property
    def _lossless(self) -> FamilyEngine:  # what auto answers for when no input says which side
        return self.sides[AUTO.lossless]

    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        """The default family's (each side decides its own when it runs)."""
        return self._lossless.precision_for(scale, pixels)

    @property
    def k_max(self) -> float | None:
        values = [e.k_max for e in self.sides.values() if e.k_max is not None]
        return max(values) if values else None

    def network(self, scale: int, pixels: int | None = None) -> SRNet:
        """The lossless side's."""
        if scale not in self.scales:
            raise UpscaleError(f"{self.name} has no x{scale} model (scales: {self.scales})")
        return self._lossless.network(scale, pixels)

    def load(self, scale: int | None = None) -> None:
        """Both sides'."""
        for engine in self.sides.values():
            engine.load(scale)

    def choose(self, source: Source | None = None, img: DecodedImage | None = None) -> ModelChoice:
        return choose(compression_of(source, img), self.denoise, look=self.look)

    def check_look(self, passes: list[int]) -> None:
        """The photo side's refusal (only it blends a look)."""
        self.sides[AUTO.lossy].check_look(passes)

    def plan(self, h: int, w: int, request: UpscaleRequest) -> Plan:
        """Both sides share one architecture, so one tiling: the lossless side's."""
        return self._lossless.plan(h, w, request)

    def tile_runner(self, scale: int, with_budget_map: bool = False) -> tuple[TileFn, int]:
        return self._lossless.tile_runner(scale, with_budget_map)

    def run_sized(
        self, img: DecodedImage, size: SizePlan, alpha_mode: str, with_budget_map: bool, tta: bool,
        should_stop: StopCheck | None, quantize: bool, progress: ProgressFn | None,
    ) -> UpscaleResult:
        """On the side the image's own format picks (:meth:`upscale` and :meth:`planned` pick by source)."""
        return self.sides[self.choose(None, img).model].run_sized(
            img, size, alpha_mode, with_budget_map, tta, should_stop, quantize, progress)

