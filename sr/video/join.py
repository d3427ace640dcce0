"""The segments joined in order into the output, with the input's audio and subtitle packets copied
(no re-encoding), its container metadata and the video's rotation: written under a temporary name and
renamed, so the output either is whole or is not there.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

from .probe import VideoInfo

COPIED = ("audio", "subtitle")


def _rescale(packet: object, tb: Fraction) -> None:
    """The packet's times in ``tb``: the MP4 muxer stores a coarse time base finer (1/1000, as from
    MKV or WebM, becomes 1/16000), while the shifts count in the input's."""
    ratio = packet.time_base / tb
    if ratio == 1:
        return
    for name in ("pts", "dts", "duration"):
        v = getattr(packet, name)
        if v is not None:
            setattr(packet, name, round(v * ratio))
    packet.time_base = tb


def _segment_packets(segments: list[Path], out_stream: object, shifts: list[int],
                     tb: Fraction) -> Iterator[tuple]:
    """Each segment's packets in ``tb``, its timestamps moved by ``shifts[n]`` (segments count from 0)."""
    import av

    for n, (seg, shift) in enumerate(zip(segments, shifts, strict=True)):
        with av.open(str(seg)) as container:
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                _rescale(packet, tb)
                t = ((packet.dts if packet.dts is not None else packet.pts) - shift) * packet.time_base
                yield t, 0, n, packet, out_stream, shift


def _input_packets(path: Path, copied: dict[int, tuple[object, int]], t0: Fraction,
                   t1: Fraction | None) -> Iterator[tuple]:
    """The copied streams' packets presented between t0 and t1 seconds."""
    import av

    if not copied:
        return
    with av.open(str(path)) as container:
        streams = [s for s in container.streams if s.index in copied]
        for n, packet in enumerate(container.demux(streams)):
            if packet.size == 0 or (packet.dts is None and packet.pts is None):
                continue
            shown = (packet.pts if packet.pts is not None else packet.dts) * packet.time_base
            if (t0 > 0 and shown < t0) or (t1 is not None and shown >= t1):  # whole clip: every packet
                continue
            t = (packet.dts if packet.dts is not None else packet.pts) * packet.time_base
            out_stream, shift = copied[packet.stream.index]
            yield t, 1, n, packet, out_stream, shift


def join(info: VideoInfo, segments: list[Path], starts: list[int], dest: Path, a: int, b: int) -> None:
    """Mux ``segments`` (frames a..b-1 of ``info``, each from frame ``starts[n]``) and the input's
    other streams into ``dest``;
    with a:b not the whole clip every stream is shifted to start at frame a's time."""
    import av

    tb = info.time_base
    t0 = info.pts[a] * tb if a > 0 else Fraction(0)
    t1 = info.pts[b] * tb if b < info.frames else None
    tmp = dest.with_name(f".{dest.stem}.tmp{dest.suffix}")
    try:
        with av.open(str(info.path)) as src, av.open(str(tmp), "w") as out:
            out.metadata.update(src.metadata)
            with av.open(str(segments[0])) as first:
                # opaque: the stream parameters copied as they are, no encoder looked up by the
                # decoder's name (AV1 decodes with libdav1d, which names no encoder)
                video = out.add_stream_from_template(first.streams.video[0], opaque=True)
            video.time_base = tb
            video.metadata.update(src.streams.video[0].metadata)
            if info.rotation:
                video.set_display_rotation(info.rotation)
            copied: dict[int, tuple[object, int]] = {}
            for s in src.streams:
                if s.type not in COPIED:
                    continue
                try:
                    o = out.add_stream_from_template(s)
                except (ValueError, av.FFmpegError):
                    continue  # a codec this container cannot hold (e.g. some subtitles): dropped
                o.metadata.update(s.metadata)
                copied[s.index] = (o, int(t0 / s.time_base))
            shifts = [int(t0 / tb) - info.pts[s] for s in starts]
            merged = heapq.merge(_segment_packets(segments, video, shifts, tb),
                                 _input_packets(info.path, copied, t0, t1), key=lambda x: x[:3])
            last_dts: dict[int, int] = {}
            for _, _, _, packet, stream, shift in merged:
                if packet.pts is not None:
                    packet.pts -= shift
                if packet.dts is not None:
                    packet.dts -= shift
                    # each segment's encoder starts its decode clock anew: keep DTS rising across joins
                    key = id(stream)
                    if key in last_dts and packet.dts <= last_dts[key]:
                        packet.dts = last_dts[key] + 1
                    last_dts[key] = packet.dts
                packet.stream = stream
                out.mux(packet)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
