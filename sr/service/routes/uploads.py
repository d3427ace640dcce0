"""The upload form's own check, before any domain work: one value per field."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.datastructures import FormData

# Form fields that take one value: a repeated one is refused rather than silently taking the last.
SINGLE_FIELDS = ("file", "scale", "outscale", "width", "height", "model", "format", "quality", "budget_map",
                 "tta", "denoise", "look", "keep_budget_map", "pre")


def refuse_repeated_fields(form: FormData) -> None:
    """422 for a field given more than once, rather than silently taking the last value."""
    repeated = [f"{k} ({len(form.getlist(k))} times)" for k in SINGLE_FIELDS if len(form.getlist(k)) > 1]
    if repeated:
        raise HTTPException(422, detail=f"repeated form field: {', '.join(repeated)}; send each field once")
