"""Frames as CUDA memory (issue 33): open_decoder(..., output="cuda").

Here (lavapipe, no CUDA driver) output="cuda" must fail at once with a clear
DeviceError and leave the numpy path as it was. On the GPU machine
(``-m gpu``, PyTorch and/or CuPy installed) the checks of tools/gpu/cuda-check
run: planes equal the numpy path's sample for sample (4:2:2, 4:4:4 + alpha,
interlaced), a tensor outlives its decoder, a kernel queued right after a
frame is yielded reads the finished frame, and buffers are reused only once
their tensors are gone.
"""

from __future__ import annotations

import ctypes.util
import gc

import numpy as np
import pytest

from conftest import load_script

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native
from pyprores.errors import DeviceError

HAS_VK = native.available() and native.has_hwaccel("vulkan")
needs_vk = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")


def has_cuda_driver() -> bool:
    return ctypes.util.find_library("cuda") is not None


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    spec = clips.ClipSpec(**{**clips.DEFAULT_CLIPS[0].__dict__, "frames": 3})
    return clips.generate(spec, tmp_path_factory.mktemp("cuda"))


@needs_vk
@pytest.mark.skipif(has_cuda_driver(), reason="this machine has a CUDA driver")
def test_without_cuda_a_clear_error_and_numpy_unchanged(clip):
    with pytest.raises(DeviceError, match="CUDA driver") as e:
        pyprores.open_decoder(clip, output="cuda")
    assert "libcuda" in str(e.value) and "output=\"numpy\"" in str(e.value)
    gc.collect()
    assert native.lib.ppr_readers_live() == 0 and native.lib.ppr_cuda_buffers_live() == 0
    # the device hold the failed CUDA open took is given back: the next session's
    # device is the shared one, alone
    with native.Session("vulkan") as s:
        assert s.device_sessions == 1
    with pyprores.open(clip) as src:
        want = list(src.reference_frames())
    with pyprores.open_decoder(clip) as dec:
        assert dec.output == "numpy" and dec.download == "gpu"
        got = list(dec)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k in w.planes:
            assert isinstance(g.planes[k], np.ndarray) and np.array_equal(g.planes[k], w.planes[k])


def test_bad_output_arguments(clip):
    with pytest.raises(ValueError, match="output must be"):
        pyprores.open_decoder(clip, output="torch")
    for kwargs in ({"backend": "software"}, {"reuse_buffers": True}, {"gpu_download": True},
                   {"download_thread": True}):
        with pytest.raises(ValueError, match="output='cuda' needs"):
            pyprores.open_decoder(clip, output="cuda", **kwargs)
    for kwargs in ({"output": "cuda", "_cuda_copy": "dma"}, {"_cuda_copy": "transfer"},
                   {"_cuda_copy": "cuda"}, {"output": "cuda", "_cuda_copy": "CUDA"}):
        with pytest.raises(ValueError, match="_cuda_copy"):
            pyprores.open_decoder(clip, **kwargs)


def test_cuda_copy_modes_named(monkeypatch):
    """The copies CudaContext takes by name (_cuda_copy, PYPRORES_CUDA_COPY), CUDA's
    own among them, map to the C library's PPR_COPY_*; another name says which exist."""
    from pyprores.decode import cuda
    L = native.lib
    assert cuda._COPIES == {"shader": L.PPR_COPY_SHADER, "transfer": L.PPR_COPY_TRANSFER,
                            "shader-async": L.PPR_COPY_SHADER_ASYNC, "cuda": L.PPR_COPY_CUDA,
                            "none": L.PPR_COPY_NONE}
    ctx = cuda.CudaContext.__new__(cuda.CudaContext)   # no CUDA here: the name check only
    ctx._ptr = native.ffi.NULL
    with pytest.raises(ValueError, match="'cuda'"):
        ctx.set_copy("cuda-async")
    assert "cuda_copies" in cuda._STAT_FIELDS and "frames_in_place" in cuda._STAT_FIELDS


@needs_vk
def test_cuda_calls_refuse_bad_arguments():
    L, ffi = native.lib, native.ffi
    assert L.ppr_cuda_open(ffi.NULL, ffi.new("ppr_cuda **")) == L.PPR_EINVAL
    with native.Session("software") as s:
        assert L.ppr_cuda_open(s._ptr, ffi.new("ppr_cuda **")) == L.PPR_EINVAL
        assert "Vulkan session" in native._message(s._ptr)
    assert L.ppr_cuda_buffer_new(ffi.NULL, 16) == ffi.NULL
    assert L.ppr_cuda_dlpack(ffi.NULL, ffi.NULL, 0, 0) == ffi.NULL
    assert L.ppr_cuda_dlpack_at(ffi.NULL, 4096, 2, 2, 0, 0) == ffi.NULL
    assert "bad plane" in native._message()
    assert L.ppr_cuda_dlpack_strided(ffi.NULL, 4096, 2, 2, 8, 0, 0) == ffi.NULL
    assert L.ppr_cuda_take_frame(ffi.NULL, ffi.NULL, ffi.new("ppr_cuda_buffer **"),
                                 ffi.new("ppr_planes *")) == L.PPR_EINVAL
    assert L.ppr_cuda_frames_in_place(ffi.NULL) == 0
    L.ppr_dlpack_delete(ffi.NULL, 0)
    L.ppr_cuda_close(ffi.NULL)
    L.ppr_cuda_buffer_free(ffi.NULL)
    assert L.ppr_cuda_set_copy(ffi.NULL, L.PPR_COPY_SHADER) == L.PPR_EINVAL
    assert L.ppr_cuda_set_copy(ffi.NULL, L.PPR_COPY_CUDA) == L.PPR_EINVAL
    assert "PPR_COPY_CUDA" in native._message()
    copies = ffi.new("uint64_t[2]", [7, 7])
    L.ppr_cuda_copies(ffi.NULL, copies, copies + 1)
    assert list(copies) == [0, 0]
    assert L.ppr_cuda_copies_cuda(ffi.NULL) == 0
    assert ffi.string(L.ppr_cuda_copy_fallback(ffi.NULL)) == b""
    assert L.ppr_copier_new(ffi.NULL) == ffi.NULL and L.ppr_copier_copies(ffi.NULL) == 0
    L.ppr_copier_free(ffi.NULL)


@pytest.mark.gpu
def test_cuda_frames_on_the_gpu(tmp_path):
    """tools/gpu/cuda-check's checks (the gpu-run step `cuda` runs the same): equal
    planes for 4:2:2, 4:4:4 + alpha, interlaced and odd sizes through the pump (the
    compute-shader copy, the transfer-queue copy and CUDA's own copy from the decoder's
    images) and the Python loop, tensors outliving the decoder, frames held beyond the pump's pool, kernels
    right after each frame (Y and Cr, the legacy and an own stream) seeing it finished."""
    check = load_script("cuda-check")
    result = check.run_checks(tmp_path, frames=6)
    assert result["ok"], result
