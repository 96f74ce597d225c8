"""Reading ProRes packets and reference frames from a file with PyAV.

The reference for every comparison is FFmpeg's own software decoder, reached
through PyAV so that packets and reference frames come from one demuxer pass
and cannot drift apart.  Errors a user can act on (missing file, not ProRes,
a file that ends early) become :mod:`pyprores.errors` exceptions with a
message that says what to do.
"""

from __future__ import annotations

import builtins
import os
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

import av
import numpy as np

from ..errors import DecodeError, NotProResError, PyproresError
from ..model import PLANE_NAMES, Frame

#: FFmpeg's AVFieldOrder values, by name
FIELD_ORDERS = {0: "unknown", 1: "progressive", 2: "tt", 3: "bb", 4: "tb", 5: "bt"}

#: first-atom names that mark a QuickTime/MP4 file, to tell "damaged" from "not media"
_QT_ATOMS = {b"ftyp", b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot", b"uuid"}


@dataclass(frozen=True)
class StreamInfo:
    """Facts about the ProRes stream that a report or a decoder needs."""

    path: str
    index: int
    width: int
    height: int
    frames: int | None       # None when the container does not say
    codec_tag: str           # e.g. "apch"; the native decoder needs it for the bit depth
    profile: str | None      # e.g. "HQ", "4444"
    pix_fmt: str | None      # what FFmpeg's software decoder outputs
    field_order: str         # one of FIELD_ORDERS' names
    time_base: Fraction


class ProResSource:
    """One opened file: stream facts, packets, and reference frames.

    Use as a context manager, or call :meth:`close`.  Each iteration method
    starts from the beginning of the file.
    """

    def __init__(self, path: str | os.PathLike, threads: int = 0) -> None:
        self.path = os.fspath(path)
        self._container = _open_container(self.path)
        video = [s for s in self._container.streams if s.type == "video"]
        stream = next((s for s in video if s.codec_context.name == "prores"), None)
        if stream is None:
            found = ", ".join(s.codec_context.name for s in self._container.streams if s.codec_context) \
                or "no streams"
            self._container.close()
            raise NotProResError(f"{self.path} has no ProRes video stream (found: {found})")
        self._stream = stream
        self._threads = threads
        cc = stream.codec_context
        tag = cc.codec_tag or ""
        self.info = StreamInfo(
            path=self.path, index=stream.index, width=cc.width, height=cc.height,
            frames=stream.frames or None, codec_tag=tag, profile=cc.profile or None,
            pix_fmt=cc.pix_fmt, field_order=self._field_order(),
            time_base=Fraction(stream.time_base) if stream.time_base else Fraction(0))

    def _field_order(self) -> str:
        """The container's field order; PyAV < 16 does not expose it, so then
        the first frame header's interlace mode answers instead."""
        order = getattr(self._stream.codec_context, "field_order", None)
        if order is not None:
            return FIELD_ORDERS.get(int(order), "unknown")
        try:
            first = next((bytes(p) for p in self._container.demux(self._stream) if p.size), b"")
            self._container.seek(0, stream=self._stream)
        except av.error.FFmpegError:
            return "unknown"
        if len(first) < 21 or first[4:8] != b"icpf":
            return "unknown"
        return {0: "progressive", 1: "tt"}.get((first[20] >> 2) & 3, "bb")

    # -- iteration ----------------------------------------------------------

    def packets(self) -> Iterator[bytes]:
        """Every non-empty packet of the stream, as ``bytes``.

        A packet shorter than the frame size written in its first four bytes
        means the file was cut off; that raises ``DecodeError`` instead of
        handing a decoder half a frame.
        """
        for data, _ in self.timed_packets():
            yield data

    def timed_packets(self) -> Iterator[tuple[bytes, int | None]]:
        """(packet, pts in the stream's time base or None), as :meth:`packets`."""
        if self._started:       # a second pass: rewind
            self._container.seek(0, stream=self._stream)
        self._started = True
        count = 0
        try:
            for pkt in self._container.demux(self._stream):
                if pkt.size == 0:
                    continue
                data = bytes(pkt)
                _check_complete(data, count, self.path)
                count += 1
                yield data, pkt.pts
        except av.error.FFmpegError as e:
            raise DecodeError(f"{self.path}: reading stopped after {count} frame(s): {e}; "
                              "the file is damaged or incomplete — re-copy or re-export it, "
                              f"or compare only the first {count} frame(s) with --frames {count}") from e
        if self.info.frames and count < self.info.frames:
            raise DecodeError(f"{self.path} ends early: the container lists {self.info.frames} frames "
                              f"but only {count} could be read; re-copy the file, or compare only "
                              f"the readable part with --frames {count}")

    _started = False

    def reference_frames(self) -> Iterator[Frame]:
        """FFmpeg software decodes of every packet, in order."""
        for _, frame in self.pairs():
            yield frame

    def pairs(self) -> Iterator[tuple[bytes, Frame]]:
        """(packet, reference frame) for every packet: ProRes is intra-only,
        so one packet is exactly one frame and the two stay in step."""
        decoder = av.CodecContext.create("prores", "r")
        decoder.width, decoder.height = self.info.width, self.info.height
        if self.info.codec_tag:
            decoder.codec_tag = self.info.codec_tag   # selects 10- or 12-bit output
        decoder.thread_type = "SLICE"                 # no frame delay: one packet in, one frame out
        decoder.thread_count = self._threads
        for n, data in enumerate(self.packets()):
            yield data, decode_reference(decoder, data, n, self.path)

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> "ProResSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(path: str | os.PathLike, threads: int = 0) -> ProResSource:  # noqa: A001 - mirrors av.open
    """Open ``path`` and find its ProRes stream (see :class:`ProResSource`)."""
    return ProResSource(path, threads)


def decode_reference(decoder: av.CodecContext, data: bytes, n: int, path: str = "") -> Frame:
    """Decode one packet with PyAV's software decoder into a :class:`Frame`."""
    try:
        frames = decoder.decode(av.Packet(data))
    except av.error.FFmpegError as e:
        raise DecodeError(f"{path}: FFmpeg's software decoder rejects frame {n}: {e}; "
                          f"the frame is damaged — compare the frames before it with --frames {n}") from e
    if len(frames) != 1:
        raise DecodeError(f"{path}: frame {n} decoded to {len(frames)} pictures instead of 1")
    return frame_from_av(frames[0])


def frame_from_av(frame: av.VideoFrame) -> Frame:
    """Copy a PyAV frame's planes into uint16 arrays of the visible size.

    Planes carry line padding (``line_size`` may exceed the visible width),
    so each plane is viewed through its buffer with the real stride and then
    cropped; ``to_ndarray`` would not expose alpha of planar YUV formats.
    """
    fmt = frame.format
    bits = fmt.components[0].bits
    if bits <= 8 or not fmt.name.endswith("le"):
        raise DecodeError(f"unexpected decoder output format {fmt.name}")
    names = PLANE_NAMES if len(frame.planes) == 4 else PLANE_NAMES[:3]
    planes = {}
    for name, plane in zip(names, frame.planes):
        stride = plane.line_size // 2
        rows = np.frombuffer(plane, dtype="<u2", count=stride * plane.height)
        planes[name] = rows.reshape(plane.height, stride)[:, :plane.width].astype(np.uint16, copy=True)
    return Frame(planes=planes, pix_fmt=fmt.name, bit_depth=bits, corrupt=bool(frame.is_corrupt))


def _open_container(path: str) -> "av.container.InputContainer":
    """``av.open`` with its failures turned into messages a user can act on."""
    if not os.path.exists(path):
        raise PyproresError(f"{path}: no such file")
    if os.path.isdir(path):
        raise PyproresError(f"{path} is a directory, not a video file")
    try:
        return av.open(path)
    except av.error.FFmpegError as e:
        with builtins.open(path, "rb") as f:
            head = f.read(8)
        if os.path.getsize(path) == 0:
            raise NotProResError(f"{path} is empty") from e
        if head[4:8] in _QT_ATOMS:
            raise DecodeError(f"{path} looks like a QuickTime file but cannot be read ({e.strerror}); "
                              "it is probably incomplete — a copy or export that stopped early "
                              "leaves out the index ('moov' atom). Re-copy or re-export it") from e
        raise NotProResError(f"{path} is not a video file FFmpeg can read ({e.strerror})") from e


def _check_complete(data: bytes, n: int, path: str) -> None:
    """Raise ``DecodeError`` when a packet is shorter than its own frame size."""
    if len(data) >= 8 and data[4:8] == b"icpf":
        size = struct.unpack_from(">I", data)[0]
        if len(data) < size:
            raise DecodeError(f"{path} ends early: frame {n} has {len(data)} of its {size} bytes; "
                              f"re-copy the file, or compare the complete frames with --frames {n}")

