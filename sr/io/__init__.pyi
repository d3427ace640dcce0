"""sr.io's public names: each import below is one, and this is the one list of them.

sr/io/__init__.py loads each from its submodule on first use (lazy_loader reads this file), so
``import sr.io`` stays free of numpy and Pillow; editors and type checkers read the names here.
A new public name is one more line.
"""

from .atomic import atomic_write as atomic_write
from .decode import read_array as read_array
from .decode import read_image as read_image
from .decode import read_size as read_size
from .encode import PreparedImage as PreparedImage
from .encode import encode_image as encode_image
from .encode import prepare_image as prepare_image
from .encode import write_image as write_image
from .errors import AnimatedImageError as AnimatedImageError
from .errors import DecodeLimitError as DecodeLimitError
from .errors import ImageDecodeError as ImageDecodeError
from .errors import ImageEncodeError as ImageEncodeError
from .errors import ImageError as ImageError
from .errors import ImageTooLargeError as ImageTooLargeError
from .errors import ImageWriteError as ImageWriteError
from .errors import UnsupportedFormatError as UnsupportedFormatError
from .errors import UnsupportedModeError as UnsupportedModeError
from .formats import FORMATS as FORMATS
from .formats import ImageFormat as ImageFormat
from .formats import format_for as format_for
from .formats import format_from_path as format_from_path
from .formats import listed_suffixes as listed_suffixes
from .formats import looks_like_image as looks_like_image
from .formats import normalize_format as normalize_format
from .formats import output_choices as output_choices
from .formats import output_formats as output_formats
from .formats import read_formats as read_formats
from .formats import read_suffixes as read_suffixes
from .formats import signatures as signatures
from .formats import sniff as sniff
from .formats import suffix_for as suffix_for
from .formats import upload_formats as upload_formats
from .formats import writable_format_for as writable_format_for
from .guards import DEFAULT_MAX_PIXELS as DEFAULT_MAX_PIXELS
from .guards import MAX_JPEG_SCANS as MAX_JPEG_SCANS
from .guards import MAX_PNG_CHUNK as MAX_PNG_CHUNK
from .guards import MAX_PNG_CHUNKS as MAX_PNG_CHUNKS
from .guards import MAX_PNG_METADATA as MAX_PNG_METADATA
from .guards import check_decode_cost as check_decode_cost
from .image import SAMPLE_TYPES as SAMPLE_TYPES
from .image import DecodedImage as DecodedImage
from .image import quantize as quantize
from .image import to_float as to_float
from .png16 import PNG_COMPRESS_LEVEL as PNG_COMPRESS_LEVEL
from .png16 import encode_png16 as encode_png16
