"""The routes' dependencies: this app's :class:`~sr.service.core.Service` and settings (each spelled
once, as an ``Annotated`` alias), the API key check and the model's readiness. A refusal is a domain
error (:mod:`sr.service.errors`), answered by :mod:`sr.service.routes.errors`."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader

from .core import Service
from .errors import ApiKeyError, ModelNotReadyError
from .settings import Settings


def get_service(request: Request) -> Service:
    return request.app.state.service


def get_settings(request: Request) -> Settings:
    return request.app.state.service.settings


# The one spelling of "this app's Service" (and its settings) that routes take as a parameter.
ServiceDep = Annotated[Service, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False,
                              description="required only when the server is started with an API key")
ApiKeyDep = Annotated[str | None, Security(api_key_header)]

API_KEY_DETAIL = "missing or wrong API key (send it in the X-API-Key header)"


def require_api_key(request: Request, settings: SettingsDep, key: ApiKeyDep) -> None:
    # ApiKeyMiddleware already refused keyless requests before their body was read; this
    # dependency documents the key in OpenAPI and guards routes should the middleware be removed.
    # Both compare the header's raw bytes with the (ASCII-only, see Settings) key.
    if settings.api_key is None:
        return
    given = next((v for k, v in request.headers.raw if k == b"x-api-key"), None)
    if key is None or given is None or not secrets.compare_digest(given, settings.api_key.encode()):
        raise ApiKeyError(API_KEY_DETAIL)


def require_ready(service: ServiceDep) -> None:
    if service.hub.state == "loading":
        raise ModelNotReadyError("model is still loading; retry shortly", retry_after=2)
    if service.hub.state == "failed":
        raise ModelNotReadyError(f"model failed to load: {service.hub.error}", retry_after=60)
