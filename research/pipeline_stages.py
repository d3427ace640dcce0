"""Where one ``sr upscale`` job's CPU time goes, stage by stage (``research.pipeline --what stages``).

The batch's own three stages (:mod:`sr.batch.stages`: ``read_input``, ``upscale_input``,
``write_output``) run on one file in this process, one after the other, on one thread, with
CPU-time timers (``time.thread_time``) around the pieces of the engine's tile loop: the network's
forward split into the attention blocks and the rest (the conv body and the pixel shuffle), the
conversion of each tile to the network's input (stack to (B, C, H, W), cast, channels-last) and of
its output back, the blending of the tiles into the output band, and the quantisation of finished
rows. The timers wrap module functions and use torch's global module hooks, so nothing of sr is
changed; their own cost is a few microseconds a call. A thread samples the resident set ten times a
second, so each stage's peak RSS is known too.
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

STAGES = ("decode", "upscale", "encode")


def rss_bytes() -> int:
    """The process's resident set now (VmRSS)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """The highest resident set seen while each label was current, sampled every ``period`` s."""

    def __init__(self, period: float = 0.1) -> None:
        self.period, self.label = period, "start"
        self.peak: dict[str, int] = defaultdict(int)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def sample(self) -> None:
        self.peak[self.label] = max(self.peak[self.label], rss_bytes())

    def stage(self, label: str) -> None:
        self.sample()
        self.label = label
        self.sample()

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


class Timers:
    """CPU seconds (this thread's) per name, summed over calls."""

    def __init__(self) -> None:
        self.s: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.open_since: dict[str, float] = {}  # name -> when its current call began

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        start = self.open_since[name] = time.thread_time()
        try:
            yield
        finally:
            self.s[name] += time.thread_time() - start
            self.calls[name] += 1
            del self.open_since[name]

    def wrap(self, owner: Any, attr: str, name: str, stack: contextlib.ExitStack) -> None:
        """``owner.attr`` timed as ``name`` until ``stack`` closes (then restored)."""
        original = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.time(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)
        stack.callback(setattr, owner, attr, original)


def network_hooks(timers: Timers, stack: contextlib.ExitStack) -> None:
    """Time every forward of an sr network (``net``) and, inside, of its attention blocks
    (``attention``), with torch's global module hooks: the outermost call of each kind counts."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    from sr.models import SRNet
    from sr.models.attention.common import AttentionBranch

    open_at: dict[str, list[float]] = {"net": [], "attention": []}
    tiles = timers.open_since  # when the current tile batch's run_tiles began

    def kind(module: Any) -> str | None:
        if isinstance(module, SRNet):
            return "net"
        return "attention" if isinstance(module, AttentionBranch) else None

    def pre(module: Any, args: Any) -> None:
        if (k := kind(module)) is not None:
            now = time.thread_time()
            if k == "net" and not open_at[k] and "tiles" in tiles:
                timers.s["to input"] += now - tiles["tiles"]  # run_tiles' start to the forward's
            open_at[k].append(now)

    def post(module: Any, args: Any, out: Any) -> None:
        if (k := kind(module)) is not None:
            start = open_at[k].pop()
            if not open_at[k]:  # the outermost one
                timers.s[k] += time.thread_time() - start
                timers.calls[k] += 1

    for handle in (register_module_forward_pre_hook(pre), register_module_forward_hook(post)):
        stack.callback(handle.remove)


def instrument(timers: Timers, stack: contextlib.ExitStack) -> None:
    """The timers of the engine's tile loop and of the encoder, restored when ``stack`` closes."""
    from PIL import Image

    from sr.batch import stages
    from sr.inference import passes, tiling
    from sr.io import encode

    timers.wrap(tiling, "run_tiled", "tile loop", stack)  # the pass: tiles, blending, rows out
    timers.wrap(passes, "run_tiles", "tiles", stack)  # one forward with its conversions
    timers.wrap(passes, "_batch", "stack to (B, C, H, W)", stack)
    timers.wrap(tiling._Canvas, "finish", "quantise rows", stack)
    timers.wrap(stages, "pack", "pack samples", stack)
    timers.wrap(stages, "release_free_heap", "heap back", stack)
    timers.wrap(encode.PreparedImage, "_save", "encode", stack)  # Pillow's save, into the file
    timers.wrap(Image, "fromarray", "array to Pillow", stack)
    network_hooks(timers, stack)


