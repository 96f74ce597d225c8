"""The ProRes parser of the FFmpeg build (libavcodec/prores_parser.c), as ffprobe sees it.

With the parser patches ('lavc: add ProRes bitstream parser', 'lavf/demux: take the
pixel format of ProRes streams from the parser' and 'lavf/mov: parse the frame headers
of ProRes streams'), avformat_find_stream_info() takes the size, the
pixel format and the field order of a ProRes stream from the frame header instead of
decoding a frame. These tests check, for every prores_ks profile, progressive and
both field orders, with and without alpha, that what ffprobe reports for the stream
(parser, -probesize 32) is what the decoder outputs for the frames, and that damaged
first packets do not crash ffprobe.

Three details of the set-up:
- ffmpeg writes a 'fiel' atom, and the container's field order takes precedence over
  the parser's (and is written as tb/bt for ProRes by the ffmpeg CLI). The clips are
  probed with that atom renamed to 'free', so the field order comes from the parser.
- The decoder is present in the build, so a second check makes decoding impossible
  during probing (-max_pixels 1 makes opening the decoder fail) and reads the pixel
  format from the stream line ffprobe logs: it can only come from the parser.
- ffprobe has no option listing parsers; the tests skip, with the reason, when the
  field order of a clip without 'fiel' comes back unknown (no parser in the build).

Clips are 2 frames, 64x48 or 50x34 (not a multiple of 16: partial macroblocks),
made at test time with the build's ffmpeg.
"""

from __future__ import annotations

import json
import random
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

PROFILES = {0: "apco", 1: "apcs", 2: "apcn", 3: "apch", 4: "ap4h", 5: "ap4x"}
FIELDS = ("progressive", "tt", "bb")          # what the parser should report
SETFIELD = {"tt": "tff", "bb": "bff"}


@dataclass(frozen=True)
class Clip:
    profile: int
    field: str            # progressive, tt or bb
    size: str
    alpha_bits: int = 0   # 0: no alpha plane in the input

    @property
    def name(self) -> str:
        alpha = f"-alpha{self.alpha_bits}" if self.alpha_bits else ""
        return f"p{self.profile}-{self.field}-{self.size}{alpha}"

    @property
    def input_fmt(self) -> str:
        if self.alpha_bits:
            return "yuva444p10le"
        return "yuv444p10le" if self.profile >= 4 else "yuv422p10le"

    @property
    def expected_pix_fmt(self) -> str:
        """What proresdec.c outputs: bit depth from the codec tag, chroma and alpha
        from the frame header."""
        depth = 12 if self.profile >= 4 else 10
        if self.alpha_bits:
            return f"yuva444p{depth}le"
        return f"yuv{'444' if self.profile >= 4 else '422'}p{depth}le"


CLIPS = (
    [Clip(p, f, s) for p in PROFILES for f in FIELDS for s in ("64x48", "50x34")]
    + [Clip(p, f, "50x34", bits) for p, bits in ((4, 8), (4, 16), (5, 8), (5, 16))
       for f in FIELDS]
)


def encode(run_ffmpeg, clip: Clip, out: Path) -> Path:
    vf = [f"format={clip.input_fmt}"]
    enc = ["-c:v", "prores_ks", "-profile:v", str(clip.profile)]
    if clip.field != "progressive":
        vf.insert(0, f"setfield={SETFIELD[clip.field]}")
        enc += ["-flags", "+ildct"]
    if clip.alpha_bits:
        enc += ["-alpha_bits", str(clip.alpha_bits)]
    run_ffmpeg("-nostdin", "-v", "error", "-f", "lavfi",
               "-i", f"testsrc2=size={clip.size}:rate=25", "-frames:v", "2",
               "-vf", ",".join(vf), *enc, "-f", "mov", "-y", out)
    return out


def strip_fiel(src: Path, dst: Path) -> Path:
    """Copy of a MOV whose 'fiel' atom is renamed 'free' (skipped by the demuxer)."""
    data = bytearray(src.read_bytes())
    moov = data.rfind(b"moov")
    at = data.find(b"fiel", moov)
    assert moov > 0 and at > 0 and data.find(b"fiel", at + 1) < 0, f"no single fiel in {src}"
    data[at:at + 4] = b"free"
    dst.write_bytes(bytes(data))
    return dst


def probe(run_ffprobe, path: Path) -> dict:
    """Stream parameters from avformat_find_stream_info (parser, -probesize 32) and
    the frames the decoder outputs, in one ffprobe run."""
    res = run_ffprobe("-v", "error", "-probesize", "32", "-of", "json",
                      "-show_entries",
                      "stream=codec_tag_string,width,height,pix_fmt,field_order:"
                      "frame=width,height,pix_fmt,interlaced_frame,top_field_first",
                      path)
    return json.loads(res.stdout)


