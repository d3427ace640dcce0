"""What a batch run is asked to do: one typed, validated options object for both executors.

What each image asks for (size, model and denoise, tta, alpha, format and quality, precision) is
one :class:`sr.request.UpscaleRequest`, the type the service builds too, validated by its own
:meth:`~sr.request.UpscaleRequest.validate`; the fields here are the batch's own (inputs, output
folder, tiling, device, naming, existing outputs, videos, Ray).

``sr upscale`` builds it from its arguments (:meth:`BatchOptions.from_namespace`); Python callers
build it directly. Every field has the command's default, so adding an option is one field here
or in the request (plus its flag in :mod:`sr.commands.upscale`, and its use where the stages need it).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path

from .. import DEFAULT_CHOICE
from ..io import DEFAULT_MAX_PIXELS
from ..request import DEFAULT_TILE_OVERLAP, UpscaleRequest, parse_tile
from .errors import BatchError, Naming

DEVICES = ("auto", "cpu", "cuda", "mps")
# The command's request when no flag changes it: model auto (the CLI's default), the rest as UpscaleRequest's.
DEFAULT_REQUEST = UpscaleRequest(model=DEFAULT_CHOICE)


@dataclass(frozen=True)
class BatchOptions:
    inputs: tuple[str, ...]
    output: str
    request: UpscaleRequest = DEFAULT_REQUEST  # what every image asks for (its budget_map stays False)
    recursive: bool = False
    verbose: bool = False
    tile: str = "auto"  # "auto", "0" (whole image) or input pixels, as typed
    tile_overlap: int = DEFAULT_TILE_OVERLAP
    device: str = "auto"
    threads: int | None = None
    attention_path: str = "auto"
    compile: bool = False
    suffix: str | None = None  # None: the request's output_suffix (_x<scale> and friends)
    skip_existing: bool = False
    overwrite: bool = False
    dry_run: bool = False
    save_budget_map: bool = False  # also write <output name>_budget.png next to each image
    max_pixels: int = DEFAULT_MAX_PIXELS
    # videos (sr.video): --video-codec, --crf (None: the codec's default), --frames A:B
    video_codec: str = "h264"
    crf: int | None = None
    frames: str | None = None
    ray: str | None = None  # None: local threads; "" a local Ray; else the cluster's address
    ray_actors: int | None = None
    weights_dir: str | None = None  # the folder named models are looked up in (None: the default)
    # how the caller's users call an option, for the hints of per-file problems ("use --overwrite");
    # sr upscale passes its flag spelling, Python callers get the field names
    option_name: Naming = str

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> BatchOptions:
        """The options from parsed arguments named like the fields of these options or of the
        request (others are ignored)."""
        asked = {f.name: getattr(args, f.name) for f in fields(UpscaleRequest) if hasattr(args, f.name)}
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        given["inputs"] = tuple(given["inputs"])
        return cls(**given, request=replace(DEFAULT_REQUEST, **asked))

    @property
    def tile_size(self) -> int | str:
        """``tile`` as the engine takes it: "auto" or a number of input pixels (0 = whole image)."""
        try:
            return parse_tile(self.tile)  # the engine's and the service's grammar: auto, off/0, pixels
        except ValueError:
            raise BatchError("{tile} must be 'auto', 'off' (or 0) or a number of pixels, got {got!r}",
                             got=self.tile) from None

    def checked(self) -> BatchOptions:
        """These options once every value is known to be usable (BatchError naming the field if not):
        the request by its own :meth:`~sr.request.UpscaleRequest.validate`, then the batch's
        fields; with ``ray`` the device is normalised, as the actors are given it by name."""
        try:
            self.request.validate()
        except ValueError as e:
            raise BatchError.of_request(self.request, e) from None
        if self.request.budget_map:  # a batch writes images, and budget maps beside them
            raise BatchError("a batch's request asks for images: use save_budget_map for budget maps")
        if self.max_pixels < 1:
            raise BatchError("{max_pixels} must be positive, got {got}", got=self.max_pixels)
        if self.tile_overlap < 0:
            raise BatchError("{tile_overlap} must be >= 0, got {got}", got=self.tile_overlap)
        if self.threads is not None and self.threads < 1:
            raise BatchError("{threads} must be >= 1, got {got}", got=self.threads)
        if self.suffix is not None and any(c in self.suffix for c in "/\\"):
            raise BatchError("{suffix} must not contain path separators")
        if self.skip_existing and self.overwrite:
            raise BatchError("give either {skip_existing} or {overwrite}, not both")
        self._check_video()
        self.tile_size  # noqa: B018 - raises the tile error now, before any work
        return self if self.ray is None else self._checked_ray()

    def _check_video(self) -> None:
        from ..video.settings import CODECS, parse_frames

        if self.video_codec not in CODECS:
            raise BatchError("unknown {video_codec} {got!r}; choose from {codecs}", got=self.video_codec,
                             codecs=", ".join(CODECS))
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise BatchError("{crf} must be 0-63, got {got}", got=self.crf)
        if self.frames is not None:
            try:
                parse_frames(self.frames)
            except ValueError as e:  # sr.video's message
                raise BatchError("{detail}", detail=str(e)) from None

    def _checked_ray(self) -> BatchOptions:
        if self.ray_actors is not None and self.ray_actors < 1:
            raise BatchError("{ray_actors} must be >= 1, got {got}", got=self.ray_actors)
        if self.ray and any(c.isspace() for c in self.ray):
            raise BatchError("{ray} address must not contain spaces, got {got!r}", got=self.ray)
        # The device is the actors' (the driver may have none): checked by name here, by Upscaler there.
        device = self.device.strip().lower()
        if device.startswith("cuda:"):
            raise BatchError("with {ray} use {device} cuda (or auto): each actor is given its own GPU")
        if device not in DEVICES:
            raise BatchError("unknown device {got!r}; choose from {devices}", got=self.device,
                             devices=", ".join(DEVICES))
        # the actors look named models up themselves, from their own working folder: an absolute path
        weights_dir = self.weights_dir and str(Path(self.weights_dir).expanduser().absolute())
        return replace(self, device=device, weights_dir=weights_dir)
