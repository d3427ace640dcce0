"""Service settings: one typed table, :class:`Settings`, in which each setting is declared once.

A field of :class:`Settings` is a setting: its name and type are the field's, and
:func:`setting` gives its default, its help, its lower bound (with the words of the error) and, where
the type does not say it, how its text is read. Everything else derives from that declaration:

- the environment variable is ``SR_`` + the name in capitals (``max_queue`` -> ``SR_MAX_QUEUE``), read by
  :meth:`Settings.from_env`, its text parsed by the field's type (int, float, bool, Path, a tuple of
  origins) unless the setting names its own parser;
- the checks run on every :class:`Settings` built (from the environment, flags or code): the bounds
  first, in the table's order, then the validators (the model, the precision, the API key);
- the table of docs/service.md ("Settings and limits") is :func:`settings_table`, kept in step by a test.

Flags override the environment (``sr serve``: :meth:`Settings.replace`). One frozen object is built at
start-up and handed to the app; request handlers get it through :data:`sr.service.deps.SettingsDep`
(never from globals), so tests can build an app with any limits they need.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sr import DEFAULT_CHOICE
from sr.request import parse_tile

# Multipart boundaries and the small form fields ride on top of the file itself.
FORM_OVERHEAD_BYTES = 64 * 1024
ENV_PREFIX = "SR_"


class SettingsError(ValueError):
    """A setting (flag or environment variable) with an unusable value."""


@dataclass(frozen=True)
class Bound:
    """A setting's lower bound, and the words its error uses: ``{label} must be >= {low}{unit}, got {v}``."""

    low: int
    label: str
    strict: bool = False  # > rather than >=
    unit: str = ""        # after the bound in the message, e.g. " seconds"

    def error(self, value: float | None) -> str | None:
        """The error for ``value`` (None: unset, which every bounded setting allows), or None."""
        if value is None or (value > self.low if self.strict else value >= self.low):
            return None
        return f"{self.label} must be {'>' if self.strict else '>='} {self.low}{self.unit}, got {value}"


@dataclass(frozen=True)
class Spec:
    """What a setting's declaration says besides its name, type and default (:func:`setting`)."""

    help: str
    bound: Bound | None = None
    # the value checked and normalised (raises SettingsError), after every bound
    validate: Callable[[Any], Any] | None = None
    parse: Callable[[str], Any] | None = None  # the variable's text -> value; None: by the field's type
    keep_blank: bool = False  # the variable is taken as given: not trimmed, and blank is a value
    flag: str | None = None   # the `sr serve` flag that overrides it (for the docs)
    unit: str = ""            # of the default, for the docs: bytes, pixels, s, MB, bytes/s


# A bound's unit in its error message, by the setting's unit (bytes and pixels: none).
_BOUND_WORDS = {"s": " seconds", "MB": " MB", "bytes/s": " bytes/s"}


def setting(default: Any, help: str, *, at_least: tuple[int, str] | None = None,
            above: tuple[int, str] | None = None, unit: str = "",
            validate: Callable[[Any], Any] | None = None, parse: Callable[[str], Any] | None = None,
            keep_blank: bool = False, flag: str | None = None) -> Any:
    """One setting's declaration: a dataclass field whose metadata is its :class:`Spec`.
    ``at_least=(low, label)`` / ``above=(low, label)``: its bound, ``>=`` or ``>``, and its name in
    the error."""
    bound = None
    if at_least is not None or above is not None:
        low, label = at_least if at_least is not None else above  # type: ignore[misc]
        bound = Bound(low, label, strict=above is not None, unit=_BOUND_WORDS.get(unit, ""))
    spec = Spec(help=help, bound=bound, validate=validate, parse=parse, keep_blank=keep_blank, flag=flag,
                unit=unit)
    return dataclasses.field(default=default, metadata={"spec": spec})


