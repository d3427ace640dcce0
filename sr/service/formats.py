"""The output formats a client may ask for, their MIME types, and the format an answer is written in:
all from sr.io's one table of formats (:data:`sr.io.FORMATS`)."""

from __future__ import annotations

from sr.io import FORMATS, writable_format_for
from sr.request import same_format


def request_formats() -> tuple[str, ...]:
    """Output formats a client may ask for (sr.io's writable formats by either name), plus "same":
    the source's format when it is writable, else PNG."""
    names = (n for f in FORMATS.values() if f.writable for n in (f.user_name, f.name))
    return (*dict.fromkeys(names), "same")


def mime_types() -> dict[str, str]:
    """MIME type of each output format, by the name :func:`output_format` returns."""
    return {f.user_name: f.mime for f in FORMATS.values() if f.writable}


def output_format(requested: str, source: str | None) -> str:
    """The output format's user name (png, jpg, webp) for a requested name or "same"."""
    if requested == "same":
        return same_format(source)
    row = writable_format_for(requested)
    if row is None:
        raise KeyError(requested)
    return row.user_name
