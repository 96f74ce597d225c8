"""Streaming decode: iterate a file's (or a packet source's) frames as numpy planes.

    with pyprores.open_decoder("clip.mov", backend="vulkan") as dec:
        for frame in dec:
            y = frame.planes["Y"]          # uint16, visible size
            print(frame.index, frame.pts, frame.field_order, frame.pix_fmt)

Several frames are in flight at once: the Vulkan backend decodes with
``max_in_flight`` FFmpeg frame threads (that many frames decode on the GPU)
while the GPU copies earlier ones straight into the memory the numpy planes
live in (``gpu_download``: mapped host memory of the device's, no copy on the
host, up to 2 copies in flight), the software backend with its slice
threads, one frame at a time. Memory stays bounded by ``max_in_flight``
decoded frames, 2 being copied and the one being handed out, and
``prefetch`` packets read and copied ahead by a thread of its own (the
source is iterated there), so that the packet copy FFmpeg needs is off the
decoding thread.

Leaving the ``with`` block, :meth:`StreamDecoder.close`, breaking out of the
loop and then closing, an exception in the loop body (``KeyboardInterrupt``
included) or an error in the file all stop the decoder: the frames in flight
and the packets prepared ahead are dropped, its threads (the prefetch
and download threads included) end and the Vulkan device is released.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Generator, Iterable, Iterator, Union

import numpy as np

from . import native
from ..errors import DecodeError, DeviceError, PyproresError
from ..model import PLANE_NAMES, Frame

__all__ = ["DecodedFrame", "StreamDecoder", "open_decoder"]

Packet = Union[bytes, bytearray, memoryview]
PacketSource = Iterable[Union[Packet, "tuple[Packet, int | None]"]]

_NOPTS = -0x8000000000000000   # AV_NOPTS_VALUE
# FFmpeg's names of the ProRes profiles, by codec tag (as PyAV's stream info gives them)
_PROFILES = {"apco": "Proxy", "apcs": "LT", "apcn": "Standard", "apch": "HQ", "ap4h": "4444",
             "ap4x": "XQ"}


# Frames in flight by default (FFmpeg frame threads). With error detection the
# thread that receives waits for each frame's GPU work in turn, so the decoder's
# rate grows with the frames in flight: on the H100, 4K 422 HQ to CUDA went at
# 1382 fps with 8 (2026-11-27, bench py-cuda-file), decbench 2981 with 17. Into
# numpy the bus bounds it first (8 as before).
_IN_FLIGHT = 8
_IN_FLIGHT_CUDA = 16
_DEPTH = 2   # frames being downloaded (GPU copies or the thread) and not yet delivered
_SPARE = 3 + _DEPTH   # sets of planes kept for reuse
_ALIGN = 4096   # plane offsets in a host buffer (a copy needs 4; a page is tidy)


def _refcounts(arrays: dict[str, np.ndarray]) -> list[int]:
    return [sys.getrefcount(a) for a in arrays.values()]


# what _refcounts() sees for an array that only its dict holds, on this interpreter
_FREE_REFS = _refcounts({"x": np.empty(1, np.uint16)})[0]


def _shapes(layout: Any) -> dict[str, tuple[int, int]]:
    """The (rows, samples) of each plane of a ppr_planes layout, by plane name."""
    return {PLANE_NAMES[i]: (layout.plane[i].height, layout.plane[i].width) for i in range(layout.count)}


def _unheld(arrays: dict[str, np.ndarray]) -> bool:
    """True when nothing but ``arrays`` refers to its planes (no frame, view or caller)."""
    return all(r == _FREE_REFS for r in _refcounts(arrays))


class _Prefetcher:
    """Reads the packet source in a thread of its own and prepares each packet
    (the padded copy FFmpeg needs, made in C with the GIL released) up to
    ``depth`` packets ahead, so that the decoding thread only hands over ready
    packets. Items come out of :meth:`get` in order: ``(handle, pts)``, then
    None at the end of the source; an exception of the source is raised by
    :meth:`get` after the packets before it. :meth:`stop` ends the thread
    (it finishes the packet it is reading) and frees what was prepared."""

    _END = object()

    def __init__(self, packets: Iterable[Any], depth: int) -> None:
        self._packets = packets
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pyprores-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        L, ffi = native.lib, native.ffi
        item: Any = None
        try:
            for item in self._packets:
                if self._stopping.is_set():
                    return
                data, pts = item if isinstance(item, tuple) else (item, None)
                buf, size = native._buffer(data)
                handle = L.ppr_packet_new(buf, size, _NOPTS if pts is None else int(pts))
                buf = data = item = None
                if handle == ffi.NULL:
                    raise MemoryError(ffi.string(L.ppr_last_error(ffi.NULL)).decode(errors="replace"))
                # freed when collected, or at once by ffi.release
                handle = ffi.gc(handle, L.ppr_packet_free, size=size)
                if not self._put((handle, pts)):
                    ffi.release(handle)
                    return
                handle = None
            self._put(self._END)
        except DecodeError as e:   # truncated or unreadable: delivered after the packets before it
            # a new exception: the demuxer's traceback holds PyAV packets,
            # which must not outlive their container (PyAV crashes then)
            e.__traceback__ = None
            self._put(DecodeError(str(e)))
        except BaseException as e:
            item = None
            self._put(e)
        finally:
            close = getattr(self._packets, "close", None)
            if close is not None:   # a generator ends in the thread that ran it
                close()

    def get(self) -> tuple[Any, int | None] | None:
        """The next prepared packet, None at the end; raises the source's error."""
        item = self._queue.get()
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        """End the thread and free the packets prepared and not taken (idempotent)."""
        self._stopping.set()
        while self._thread.is_alive() or not self._queue.empty():
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(item, tuple):
                native.ffi.release(item[0])
        self._thread.join()


