"""The upload's own checks, before any domain work: one value per field, not empty, within the byte limit."""

from __future__ import annotations

from fastapi import HTTPException, UploadFile
from starlette.datastructures import FormData

from ..settings import Settings

# Form fields that take one value: a repeated one is refused rather than silently taking the last.
SINGLE_FIELDS = ("file", "scale", "outscale", "width", "height", "model", "format", "quality", "budget_map",
                 "tta", "denoise", "look", "keep_budget_map")


def refuse_repeated_fields(form: FormData) -> None:
    """422 for a field given more than once, rather than silently taking the last value."""
    repeated = [f"{k} ({len(form.getlist(k))} times)" for k in SINGLE_FIELDS if len(form.getlist(k)) > 1]
    if repeated:
        raise HTTPException(422, detail=f"repeated form field: {', '.join(repeated)}; send each field once")


async def read_upload(file: UploadFile, settings: Settings) -> bytes:
    """The upload's bytes; 400 when empty, 413 over the byte limit."""
    data = await file.read()
    if not data:
        raise HTTPException(400, detail="the uploaded file is empty")
    if len(data) > settings.max_upload_bytes:
        raise HTTPException(413, detail=f"upload too large: {len(data)} bytes, the limit is "
                                        f"{settings.max_upload_bytes} bytes")
    return data
