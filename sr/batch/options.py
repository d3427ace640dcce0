"""What a batch run is asked to do: one typed, validated options object for both executors.

``sr upscale`` builds it from its arguments (:meth:`BatchOptions.from_namespace`); Python callers
build it directly. Every field has the command's default, so adding an option is one field here
(plus its flag in :mod:`sr.commands.upscale`, and its use where the stages need it).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace

from .. import DEFAULT_CHOICE
from ..errors import CLIError
from ..inference import DEFAULT_TILE_OVERLAP
from ..io import DEFAULT_MAX_PIXELS

DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass(frozen=True)
class BatchOptions:
    inputs: tuple[str, ...]
    output: str
    recursive: bool = False
    model: str = DEFAULT_CHOICE
    denoise: float | None = None
    verbose: bool = False
    # output size: at most one of scale (model scale), outscale, width/height (the model's smallest
    # scale when none is given)
    scale: int | None = None
    outscale: float | None = None
    width: int | None = None
    height: int | None = None
    tile: str = "auto"  # "auto", "0" (whole image) or input pixels, as typed
    tile_overlap: int = DEFAULT_TILE_OVERLAP
    device: str = "auto"
    threads: int | None = None
    attention_path: str = "auto"
    precision: str = "auto"  # auto | fp32 | bf16 (sr.inference.precision)
    compile: bool = False
    format: str = "png"  # a writable format's user name, or "same"
    quality: int = 95
    suffix: str | None = None  # None: _x<scale> and friends (default_suffix)
    tta: bool = False
    alpha_mode: str = "bicubic"
    skip_existing: bool = False
    overwrite: bool = False
    dry_run: bool = False
    save_budget_map: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    # videos (sr.video): --video-codec, --crf (None: the codec's default), --frames A:B
    video_codec: str = "h264"
    crf: int | None = None
    frames: str | None = None
    ray: str | None = None  # None: local threads; "" a local Ray; else the cluster's address
    ray_actors: int | None = None

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> BatchOptions:
        """The options from parsed arguments named like the fields (others are ignored)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        given["inputs"] = tuple(given["inputs"])
        return cls(**given)

    @property
    def tile_size(self) -> int | str:
        """``tile`` as the engine takes it: "auto" or a number of input pixels (0 = whole image)."""
        if self.tile == "auto":
            return "auto"
        try:
            value = int(self.tile)
        except ValueError:
            value = -1
        if value < 0:
            raise CLIError(f"--tile must be 'auto', 0 or a number of pixels, got {self.tile!r}")
        return value

    def checked(self) -> BatchOptions:
        """These options once every value is known to be usable (CLIError naming the flag if not);
        with ``ray`` the device is normalised, as the actors are given it by name."""
        if self.outscale is not None and (self.width is not None or self.height is not None):
            raise CLIError("give either --outscale or --width/--height, not both")
        if self.outscale is not None and not (0 < self.outscale < float("inf")):
            raise CLIError(f"--outscale must be a number > 0, got {self.outscale}")
        for name in ("width", "height"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise CLIError(f"--{name} must be a positive number of pixels, got {v}")
        if not 1 <= self.quality <= 100:
            raise CLIError(f"--quality must be 1-100, got {self.quality}")
        if self.max_pixels < 1:
            raise CLIError(f"--max-pixels must be positive, got {self.max_pixels}")
        if self.tile_overlap < 0:
            raise CLIError(f"--tile-overlap must be >= 0, got {self.tile_overlap}")
        if self.threads is not None and self.threads < 1:
            raise CLIError(f"--threads must be >= 1, got {self.threads}")
        if self.suffix is not None and any(c in self.suffix for c in "/\\"):
            raise CLIError("--suffix must not contain path separators")
        if self.skip_existing and self.overwrite:
            raise CLIError("give either --skip-existing or --overwrite, not both")
        if self.denoise is not None:
            from ..inference import DENOISE_MODELS, takes_denoise

            if not takes_denoise(self.model):
                raise CLIError(f"--denoise applies only to --model {' or '.join(DENOISE_MODELS)}, "
                               f"not {self.model!r}")
        self._check_video()
        self.tile_size  # noqa: B018 - raises the --tile error now, before any work
        return self if self.ray is None else self._checked_ray()

    def _check_video(self) -> None:
        from ..video.settings import CODECS, parse_frames

        if self.video_codec not in CODECS:
            raise CLIError(f"unknown --video-codec {self.video_codec!r}; choose from {', '.join(CODECS)}")
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise CLIError(f"--crf must be 0-63, got {self.crf}")
        if self.frames is not None:
            try:
                parse_frames(self.frames)
            except ValueError as e:
                raise CLIError(str(e)) from None

    def _checked_ray(self) -> BatchOptions:
        if self.ray_actors is not None and self.ray_actors < 1:
            raise CLIError(f"--ray-actors must be >= 1, got {self.ray_actors}")
        if self.ray and any(c.isspace() for c in self.ray):
            raise CLIError(f"--ray address must not contain spaces, got {self.ray!r}")
        # The device is the actors' (the driver may have none): checked by name here, by Upscaler there.
        device = self.device.strip().lower()
        if device.startswith("cuda:"):
            raise CLIError("with --ray use --device cuda (or auto): each actor is given its own GPU")
        if device not in DEVICES:
            raise CLIError(f"unknown device {self.device!r}; choose from {', '.join(DEVICES)}")
        return replace(self, device=device)
