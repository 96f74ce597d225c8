"""The streaming decode API (issue 21): pyprores.open_decoder on tiny clips, lavapipe.

Frames of both backends must equal FFmpeg's software decoder through PyAV
(the reference), with several frames in flight; early exit, an exception in
the loop body and close leave no decoder thread running; a truncated file
delivers its complete frames and then a DecodeError; a file without ProRes
is a NotProResError; a size change mid-stream gives correct frames.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from conftest import default_specs, faststart_copy, write_mpeg4_mov

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native, stream
from pyprores.errors import DecodeError, NotProResError

HAS_VK = native.available() and native.has_hwaccel("vulkan")
BACKENDS = ["software", pytest.param("vulkan", marks=pytest.mark.skipif(
    not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel"))]
FRAMES = 6
SPECS = default_specs(FRAMES)
SPECS["odd4444"] = clips.ClipSpec("odd4444", width=40, height=33, frames=FRAMES, profile="4444",
                                  pix_fmt="yuv444p10le")
SIZE_CHANGE = Path(__file__).resolve().parent / "data" / "regressions" / "size-change-72x40-200x100.mov"


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("stream")
    return {name: clips.generate(spec, d) for name, spec in SPECS.items()}


def reference(path: Path) -> list[pyprores.Frame]:
    with pyprores.open(path) as src:
        return list(src.reference_frames())


def pts_of(path: Path) -> list[int]:
    with av.open(str(path)) as c:
        return [p.pts for p in c.demux(c.streams.video[0]) if p.size]


def assert_same(got, want, what=""):
    assert list(got.planes) == list(want.planes), what
    assert got.pix_fmt == want.pix_fmt and got.bit_depth == want.bit_depth, what
    for k in want.planes:
        assert got.planes[k].shape == want.planes[k].shape, (what, k)
        assert np.array_equal(got.planes[k], want.planes[k]), (what, k)


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SPECS))
def test_frames_equal_the_software_decoder(paths, backend, name):
    want = reference(paths[name])
    with pyprores.open_decoder(paths[name], backend=backend, max_in_flight=3) as dec:
        got = list(dec)
        if backend == "vulkan":
            assert dec._session.validation_count == 0, dec._session.validation_messages
    assert len(got) == FRAMES
    order = "tt" if SPECS[name].interlaced else "progressive"
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"{name} frame {n}")
        assert g.index == n and g.field_order == order and not g.corrupt
        assert g.extra["backend"] == backend and g.concealed == ()
    assert [g.pts for g in got] == pts_of(paths[name])
    assert got[1].time == pytest.approx(float(got[1].pts * dec.time_base))
    assert (got[0].width, got[0].height) == (SPECS[name].width, SPECS[name].height)


DOWNLOADS = {"gpu": {}, "hwcontext": {"gpu_download": False},
             "thread": {"download_thread": True}}


@pytest.mark.parametrize("download", list(DOWNLOADS))
@pytest.mark.parametrize("in_flight", [1, 2, 3, 4, 8])
def test_frames_in_flight(paths, in_flight, download):
    """Frames come out in order, each with its own packet's pts, whatever the
    frames in flight, whichever way they are downloaded."""
    if not HAS_VK:
        pytest.skip("this FFmpeg build has no prores_vulkan hwaccel")
    want = reference(paths["hq422"])
    with pyprores.open(paths["hq422"]) as src:
        packets = list(src.packets())
    source = [(p, 1000 + 7 * n) for n, p in enumerate(packets * 2)]
    with pyprores.open_decoder(source, backend="vulkan", max_in_flight=in_flight,
                               codec_tag="apch", **DOWNLOADS[download]) as dec:
        got = list(dec)
        assert dec.download == download
    assert len(got) == 2 * FRAMES
    assert [g.index for g in got] == list(range(2 * FRAMES))
    assert [g.pts for g in got] == [1000 + 7 * n for n in range(2 * FRAMES)]
    for g, w in zip(got, want * 2):
        assert_same(g, w)
    assert not download_threads() and native.lib.ppr_frames_live() == 0


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("backend", BACKENDS)
def test_packets_as_source(paths, backend, prefetch):
    with pyprores.open(paths["4444alpha"]) as src:
        packets = list(src.packets())
    want = reference(paths["4444alpha"])
    with pyprores.open_decoder(iter(packets), backend=backend, codec_tag="ap4h",
                               prefetch=prefetch) as dec:
        got = list(dec)
    assert len(got) == FRAMES and all(g.pts is None and g.time is None for g in got)
    for g, w in zip(got, want):
        assert_same(g, w)
    with pyprores.open_decoder([(p, 10 * n) for n, p in enumerate(packets)], backend=backend,
                               codec_tag="ap4h", prefetch=prefetch) as dec:
        assert [f.pts for f in dec] == [10 * n for n in range(FRAMES)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reused_and_caller_buffers(paths, backend):
    want = reference(paths["hq422"])
    with pyprores.open_decoder(paths["hq422"], backend=backend, reuse_buffers=True) as dec:
        seen = []
        for frame, w in zip(dec, want):
            assert_same(frame, w)
            seen.append(frame.planes["Y"])
    assert all(a is seen[0] for a in seen)
    spec = SPECS["hq422"]
    # rows padded by 8 samples: written through the stride, the padding untouched
    store = {k: np.full((spec.height, wd + 8), 7, np.uint16)
             for k, wd in (("Y", spec.width), ("Cb", spec.width // 2), ("Cr", spec.width // 2))}
    views = {k: v[:, :-8] for k, v in store.items()}
    with pyprores.open_decoder(paths["hq422"], backend=backend, reuse_buffers=views) as dec:
        for frame, w in zip(dec, want):
            assert frame.planes is views
            assert_same(frame, w)
            assert all((v[:, -8:] == 7).all() for v in store.values())
    wrong = {"Y": np.zeros((4, 4), np.uint16)}
    with pyprores.open_decoder(paths["hq422"], backend=backend, reuse_buffers=wrong) as dec:
        with pytest.raises(ValueError, match="buffers"):
            next(iter(dec))


@pytest.mark.parametrize("backend", BACKENDS)
def test_early_exit_and_interrupt_leave_nothing_running(paths, backend):
    path = paths["hq422"]

    def early_exit():
        dec = pyprores.open_decoder(path, backend=backend, max_in_flight=4)
        for n, frame in enumerate(dec):
            if n == 1:
                break
        dec.close()
        dec.close()                                              # idempotent
        return dec

    # lavapipe leaves threads behind for every Vulkan device created and
    # destroyed (the one-call Session does too): a session held open keeps
    # the shared device, so that only the decoder's own threads are counted
    keep = native.Session(backend)
    early_exit()
    base = threads()
    for _ in range(3):    # the decoder's frame threads do not pile up
        dec = early_exit()
    assert threads() <= base
    with pytest.raises(ValueError, match="closed"):
        iter(dec)
    with pytest.raises(KeyboardInterrupt):
        with pyprores.open_decoder(path, backend=backend, max_in_flight=4) as dec:
            for n, frame in enumerate(dec):
                if n == 2:
                    raise KeyboardInterrupt
    assert dec._session is None and threads() <= base and not prefetch_threads()
    assert not download_threads() and native.lib.ppr_frames_live() == 0
    # a decoder left unclosed is released by the garbage collector too
    dec = pyprores.open_decoder(path, backend=backend)
    next(iter(dec))
    del dec
    import gc
    gc.collect()
    assert threads() <= base
    assert not download_threads() and native.lib.ppr_frames_live() == 0
    keep.close()


def _cut(path: Path, tmp_path: Path) -> Path:
    out = faststart_copy(path, tmp_path / "cut.mov")
    data = out.read_bytes()
    out.write_bytes(data[: len(data) * 5 // 8])     # the index is up front
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncated_file_gives_its_frames_then_an_error(paths, backend, tmp_path):
    want = reference(paths["hq422"])
    cut = _cut(paths["hq422"], tmp_path)
    got = []
    with pytest.raises(DecodeError, match="ends early"):
        with pyprores.open_decoder(cut, backend=backend) as dec:
            for frame in dec:
                got.append(frame)
    assert 0 < len(got) < FRAMES
    for g, w in zip(got, want):
        assert_same(g, w)
    (tmp_path / "nomoov.mov").write_bytes(paths["hq422"].read_bytes()[:20000])
    with pytest.raises(DecodeError, match="incomplete"):
        pyprores.open_decoder(tmp_path / "nomoov.mov", backend=backend)


def test_no_prores_stream(tmp_path):
    other = tmp_path / "mpeg4.mov"
    write_mpeg4_mov(other)
    with pytest.raises(NotProResError, match="no ProRes video stream"):
        pyprores.open_decoder(other, backend="software")
    text = tmp_path / "notes.txt"
    text.write_text("not a video\n")
    with pytest.raises(NotProResError):
        pyprores.open_decoder(text, backend="software")
    with pyprores.open_decoder([b"not prores at all"], backend="software") as dec:
        with pytest.raises(NotProResError):
            list(dec)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("download_thread", [True, False])
def test_size_change_mid_stream(backend, download_thread):
    want = reference(SIZE_CHANGE)
    sizes = {w.planes["Y"].shape for w in want}
    assert len(sizes) == 2, sizes
    with pyprores.open_decoder(SIZE_CHANGE, backend=backend, max_in_flight=3,
                               download_thread=download_thread) as dec:
        got = list(dec)
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"frame {n}")
        assert g.index == n


def prefetch_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "pyprores-prefetch"]


def download_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "pyprores-download"]


class Source:
    """A packet generator that counts what was read and where it was closed."""

    def __init__(self, packets, fail_at: int | None = None) -> None:
        self.packets, self.fail_at = packets, fail_at
        self.read = 0
        self.closed_in: str | None = None

    def __iter__(self):
        try:
            for n, p in enumerate(self.packets):
                if n == self.fail_at:
                    raise RuntimeError(f"source failed at packet {n}")
                self.read += 1
                yield p
        finally:
            self.closed_in = threading.current_thread().name


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefetch_across_a_size_change(backend):
    """Packets prepared ahead of a size change: the change waits for the frames
    in flight, prepared packets of either size are sent by reference, frames
    equal the reference whatever the depth (0: no prefetch thread)."""
    want = reference(SIZE_CHANGE)
    with pyprores.open(SIZE_CHANGE) as src:
        packets = list(src.packets())
        tag = src.info.codec_tag
    for prefetch in (0, 1, 5):
        src = Source(packets)
        with pyprores.open_decoder(iter(src), backend=backend, codec_tag=tag, max_in_flight=3,
                                   prefetch=prefetch) as dec:
            got = list(dec)
        assert src.closed_in == ("pyprores-prefetch" if prefetch else "MainThread")
        assert len(got) == len(want), prefetch
        for n, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"prefetch {prefetch} frame {n}")
    assert not prefetch_threads()


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefetch_early_exit_and_source_error(paths, backend):
    """Leaving with packets prepared and not sent frees them and ends the
    prefetch thread; it reads at most ``prefetch`` + 1 packets past what the
    decoder took; an error of the source reaches the caller after the frames
    before it."""
    with pyprores.open(paths["hq422"]) as src:
        packets = list(src.packets())
    keep = native.Session(backend)
    src = Source(packets * 20)
    with pyprores.open_decoder(iter(src), backend=backend, codec_tag="apch", max_in_flight=2,
                               prefetch=3) as dec:
        it = iter(dec)
        next(it)
        # the decoder took at most max_in_flight + 1 packets for its first frame
        deadline = time.monotonic() + 10
        while src.read < 3 + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert prefetch_threads()
    assert not prefetch_threads()
    assert src.closed_in == "pyprores-prefetch"
    # the first frame is delivered once stream._DEPTH more were handed to the download thread
    assert 3 <= src.read <= 2 + 1 + 3 + 2 + stream._DEPTH, src.read
    with pytest.raises(KeyboardInterrupt):
        with pyprores.open_decoder(packets * 20, backend=backend, codec_tag="apch",
                                   prefetch=4) as dec:
            for frame in dec:
                raise KeyboardInterrupt
    assert not prefetch_threads()
    src = Source(packets, fail_at=3)
    got = []
    with pytest.raises(RuntimeError, match="failed at packet 3"):
        with pyprores.open_decoder(iter(src), backend=backend, codec_tag="apch") as dec:
            for frame in dec:
                got.append(frame)
    assert not prefetch_threads() and len(got) <= 3
    keep.close()


def test_bad_arguments(paths):
    with pytest.raises(ValueError, match="max_in_flight"):
        pyprores.open_decoder(paths["hq422"], backend="software", max_in_flight=0)
    with pytest.raises(ValueError, match="prefetch"):
        pyprores.open_decoder(paths["hq422"], backend="software", prefetch=-1)
    with pytest.raises(ValueError, match="backend"):
        pyprores.open_decoder(paths["hq422"], backend="cuda")


@pytest.mark.parametrize("download_thread", [True, False])
def test_planes_recycled_only_once_let_go(tmp_path, download_thread):
    """Without reuse_buffers, a frame's planes are written again only when
    nothing holds them (the download thread's frames count as held): a kept
    frame or view keeps its samples, dropped ones are recycled (no fresh
    pages per frame)."""
    path = clips.generate(clips.ClipSpec(**{**SPECS["hq422"].__dict__, "frames": 12}), tmp_path)
    want = reference(path)
    seen: list[weakref.ref] = []
    reused = 0
    with pyprores.open_decoder(path, backend="software", download_thread=download_thread) as dec:
        kept_frame, kept_view = None, None
        for n, frame in enumerate(dec):
            assert_same(frame, want[n], f"frame {n}")
            y = frame.planes["Y"]
            reused += any(r() is y for r in seen)   # an earlier frame's array, written again
            seen.append(weakref.ref(y))
            if n == 0:
                kept_frame = frame
            elif n == 1:
                kept_view = frame.planes["Cb"][1:, :]   # a view holds its base
            del frame, y
    assert_same(kept_frame, want[0], "kept frame")
    assert np.array_equal(kept_view, want[1].planes["Cb"][1:, :])
    assert reused, "dropped frames' planes were never reused"


@pytest.mark.parametrize("backend", BACKENDS)
def test_download_thread_early_exit_and_error(paths, backend, monkeypatch):
    """Leaving with downloads pending ends the download thread and frees every
    frame handle; a download that fails raises at its own frame, after the
    frames before it; reuse_buffers and download_thread=False download on
    the caller's thread."""
    path = paths["hq422"]
    keep = native.Session(backend)
    with pyprores.open_decoder(path, backend=backend, max_in_flight=4,
                               download_thread=True) as dec:
        it = iter(dec)
        next(it)
        assert download_threads() and dec._downloader is not None
    assert not download_threads() and native.lib.ppr_frames_live() == 0
    # an exception in the loop body with downloads pending
    with pytest.raises(KeyboardInterrupt):
        with pyprores.open_decoder(path, backend=backend, max_in_flight=2,
                                   download_thread=True) as dec:
            for frame in dec:
                raise KeyboardInterrupt
    assert not download_threads() and native.lib.ppr_frames_live() == 0
    # no thread: reuse_buffers (one set of arrays, the caller's while it reads them), off, default
    for kwargs in ({"reuse_buffers": True, "download_thread": True}, {"download_thread": False}, {}):
        with pyprores.open_decoder(path, backend=backend, **kwargs) as dec:
            assert sum(1 for _ in dec) == FRAMES
            assert dec._downloader is None
    # frame 3's planes do not match its layout: ppr_frame_download refuses them
    planes = stream.StreamDecoder._planes

    def bad_planes(self, layout, arrays):
        got = planes(self, layout, arrays)
        if self._count == 3:
            got[0].count = 1
        return got
    monkeypatch.setattr(stream.StreamDecoder, "_planes", bad_planes)
    want = reference(path)
    got = []
    with pytest.raises(ValueError, match="the frame has 3 planes, got 1"):
        with pyprores.open_decoder(path, backend=backend, max_in_flight=4,
                                   download_thread=True) as dec:
            for frame in dec:
                got.append(frame)
    assert [g.index for g in got] == [0, 1, 2]
    for g, w in zip(got, want):
        assert_same(g, w)
    assert not download_threads() and native.lib.ppr_frames_live() == 0
    keep.close()


def host_buffers() -> int:
    gc.collect()
    return native.lib.ppr_host_buffers_live()


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_gpu_download_buffers_live_as_long_as_their_planes(tmp_path):
    """With gpu_download (the Vulkan default) a frame's planes are views of
    a host buffer the GPU wrote: a kept frame keeps its buffer and samples
    after the decoder closed, dropped frames' buffers are written again,
    and none is left once nothing holds them, early exit included."""
    path = clips.generate(clips.ClipSpec(**{**SPECS["4444alpha"].__dict__, "frames": 12}), tmp_path)
    want = reference(path)
    base = host_buffers()
    held, most = [], 0
    with pyprores.open_decoder(path, backend="vulkan", max_in_flight=4) as dec:
        for n, frame in enumerate(dec):
            assert dec.download == "gpu"
            assert_same(frame, want[n], f"frame {n}")
            if n in (0, 5):
                held.append(frame)
            del frame
            most = max(most, native.lib.ppr_host_buffers_live() - base)
    # 2 held + at most 2 copies in flight + the frame handed out + spares
    assert most <= stream._SPARE + 2, most
    assert host_buffers() - base == 2            # the spare ones went with the decoder
    for f in held:
        assert_same(f, want[f.index], f"kept frame {f.index}")
        assert f.planes["A"].base is not None    # a view of the host buffer
    view = held[1].planes["Y"][3:, 1:]
    del held, f
    assert host_buffers() - base == 1            # the view holds its buffer
    assert np.array_equal(view, want[5].planes["Y"][3:, 1:])
    del view
    assert host_buffers() == base
    # leaving with copies in flight
    with pytest.raises(KeyboardInterrupt):
        with pyprores.open_decoder(path, backend="vulkan", max_in_flight=4) as dec:
            for frame in dec:
                raise KeyboardInterrupt
    del frame
    assert host_buffers() == base and native.lib.ppr_frames_live() == 0
    assert not prefetch_threads()
    # one set of planes, written again for every frame
    with pyprores.open_decoder(path, backend="vulkan", reuse_buffers=True) as dec:
        seen = []
        for frame, w in zip(dec, want):
            assert_same(frame, w)
            seen.append(frame.planes["Y"])
    assert all(a is seen[0] for a in seen) and dec.download == "gpu"
    del seen, frame
    assert host_buffers() == base
    with pytest.raises(ValueError, match="gpu_download"):
        pyprores.open_decoder(path, backend="software", gpu_download=True)
    with pytest.raises(ValueError, match="gpu_download"):
        pyprores.open_decoder(path, backend="vulkan", gpu_download=True, download_thread=True)


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_host_buffer_checks_its_planes(paths):
    """ppr_download_start() writes only inside its buffer, on 4-byte
    boundaries, one copy at a time, and only a received Vulkan frame."""
    L, ffi = native.lib, native.ffi
    want = reference(paths["hq422"])
    with pyprores.open(paths["hq422"]) as src:
        packets = list(src.packets())
    base = host_buffers()
    sw = native.Session("software")
    assert L.ppr_host_buffer_new(sw._live(), 4096) == ffi.NULL
    assert "Vulkan session" in ffi.string(L.ppr_last_error(sw._live())).decode()
    sw.close()
    s = native.Session("vulkan")
    ptr = s._live()
    assert L.ppr_host_buffer_new(ptr, 0) == ffi.NULL
    s.stream_config(max_in_flight=2, err_detect=False)

    def receive() -> Any:
        c = ffi.new("ppr_stream_frame *")
        for _ in range(len(packets)):
            rc = L.ppr_receive_frame(ptr, c)
            if rc == L.PPR_RECV_FRAME:
                return c
            assert rc == L.PPR_RECV_AGAIN
            assert L.ppr_send_packet(ptr, ffi.NULL, 0, 0, 0) in (0, L.PPR_EAGAIN)
        raise AssertionError("no frame")

    for p in packets:
        assert s.send_packet(p) or True
    c = receive()
    sizes = [c.layout.plane[i].width * c.layout.plane[i].height * 2 for i in range(3)]
    size = sum(sizes) + 64
    b = ffi.gc(L.ppr_host_buffer_new(ptr, size), L.ppr_host_buffer_free)
    assert b != ffi.NULL and L.ppr_host_buffer_size(b) == size
    data = int(ffi.cast("uintptr_t", L.ppr_host_buffer_data(b)))

    def planes(offsets, width_delta=0) -> Any:
        pl = ffi.new("ppr_planes *")
        pl.count = 3
        for i, off in enumerate(offsets):
            p = pl.plane[i]
            p.width = c.layout.plane[i].width + width_delta
            p.height = c.layout.plane[i].height
            p.stride = p.width * 2
            p.data = ffi.cast("uint16_t *", data + off)
        return pl
    good = [0, sizes[0], sizes[0] + sizes[1]]
    outside = np.empty(sizes[0] // 2, np.uint16)
    cases = {
        "inside the host buffer": planes([0, sizes[0], size + 4096]),
        "4-byte boundary": planes([2, sizes[0] + 4, sizes[0] + sizes[1] + 4]),
        "ends past": planes([0, sizes[0], sizes[0] + sizes[1] + 128]),
        "the frame's plane": planes(good, width_delta=-2),
    }
    for what, pl in cases.items():
        assert L.ppr_download_start(ptr, b, pl) == L.PPR_EINVAL, what
        assert what in ffi.string(L.ppr_last_error(ptr)).decode()
    pl = planes(good)
    pl.plane[0].data = ffi.cast("uint16_t *", outside.ctypes.data)
    assert L.ppr_download_start(ptr, b, pl) == L.PPR_EINVAL
    # the frame is still the session's after each refusal
    assert L.ppr_download_start(ptr, b, planes(good)) == 0
    assert L.ppr_download_start(ptr, b, planes(good)) == L.PPR_EINVAL   # taken already
    assert "no frame received" in ffi.string(L.ppr_last_error(ptr)).decode()
    c = receive()
    assert L.ppr_download_start(ptr, b, planes(good)) == L.PPR_EINVAL   # a copy pending
    assert "in progress" in ffi.string(L.ppr_last_error(ptr)).decode()
    assert L.ppr_host_buffer_wait(b) == 0 and L.ppr_host_buffer_wait(b) == 0
    mem = np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", data), size), np.uint16)
    for i, name in enumerate(("Y", "Cb", "Cr")):
        got = mem[good[i] // 2: good[i] // 2 + sizes[i] // 2]
        assert np.array_equal(got.reshape(want[0].planes[name].shape), want[0].planes[name])
    assert L.ppr_download_start(ptr, b, planes(good)) == 0   # the second frame
    del mem
    s.close()                                 # the buffer outlives its session
    assert L.ppr_host_buffer_wait(b) == 0
    mem = np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", data), size), np.uint16)
    assert np.array_equal(mem[:sizes[0] // 2].reshape(want[1].planes["Y"].shape),
                          want[1].planes["Y"])
    del mem
    ffi.release(b)
    assert host_buffers() == base
