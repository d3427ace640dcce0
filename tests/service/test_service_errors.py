"""The one table of domain error answers (sr.service.routes.errors): status, detail and headers per
kind, the nearest class winning, and no answer for a server fault."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from sr.inference import UpscaleError
from sr.io import (
    AnimatedImageError,
    DecodeLimitError,
    ImageDecodeError,
    ImageEncodeError,
    ImageTooLargeError,
    ImageWriteError,
    UnsupportedModeError,
)
from sr.service.errors import (
    ApiKeyError,
    CorruptImageError,
    InvalidRequestError,
    ModelNotReadyError,
    ModelUnavailableError,
    upload_error,
)
from sr.service.jobs import JobStopped, JobTimeoutError, QueueFullError
from sr.service.planning import WorkLimitError
from sr.service.routes.errors import Answer, answer_domain_error, answer_for
from sr.service.running import NoBudgetMapError
from sr.service.sandbox import SandboxError, SandboxLimitError

PNG_HEAD = b"\x89PNG\r\n\x1a\n" + b"\0" * 8


@pytest.mark.parametrize(("error", "answer"), [
    (ImageTooLargeError("9 MP, over 4"),
     Answer(413, "image too large: 9 MP, over 4 (the server's SR_MAX_PIXELS)")),
    (AnimatedImageError("3 frames"), Answer(415, "unsupported image: 3 frames")),
    (UnsupportedModeError("F"), Answer(415, "unsupported pixel format: F (a valid image, but only 1-, 8- and "
                                            "16-bit gray, RGB, CMYK and palette images are read)")),
    (CorruptImageError("its header is damaged"),
     Answer(400, "corrupt or truncated image: its header is damaged")),
    (ImageDecodeError("not an image"), Answer(415, "not a supported image file: not an image")),
    (SandboxLimitError("over 2 s of CPU"), Answer(422, "image refused: over 2 s of CPU")),
    (DecodeLimitError("101 scans"), Answer(422, "image refused before decoding: 101 scans")),
    (ImageEncodeError("too large for JPEG"), Answer(422, "too large for JPEG")),
    (ImageWriteError("disk full"), Answer(400, "disk full")),  # any other ImageError
    (InvalidRequestError("quality must be 1-100, got 0"), Answer(422, "quality must be 1-100, got 0")),
    (UpscaleError("scale 4 is not available"), Answer(422, "scale 4 is not available")),
    (NoBudgetMapError("no budget map"), Answer(422, "no budget map")),
    (WorkLimitError("over the limit"), Answer(422, "over the limit")),
    (ApiKeyError("missing key"), Answer(401, "missing key", {"WWW-Authenticate": "ApiKey"})),
    (ModelNotReadyError("loading", retry_after=2), Answer(503, "loading", {"Retry-After": "2"})),
    (ModelUnavailableError("model x is unavailable: bad file"),
     Answer(503, "model x is unavailable: bad file")),
    (QueueFullError(7), Answer(503, "server busy: all workers and queue slots are taken; retry in 7 s (the "
                                    "predicted time for a slot to free)", {"Retry-After": "7"})),
    (JobTimeoutError(30), Answer(504, "request took longer than the server's limit of 30 s")),
    (SandboxError("did not start"), Answer(503, "decoder unavailable: did not start", {"Retry-After": "5"})),
    (MemoryError(),
     Answer(503, "server out of memory for this image; try a smaller one", {"Retry-After": "10"})),
])
def test_each_domain_error_has_its_answer(error: Exception, answer: Answer) -> None:
    assert answer_for(error) == answer


def test_server_faults_have_no_answer() -> None:
    for fault in (RuntimeError("boom"), JobStopped("stopped"), KeyError("x"), ValueError("plain")):
        assert answer_for(fault) is None


def test_torch_out_of_memory_is_a_503() -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "OutOfMemoryError"):
        pytest.skip("this torch has no OutOfMemoryError")
    assert answer_for(torch.OutOfMemoryError("CUDA out of memory")).status == 503


def test_the_handler_writes_what_an_httpexception_would() -> None:
    request = Request({"type": "http", "method": "POST", "path": "/v1/upscale", "headers": []})
    response = asyncio.run(answer_domain_error(request, QueueFullError(3)))
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert response.body == json.dumps({"detail": str(QueueFullError(3))}, separators=(",", ":")).encode()


def test_a_decode_failure_is_corrupt_only_for_an_upload_that_starts_like_an_image() -> None:
    damaged = upload_error(ImageDecodeError("not an image, or not a supported format"), PNG_HEAD)
    assert isinstance(damaged, CorruptImageError) and damaged.reason == "its header is damaged"
    truncated = upload_error(ImageDecodeError("truncated image data"), PNG_HEAD)
    assert isinstance(truncated, CorruptImageError) and truncated.reason == "truncated image data"
    foreign = ImageDecodeError("not an image, or not a supported format")
    assert upload_error(foreign, b"hello, not an image") is foreign
    mode = UnsupportedModeError("F")
    assert upload_error(mode, PNG_HEAD) is mode  # a valid image in a mode we do not read: 415, not corrupt


def test_a_body_error_under_fastapis_generic_400_gets_its_own_answer() -> None:
    from starlette.exceptions import HTTPException

    from sr.service.limits import UploadStalled, UploadTooLarge
    from sr.service.routes.errors import answer_http_exception

    request = Request({"type": "http", "method": "POST", "path": "/v1/upscale", "headers": []})
    for cause, status in ((UploadTooLarge("upload too large: the limit is 9 bytes"), 413),
                          (UploadStalled("upload stalled: no data for 1 s"), 408)):
        generic = HTTPException(400, detail="There was an error parsing the body")
        generic.__cause__ = cause  # as fastapi.routing raises it: `raise http_error from e`
        response = asyncio.run(answer_http_exception(request, generic))
        assert response.status_code == status
        assert response.body == json.dumps({"detail": cause.detail}, separators=(",", ":")).encode()
    plain = asyncio.run(answer_http_exception(request, HTTPException(404, detail="no such map")))
    assert plain.status_code == 404 and plain.body == b'{"detail":"no such map"}'
