"""Python face of the C library in csrc/ (the cffi module ``pyprores._native``).

A :class:`Session` decodes ProRes packets with FFmpeg's software decoder
(``backend="software"``) or with the ProRes Vulkan hwaccel
(``backend="vulkan"``; never a silent software fallback), into uint16 numpy
planes of the visible size. :func:`inspect` reads a packet's frame and
picture headers, as FFmpeg 7.1.5's ``proresdec.c`` does, without decoding.

The extension comes from the selected FFmpeg build (:mod:`pyprores.builds`:
``PYPRORES_BUILD`` / ``pyprores --build NAME``), by default the one compiled
into the package against ``build/ffmpeg``.

The slice submission calls (:meth:`Session.begin_frame`,
:meth:`Session.submit_slice`, :meth:`Session.end_frame`) rebuild a packet
slice by slice, to decode one slice in isolation or a corrupted slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Self, Union

import numpy as np

from .. import builds
from ..errors import DecodeError, DeviceError, NativeLibraryError, NotProResError, PyproresError
from ..model import PLANE_NAMES, Frame, FrameInfo, PictureInfo, SliceInfo

try:
    ffi, lib = builds.load_native()
except ImportError as _e:  # pragma: no cover - depends on the build
    ffi = lib = None
    _IMPORT_ERROR: ImportError | None = _e
else:
    _IMPORT_ERROR = None

__all__ = ["Session", "StreamFrame", "FileReader", "FileInfo", "UnreadableFileError", "inspect",
           "has_hwaccel", "ffmpeg_version", "avcodec_version", "codec_tag_int", "available",
           "build_info"]

CodecTag = Union[str, bytes, int]
Buffer = Union[bytes, bytearray, memoryview, np.ndarray]

_FIELDS = {0: "frame", 1: "top", 2: "bottom"}
_NOPTS = -0x8000000000000000   # AV_NOPTS_VALUE


@dataclass
class StreamFrame:
    """A frame from :meth:`Session.receive_frame`: the frame, and the pts of
    the packet it was decoded from (None when that packet had none)."""

    pts: int | None
    frame: Frame
    #: "progressive", "tt" (top field first) or "bb" (bottom field first), from the decoded frame
    field_order: str = "progressive"


def available() -> bool:
    """True when the compiled extension could be imported."""
    return lib is not None


def _lib() -> Any:
    if lib is None:
        raise NativeLibraryError(
            f"the native extension pyprores._native is not available ({_IMPORT_ERROR}); "
            "run ./scripts/setup to build FFmpeg and the extension (or reinstall the pyprores wheel)")
    return lib


def codec_tag_int(codec_tag: CodecTag) -> int:
    """FFmpeg's integer form (MKTAG, little-endian) of a fourcc such as 'apch'."""
    if isinstance(codec_tag, (int, np.integer)):
        tag = int(codec_tag)
        if not 0 <= tag <= 0xFFFFFFFF:
            raise ValueError(f"codec tag {tag} out of range")
        return tag
    if isinstance(codec_tag, str):
        codec_tag = codec_tag.encode("latin-1")
    if isinstance(codec_tag, (bytes, bytearray)) and len(codec_tag) == 4:
        return int.from_bytes(codec_tag, "little")
    raise ValueError(f"codec tag must be a 4-character code like 'apch' or an int, "
                     f"not {codec_tag!r}")


def _message(session_ptr: Any = None) -> str:
    msg = _lib().ppr_last_error(session_ptr if session_ptr is not None else ffi.NULL)
    return ffi.string(msg).decode("utf-8", "replace") if msg != ffi.NULL else ""


class UnreadableFileError(NotProResError):
    """This build's demuxers cannot read the file (``PPR_EFORMAT``): not a
    container it knows, or a damaged one. :class:`pyprores.decode.stream.StreamDecoder`
    then reads it with PyAV, which says why when it cannot either."""


