"""The three stages every executor runs per image: read, upscale, write.

The local threads and the Ray tasks and actors call these same functions, so both executors write
the same files and report the same errors by construction. A stage never raises for one image's
fault: it returns the reason, and the batch goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io.formats import writable_format_for
from .heap import release_free_heap
from .jobs import Job, output_format
from .options import BatchOptions
from .samples import Samples, pack, unpack

if TYPE_CHECKING:  # annotations only: the engine is imported by the functions that use it
    from ..inference import Upscaler, UpscaleResult
    from ..inference.tiling import ProgressFn
    from ..io import DecodedImage

NO_BUDGET_MAPS = "the model has no adaptive attention: no budget maps"  # a warning, once per batch


def make_upscaler(
    opts: BatchOptions, device: str | None = None, threads: int | None = None,
    model: str | Path | None = None, pre: str | Path | None = None,
) -> Upscaler:
    """The batch's ``Upscaler``: the request's model, pre model, denoise, look and precision, the
    batch's tiling and device (built once per Ray actor too, from the same options). ``model`` and
    ``pre`` override the request's (a Ray actor's local copies of a user's model files)."""
    from ..inference import Upscaler

    request = opts.request
    if model is not None or pre is not None:  # an actor's local copies of the request's files
        request = replace(request, model=str(model) if model is not None else request.model,
                          pre=str(pre) if pre is not None else request.pre)
    return Upscaler.for_request(request, device=device or opts.device, tile=opts.tile_size,
                                tile_overlap=opts.tile_overlap,
                                threads=threads if threads is not None else opts.threads,
                                attention_path=opts.attention_path, compile=opts.compile,
                                weights_dir=opts.weights_dir)


def read_input(job: Job, max_pixels: int) -> tuple[DecodedImage | None, str | None]:
    """Decode a job's input: (DecodedImage, None), or (None, the reason to report). Its samples stay
    integers (a quarter of float32's memory at 8 bits): the engine converts them tile by tile."""
    from ..io import read_image

    try:
        return read_image(job.src, max_pixels=max_pixels, samples=True), None
    except Exception as e:  # noqa: BLE001 - any failure is this file's: reported, the batch goes on
        return None, getattr(e, "reason", None) or str(e)


@dataclass
class Output:
    """One upscaled image as the writer needs it: integer samples (not the engine's float32), the
    budget heat-map already coloured, and what ran."""

    image: Samples | None  # None once the writer has taken it (take_image)
    heat: np.ndarray | None  # uint8 (H, W, 3), or None
    no_budget_map: bool  # a map was asked for, but the model has no adaptive attention
    model: str
    chosen: str = ""  # --model auto: the family this file got ("photo"), else ""
    choice: str = ""  # --model auto: what was chosen and why
    ran: str = ""  # each network with its number type: "photo-x4 in bf16" (-v's per-file line)

    pixels: int = field(default=0, init=False)  # the image's, kept when the writer takes it

    def __post_init__(self) -> None:
        if self.image is not None:
            self.pixels = int(self.image.planes.shape[0] * self.image.planes.shape[1])

    def take_image(self) -> Samples:
        """The samples, handed over: this Output holds them no longer, so the encoder, holding the
        only reference, lets them go once it has its own copy (a 48 MP photo's are 137 MiB)."""
        image, self.image = self.image, None
        if image is None:
            raise RuntimeError("the output's samples were already taken")
        return image


def upscale_input(
    up: Upscaler, image: DecodedImage, job: Job, opts: BatchOptions, progress: ProgressFn | None = None
) -> tuple[Output | None, str | None]:
    """Upscale one decoded image with the batch's options: (Output, None) or (None, the reason).
    ``job.src`` is the file ``--model auto`` reads its compression from. The engine streams its tiles
    into 8/16-bit samples (``quantize``): a quarter of float32's memory for a big photo. After a
    big output the heap's free pages go back to the system (:mod:`sr.batch.heap`)."""
    from ..inference import UpscaleError

    try:
        result = up.run(image, opts.request, budget_map=opts.save_budget_map, source=job.src,
                        quantize=True, progress=progress)
    except UpscaleError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - e.g. out of memory on a huge image: next file
        return None, f"upscaling failed ({type(e).__name__}: {e})"
    output = _output(result, job, opts, up.k_max)
    del result
    release_free_heap(output.pixels)  # the tiles' freed activations, before the writer's encode allocates
    return output, None


def _output(result: UpscaleResult, job: Job, opts: BatchOptions, k_max: float | None) -> Output:
    from ..inference import budget_heatmap

    heat = None
    if job.budget is not None and result.budget_map is not None:
        heat = budget_heatmap(result.budget_map, k_max)
    choice = result.choice
    # composited on white from the floats, as the service's JPEG encoder does, before rounding
    jpeg = writable_format_for(output_format(job, opts.request.format)).name == "jpeg"
    return Output(pack(result.image, flatten_alpha=jpeg), heat,
                  no_budget_map=job.budget is not None and result.budget_map is None, model=result.model,
                  chosen=choice.model if choice is not None else "",
                  choice=choice.describe() if choice is not None else "", ran=result.describe_run())


@dataclass
class StageTimes:
    """Wall seconds of one file's three stages, each timed in the thread that runs it (``-v``)."""

    decode: float = 0.0
    upscale: float = 0.0
    encode: float = 0.0

    @property
    def total(self) -> float:
        return self.decode + self.upscale + self.encode

    def add(self, other: StageTimes) -> None:
        self.decode += other.decode
        self.upscale += other.upscale
        self.encode += other.encode

    def describe(self) -> str:
        return f"decode {self.decode:.2f} s, upscale {self.upscale:.2f} s, encode {self.encode:.2f} s"


@dataclass
class Written:
    """What writing one job's output gave: output pixels on success, else the reason."""

    pixels: int = 0
    problem: str | None = None
    no_budget_map: bool = False
    model: str = ""   # the model that ran, e.g. "photo-x2"
    chosen: str = ""  # --model auto: the family this file got ("photo"), else ""
    choice: str = ""  # --model auto: what was chosen and why ("auto: photo (JPEG, quality ~72)")
    times: StageTimes | None = None  # seconds per stage (the local executor times them)
    ran: str = ""  # each network with its number type: "photo-x4 in bf16"


def write_output(job: Job, output: Output, opts: BatchOptions) -> Written:
    """Encode and atomically write one job's output (and budget map). The writer takes the output's
    samples (:meth:`Output.take_image`): they are freed as soon as the encoder has its copy, before
    it allocates its own buffers."""
    from ..io import DecodedImage, ImageError, prepare_image, write_image

    try:
        job.out.parent.mkdir(parents=True, exist_ok=True)
        if job.out.exists() and not (opts.overwrite or opts.skip_existing):
            hint = opts.option_name("overwrite")
            raise FileExistsError(f"output {job.out} appeared meanwhile (use {hint})")
        # one expression: no name holds the samples once Pillow has its copy
        prepare_image(unpack(output.take_image()), output_format(job, opts.request.format),
                      opts.request.quality).write(job.out)
        if output.heat is not None:
            write_image(job.budget, DecodedImage(output.heat.astype(np.float32) / 255), "png")
    except (ImageError, OSError) as e:
        return Written(problem=str(e))
    except Exception as e:  # noqa: BLE001 - a dead writer would hang the batch: report and go on
        return Written(problem=f"writing failed ({type(e).__name__}: {e})")
    return Written(output.pixels, no_budget_map=output.no_budget_map, model=output.model,
                   chosen=output.chosen, choice=output.choice, ran=output.ran)
