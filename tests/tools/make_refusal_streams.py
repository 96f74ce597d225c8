#!/usr/bin/env python3
"""Targeted damaged ProRes streams, one damaged frame per way proresdec.c
refuses (or flags) a frame (issue 35).

Each stream is a ``.mov`` of one seed frame repeated: frame 0 intact, then
each damage of :data:`DAMAGES` for that seed, every one followed by an intact
frame (so that a failed frame that spoils the next one shows). The damages
target, one by one, the error returns of FFmpeg 7.1.5's
``libavcodec/proresdec.c``: ``decode_frame()`` (packet too short, no
``icpf``), ``decode_frame_header()`` (header size, version, frame size, alpha
mode, truncated quantisation matrices), ``decode_picture_header()`` (picture
header size, picture size, slice size, slice count, slice index entries too
short or past the packet), ``decode_picture()`` (every slice of a picture
failing; one slice failing only flags the frame) and the second field of an
interlaced frame (its header, its index, its slices, or no second field at
all, which the software decoder outputs unflagged).

    tests/tools/make_refusal_streams.py [--ffmpeg PATH] [--out DIR]

writes ``refuse-<seed>.mov`` and prints the ``index.json`` entries for
``tests/data/regressions/`` (``kind: refusals``): per frame, the damage and
what the software decoder with one thread does with it (``ok``,
``corrupt``, or ``error`` with the message it logs), which
``tests/test_refusals.py`` checks against the build's decoders.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pyprores import fuzz  # noqa: E402
from pyprores.decode import demux  # noqa: E402
from pyprores.bitstream import parse_frame  # noqa: E402
from pyprores.model import FrameInfo  # noqa: E402

#: byte offsets in a packet (frame header at 8, see decode_frame_header())
HDR_SIZE, VERSION, WIDTH, FRAME_FLAGS, ALPHA, QMAT_FLAGS = 8, 10, 16, 20, 25, 27


@dataclass(frozen=True)
class Damage:
    name: str
    #: what the software decoder (one thread) does: ok, corrupt or error
    outcome: str
    #: the error message proresdec.c logs for it (error outcomes)
    message: str
    #: "cpu": found while parsing headers, before anything is decoded;
    #: "gpu": a slice that fails to decode, found by the hwaccel's shaders
    found: str
    edit: Callable[[bytes, FrameInfo], bytes]
    #: False where the frame's samples are undefined (rows nothing writes)
    content: bool = True


def _put16(b: bytearray, at: int, v: int) -> None:
    struct.pack_into(">H", b, at, v)


def _edit(fn: Callable[[bytearray, FrameInfo], None]) -> Callable[[bytes, FrameInfo], bytes]:
    def run(data: bytes, info: FrameInfo) -> bytes:
        b = bytearray(data)
        fn(b, info)
        return bytes(b)
    return run


def _index(info: FrameInfo, data: bytes, picture: int) -> int:
    pic = info.pictures[picture]
    return pic.offset + (data[pic.offset] >> 3)


def _zero_luma(b: bytearray, info: FrameInfo, picture: int, slices: range | list[int]) -> None:
    """The first 8 bytes of a slice's luma data zero: its first DC code needs
    more than 31 bits (DECODE_CODEWORD fails)."""
    for i in slices:
        sl = info.pictures[picture].slices[i]
        start = sl.offset + (b[sl.offset] >> 3)
        b[start:start + 8] = bytes(8)


def _all(info: FrameInfo, picture: int) -> range:
    return range(len(info.pictures[picture].slices))


def _entry(picture: int, i: int | None, value: int) -> Callable[[bytes, FrameInfo], bytes]:
    """Slice index entry ``i`` (None: the last) of ``picture`` set to ``value``
    (a negative value adds to it)."""
    def fn(b: bytearray, info: FrameInfo) -> None:
        n = len(info.pictures[picture].slices)
        at = _index(info, b, picture) + 2 * (n - 1 if i is None else i)
        _put16(b, at, value if value >= 0 else struct.unpack_from(">H", b, at)[0] - value)
    return _edit(fn)


def _pic_byte(picture: int, off: int, fn: Callable[[int], int]) -> Callable[[bytes, FrameInfo], bytes]:
    def edit(b: bytearray, info: FrameInfo) -> None:
        at = info.pictures[picture].offset + off
        b[at] = fn(b[at]) & 0xFF
    return _edit(edit)


def _truncated_qmat(data: bytes, info: FrameInfo) -> bytes:
    """Frame header of 20 bytes that still says a luma matrix follows, in a
    packet that ends 50 bytes after it ('Header truncated')."""
    b = bytearray(data[:8 + 20 + 50])
    _put16(b, HDR_SIZE, 20)
    b[QMAT_FLAGS] |= 2
    return bytes(b)


def _cut_index(data: bytes, info: FrameInfo) -> bytes:
    """The packet cut 3 bytes into the first picture's slice index, its
    picture size set to what is left."""
    b = bytearray(data[:_index(info, data, 0) + 3])
    struct.pack_into(">I", b, info.pictures[0].offset + 1, len(b) - info.pictures[0].offset)
    return bytes(b)


def _slice_header(picture: int, i: int | None, luma: int) -> Callable[[bytes, FrameInfo], bytes]:
    """A slice's luma data size (None: every slice of the picture)."""
    def fn(b: bytearray, info: FrameInfo) -> None:
        for k in (_all(info, picture) if i is None else [i]):
            _put16(b, info.pictures[picture].slices[k].offset + 2, luma)
    return _edit(fn)