def _raise(code: int, session_ptr: Any = None, message: str | None = None) -> None:
    """The exception for a ppr_* error code, with `message` (from a thread of the library's
    own), else the session's last error, else the code's own text."""
    L = _lib()
    text = (message or _message(session_ptr)
            or ffi.string(L.ppr_strerror(code)).decode("utf-8", "replace"))
    if code == L.PPR_EFORMAT:
        raise UnreadableFileError(text)
    if code == L.PPR_ENOFILE:
        raise PyproresError(text)
    if code == L.PPR_ENOTPRORES:
        raise NotProResError(text)
    if code in (L.PPR_ETRUNCATED, L.PPR_EDECODE):
        raise DecodeError(text)
    if code in (L.PPR_ENODEVICE, L.PPR_ENOHWACCEL):
        if code == L.PPR_ENODEVICE and "could not create a Vulkan device" in text:
            from ..runtime import vulkan_hint
            text = f"{text}; {vulkan_hint(text)}"
        raise DeviceError(text)
    if code == L.PPR_ENOMEM:
        raise MemoryError(text)
    if code == L.PPR_EINVAL:
        raise ValueError(text)
    raise DecodeError(f"{text} (error {code})")


def _buffer(packet: Buffer) -> tuple[Any, int]:
    view = memoryview(packet)
    if not view.contiguous:
        view = memoryview(bytes(view))
    return ffi.from_buffer("uint8_t[]", view), view.nbytes


def _frame_info(c: Any) -> FrameInfo:
    pictures = []
    for p in range(c.picture_count):
        cp = c.pictures[p]
        slices = tuple(
            SliceInfo(index=s.index, mb_x=s.mb_x, mb_y=s.mb_y, mb_count=s.mb_count,
                      offset=int(s.offset), size=int(s.size), qscale=s.qscale)
            for s in (cp.slices[i] for i in range(cp.slice_count)))
        pictures.append(PictureInfo(
            field=_FIELDS.get(cp.field, "frame"), offset=int(cp.offset), size=int(cp.size),
            log2_slice_mb_width=cp.log2_slice_mb_width, mb_width=cp.mb_width,
            mb_height=cp.mb_height, slices=slices))
    return FrameInfo(
        width=c.width, height=c.height, chroma_format=str(c.chroma_format),
        bit_depth=c.bit_depth, pix_fmt=ffi.string(c.pix_fmt).decode("ascii"),
        alpha_info=c.alpha_info, interlace_mode=c.interlace_mode, pictures=tuple(pictures))


def inspect(packet: Buffer, codec_tag: CodecTag = "apch") -> FrameInfo:
    """Frame and picture headers of one ProRes packet (no decoding).

    Raises NotProResError (no 'icpf' signature), DecodeError (truncated or
    invalid headers, as FFmpeg's decoder would reject them)."""
    L = _lib()
    data, size = _buffer(packet)
    info = ffi.new("ppr_frame_info *")
    rc = L.ppr_inspect(data, size, codec_tag_int(codec_tag), info)
    if rc < 0:
        _raise(rc)
    try:
        return _frame_info(info)
    finally:
        L.ppr_frame_info_free(info)


def has_hwaccel(backend: str = "vulkan") -> bool:
    """True when this FFmpeg build's ProRes decoder supports ``backend``."""
    return bool(_lib().ppr_has_hwaccel(backend.encode()))


def ffmpeg_version() -> str:
    """Version string of the FFmpeg libraries the extension loaded."""
    return ffi.string(_lib().ppr_ffmpeg_version()).decode()


def avcodec_version() -> int:
    """LIBAVCODEC_VERSION_INT of the libavcodec loaded (major << 16 | minor << 8 | micro)."""
    return int(_lib().ppr_avcodec_version())


def build_info() -> dict:
    """Which FFmpeg build this process decodes with: name, directory, version,
    libavcodec version, patch series (see :func:`pyprores.builds.describe`)."""
    import sys
    return builds.describe(sys.modules[__name__])


def set_log_level(level: int) -> None:
    """Print FFmpeg's log lines up to ``level`` (AV_LOG_*: 16 error, 32 info,
    48 debug) to stderr; -8 (the default) prints nothing."""
    _lib().ppr_set_log_level(int(level))


