"""The compute-shader copy (csrc/shcopy.c, csrc/shaders/planecopy.comp) that
writes CUDA frames, checked here without CUDA: the same copy into host
buffers (ppr_download_start_shader, and the pump's "host-shader" sink) gives
the software decoder's planes sample for sample for 4:2:2, 4:4:4 + alpha,
interlaced, odd sizes (odd plane widths, a plane of an odd number of
samples) and a size change mid-stream, writes nothing outside its planes but the documented half word, and
refuses layouts it does not take.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native

from conftest import default_specs
from test_stream import SIZE_CHANGE, assert_same, reference

HAS_VK = native.available() and native.has_hwaccel("vulkan")
pytestmark = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
FRAMES = 4
SPECS = default_specs(FRAMES)
# 40 x 33: rows of even width, an odd number of rows
SPECS["odd4444"] = clips.ClipSpec("odd4444", width=40, height=33, frames=FRAMES, profile="4444",
                                  pix_fmt="yuv444p10le")
# 42 x 35 4:2:2: chroma rows of 21 samples (pairs span two rows), 735 samples a
# chroma plane (its last word half empty)
SPECS["odd422"] = clips.ClipSpec("odd422", width=42, height=35, frames=FRAMES, profile="hq",
                                 pix_fmt="yuv422p10le")


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("shcopy")
    return {name: clips.generate(spec, d) for name, spec in SPECS.items()}


@pytest.mark.parametrize("sink", ["host-shader", "host-shader-async"])
@pytest.mark.parametrize("name", list(SPECS))
def test_frames_equal_the_software_decoder(paths, name, sink):
    """Every frame through the pump's host-shader sink, all of them copied by
    the shader (none fell back to a transfer); submitted on the pump's thread,
    and on the copier's own ("-async")."""
    want = reference(paths[name])
    with pyprores.open_decoder(paths[name], _pump=sink, max_in_flight=3) as dec:
        assert dec.pump == sink
        got = list(dec)
        st = dec.stats()
        # under the validation layer (./scripts/test): nothing about the copier's calls
        # (FFmpeg's own submissions, vkQueueSubmit2, give the layer's known noise)
        ours = [m for m in dec._session.validation_messages if "vkQueueSubmit2" not in m]
        assert not ours, ours[:3]
    assert len(got) == len(want) == FRAMES
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"{name} frame {n}")
    assert st["shader_copies"] == FRAMES and st["transfer_copies"] == 0, st


@pytest.mark.parametrize("sink", ["host-shader", "host-shader-async"])
def test_size_change_mid_stream(sink):
    """Frames of a new size come from a new frames context: the copier lets go of
    the views it kept for the old one's images and copies the new ones right."""
    want = reference(SIZE_CHANGE)
    assert len({w.planes["Y"].shape for w in want}) == 2
    with pyprores.open_decoder(SIZE_CHANGE, _pump=sink, max_in_flight=3) as dec:
        got = list(dec)
        st = dec.stats()
    assert len(got) == len(want) and st["shader_copies"] == len(want), st
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"frame {n}")


def _session_with_frame(path: Path) -> tuple[native.Session, Any, Any]:
    """A streaming Vulkan session with its first frame received."""
    L, ffi = native.lib, native.ffi
    with pyprores.open(path) as src:
        packets = list(src.packets())
    s = native.Session("vulkan")
    ptr = s._live()
    s.stream_config(max_in_flight=2, err_detect=False)
    for p in packets:
        s.send_packet(p)
    c = ffi.new("ppr_stream_frame *")
    for _ in range(len(packets) + 1):
        rc = L.ppr_receive_frame(ptr, c)
        if rc == L.PPR_RECV_FRAME:
            return s, ptr, c
        assert rc == L.PPR_RECV_AGAIN
        assert L.ppr_send_packet(ptr, ffi.NULL, 0, 0, 0) in (0, L.PPR_EAGAIN)
    raise AssertionError("no frame")


