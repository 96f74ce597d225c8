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
from typing import Any

import numpy as np

from . import native
from ..model import PLANE_NAMES

__all__ = ["CudaContext", "CudaPlane", "CudaPlanes"]

KDL_CUDA = 2          # DLPack's kDLCUDA
_ALIGN = 256          # plane offsets in a buffer (CUDA's own allocations are 256-byte aligned)
# The capsule names (PyCapsule keeps the pointer: these bytes live as long as the module).
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _destructor() -> int:
    """The C capsule destructor compiled into the extension (csrc/build_ffi.py)."""
    ffi, lib = native.ffi, native.lib
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, "ppr_py_dlpack_capsule_destructor")))


class CudaContext:
    """The CUDA side of a Vulkan session (``ppr_cuda``): raises
    :class:`pyprores.DeviceError` when there is no CUDA driver, no CUDA device
    that is the session's Vulkan device, or the device cannot export memory."""

    def __init__(self, session: native.Session) -> None:
        L, ffi = native._lib(), native.ffi
        out = ffi.new("ppr_cuda **")
        rc = L.ppr_cuda_open(session._live(), out)
        if rc < 0:
            native._raise(rc, session._live())
        # freed when collected, or at once by close(); buffers keep the C object alive
        self._ptr = ffi.gc(out[0], L.ppr_cuda_close)
        #: the CUDA device ordinal (torch.device("cuda", device_id))
        self.device_id = int(L.ppr_cuda_device(self._ptr))

    def close(self) -> None:
        if self._ptr is not None:
            native.ffi.release(self._ptr)
            self._ptr = None


class CudaPlane:
    """One plane of a frame in CUDA memory: uint16 samples, ``shape`` (rows,
    samples), rows contiguous. A DLPack producer: ``torch.from_dlpack(plane)``,
    ``cupy.from_dlpack(plane)``; each call makes a new tensor of the same
    memory, and the consumer's stream waits for the frame's copy. The plane
    (and each tensor made of it) keeps its buffer alive."""

    __slots__ = ("_handle", "_plane", "shape", "device_id", "__weakref__")

    dtype = np.dtype(np.uint16)
    ndim = 2

    def __init__(self, handle: Any, ptr: int, shape: tuple[int, int], device_id: int) -> None:
        self._handle = handle
        self._plane = native.ffi.new("ppr_plane *")
        self._plane.data = native.ffi.cast("uint16_t *", ptr)
        self._plane.height, self._plane.width = shape
        self._plane.stride = shape[1] * 2
        self.shape = shape
        self.device_id = device_id

    @property
    def data_ptr(self) -> int:
        """The CUDA device pointer of the first sample."""
        return int(native.ffi.cast("uintptr_t", self._plane.data))

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 2

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the plane. ``stream``: the consumer's CUDA stream
        (None: the null stream; 1, 2: the legacy and per-thread default
        streams; -1: no synchronisation), which waits for the frame's copy."""
        if copy:
            raise BufferError("a CUDA plane is shared, not copied (copy=True)")
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA, self.device_id):
            raise BufferError(f"the plane is on CUDA device {self.device_id}, not {dl_device}")
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"stream must be an int (a CUDA stream), not {type(stream).__name__}")
        versioned = max_version is not None and int(max_version[0]) >= 1
        L = native.lib
        managed = L.ppr_cuda_dlpack(self._handle, self._plane, 0 if stream is None else stream,
                                    int(versioned))
        if managed == native.ffi.NULL:
            native._raise(L.PPR_ENODEVICE)
        ptr = int(native.ffi.cast("uintptr_t", managed))
        try:
            return _capsule_new(ptr, _NAMES[versioned], _destructor())
        except BaseException:
            L.ppr_dlpack_delete(managed, int(versioned))
            raise

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