class _FilePackets:
    """A file's packets from its :class:`native.FileReader` (read ahead by the
    C library's thread), as :class:`_Prefetcher` gives a source's: ``get()``
    is ``(handle, None)``, None at the end, or raises the file's error after
    the packets before it; ``stop()`` closes the reader."""

    def __init__(self, reader: native.FileReader) -> None:
        self._reader = reader

    def get(self) -> tuple[Any, None] | None:
        handle = self._reader.next()
        return None if handle is None else (handle, None)

    def stop(self) -> None:
        self._reader.close()


class _Download:
    """One frame handed to the download thread: its handle (``ppr_frame``)
    and the planes it is written to; ``frame`` is delivered once ``done``."""

    __slots__ = ("frame", "handle", "planes", "keep", "error", "done")

    def __init__(self, frame: "DecodedFrame", handle: Any, planes: Any, keep: list) -> None:
        self.frame, self.handle, self.planes, self.keep = frame, handle, planes, keep
        self.error: BaseException | None = None
        self.done = threading.Event()

    def wait(self) -> None:
        self.done.wait()


class _GpuCopy:
    """One frame the GPU is copying into a host buffer (``ppr_download_start``);
    ``frame`` is delivered once :meth:`wait` returns."""

    __slots__ = ("frame", "host", "error")

    def __init__(self, frame: "DecodedFrame", host: "_HostPlanes") -> None:
        self.frame, self.host = frame, host
        self.error: BaseException | None = None

    def wait(self) -> None:
        rc = native.lib.ppr_host_buffer_wait(self.host.handle)   # the GIL released
        self.host = None
        if rc < 0:
            try:   # the message is this thread's (ppr_last_error(NULL))
                native._raise(rc)
            except BaseException as e:
                self.error = e