def _set_pic_size(picture: int, delta: int) -> Callable[[bytes, FrameInfo], bytes]:
    def fn(b: bytearray, info: FrameInfo) -> None:
        at = info.pictures[picture].offset + 1
        struct.pack_into(">I", b, at, struct.unpack_from(">I", b, at)[0] + delta)
    return _edit(fn)


COMMON = [
    Damage("packet-20-bytes", "error", "invalid frame header", "cpu", lambda d, i: d[:20]),
    Damage("no-icpf", "error", "invalid frame header", "cpu", _edit(lambda b, i: b.__setitem__(slice(4, 8), b"icpX"))),
    Damage("frame-header-size-65535", "error", "error, wrong header size", "cpu",
           _edit(lambda b, i: _put16(b, HDR_SIZE, 0xFFFF))),
    Damage("version-2", "error", "unsupported version: 2", "cpu", _edit(lambda b, i: _put16(b, VERSION, 2))),
    Damage("width-0", "error", "is invalid", "cpu", _edit(lambda b, i: _put16(b, WIDTH, 0))),
    Damage("alpha-mode-3", "error", "Invalid alpha mode 3", "cpu",
           _edit(lambda b, i: b.__setitem__(ALPHA, (b[ALPHA] & 0xF0) | 3))),
    Damage("qmat-truncated", "error", "Header truncated", "cpu", _truncated_qmat),
    Damage("picture-header-size-4", "error", "error, wrong picture header size", "cpu",
           _pic_byte(0, 0, lambda v: (4 << 3) | (v & 7))),
    Damage("picture-size-past-packet", "error", "error, wrong picture data size", "cpu", _set_pic_size(0, 0x10000)),
    Damage("slice-height-2", "error", "unsupported slice resolution: ", "cpu", _pic_byte(0, 7, lambda v: (v & 0xF0) | 1)),
    Damage("slice-width-16", "error", "unsupported slice resolution: ", "cpu", _pic_byte(0, 7, lambda v: (4 << 4) | (v & 0xF))),
    # the slice index cut short, the picture size saying so: before a frame is allocated
    Damage("index-cut", "error", "error, wrong slice count", "cpu", _cut_index),
    # the same with the picture size left as it was: that check comes first
    Damage("index-cut-picture-size-kept", "error", "error, wrong picture data size", "cpu",
           lambda d, i: d[:_index(i, d, 0) + 3]),
    Damage("index-entry-3", "error", "error, wrong slice data size", "cpu", _entry(0, 1, 3)),
    Damage("index-entry-0", "error", "error, wrong slice data size", "cpu", _entry(0, 0, 0)),
    Damage("index-entry-ffff", "error", "error, slice out of bounds", "cpu", _entry(0, 1, 0xFFFF)),
    Damage("index-last-past-end", "error", "error, slice out of bounds", "cpu", _entry(0, None, -1)),
    Damage("every-slice-fails", "error", "", "gpu", _edit(lambda b, i: _zero_luma(b, i, 0, _all(i, 0)))),
    Damage("every-plane-size-bad", "error", "invalid plane data size", "gpu", _slice_header(0, None, 0xFFFF)),
    Damage("one-slice-fails", "corrupt", "", "gpu", _edit(lambda b, i: _zero_luma(b, i, 0, [1]))),
    Damage("one-plane-size-bad", "corrupt", "invalid plane data size", "gpu", _slice_header(0, 1, 0xFFFF)),
]

