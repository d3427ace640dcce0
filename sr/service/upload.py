"""The uploaded file, before any image work: its bytes, read once and checked (:func:`read_upload`: not
empty, within the byte limit, not a model file), and its decode failures as the client should hear
them (:func:`decode_errors_of`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from sr.io import ImageDecodeError

from .errors import EmptyUploadError, ModelFileUploadError, UploadSizeError, upload_error


class Upload(Protocol):
    """An uploaded file as the route got it (Starlette's ``UploadFile`` is one)."""

    filename: str | None

    async def read(self) -> bytes: ...


def model_file_kind(data: bytes) -> str | None:
    """What kind of model file ``data`` starts like (a PyTorch pickle or zip archive, safetensors),
    or None. No image format sr reads starts like any of them."""
    if len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5:
        return "a pickle (.pth, .pt, .ckpt)"
    if data.startswith(b"PK\x03\x04"):
        return "a zip archive (.pth, .pt, .ckpt as torch.save writes them)"
    if len(data) >= 9 and data[8:9] == b"{" and 2 <= int.from_bytes(data[:8], "little") <= len(data) - 8:
        return "a safetensors file"
    return None


async def read_upload(upload: Upload, max_bytes: int) -> bytes:
    """The upload's bytes; refused when empty, over ``max_bytes``, or a model file (models come from
    the server's own folders, never from a client; nothing of it is read)."""
    data = await upload.read()
    if not data:
        raise EmptyUploadError("the uploaded file is empty")
    if len(data) > max_bytes:
        raise UploadSizeError(f"upload too large: {len(data)} bytes, the limit is {max_bytes} bytes")
    kind = model_file_kind(data)
    if kind is not None:
        raise ModelFileUploadError(f"not an image: the upload is {kind}; model files are never accepted as "
                                   "uploads (the server's models: GET /v1/models)")
    return data


@contextmanager
def decode_errors_of(data: bytes) -> Iterator[None]:
    """A decode failure of ``data`` as the client should hear it (:func:`upload_error`)."""
    try:
        yield
    except ImageDecodeError as e:
        raise upload_error(e, data) from None
