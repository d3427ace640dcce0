"""``sr upscale INPUT... -o OUTDIR``: the command line of :mod:`sr.batch`.

The arguments become a :class:`sr.batch.BatchOptions` (one field per flag, by name: what each image
asks for in its :class:`sr.request.UpscaleRequest`, the rest the batch's own) and
:func:`sr.batch.run_batch` does the rest: listing, planning, the output folder's check, then the local
threads or, with ``--ray [ADDRESS]``, Ray Data (docs/cluster.md).
"""

from __future__ import annotations

import argparse

from .. import DEFAULT_CHOICE, DEFAULT_MODEL, NEAR_LOSSLESS_QUALITY
from ..errors import CLIError
from ..families import AUTO, BY_NAME, DENOISE_MODELS, FAMILIES, LOOK_MODELS
from ..io import DEFAULT_MAX_PIXELS
from ..request import ALPHA_MODES, DEFAULT_TILE_OVERLAP, parse_denoise, parse_look
from .precision import add_precision_argument
from .weights_dir import add_weights_dir_argument, checked_weights_dir


def format_choices() -> tuple[str, ...]:
    """``-f`` choices: sr.io's writable formats by the names users type, and "same"."""
    from ..io import output_choices

    return (*output_choices(), "same")


def denoise_arg(text: str) -> float:
    """argparse type of ``--denoise``: a number from 0 to 1 (a bad value exits 2 with the reason)."""
    try:
        return parse_denoise(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def look_arg(text: str) -> float:
    """argparse type of ``--look``: a number from 0 to 1 (a bad value exits 2 with the reason)."""
    try:
        return parse_look(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag, in the order ``sr upscale --help`` lists them."""
    add_input_arguments(p)
    add_model_arguments(p)
    add_size_arguments(p)
    add_engine_arguments(p)
    add_output_arguments(p)
    add_video_arguments(p)
    add_ray_arguments(p)


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    """What to read and where to write: INPUT..., -o, -r."""
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="image or video files, folders or glob patterns")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                   help="output folder (created if missing)")
    p.add_argument("-r", "--recursive", action="store_true",
                   help="scan folders recursively, keeping the sub-folder tree in OUTDIR (and ** in globs)")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Which model, and how it is blended: -m, --pre, --weights-dir, --denoise, --look; and -v. The
    families and their blend rules come from :mod:`sr.families`."""
    q = NEAR_LOSSLESS_QUALITY
    families = "; ".join(f"{f.name}: {f.summary}" for f in FAMILIES)
    photo = BY_NAME[AUTO.lossy]  # the family denoise and look apply to
    base, natural = photo.denoise_base, photo.look_with
    p.add_argument("-m", "--model", default=DEFAULT_CHOICE,
                   help=f"'{AUTO.name}' (per input file, read from the file itself: {AUTO.lossy} for "
                        f"lossy files, JPEG or WebP below quality {q}; {AUTO.lossless} for the rest, "
                        f"lossless files and JPEG/WebP of quality {q} and above), a shipped family "
                        f"({families}), a full name ({DEFAULT_MODEL}-x2), sr's own .safetensors file, or "
                        "any upscaling model file spandrel recognises (.pth/.safetensors/.ckpt: ESRGAN, "
                        "Real-ESRGAN, SwinIR, HAT, SPAN, ...; needs the models extra; docs/models.md) "
                        f"(default: {DEFAULT_CHOICE})")
    p.add_argument("--pre", metavar="FILE", default=None,
                   help="a 1x restoration model file (denoise, de-JPEG, deblur: SCUNet, FBCNN, NAFNet, "
                        "DnCNN, DRUNet, ...) run on each input before the upscaling model, tiled the same "
                        "way (needs the models extra; docs/models.md)")
    add_weights_dir_argument(p)
    takers = " or ".join(DENOISE_MODELS)
    p.add_argument("--denoise", type=denoise_arg, default=None, metavar="D",
                   help=f"0..1, with --model {takers} only: run {photo.name} blended with {base} of the "
                        f"same scale, every weight (1-D)*{base} + D*{photo.name} (0 = {base} exactly; "
                        f"default 1 = {photo.name} as trained; {AUTO.name}'s lossless inputs always get "
                        f"{AUTO.lossless})")
    p.add_argument("--look", type=look_arg, default=None, metavar="L",
                   help=f"0..1, with --model {' or '.join(LOOK_MODELS)} only: 0 = {photo.name} as "
                        f"trained (fidelity-first, default), 1 = {natural}: GAN-trained texture; in "
                        f"between blends the weights, (1-L)*{photo.name} + L*{natural} (with "
                        f"--denoise, applied to {photo.name} before the blend with {base}; "
                        f"{AUTO.name}'s lossless inputs always get {AUTO.lossless})")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each written file with the model it got (with auto: why) and its decode, "
                        "upscale and encode seconds, then those summed over the batch")


def add_size_arguments(p: argparse.ArgumentParser) -> None:
    size = p.add_argument_group("output size (default: the model's smallest scale)")
    size.add_argument("-s", "--scale", type=int, metavar="N",
                      help="model scale to use: 2, 3 or 4 for sr's families; a model file's own scale")
    size.add_argument("--outscale", type=float, metavar="S",
                      help="final scale, any number > 0 (e.g. 1.5, 3.7, 8): model passes, then bicubic")
    size.add_argument("--width", type=int,
                      help="output width in pixels (height follows the aspect unless given)")
    size.add_argument("--height", type=int,
                      help="output height in pixels (width follows the aspect unless given)")


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """How the network runs: tiling, device, threads, attention path, precision, compile."""
    p.add_argument("--tile", default="auto",
                   help="tile size in input pixels: 'auto' (from free memory), 0 = whole image, or e.g. 256")
    p.add_argument("--tile-overlap", type=int, default=DEFAULT_TILE_OVERLAP, metavar="PX",
                   help=f"overlap between tiles in input pixels (default {DEFAULT_TILE_OVERLAP})")
    p.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for the model (default: usable CPUs)")
    p.add_argument("--attention-path", default="auto", choices=("auto", "tiered", "static"),
                   help="routed attention at inference: tiered (compute follows the budget; fastest on "
                        "CPU), static (fixed shapes, no host syncs; GPUs); auto = tiered on CPU only")
    add_precision_argument(p)
    p.add_argument("--compile", action="store_true",
                   help="run the network through torch.compile (static path; the first tile of each "
                        "run pays the compilation; measured by sr bench paths)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """What is written: format, quality, names, TTA, alpha, existing outputs, budget maps, limits."""
    written = "/".join(format_choices()[:-1])
    p.add_argument("-f", "--format", default="png", choices=format_choices(),
                   help=f"output format; 'same' keeps {written} inputs' format (others become png)")
    p.add_argument("--quality", type=int, default=95, help="JPEG/WebP quality 1-100 (default 95)")
    p.add_argument("--suffix", default=None,
                   help="added to output names (default: _x<scale>, e.g. _x2 or _x1.5; _w<W>/_h<H>/_<W>x<H> "
                        "with --width/--height); '' keeps the input name")
    p.add_argument("--tta", action="store_true",
                   help="quality mode: average the model over the 8 flips/rotations (sharper, 8x slower; "
                        "gain: the README's results table)")
    p.add_argument("--alpha-mode", default="bicubic", choices=ALPHA_MODES,
                   help="alpha channel: bicubic resize, or through the model as gray (default bicubic)")
    exist = p.add_mutually_exclusive_group()
    exist.add_argument("--skip-existing", action="store_true",
                       help="skip images whose output exists (resume a batch)")
    exist.add_argument("--overwrite", action="store_true", help="replace existing outputs (default: error)")
    p.add_argument("-n", "--dry-run", action="store_true", help="list what would be written; write nothing")
    p.add_argument("--save-budget-map", action="store_true",
                   help="also write <output name>_budget.png: the attention-budget heat-map at output size "
                        "(inferno, black = no attention, pale yellow = the model's k_max regions)")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help=f"refuse inputs with more pixels than this (default {DEFAULT_MAX_PIXELS})")


def add_video_arguments(p: argparse.ArgumentParser) -> None:
    video = p.add_argument_group("video inputs (need PyAV: pip install av; docs/video.md)")
    video.add_argument("--video-codec", default="h264", choices=("h264", "h265", "av1", "vp9"),
                       help="output video codec (default h264, yuv420p; sound and subtitles are copied)")
    video.add_argument("--crf", type=int, default=None,
                       help="output quality, lower is better (default: visually lossless, 18 for h264)")
    video.add_argument("--frames", default=None, metavar="A:B",
                       help="only frames A to B-1 (a trial run on part of a clip)")


def add_ray_arguments(p: argparse.ArgumentParser) -> None:
    cluster = p.add_argument_group("Ray (needs Ray Data: pip install 'ray[data]'; docs/cluster.md)")
    cluster.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                         help="run on Ray Data: a local Ray without ADDRESS (or RAY_ADDRESS), else join "
                              "the cluster at ADDRESS (e.g. 10.0.0.1:6379 or auto)")
    cluster.add_argument("--ray-actors", type=int, default=None, metavar="N",
                         help="upscaling actors, one model each (default: one per GPU of the cluster, "
                              "else its CPUs / --threads)")


def flag(field: str) -> str:
    """The flag of a batch or request field (``alpha_mode`` -> ``--alpha-mode``): how sr upscale's
    messages name the option a BatchError is about."""
    return "--" + field.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: argument errors are decided before torch is imported
    from dataclasses import replace

    from ..batch import BatchError, BatchOptions, run_batch

    checked_weights_dir(args.weights_dir)  # a folder that is not there: one line, before any input is read
    try:
        return run_batch(replace(BatchOptions.from_namespace(args), option_name=flag), prog="sr upscale")
    except BatchError as e:
        raise CLIError(e.message(flag), code=e.code) from None
