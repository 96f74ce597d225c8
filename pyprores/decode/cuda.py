"""Frames in CUDA memory: planes that PyTorch, CuPy (any DLPack consumer) take
without a host copy, for ``open_decoder(..., output="cuda")``.

    with pyprores.open_decoder("clip.mov", output="cuda") as dec:
        for frame in dec:
            y = torch.from_dlpack(frame.planes["Y"])     # uint16 CUDA tensor, (rows, samples)

The GPU copies each decoded frame into a buffer of device memory that Vulkan
exports and CUDA imports (csrc/cudaip.c: VK_KHR_external_memory_fd,
cuImportExternalMemory), and signals a timeline semaphore CUDA imported;
``__dlpack__(stream=...)`` makes the consumer's stream wait for it, so a
kernel queued on that stream after the call reads the finished frame. A
tensor keeps its buffer alive, after the decoder closed too; a buffer nothing
holds any more is written again by a later frame, once the CUDA work its
tensors' streams had queued is done.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import numpy as np

from . import native
from ..errors import DeviceError
from ..model import PLANE_NAMES

__all__ = ["CudaContext", "CudaPlane", "CudaPlanes"]

KDL_CUDA = 2          # DLPack's kDLCUDA
# PPR_COPY_SHADER, PPR_COPY_TRANSFER, PPR_COPY_SHADER_ASYNC, PPR_COPY_CUDA, PPR_COPY_NONE
_COPIES = {"shader": 0, "transfer": 1, "shader-async": 2, "cuda": 3, "none": 4}
_ALIGN = 256          # plane offsets in a buffer (CUDA's own allocations are 256-byte aligned)
# The capsule names (PyCapsule keeps the pointer: these bytes live as long as the module).
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


_DESTRUCTOR: list[int] = []


def _destructor() -> int:
    """The C capsule destructor compiled into the extension (csrc/build_ffi.py)."""
    if not _DESTRUCTOR:
        ffi, lib = native.ffi, native.lib
        _DESTRUCTOR.append(int(ffi.cast("uintptr_t", ffi.addressof(lib, "ppr_py_dlpack_capsule_destructor"))))
    return _DESTRUCTOR[0]


#: Per-plane time in __dlpack__, when profiling (see :func:`profile`): calls, and
#: nanoseconds in the C call (the tensor and its stream's wait) and in the capsule.
PROFILE: dict[str, int] | None = None


def profile(on: bool = True) -> dict[str, int] | None:
    """Start (or stop) counting where __dlpack__ spends its time; the counters."""
    global PROFILE
    PROFILE = {"calls": 0, "c_ns": 0, "capsule_ns": 0, "total_ns": 0} if on else None
    return PROFILE


class CudaContext:
    """The CUDA side of a Vulkan session (``ppr_cuda``): raises
    :class:`pyprores.DeviceError` when there is no CUDA driver, no CUDA device
    that is the session's Vulkan device, or the device cannot export memory."""

    def __init__(self, session: native.Session, copy: str | None = None) -> None:
        L, ffi = native._lib(), native.ffi
        out = ffi.new("ppr_cuda **")
        rc = L.ppr_cuda_open(session._live(), out)
        if rc < 0:
            native._raise(rc, session._live())
        # freed when collected, or at once by close(); buffers keep the C object alive
        self._ptr = ffi.gc(out[0], L.ppr_cuda_close)
        #: the CUDA device ordinal (torch.device("cuda", device_id))
        self.device_id = int(L.ppr_cuda_device(self._ptr))
        #: how frames are copied into CUDA memory: "shader", "shader-async", "transfer", "cuda"
        #: or "none" (the decoder's own images, no copy)
        self.copy = "shader"
        asked = copy or os.environ.get("PYPRORES_CUDA_COPY")
        if asked:
            self.set_copy(asked)
        else:   # the shader where the device runs it, else the transfer queue
            try:
                self.set_copy("shader")
            except DeviceError:
                self.set_copy("transfer")

    def set_copy(self, how: str) -> None:
        """``"shader"``: a compute shader copies each frame into CUDA memory (the
        default); ``"shader-async"``: the same, submitted by a thread of the
        copier's own; ``"transfer"``: vkCmdCopyImageToBuffer on a transfer queue;
        ``"cuda"``: no Vulkan submission, CUDA copies from the decoder's own
        images (imported once each; where it cannot, the shader copy, and
        :meth:`copy_fallback` says why); ``"none"``: no copy, the planes are
        the decoder's own images (the session's frame pool, ``_frame_pool=
        "linear"``: linear, device-local, imported once each). Raises
        :class:`pyprores.DeviceError` when the device cannot run the shader."""
        L = native.lib
        if how not in _COPIES:
            raise ValueError(f"the CUDA copy is 'shader', 'shader-async', 'transfer', 'cuda' or "
                             f"'none', not {how!r} (PYPRORES_CUDA_COPY)")
        rc = L.ppr_cuda_set_copy(self._ptr, _COPIES[how])
        if rc < 0:
            native._raise(rc)
        self.copy = how

    def copy_queue(self) -> dict[str, Any] | None:
        """Where the shader copies go: ``{"family", "index", "decoder_family",
        "decoder_queue"}`` (``decoder_family`` True when the decoder submits to
        that family too, ``decoder_queue`` when to that very queue, so that
        copies wait behind decodes: the device has no other family that can
        compute and no queue the decoder leaves alone), or None when the device
        cannot run the shader copy."""
        L, ffi = native.lib, native.ffi
        fam, idx = ffi.new("uint32_t *"), ffi.new("uint32_t *")
        where = L.ppr_copier_queue(L.ppr_cuda_copier(self._ptr), fam, idx)
        if where < 0:
            return None
        return {"family": int(fam[0]), "index": int(idx[0]),
                "decoder_family": where != L.PPR_COPY_QUEUE_OWN,
                "decoder_queue": where == L.PPR_COPY_QUEUE_DECODER}

    def copies(self) -> dict[str, int]:
        """The copies into CUDA memory so far: ``{"shader": n, "transfer": m,
        "cuda": k, "none": j}`` (``"cuda"``: by CUDA from the decoder's images;
        ``"none"``: frames handed over in place, no copy)."""
        ffi = native.ffi
        a, b = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        native.lib.ppr_cuda_copies(self._ptr, a, b)
        return {"shader": int(a[0]), "transfer": int(b[0]),
                "cuda": int(native.lib.ppr_cuda_copies_cuda(self._ptr)),
                "none": int(native.lib.ppr_cuda_frames_in_place(self._ptr))}

    def syncs(self) -> dict[str, int]:
        """The consumers' synchronisation so far: waits queued on a consumer's
        stream for a copy and those not needed (the copy had ended), events
        recorded by dropped tensors and those not needed (the stream was idle)."""
        out = native.ffi.new("uint64_t[4]")
        native.lib.ppr_cuda_syncs(self._ptr, out)
        return {"waits": int(out[0]), "waits_skipped": int(out[1]),
                "events": int(out[2]), "events_skipped": int(out[3])}

    def copy_fallback(self) -> str:
        """Why frames of the ``"cuda"`` copy went to the shader copy instead
        (the decoder's images not exportable, an import that failed), or ""."""
        return native.ffi.string(native.lib.ppr_cuda_copy_fallback(self._ptr)).decode("utf-8", "replace")

    def close(self) -> None:
        if self._ptr is not None:
            native.ffi.release(self._ptr)
            self._ptr = None


