"""What the OpenAPI document says of each error status (the routes' ``responses=``), and the HTTP
response of a domain :class:`~sr.service.answer.Answer` (:func:`sent`)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from ..answer import Answer

REFUSED_BEFORE_DECODING = "a file refused before decoding (over 100 JPEG scans, PNG metadata bombs)"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/json": {"example": {"detail": "..."}}}}
    for code, text in {
        400: "empty upload, or a corrupt / truncated image",
        401: "API key missing or wrong (only when the server has one)",
        408: "the request's headers or its upload stalled (header or body timeout)",
        413: "upload over the byte limit, or image over the pixel limit",
        415: "not an image, an animated image, or an unsupported pixel format",
        422: "bad or repeated field: unknown model, unavailable scale, bad format, quality, denoise or look "
             "(or denoise / look with a model other than photo / auto, or a look at a scale photo-natural "
             "lacks); an output / work over the server's "
             "limits, or predicted to take longer than its time limit; " + REFUSED_BEFORE_DECODING,
        503: "model loading, or server busy (see Retry-After)",
        504: "request took longer than the server's time limit",
    }.items()
}
# Status for a request whose client went away (nginx's convention; nobody reads it).
CLIENT_CLOSED = 499


def sent(answer: Answer | None) -> Response:
    """The response of ``answer``; None (the client went away): :data:`CLIENT_CLOSED`, no body."""
    if answer is None:
        return Response(status_code=CLIENT_CLOSED)
    return Response(content=answer.body, media_type=answer.media_type, headers=answer.headers)
