"""The upload form's fields (:class:`UpscaleForm`) -> the validated :class:`sr.request.UpscaleRequest`
(:func:`form_request`), checked by the request itself, as the CLI's arguments are."""

from __future__ import annotations

from dataclasses import dataclass

from sr import NATURAL_MODEL
from sr.request import UpscaleRequest

from .catalog import ModelCatalog, UnknownModelError
from .errors import InvalidRequestError


@dataclass(frozen=True)
class UpscaleForm:
    """The values of POST /v1/upscale's form fields, as sent (types checked, values not yet)."""

    model: str | None = None
    pre: str | None = None
    scale: int | None = None
    outscale: float | None = None
    width: int | None = None
    height: int | None = None
    fmt: str = "same"
    quality: int = 95
    budget_map: bool = False
    tta: bool = False
    denoise: float | None = None
    look: float | None = None
    keep_budget_map: bool = False  # also keep the result's budget map for GET /v1/budget-maps/{id}


def form_request(catalog: ModelCatalog, form: UpscaleForm) -> tuple[str, UpscaleRequest]:
    """(family, the validated request) from an upload's form; :class:`InvalidRequestError` saying
    why not. The model is a catalogue name (photo-x2 implies scale 2), ``pre`` the name of a 1x
    restoration model of the models folder (never a path); every other value is checked by
    :meth:`UpscaleRequest.validate`, the check the CLI's arguments get, in the same words."""
    try:
        family, implied = catalog.resolve(form.model)
        pre = catalog.resolve_pre(form.pre)
    except (UnknownModelError, ValueError) as e:
        raise InvalidRequestError(str(e)) from None
    if implied is not None and form.scale is not None and form.scale != implied:
        raise InvalidRequestError(f"model {form.model!r} is a x{implied} model but scale={form.scale} "
                                  "was asked")
    request = UpscaleRequest(scale=form.scale if form.scale is not None else implied, outscale=form.outscale,
                             width=form.width, height=form.height, model=catalog.request_model(family),
                             denoise=form.denoise, look=form.look, tta=form.tta, format=form.fmt,
                             quality=form.quality, budget_map=form.budget_map, pre=pre)
    try:
        request = request.validate()
    except ValueError as e:
        raise InvalidRequestError(str(e)) from None
    if request.look and not catalog.takes_look(family):  # photo or auto, but no photo-natural here
        raise InvalidRequestError(f"look needs {NATURAL_MODEL} weights, which this server does not "
                                  f"have (GET /v1/models: look)")
    return family, request
