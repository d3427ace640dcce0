"""Every domain error's HTTP answer, in one table, registered once on the app (:func:`install`).

An error is answered by the nearest of its classes in :data:`ANSWERS` (its own, else a base's), so
a more specific kind (``UnsupportedModeError``) wins over a general one (``ImageDecodeError``). An
error in no row is a server fault: the app's 500 handler answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import DEFAULT_MAX_HEADER_COUNT, DEFAULT_MAX_HEADER_SIZE
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from sr.inference import UpscaleError
from sr.io import (
    AnimatedImageError,
    DecodeLimitError,
    ImageDecodeError,
    ImageEncodeError,
    ImageError,
    ImageTooLargeError,
    UnsupportedModeError,
)

from ..catalog import UnknownModelError
from ..errors import (
    ApiKeyError,
    CorruptImageError,
    EmptyUploadError,
    InvalidRequestError,
    ModelFileUploadError,
    ModelNotReadyError,
    ModelUnavailableError,
    UploadSizeError,
)
from ..jobs import JobTimeoutError, QueueFullError
from ..limits import BodyError
from ..planning import WorkLimitError
from ..running import NoBudgetMapError
from ..sandbox import SandboxError, SandboxLimitError


@dataclass(frozen=True)
class Answer:
    status: int
    detail: str
    headers: dict[str, str] | None = None


def _unprocessable(exc: Exception) -> Answer:
    return Answer(422, str(exc))


def _unsupported_mode(exc: Exception) -> Answer:
    mode = exc.mode if isinstance(exc, UnsupportedModeError) else "?"
    return Answer(415, f"unsupported pixel format: {mode} (a valid image, but only 1-, 8- and 16-bit gray, "
                       "RGB, CMYK and palette images are read)")


def _corrupt(exc: Exception) -> Answer:
    reason = exc.reason if isinstance(exc, ImageError) else str(exc)
    return Answer(400, f"corrupt or truncated image: {reason}")


def _body(exc: Exception) -> Answer:
    return Answer(exc.status_code, exc.detail) if isinstance(exc, BodyError) else Answer(400, str(exc))


def _out_of_memory(exc: Exception) -> Answer:
    return Answer(503, "server out of memory for this image; try a smaller one", {"Retry-After": "10"})


ANSWERS: dict[type[BaseException], Callable[[Exception], Answer]] = {
    # the upload
    EmptyUploadError: lambda e: Answer(400, str(e)),
    UploadSizeError: lambda e: Answer(413, str(e)),
    ModelFileUploadError: lambda e: Answer(415, str(e)),  # models come from the server's folders only
    # the limit is the server's own setting, named so an operator knows which one to raise
    ImageTooLargeError: lambda e: Answer(413, f"image too large: {e} (the server's SR_MAX_PIXELS)"),
    AnimatedImageError: lambda e: Answer(415, f"unsupported image: {e}"),
    UnsupportedModeError: _unsupported_mode,
    CorruptImageError: _corrupt,                      # starts like an image we read (errors.upload_error)
    ImageDecodeError: lambda e: Answer(415, f"not a supported image file: {e}"),
    SandboxLimitError: lambda e: Answer(422, f"image refused: {e}"),  # out of the decoder's CPU or time
    DecodeLimitError: lambda e: Answer(422, f"image refused before decoding: {e}"),  # an unbounded cost
    ImageEncodeError: _unprocessable,                 # e.g. the output is too large for JPEG/WebP
    ImageError: lambda e: Answer(400, str(e)),
    # the request
    BodyError: _body,                                 # 413 past the byte limit, 408 stalled (limits.py)
    InvalidRequestError: _unprocessable,
    UnknownModelError: _unprocessable,
    UpscaleError: _unprocessable,
    NoBudgetMapError: _unprocessable,
    WorkLimitError: _unprocessable,
    ApiKeyError: lambda e: Answer(401, str(e), {"WWW-Authenticate": "ApiKey"}),
    # the server
    ModelNotReadyError: lambda e: Answer(503, str(e), {"Retry-After": str(_retry_after(e))}),
    ModelUnavailableError: lambda e: Answer(503, str(e)),
    QueueFullError: lambda e: Answer(503, str(e), {"Retry-After": str(_retry_after(e))}),
    JobTimeoutError: lambda e: Answer(504, str(e)),
    SandboxError: lambda e: Answer(503, f"decoder unavailable: {e}", {"Retry-After": "5"}),
    MemoryError: _out_of_memory,
}


def _retry_after(exc: Exception) -> int:
    return int(getattr(exc, "retry_after", 1))


def _torch_out_of_memory() -> type[BaseException] | None:
    import torch

    return getattr(torch, "OutOfMemoryError", None)  # torch.cuda.OutOfMemoryError: not a MemoryError


if (_oom := _torch_out_of_memory()) is not None:
    ANSWERS[_oom] = _out_of_memory


def answer_for(exc: Exception) -> Answer | None:
    """The answer of the nearest of ``exc``'s classes in :data:`ANSWERS`, or None (a server fault)."""
    for cls in type(exc).__mro__:
        if cls in ANSWERS:
            return ANSWERS[cls](exc)
    return None


async def answer_domain_error(request: Request, exc: Exception) -> Response:
    """The JSON ``{"detail": ...}`` answer, written by FastAPI's own HTTPException handler (the
    bytes a route's HTTPException gets)."""
    answer = answer_for(exc)
    if answer is None:  # registered only for the table's classes: cannot happen
        raise exc
    return await http_exception_handler(request, HTTPException(answer.status, detail=answer.detail,
                                                               headers=answer.headers))


def _multipart_header_error(exc: BaseException) -> str | None:
    """The form parser's refusal of a part's header line behind ``exc`` (Starlette's "Invalid
    multipart data."), e.g. a 10 KB file name, in words; None for any other error."""
    seen: BaseException | None = exc
    for _ in range(4):  # HTTPException <- MultiPartException <- MultipartParseError
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None:
            return None
        if isinstance(seen, MultipartParseError) and "header size" in str(seen):
            return (f"file name too long: a form part's header line (its file name included) may be at "
                    f"most {DEFAULT_MAX_HEADER_SIZE} bytes, the form parser's limit; send a file name of "
                    f"under {DEFAULT_MAX_HEADER_SIZE - 200} bytes")
        if isinstance(seen, MultipartParseError) and "header count" in str(seen):
            return (f"a form part has over {DEFAULT_MAX_HEADER_COUNT} header lines, the form parser's "
                    "limit")
    return None


async def answer_http_exception(request: Request, exc: Exception) -> Response:
    """FastAPI's own answer to an HTTPException, except for the generic 400 it makes of an error
    of body parsing caused by a :class:`~sr.service.limits.BodyError` (that one's answer instead)
    or by a form part's header over the parser's limits (the limit, in words)."""
    if isinstance(exc.__cause__, BodyError):
        return await answer_domain_error(request, exc.__cause__)
    if (part := _multipart_header_error(exc)) is not None:
        return await http_exception_handler(request, HTTPException(400, detail=part))
    if not isinstance(exc, StarletteHTTPException):  # registered only for HTTPException
        raise exc
    return await http_exception_handler(request, exc)


def install(app: FastAPI) -> None:
    """Register :func:`answer_domain_error` for every class in the table, and
    :func:`answer_http_exception` for HTTPExceptions."""
    for cls in ANSWERS:
        app.add_exception_handler(cls, answer_domain_error)
    app.add_exception_handler(StarletteHTTPException, answer_http_exception)
