"""The service's domain errors: what refuses a request, in the domain's words, without HTTP.

The HTTP answer of each (status code, detail, headers) is one table in
:mod:`sr.service.routes.errors`, registered once by :func:`sr.service.app.create_app`. The errors the
domain raises besides these are its libraries' own: :class:`sr.io.ImageError` and its kinds,
:class:`sr.inference.UpscaleError`, the job pool's (:mod:`sr.service.jobs`), the sandbox's
(:mod:`sr.service.sandbox`), and the job's own: :class:`sr.service.planning.WorkLimitError`,
:class:`sr.service.running.NoBudgetMapError`.
"""

from __future__ import annotations

from sr.io import ImageDecodeError, UnsupportedFormatError, UnsupportedModeError, looks_like_image


class InvalidRequestError(ValueError):
    """A form whose values the request refuses: unknown model, a scale the name contradicts, a
    value :meth:`sr.request.UpscaleRequest.validate` rejects, a look this server lacks."""


class ModelUnavailableError(RuntimeError):
    """A listed model whose file is unusable: the server's fault, not the client's."""


class ModelNotReadyError(RuntimeError):
    """The default model is still loading, or failed to; ``retry_after``: seconds to wait."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ApiKeyError(PermissionError):
    """The X-API-Key header is missing or wrong (only when the server has a key)."""


class EmptyUploadError(ValueError):
    """The uploaded file has no bytes."""


class UploadSizeError(ValueError):
    """The uploaded file is over the byte limit (counted once read; the body guard refuses most
    before: :mod:`sr.service.limits`)."""


class ModelFileUploadError(ValueError):
    """The upload is a model file (pickle, zip, safetensors): never accepted from a client."""


class CorruptImageError(ImageDecodeError):
    """An upload that starts like an image sr.io reads but fails to decode: damaged, not foreign."""


def upload_error(exc: ImageDecodeError, data: bytes) -> ImageDecodeError:
    """The upload's decode failure as the client should hear it: :class:`CorruptImageError` when
    ``data`` starts like a format sr.io reads (Pillow gives up on a damaged header as "not an
    image": that says corrupt), else ``exc`` itself (not an image we read, or a format the service
    does not take)."""
    if isinstance(exc, (UnsupportedModeError, UnsupportedFormatError)) or not looks_like_image(data):
        return exc
    reason = "its header is damaged" if exc.reason.startswith("not an image") else exc.reason
    return CorruptImageError(reason)
