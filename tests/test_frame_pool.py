"""The session's own frame pool (csrc/ownpool.c, PPR_STREAM_OWN_POOL,
``_frame_pool="linear"``): the decoder writes its frames into linear images in
device-local memory of the session's own pool, which ``_cuda_copy="none"``
hands to CUDA in place. Here (lavapipe, no CUDA) the frames go the usual ways
to numpy (the GPU download, hwcontext_vulkan's, the pump's host sinks and its
shader copy): sample for sample the default pool's frames, for 4:2:2, 4:4:4 +
alpha and interlaced clips; every pool image freed once decoders and frames
are gone; the validation layer silent (./scripts/test turns it on).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native

from conftest import default_specs
from test_stream import assert_same, reference

HAS_VK = native.available() and native.has_hwaccel("vulkan")
pytestmark = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
FRAMES = 4


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pool")
    return {name: clips.generate(s, d) for name, s in default_specs(FRAMES).items()}


def live() -> int:
    return int(native.lib.ppr_own_images_live())


def no_validation_messages(dec) -> None:
    # the layer's messages that name our pool's calls or images (FFmpeg's own noise is
    # filtered by PYPRORES_VALIDATION_IGNORE, see conftest.py)
    msgs = dec._session.validation_messages
    assert dec._session.validation_count == 0, msgs


@pytest.mark.parametrize("how", [
    {},                                          # the GPU download into host buffers
    {"gpu_download": False},                     # hwcontext_vulkan's av_hwframe_transfer_data
    {"_pump": "host"},                           # the pump, a transfer per frame
    {"_pump": "host-shader"},                    # the pump, the compute-shader copy of CUDA frames
])
def test_frames_equal_the_default_pool(paths, how):
    assert live() == 0
    for name, path in paths.items():
        want = reference(path)
        with pyprores.open_decoder(path, max_in_flight=3, **how) as ref:
            assert ref.frame_pool == "default"
            default = list(ref)
        with pyprores.open_decoder(path, max_in_flight=3, _frame_pool="linear", **how) as dec:
            assert dec.frame_pool == "linear"
            got, seen = [], 0
            for f in dec:
                got.append(f)
                seen = max(seen, live())
            assert seen > 0, "the frames did not come from the session's own pool"
            no_validation_messages(dec)
        assert len(got) == len(default) == len(want) == FRAMES, name
        for n, (g, d, w) in enumerate(zip(got, default, want)):
            assert_same(g, d, f"{name} frame {n}, {how}")
            assert_same(g, w, f"{name} frame {n}, {how}")
    del got, default, dec, ref, f
    gc.collect()
    assert live() == 0, "the pool's images outlived their decoders and frames"


def test_pool_images_freed_after_early_exit(paths):
    path = paths[clips.DEFAULT_CLIPS[0].name]
    dec = pyprores.open_decoder(path, _frame_pool="linear", max_in_flight=3)
    first = next(iter(dec))
    assert live() > 0
    dec.close()
    del dec
    gc.collect()
    assert live() == 0   # numpy planes hold host memory, not the pool's images
    assert first.planes["Y"].size


def test_size_change_makes_a_new_pool():
    from test_stream import SIZE_CHANGE
    want = reference(SIZE_CHANGE)
    with pyprores.open_decoder(SIZE_CHANGE, _frame_pool="linear", max_in_flight=2) as dec:
        got = list(dec)
        no_validation_messages(dec)
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"frame {n}")
    del dec
    gc.collect()
    assert live() == 0


def test_arguments():
    with pytest.raises(ValueError, match="_frame_pool"):
        pyprores.open_decoder("x.mov", _frame_pool="optimal")
    with pytest.raises(ValueError, match="_frame_pool"):
        pyprores.open_decoder("x.mov", backend="software", _frame_pool="linear")
    with pytest.raises(ValueError, match="_cuda_copy"):
        pyprores.open_decoder("x.mov", _cuda_copy="none")   # output="cuda" only


# -- the zero-copy path (_cuda_copy="none") on a fake CUDA driver ----------------------------
#
# tests/tools/fake_libcuda.c stands in for libcuda.so.1: the exported memory of the pool's
# images (lavapipe's opaque fds are memfds) mapped into the process, so that a "device
# pointer" is a host pointer this test reads; tests/tools/vk_fake_discrete.c (FD_FAKE_SEM_FD)
# offers VK_KHR_external_semaphore_fd, which lavapipe lacks. The decoder's own frames reach the
# planes with no copy, sample for sample the numpy path's; tensors (DLPack capsules) hold them;
# dropped while their stream is busy, their frames go back to the pool only once the events
# completed; the imports, buffers, pool images and the CUDA side all go at the end.

CHILD = r'''
import ctypes, gc, json, os, re, sys, time
import numpy as np
import pyprores
from pyprores.errors import DeviceError
from pyprores.decode import native
path, mode = sys.argv[1], sys.argv[2]
copy = sys.argv[3] if len(sys.argv) > 3 else "none"
fake = ctypes.CDLL("libcuda.so.1")
fake.fake_cuda_count.restype = ctypes.c_long
fake.fake_cuda_mapped.restype = ctypes.c_longlong
count = lambda n: int(fake.fake_cuda_count(n.encode()))
try:        # the fake device's UUID: the Vulkan device's, as the error names it
    pyprores.open_decoder(path, output="cuda").close()
except DeviceError as e:
    os.environ["FAKE_CUDA_UUID"] = re.search(r"UUID ([0-9a-f]{32})", str(e)).group(1)
want = [{k: v.copy() for k, v in f.planes.items()} for f in pyprores.open_decoder(path)]

def read(p):
    h, w = p.shape
    buf = (ctypes.c_char * (p.stride * (h - 1) + w * 2)).from_address(p.data_ptr)
    return np.ndarray((h, w), np.uint16, buffer=buf, strides=(p.stride, 2)).copy()

class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

def tensor(cap):    # what a consumer reads: DLManagedTensor's dl_tensor comes first
    t = DLTensor.from_address(get(cap, b"dltensor"))
    assert t.device_type == 2   # kDLCUDA
    return (t.data, t.ndim, [t.shape[i] for i in range(t.ndim)], [t.strides[i] for i in range(t.ndim)],
            (t.code, t.bits, t.lanes))

out = {"frames": 0, "bad": [], "strided": 0}
kept, caps = [], []
kw = {"_pump": "off"} if mode == "loop" else {}
with pyprores.open_decoder(path, output="cuda", _cuda_copy=copy, max_in_flight=3, **kw) as dec:
    out["frame_pool"] = dec.frame_pool
    def settled(p):     # a tensor whose stream need not wait: the host sees the decode (copy) ended
        for _ in range(1000):
            before = dec._cuda.syncs()["waits_skipped"]
            cap = p.__dlpack__(stream=5)     # a stream of the caller's own
            if dec._cuda.syncs()["waits_skipped"] > before:
                return cap
            cap = None
            time.sleep(0.005)
        raise RuntimeError("the decode did not end")

    for f in dec:
        for k, p in f.planes.items():
            cap = settled(p)
            if not np.array_equal(read(p), want[f.index][k]):
                out["bad"].append(f"frame {f.index} {k}")
            out["strided"] += p.stride != p.shape[1] * 2
            t = tensor(cap)
            if t != (p.data_ptr, 2, list(p.shape), [p.stride // 2, 1], (1, 16, 1)):
                out["bad"].append(f"frame {f.index} {k}: the tensor is {t}")
            if f.index == 0:
                caps.append(cap)             # held past the decoder
            cap = None                       # else dropped: the deleter runs now
        if f.index == 1:
            kept.append(f)                   # a frame held past the decoder too
        out["frames"] += 1
    out["copies"] = dec._cuda.copies()
    out["fallback"] = dec._cuda.copy_fallback()
    out["syncs"] = dec._cuda.syncs()
    out["stats"] = dec.stats()
out["kept_equal"] = all(np.array_equal(read(p), want[1][k]) for k, p in kept[0].planes.items())
out["live_while_kept"] = [int(native.lib.ppr_cuda_buffers_live()), int(native.lib.ppr_own_images_live())]
kept.clear(); caps.clear(); f = p = dec = None
gc.collect()
out["live_after"] = [int(native.lib.ppr_cuda_buffers_live()), int(native.lib.ppr_own_images_live())]
out["mapped_after"] = int(fake.fake_cuda_mapped())
out["calls"] = {n: count(n) for n in ("cuImportExternalMemory", "cuMemFree", "cuDestroyExternalMemory",
                "cuImportExternalSemaphore", "cuDestroyExternalSemaphore", "cuWaitExternalSemaphoresAsync",
                "cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuDevicePrimaryCtxRetain",
                "cuDevicePrimaryCtxRelease")}
out["want"] = len(want)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory) -> Path:
    from conftest import REPO_ROOT, c_compiler
    d = tmp_path_factory.mktemp("fake-cuda")
    subprocess.run([c_compiler(), "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(d / "libcuda.so.1"),
                    str(REPO_ROOT / "tests" / "tools" / "fake_libcuda.c"), "-lpthread"],
                   check=True, capture_output=True, text=True)
    return d


@pytest.fixture(scope="module")
def odd_clip(tmp_path_factory) -> Path:
    # 21-sample chroma rows: lavapipe pads a linear image's rows, so the planes are strided
    # 12 frames: the pump receives frames after earlier ones were dropped (it polls those held back)
    return clips.generate(clips.ClipSpec("odd422", width=42, height=35, frames=12, profile="hq",
                                         pix_fmt="yuv422p10le"), tmp_path_factory.mktemp("odd"))


@pytest.mark.parametrize("mode,busy", [("pump", False), ("pump", True), ("loop", False), ("loop", True)])
def test_zero_copy_on_a_fake_cuda_driver(paths, odd_clip, fake_cuda, fake_discrete_layer, mode, busy):
    from conftest import FAKE_DISCRETE_LAYER, vulkan_env
    env = vulkan_env(validate=False)
    env.update(LD_LIBRARY_PATH=f"{fake_cuda}:{env.get('LD_LIBRARY_PATH', '')}",
               VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER,
               FD_FAKE_SEM_FD="1", PYPRORES_VALIDATION="0", PYPRORES_CUDA_COPY="",
               FAKE_CUDA_FD_HEADER="4096")    # lavapipe's opaque fds: a page of its own first
    if busy:    # dropped tensors' streams still run: events, and frames held back from the pool
        env.update(FAKE_CUDA_STREAM_BUSY="1", FAKE_CUDA_EVENT_POLLS="1")
    for name, path in {**paths, "odd422": odd_clip}.items():
        res = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
        what = f"{name} {mode}{' busy' if busy else ''}: {out}"
        n = 12 if name == "odd422" else FRAMES
        assert out["frame_pool"] == "linear" and out["frames"] == out["want"] == n, what
        assert not out["bad"] and out["kept_equal"], what
        assert out["copies"]["none"] == n and out["copies"]["shader"] == out["copies"]["transfer"] == 0, what
        # 7.1.5's series reads each frame's report on receiving it (error detection): the
        # decode had ended, so no tensor's stream needed to wait for it
        assert out["syncs"]["waits_skipped"] >= 3 * n, what
        if not os.environ.get("PYPRORES_BUILD"):
            assert out["syncs"]["waits"] == 0, what
        if mode == "pump":
            assert out["stats"]["frames_in_place"] == n, what
        if name == "odd422":
            assert out["strided"] > 0, what     # the tensors' row strides are the images'
        assert out["live_while_kept"][0] >= 2 and out["live_while_kept"][1] >= 1, what
        assert out["live_after"] == [0, 0] and out["mapped_after"] == 0, what
        c = out["calls"]
        assert c["cuImportExternalMemory"] == c["cuDestroyExternalMemory"] == c["cuMemFree"] > 0, what
        assert c["cuImportExternalSemaphore"] == c["cuDestroyExternalSemaphore"], what
        assert c["cuDevicePrimaryCtxRetain"] == c["cuDevicePrimaryCtxRelease"] == 1, what
        if mode == "pump" and name == "odd422":
            # the pool's images come back and are written again, imported once each
            assert c["cuImportExternalMemory"] < 3 * n, what
            if busy:    # held back, then given back by the pump's polls (not all at its end)
                assert c["cuEventSynchronize"] < c["cuEventRecord"] and c["cuEventQuery"] > n, what
        if busy:
            assert c["cuEventRecord"] > 0 and c["cuEventQuery"] > 0, what
        else:
            assert c["cuEventRecord"] == 0, what


# The copies into buffers of the pool of CUDA memory (the default output="cuda": the compute
# shader; the transfer queue) through the same fake driver: planes sample for sample the numpy
# path's, unpadded rows; a tensor made once the host sees its copy ended queues no wait on its
# stream, and a tensor dropped on an idle stream records no event (both are CUDA work beside
# the decoder, which slows it on NVIDIA: docs/PYTHON.md); on a busy stream it does, and the
# buffer is written again only once that event completed.
@pytest.mark.parametrize("copy,busy", [("shader", False), ("shader", True), ("transfer", False)])
def test_copies_on_a_fake_cuda_driver(paths, odd_clip, fake_cuda, fake_discrete_layer, copy, busy):
    from conftest import FAKE_DISCRETE_LAYER, vulkan_env
    env = vulkan_env(validate=False)
    env.update(LD_LIBRARY_PATH=f"{fake_cuda}:{env.get('LD_LIBRARY_PATH', '')}",
               VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER,
               FD_FAKE_SEM_FD="1", PYPRORES_VALIDATION="0", PYPRORES_CUDA_COPY="",
               FAKE_CUDA_FD_HEADER="4096")
    if busy:
        env.update(FAKE_CUDA_STREAM_BUSY="1", FAKE_CUDA_EVENT_POLLS="1")
    for name, path in {"hq422": paths["hq422"], "odd422": odd_clip}.items():
        res = subprocess.run([sys.executable, "-c", CHILD, str(path), "pump", copy], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
        what = f"{name} {copy}{' busy' if busy else ''}: {out}"
        n = 12 if name == "odd422" else FRAMES
        assert out["frames"] == out["want"] == n and not out["bad"] and out["kept_equal"], what
        assert out["copies"][copy] == n and out["copies"]["none"] == 0, what
        assert out["strided"] == 0, what            # the buffers' planes: rows unpadded
        # settled() takes each plane again until the host sees its copy ended: a wait is
        # queued only for a copy still running, and each one is a call to the driver
        c = out["calls"]
        assert out["syncs"]["waits_skipped"] >= 3 * n, what
        assert c["cuWaitExternalSemaphoresAsync"] == out["syncs"]["waits"], what
        if busy:
            assert out["syncs"]["events"] > 0 and c["cuEventRecord"] > 0, what
        else:
            assert out["syncs"]["events"] == 0 and out["syncs"]["events_skipped"] > 0, what
            assert c["cuEventRecord"] == 0, what
        assert out["live_after"] == [0, 0] and out["mapped_after"] == 0, what
        assert c["cuDevicePrimaryCtxRetain"] == c["cuDevicePrimaryCtxRelease"] == 1, what


# CUDA's own copy (_cuda_copy="cuda") reads the decoder's images as CUDA arrays, which the
# stand-in driver does not make: each image's memory is imported (and released again), the
# array call fails, and every frame goes to the shader copy with that reason, exact.
def test_cuda_copy_falls_back_on_a_fake_cuda_driver(paths, fake_cuda, fake_discrete_layer):
    from conftest import FAKE_DISCRETE_LAYER, vulkan_env
    env = vulkan_env(validate=False)
    env.update(LD_LIBRARY_PATH=f"{fake_cuda}:{env.get('LD_LIBRARY_PATH', '')}",
               VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER,
               FD_FAKE_SEM_FD="1", PYPRORES_VALIDATION="0", PYPRORES_CUDA_COPY="",
               FAKE_CUDA_FD_HEADER="4096")
    res = subprocess.run([sys.executable, "-c", CHILD, str(paths["hq422"]), "pump", "cuda"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["frames"] == out["want"] == FRAMES and not out["bad"] and out["kept_equal"], out
    assert out["copies"]["shader"] == FRAMES and out["copies"]["cuda"] == 0, out
    assert "plane 0 of the decoder's image: cuExternalMemoryGetMappedMipmappedArray failed" \
        in out["fallback"], out
    c = out["calls"]
    assert c["cuImportExternalMemory"] == c["cuDestroyExternalMemory"] >= 1, out
    assert out["live_after"] == [0, 0] and out["mapped_after"] == 0, out