def test_writes_only_its_planes_and_refuses_what_it_does_not_take(paths):
    L, ffi = native.lib, native.ffi
    want = reference(paths["odd422"])[0]
    sw = native.Session("software")
    assert L.ppr_copier_new(sw._live()) == ffi.NULL
    assert "Vulkan session" in ffi.string(L.ppr_last_error(sw._live())).decode()
    sw.close()

    s, ptr, c = _session_with_frame(paths["odd422"])
    shapes = [(c.layout.plane[i].height, c.layout.plane[i].width) for i in range(c.layout.count)]
    assert [sh for sh in shapes] == [want.planes[k].shape for k in ("Y", "Cb", "Cr")]
    gap = 256                                  # sentinel bytes between and after the planes
    offsets, size = [], gap
    for h, w in shapes:
        offsets.append(size)
        size += (h * w * 2 + 3) // 4 * 4 + gap
    b = ffi.gc(L.ppr_host_buffer_new(ptr, size), L.ppr_host_buffer_free)
    cp = ffi.gc(L.ppr_copier_new(ptr), L.ppr_copier_free)
    assert b != ffi.NULL and cp != ffi.NULL
    data = int(ffi.cast("uintptr_t", L.ppr_host_buffer_data(b)))
    mem = np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", data), size), np.uint8)
    mem[:] = 0xAB

    def planes(stride_extra: int = 0) -> Any:
        pl = ffi.new("ppr_planes *")
        pl.count = len(shapes)
        for i, ((h, w), off) in enumerate(zip(shapes, offsets)):
            p = pl.plane[i]
            p.width, p.height, p.stride = w, h, w * 2 + stride_extra
            p.data = ffi.cast("uint16_t *", data + off)
        return pl

    # padded rows: the shader writes packed planes only (the frame stays the session's)
    assert L.ppr_download_start_shader(ptr, b, cp, planes(stride_extra=4)) == L.PPR_EINVAL
    assert "does not take" in ffi.string(L.ppr_last_error(ptr)).decode()
    assert L.ppr_copier_copies(cp) == 0
    fam, idx = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    assert L.ppr_copier_queue(cp, fam, idx) in (L.PPR_COPY_QUEUE_OWN, L.PPR_COPY_QUEUE_DECODER,
                                                L.PPR_COPY_QUEUE_DECODER_FAMILY)
    assert L.ppr_copier_queue(ffi.NULL, fam, idx) == -1
    assert L.ppr_download_start_shader(ptr, b, cp, planes()) == 0
    assert L.ppr_download_start_shader(ptr, b, cp, planes()) == L.PPR_EINVAL   # taken already
    s.close()                                  # the copier and the buffer outlive the session
    assert L.ppr_host_buffer_wait(b) == 0 and L.ppr_copier_copies(cp) == 1
    written = np.zeros(size, bool)
    for (h, w), off, name in zip(shapes, offsets, ("Y", "Cb", "Cr")):
        got = mem[off:off + h * w * 2].view(np.uint16).reshape(h, w)
        assert np.array_equal(got, want.planes[name]), name
        end = off + (h * w * 2 + 3) // 4 * 4
        written[off:end] = True
        if h * w % 2:                          # the last word's second half: zero
            assert mem[off + h * w * 2:end].tolist() == [0, 0], name
    assert (mem[~written] == 0xAB).all(), np.flatnonzero(mem[~written] != 0xAB)[:8]
    del mem
    ffi.release(cp)
    ffi.release(b)
    assert L.ppr_copier_set_async(ffi.NULL, 1) == L.PPR_EINVAL


