"""Image I/O: decode common formats into float arrays, encode them back, write files atomically.

:func:`read_image` turns a file, bytes or binary stream into a :class:`DecodedImage`: float32 colour in
[0, 1] (one channel for gray sources, three for colour), alpha split off, EXIF orientation applied, the
ICC profile kept, 16-bit sources kept at full precision. Anything it cannot take (empty, truncated,
corrupt, not an image, animated, too many pixels, a format the caller does not accept) raises one
:class:`ImageError` subclass with a clear message. :func:`encode_image` / :func:`write_image` go the
other way: PNG (16-bit when the source was), JPEG or WebP, alpha recombined, ICC profile written
back, files replaced atomically (:func:`prepare_image` first, where the caller can let the samples go
before the encoder runs).

:data:`FORMATS` is the one table of image formats (suffixes, Pillow names, MIME types, readable or
writable) that the CLI, evaluation, training and the service read; :func:`atomic_write` is the one way
sr writes a file (images, weights, checkpoints, caches, exports, reports).

One module per job: :mod:`.formats` (the table), :mod:`.errors`, :mod:`.image` (the decoded image and
its samples), :mod:`.guards` (decode-cost limits on the raw bytes), :mod:`.decode`, :mod:`.encode`,
:mod:`.atomic` and :mod:`.png16` (Pillow cannot write 16-bit colour PNG). The imports in
``__init__.pyi`` are the public surface, listed once; names with a leading underscore stay inside the
package.
"""

import lazy_loader

# Each public name (the imports in __init__.pyi) loads from its submodule on first use: the CLI
# checks its arguments with the format table and decode limits alone, and importing all of sr.io
# there (numpy, Pillow's codecs) would make every argument error ~0.5 s slower, for nothing.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