class Closeable:
    """close() when a ``with`` block is left and when the object is collected (where an
    error can no longer reach anyone, so it is dropped). Subclasses define close(), which
    must be idempotent."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class FileInfo:
    """The ProRes stream of a file, as :class:`FileReader` found it."""

    stream_index: int
    width: int
    height: int
    codec_tag: str              # e.g. "apch"
    frames: int | None          # packets the container lists (None: it does not say)
    time_base: Fraction         # 0 when the container gives none
    #: "progressive", "tt", "bb", "tb", "bt": the container's, else the first frame header's
    field_order: str
    pix_fmt: str | None         # of the first frame header (None: no frame)


_FIELD_ORDERS = {0: "unknown", 1: "progressive", 2: "tt", 3: "bb", 4: "tb", 5: "bt"}


class FileReader(Closeable):
    """A file's ProRes packets, read by this build's libavformat on a thread of
    the C library's own (``ppr_reader``, no GIL), up to ``depth`` packets ahead.

    The constructor returns at once (the thread opens the file meanwhile);
    :meth:`info` waits for the open and raises its error: PyproresError (no
    such file), :class:`UnreadableFileError` (a container this build does not
    read), NotProResError (no ProRes video stream). :meth:`next` gives the
    next packet as a ``ppr_packet *`` (freed when collected, or at once with
    ``ffi.release``), None at the end, or raises the file's DecodeError (a
    truncated or unreadable file) after the packets before it. Use from one
    thread at a time; :meth:`close` ends the thread."""

    def __init__(self, path: str, depth: int = 4) -> None:
        L = _lib()
        self._ptr: Any = None
        self.path = path
        out = ffi.new("ppr_reader **")
        rc = L.ppr_reader_open(out, path.encode(), int(depth))
        if rc < 0:
            _raise(rc)
        self._ptr = out[0]
        self._out = ffi.new("ppr_packet **")
        self._info: FileInfo | None = None

    def _live(self) -> Any:
        if self._ptr is None:
            raise ValueError("the reader is closed")
        return self._ptr

    def info(self) -> FileInfo:
        """The stream's facts, once the file is open (waits for it)."""
        if self._info is None:
            L = _lib()
            c = ffi.new("ppr_file_info *")
            rc = L.ppr_reader_info(self._live(), c)
            if rc < 0:
                _raise(rc)
            self._info = FileInfo(
                stream_index=int(c.stream_index), width=int(c.width), height=int(c.height),
                codec_tag=ffi.string(c.tag).decode("latin-1"), frames=int(c.frames) or None,
                time_base=Fraction(int(c.time_base_num), int(c.time_base_den))
                if c.time_base_den > 0 else Fraction(0),
                field_order=_FIELD_ORDERS.get(int(c.field_order), "unknown"),
                pix_fmt=ffi.string(c.pix_fmt).decode("ascii") or None)
        return self._info

    def next(self) -> Any:
        """The next packet (a ``ppr_packet *``), or None at the end of the stream."""
        L = _lib()
        rc = L.ppr_reader_next(self._live(), self._out)   # the GIL released while it waits
        if rc == 1:
            return ffi.gc(self._out[0], L.ppr_packet_free)
        if rc == 0:
            return None
        _raise(rc)

    def close(self) -> None:
        """Stop the thread and free the packets read ahead. Idempotent."""
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            _lib().ppr_reader_close(ptr)


