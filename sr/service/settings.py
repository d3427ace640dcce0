"""Service settings: defaults, overridden by ``SR_*`` environment variables, overridden by flags.

One frozen :class:`Settings` object is built at start-up and handed to the app; request handlers
get it through the :func:`service.app.get_settings` dependency (never from globals), so tests can
build an app with any limits they need.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sr import DEFAULT_CHOICE
from sr.request import parse_tile

# Multipart boundaries and the small form fields ride on top of the file itself.
FORM_OVERHEAD_BYTES = 64 * 1024


class SettingsError(ValueError):
    """A setting (flag or environment variable) with an unusable value."""


@dataclass(frozen=True)
class Settings:
    model: str = DEFAULT_CHOICE                # family name in weights_dir, "auto", or a .safetensors path
    device: str = "auto"                      # auto | cpu | cuda | cuda:N | mps
    precision: str = "auto"                   # auto | fp32 | bf16 (sr.inference.precision)
    workers: int = 1                          # inference jobs running at once (threads, one model)
    max_queue: int = 4                        # jobs allowed to wait for a worker; more -> 503
    max_upload_bytes: int = 20 * 2**20        # size of the uploaded file
    max_pixels: int = 16 * 2**20              # input pixels (decompression-bomb guard)
    timeout_s: float = 120.0                  # per request, queue wait included -> 504
    api_key: str | None = None                # when set, /v1/* need header X-API-Key
    cors_origins: tuple[str, ...] = ()        # empty: no CORS headers at all
    weights_dir: Path | None = None           # None: the package's weights/ folder
    threads: int | None = None                # torch intra-op threads (None: usable CPUs // workers)
    # Engine tile size: auto, pixels, or 0 (off). 512, not auto: a job can only be cancelled between
    # network forwards, and auto runs a whole image of up to 1024 px as one forward.
    tile: int | str = 512
    preload: bool = True                      # load and warm every scale of the model at start-up
    max_output_pixels: int = 64 * 2**20       # output image pixels (8192 x 8192)
    # Work per request: pixels the network produces, summed over its passes, x8 with tta.
    max_work_pixels: int = 128 * 2**20
    body_timeout_s: float = 30.0              # longest pause while an upload is read -> 408
    header_timeout_s: float = 10.0            # longest a request's headers may take to arrive -> 408
    # Slow clients: an upload must average this many bytes per second, counted from its
    # first few seconds (limits.BODY_GRACE_S), and end within body_total_s, else 408. The floor
    # stops the drip-feeders (1 byte every 5 s passed the idle timeout forever); the cap is what
    # binds a big upload on a slow link (20 MiB at the floor would take 21 minutes).
    body_min_rate: float = 16 * 1024
    body_total_s: float = 120.0
    # Uploads in flight (body read, header parse, queue, job): over these -> JSON 503 + Retry-After,
    # before any byte of the body is read. 0 = derived from workers and queue.
    max_uploads: int = 0
    max_uploads_per_client: int = 8
    # The decoder sandbox (service/sandbox.py): address-space limit of each decoder process, CPU
    # seconds of one decode, and CPU / wall seconds of one header read (intake).
    sandbox_memory_mb: int = 2048
    decode_cpu_s: float = 60.0
    probe_cpu_s: float = 2.0
    probe_wall_s: float = 10.0
    # Answers: a response the client stops reading is aborted after send_timeout_s without
    # progress, and its memory freed (24 unread 9 MB answers held 213 MB for as long as their clients
    # stayed); at most max_buffered_bytes of one connection's answer wait in the server's write
    # buffer, the rest goes out as the client reads (service.limits).
    send_timeout_s: float = 30.0
    max_buffered_bytes: int = 2**20
    # Community models: every model file of models_dir (sr's own or one spandrel reads) is
    # offered by its file stem; their engines are loaded on first use and the least recently used
    # are dropped while their parameter bytes (fp32) would pass models_memory_mb (docs/service.md).
    models_dir: Path | None = None
    models_memory_mb: int = 1024

    def __post_init__(self) -> None:
        checks = [
            (self.workers >= 1, f"workers must be >= 1, got {self.workers}"),
            (self.max_queue >= 0, f"max queue must be >= 0, got {self.max_queue}"),
            (self.max_upload_bytes >= 1, f"max upload bytes must be >= 1, got {self.max_upload_bytes}"),
            (self.max_pixels >= 1, f"max pixels must be >= 1, got {self.max_pixels}"),
            (self.timeout_s > 0, f"timeout must be > 0 seconds, got {self.timeout_s}"),
            (self.threads is None or self.threads >= 1, f"threads must be >= 1, got {self.threads}"),
            (self.max_output_pixels >= 1, f"max output pixels must be >= 1, got {self.max_output_pixels}"),
            (self.max_work_pixels >= 1, f"max work pixels must be >= 1, got {self.max_work_pixels}"),
            (self.body_timeout_s > 0, f"body timeout must be > 0 seconds, got {self.body_timeout_s}"),
            (self.header_timeout_s > 0, f"header timeout must be > 0 seconds, got {self.header_timeout_s}"),
            (self.body_min_rate >= 0, f"body min rate must be >= 0 bytes/s, got {self.body_min_rate}"),
            (self.body_total_s > 0, f"body total time must be > 0 seconds, got {self.body_total_s}"),
            (self.max_uploads >= 0, f"max uploads must be >= 0, got {self.max_uploads}"),
            (self.max_uploads_per_client >= 1,
             f"max uploads per client must be >= 1, got {self.max_uploads_per_client}"),
            (self.sandbox_memory_mb >= 64, f"sandbox memory must be >= 64 MB, got {self.sandbox_memory_mb}"),
            (self.decode_cpu_s > 0, f"decode CPU time must be > 0 seconds, got {self.decode_cpu_s}"),
            (self.probe_cpu_s > 0, f"probe CPU time must be > 0 seconds, got {self.probe_cpu_s}"),
            (self.probe_wall_s > 0, f"probe wall time must be > 0 seconds, got {self.probe_wall_s}"),
            (self.send_timeout_s > 0, f"send timeout must be > 0 seconds, got {self.send_timeout_s}"),
            (self.max_buffered_bytes >= 64 * 1024,
             f"max buffered bytes must be >= 65536, got {self.max_buffered_bytes}"),
            (self.models_memory_mb >= 1, f"models memory must be >= 1 MB, got {self.models_memory_mb}"),
            (bool(self.model), "model must not be empty"),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)
        object.__setattr__(self, "precision", parse_precision(self.precision))
        if self.api_key is not None:  # set, even to "": someone meant to require a key
            check_api_key(self.api_key)

    @property
    def engine_threads(self) -> int:
        """Torch threads per job: ``threads`` when set, else the usable CPUs shared out among the
        workers (at least one each). Every worker's forward runs its own team of this many threads,
        so one per CPU each (torch's default) put ``workers`` threads on every core: measured, that
        saves no CPU per tile and only takes time slices from neighbours (docs/service.md, "Workers
        and threads")."""
        if self.threads is not None:
            return self.threads
        from sr.inference.devices import usable_cpus

        return max(1, usable_cpus() // self.workers)

    @property
    def upload_limit(self) -> int:
        """Uploads in flight at once: every job slot twice over (one reading its body while the
        other runs) plus room for a burst of small bad requests answered at intake."""
        return self.max_uploads or 2 * (self.workers + self.max_queue) + 8

    @property
    def body_limit(self) -> int:
        """Largest request body accepted: the file limit plus room for the form around it."""
        return self.max_upload_bytes + FORM_OVERHEAD_BYTES

    def replace(self, **changes: object) -> Settings:
        """A copy with ``changes`` applied; ``None`` values are ignored (an unset flag)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, (var, parse) in ENV.items():
            raw = env.get(var)
            if raw is None or (raw.strip() == "" and name not in KEEP_BLANK):
                continue
            try:
                values[name] = parse(raw if name in KEEP_BLANK else raw.strip())
            except ValueError as e:
                raise SettingsError(f"{var}={raw!r}: {e}") from None
        return cls(**values)  # type: ignore[arg-type]


# Variables taken as given: a blank or padded API key is refused, not quietly read as unset or
# trimmed (a whitespace-only SR_API_KEY used to turn authentication off).
KEEP_BLANK = frozenset({"api_key"})


def check_api_key(key: str) -> None:
    """Refuse a key that is empty or that no client can send reliably.

    An empty or blank key is a mistake (an unset variable in a template), never "no key": it would
    otherwise turn authentication off. A header value is bytes: clients encode non-ASCII text
    differently (UTF-8, Latin-1, or not at all), and servers strip surrounding blanks, so such a key
    would lock everyone out.
    """
    if not key.strip():
        raise SettingsError("API key must not be empty or blank; leave it unset to run without a key")
    if not all(32 <= ord(c) <= 126 for c in key):
        raise SettingsError("API key must be printable ASCII (letters, digits, punctuation): HTTP headers "
                            "carry bytes, and clients encode other characters differently")
    if key != key.strip():
        raise SettingsError("API key must not start or end with a space: servers strip them from headers")


def _api_key(raw: str) -> str:
    check_api_key(raw)  # here too, so that the message names the variable
    return raw


def _int(raw: str) -> int:
    return int(raw)


def _bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true/false")


def parse_precision(raw: str) -> str:
    """auto, fp32 or bf16 (the engine's own check, as a SettingsError)."""
    from sr.inference.precision import PrecisionError
    from sr.inference.precision import parse_precision as engine_precision

    try:
        return engine_precision(raw)
    except PrecisionError as e:
        raise SettingsError(str(e)) from None


def parse_origins(raw: str) -> tuple[str, ...]:
    return tuple(o.strip() for o in raw.split(",") if o.strip())


ENV: dict[str, tuple[str, Callable[[str], object]]] = {
    "model": ("SR_MODEL", str),
    "device": ("SR_DEVICE", str),
    "precision": ("SR_PRECISION", parse_precision),
    "workers": ("SR_WORKERS", _int),
    "max_queue": ("SR_MAX_QUEUE", _int),
    "max_upload_bytes": ("SR_MAX_UPLOAD_BYTES", _int),
    "max_pixels": ("SR_MAX_PIXELS", _int),
    "timeout_s": ("SR_TIMEOUT_S", float),
    "api_key": ("SR_API_KEY", _api_key),
    "cors_origins": ("SR_CORS_ORIGINS", parse_origins),
    "weights_dir": ("SR_WEIGHTS_DIR", Path),
    "threads": ("SR_THREADS", _int),
    "tile": ("SR_TILE", parse_tile),  # sr.request.parse_tile: the CLI's and engine's grammar too
    "preload": ("SR_PRELOAD", _bool),
    "max_output_pixels": ("SR_MAX_OUTPUT_PIXELS", _int),
    "max_work_pixels": ("SR_MAX_WORK_PIXELS", _int),
    "body_timeout_s": ("SR_BODY_TIMEOUT_S", float),
    "header_timeout_s": ("SR_HEADER_TIMEOUT_S", float),
    "body_min_rate": ("SR_BODY_MIN_RATE", float),
    "body_total_s": ("SR_BODY_TOTAL_S", float),
    "max_uploads": ("SR_MAX_UPLOADS", _int),
    "max_uploads_per_client": ("SR_MAX_UPLOADS_PER_CLIENT", _int),
    "sandbox_memory_mb": ("SR_SANDBOX_MEMORY_MB", _int),
    "decode_cpu_s": ("SR_DECODE_CPU_S", float),
    "probe_cpu_s": ("SR_PROBE_CPU_S", float),
    "probe_wall_s": ("SR_PROBE_WALL_S", float),
    "send_timeout_s": ("SR_SEND_TIMEOUT_S", float),
    "max_buffered_bytes": ("SR_MAX_BUFFERED_BYTES", _int),
    "models_dir": ("SR_MODELS_DIR", Path),
    "models_memory_mb": ("SR_MODELS_MEMORY_MB", _int),
}
