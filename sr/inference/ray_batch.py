"""``sr upscale --ray``: the local command's jobs on a Ray Data streaming pipeline.

The driver lists and plans the jobs with the local command's own functions (``collect_inputs``,
``plan_outputs``), then streams one row per image through three stages::

    from_items (one block per image) -> read + decode (tasks) -> upscale (actor pool, one Upscaler
    per actor) -> encode + atomic write (tasks) -> driver: error report, progress bar, summary

Each stage calls the function the local pipeline calls (``read_input``, ``upscale_input``,
``write_output`` from :mod:`sr.commands.upscale`), so outputs, names and error messages are the same
by construction. This is the only module that imports Ray; ``sr.commands.upscale`` imports it only
when ``--ray`` is given.

Faults: Ray recreates a dead actor and retries its task (``MAX_ATTEMPTS`` attempts per image, then
the image is reported as failed and the batch goes on); read and write tasks are retried the same
way. Outputs are written by ``sr.io.write_image`` (temporary file + rename), so a killed worker or
driver never leaves a half-written output, and ``--skip-existing`` resumes.

Back-pressure (what bounds memory on a folder of many large images): one image per block; at most
``actors + 1`` read tasks and ``actors + 1`` write tasks in flight; each actor holds at most
``ACTOR_QUEUE`` image (the one it runs); and Ray Data's streaming executor keeps the
bytes buffered between stages under ``BUFFER_BYTES`` of the object store, or under its own default
(half the object store) where that is lower. Measured (issue 29, docs/cluster.md): memory plateaus;
the steady state is mostly worker processes (bounded by the pool sizes), not buffered images.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CLIError

if TYPE_CHECKING:
    from ray.data import Dataset

    from ..commands.upscale import Job, Stats

INSTALL_HINT = "--ray needs Ray Data: pip install 'sr[cluster]' (or pip install 'ray[data]')"
# Attempts per image when its worker dies (crash, OOM kill, lost node): a file that kills every worker
# it meets is reported as failed instead of taking the batch down or looping forever.
MAX_ATTEMPTS = 3
WORKER_DIED = "the Ray worker died on this image {n} times (killed for memory, or crashed)"
# Images in flight on one actor: only the one it runs. When an actor dies, every task queued on it
# fails and uses up one of its attempts, so with a queue an innocent image that kept meeting a poison
# file's actor was reported as "died 3 times" (seen in 2 of 7 runs of the fault test). Decoded inputs
# still wait ready in the object store, so the actor's next image is a task dispatch away. (Ray Data's
# default of 4 would also pin 4 decoded images per actor, each up to --max-pixels x 12 bytes.)
ACTOR_QUEUE = 1
# Object-store bytes Ray Data may buffer between stages (decoded inputs and float outputs waiting);
# Ray lets one block through even when a single image is larger, so any size still makes progress.
# The limit in force is the lower of this and Ray Data's default, half the cluster's object store (a
# local Ray's store is 30% of the memory free at its start: 1494 MiB of limit on the 24 GB dev box).
BUFFER_BYTES = 2 * 2**30


def check_installed() -> None:
    """A one-line CLIError, with the install command, when Ray Data is missing."""
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError:
        raise CLIError(INSTALL_HINT) from None


def validate(args: argparse.Namespace) -> None:
    """Check the Ray flags (and the device by name) before anything starts."""
    if args.ray_actors is not None and args.ray_actors < 1:
        raise CLIError(f"--ray-actors must be >= 1, got {args.ray_actors}")
    if args.ray and any(c.isspace() for c in args.ray):
        raise CLIError(f"--ray address must not contain spaces, got {args.ray!r}")
    # The device is the actors' (the driver may have none): checked by name here, by Upscaler there.
    device = args.device.strip().lower()
    if device.startswith("cuda:"):
        raise CLIError("with --ray use --device cuda (or auto): each actor is given its own GPU")
    if device not in ("auto", "cpu", "cuda", "mps"):
        raise CLIError(f"unknown device {args.device!r}; choose from auto, cpu, cuda, mps")
    args.device = device


@contextlib.contextmanager
def _no_session() -> Iterator[None]:
    yield


def connect(address: str | None) -> contextlib.AbstractContextManager:
    """Join the cluster at ``address`` (or RAY_ADDRESS), else start a local Ray. Returns a context
    manager that shuts down what this call started (an already connected Ray is used and kept)."""
    import ray

    target = address or os.environ.get("RAY_ADDRESS") or "local"  # "local": never a stray cluster
    _probe(target)
    if ray.is_initialized():  # e.g. a test's or a notebook's Ray: use it, leave it running
        return _no_session()
    # A Ray we start runs its workers at our priority: Ray's default (nice 15) lets any other job on
    # the machine starve them, which the local command, at nice 0, would not suffer.
    own = {"_system_config": {"worker_niceness": 0}} if target == "local" else {}
    try:
        ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING,
                 configure_logging=True, log_to_driver=True, **own)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CLIError(f"cannot start or join Ray at {target!r}: {first}") from None

    @contextlib.contextmanager
    def session() -> Iterator[None]:
        try:
            yield
        finally:
            ray.shutdown()

    return session()


def _probe(address: str, timeout: float = 5.0) -> None:
    """A HOST:PORT that does not answer is an error now: Ray itself would retry it for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return  # "local", "auto", ray://...: Ray's to resolve
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise CLIError(f"cannot reach Ray at {address} ({e.strerror or e}); is `ray start --head` "
                       "running there?") from None


