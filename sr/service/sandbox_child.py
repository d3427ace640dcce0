"""The decoder sandbox's child: ``python -m sr.service.sandbox_child``, started and limited by
:class:`sr.service.sandbox.Sandbox`.

It sets its own address-space limit, imports its decoders, says it is ready, then serves one job
at a time from its socket (:mod:`sr.service.sandbox_protocol`): the upload from a memfd in, the
result (or the error that refused it) back, its pixels in memfds. Before each job the kernel's CPU
deadline moves to what the child has used plus the job's allowance. Whatever the decoder raises is
answered (:func:`serve_one`); only its limits, or a crash, end the child.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import mmap
import os
import resource
import signal
import socket
import sys

import numpy as np

import sr.io as sio
from sr.io.png_chunks import late_exif_orientation, stored_size

from . import sandbox_protocol as protocol

MODULE = "sr.service.sandbox_child"


def _memfd_with(array: np.ndarray) -> int:
    fd = os.memfd_create("sr-pixels", os.MFD_CLOEXEC)
    if array.nbytes:
        os.ftruncate(fd, array.nbytes)
        with mmap.mmap(fd, array.nbytes) as m:
            np.frombuffer(m, dtype=array.dtype).reshape(array.shape)[...] = array
    return fd


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# The formats the service accepts from uploads: decided here, in the child, so no caller can widen it.
UPLOAD_FORMATS = sio.upload_formats()
# An unexpected exception's message is cut to this many characters: it travels in a datagram.
MAX_REASON = 300


def serve_one(job: protocol.JobMessage, data: bytes) -> tuple[protocol.Result, list[int]]:
    """The job's result, or its refusal as an :class:`~.sandbox_protocol.ErrorReply`: whatever the
    decoder raises, the child answers and lives on (a TypeError from Pillow killed it, cost a restart and was
    answered "refused before decoding"); only its limits end it."""
    try:
        return _serve(job, data)
    except sio.ImageError as e:
        return protocol.ErrorReply.of(e), []
    except MemoryError:
        return protocol.ErrorReply(protocol.ErrorKind.TOO_LARGE, "not enough memory to decode this image"), []
    except Exception as e:  # noqa: BLE001 - any decoder failure is the file's: answered, not fatal
        what = f"{type(e).__name__}: {e}"
        print(f"sr decoder: {job.op.value} failed: {what[:MAX_REASON]}", file=sys.stderr, flush=True)
        reason = f"the decoder failed on this file ({what[:MAX_REASON]})"
        return protocol.ErrorReply(protocol.ErrorKind.DECODE, reason), []


def _serve(job: protocol.JobMessage, data: bytes) -> tuple[protocol.Result, list[int]]:
    if job.op is protocol.Op.PROBE:
        w, h = sio.read_size(data, job.max_pixels, formats=UPLOAD_FORMATS)
        orientation = late_exif_orientation(data)
        if orientation in (5, 6, 7, 8) and (w, h) == stored_size(data):
            w, h = h, w  # the decoder will turn it (an eXIf chunk after the pixel data)
        return protocol.ProbeReply(w, h, orientation or 1), []
    img = sio.read_image(data, max_pixels=job.max_pixels, formats=UPLOAD_FORMATS)
    if job.op is protocol.Op.PREVIEW:
        body = sio.encode_image(dataclasses.replace(img, bit_depth=8), format="png")
        del img
        fd = os.memfd_create("sr-png", os.MFD_CLOEXEC)
        os.write(fd, body) if len(body) < 2**20 else _write_all(fd, body)
        return protocol.PngReply(len(body)), [fd]
    return _image_reply(img)


def _image_reply(img: sio.DecodedImage) -> tuple[protocol.ImageReply, list[int]]:
    fds = [_memfd_with(img.pixels)]
    alpha_shape, icc_size = None, 0
    if img.alpha is not None:
        fds.append(_memfd_with(img.alpha))
        alpha_shape = list(img.alpha.shape)
    if img.icc_profile:  # up to MAX_PNG_CHUNK: too big for a datagram
        fds.append(_memfd_with(np.frombuffer(img.icc_profile, np.uint8)))
        icc_size = len(img.icc_profile)
    return protocol.ImageReply(list(img.pixels.shape), str(img.pixels.dtype), img.bit_depth, img.format,
                               img.mode, alpha_shape, icc_size), fds


# A 1x1 gray PNG, decoded once at start-up.
_WARM_UP_PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010800000000"
                             "3a7e9b550000000a49444154789c63600000000200015c3a1b5f0000000049454e44ae426082")


def _write_all(fd: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view):]


def child_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="a decoder child of sr serve")
    p.add_argument("--fd", type=int, required=True, help="the SOCK_SEQPACKET socket to the server")
    p.add_argument("--memory", type=int, required=True, help="RLIMIT_AS in bytes")
    args = p.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGXCPU'd child leaves no core file
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=args.fd)
    from PIL import Image

    # Before "ready": the first job should not pay for the imports, nor for Pillow's plugin
    # registry (Image.init imports every format plugin: ~0.5 s of a loaded machine).
    Image.init()
    sio.read_image(_WARM_UP_PNG)

    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            raw, fds, _, _ = socket.recv_fds(sock, protocol.MAX_MESSAGE, protocol.MAX_FDS)
        except OSError:
            return 0
        if not raw:
            return 0  # the server closed its end
        job = protocol.JobMessage.decode(raw)
        try:
            with mmap.mmap(fds[0], job.size, prot=mmap.PROT_READ) as m:
                data = bytes(m)
        finally:
            for fd in fds:
                os.close(fd)
        # The kernel's CPU deadline for this job: what this process has used so far plus the job's
        # allowance. Soft limit only (the hard one stays open so the next job can move it).
        start = _cpu_used()
        soft = int(start + job.cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
        result, out_fds = serve_one(job, data)
        del data
        retire = _rss_bytes() > protocol.RETIRE_RSS_BYTES
        reply = protocol.Reply(result, cpu_s=_cpu_used() - start, retire=retire)
        try:
            socket.send_fds(sock, [reply.encode()], out_fds)
        finally:
            for fd in out_fds:
                os.close(fd)
        if reply.retire:
            return 0

if __name__ == "__main__":
    sys.exit(child_main())