def check_api_key(key: str) -> str:
    """``key``, or the SettingsError of a key that is empty or that no client can send reliably.

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
    return key


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


def parse_bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true/false")


def _not_empty(model: str) -> str:
    if not model:
        raise SettingsError("model must not be empty")
    return model


@dataclass(frozen=True)
class Settings:
    model: str = setting(
        DEFAULT_CHOICE, "default model: a family of the weights folder, auto (per upload: photo for lossy "
        "files, asa-base for the rest), or a .safetensors file; a weights folder without the photo "
        "family needs a family named here", validate=_not_empty, flag="--model")
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps", flag="--device")
    precision: str = setting(
        "auto", "auto, fp32 or bf16 (auto: bf16 on AMX and AVX-512 BF16 CPUs for the models measured "
        "within 0.01 dB)", validate=parse_precision, parse=parse_precision, flag="--precision")
    workers: int = setting(1, "inference jobs running at once (threads sharing one loaded model)",
                           at_least=(1, "workers"), flag="--workers")
    max_queue: int = setting(4, "jobs that may wait for a worker; more: 503", at_least=(0, "max queue"),
                             flag="--queue")
    max_upload_bytes: int = setting(20 * 2**20, "size of the uploaded file (the flag takes MiB)",
                                    at_least=(1, "max upload bytes"), unit="bytes",
                                    flag="--max-upload-mb")
    max_pixels: int = setting(16 * 2**20, "input pixels (the decompression-bomb guard)",
                              at_least=(1, "max pixels"), unit="pixels", flag="--max-pixels")
    timeout_s: float = setting(120.0, "time limit of a request, queue wait included; past it: 504",
                               above=(0, "timeout"), unit="s", flag="--timeout")
    api_key: str | None = setting(
        None, "when set, /v1/* need it in the X-API-Key header (prefer the variable: flags show in ps); "
        "printable ASCII, never blank", validate=check_api_key, keep_blank=True, flag="--api-key")
    cors_origins: tuple[str, ...] = setting((), "comma-separated origins allowed by CORS; none: no CORS "
                                                "headers at all", flag="--cors-origins")
    weights_dir: Path | None = setting(None, "folder of `<model>-x<scale>.safetensors`; unset: the package's "
                                             "weights/ folder", flag="--weights-dir")
    threads: int | None = setting(None, "torch threads per job; unset: the usable CPUs divided among the "
                                        "workers", at_least=(1, "threads"), flag="--threads")
    # 512, not auto: a job can only be cancelled between network forwards, and auto runs a whole image
    # of up to 1024 px as one forward.
    tile: int | str = setting(512, "tile size in pixels, auto, or 0 (off); a job can be cancelled between "
                                   "tiles", parse=parse_tile, unit="px", flag="--tile")
    preload: bool = setting(True, "load and warm every scale of the model at start-up")
    max_output_pixels: int = setting(64 * 2**20, "output image pixels (8192 x 8192)",
                                     at_least=(1, "max output pixels"), unit="pixels")
    max_work_pixels: int = setting(128 * 2**20, "work of a request: the pixels the network produces, "
                                                "summed over its passes, x8 with tta",
                                   at_least=(1, "max work pixels"), unit="pixels")
    body_timeout_s: float = setting(30.0, "longest pause while an upload is read; past it: 408",
                                    above=(0, "body timeout"), unit="s")
    header_timeout_s: float = setting(10.0, "longest a request's headers may take to arrive; past it: 408",
                                      above=(0, "header timeout"), unit="s")
    # Slow clients: the floor stops the drip-feeders (1 byte every 5 s passed the idle timeout
    # forever); the cap is what binds a big upload on a slow link (20 MiB at the floor: 21 minutes).
    body_min_rate: float = setting(16 * 1024, "bytes per second an upload must average, counted after "
                                              "its first 5 s; under it: 408",
                                   at_least=(0, "body min rate"), unit="bytes/s")
    body_total_s: float = setting(120.0, "longest a whole upload may take; past it: 408",
                                  above=(0, "body total time"), unit="s")
    max_uploads: int = setting(0, "uploads in flight (body read, header read, queue, job); more: a JSON "
                                  "503 with Retry-After before the body is read; 0: 2 x (workers + "
                                  "queue) + 8", at_least=(0, "max uploads"))
    max_uploads_per_client: int = setting(8, "uploads in flight from one client address",
                                          at_least=(1, "max uploads per client"))
    sandbox_memory_mb: int = setting(2048, "address space of each decoder process",
                                     at_least=(64, "sandbox memory"), unit="MB")
    decode_cpu_s: float = setting(60.0, "CPU seconds of one decode", above=(0, "decode CPU time"), unit="s")
    probe_cpu_s: float = setting(2.0, "CPU seconds of one header read", above=(0, "probe CPU time"),
                                 unit="s")
    probe_wall_s: float = setting(10.0, "wall-clock seconds of one header read",
                                  above=(0, "probe wall time"), unit="s")
    send_timeout_s: float = setting(30.0, "longest an answer may make no progress while it is sent; past "
                                          "it the connection is reset and its memory freed",
                                    above=(0, "send timeout"), unit="s")
    max_buffered_bytes: int = setting(2**20, "bytes of one connection's answer held in the server's write "
                                             "buffer; the rest goes out as the client reads",
                                      at_least=(64 * 1024, "max buffered bytes"), unit="bytes")
    models_dir: Path | None = setting(None, "also offer every model file of this folder by its file stem "
                                            "(Community models)", flag="--models-dir")
    models_memory_mb: int = setting(1024, "parameter memory (fp32) of the models folder's engines kept "
                                          "loaded; past it the least recently used are unloaded",
                                    at_least=(1, "models memory"), unit="MB", flag="--models-memory-mb")

    def __post_init__(self) -> None:
        for name, spec in specs():
            error = spec.bound.error(getattr(self, name)) if spec.bound is not None else None
            if error is not None:
                raise SettingsError(error)
        for name, spec in specs():
            value = getattr(self, name)
            if spec.validate is not None and value is not None:
                object.__setattr__(self, name, spec.validate(value))

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
        """The defaults, overridden by the ``SR_*`` variables set (a blank one counts as unset, but
        for a setting that keeps blanks); an unreadable value is a SettingsError naming its variable."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, spec in specs():
            var, raw = env_name(name), env.get(env_name(name))
            if raw is None or (raw.strip() == "" and not spec.keep_blank):
                continue
            try:
                value = parser(name)(raw if spec.keep_blank else raw.strip())
                values[name] = spec.validate(value) if spec.validate is not None else value
            except ValueError as e:
                raise SettingsError(f"{var}={raw!r}: {e}") from None
        return cls(**values)  # type: ignore[arg-type]


