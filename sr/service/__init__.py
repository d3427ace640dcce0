"""HTTP service for sr: a FastAPI app over :class:`sr.inference.Upscaler`, plus a one-page web UI.

Run it with ``sr serve`` or ``uvicorn --factory sr.service.app:create_app``; build one in code with
:func:`sr.service.app.create_app`. The HTTP shell is :mod:`sr.service.routes` and
:mod:`sr.service.deps`; the domain is :mod:`sr.service.core` and the modules it uses.
"""