STREAM_LINE = re.compile(r"Stream #0:0.*?: Video: prores[^,]*, (?P<pix_fmt>[a-z0-9]+)"
                         r"(?:\((?P<props>[^)]*)\))?, (?P<w>\d+)x(?P<h>\d+)")


def probe_without_decoding(run_ffprobe, path: Path) -> dict:
    """pix_fmt/size/field order as found while the decoder cannot be opened: with
    -max_pixels 1, avcodec_open2() fails in avformat_find_stream_info(), so nothing
    is decoded; ffprobe logs the stream line, then exits on its own decoder open."""
    res = run_ffprobe("-hide_banner", "-max_pixels", "1", path, check=False)
    assert res.returncode >= 0, f"ffprobe killed by signal {-res.returncode}"
    m = STREAM_LINE.search(res.stderr)
    assert m, f"no stream line in ffprobe's log:\n{res.stderr}"
    props = [p.strip() for p in (m["props"] or "").split(",")]
    field = ("progressive" if "progressive" in props else
             "tt" if "top first" in props else "bb" if "bottom first" in props else "unknown")
    return {"pix_fmt": m["pix_fmt"], "width": int(m["w"]), "height": int(m["h"]),
            "field_order": field}


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prores_parser")


@pytest.fixture(scope="session")
def parser_available(run_ffmpeg, run_ffprobe, clip_dir) -> None:
    """Skip when the build's ffprobe does not parse ProRes frame headers."""
    clip = Clip(3, "tt", "64x48")
    src = encode(run_ffmpeg, clip, clip_dir / "detect.mov")
    stream = probe(run_ffprobe, strip_fiel(src, clip_dir / "detect-nofiel.mov"))["streams"][0]
    if stream.get("field_order", "unknown") == "unknown":
        pytest.skip("the FFmpeg build does not parse ProRes headers when probing (field "
                    "order unknown without a 'fiel' atom): it lacks the ProRes parser "
                    "patches 'lavc: add ProRes bitstream parser', 'lavf/demux: take the "
                    "pixel format of ProRes streams from the parser' and 'lavf/mov: parse "
                    "the frame headers of ProRes streams'")


@pytest.fixture(scope="session")
def clips(run_ffmpeg, clip_dir, parser_available):
    """clips(clip) -> Path of the clip without 'fiel', encoded once per session."""
    cache: dict[Clip, Path] = {}

    def get(clip: Clip) -> Path:
        if clip not in cache:
            src = encode(run_ffmpeg, clip, clip_dir / f"{clip.name}.mov")
            cache[clip] = strip_fiel(src, clip_dir / f"{clip.name}-nofiel.mov")
        return cache[clip]
    return get


def decoded_field_order(frame: dict) -> str:
    if not frame["interlaced_frame"]:
        return "progressive"
    return "tt" if frame["top_field_first"] else "bb"


@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.name)
def test_stream_matches_decoded_frames(clip, clips, run_ffprobe):
    info = probe(run_ffprobe, clips(clip))
    stream = info["streams"][0]
    frames = info["frames"]
    assert stream["codec_tag_string"] == PROFILES[clip.profile]
    assert len(frames) == 2
    for frame in frames:
        assert (stream["width"], stream["height"]) == (frame["width"], frame["height"])
        assert stream["pix_fmt"] == frame["pix_fmt"]
        assert stream["field_order"] == decoded_field_order(frame)
    w, h = map(int, clip.size.split("x"))
    assert (stream["width"], stream["height"]) == (w, h)
    assert stream["pix_fmt"] == clip.expected_pix_fmt
    assert stream["field_order"] == clip.field


# one clip per profile, pixel format and field order is enough here
NO_DECODE_CLIPS = ([Clip(p, "progressive", "50x34") for p in PROFILES]
                   + [Clip(3, "tt", "64x48"), Clip(2, "bb", "50x34"),
                      Clip(4, "bb", "50x34", 8), Clip(5, "progressive", "50x34", 16)])


@pytest.mark.parametrize("clip", NO_DECODE_CLIPS, ids=lambda c: c.name)
def test_parameters_known_without_decoding(clip, clips, run_ffprobe):
    found = probe_without_decoding(run_ffprobe, clips(clip))
    w, h = map(int, clip.size.split("x"))
    assert found == {"pix_fmt": clip.expected_pix_fmt, "width": w, "height": h,
                     "field_order": clip.field}