def pool_plan(args: argparse.Namespace, resources: dict[str, float]) -> tuple[int, dict[str, float]]:
    """(actors, Ray resources per actor): one GPU each where the cluster has GPUs and the device
    allows it, else ``--threads`` CPUs each (default 1)."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    if gpus > 0 and args.device in ("auto", "cuda"):
        actors, each = args.ray_actors or gpus, {"num_gpus": 1, "num_cpus": 1}
    else:
        threads = args.threads or 1
        actors, each = args.ray_actors or max(1, cpus // threads), {"num_cpus": threads}
    # More actors than the cluster holds would wait forever for the missing ones: say so instead.
    for kind, have in (("GPU", gpus), ("CPU", cpus)):
        need = actors * each.get(f"num_{kind.lower()}s", 0)
        if need > have:
            per = f"{each[f'num_{kind.lower()}s']:g} {kind}(s) each"
            raise CLIError(f"{actors} Ray actors need {need:g} {kind}s ({per}); the cluster has {have} "
                           "(lower --ray-actors or --threads)")
    return actors, each


# ------------------------------------------------------------------------------------ the stages
# Rows are dicts of plain values: "i" (the job's index on the driver), the job's paths as strings,
# then each stage's payload ("image", "result": sr objects, pickled by Ray) or "problem".


def _job(row: dict[str, Any]) -> Job:
    from ..commands.upscale import Job

    budget = row["budget"] or None
    return Job(Path(row["src"]), Path(row["rel"]), out=Path(row["out"]),
               budget=Path(budget) if budget else None)


def _read(row: dict[str, Any], max_pixels: int) -> dict[str, Any]:
    from ..commands.upscale import read_input

    image, problem = read_input(_job(row), max_pixels)
    return {**row, "image": image, "problem": problem or ""}


class UpscaleActor:
    """One loaded Upscaler per actor (weights load once, on the first image), the local flags."""

    def __init__(self, args: argparse.Namespace, threads: int | None) -> None:
        from ..commands.upscale import make_upscaler

        self.args = args
        self.up = make_upscaler(args, threads=threads)

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        from ..commands.upscale import upscale_input

        image, problem = row.pop("image"), row["problem"]
        result = None
        if not problem:
            result, problem = upscale_input(self.up, image, self.args, source=Path(row["src"]))
        del image
        return {**row, "result": result, "problem": problem or ""}


def _write(row: dict[str, Any], args: argparse.Namespace, k_max: float | None) -> dict[str, Any]:
    from ..commands.upscale import write_output

    result, problem = row.pop("result"), row["problem"]
    pixels, no_map, model, chosen, choice = 0, False, "", "", ""
    if not problem:
        written = write_output(_job(row), result, args, k_max)
        pixels, problem, no_map = written.pixels, written.problem or "", written.no_budget_map
        model, chosen, choice = written.model, written.chosen, written.choice
    return {"i": row["i"], "pixels": pixels, "problem": problem, "no_budget_map": no_map, "model": model,
            "chosen": chosen, "choice": choice}


# ------------------------------------------------------------------------------------ the driver


def build_dataset(
    todo: list[Job], args: argparse.Namespace, k_max: float | None, resources: dict[str, float]
) -> Dataset:
    """The lazy Ray Dataset of write reports for ``todo`` (rows: i, pixels, problem, no_budget_map,
    model, chosen, choice)."""
    import ray.data

    actors, per_actor = pool_plan(args, resources)
    threads = args.threads or (None if "num_gpus" in per_actor else per_actor["num_cpus"])
    items = [{"i": i, "src": str(j.src), "rel": str(j.rel), "out": str(j.out),
              "budget": str(j.budget) if j.budget is not None else ""} for i, j in enumerate(todo)]
    # Light tasks (decode, encode) reserve no CPU: the actors hold the cluster's CPUs for the model,
    # and the pool sizes below bound them (and their memory) instead.
    tasks = {"num_cpus": 0, "compute": ray.data.TaskPoolStrategy(size=actors + 1)}
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    with warnings.catch_warnings():
        # Ray 2.5x deprecates passing retry counts as extra remote args but offers no named
        # parameter yet; without them a file that kills its worker would be retried forever.
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ds.map(_read, fn_kwargs={"max_pixels": args.max_pixels}, max_retries=MAX_ATTEMPTS - 1,
                    **tasks)
        ds = ds.map(actor_class(), fn_constructor_kwargs={"args": args, "threads": threads},
                    compute=ray.data.ActorPoolStrategy(size=actors), max_restarts=-1,
                    max_task_retries=MAX_ATTEMPTS - 1, **per_actor)
        return ds.map(_write, fn_kwargs={"args": args, "k_max": k_max}, max_retries=MAX_ATTEMPTS - 1,
                      **tasks)


def actor_class() -> type:
    """The actor class the pipeline uses (a function so tests can swap in a faulty subclass)."""
    return UpscaleActor


_SETTINGS = ("enable_progress_bars", "max_errored_blocks", "max_tasks_in_flight_per_actor",
             "enable_auto_log_stats", "print_on_execution_start", "enable_fallback_to_arrow_object_ext_type")


@contextlib.contextmanager
def _data_context() -> Iterator[None]:
    """Ray Data settings for this run (restored after: a caller's Ray keeps its own)."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    saved = {k: getattr(ctx, k) for k in _SETTINGS}
    limits = ctx.execution_options.resource_limits
    ctx.enable_progress_bars = False  # the command draws its own bar, as the local one does
    ctx.enable_auto_log_stats = False
    ctx.print_on_execution_start = False
    ctx.max_errored_blocks = -1  # a block is one image: report it and go on, never abort the batch
    ctx.max_tasks_in_flight_per_actor = ACTOR_QUEUE
    ctx.enable_fallback_to_arrow_object_ext_type = True  # sr objects travel pickled (said, not warned)
    ctx.execution_options.resource_limits = limits.copy(
        object_store_memory=min(limits.object_store_memory, BUFFER_BYTES))
    log = logging.getLogger("ray.data")
    level = log.level
    log.setLevel(logging.ERROR)  # its start/finish lines; a dead worker's errors still show
    # ... but not the traceback of an image given up on: the command reports that file itself
    skipped_block = logging.getLogger("ray.data._internal.execution.streaming_executor_state")
    skipped_block.addFilter(_drop_ignored_block)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)
        ctx.execution_options.resource_limits = limits
        log.setLevel(level)
        skipped_block.removeFilter(_drop_ignored_block)