INTERLACED = [
    Damage("field2-header-size-13", "error", "error decoding picture header", "cpu",
           _pic_byte(1, 0, lambda v: (13 << 3) | (v & 7))),
    Damage("field2-index-entry-ffff", "error", "error, slice out of bounds", "cpu", _entry(1, 0, 0xFFFF)),
    Damage("field2-index-entry-3", "error", "error, wrong slice data size", "cpu", _entry(1, 1, 3)),
    Damage("field2-every-slice-fails", "error", "", "gpu", _edit(lambda b, i: _zero_luma(b, i, 1, _all(i, 1)))),
    Damage("field2-one-slice-fails", "corrupt", "", "gpu", _edit(lambda b, i: _zero_luma(b, i, 1, [0]))),
    Damage("field1-every-slice-fails", "error", "", "gpu", _edit(lambda b, i: _zero_luma(b, i, 0, _all(i, 0)))),
    # no second picture: both decoders output the frame unflagged, its
    # second field's rows unwritten
    Damage("field2-missing", "ok", "", "cpu", lambda d, i: d[:i.pictures[1].offset], content=False),
]

ALPHA_ONLY = [
    # alpha has no failure condition in proresdec.c
    Damage("alpha-scrambled", "ok", "", "gpu", _edit(
        lambda b, i: [b.__setitem__(slice(s.offset + s.size - 16, s.offset + s.size), bytes(range(16)))
                      for s in i.pictures[0].slices]), content=False),
]

#: seed clip (pyprores.fuzz.DEFAULT_SEED_CLIPS) -> its damages
STREAMS = {
    "hq422-72x40": COMMON,
    "tff422-64x50": [d for d in COMMON if d.name in ("index-entry-ffff", "index-entry-3", "every-slice-fails",
                                                      "one-slice-fails")] + INTERLACED,
    "4444a16-48x40": [d for d in COMMON if d.name in ("alpha-mode-3", "index-entry-ffff", "index-entry-3",
                                                       "every-slice-fails", "one-slice-fails")] + ALPHA_ONLY,
}


def mux(path: Path, template: Path, packets: list[bytes]) -> None:
    """``packets`` as the frames of a .mov with the stream parameters of
    ``template`` (one frame per 1/25 s)."""
    import av
    with av.open(str(template)) as src, av.open(str(path), "w", format="mov") as out:
        stream = out.add_stream_from_template(src.streams.video[0], opaque=True)
        stream.codec_tag = src.streams.video[0].codec_tag      # not copied by the template
        stream.time_base = Fraction(1, 25)
        out.start_encoding()               # the muxer picks the stream's time base
        step = int(1 / (25 * stream.time_base))
        for n, data in enumerate(packets):
            pkt = av.Packet(data)
            pkt.stream = stream
            pkt.pts = pkt.dts = n * step
            pkt.duration = step
            pkt.time_base = stream.time_base
            pkt.is_keyframe = True
            out.mux(pkt)


def make(ffmpeg: Path, out: Path) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return _make(ffmpeg, out, fuzz.make_default_seeds(tmp, ffmpeg))


def _make(ffmpeg: Path, out: Path, seeds: list[Path]) -> list[dict]:
    entries = []
    for name, damages in STREAMS.items():
        clip = next(p for p in seeds if p.stem == name)
        with demux.open(clip) as src:
            packet, tag = bytes(next(iter(src.packets()))), src.info.codec_tag
        info = parse_frame(packet, tag)
        packets, frames = [packet], [{"damage": "none", "software": "ok", "found": "cpu"}]
        for d in damages:
            bad = d.edit(packet, info)
            assert bad != packet, d.name
            packets += [bad, packet]
            frame = {"damage": d.name, "software": d.outcome, "found": d.found}
            if d.message:
                frame["message"] = d.message
            if not d.content:
                frame["content"] = False
            frames += [frame, {"damage": "none", "software": "ok", "found": "cpu"}]
        path = out / f"refuse-{name}.mov"
        mux(path, clip, packets)
        entries.append({
            "file": path.name, "kind": "refusals", "codec_tag": tag, "backends": ["software", "vulkan"],
            "status": "fixed", "expect": {"software": ["ok"], "vulkan": ["ok"]}, "frames": frames,
            "description": (f"{name} (prores_ks) with one damaged frame per way proresdec.c refuses or flags "
                            "a frame, each followed by an intact one; 'frames' says what the software decoder "
                            "with one thread does with each. The Vulkan path must output the same frames with "
                            "the same flags, and refuse the others with the same error (issue 35)."),
            "found_by": "tests/tools/make_refusal_streams.py (issue 35: a slice index entry of 0xffff was "
                        "refused by the software decoder and output flagged by the 7.1.5 series' hwaccel)",
            "fixed_by": "ffmpeg_patches/7.1.5/0004 (the hwaccel path runs every picture check of the software "
                        "path) and 7.1.5/0019, 9.0.2/0012 (explode does not fail a frame the software decoder "
                        "outputs)",
        })
    return entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ffmpeg", type=Path, default=REPO / "build" / "ffmpeg" / "bin" / "ffmpeg",
                    help="the ffmpeg that encodes the seed clips (prores_ks)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "regressions")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(make(args.ffmpeg, args.out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