class Session(Closeable):
    """A decoder on one backend: ``"vulkan"`` (the ProRes Vulkan hwaccel) or
    ``"software"`` (FFmpeg's C decoder). Use it from one thread at a time.

    ``device`` (vulkan only): None for FFmpeg's default, an index such as
    ``"0"``, or a substring of the device name. ``threads``: software slice
    threads, 0 = automatic. With ``PYPRORES_VALIDATION=1`` in the environment
    the Vulkan device runs under the Khronos validation layer and its
    messages are collected in :attr:`validation_messages`.

    Raises DeviceError when no Vulkan device can be created or when the
    FFmpeg build has no ProRes Vulkan hwaccel. ``require_hwaccel=False``
    opens the Vulkan device anyway (for its name or validation checks);
    decoding then raises DeviceError, never falling back to software.
    """

    def __init__(self, backend: str = "vulkan", device: str | int | None = None,
                 threads: int = 0, *, require_hwaccel: bool = True) -> None:
        L = _lib()
        self._ptr: Any = None
        self._frame_info: FrameInfo | None = None
        self.backend = backend
        #: the device asked for (None: FFmpeg's default), and the software slice threads
        self.device = None if device is None else str(device)
        self.threads = int(threads)
        if backend not in ("vulkan", "software"):
            raise ValueError(f"backend must be 'vulkan' or 'software', not {backend!r}")
        out = ffi.new("ppr_session **")
        dev = ffi.NULL if device is None else str(device).encode()
        flags = 0 if require_hwaccel else L.PPR_OPEN_NO_HWACCEL_CHECK
        rc = L.ppr_open_ex(out, backend.encode(), dev, int(threads), flags)
        if rc < 0:
            _raise(rc)
        self._ptr = out[0]

    # -- properties -------------------------------------------------------
    def _live(self) -> Any:
        if self._ptr is None:
            raise ValueError("the session is closed")
        return self._ptr

    @property
    def device_name(self) -> str:
        """The Vulkan device in use, or "cpu" for the software backend."""
        return ffi.string(_lib().ppr_device_name(self._live())).decode("utf-8", "replace")

    @property
    def device_sessions(self) -> int:
        """Open Vulkan sessions sharing this session's Vulkan device (sessions
        with the same device and validation setting share one); 0 for software."""
        return int(_lib().ppr_device_sessions(self._live()))

    @property
    def validation_enabled(self) -> bool:
        return bool(_lib().ppr_validation_enabled(self._live()))

    @property
    def note(self) -> str:
        """How the device was set up where the caller should know, else "": with
        FFmpeg 9 on a device whose transfers use VK_EXT_host_image_copy, a
        validation layer older than that extension crashes, so the device is
        created without it (validation is then off for this session)."""
        return ffi.string(_lib().ppr_session_note(self._live())).decode("utf-8", "replace")

    @property
    def validation_count(self) -> int:
        """Number of validation-layer messages seen (all of them)."""
        return int(_lib().ppr_validation_messages(self._live()))

    @property
    def validation_messages(self) -> list[str]:
        """Validation-layer messages seen on this session's Vulkan device
        (the first 1000 are kept); empty when validation is off."""
        L = _lib()
        out = []
        i = 0
        while True:
            m = L.ppr_validation_message(self._live(), i)
            if m == ffi.NULL:
                break
            out.append(ffi.string(m).decode("utf-8", "replace"))
            i += 1
        return out

    # -- inspection and decoding -------------------------------------------
    def inspect(self, packet: Buffer, codec_tag: CodecTag = "apch") -> FrameInfo:
        """Same as the module-level :func:`inspect`."""
        return inspect(packet, codec_tag)

    def _planes(self, c_info: Any) -> tuple[Any, dict[str, np.ndarray], list[Any]]:
        L = _lib()
        planes = ffi.new("ppr_planes *")
        rc = L.ppr_frame_layout(c_info, planes)
        if rc < 0:
            _raise(rc)
        arrays: dict[str, np.ndarray] = {}
        keep = []
        for i in range(planes.count):
            p = planes.plane[i]
            arr = np.empty((p.height, p.width), np.uint16)
            buf = ffi.from_buffer("uint16_t[]", arr, require_writable=True)
            keep.append(buf)
            p.data = buf
            p.stride = arr.strides[0]
            arrays[PLANE_NAMES[i]] = arr
        return planes, arrays, keep

    def _frame(self, planes: Any, arrays: dict[str, np.ndarray], pix_fmt: str,
               bit_depth: int) -> Frame:
        return Frame(planes=arrays, pix_fmt=pix_fmt, bit_depth=bit_depth,
                     corrupt=bool(planes.corrupt), extra={"backend": self.backend},
                     error_flags=int(planes.error_flags),
                     concealed=self.concealed_slices(int(planes.concealed)))

    def concealed_slices(self, count: int | None = None) -> tuple[tuple[int, int], ...]:
        """(picture, slice index) of each slice the last decode concealed: on
        the software backend the slices it left unwritten, on the Vulkan
        backend those the hwaccel reported (7.1.5 series patch 19, 9.0.2
        series patch 12)."""
        L = _lib()
        ptr = self._live()
        n = L.ppr_concealed_slices(ptr, ffi.NULL, ffi.NULL, 0) if count is None else count
        if n <= 0:
            return ()
        pics, slices = ffi.new("int[]", n), ffi.new("int[]", n)
        n = min(n, L.ppr_concealed_slices(ptr, pics, slices, n))
        return tuple((pics[i], slices[i]) for i in range(n))

    def decode(self, packet: Buffer, codec_tag: CodecTag = "apch") -> Frame:
        """Decode one packet into a :class:`Frame` (planes Y, Cb, Cr[, A]).

        Raises NotProResError, DecodeError (FFmpeg produced no frame),
        DeviceError (the hwaccel is missing or failed)."""
        L = _lib()
        ptr = self._live()
        data, size = _buffer(packet)
        tag = codec_tag_int(codec_tag)
        c_info = ffi.new("ppr_frame_info *")
        rc = L.ppr_inspect_header(data, size, tag, c_info)
        if rc < 0:
            _raise(rc)
        if self.backend == "software":
            # ppr_decode refuses whatever ppr_inspect refuses: do it before the
            # planes are allocated, so that a header claiming a huge frame in a
            # packet that cannot hold its slice index costs no memory here.
            inspect(packet, tag)
        planes, arrays, keep = self._planes(c_info)
        rc = L.ppr_decode(ptr, data, size, tag, planes)
        del keep
        if rc < 0:
            _raise(rc, ptr)
        return self._frame(planes, arrays, ffi.string(c_info.pix_fmt).decode("ascii"),
                           c_info.bit_depth)

    # -- slice submission ---------------------------------------------------
    def begin_frame(self, packet: Buffer, codec_tag: CodecTag = "apch") -> FrameInfo:
        """Start rebuilding ``packet`` slice by slice; returns its FrameInfo.

        Every slice must then be submitted (see :meth:`submit_slice`): a
        slice left out gets a zero-size index entry, which FFmpeg's decoder
        treats as a malformed picture (the whole frame fails)."""
        L = _lib()
        ptr = self._live()
        data, size = _buffer(packet)
        rc = L.ppr_frame_begin(ptr, data, size, codec_tag_int(codec_tag))
        if rc < 0:
            self._frame_info = None
            _raise(rc, ptr)
        self._frame_info = _frame_info(L.ppr_frame_current(ptr))
        return self._frame_info

    def submit_slice(self, picture: int, index: int, data: Buffer) -> None:
        """Set the bytes of slice ``index`` of picture ``picture`` (0, or 1
        for the second field): original, replaced or corrupted, 0..65535 bytes."""
        L = _lib()
        ptr = self._live()
        buf, size = _buffer(data)
        rc = L.ppr_frame_submit_slice(ptr, int(picture), int(index), buf, size)
        if rc < 0:
            _raise(rc, ptr)

    def end_frame(self) -> Frame:
        """Decode the rebuilt packet and end the frame (also on failure)."""
        L = _lib()
        ptr = self._live()
        c_info = L.ppr_frame_current(ptr)
        if c_info == ffi.NULL:
            raise ValueError("no frame begun: call begin_frame first")
        planes, arrays, keep = self._planes(c_info)
        pix_fmt = ffi.string(c_info.pix_fmt).decode("ascii")
        bit_depth = c_info.bit_depth
        self._frame_info = None
        rc = L.ppr_frame_end(ptr, planes)
        del keep
        if rc < 0:
            _raise(rc, ptr)
        return self._frame(planes, arrays, pix_fmt, bit_depth)

    # -- streaming: several frames in flight -----------------------------------
    # ppr_stream_config/ppr_send_packet/ppr_receive_frame/ppr_download_frame
    # (csrc/pyprores.h, "streaming"). pyprores.decode.stream.StreamDecoder builds a
    # file iterator with caller buffers on the same calls; these give one
    # frame at a time in new arrays (pyprores.decode.pipeline uses them). Streaming
    # and decode()/end_frame() on one session exclude each other: decode()
    # drops the frames in flight (call stream_reset() or receive them first).

    def stream_config(self, max_in_flight: int = 4, err_detect: bool = True) -> None:
        """Set up streaming before the first :meth:`send_packet` (or after
        :meth:`stream_reset`): ``max_in_flight`` Vulkan frame threads (1-64),
        ``err_detect`` to have damaged frames flagged (7.1.5 series patch 19,
        9.0.2 series patch 12; the
        one-call :meth:`decode` always asks for it)."""
        L = _lib()
        ptr = self._live()
        flags = L.PPR_STREAM_ERR_DETECT if err_detect else 0
        rc = L.ppr_stream_config(ptr, int(max_in_flight), flags)
        if rc < 0:
            _raise(rc, ptr)

    def send_packet(self, packet: Buffer | None, codec_tag: CodecTag = "apch",
                    pts: int | None = None) -> bool:
        """Send one packet (copied) with its ``pts``; ``None`` ends the stream
        (then :meth:`receive_frame` until it gives None). False: the decoder
        is full, or drains its frames before a size or format change:
        receive a frame, then send the same packet again. Raises as
        :meth:`decode`."""
        L = _lib()
        ptr = self._live()
        if packet is None:
            rc = L.ppr_send_packet(ptr, ffi.NULL, 0, 0, _NOPTS)
        else:
            data, size = _buffer(packet)
            rc = L.ppr_send_packet(ptr, data, size, codec_tag_int(codec_tag),
                                   _NOPTS if pts is None else int(pts))
            del data
        if rc == L.PPR_EAGAIN:
            return False
        if rc < 0:
            _raise(rc, ptr)
        return True

    def receive_frame(self) -> StreamFrame | None:
        """The next frame in decoding order, downloaded into new arrays, or
        None when there is none now (before the end of the stream: send more
        packets; after it: every frame was received). Raises DecodeError when
        the decoder rejected a packet, DeviceError when the hwaccel failed."""
        L = _lib()
        ptr = self._live()
        c = ffi.new("ppr_stream_frame *")
        rc = L.ppr_receive_frame(ptr, c)
        if rc in (L.PPR_RECV_AGAIN, L.PPR_RECV_EOF):
            return None
        if rc < 0:
            _raise(rc, ptr)
        planes = ffi.new("ppr_planes *")
        planes.count = c.layout.count
        arrays: dict[str, np.ndarray] = {}
        keep = []
        for i in range(c.layout.count):
            arr = np.empty((c.layout.plane[i].height, c.layout.plane[i].width), np.uint16)
            buf = ffi.from_buffer("uint16_t[]", arr, require_writable=True)
            keep.append(buf)
            p = planes.plane[i]
            p.width, p.height = arr.shape[1], arr.shape[0]
            p.data = buf
            p.stride = arr.strides[0]
            arrays[PLANE_NAMES[i]] = arr
        rc = L.ppr_download_frame(ptr, planes)
        del keep
        if rc < 0:
            _raise(rc, ptr)
        frame = self._frame(planes, arrays, ffi.string(c.pix_fmt).decode("ascii"), int(c.bit_depth))
        if self.backend == "vulkan" and frame.corrupt:
            # the hwaccel's per-slice reports cannot be told apart between the
            # frames in flight: which slices it concealed is not known here
            frame.concealed = None
        order = ("tt" if c.top_field_first else "bb") if c.interlaced else "progressive"
        return StreamFrame(pts=None if c.pts == _NOPTS else int(c.pts), frame=frame, field_order=order)

    def stream_reset(self) -> None:
        """Drop the frames in flight and end the streaming decoder's threads;
        the session stays open. Idempotent."""
        if self._ptr is not None:
            _lib().ppr_stream_reset(self._ptr)

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Release the decoder and the device. Idempotent."""
        if self._ptr is not None:
            _lib().ppr_close(self._ptr)
            self._ptr = None

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"<pyprores.decode.native.Session {self.backend} closed>"
        return f"<pyprores.decode.native.Session {self.backend} on {self.device_name!r}>"
