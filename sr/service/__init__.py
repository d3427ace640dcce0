"""HTTP service for sr: a FastAPI app over :class:`sr.inference.Upscaler`, plus a one-page web UI.

Run it with ``sr serve`` or ``uvicorn service.app:app``; build one in code with
:func:`service.app.create_app`.
"""
