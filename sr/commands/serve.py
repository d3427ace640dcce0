"""``sr serve``: run the HTTP service (FastAPI app + web page) with uvicorn.

Settings come from ``SR_*`` environment variables, overridden by these flags. ``--workers`` is the
number of inference jobs run at once inside this one process (threads sharing one loaded model),
not uvicorn worker processes: each of those would load its own copy of the model.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import socket
import sys
from pathlib import Path

from .. import AUTO_MODEL, DEFAULT_CHOICE, NEAR_LOSSLESS_QUALITY, PHOTO_MODEL
from ..errors import CLIError
from ..shipped import is_model_path
from .precision import add_precision_argument
from .weights_dir import add_weights_dir_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only)")
    a("--port", type=int, default=8000, help="TCP port (default: 8000)")
    a("--model", default=None,
      help=f"default model: a family in the weights folder (e.g. asa-base, {PHOTO_MODEL}), {AUTO_MODEL} "
      f"(per upload: {PHOTO_MODEL} for lossy files below quality {NEAR_LOSSLESS_QUALITY}, else asa-base; "
      "docs/upscaling.md) or a .safetensors file "
      f"[SR_MODEL; {DEFAULT_CHOICE}]")
    add_weights_dir_argument(p, from_env=False)  # Settings.from_env reads SR_WEIGHTS_DIR
    a("--models-dir", default=None,
      help="also offer every model file of this folder by its file stem (.pth, .pt, .ckpt, .safetensors: "
      "sr's own, or any architecture spandrel reads, with the models extra); 1x restoration models "
      "become pre= choices [SR_MODELS_DIR]")
    a("--models-memory-mb", type=int, default=None,
      help="parameter memory of the models folder's engines kept loaded; the least recently used are "
      "unloaded past it [SR_MODELS_MEMORY_MB; 1024]")
    a("--device", default=None, help="auto | cpu | cuda | cuda:N | mps [SR_DEVICE; auto]")
    add_precision_argument(p, default=None, note=" [SR_PRECISION; auto]")
    a("--workers", type=int, default=None, help="inference jobs run at once [SR_WORKERS; 1]")
    a("--queue", type=int, default=None, help="jobs that may wait for a worker; more: 503 [SR_MAX_QUEUE; 4]")
    a("--max-upload-mb", type=float, help="upload limit in MiB [SR_MAX_UPLOAD_BYTES (bytes); 20]")
    a("--max-pixels", type=int, default=None, help="largest input image in pixels [SR_MAX_PIXELS; 16 Mi]")
    a("--timeout", type=float, default=None,
      help="per-request time limit in seconds, queue wait included [SR_TIMEOUT_S; 120]")
    a("--api-key", default=None, help="require this key in header X-API-Key on /v1/* [SR_API_KEY]")
    a("--cors-origins", default=None, help="comma-separated CORS origins; off if unset [SR_CORS_ORIGINS]")
    a("--threads", type=int, default=None, help="torch threads per job [SR_THREADS; usable CPUs / workers]")
    a("--tile", default=None,
      help="tile size in pixels, 'auto' or 0 (off); a job can be cancelled between tiles [SR_TILE; 512]")
    a("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def build_settings(args: argparse.Namespace):  # -> sr.service.settings.Settings (lazy import)
    from sr.request import parse_tile
    from sr.service.settings import Settings, SettingsError, parse_origins

    try:
        base = Settings.from_env()
        tile = parse_tile(args.tile) if args.tile is not None else None
        upload = None if args.max_upload_mb is None else int(args.max_upload_mb * 2**20)
        weights_dir = Path(args.weights_dir) if args.weights_dir else None
        models_dir = Path(args.models_dir) if args.models_dir else None
        origins = parse_origins(args.cors_origins) if args.cors_origins is not None else None
        return base.replace(
            model=args.model, weights_dir=weights_dir, device=args.device, precision=args.precision,
            workers=args.workers, max_queue=args.queue, max_upload_bytes=upload, max_pixels=args.max_pixels,
            timeout_s=args.timeout, api_key=args.api_key, threads=args.threads, tile=tile,
            cors_origins=origins, models_dir=models_dir, models_memory_mb=args.models_memory_mb,
        )
    except (SettingsError, ValueError) as e:
        raise CLIError(str(e)) from None


def check_model(settings) -> None:
    """Fail before binding the port when the model or device is unusable (clear message, exit 2).

    Building the engine is cheap (it reads metadata only; weights load later, in the app).
    """
    from sr.inference import UpscaleError
    from sr.service.catalog import UnknownModelError
    from sr.service.hub import ModelHub

    hub = ModelHub(settings)
    if hub.default not in hub.catalog.families() and settings.models_dir is not None and any(
            p.stem == hub.default and is_model_path(p)
            for p in settings.models_dir.glob(f"{glob.escape(hub.default)}.*")):
        return  # a file of the models folder: read once, by the app, before /readyz says ready
    try:
        hub.catalog.resolve(hub.default)
        hub.engine(hub.default)
    except UnknownModelError:
        available = ", ".join(hub.catalog.families()) or "none"
        folder = settings.weights_dir or "the package weights/ folder"
        message = f"model {settings.model!r} not found (available: {available}; weights folder: {folder})"
        raise CLIError(message) from None
    except UpscaleError as e:
        raise CLIError(str(e)) from None


UVICORN_CONNECTION_CAP = 1024


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port must be 0..65535, got {args.port}")
    settings = build_settings(args)
    if settings.weights_dir is not None and not settings.weights_dir.is_dir():
        raise CLIError(f"weights folder not found: {settings.weights_dir}")
    if settings.models_dir is not None and not settings.models_dir.is_dir():
        raise CLIError(f"models folder not found: {settings.models_dir}")
    check_model(settings)
    if args.port:
        _check_port(args.host, args.port)
    if settings.api_key is None and not _is_loopback(args.host):
        print(f"sr serve: warning: listening on {args.host} without an API key", file=sys.stderr)

    import uvicorn

    from sr.service.app import create_app
    from sr.service.limits import connection_protocol

    app = create_app(settings)
    # A backstop only: uploads are capped by the app (service.intake.UploadAdmission: a JSON 503 with
    # Retry-After, and /healthz never counted); uvicorn's own cap answers plain text and counts
    # health checks, so (workers + queue) * 4 + 32 starved /healthz under 51 slow uploads.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            limit_concurrency=UVICORN_CONNECTION_CAP, timeout_graceful_shutdown=5,
                            http=connection_protocol(settings))
    uvicorn.Server(config).run()
    return 0


def _check_port(host: str, port: int) -> None:
    """A clear error for a busy port or a bad address before the model is loaded (uvicorn only logs)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, addr = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as e:
        raise CLIError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