def breakdown(jpeg: Path, out_dir: Path, threads: int = 1) -> dict:
    """Run ``sr upscale JPEG -o OUT_DIR -f jpg`` (the defaults otherwise) as its three stages on one
    thread, timed; the rows of the breakdown (CPU seconds), the plan's tile counts and the peak RSS
    by stage."""
    setup_start = time.thread_time()
    import torch

    from sr.batch.jobs import Job
    from sr.batch.options import DEFAULT_REQUEST, BatchOptions
    from sr.batch.stages import make_upscaler, read_input, upscale_input, write_output

    torch.set_num_threads(threads)
    opts = BatchOptions(inputs=(str(jpeg),), output=str(out_dir),
                        request=replace(DEFAULT_REQUEST, format="jpg"), threads=threads, overwrite=True)
    job = Job(jpeg, Path(jpeg.stem), out=out_dir / f"{jpeg.stem}_x2.jpg")
    out_dir.mkdir(parents=True, exist_ok=True)
    up = make_upscaler(opts)
    timers = Timers()
    timers.s["set-up"] = time.thread_time() - setup_start
    with contextlib.ExitStack() as stack, RssSampler() as rss:
        instrument(timers, stack)
        rss.stage("decode")
        with timers.time("decode"):
            image, problem = read_input(job, opts.max_pixels)
        if image is None:
            raise RuntimeError(f"{jpeg}: {problem}")
        plan = up.planned(image.height, image.width, opts.request, source=jpeg)
        engine_plan = plan.engine.plan(image.height, image.width, opts.request)
        rss.stage("upscale")
        with timers.time("upscale"):
            output, problem = upscale_input(up, image, job, opts)
        if output is None:
            raise RuntimeError(f"{jpeg}: {problem}")
        pixels = image.width * image.height
        del image
        rss.stage("encode")
        with timers.time("write"):
            written = write_output(job, output, opts)
        if written.problem:
            raise RuntimeError(written.problem)
    return {"seconds": dict(timers.s), "calls": dict(timers.calls), "model": output.model, "ran": output.ran,
            "pixels": pixels, "tiles": engine_plan.tiles, "tiled_pixels": engine_plan.tiled_pixels,
            "work_pixels": engine_plan.work_pixels, "tile": engine_plan.tiles_side[0],
            "peak_rss_mb": {k: v / 2**20 for k, v in rss.peak.items()},
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def rows(b: dict) -> list[tuple[str, float]]:
    """The breakdown's rows (label, CPU seconds): each stage less what is listed inside it; an
    indented row is part of the row above it."""
    def s(k: str) -> float:
        return b["seconds"].get(k, 0.0)

    net, attention, to_input, stack = s("net"), s("attention"), s("to input"), s("stack to (B, C, H, W)")
    overlap = 1 - b["work_pixels"] / b["tiled_pixels"] if b["tiled_pixels"] else 0.0
    rest = s("upscale") - s("tile loop") - s("pack samples") - s("heap back")
    return [
        ("decode (JPEG, to 8-bit samples)", s("decode")),
        ("tile to network input: stack to (B, C, H, W)", stack),
        ("tile to network input: dtype cast, channels-last", to_input - stack),
        ("network: conv body and upsampler", net - attention),
        (f"  of which recomputed overlap ({overlap:.1%} of the tiled pixels)", (net - attention) * overlap),
        ("network: attention blocks", attention),
        ("tile output back: float32, clamp, to numpy", s("tiles") - net - to_input),
        ("blend tiles into the band", s("tile loop") - s("tiles") - s("quantise rows")),
        ("quantise finished rows (uint8), band carried over", s("quantise rows")),
        ("rest of the upscale stage (auto's choice, weights, planning)", rest),
        ("pack samples for the writer", s("pack samples")),
        ("heap's free pages back (malloc_trim)", s("heap back")),
        ("array to Pillow", s("array to Pillow")),
        ("JPEG encode", s("encode")),
        ("file write (atomic)", s("write") - s("encode") - s("array to Pillow")),
    ]
