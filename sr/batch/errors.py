"""The batch's one error type: what stops a batch, naming the options at fault by their field names.

The batch does not know how its caller's users spell an option (``sr upscale`` spells ``tile_overlap``
``--tile-overlap``): a message names each option as a ``{field}`` placeholder, and the caller renders
it with :meth:`BatchError.message` and its own spelling. ``str()`` of the error uses the field names.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Formatter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..request import UpscaleRequest

__all__ = ["BatchError", "Naming"]

Naming = Callable[[str], str]  # a field's name -> how the caller's users call it


class BatchError(ValueError):
    """A batch that cannot start (``code`` 2: nothing was done) or could not go on (``code`` 1).

    ``template`` names options as ``{field}`` (a :class:`~sr.batch.BatchOptions` or
    :class:`~sr.request.UpscaleRequest` field); every other placeholder is one of ``values``, so what
    a value holds is never read as a placeholder. ``field``: the first option named, if any.
    """

    def __init__(self, template: str, code: int = 2, **values: object) -> None:
        self.fields = tuple(dict.fromkeys(
            name for _, name, _, _ in Formatter().parse(template) if name and name not in values
        ))
        self.code = code
        self._render: Callable[[Naming], str] = lambda name: template.format(
            **{f: name(f) for f in self.fields}, **values
        )
        super().__init__(self._render(str))

    @property
    def field(self) -> str | None:
        return self.fields[0] if self.fields else None

    def message(self, name: Naming = str) -> str:
        """The message with each option called ``name(field)``."""
        return self._render(name)

    @classmethod
    def of_request(cls, request: UpscaleRequest, error: ValueError) -> BatchError:
        """The request's own refusal ``error`` (:meth:`~sr.request.UpscaleRequest.validate`), worded
        by the request for whichever naming the caller renders it with."""

        def render(name: Naming) -> str:
            try:
                request.validate(name=name)
            except ValueError as again:
                return str(again)
            return str(error)  # not reached: the request refuses the same way every time

        made = cls("{detail}", detail=str(error))
        field = getattr(error, "field", None)  # a RequestError's
        made.fields = (field,) if field else ()
        made._render = render
        return made