def _drop_ignored_block(record: logging.LogRecord) -> bool:
    return "Ignoring this exception" not in record.getMessage()


def check_cluster(args: argparse.Namespace) -> dict[str, float]:
    """The connected cluster's resources, once they are known to fit the flags (CLIError if not)."""
    import ray

    resources = ray.cluster_resources()
    if args.device == "cuda" and not resources.get("GPU"):
        raise CLIError("--device cuda, but the Ray cluster has no GPUs")
    pool_plan(args, resources)
    return resources


def run_pipeline(todo: list[Job], stats: Stats, args: argparse.Namespace, k_max: float | None) -> None:
    """Run ``todo`` on the connected Ray; every job ends up in ``stats`` (done or failed)."""

    from ..commands.upscale import Written

    if not todo:
        return
    resources = check_cluster(args)
    seen: set[int] = set()
    with _data_context():
        ds = build_dataset(todo, args, k_max, resources)
        try:
            for row in ds.iter_rows():
                i = int(row["i"])
                seen.add(i)
                stats.record(todo[i], Written(int(row["pixels"]), row["problem"] or None,
                                              bool(row["no_budget_map"]), str(row["model"]),
                                              str(row["chosen"]), str(row["choice"])))
        except Exception as e:  # noqa: BLE001 - e.g. no actor could start: one line, not Ray's traceback
            lines = [x for x in str(e).splitlines() if x.strip()]
            raise CLIError(f"the Ray pipeline failed: {lines[-1] if lines else type(e).__name__}") from None
    for i, job in enumerate(todo):
        if i not in seen:  # its block errored MAX_ATTEMPTS times: the worker died on this image
            stats.fail(job.src, WORKER_DIED.format(n=MAX_ATTEMPTS))