def test_async_submission_many_frames_one_buffer(paths):
    """The copier's own thread submits: frame after frame into one host buffer,
    each waited for before the next; every frame equal to the software
    decoder's, and the copier freed with copies queued."""
    L, ffi = native.lib, native.ffi
    want = reference(paths["hq422"])
    with pyprores.open(paths["hq422"]) as src:
        packets = list(src.packets())
    s = native.Session("vulkan")
    ptr = s._live()
    s.stream_config(max_in_flight=2, err_detect=False)
    cp = ffi.gc(L.ppr_copier_new(ptr), L.ppr_copier_free)
    assert L.ppr_copier_set_async(cp, 1) == 0
    b = None
    c = ffi.new("ppr_stream_frame *")
    got = []
    pending = list(packets) + [None]
    while len(got) < len(want):
        rc = L.ppr_receive_frame(ptr, c)
        if rc == L.PPR_RECV_AGAIN:
            p = pending.pop(0)
            assert (s.send_packet(p) if p is not None else
                    L.ppr_send_packet(ptr, ffi.NULL, 0, 0, 0)) is not None
            continue
        assert rc == L.PPR_RECV_FRAME
        shapes = [(c.layout.plane[i].height, c.layout.plane[i].width) for i in range(3)]
        offs = np.cumsum([0] + [(h * w * 2 + 255) // 256 * 256 for h, w in shapes])
        if b is None:
            b = ffi.gc(L.ppr_host_buffer_new(ptr, int(offs[-1])), L.ppr_host_buffer_free)
        data = int(ffi.cast("uintptr_t", L.ppr_host_buffer_data(b)))
        pl = ffi.new("ppr_planes *")
        pl.count = 3
        for i, (h, w) in enumerate(shapes):
            pl.plane[i].width, pl.plane[i].height, pl.plane[i].stride = w, h, w * 2
            pl.plane[i].data = ffi.cast("uint16_t *", data + int(offs[i]))
        assert L.ppr_download_start_shader(ptr, b, cp, pl) == 0
        assert L.ppr_host_buffer_wait(b) == 0
        mem = np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", data), int(offs[-1])), np.uint8)
        got.append({k: mem[offs[i]:offs[i] + h * w * 2].view(np.uint16).reshape(h, w).copy()
                    for i, (k, (h, w)) in enumerate(zip(("Y", "Cb", "Cr"), shapes))})
        del mem
    for g, w in zip(got, want):
        for k in g:
            assert np.array_equal(g[k], w.planes[k]), k
    assert L.ppr_copier_copies(cp) == len(want)
    ffi.release(cp)
    ffi.release(b)
    s.close()


def test_early_exit_leaves_no_thread_or_buffer(paths):
    """A decoder left after its first frame, with copies queued on the copier's
    thread: closing it ends that thread and frees every host buffer once the
    frames kept are dropped; the kept frame still holds its samples."""
    import gc
    from test_stream import threads
    keep = native.Session("vulkan")   # lavapipe's device threads stay with the shared device
    want = reference(paths["hq422"])[0]
    for _ in range(2):                # the first run starts what stays (the device's threads)
        dec = pyprores.open_decoder(paths["hq422"], _pump="host-shader-async", max_in_flight=3)
        kept = next(iter(dec))
        dec.close()
        del dec
        gc.collect()
        if _ == 0:
            base = threads()
    assert threads() <= base
    assert_same(kept, want)
    del kept
    gc.collect()
    assert native.lib.ppr_host_buffers_live() == 0
    keep.close()


def test_gpu_time_of_the_copies(paths, monkeypatch):
    """PYPRORES_COPY_GPU_TIME=1: timestamps around each copy's dispatch, read back
    once its slot comes round again; the frames are the same."""
    want = reference(paths["hq422"])
    monkeypatch.setenv("PYPRORES_COPY_GPU_TIME", "1")
    with pyprores.open(paths["hq422"]) as src:
        tag = src.info.codec_tag
        packets = list(src.packets()) * 6      # more copies than the copier's 16 slots
    with pyprores.open_decoder(packets, codec_tag=tag, _pump="host-shader", max_in_flight=3) as dec:
        got = list(dec)
        st = dec.stats()
    for n, g in enumerate(got):
        assert_same(g, want[n % FRAMES], f"frame {n}")
    assert st["shader_copies"] == len(packets)
    # the copies whose slot came round again: all but the last SLOTS (16) at most
    assert len(packets) - 16 <= st["copies_gpu_timed"] < len(packets) and st["copy_gpu_ns"] > 0, st
    monkeypatch.delenv("PYPRORES_COPY_GPU_TIME")
    with pyprores.open_decoder(paths["hq422"], _pump="host-shader") as dec:
        list(dec)
        assert dec.stats()["copies_gpu_timed"] == 0


# VkQueueFlagBits
G, C, T, SPARSE, DECODE = 0x1, 0x2, 0x4, 0x8, 0x20


def _pick(families: list[tuple[int, int, int, int]], decoder_queues: int) -> tuple[int, int, int]:
    """ppr_copy_queue_pick over (index, flags, roles, queues) in the context's order."""
    L, ffi = native.lib, native.ffi
    arr = ffi.new("ppr_queue_family[]", max(len(families), 1))
    for i, (index, flags, roles, queues) in enumerate(families):
        arr[i].index, arr[i].flags, arr[i].roles, arr[i].queues = index, flags, roles, queues
    fam, idx = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    rc = L.ppr_copy_queue_pick(arr, len(families), decoder_queues, fam, idx)
    return rc, int(fam[0]), int(idx[0])


def test_copy_queue_pick_leaves_the_decoders_queues_alone():
    """The copier's queue from the device's families and the device context's
    qf[] as FFmpeg's setup_queue_families makes it (each family listed with the
    roles it was picked for). NVIDIA H100 (driver 580): family 0 graphics +
    compute + transfer, enabled for graphics with one queue, 1 transfer, 2
    compute, which the decoder takes (4 queues with the 7.1.5 series): the
    copies go to family 0, which can compute and which nothing of FFmpeg's
    submits to, not to the decoder's family 2. AMD (RADV): the same with
    graphics family 0 and compute family 1. One family (lavapipe, Intel): a
    queue the decoder leaves alone when it has more than the decoder takes,
    else the decoder's last one, and the answer says so."""
    L = native.lib
    h100 = [(0, G | C | T | SPARSE, G, 1), (2, C | T | SPARSE, C, 4), (1, T | SPARSE, T, 2),
            (3, DECODE | T, DECODE, 4)]
    assert _pick(h100, 4) == (L.PPR_COPY_QUEUE_OWN, 0, 0)
    radv = [(0, G | C | T | SPARSE, G, 1), (1, C | T | SPARSE, C | T, 4), (2, DECODE, DECODE, 1)]
    assert _pick(radv, 0) == (L.PPR_COPY_QUEUE_OWN, 0, 0)
    # another compute family FFmpeg submits transfers to comes after one it leaves alone
    busy = [(1, C | T, C, 4), (2, C | T, T, 2), (0, G | C | T, G, 1)]
    assert _pick(busy, 0) == (L.PPR_COPY_QUEUE_OWN, 0, 0)
    assert _pick(busy[:2], 0) == (L.PPR_COPY_QUEUE_OWN, 2, 1)
    # one family: the decoder's; a queue of it the decoder does not take, if any
    one = [(0, G | C | T | SPARSE, G | C | T, 8)]
    assert _pick(one, 4) == (L.PPR_COPY_QUEUE_DECODER_FAMILY, 0, 7)
    assert _pick(one, 0) == (L.PPR_COPY_QUEUE_DECODER, 0, 7)
    assert _pick(one, 8) == (L.PPR_COPY_QUEUE_DECODER, 0, 7)
    assert _pick([(0, G | C | T, G | C | T, 1)], 4) == (L.PPR_COPY_QUEUE_DECODER, 0, 0)
    # a family listed twice (a caller's device context): still the decoder's
    assert _pick([(0, G | C | T, C, 2), (0, G | C | T, G, 2)], 1) == (L.PPR_COPY_QUEUE_DECODER_FAMILY, 0, 1)
    assert _pick([(1, T, T, 2)], 0)[0] == L.PPR_ENODEVICE


def test_copier_takes_the_queue_its_device_gives(paths):
    """On this machine's device: the copier's queue is what ppr_copy_queue_pick
    gives for the device context's families, on a family that can compute, and
    off the decoder's family (the first with the compute role) when it says so."""
    L, ffi = native.lib, native.ffi
    s, ptr, _ = _session_with_frame(paths["hq422"])
    cp = ffi.gc(L.ppr_copier_new(ptr), L.ppr_copier_free)
    assert cp != ffi.NULL
    dq = ffi.new("int *")
    nb = L.ppr_copier_families(cp, ffi.NULL, 0, dq)
    assert nb >= 1 and L.ppr_copier_families(ffi.NULL, ffi.NULL, 0, dq) == -1
    arr = ffi.new("ppr_queue_family[]", nb)
    assert L.ppr_copier_families(cp, arr, nb, dq) == nb
    families = [(f.index, f.flags, f.roles, f.queues) for f in arr]
    fam, idx = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    where = L.ppr_copier_queue(cp, fam, idx)
    assert (where, fam[0], idx[0]) == _pick(families, dq[0]), families
    mine = [f for f in families if f[0] == fam[0]]
    decoder = next(f for f in families if f[2] & C)
    assert mine and mine[0][1] & C and idx[0] < mine[0][3], families
    assert (fam[0] == decoder[0]) == (where != L.PPR_COPY_QUEUE_OWN), families
    s.close()
