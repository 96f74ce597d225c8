"""Where the decoder under test comes from.

The real candidate is ``pyprores.decode.native.Session`` (FFmpeg's Vulkan hwaccel,
or its software path).  :class:`PyAVSession` offers the same interface on top
of PyAV's software decoder plus :mod:`pyprores.bitstream`, so the comparison
pipeline can be exercised — and its tests run — without the native
extension; its ``perturb`` hook fakes a faulty decoder.
"""

from __future__ import annotations

from typing import Callable

import av

from ..bitstream import parse_frame
from .demux import decode_reference
from ..errors import NativeLibraryError
from ..model import Frame, FrameInfo

BACKENDS = ("vulkan", "software")


def open_session(backend: str = "vulkan", device: str | None = None, threads: int = 0):
    """A ``pyprores.decode.native.Session``; ``NativeLibraryError`` when the
    extension is not built, so the CLI can say so in one line."""
    native = load_native()
    return native.Session(backend=backend, device=device, threads=threads)


def load_native():
    """``pyprores.decode.native`` with its compiled part loaded, or a
    ``NativeLibraryError`` that says how to build it."""
    hint = "build it with ./scripts/setup (the patched FFmpeg plus the cffi extension)"
    try:
        from . import native
    except ImportError as e:
        raise NativeLibraryError(f"the native extension is not available ({e}); {hint}") from e
    if not native.available():   # native.py imports even when _native is not built
        reason = getattr(native, "_IMPORT_ERROR", None) or "pyprores._native is not built"
        raise NativeLibraryError(f"the native extension is not available ({reason}); {hint}")
    return native


class PyAVSession:
    """Stand-in for ``native.Session`` backed by FFmpeg's software decoder.

    ``perturb(frame_index, frame) -> Frame`` may alter each decoded frame,
    to give tests a candidate that deviates in a known way.
    """

    def __init__(self, backend: str = "software", device: str | None = None, threads: int = 0,
                 perturb: Callable[[int, Frame], Frame] | None = None) -> None:
        self.backend = backend
        self.device_name = "PyAV software decoder"
        self.validation_messages: list[str] = []
        self._threads = threads
        self._perturb = perturb
        self._decoder: av.CodecContext | None = None
        self._tag: str | None = None
        self._count = 0

    def inspect(self, packet: bytes, codec_tag: str) -> FrameInfo:
        return parse_frame(packet, codec_tag)

    def decode(self, packet: bytes, codec_tag: str) -> Frame:
        if self._decoder is None or self._tag != codec_tag:
            self._decoder = av.CodecContext.create("prores", "r")
            self._decoder.codec_tag = codec_tag
            self._decoder.thread_type = "SLICE"
            self._decoder.thread_count = self._threads
            self._tag = codec_tag
        frame = decode_reference(self._decoder, packet, self._count)
        if self._perturb is not None:
            frame = self._perturb(self._count, frame)
        self._count += 1
        return frame

    def close(self) -> None:
        self._decoder = None

    def __enter__(self) -> "PyAVSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
