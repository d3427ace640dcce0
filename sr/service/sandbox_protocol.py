"""The decoder sandbox's messages (:mod:`sr.service.sandbox`), typed: a :class:`JobMessage` from the
server to a child, a :class:`Reply` back, carrying a :class:`ProbeReply`, :class:`PngReply`,
:class:`ImageReply` or :class:`ErrorReply`. Each is one small JSON datagram; bulk bytes travel
beside it in memfds. A child's :class:`~sr.io.ImageError` travels as an :class:`ErrorReply` whose
:class:`ErrorKind` names its class in one table, :data:`ERROR_CLASSES`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass

import sr.io as sio

MAX_MESSAGE = 64 * 1024   # bytes of one datagram: JSON only, anything big goes in a memfd
MAX_FDS = 4               # memfds that come with one message
# A child whose resident memory passed this after a job is retired and replaced: glibc keeps freed
# heap, and a child that once decoded a 16-MP image would otherwise sit on it while idle.
RETIRE_RSS_BYTES = 256 * 2**20


class Op(enum.Enum):
    PROBE = "probe"
    DECODE = "decode"
    PREVIEW = "preview"


@dataclass(frozen=True)
class JobMessage:
    """Parent -> child: one job on the upload in the memfd that comes with it."""

    op: Op
    size: int                 # the upload's bytes
    max_pixels: int | None
    cpu_s: float              # the job's CPU allowance

    def encode(self) -> bytes:
        return json.dumps({**dataclasses.asdict(self), "op": self.op.value}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> JobMessage:
        fields = json.loads(raw)
        return cls(Op(fields["op"]), int(fields["size"]), fields["max_pixels"], float(fields["cpu_s"]))


class ErrorKind(enum.Enum):
    """Which :class:`~sr.io.ImageError` a child raised (:data:`ERROR_CLASSES`)."""

    IMAGE = "image"
    DECODE = "decode"
    UNSUPPORTED_MODE = "unsupported-mode"
    UNSUPPORTED_FORMAT = "unsupported-format"
    ANIMATED = "animated"
    TOO_LARGE = "too-large"
    DECODE_LIMIT = "decode-limit"
    ENCODE = "encode"
    WRITE = "write"


ERROR_CLASSES: dict[ErrorKind, type[sio.ImageError]] = {
    ErrorKind.IMAGE: sio.ImageError,
    ErrorKind.DECODE: sio.ImageDecodeError,
    ErrorKind.UNSUPPORTED_MODE: sio.UnsupportedModeError,
    ErrorKind.UNSUPPORTED_FORMAT: sio.UnsupportedFormatError,
    ErrorKind.ANIMATED: sio.AnimatedImageError,
    ErrorKind.TOO_LARGE: sio.ImageTooLargeError,
    ErrorKind.DECODE_LIMIT: sio.DecodeLimitError,
    ErrorKind.ENCODE: sio.ImageEncodeError,
    ErrorKind.WRITE: sio.ImageWriteError,
}
_ERROR_KINDS = {cls: kind for kind, cls in ERROR_CLASSES.items()}


@dataclass(frozen=True)
class ProbeReply:
    width: int
    height: int
    orientation: int


@dataclass(frozen=True)
class PngReply:
    size: int                 # the PNG's bytes, in the memfd that comes with it


@dataclass(frozen=True)
class ImageReply:
    """A decoded image: pixels, then alpha and the ICC profile when present, each in its own memfd."""

    shape: list[int]
    dtype: str
    bit_depth: int
    format: str | None
    mode: str | None
    alpha_shape: list[int] | None = None
    icc_size: int = 0


@dataclass(frozen=True)
class ErrorReply:
    kind: ErrorKind
    reason: str
    mode: str | None = None   # UnsupportedModeError's
    format: str | None = None  # UnsupportedFormatError's

    @classmethod
    def of(cls, error: sio.ImageError) -> ErrorReply:
        """The record of ``error``: its class's kind (the nearest one in the table), reason, mode
        and format."""
        kind = next(_ERROR_KINDS[c] for c in type(error).__mro__ if c in _ERROR_KINDS)
        return cls(kind, error.reason, getattr(error, "mode", None), getattr(error, "format", None))

    def error(self) -> sio.ImageError:
        cls = ERROR_CLASSES[self.kind]
        if cls is sio.UnsupportedModeError:
            return sio.UnsupportedModeError(self.mode or "?", None)
        if cls is sio.UnsupportedFormatError:
            return sio.UnsupportedFormatError(self.reason, None, self.format)
        return cls(self.reason, None)


Result = ProbeReply | PngReply | ImageReply | ErrorReply
_RESULT_TYPES: dict[str, type[Result]] = {"probe": ProbeReply, "png": PngReply, "image": ImageReply,
                                          "error": ErrorReply}
_RESULT_NAMES = {cls: name for name, cls in _RESULT_TYPES.items()}


@dataclass(frozen=True)
class Reply:
    """Child -> parent: a job's result, the CPU it used, and whether the child retires after it."""

    result: Result
    cpu_s: float = 0.0
    retire: bool = False

    def encode(self) -> bytes:
        fields = dataclasses.asdict(self.result)
        if isinstance(self.result, ErrorReply):
            fields["kind"] = self.result.kind.value
        return json.dumps({"type": _RESULT_NAMES[type(self.result)], "result": fields, "cpu_s": self.cpu_s,
                           "retire": self.retire}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Reply:
        message = json.loads(raw)
        kind, fields = _RESULT_TYPES[message["type"]], message["result"]
        if kind is ErrorReply:
            fields["kind"] = ErrorKind(fields["kind"])
        return cls(kind(**fields), float(message["cpu_s"]), bool(message["retire"]))