def test_skip_alpha_applies_to_parser(clips, run_ffprobe):
    """The decoder drops the alpha plane with -skip_alpha 1, and so does the parser."""
    path = clips(Clip(4, "progressive", "50x34", 16))
    res = run_ffprobe("-v", "error", "-skip_alpha", "1", "-probesize", "32", "-of", "json",
                      "-show_entries", "stream=pix_fmt:frame=pix_fmt", path)
    info = json.loads(res.stdout)
    assert info["streams"][0]["pix_fmt"] == "yuv444p12le"
    assert {f["pix_fmt"] for f in info["frames"]} == {"yuv444p12le"}


# ---------------------------------------------------------------------------- damage

def packets(run_ffprobe, path: Path) -> list[tuple[int, int]]:
    res = run_ffprobe("-v", "error", "-of", "json", "-show_entries", "packet=pos,size", path)
    return [(int(p["pos"]), int(p["size"])) for p in json.loads(res.stdout)["packets"]]


def set_first_sample_size(data: bytearray, size: int) -> None:
    """Truncate the first packet through the stsz atom (all packets if the track
    has a constant sample size)."""
    at = data.find(b"stsz", data.rfind(b"moov"))
    assert at > 0
    const_at = at + 8           # 'stsz', version and flags, sample_size
    if struct.unpack(">I", data[const_at:const_at + 4])[0]:
        data[const_at:const_at + 4] = struct.pack(">I", size)
    else:                       # sample_count, then the table
        data[const_at + 8:const_at + 12] = struct.pack(">I", size)


def _patch(off: int, value: bytes):
    def apply(pkt: bytearray) -> None:
        pkt[off:off + len(value)] = value
    return apply


def _or(off: int, mask: int):
    def apply(pkt: bytearray) -> None:
        pkt[off] |= mask
    return apply


def _garble(seed: int, start: int = 0):
    def apply(pkt: bytearray) -> None:
        rnd = random.Random(seed)
        for i in range(start, len(pkt)):
            pkt[i] = rnd.randrange(256)
    return apply


def _bad_picture_header(pkt: bytearray) -> None:
    hdr_size = struct.unpack(">H", pkt[8:10])[0]
    pkt[8 + hdr_size] &= 0x07                      # picture header size < 8


DAMAGE = {
    "frame-identifier": _patch(4, b"xcpf"),
    "header-size": _patch(8, b"\xff\xff"),
    "version": _patch(10, b"\x00\x02"),
    "zero-width": _patch(16, b"\x00\x00"),
    "zero-height": _patch(18, b"\x00\x00"),
    "interlace-mode-3": _or(20, 0x0C),
    "alpha-info": _or(25, 0x0F),
    "picture-header": _bad_picture_header,
    "garbled-after-header": _garble(1, 28),
    "garbled": _garble(2),
    "zeroed": lambda pkt: pkt.__setitem__(slice(0, len(pkt)), bytes(len(pkt))),
}
TRUNCATE = (0, 1, 8, 27, 28, 40, 200)


@pytest.fixture(scope="session")
def damage_sources(clips):
    return [clips(Clip(5, "tt", "50x34", 16)), clips(Clip(1, "progressive", "64x48"))]


def _check_no_crash(run_ffprobe, path: Path) -> None:
    for extra in ((), ("-probesize", "32")):
        res = run_ffprobe("-v", "error", *extra, "-show_streams", "-show_frames", path,
                          check=False, timeout=60)
        assert res.returncode >= 0, f"ffprobe killed by signal {-res.returncode} on {path.name}"
        assert res.returncode == 0, res.stderr[-2000:]
        assert "[STREAM]" in res.stdout


@pytest.mark.parametrize("damage", DAMAGE, ids=str)
@pytest.mark.parametrize("source", [0, 1], ids=["4444xq-alpha-tt", "lt-progressive"])
def test_damaged_first_packet(damage, source, damage_sources, run_ffprobe, tmp_path):
    src = damage_sources[source]
    pos, size = packets(run_ffprobe, src)[0]
    data = bytearray(src.read_bytes())
    pkt = data[pos:pos + size]
    DAMAGE[damage](pkt)
    data[pos:pos + size] = pkt
    out = tmp_path / f"{damage}.mov"
    out.write_bytes(bytes(data))
    _check_no_crash(run_ffprobe, out)


@pytest.mark.parametrize("size", TRUNCATE)
def test_truncated_first_packet(size, damage_sources, run_ffprobe, tmp_path):
    data = bytearray(damage_sources[0].read_bytes())
    set_first_sample_size(data, size)
    out = tmp_path / f"truncated-{size}.mov"
    out.write_bytes(bytes(data))
    _check_no_crash(run_ffprobe, out)
