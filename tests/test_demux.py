"""Demuxing and reference decoding with PyAV, on the generated default clips."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import pyprores
from pyprores import bitstream
from pyprores.corpus import clips
from pyprores.errors import DecodeError, NotProResError, PyproresError

SPECS = {s.name: clips.ClipSpec(**{**s.__dict__, "frames": 2}) for s in clips.DEFAULT_CLIPS}


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("demux")
    return {name: clips.generate(spec, d) for name, spec in SPECS.items()}


@pytest.mark.parametrize("name,tag,pix_fmt,order", [
    ("hq422", "apch", "yuv422p10le", "progressive"),
    ("4444alpha", "ap4h", "yuva444p12le", "progressive"),
    ("interlaced422", "apch", "yuv422p10le", "tt"),
])
def test_stream_info(paths, name, tag, pix_fmt, order):
    spec = SPECS[name]
    with pyprores.open(paths[name]) as src:
        i = src.info
        assert (i.width, i.height, i.frames, i.codec_tag) == (spec.width, spec.height, 2, tag)
        assert (i.pix_fmt, i.field_order) == (pix_fmt, order)
        assert i.profile in ("HQ", "4444") and isinstance(i.time_base, Fraction)
        packets = list(src.packets())
        assert len(packets) == 2 and all(isinstance(p, bytes) and p[4:8] == b"icpf" for p in packets)
        assert len(list(src.packets())) == 2            # a second pass rewinds


@pytest.mark.parametrize("name", list(SPECS))
def test_reference_frames_are_the_visible_planes(paths, name):
    """Planes have the visible size (line padding dropped) and are close to
    what was encoded: a wrong stride or plane order would be far off."""
    spec = SPECS[name]
    with pyprores.open(paths[name]) as src:
        frames = list(src.reference_frames())
    assert len(frames) == 2
    for n, frame in enumerate(frames):
        source = clips.synthetic_planes(spec, n)
        assert list(frame.planes) == ["Y", "Cb", "Cr", "A"][: len(source)]
        shift = frame.bit_depth - 10
        for (plane_name, got), want in zip(frame.planes.items(), source):
            assert got.dtype == np.uint16 and got.shape == want.shape, plane_name
            err = np.abs((got >> shift).astype(int) - want)
            assert err.mean() < 20, (plane_name, err.mean())   # garbage would be ~300


def test_header_parser_matches_the_stream(paths):
    with pyprores.open(paths["interlaced422"]) as src:
        packet = next(iter(src.packets()))
        info = bitstream.parse_frame(packet, src.info.codec_tag)
    assert (info.width, info.height, info.interlace_mode) == (256, 144, 1)
    assert [p.field for p in info.pictures] == ["top", "bottom"]
    assert sum(p.size for p in info.pictures) + info.pictures[0].offset == len(packet)
    with pytest.raises(DecodeError):
        bitstream.parse_frame(packet[: len(packet) // 2], "apch")


def test_errors_say_what_to_do(tmp_path, paths):
    with pytest.raises(PyproresError, match="no such file"):
        pyprores.open(tmp_path / "missing.mov")
    with pytest.raises(PyproresError, match="directory"):
        pyprores.open(tmp_path)
    (tmp_path / "empty.mov").write_bytes(b"")
    with pytest.raises(NotProResError, match="empty"):
        pyprores.open(tmp_path / "empty.mov")
    (tmp_path / "text.mov").write_text("hello")
    with pytest.raises(NotProResError):
        pyprores.open(tmp_path / "text.mov")
    data = paths["hq422"].read_bytes()
    (tmp_path / "cut.mov").write_bytes(data[: len(data) // 2])   # moov is at the end: gone
    with pytest.raises(DecodeError, match="incomplete"):
        pyprores.open(tmp_path / "cut.mov")
