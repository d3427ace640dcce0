"""The Ray executor of :mod:`sr.batch`: the batch's jobs on a Ray Data streaming pipeline.

The driver lists and plans the jobs (:mod:`sr.batch.jobs`), then streams one row per image through
three stages::

    from_items (one block per image) -> read + decode (tasks) -> upscale (actor pool, one Upscaler
    per actor) -> encode + atomic write (tasks) -> driver: error report, progress bar, summary

Each stage calls the function the local executor calls (:mod:`sr.batch.stages`), so outputs, names
and error messages are the same by construction. This is the only module that imports Ray;
:mod:`sr.batch.run` imports it only for a Ray run.

A real cluster: every path a row carries is absolute, resolved on the driver (a worker's working
folder is not the user's); before any image is computed one task on every node checks that it sees
the inputs and can write the output folder (a shared filesystem is required); a user's ``--model``
file travels to the actors through the object store, so it need not exist on the workers. Pixels
travel between stages as 8/16-bit samples (:mod:`sr.batch.samples`), and an image whose input and
output would not fit a node's object store is refused before the run starts.

Faults: Ray recreates a dead actor and retries its task (``MAX_ATTEMPTS`` attempts per image, then
the image is reported as failed and the batch goes on); read and write tasks are retried the same
way. Outputs are written by ``sr.io.write_image`` (temporary file + rename), so a killed worker or
driver never leaves a half-written output, and ``--skip-existing`` resumes.

Back-pressure (what bounds memory on a folder of many large images): one image per block; at most
``actors + 1`` read tasks and ``actors + 1`` write tasks in flight; each actor holds at most
``ACTOR_QUEUE`` image (the one it runs); and Ray Data's streaming executor keeps the
bytes buffered between stages under ``BUFFER_BYTES`` of the object store, or under its own default
(half the object store) where that is lower. Measured (docs/cluster.md): memory plateaus;
the steady state is mostly worker processes (bounded by the pool sizes), not buffered images.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BatchError
from .jobs import Job
from .options import BatchOptions
from .report import Stats
from .samples import pack, unpack
from .stages import Written, make_upscaler, read_input, upscale_input, write_output

if TYPE_CHECKING:
    from ray.data import Dataset

    from ..inference import Upscaler

# Ray 2.5x+: a cluster started where ~/.ray/auth_token exists has token authentication on, and a
# driver given an address sends its token only with RAY_AUTH_MODE=token (Ray never turns it on for
# an explicit address by itself).
AUTH_REFUSED = ("Ray at {target!r} refused this client's authentication token (InvalidAuthToken): "
                "the cluster has token authentication on; set RAY_AUTH_MODE=token and give this "
                "machine the cluster's token (the head's ~/.ray/auth_token, copied to "
                "~/.ray/auth_token here, or RAY_AUTH_TOKEN); docs/cluster.md")
# sr-asa is not on the public package index: its cluster extra comes from a checkout (or the wheel's path).
INSTALL_HINT = ("{ray} needs Ray Data: pip install 'ray[data]>=2.51,<2.64' "
                "(the cluster extra: pip install '.[cluster]' in a checkout of sr)")
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
    """A one-line BatchError, with the install command, when Ray Data is missing."""
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError:
        raise BatchError(INSTALL_HINT) from None


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
    with _stderr_held() as held:
        try:
            ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING,
                     configure_logging=True, log_to_driver=True, **own)
            failed = None
        except (ConnectionError, RuntimeError, ValueError) as e:
            failed = e
        said = held()
    if failed is None:
        sys.stderr.write(said)  # what Ray said while joining, now that it is not a failure
    elif "InvalidAuthToken" in said or "Unauthenticated" in said:
        raise BatchError(AUTH_REFUSED, target=target) from None
    else:
        first = str(failed).strip().splitlines()[0] if str(failed).strip() else type(failed).__name__
        raise BatchError("cannot start or join Ray at {target!r}: {first}", target=target,
                         first=first) from None

    @contextlib.contextmanager
    def session() -> Iterator[None]:
        try:
            yield
        finally:
            ray.shutdown()

    return session()


@contextlib.contextmanager
def _stderr_held() -> Iterator[Callable[[], str]]:
    """Hold what is written to file descriptor 2 (Ray's C++ core logs there, not through Python) and
    give it as text: a refused token is one retry line a second for ~15 s, then "Failed to connect"
    without the reason; the lines are read for the reason instead of shown."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as spool:
        os.dup2(spool.fileno(), 2)
        try:
            yield lambda: (spool.seek(0), spool.read().decode(errors="replace"))[1]
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _probe(address: str, timeout: float = 5.0) -> None:
    """A HOST:PORT that does not answer is an error now: Ray itself would retry it for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return  # "local", "auto", ray://...: Ray's to resolve
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise BatchError("cannot reach Ray at {address} ({why}); is `ray start --head` running there?",
                         address=address, why=e.strerror or e) from None


def pool_plan(opts: BatchOptions, resources: dict[str, float]) -> tuple[int, dict[str, float]]:
    """(actors, Ray resources per actor): one GPU each where the cluster has GPUs and the device
    allows it, else ``--threads`` CPUs each (default 1)."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    if gpus > 0 and opts.device in ("auto", "cuda"):
        actors, each = opts.ray_actors or gpus, {"num_gpus": 1, "num_cpus": 1}
    else:
        threads = opts.threads or 1
        actors, each = opts.ray_actors or max(1, cpus // threads), {"num_cpus": threads}
    # More actors than the cluster holds would wait forever for the missing ones: say so instead.
    for kind, have in (("GPU", gpus), ("CPU", cpus)):
        need = actors * each.get(f"num_{kind.lower()}s", 0)
        if need > have:
            per = f"{each[f'num_{kind.lower()}s']:g} {kind}(s) each"
            raise BatchError("{actors} Ray actors need {need:g} {kind}s ({per}); the cluster has {have} "
                             "(lower {ray_actors} or {threads})", actors=actors, need=need, kind=kind,
                             per=per, have=have)
    return actors, each


# ------------------------------------------------------------------------------------ the stages
# Rows are dicts of plain values: "i" (the job's index on the driver), the job's paths as absolute
# strings, then each stage's payload ("image": Samples, "output": Output; pickled by Ray) or "problem".


def _row(i: int, job: Job) -> dict[str, Any]:
    budget = str(job.budget.absolute()) if job.budget is not None else ""
    return {"i": i, "src": str(job.src.absolute()), "rel": str(job.rel), "out": str(job.out.absolute()),
            "budget": budget}


def _job(row: dict[str, Any]) -> Job:
    budget = row["budget"] or None
    return Job(Path(row["src"]), Path(row["rel"]), out=Path(row["out"]),
               budget=Path(budget) if budget else None)


def _read(row: dict[str, Any], max_pixels: int) -> dict[str, Any]:
    image, problem = read_input(_job(row), max_pixels)
    return {**row, "image": pack(image) if image is not None else None, "problem": problem or ""}


class UpscaleActor:
    """One loaded Upscaler per actor (weights load once, on the first image), the batch's options.
    ``model``: a user's weights file as [ObjectRef of its bytes, file name], written to a private
    folder of the actor's (the workers need not see the driver's file); None for shipped models."""

    def __init__(self, opts: BatchOptions, threads: int | None, model: list | None = None,
                 pre: list | None = None) -> None:
        self.opts = opts
        self._folder = tempfile.TemporaryDirectory(prefix="sr-model-")  # removed with the actor
        paths = []
        for role, shipped in (("model", model), ("pre", pre)):
            path = None
            if shipped is not None:
                import ray

                path = Path(self._folder.name) / role / shipped[1]  # one folder each: names may be equal
                path.parent.mkdir()
                path.write_bytes(ray.get(shipped[0]))
            paths.append(path)
        self.up = make_upscaler(opts, threads=threads, model=paths[0], pre=paths[1])

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        image, problem = row.pop("image"), row["problem"]
        output = None
        if not problem:
            output, problem = upscale_input(self.up, unpack(image), _job(row), self.opts)
        del image
        return {**row, "output": output, "problem": problem or ""}


def _write(row: dict[str, Any], opts: BatchOptions) -> dict[str, Any]:
    output, problem = row.pop("output"), row["problem"]
    written = Written(problem=problem) if problem else write_output(_job(row), output, opts)
    return {"i": row["i"], "pixels": written.pixels, "problem": written.problem or "",
            "no_budget_map": written.no_budget_map, "model": written.model, "chosen": written.chosen,
            "choice": written.choice, "ran": written.ran}


def visible(inputs: list[str], outdir: str) -> tuple[str, str]:
    """On one node: (its address, "" or the first path it cannot use)."""
    import ray

    node = ray.util.get_node_ip_address()
    for path in inputs:
        if not os.path.exists(path):
            return node, f"cannot see the input {path}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".sr-write-check-", dir=outdir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return node, f"cannot write to the output folder {outdir} ({e.strerror or e})"
    return node, ""


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


def _store_bytes(job: Job, up: Upscaler, opts: BatchOptions) -> int:
    """An upper bound of the object-store bytes one image takes in flight (its input and output
    samples, and its budget heat-map), from the file's header; 0 where the header is unreadable (the
    read stage reports that file)."""
    from PIL import Image

    from ..io import read_size

    try:
        w, h = read_size(job.src, max_pixels=opts.max_pixels)
        with Image.open(job.src) as im:
            bands, mode = len(im.getbands()), im.mode
        r = opts.request
        (out_h, out_w), _ = up.plan_size(h, w, scale=r.scale, outscale=r.outscale, width=r.width,
                                         height=r.height)
    except Exception:  # noqa: BLE001 - the read stage gives this file's reason
        return 0
    channels = 1 if bands == 1 and mode != "P" else 4 if bands in (2, 4) or mode == "P" else 3
    per_px = channels * (2 if mode.startswith("I") else 1)
    heat = 3 * out_h * out_w if job.budget is not None else 0
    return w * h * per_px + out_h * out_w * per_px + heat


class Executor:
    """A Ray run of ``todo``: built once the cluster is joined, it checks the cluster can hold the
    actors and every image, and ships a user's weights file; :meth:`run` streams the jobs."""

    def __init__(self, opts: BatchOptions, up: Upscaler, todo: list[Job], outdir: Path) -> None:
        import ray

        self.opts, self.up, self.outdir = opts, up, outdir.absolute()
        resources = ray.cluster_resources()
        if opts.device == "cuda" and not resources.get("GPU"):
            raise BatchError("{device} cuda, but the Ray cluster has no GPUs")
        self.actors, self.per_actor = pool_plan(opts, resources)
        stores = [n["Resources"].get("object_store_memory", 0) for n in ray.nodes() if n.get("Alive")]
        store = min((s for s in stores if s > 0), default=0)
        for job in todo:
            need = _store_bytes(job, up, opts)
            if store and need > store:
                job.problem = (f"needs {need / 2**20:,.0f} MiB of Ray's object store (input and output "
                               f"samples), more than a node holds ({store / 2**20:,.0f} MiB): run it "
                               f"without {opts.option_name('ray')}, or lower the output size")
        self.todo = [j for j in todo if j.problem is None]
        self.model = self._ship_model(self.opts.request.model)
        self.pre = self._ship_model(self.opts.request.pre)

    def _ship_model(self, model: str | None) -> list | None:
        """A user's model file as [its bytes in the object store, its name]; None for a shipped
        family (every node's install has those) or no model."""
        import ray

        if model is None:
            return None
        path = Path(model).expanduser()
        if not path.is_file():
            return None
        try:
            data = path.read_bytes()
        except OSError as e:
            raise BatchError("cannot read the weights file {path} ({why})", path=path,
                             why=e.strerror or e) from None
        return [ray.put(data), path.name]

    def check_workers(self, timeout: float = 120.0) -> None:
        """One task on every node: it must see the inputs and write the output folder (the same
        absolute paths as the driver: a shared filesystem), else one line, before any image."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not self.todo:
            return
        folders = {}
        for job in self.todo:  # one input per folder: a mount missing on a node shows in each
            folders.setdefault(job.src.absolute().parent, str(job.src.absolute()))
        probe = ray.remote(num_cpus=0, max_retries=0)(visible)
        refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(sorted(folders.values()), str(self.outdir))
                for n in ray.nodes() if n.get("Alive")]
        try:
            results = ray.get(refs, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - e.g. a node lost meanwhile: one line, not a traceback
            raise BatchError("could not check the Ray workers' paths ({kind})", 1,
                             kind=type(e).__name__) from None
        for node, problem in results:
            if problem:
                raise BatchError("a Ray worker on {node} {problem}: inputs and outputs must be on a "
                                 "filesystem every node mounts at the same path (docs/cluster.md)", 1,
                                 node=node, problem=problem)

    def dataset(self) -> Dataset:
        """The lazy Ray Dataset of write reports (rows: i, pixels, problem, no_budget_map, model,
        chosen, choice)."""
        import ray.data

        opts, actors, per_actor = self.opts, self.actors, self.per_actor
        threads = opts.threads or (None if "num_gpus" in per_actor else per_actor["num_cpus"])
        items = [_row(i, j) for i, j in enumerate(self.todo)]
        # Light tasks (decode, encode) reserve no CPU: the actors hold the cluster's CPUs for the
        # model, and the pool sizes below bound them (and their memory) instead.
        tasks = {"num_cpus": 0, "compute": ray.data.TaskPoolStrategy(size=actors + 1)}
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        with warnings.catch_warnings():
            # Ray 2.5x deprecates passing retry counts as extra remote args but offers no named
            # parameter yet; without them a file that kills its worker would be retried forever.
            warnings.simplefilter("ignore", DeprecationWarning)
            ds = ds.map(_read, fn_kwargs={"max_pixels": opts.max_pixels}, max_retries=MAX_ATTEMPTS - 1,
                        **tasks)
            ds = ds.map(actor_class(),
                        fn_constructor_kwargs={"opts": opts, "threads": threads, "model": self.model,
                                               "pre": self.pre},
                        compute=ray.data.ActorPoolStrategy(size=actors), max_restarts=-1,
                        max_task_retries=MAX_ATTEMPTS - 1, **per_actor)
            return ds.map(_write, fn_kwargs={"opts": opts}, max_retries=MAX_ATTEMPTS - 1, **tasks)

    def run(self, stats: Stats) -> None:
        """Run the jobs on the connected Ray; every one ends up in ``stats`` (done or failed)."""
        if not self.todo:
            return
        seen: set[int] = set()
        with _data_context():
            ds = self.dataset()
            try:
                for row in ds.iter_rows():
                    i = int(row["i"])
                    seen.add(i)
                    stats.record(self.todo[i], Written(int(row["pixels"]), row["problem"] or None,
                                                       bool(row["no_budget_map"]), str(row["model"]),
                                                       str(row["chosen"]), str(row["choice"]),
                                                       ran=str(row["ran"])))
            except Exception as e:  # noqa: BLE001 - e.g. no actor could start: one line, not a traceback
                lines = [x for x in str(e).splitlines() if x.strip()]
                last = lines[-1] if lines else type(e).__name__
                raise BatchError("the Ray pipeline failed: {last}", last=last) from None
        for i, job in enumerate(self.todo):
            if i not in seen:  # its block errored MAX_ATTEMPTS times: the worker died on this image
                stats.fail(job.src, WORKER_DIED.format(n=MAX_ATTEMPTS))
