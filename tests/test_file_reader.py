"""Files read by the C library (issue 33): pyprores.open_decoder(path) reads the
ProRes stream with this build's libavformat on a thread of its own
(native.FileReader, ppr_reader), while the Vulkan device is created.

Frames from a file equal those of the same packets given in memory and those
of FFmpeg's software decoder (PyAV), for 4:2:2, 4:4:4 + alpha and interlaced
clips; the stream facts equal PyAV's; the reader's packets are PyAV's byte for
byte; errors are those of the PyAV path (missing file, not ProRes, no video
stream, truncated), a container this build does not read goes through PyAV;
closing early ends the reader's thread and frees what it read ahead.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from pathlib import Path

import pytest

from conftest import default_specs, faststart_copy, write_mpeg4_mov

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native
from pyprores.errors import DecodeError, NotProResError, PyproresError

HAS_VK = native.available() and native.has_hwaccel("vulkan")
BACKENDS = ["software", pytest.param("vulkan", marks=pytest.mark.skipif(
    not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel"))]
FRAMES = 5
NAMES = ["hq422", "4444alpha", "interlaced422"]
SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"


def spec(name: str) -> clips.ClipSpec:
    return default_specs(FRAMES)[name]


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("files")
    return {name: clips.generate(spec(name), d) for name in NAMES}


def pyav_packets(path: Path) -> tuple[list[bytes], list[int | None], str]:
    with pyprores.open(path) as src:
        pairs = list(src.timed_packets())
        return [p for p, _ in pairs], [t for _, t in pairs], src.info.codec_tag


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def assert_same(got, want, what):
    assert list(got.planes) == list(want.planes), what
    assert got.pix_fmt == want.pix_fmt, what
    for k in want.planes:
        assert got.planes[k].dtype == want.planes[k].dtype, (what, k)
        assert (got.planes[k] == want.planes[k]).all(), (what, k)


def test_clips_cover_the_formats():
    assert {spec(n).pix_fmt for n in NAMES} >= {"yuv422p10le", "yuva444p10le"}
    assert any(spec(n).interlaced for n in NAMES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_file_frames_equal_memory_and_software(paths, backend, name):
    packets, pts, tag = pyav_packets(paths[name])
    with pyprores.open(paths[name]) as src:
        want = list(src.reference_frames())
        time_base = src.info.time_base
    with pyprores.open_decoder(paths[name], backend=backend, max_in_flight=3) as dec:
        assert dec.reader == "native"
        got = list(dec)
    with pyprores.open_decoder(list(zip(packets, pts)), backend=backend, codec_tag=tag,
                               max_in_flight=3) as dec:
        mem = list(dec)
    assert len(got) == len(mem) == len(want) == FRAMES
    for n, (g, m, w) in enumerate(zip(got, mem, want)):
        assert_same(g, w, f"{name} frame {n} (software decoder)")
        assert_same(g, m, f"{name} frame {n} (packets in memory)")
        assert (g.index, g.pts, g.field_order) == (m.index, m.pts, m.field_order)
        assert g.pts == pts[n] and g.time == float(pts[n] * time_base)


@pytest.mark.parametrize("name", NAMES)
def test_reader_packets_and_facts_are_pyavs(paths, name):
    packets, pts, tag = pyav_packets(paths[name])
    with pyprores.open(paths[name]) as src:
        want = src.info
    with native.FileReader(str(paths[name]), depth=1) as r:
        info = r.info()
        got = []
        while (p := r.next()) is not None:
            got.append(bytes(native.ffi.buffer(native.lib.ppr_packet_data(p),
                                               native.lib.ppr_packet_size(p))))
        assert r.next() is None               # the end stays the end
    assert got == packets
    assert (info.width, info.height, info.codec_tag, info.frames, info.time_base) == \
        (want.width, want.height, want.codec_tag, want.frames, want.time_base)
    assert info.stream_index == want.index and info.pix_fmt == want.pix_fmt
    assert info.field_order == ("tt" if spec(name).interlaced else "progressive")
    with pyprores.open_decoder(paths[name], backend="software") as dec:
        assert dec.info == dataclasses.replace(want, field_order=info.field_order)


def test_missing_file_directory_and_not_prores(tmp_path):
    with pytest.raises(PyproresError, match="no such file"):
        pyprores.open_decoder(tmp_path / "missing.mov", backend="software")
    with pytest.raises(PyproresError, match="directory"):
        pyprores.open_decoder(tmp_path, backend="software")
    other = write_mpeg4_mov(tmp_path / "mpeg4.mov")
    with pytest.raises(NotProResError, match=r"no ProRes video stream \(found: mpeg4"):
        pyprores.open_decoder(other, backend="software")
    text = tmp_path / "notes.txt"
    text.write_text("not a video\n")
    with pytest.raises(NotProResError, match="not a video file"):    # PyAV's verdict
        pyprores.open_decoder(text, backend="software")
    with pytest.raises(native.UnreadableFileError, match="cannot read"):
        native.FileReader(str(text)).info()
    with pytest.raises(PyproresError, match="No such file"):
        native.FileReader(str(tmp_path / "missing.mov")).info()
    gc.collect()
    assert native.lib.ppr_readers_live() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncated_file_gives_its_frames_then_an_error(paths, backend, tmp_path):
    data = paths["hq422"].read_bytes()
    packets, _, _ = pyav_packets(paths["hq422"])
    # the movie header comes last in these files: cut into the last packet
    # and put the header back after it, so the container lists every frame
    cut = faststart_copy(paths["hq422"], tmp_path / "cut.mov")
    whole = cut.read_bytes()
    cut.write_bytes(whole[: len(whole) - len(packets[-1]) // 2])
    got = []
    with pytest.raises(DecodeError, match="ends early: frame 4 has"):
        with pyprores.open_decoder(cut, backend=backend) as dec:
            assert dec.reader == "native"
            for frame in dec:
                got.append(frame)
    assert len(got) == FRAMES - 1
    (tmp_path / "nomoov.mov").write_bytes(data[:20000])
    with pytest.raises(DecodeError, match="incomplete"):             # PyAV's verdict
        pyprores.open_decoder(tmp_path / "nomoov.mov", backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_early_close_ends_the_reader(paths, backend):
    keep = native.Session(backend)       # the device stays: only the decoder's threads count
    path = paths["hq422"]
    with pyprores.open_decoder(path, backend=backend) as dec:
        list(dec)
    base = threads()
    for _ in range(3):
        dec = pyprores.open_decoder(path, backend=backend, max_in_flight=2, prefetch=1)
        next(iter(dec))                   # the reader has read ahead and waits for room
        dec.close()
        assert native.lib.ppr_readers_live() == 0
        dec = pyprores.open_decoder(path, backend=backend)   # never iterated
        dec.close()
        assert native.lib.ppr_readers_live() == 0
    dec = pyprores.open_decoder(path, backend=backend)
    next(iter(dec))
    del dec
    gc.collect()
    assert native.lib.ppr_readers_live() == 0 and native.lib.ppr_frames_live() == 0
    assert threads() <= base
    # a reader closed before its thread opened the file, and one never asked
    for _ in range(5):
        native.FileReader(str(path)).close()
    with native.FileReader(str(path), depth=1) as r:
        r.info()
    assert native.lib.ppr_readers_live() == 0
    keep.close()


@pytest.mark.skipif(not (SAMPLES / "fate_Meridian-Apple_ProResProxy-HDR10.mxf").exists(),
                    reason="the MXF sample is not in ../shared/samples")
def test_a_container_the_build_does_not_read_goes_through_pyav():
    path = SAMPLES / "fate_Meridian-Apple_ProResProxy-HDR10.mxf"
    with pyprores.open(path) as src:
        want = next(iter(src.reference_frames()))
    with pyprores.open_decoder(path, backend="software") as dec:
        if dec.reader == "native":
            pytest.skip("this build reads MXF itself")
        assert dec.reader == "pyav"
        assert_same(next(iter(dec)), want, "first frame")


def test_big_packets_are_read_in_pieces_exactly(tmp_path, ffmpeg_bin):
    """Packets of 1 MiB and more are read by several threads at once (the
    reader's own file I/O): still PyAV's bytes, and a file cut inside such a
    packet still ends with the complete frames before it."""
    import subprocess
    path = tmp_path / "big.mov"
    subprocess.run([str(ffmpeg_bin), "-hide_banner", "-v", "error", "-f", "lavfi", "-i",
                    "testsrc2=s=3840x2160:r=24:d=0.125", "-vf", "noise=alls=20:allf=t+u,format=yuv422p10le",
                    "-c:v", "prores_ks", "-profile:v", "3", "-movflags", "+faststart", str(path)],
                   check=True)
    packets, _, _ = pyav_packets(path)
    assert len(packets) == 3 and min(map(len, packets)) > (1 << 20) + 12345
    for depth in (1, 3):
        with native.FileReader(str(path), depth=depth) as r:
            got = []
            while (p := r.next()) is not None:
                got.append(bytes(native.ffi.buffer(native.lib.ppr_packet_data(p),
                                                   native.lib.ppr_packet_size(p))))
        assert got == packets
    data = path.read_bytes()
    cut = tmp_path / "cut.mov"
    cut.write_bytes(data[: len(data) - len(packets[-1]) // 3])    # the index is up front
    with native.FileReader(str(cut)) as r:
        got = [r.next(), r.next()]
        with pytest.raises(DecodeError, match="ends early: frame 2 has"):
            r.next()
    assert all(g is not None for g in got)
