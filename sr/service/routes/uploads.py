"""The upload's own checks, before any domain work: one value per field, not empty, within the byte
limit, not a model file."""

from __future__ import annotations

from fastapi import HTTPException, UploadFile
from starlette.datastructures import FormData

from ..settings import Settings

# Form fields that take one value: a repeated one is refused rather than silently taking the last.
SINGLE_FIELDS = ("file", "scale", "outscale", "width", "height", "model", "format", "quality", "budget_map",
                 "tta", "denoise", "look", "keep_budget_map", "pre")


def refuse_repeated_fields(form: FormData) -> None:
    """422 for a field given more than once, rather than silently taking the last value."""
    repeated = [f"{k} ({len(form.getlist(k))} times)" for k in SINGLE_FIELDS if len(form.getlist(k)) > 1]
    if repeated:
        raise HTTPException(422, detail=f"repeated form field: {', '.join(repeated)}; send each field once")


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


async def read_upload(file: UploadFile, settings: Settings) -> bytes:
    """The upload's bytes; 400 when empty, 413 over the byte limit, 415 for a model file (models
    come from the server's own folders, never from a client; nothing of it is read)."""
    data = await file.read()
    if not data:
        raise HTTPException(400, detail="the uploaded file is empty")
    if len(data) > settings.max_upload_bytes:
        raise HTTPException(413, detail=f"upload too large: {len(data)} bytes, the limit is "
                                        f"{settings.max_upload_bytes} bytes")
    kind = model_file_kind(data)
    if kind is not None:
        raise HTTPException(415, detail=f"not an image: the upload is {kind}; model files are never "
                                        "accepted as uploads (the server's models: GET /v1/models)")
    return data
