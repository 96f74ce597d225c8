"""The pump (csrc/cudaip.c, ppr_pump): send, receive and copy on a C thread of
its own, as open_decoder(..., output="cuda") decodes. Here (lavapipe, no CUDA)
it runs with its host sink (``_pump="host"``: each frame copied into a host
buffer of its own) and with no sink (``_pump="none"``), which share every line
of the pump but the CUDA buffer: frames in order and equal to the software
decoder's, from a file and from packets, across a size change; errors after
the frames before them; early exit, an exception in the loop and the garbage
collector leave no thread, packet or buffer behind.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native
from pyprores.errors import DecodeError

from conftest import default_specs
from test_stream import SIZE_CHANGE, Source, _cut, assert_same, reference, threads

HAS_VK = native.available() and native.has_hwaccel("vulkan")
pytestmark = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
FRAMES = 5


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pump")
    return {name: clips.generate(s, d) for name, s in default_specs(FRAMES).items()}


def packets_of(path: Path) -> tuple[list[bytes], str]:
    with pyprores.open(path) as src:
        return list(src.packets()), src.info.codec_tag


def pump_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "pyprores-prefetch"]


@pytest.mark.parametrize("source", ["file", "packets"])
def test_frames_equal_the_software_decoder(paths, source):
    """4:2:2, 4:4:4 + alpha and interlaced, through the pump's host sink: every
    frame, in order, with its index, pts and field order as the loop gives them."""
    for name, path in paths.items():
        want = reference(path)
        with pyprores.open_decoder(path) as dec:
            meta = [(f.index, f.pts, f.field_order, f.corrupt) for f in dec]
        if source == "file":
            dec = pyprores.open_decoder(path, _pump="host", max_in_flight=3)
        else:
            packets, tag = packets_of(path)
            dec = pyprores.open_decoder(list(zip(packets, [m[1] for m in meta])), codec_tag=tag,
                                        _pump="host", max_in_flight=3)
        with dec:
            assert dec.pump == "host"
            got = list(dec)
            st = dec.stats()
        assert len(got) == len(want) == FRAMES, name
        for g, w, m in zip(got, want, meta):
            assert_same(g, w, name)
            assert (g.index, g.pts, g.field_order, g.corrupt) == m, name
        assert st["frames"] == st["packets"] == FRAMES and st["send_ns"] > 0, st
    del got, g, w, dec
    gc.collect()
    assert native.lib.ppr_host_buffers_live() == 0   # the frames' planes held their buffers


def test_size_change_mid_stream():
    want = reference(SIZE_CHANGE)
    assert len({w.planes["Y"].shape for w in want}) == 2
    for src in (SIZE_CHANGE, "packets"):
        if src == "packets":
            packets, tag = packets_of(SIZE_CHANGE)
            dec = pyprores.open_decoder(packets, codec_tag=tag, _pump="host", max_in_flight=3)
        else:
            dec = pyprores.open_decoder(src, _pump="host", max_in_flight=3)
        with dec:
            got = list(dec)
        assert len(got) == len(want)
        for n, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{src} frame {n}")
            assert g.index == n


def test_no_copy_sink_counts_the_frames(paths):
    with pyprores.open_decoder(paths["hq422"], _pump="none") as dec:
        got = list(dec)
    assert [f.index for f in got] == list(range(FRAMES)) and all(not f.planes for f in got)


def test_errors_come_after_the_frames_before_them(paths, tmp_path):
    want = reference(paths["hq422"])
    got = []
    with pytest.raises(DecodeError, match="ends early"):
        with pyprores.open_decoder(_cut(paths["hq422"], tmp_path), _pump="host") as dec:
            for frame in dec:
                got.append(frame)
    assert 0 < len(got) < FRAMES
    for g, w in zip(got, want):
        assert_same(g, w)
    # a packet the decoder refuses: the frames before it, then its error naming it
    packets, tag = packets_of(paths["hq422"])
    got = []
    with pytest.raises(pyprores.NotProResError):
        with pyprores.open_decoder(packets[:2] + [b"not prores at all"] + packets, codec_tag=tag,
                                   _pump="host", max_in_flight=2) as dec:
            for frame in dec:
                got.append(frame)
    assert len(got) <= 2
    for g, w in zip(got, want):
        assert_same(g, w)
    # the source's own error, after the frames of the packets before it
    got = []
    src = Source(packets, fail_at=3)
    with pytest.raises(RuntimeError, match="failed at packet 3"):
        with pyprores.open_decoder(iter(src), codec_tag=tag, _pump="host") as dec:
            for frame in dec:
                got.append(frame)
    assert len(got) == 3 and src.closed_in == "pyprores-prefetch"
    for g, w in zip(got, want):
        assert_same(g, w)
    assert not pump_threads()


def test_early_exit_interrupt_and_collection_leave_nothing(paths):
    path = paths["hq422"]
    packets, tag = packets_of(path)
    keep = native.Session("vulkan")   # lavapipe's device threads stay with the shared device

    def early_exit(source):
        kw = {"codec_tag": tag} if source is not path else {}
        dec = pyprores.open_decoder(source, _pump="host", max_in_flight=2, prefetch=1, **kw)
        for n, frame in enumerate(dec):
            if n == 1:
                break
        dec.close()
        dec.close()
        return dec

    early_exit(path)
    base = threads()
    for source in (path, packets * 4, path, packets * 4):
        early_exit(source)
    gc.collect()
    assert threads() <= base and not pump_threads()
    assert native.lib.ppr_readers_live() == 0 and native.lib.ppr_host_buffers_live() == 0
    with pytest.raises(KeyboardInterrupt):
        with pyprores.open_decoder(packets * 4, codec_tag=tag, _pump="host") as dec:
            for frame in dec:
                raise KeyboardInterrupt
    dec = pyprores.open_decoder(path, _pump="host")
    kept = next(iter(dec))
    del dec
    gc.collect()
    assert threads() <= base and not pump_threads() and native.lib.ppr_readers_live() == 0
    # a frame kept after its decoder went keeps its buffer, and its samples
    assert_same(kept, reference(path)[0])
    del kept, frame
    gc.collect()
    assert native.lib.ppr_host_buffers_live() == 0
    keep.close()


def test_pump_arguments(paths):
    with pytest.raises(ValueError, match="_pump"):
        pyprores.open_decoder(paths["hq422"], _pump="host", output="cuda")
    with pytest.raises(ValueError, match="_pump"):
        pyprores.open_decoder(paths["hq422"], _pump="cuda")
    with pytest.raises(ValueError, match="_pump"):
        pyprores.open_decoder(paths["hq422"], _pump="host", backend="software")
    L, ffi = native.lib, native.ffi
    out = ffi.new("ppr_pump **")
    assert L.ppr_pump_open(out, ffi.NULL, ffi.NULL, L.PPR_PUMP_NONE, ffi.NULL, 0, 4) == L.PPR_EINVAL
    with native.Session("vulkan") as s:
        assert L.ppr_pump_open(out, s._ptr, ffi.NULL, L.PPR_PUMP_CUDA, ffi.NULL, 0, 4) == L.PPR_EINVAL
        assert L.ppr_pump_open(out, s._ptr, ffi.NULL, L.PPR_PUMP_NONE, ffi.NULL, 0, 0) == L.PPR_EINVAL
    L.ppr_pump_free(ffi.NULL)


def test_large_packets_copied_in_pieces(tmp_path):
    """Packets of 1 MiB and more pushed with helper threads sharing the copy
    (ppr_pump_push_data): the frames still equal the software decoder's."""
    spec = clips.ClipSpec("big4444", width=1280, height=720, frames=2, profile="4444xq",
                          pix_fmt="yuv444p10le")
    path = clips.generate(spec, tmp_path)
    packets, tag = packets_of(path)
    assert min(len(p) for p in packets) >= 1 << 20, [len(p) for p in packets]
    want = reference(path)
    dec = pyprores.open_decoder(packets, codec_tag=tag, _pump="none")
    dec._pump_copiers = 3
    with dec:   # the none sink: the copies checked by the decoder's acceptance alone
        assert len(list(dec)) == 2
    dec = pyprores.open_decoder(packets, codec_tag=tag, _pump="host", max_in_flight=2)
    dec._pump_copiers = 3
    with dec:
        got = list(dec)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert_same(g, w)