class _HostPlanes:
    """A set of planes in one host buffer of the session's device
    (``ppr_host_buffer``), which the GPU writes into. The arrays keep the
    buffer alive: it is freed (after any copy into it ends) once neither this
    object nor any array or view of its planes is left."""

    def __init__(self, session_ptr: Any, shapes: dict[str, tuple[int, int]]) -> None:
        L, ffi = native.lib, native.ffi
        offsets, size = {}, 0
        for name, (h, w) in shapes.items():
            offsets[name] = size
            size += -(-(h * w * 2) // _ALIGN) * _ALIGN
        handle = L.ppr_host_buffer_new(session_ptr, size)
        if handle == ffi.NULL:
            native._raise(L.PPR_ENOMEM if "memory" in
                          ffi.string(L.ppr_last_error(session_ptr)).decode(errors="replace")
                          else L.PPR_ENODEVICE, session_ptr)
        self.handle = handle
        # the arrays' base: a cffi buffer over a pointer whose collection frees the buffer
        owner = ffi.gc(ffi.cast("uint8_t *", L.ppr_host_buffer_data(handle)),
                       lambda _p, h=handle: L.ppr_host_buffer_free(h), size=size)
        whole = np.frombuffer(ffi.buffer(owner, size), dtype=np.uint8)
        self.arrays = {name: whole[off:off + h * w * 2].view(np.uint16).reshape(h, w)
                       for (name, (h, w)), off in zip(shapes.items(), offsets.values())}
        self.shapes = shapes
        self.planes = ffi.new("ppr_planes *")
        self.planes.count = len(shapes)
        base = int(ffi.cast("uintptr_t", owner))
        for i, (name, (h, w)) in enumerate(shapes.items()):
            p = self.planes.plane[i]
            p.data = ffi.cast("uint16_t *", base + offsets[name])
            p.width, p.height, p.stride = w, h, w * 2


class _Downloader:
    """The one thread that downloads received frames (``ppr_frame_download``,
    the GIL released) in the order they were handed over, while the caller's
    thread sends and receives the next ones. One thread only: a session's
    frames share hwcontext_vulkan's transfer contexts, which are not safe for
    concurrent transfers. Every handle handed over is freed by this thread,
    downloaded or not; :meth:`stop` (idempotent) skips the downloads not
    started, waits for the one in progress and ends the thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Download | None] = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="pyprores-download", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        L, ffi = native.lib, native.ffi
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if not self._stopping:
                    rc = L.ppr_frame_download(job.handle, job.planes)
                    if rc < 0:
                        try:   # the message is this thread's (ppr_last_error(NULL))
                            native._raise(rc)
                        except BaseException as e:
                            job.error = e
            except BaseException as e:   # pragma: no cover - defensive
                job.error = e
            finally:
                ffi.release(job.handle)   # ppr_frame_free
                job.handle = job.planes = job.keep = None
                job.done.set()
                job = None   # its frame is the caller's now: no reference here

    def submit(self, job: _Download) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stopping = True
            self._jobs.put(None)
            self._thread.join()


@dataclass
class DecodedFrame(Frame):
    """A :class:`pyprores.Frame` with its place in the stream."""

    #: 0-based position in decoding order (ProRes is intra-only: also display order)
    index: int = 0
    #: the packet's pts in the stream's time base (None when the container gives none)
    pts: int | None = None
    #: pts in seconds (None without a pts or time base)
    time: float | None = None
    #: "progressive", "tt" (top field first) or "bb" (bottom field first), from the frame
    field_order: str = "progressive"

    @property
    def width(self) -> int:
        return int(self.planes["Y"].shape[1])

    @property
    def height(self) -> int:
        return int(self.planes["Y"].shape[0])


class StreamDecoder(native.Closeable):
    """Decode every frame of ``source`` in order; iterate it once.

    ``source``: a file path (its ProRes stream is read by the C library with
    this build's libavformat, on a thread of its own that opens the file while
    the device is created and reads ``prefetch`` + 2 packets ahead; a container
    the build does not read goes through PyAV; :attr:`reader` says which; the
    codec tag and time base come from the container), or an iterable of packets
    (``bytes``, or ``(bytes, pts)`` pairs) with ``codec_tag`` saying 10 or 12 bit.

    ``backend``: ``"vulkan"`` (never a software fallback) or ``"software"``.
    ``device``: the Vulkan device (None, an index, or a name substring).
    ``threads``: software slice threads (0 = automatic). ``max_in_flight``:
    Vulkan frames decoding at once (FFmpeg frame threads, >= 1; 8 by default,
    16 with ``output="cuda"``: with error detection the receiving thread waits
    for each frame's slice report in turn).
    ``reuse_buffers``: False gives each frame arrays of its own (those of an
    earlier frame are written again only once nothing refers to them: no
    frame, view or other reference, so no fresh pages per frame); True writes every
    frame into the same arrays (valid until the next frame; new ones when the
    size changes); a dict of uint16 arrays (``"Y"``, ``"Cb"``, ``"Cr"``[,
    ``"A"``], rows may be padded) makes the decoder write into the caller's
    own arrays. ``err_detect`` (Vulkan; default True, as :class:`native.Session`):
    decode with error detection so that damaged frames are flagged ``corrupt``
    (series patch 19). False returns frames without waiting for their slice
    report, which costs about 3% decoder only on an H100 (docs/BENCHMARKS.md);
    the software decoder always flags damaged frames.
    ``prefetch``: packets read and prepared ahead (0 = none). With ``prefetch``
    > 0 a thread of the decoder's own iterates ``source`` and copies each
    packet into the padded buffer FFmpeg needs (in C, without the GIL) while
    the caller's thread decodes and downloads, so that only ready packets
    are handed to the decoder; at most ``prefetch`` + 1 packets wait. Give 0
    for a source that must be iterated on the caller's thread.
    ``gpu_download`` (Vulkan): the GPU copies each frame straight into host
    memory of the device's own that the frame's numpy planes are views of
    (mapped for their lifetime; no copy on the host), while the caller's
    thread sends and receives the next frames (at most 2 copies in flight).
    None (the default) uses it unless ``reuse_buffers`` is the caller's own
    arrays, and falls back to hwcontext_vulkan's download (below) when the
    device gives no such memory; True insists; False downloads with
    ``av_hwframe_transfer_data`` into ordinary numpy arrays.
    ``download_thread`` (that download only): False (the default) downloads
    on the caller's thread; True, with ``reuse_buffers=False``, has a thread
    of the decoder's own download each frame into its planes while the
    caller's thread sends and receives the next ones (at most 2 frames wait
    there). ``reuse_buffers`` True or a dict always downloads on the caller's
    thread (one set of arrays, which the caller may still be reading).
    ``download_thread=True`` means ``gpu_download=False``.
    ``output``: ``"numpy"`` (default) or ``"cuda"`` (Vulkan, on an NVIDIA GPU
    with its CUDA driver): each frame's planes are :class:`pyprores.decode.cuda.CudaPlane`
    objects in CUDA memory the GPU copied the frame into, DLPack producers
    (``torch.from_dlpack(frame.planes["Y"])``) with no host copy; a frame is
    delivered as soon as its copy is submitted, and a consumer's stream waits
    for it. Raises :class:`pyprores.DeviceError` at once without CUDA.
    :attr:`download` says which path is in use.

    Errors: :class:`pyprores.NotProResError` (no ProRes stream),
    :class:`pyprores.DecodeError` (a damaged or truncated file: the frames
    before the damage are delivered first), :class:`pyprores.DeviceError`.
    """

    def __init__(self, source: str | os.PathLike | PacketSource, backend: str = "vulkan",
                 device: str | int | None = None, threads: int = 0,
                 max_in_flight: int | None = None,
                 *, reuse_buffers: bool | dict[str, np.ndarray] = False,
                 codec_tag: native.CodecTag | None = None, err_detect: bool = True,
                 prefetch: int = 2, download_thread: bool = False,
                 gpu_download: bool | None = None, output: str = "numpy",
                 _pump: str | None = None, _cuda_copy: str | None = None,
                 _frame_pool: str | None = None) -> None:
        if max_in_flight is None:   # CUDA frames: the decoder's rate needs more in flight
            max_in_flight = _IN_FLIGHT_CUDA if output == "cuda" else _IN_FLIGHT
        if int(max_in_flight) < 1:
            raise ValueError(f"max_in_flight must be >= 1, not {max_in_flight}")
        if output not in ("numpy", "cuda"):
            raise ValueError(f"output must be 'numpy' or 'cuda', not {output!r}")
        if output == "cuda" and (backend != "vulkan" or reuse_buffers is not False or gpu_download
                                 or download_thread):
            raise ValueError("output='cuda' needs the vulkan backend, and buffers of the decoder's "
                             "own (reuse_buffers=False, no gpu_download or download_thread)")
        if _cuda_copy not in (None, "shader", "shader-async", "transfer", "cuda", "none") or \
                (_cuda_copy and output != "cuda"):
            raise ValueError(f"_cuda_copy is 'shader', 'shader-async', 'transfer', 'cuda' or 'none', "
                             f"with output='cuda' (not {_cuda_copy!r} with output={output!r})")
        # _frame_pool="linear": the decoder's frames from a pool of the session's own (linear
        # images in device-local memory, exportable: csrc/ownpool.c), which _cuda_copy="none"
        # hands to CUDA in place; any output takes them (tests compare them with the default)
        if _frame_pool not in (None, "default", "linear") or (_frame_pool and backend != "vulkan"):
            raise ValueError(f"_frame_pool is 'default' or 'linear' with the vulkan backend "
                             f"(not {_frame_pool!r} with backend={backend!r})")
        if _cuda_copy == "none" and _frame_pool == "default":
            raise ValueError("_cuda_copy='none' hands CUDA the decoder's own images: "
                             "_frame_pool='linear' (or None)")
        #: "linear" when the frames come from the session's own pool, else "default"
        in_place = output == "cuda" and (_cuda_copy or os.environ.get("PYPRORES_CUDA_COPY")) == "none"
        self.frame_pool = "linear" if _frame_pool == "linear" or in_place else "default"
        #: "numpy" or "cuda" (planes are pyprores.decode.cuda.CudaPlane, DLPack producers)
        self.output = output
        if int(prefetch) < 0:
            raise ValueError(f"prefetch must be >= 0, not {prefetch}")
        self.prefetch = int(prefetch)
        # one set of arrays (reuse_buffers True or the caller's) is the
        # caller's while it holds the frame: download synchronously then
        self.download_thread = bool(download_thread) and reuse_buffers is False
        if gpu_download and (backend != "vulkan" or isinstance(reuse_buffers, dict) or
                             download_thread):
            raise ValueError("gpu_download needs the vulkan backend and arrays of the "
                             "decoder's own (not reuse_buffers=dict), without download_thread")
        # the download thread is for hwcontext_vulkan's download: asking for it says so
        self._gpu: bool | None = (None if gpu_download is None else bool(gpu_download)) \
            if backend == "vulkan" and not isinstance(reuse_buffers, dict) and \
            not self.download_thread else False
        #: how frames reach numpy: "gpu" (GPU copies into host buffers),
        #: "hwcontext" (av_hwframe_transfer_data), "thread" (the same on the
        #: download thread) or "software"; settled by the first frame
        self.download = "software" if backend != "vulkan" else \
            "gpu" if self._gpu is not False else "thread" if self.download_thread else "hwcontext"
        self._cuda: Any = None
        if output == "cuda":
            self._gpu = False
            self.download = "cuda"
        # The pump (pyprores.decode.cuda.pump_frames): a thread of the C library's own
        # sends, receives and starts the copies. CUDA output uses it unless
        # _pump="off" (the loop on this thread) or prefetch=0 (the source is iterated
        # on this thread); _pump="host", "host-shader" or "none" run it for numpy-less
        # measurements and tests (host buffers per frame, written by transfer or by the
        # compute shader that copies CUDA frames; or no copy at all).
        if _pump not in (None, "off", "cuda", "host", "host-shader", "host-shader-async", "none") or \
                (_pump in ("host", "host-shader", "host-shader-async", "none") and
                 (output != "numpy" or backend != "vulkan")) or \
                (_pump == "cuda" and output != "cuda"):
            raise ValueError(f"_pump={_pump!r} does not fit output={output!r}, backend={backend!r}")
        #: the pump's sink ("cuda", "host", "none"), or None: frames decoded on this thread
        self.pump: str | None = ("cuda" if output == "cuda" and _pump != "off" and prefetch
                                 else _pump if _pump in ("host", "host-shader", "host-shader-async", "none")
                                 else None)
        self._pump: Any = None
        self._pump_stats: dict[str, int] | None = None
        self._pump_copiers = -1   # threads sharing a pushed packet's copy (-1: by the CPUs)
        self._build_ns = 0
        self.backend = backend
        self.max_in_flight = int(max_in_flight)
        self._source: Any = None
        self._session: native.Session | None = None
        self._gen: Iterator[DecodedFrame] | None = None
        self._downloader: _Downloader | None = None
        self._reuse = reuse_buffers
        self._buffers: dict[str, np.ndarray] | None = None
        # reuse_buffers=False: planes of earlier frames that nobody holds any
        # more are written again rather than allocated anew (fresh pages cost
        # a page fault each: a third of the time per 4K frame on a GPU)
        self._spare: list[Any] = []   # dicts of arrays, or _HostPlanes
        self.time_base: Fraction | None = None
        self.path: str | None = None
        #: how a file's packets are read: "native" (this build's libavformat on a
        #: thread of the C library's own), "pyav" (a container it does not read),
        #: None for a packet source
        self.reader: str | None = None
        self._reader: native.FileReader | None = None
        self._packets: Iterable[Any] = ()
        self.info: Any = None
        tag = codec_tag if codec_tag is not None else "apch"
        if isinstance(source, (str, os.PathLike)):
            self.path = os.fspath(source)
            if not os.path.exists(self.path):
                raise PyproresError(f"{self.path}: no such file")
            if os.path.isdir(self.path):
                raise PyproresError(f"{self.path} is a directory, not a video file")
            # the reader's thread opens the file while the device is created below
            self._reader = native.FileReader(self.path, max(1, self.prefetch) + 2)
        else:
            self._packets = source
        try:
            try:
                self._session = native.Session(backend, device, threads)
                flags = native.lib.PPR_STREAM_ERR_DETECT if err_detect else 0
                if self.frame_pool == "linear":
                    flags |= native.lib.PPR_STREAM_OWN_POOL
                rc = native.lib.ppr_stream_config(self._session._live(), self.max_in_flight, flags)
                if rc < 0:
                    native._raise(rc, self._session._live())
                if output == "cuda":
                    from .cuda import CudaContext
                    # DeviceError without CUDA; the copy: _cuda_copy, else
                    # $PYPRORES_CUDA_COPY, else the compute shader
                    self._cuda = CudaContext(self._session, _cuda_copy)
            except BaseException:
                if self.path is not None:
                    self._open_file(codec_tag)   # the file's error, if any, comes first
                raise
            if self.path is not None:
                tag = self._open_file(codec_tag)
        except BaseException:
            self.close()
            raise
        self.codec_tag = native.codec_tag_int(tag)

    def _open_file(self, codec_tag: native.CodecTag | None) -> native.CodecTag:
        """Wait for the file's open; ``info``, ``time_base``, the packets; the codec tag.
        A container this build does not read is read with PyAV (which says why
        when it cannot either)."""
        if self.info is not None:
            return codec_tag if codec_tag is not None else (self.info.codec_tag or "apch")
        from . import demux
        try:
            fi = self._reader.info()
        except native.UnreadableFileError:
            self._reader.close()
            self._reader = None
            self._source = demux.open(self.path)
            self.info = self._source.info
            self._packets = self._source.timed_packets()
            self.reader = "pyav"
        else:
            self.info = demux.StreamInfo(
                path=self.path, index=fi.stream_index, width=fi.width, height=fi.height,
                frames=fi.frames, codec_tag=fi.codec_tag, profile=_PROFILES.get(fi.codec_tag),
                pix_fmt=fi.pix_fmt, field_order=fi.field_order, time_base=fi.time_base)
            self.reader = "native"
        self.time_base = self.info.time_base or None
        return codec_tag if codec_tag is not None else (self.info.codec_tag or "apch")

    # -- iteration ----------------------------------------------------------

    def __iter__(self) -> Iterator[DecodedFrame]:
        if self._gen is None:
            if self._session is None:
                raise ValueError("the decoder is closed")
            self._gen = self._frames()
        return self._gen

    def _frames(self) -> Iterator[DecodedFrame]:
        """The frames of :meth:`_decode` in order: with the download thread,
        up to _DEPTH frames are downloading while the next ones are sent and
        received; an error of the decoder comes after the frames before it."""
        L = native.lib
        ptr = self._session._live()
        if self.pump is not None:
            from .cuda import pump_frames
            try:
                yield from pump_frames(self, ptr, self.pump, max(self.prefetch, 1) + 2)
            finally:
                if self._session is not None and self._session._ptr is not None:
                    L.ppr_stream_reset(self._session._ptr)
            return
        pending: deque[_Download] = deque()
        self._downloader = _Downloader() if self.download_thread and not self._gpu else None
        depth = _DEPTH
        inner = self._decode(ptr)
        try:
            if self._downloader is None and self._gpu is False:
                yield from inner
                return
            while True:
                try:
                    job = next(inner)
                except StopIteration:
                    break
                except Exception:
                    # the decoder's error: the frames received before it come first
                    while pending:
                        yield self._finish(pending.popleft())
                    raise
                if isinstance(job, DecodedFrame):   # downloaded on this thread
                    while pending:
                        yield self._finish(pending.popleft())
                    yield job
                    job = None
                    continue
                pending.append(job)
                job = None
                while len(pending) > depth:
                    yield self._finish(pending.popleft())   # a download's error: raised here
            while pending:
                yield self._finish(pending.popleft())
        finally:
            # no download may run once the decoder is reset; every handle is freed
            if self._downloader is not None:
                self._downloader.stop()
                self._downloader = None
            pending.clear()
            inner.close()
            if self._session is not None and self._session._ptr is not None:
                L.ppr_stream_reset(self._session._ptr)

    def _finish(self, job: _Download | _GpuCopy) -> DecodedFrame:
        """Wait for ``job``'s download; its frame, or its error."""
        job.wait()
        frame, job.frame = job.frame, None
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, DecodeError):
                raise DecodeError(f"{self._where()}: frame {frame.index}: {error}") from None
            raise error
        return frame

    def _decode(self, ptr: Any) -> Iterator[Any]:
        """Send every packet and receive every frame: yields DecodedFrames
        (downloaded on this thread) or _Downloads (handed to the thread)."""
        L, ffi = native.lib, native.ffi
        c_frame = ffi.new("ppr_stream_frame *")
        self._count = 0
        error: BaseException | None = None
        packets: Any = None
        prefetcher: _Prefetcher | _FilePackets | None = None
        try:
            if self._reader is not None:
                prefetcher = _FilePackets(self._reader)
            else:
                packets = iter(self._packets)
                if self.prefetch:
                    prefetcher, packets = _Prefetcher(packets, self.prefetch), None
            n = 0
            while True:
                if prefetcher is not None:
                    try:
                        got = prefetcher.get()
                    except DecodeError as e:   # truncated or unreadable: deliver what came before
                        error = e
                        break
                    if got is None:
                        break
                    handle = got[0]
                    try:
                        rc = yield from self._send(ptr, c_frame, n, L.ppr_send_prepared, handle,
                                                   self.codec_tag)
                    finally:
                        ffi.release(handle)   # the decoder holds its own reference
                        handle = got = None
                else:
                    try:
                        item = next(packets)
                    except StopIteration:
                        break
                    except DecodeError as e:   # truncated or unreadable: deliver what came before
                        # a new exception: the demuxer's traceback holds PyAV packets,
                        # which must not outlive their container (PyAV crashes then)
                        error = DecodeError(str(e))
                        e.__traceback__ = None
                        break
                    data, pts = item if isinstance(item, tuple) else (item, None)
                    buf, size = native._buffer(data)
                    c_pts = _NOPTS if pts is None else int(pts)
                    # an exception's traceback must not hold the cffi view of the
                    # packet: collected in a cycle, the memoryview under it breaks
                    data = item = None
                    rc = yield from self._send(ptr, c_frame, n, L.ppr_send_packet, buf, size,
                                               self.codec_tag, c_pts)
                    buf = None
                if rc < 0:
                    self._fail(rc, ptr, n)
                n += 1
                yield from self._receive(ptr, c_frame, until_eof=False)
            rc = L.ppr_send_packet(ptr, ffi.NULL, 0, self.codec_tag, _NOPTS)
            if rc < 0:
                self._fail(rc, ptr, n)
            yield from self._receive(ptr, c_frame, until_eof=True)
            if error is not None:
                raise error from None
        finally:
            if prefetcher is not None:
                prefetcher.stop()      # closes the source's iterator in its thread
            if packets is not None and hasattr(packets, "close"):
                packets.close()    # the demuxer's generator, before its container closes

    def _send(self, ptr: Any, c_frame: Any, n: int, send: Any,
              *args: Any) -> Generator[DecodedFrame, None, int]:
        """``send(ptr, *args)`` until the decoder takes the packet, yielding a
        received frame whenever it answers PPR_EAGAIN; returns its last answer
        (the caller raises on an error, once it let go of the packet)."""
        L = native.lib
        stalls = 0
        while True:
            rc = send(ptr, *args)
            if rc != L.PPR_EAGAIN:
                break
            got = 0
            for frame in self._receive(ptr, c_frame, until_eof=False, first_only=True):
                got += 1
                yield frame
            stalls = 0 if got else stalls + 1
            if stalls > 2:   # pragma: no cover - a decoder that neither takes nor gives
                args = ()
                raise DecodeError(f"{self._where()}: the decoder stalled at packet {n}")
        return rc

    def _receive(self, ptr: Any, c_frame: Any, until_eof: bool,
                 first_only: bool = False) -> Iterator[DecodedFrame]:
        L = native.lib
        while True:
            rc = L.ppr_receive_frame(ptr, c_frame)
            if rc == L.PPR_RECV_AGAIN and not until_eof:
                return
            if rc == L.PPR_RECV_EOF or rc == L.PPR_RECV_AGAIN:
                return
            if rc < 0:
                self._fail(rc, ptr, self._count)
            yield self._deliver(ptr, c_frame)
            if first_only:
                return

    def _where(self) -> str:
        return self.path or "stream"

    def _fail(self, rc: int, ptr: Any, n: int) -> None:
        try:
            native._raise(rc, ptr)
        except DecodeError as e:
            raise DecodeError(f"{self._where()}: frame {n}: {e}") from None

    def _arrays(self, layout: Any) -> dict[str, np.ndarray]:
        shapes = _shapes(layout)
        if isinstance(self._reuse, dict):
            got = {k: tuple(v.shape) for k, v in self._reuse.items()}
            if got != shapes:
                raise ValueError(f"the caller's buffers have planes {got}, the frame needs {shapes}")
            return self._reuse
        if self._reuse and isinstance(self._buffers, dict) and \
                {k: v.shape for k, v in self._buffers.items()} == shapes:
            return self._buffers
        if not self._reuse:
            for arrays in self._spare:
                if isinstance(arrays, dict) and _unheld(arrays) and {k: v.shape for k, v in arrays.items()} == shapes:
                    return arrays
        arrays = {k: np.empty(s, np.uint16) for k, s in shapes.items()}
        if self._reuse:
            self._buffers = arrays
        else:
            # the newest sets: an old one still held is likely kept for good
            self._spare = ([a for a in self._spare if isinstance(a, dict) and not _unheld(a)]
                           + [arrays])[-_SPARE:]
        return arrays

    def _planes(self, layout: Any, arrays: dict[str, np.ndarray]) -> tuple[Any, list]:
        """The ppr_planes that point at ``arrays``, and the cffi buffers to keep meanwhile."""
        ffi = native.ffi
        planes = ffi.new("ppr_planes *")
        planes.count = layout.count
        keep = []
        cbuf = None
        for i in range(layout.count):
            arr = arrays[PLANE_NAMES[i]]
            if arr.dtype != np.uint16 or arr.strides[1] != 2 or arr.strides[0] < 2 * arr.shape[1]:
                raise ValueError(f"plane {PLANE_NAMES[i]}: need uint16 rows of contiguous samples")
            base = arr if arr.flags.c_contiguous else arr.base
            if base is None or not arr.flags.writeable:
                raise ValueError(f"plane {PLANE_NAMES[i]}: need a writable view of a buffer")
            p = planes.plane[i]
            p.width, p.height = layout.plane[i].width, layout.plane[i].height
            if arr.flags.c_contiguous:
                cbuf = ffi.from_buffer("uint16_t[]", arr, require_writable=True)
            else:   # rows padded: point at the first sample
                cbuf = ffi.cast("uint16_t *", arr.__array_interface__["data"][0])
            keep.append(cbuf)
            p.data = cbuf
            p.stride = arr.strides[0]
        return planes, keep

    def _deliver(self, ptr: Any, c_frame: Any) -> DecodedFrame | _Download | _GpuCopy:
        """The received frame: a GPU copy started, a job for the download
        thread, or a frame downloaded on this thread."""
        if self._cuda is not None:
            return self._to_cuda(ptr, c_frame)
        if self._gpu is not False:
            try:
                host = self._host_planes(ptr, c_frame.layout)
            except DeviceError:
                if self._gpu:
                    raise
                self._gpu = False   # automatic: this device has no memory for it
                self.download = "hwcontext"
            else:
                self._gpu = True
                return self._start_copy(ptr, c_frame, host)
        if self._downloader is not None:
            return self._hand_over(ptr, c_frame)
        return self._download(ptr, c_frame)

    def _host_planes(self, ptr: Any, layout: Any) -> _HostPlanes:
        """A set of host-buffer planes for ``layout``: the reused one, or a
        spare one nothing holds any more, or a new one."""
        shapes = _shapes(layout)
        if self._reuse:
            if self._buffers is None or self._buffers.shapes != shapes:
                self._buffers = None   # the old buffer goes with its last array
                self._buffers = _HostPlanes(ptr, shapes)
            return self._buffers
        for host in self._spare:
            if isinstance(host, _HostPlanes) and host.shapes == shapes and _unheld(host.arrays):
                return host
        host = _HostPlanes(ptr, shapes)
        self._spare = ([h for h in self._spare if not _unheld(h.arrays if isinstance(h, _HostPlanes)
                                                               else h)] + [host])[-_SPARE:]
        return host

    def _to_cuda(self, ptr: Any, c_frame: Any) -> DecodedFrame:
        """The received frame copied (on the GPU) into a CUDA buffer: one that
        nothing holds any more (no plane, frame or tensor), or a new one. The
        frame is delivered at once: its planes' consumers wait for the copy in
        their CUDA stream."""
        from .cuda import CudaPlanes, take_frame
        if self._cuda.copy == "none":   # the decoder's own images: no copy
            return self._frame(c_frame, take_frame(self._cuda, ptr))
        shapes = _shapes(c_frame.layout)
        for planes in self._spare:
            if isinstance(planes, CudaPlanes) and planes.shapes == shapes and \
                    _unheld(planes.arrays) and not planes.tensors_alive():
                break
        else:
            planes = CudaPlanes(self._cuda, shapes)
            self._spare = ([p for p in self._spare if not (_unheld(p.arrays) and not p.tensors_alive())]
                           + [planes])[-_SPARE:]
        rc = native.lib.ppr_cuda_download_start(ptr, planes.handle, planes.planes)
        if rc < 0:
            self._fail(rc, ptr, self._count)
        return self._frame(c_frame, planes.arrays)

    def _start_copy(self, ptr: Any, c_frame: Any, host: _HostPlanes) -> DecodedFrame | _GpuCopy:
        rc = native.lib.ppr_download_start(ptr, host.handle, host.planes)
        if rc < 0:
            self._fail(rc, ptr, self._count)
        job = _GpuCopy(self._frame(c_frame, host.arrays), host)
        if self._reuse:   # one set of planes: the caller gets it once written
            return self._finish(job)
        return job

    def _download(self, ptr: Any, c_frame: Any) -> DecodedFrame:
        arrays = self._arrays(c_frame.layout)
        planes, keep = self._planes(c_frame.layout, arrays)
        rc = native.lib.ppr_download_frame(ptr, planes)
        del keep
        if rc < 0:
            self._fail(rc, ptr, self._count)
        return self._frame(c_frame, arrays)

    def _hand_over(self, ptr: Any, c_frame: Any) -> _Download:
        """Take the received frame out of the session and hand it to the download thread."""
        L, ffi = native.lib, native.ffi
        arrays = self._arrays(c_frame.layout)
        planes, keep = self._planes(c_frame.layout, arrays)
        handle = L.ppr_take_frame(ptr)
        if handle == ffi.NULL:
            self._fail(L.PPR_ENOMEM, ptr, self._count)
        # freed by the download thread (ffi.release), else when collected
        handle = ffi.gc(handle, L.ppr_frame_free)
        job = _Download(self._frame(c_frame, arrays), handle, planes, keep)
        self._downloader.submit(job)
        return job

    def _frame(self, c_frame: Any, arrays: dict[str, np.ndarray]) -> DecodedFrame:
        """The DecodedFrame of the frame received into ``c_frame``, with ``arrays`` as planes."""
        ffi = native.ffi
        concealed = self._session.concealed_slices(int(c_frame.concealed)) \
            if self.backend == "software" else ()
        pts = None if c_frame.pts == _NOPTS else int(c_frame.pts)
        frame = DecodedFrame(
            # without reuse, the frame's own dict: its planes count as held while it lives
            planes=arrays if self._reuse else dict(arrays),
            pix_fmt=ffi.string(c_frame.pix_fmt).decode("ascii"),
            bit_depth=int(c_frame.bit_depth), corrupt=bool(c_frame.corrupt),
            extra={"backend": self.backend}, error_flags=int(c_frame.error_flags),
            concealed=concealed, index=self._count, pts=pts,
            time=float(pts * self.time_base) if pts is not None and self.time_base else None,
            field_order=("tt" if c_frame.top_field_first else "bb") if c_frame.interlaced
            else "progressive")
        self._count += 1
        return frame

    def stats(self) -> dict[str, int] | None:
        """Where the pump's time went so far (None without a pump): frames,
        packets, and nanoseconds summed over them: ``input_ns`` (waiting for
        packets), ``send_ns``, ``receive_ns`` (the decoder's calls, its waits
        included), ``buffer_ns`` (finding or making a buffer), ``copy_ns``
        (submitting the GPU copy), ``output_ns`` (the pump waiting for the
        caller), ``next_wait_ns`` (the caller waiting for the pump),
        ``thread_cpu_ns`` (the pump thread's CPU, at its end), ``build_ns``
        (this thread making the frame objects)."""
        if self._pump is not None:
            from .cuda import _stats
            st = _stats(self._pump)
        elif self._pump_stats is not None:
            st = dict(self._pump_stats)
        else:
            return None
        st["build_ns"] = self._build_ns
        return st

    # -- lifetime -----------------------------------------------------------

    @property
    def device_name(self) -> str:
        return self._session.device_name if self._session is not None else ""

    def close(self) -> None:
        """Stop decoding (frames in flight are dropped, the decoder's threads
        end) and release the device and the file. Idempotent."""
        gen, self._gen = self._gen, None
        if gen is not None:
            gen.close()
        # host buffers nobody holds go now (one still in a frame lives on with it)
        self._spare, self._buffers = [], None
        if self._cuda is not None:   # its buffers (frames, tensors) keep it alive
            self._cuda.close()
            self._cuda = None
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._source is not None:
            self._source.close()
            self._source = None


def open_decoder(source: str | os.PathLike | PacketSource, backend: str = "vulkan",
                 device: str | int | None = None, threads: int = 0,
                 max_in_flight: int | None = None,
                 **kwargs: Any) -> StreamDecoder:
    """Open a streaming decoder (see :class:`StreamDecoder`); use it with ``with``."""
    return StreamDecoder(source, backend, device, threads, max_in_flight, **kwargs)