class CudaPlane:
    """One plane of a frame in CUDA memory: uint16 samples, ``shape`` (rows,
    samples), rows ``stride`` bytes apart (contiguous but for the decoder's own
    images, ``_cuda_copy="none"``). A DLPack producer: ``torch.from_dlpack(plane)``,
    ``cupy.from_dlpack(plane)``; each call makes a new tensor of the same
    memory, and the consumer's stream waits for the frame's copy. The plane
    (and each tensor made of it) keeps its buffer alive."""

    __slots__ = ("_handle", "_ptr", "shape", "device_id", "stride", "__weakref__")

    dtype = np.dtype(np.uint16)
    ndim = 2

    def __init__(self, handle: Any, ptr: int, shape: tuple[int, int], device_id: int,
                 stride: int | None = None) -> None:
        self._handle = handle     # the buffer's reference: the plane keeps it alive
        self._ptr = ptr
        self.shape = shape
        self.device_id = device_id
        #: bytes from one row to the next
        self.stride = shape[1] * 2 if stride is None else int(stride)

    @property
    def data_ptr(self) -> int:
        """The CUDA device pointer of the first sample."""
        return self._ptr

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 2

    @property
    def strides(self) -> tuple[int, int]:
        """Bytes between rows and between samples (as numpy's strides)."""
        return (self.stride, 2)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the plane. ``stream``: the consumer's CUDA stream
        (None: the null stream; 1, 2: the legacy and per-thread default
        streams; -1: no synchronisation), which waits for the frame's copy
        (once per frame on the legacy default stream, per plane on others)."""
        if copy:
            raise BufferError("a CUDA plane is shared, not copied (copy=True)")
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA, self.device_id):
            raise BufferError(f"the plane is on CUDA device {self.device_id}, not {dl_device}")
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"stream must be an int (a CUDA stream), not {type(stream).__name__}")
        versioned = max_version is not None and int(max_version[0]) >= 1
        L = native.lib
        prof = PROFILE
        if prof is not None:
            t0 = time.perf_counter_ns()
        if self.stride == self.shape[1] * 2:
            managed = L.ppr_cuda_dlpack_at(self._handle, self._ptr, self.shape[0], self.shape[1],
                                           0 if stream is None else stream, int(versioned))
        else:   # the decoder's own image: rows padded to its row pitch
            managed = L.ppr_cuda_dlpack_strided(self._handle, self._ptr, self.shape[0],
                                                self.shape[1], self.stride,
                                                0 if stream is None else stream, int(versioned))
        if managed == native.ffi.NULL:
            native._raise(L.PPR_ENODEVICE)
        if prof is not None:
            t1 = time.perf_counter_ns()
        ptr = int(native.ffi.cast("uintptr_t", managed))
        try:
            capsule = _capsule_new(ptr, _NAMES[versioned], _destructor())
        except BaseException:
            L.ppr_dlpack_delete(managed, int(versioned))
            raise
        if prof is not None:
            t2 = time.perf_counter_ns()
            prof["calls"] += 1
            prof["c_ns"] += t1 - t0
            prof["capsule_ns"] += t2 - t1
            prof["total_ns"] += t2 - t0
        return capsule

    def __repr__(self) -> str:
        return f"<pyprores.CudaPlane uint16 {self.shape} on cuda:{self.device_id}>"


class CudaPlanes:
    """A set of planes in one CUDA buffer (``ppr_cuda_buffer``), which the GPU
    writes each frame into; ``arrays`` maps plane names to :class:`CudaPlane`."""

    def __init__(self, cuda: CudaContext, shapes: dict[str, tuple[int, int]]) -> None:
        L, ffi = native.lib, native.ffi
        offsets, size = {}, 0
        for name, (h, w) in shapes.items():
            offsets[name] = size
            size += -(-(h * w * 2) // _ALIGN) * _ALIGN
        handle = L.ppr_cuda_buffer_new(cuda._ptr, size)
        if handle == ffi.NULL:
            native._raise(L.PPR_ENODEVICE)
        # the creator's reference, dropped when collected (tensors hold their own)
        self.handle = ffi.gc(handle, L.ppr_cuda_buffer_free)
        base = int(L.ppr_cuda_buffer_ptr(handle))
        self.shapes = shapes
        self.arrays = {name: CudaPlane(self.handle, base + offsets[name], shape, cuda.device_id)
                       for name, shape in shapes.items()}
        self.planes = ffi.new("ppr_planes *")
        self.planes.count = len(shapes)
        for i, (name, (h, w)) in enumerate(shapes.items()):
            p = self.planes.plane[i]
            p.data = ffi.cast("uint16_t *", base + offsets[name])
            p.width, p.height, p.stride = w, h, w * 2
        assert list(shapes) == list(PLANE_NAMES[:len(shapes)])

    def tensors_alive(self) -> bool:
        """True while a DLPack tensor made of these planes lives."""
        return native.lib.ppr_cuda_buffer_refs(self.handle) > 1


def take_frame(cuda: CudaContext, session_ptr: Any) -> dict[str, CudaPlane]:
    """The received frame's planes in place (``_cuda_copy="none"``): the
    decoder's own images, no copy (``ppr_cuda_take_frame``); the planes hold
    the frame, so its images go back to the pool once they and their tensors
    are gone."""
    L, ffi = native.lib, native.ffi
    out, planes = ffi.new("ppr_cuda_buffer **"), ffi.new("ppr_planes *")
    rc = L.ppr_cuda_take_frame(session_ptr, cuda._ptr, out, planes)
    if rc < 0:
        native._raise(rc, session_ptr)
    handle = ffi.gc(out[0], L.ppr_cuda_buffer_free)
    arrays = {}
    for i in range(planes.count):
        p = planes.plane[i]
        arrays[PLANE_NAMES[i]] = CudaPlane(handle, int(ffi.cast("uintptr_t", p.data)),
                                           (p.height, p.width), cuda.device_id, p.stride)
    return arrays


# -- the pump: send, receive and copy on a thread of the C library's own --------

# PPR_PUMP_NONE, _CUDA, _HOST, _HOST_SHADER (host buffers written by the compute shader
# that copies CUDA frames: the same copy, checkable without CUDA)
SINKS = {"none": 0, "cuda": 1, "host": 2, "host-shader": 3, "host-shader-async": 4}


class _Feeder:
    """Iterates a packet source on a thread of its own and pushes each packet
    into the pump (``ppr_pump_push_data``: the padded copy FFmpeg needs, made
    by ``copiers`` + 1 threads at once, without the GIL; it blocks, still
    without the GIL, while the pump's input is full). The source's error is
    kept for the caller (raised after the frames of the packets before it);
    the source's generator is closed in this thread."""

    def __init__(self, packets: Any, pump: Any, copiers: int = -1) -> None:
        import threading
        self._packets, self._pump = packets, pump
        self.error: BaseException | None = None
        self._stopping = False
        #: helper threads that share each packet's copy
        self.copiers = int(native.lib.ppr_pump_copiers(pump, copiers))
        self._thread = threading.Thread(target=self._run, name="pyprores-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from .stream import _NOPTS
        from ..errors import DecodeError
        L, ffi = native.lib, native.ffi
        item: Any = None
        try:
            for item in self._packets:
                if self._stopping:
                    return
                data, pts = item if isinstance(item, tuple) else (item, None)
                buf, size = native._buffer(data)
                rc = L.ppr_pump_push_data(self._pump, buf, size, _NOPTS if pts is None else int(pts))
                buf = data = item = None
                if rc < 0:
                    native._raise(rc)
                if rc == 0:   # the pump stopped
                    return
        except DecodeError as e:   # truncated or unreadable: after the packets before it
            e.__traceback__ = None   # PyAV packets must not outlive their container
            self.error = DecodeError(str(e))
        except BaseException as e:
            item = None
            self.error = e
        finally:
            L.ppr_pump_push(self._pump, ffi.NULL)   # the end (a no-op once stopped)
            close = getattr(self._packets, "close", None)
            if close is not None:
                close()

    def stop(self) -> None:
        """End the thread (the pump is stopped first, so that its push returns)."""
        self._stopping = True
        self._thread.join()


def _host_arrays(f: Any) -> dict[str, np.ndarray]:
    """The numpy planes of a PPR_PUMP_HOST frame (views of its host buffer, which
    they keep alive), once its copy ended."""
    L, ffi = native.lib, native.ffi
    h = f.host
    rc = L.ppr_host_buffer_wait(h)   # the GIL released
    size = int(L.ppr_host_buffer_size(h))
    owner = ffi.gc(ffi.cast("uint8_t *", L.ppr_host_buffer_data(h)),
                   lambda _p, h=h: L.ppr_host_buffer_free(h), size=size)
    if rc < 0:
        native._raise(rc)
    whole = np.frombuffer(ffi.buffer(owner, size), dtype=np.uint8)
    base = int(ffi.cast("uintptr_t", owner))
    out = {}
    for i in range(f.planes.count):
        p = f.planes.plane[i]
        off = int(ffi.cast("uintptr_t", p.data)) - base
        h_, w = int(p.height), int(p.width)
        out[PLANE_NAMES[i]] = whole[off:off + h_ * w * 2].view(np.uint16).reshape(h_, w)
    return out


def pump_frames(dec: Any, ptr: Any, sink: str, depth: int) -> Any:
    """The frames of StreamDecoder ``dec`` decoded by a pump (``ppr_pump``):
    a thread of the C library's own reads (the file's reader) or takes (a
    packet source, pushed by a :class:`_Feeder`) the packets, sends them,
    receives the frames and starts their copies into ``sink`` ("cuda": CUDA
    buffers of its pool; "host": host buffers, for tests; "host-shader": the
    same written by the compute shader CUDA frames are copied with; "none": no
    copy, for measurements), ``depth`` frames ahead of the caller.
    ``dec.stats()`` says where the time went."""
    from ..errors import DecodeError
    L, ffi = native.lib, native.ffi
    out = ffi.new("ppr_pump **")
    cuda = dec._cuda._ptr if sink == "cuda" else ffi.NULL
    reader = dec._reader._live() if dec._reader is not None else ffi.NULL
    rc = L.ppr_pump_open(out, ptr, cuda, SINKS[sink], reader, dec.codec_tag, depth)
    if rc < 0:
        native._raise(rc)
    pump = out[0]
    dec._pump = pump
    dec._count = 0
    feeder = None
    f = ffi.new("ppr_pump_frame *")
    device_id = dec._cuda.device_id if sink == "cuda" else -1
    names = PLANE_NAMES
    build_ns = 0
    perf = time.perf_counter_ns
    try:
        if dec._reader is None:
            feeder = _Feeder(iter(dec._packets), pump, dec._pump_copiers)
        while True:
            rc = L.ppr_pump_next(pump, f)   # the GIL released while it waits
            if rc != 1:
                break
            t0 = perf()
            if sink == "cuda":
                handle = ffi.gc(f.cuda, L.ppr_cuda_buffer_free)   # the pump's reference is ours
                planes = f.planes
                arrays = {}
                for i in range(planes.count):
                    p = planes.plane[i]
                    arrays[names[i]] = CudaPlane(handle, int(ffi.cast("uintptr_t", p.data)),
                                                 (p.height, p.width), device_id, p.stride)
                handle = None
            elif sink.startswith("host"):
                arrays = _host_arrays(f)
            else:
                arrays = {}
            frame = dec._frame(f.info, arrays)
            arrays = None
            build_ns += perf() - t0
            dec._build_ns = build_ns
            yield frame
            frame = None
        if rc < 0:
            message = ffi.string(L.ppr_pump_error(pump)).decode("utf-8", "replace")
            index = int(f.index)
            try:
                native._raise(rc, message=message or None)
            except DecodeError as e:
                if index < 0:
                    raise
                raise DecodeError(f"{dec._where()}: frame {index}: {e}") from None
        if feeder is not None:
            L.ppr_pump_stop(pump)
            feeder.stop()
            if feeder.error is not None:
                error, feeder.error = feeder.error, None
                raise error
    finally:
        L.ppr_pump_stop(pump)      # the decoder's call in progress ends first
        if feeder is not None:
            feeder.stop()
        dec._pump_stats = _stats(pump)
        dec._pump = None
        L.ppr_pump_free(pump)      # frames queued and not taken go with it


_STAT_FIELDS = ("frames", "packets", "input_ns", "send_ns", "receive_ns", "buffer_ns", "copy_ns",
                "output_ns", "next_wait_ns", "thread_cpu_ns", "buffers_made", "shader_copies",
                "transfer_copies", "copy_gpu_ns", "copies_gpu_timed", "cuda_copies",
                "frames_in_place")


def _stats(pump: Any) -> dict[str, int]:
    st = native.ffi.new("ppr_pump_stats *")
    native.lib.ppr_pump_stats_get(pump, st)
    return {k: int(getattr(st, k)) for k in _STAT_FIELDS}