def specs() -> Iterator[tuple[str, Spec]]:
    """(name, spec) of every setting, in the table's order."""
    for f in dataclasses.fields(Settings):
        yield f.name, f.metadata["spec"]


def env_name(name: str) -> str:
    """The environment variable of setting ``name``."""
    return ENV_PREFIX + name.upper()


_TYPE_PARSERS: dict[object, Callable[[str], Any]] = {
    str: str, int: int, float: float, bool: parse_bool, Path: Path, tuple[str, ...]: parse_origins,
}


@functools.cache
def parser(name: str) -> Callable[[str], Any]:
    """How setting ``name``'s variable is read: its own parser, else its type's (an optional type:
    the type's)."""
    spec = dict(specs())[name]
    if spec.parse is not None:
        return spec.parse
    kind = typing.get_type_hints(Settings)[name]
    if isinstance(kind, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return _TYPE_PARSERS[kind]


def _shown(value: object, unit: str) -> str:
    """A default as the docs' table says it."""
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if unit in ("bytes", "pixels") and isinstance(value, int) and value >= 2**20 and value % 2**20 == 0:
        return f"{value // 2**20} {'MiB' if unit == 'bytes' else 'Mi'}"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{value} {unit}".strip()


def settings_table() -> str:
    """The Markdown table of every setting (docs/service.md, "Settings and limits"): variable, flag,
    default, what it sets."""
    rows = ["| variable | `sr serve` flag | default | what |", "|---|---|---|---|"]
    for f in dataclasses.fields(Settings):
        spec: Spec = f.metadata["spec"]
        flag = f"`{spec.flag}`" if spec.flag else ""
        rows.append(f"| `{env_name(f.name)}` | {flag} | {_shown(f.default, spec.unit)} | {spec.help} |")
    return "\n".join(rows)
