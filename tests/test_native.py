"""The C library (csrc/) through pyprores.decode.native: inspection, decoding on both
backends against PyAV's software decoder, slice submission and isolation,
error paths, and coexistence with PyAV in one process.

Clips are made at test time with the ffmpeg binary of the build (prores_ks),
tiny and with sizes that are not multiples of 16, so that partial slices and
partial macroblock rows are exercised. Vulkan-backend tests skip, with the
reason, while the FFmpeg build has no ProRes Vulkan hwaccel; once it has one
they run for real (on lavapipe here, on the GPU machine with -m gpu).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest

from pyprores.decode import native
from pyprores.decode.demux import frame_from_av
from pyprores.errors import DecodeError, DeviceError, NotProResError
from pyprores.model import Frame, FrameInfo

REPO = Path(__file__).resolve().parent.parent

HAS_EXT = native.available()
HAS_VK = HAS_EXT and native.has_hwaccel("vulkan")
NO_VK_REASON = ("this FFmpeg build has no prores_vulkan hwaccel (the ffmpeg_patches series "
                "does not add it yet): Vulkan-backend tests skipped")

BACKENDS = [
    pytest.param("software", id="software"),
    pytest.param("vulkan", id="vulkan", marks=pytest.mark.skipif(not HAS_VK, reason=NO_VK_REASON)),
]


# ---------------------------------------------------------------------------- clips

@dataclass(frozen=True)
class ClipSpec:
    name: str
    size: str
    vf: str            # filters after testsrc2
    args: tuple        # encoder arguments
    tag: str           # expected codec tag
    pix_fmt: str       # expected decoded format
    interlace: int


CLIPS = [
    ClipSpec("hq422", "72x40", "format=yuv422p10le",
             ("-profile:v", "3", "-pix_fmt", "yuv422p10le"), "apch", "yuv422p10le", 0),
    ClipSpec("proxy422", "40x24", "format=yuv422p10le",
             ("-profile:v", "0", "-pix_fmt", "yuv422p10le"), "apco", "yuv422p10le", 0),
    ClipSpec("4444a16", "48x40",
             "format=yuva444p10le,geq=lum='lum(X,Y)':cb='cb(X,Y)':cr='cr(X,Y)':a='X*21+Y*7'",
             ("-profile:v", "4", "-pix_fmt", "yuva444p10le", "-alpha_bits", "16"),
             "ap4h", "yuva444p12le", 0),
    ClipSpec("4444a8", "40x33",
             "format=yuva444p10le,geq=lum='lum(X,Y)':cb='cb(X,Y)':cr='cr(X,Y)':a='X*25'",
             ("-profile:v", "4", "-pix_fmt", "yuva444p10le", "-alpha_bits", "8"),
             "ap4h", "yuva444p12le", 0),
    ClipSpec("tff422", "64x50", "setfield=tff,format=yuv422p10le",
             ("-flags", "+ildct", "-profile:v", "2", "-pix_fmt", "yuv422p10le"),
             "apcn", "yuv422p10le", 1),
    ClipSpec("bff444", "48x40", "setfield=bff,format=yuv444p10le",
             ("-flags", "+ildct", "-profile:v", "4", "-pix_fmt", "yuv444p10le"),
             "ap4h", "yuv444p12le", 2),
]
CLIP_IDS = [c.name for c in CLIPS]


@dataclass
class Clip:
    spec: ClipSpec
    path: Path
    tag: str
    packets: list[bytes]


def _read_packets(path: Path) -> tuple[str, list[bytes]]:
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        tag = st.codec_context.codec_tag
        packets = [bytes(p) for p in c.demux(st) if p.size]
    return tag, packets


@pytest.fixture(scope="session")
def clips(tmp_path_factory, run_ffmpeg) -> dict[str, Clip]:
    d = tmp_path_factory.mktemp("native-clips")
    out = {}
    for spec in CLIPS:
        path = d / f"{spec.name}.mov"
        run_ffmpeg("-hide_banner", "-v", "error", "-y", "-f", "lavfi",
                   "-i", f"testsrc2=s={spec.size}:r=25:d=0.12,{spec.vf}",
                   "-c:v", "prores_ks", *spec.args, str(path))
        tag, packets = _read_packets(path)
        assert tag == spec.tag and len(packets) == 3, (spec.name, tag, len(packets))
        out[spec.name] = Clip(spec, path, tag, packets)
    return out


def unvalidated_session(backend: str) -> native.Session:
    """A session without the validation layer. Debian 12's layer stalls 10 s
    for every pool frame freed when the decoder reopens for another clip
    format (tests/conftest.py, KNOWN_LAYER_NOISE), which these tests do all
    the time; validation is checked by test_vulkan_no_validation_messages
    here and by the validated ffmpeg runs of tests/test_hwaccel.py."""
    saved = os.environ.get("PYPRORES_VALIDATION")
    os.environ["PYPRORES_VALIDATION"] = "0"
    try:
        return native.Session(backend=backend)
    finally:
        if saved is None:
            del os.environ["PYPRORES_VALIDATION"]
        else:
            os.environ["PYPRORES_VALIDATION"] = saved


@pytest.fixture(scope="module")
def sessions():
    """One session per backend for the module (Vulkan start-up is not free)."""
    if not HAS_EXT:
        pytest.fail("pyprores._native is not built: run ./scripts/setup")
    opened: dict[str, native.Session] = {}

    def get(backend: str) -> native.Session:
        if backend not in opened:
            opened[backend] = unvalidated_session(backend)
        return opened[backend]

    yield get
    for s in opened.values():
        s.close()


def reference(packet: bytes, tag: str) -> Frame:
    """PyAV's software decode of one packet (a fresh decoder: the codec tag
    decides the bit depth at open time)."""
    dec = av.CodecContext.create("prores", "r")
    dec.codec_tag = tag
    frames = dec.decode(av.Packet(packet))
    assert len(frames) == 1
    return frame_from_av(frames[0])


def assert_frames_equal(got: Frame, want: Frame, what: str = "") -> None:
    assert got.pix_fmt == want.pix_fmt, what
    assert got.bit_depth == want.bit_depth, what
    assert list(got.planes) == list(want.planes), what
    for name, ref in want.planes.items():
        arr = got.planes[name]
        assert arr.dtype == np.uint16 and arr.shape == ref.shape, (what, name, arr.shape, ref.shape)
        if not np.array_equal(arr, ref):
            diff = np.argwhere(arr != ref)
            raise AssertionError(f"{what} plane {name}: {len(diff)} samples differ, first at "
                                 f"(row, col) {tuple(diff[0])}: {arr[tuple(diff[0])]} != "
                                 f"{ref[tuple(diff[0])]}")


def slice_mask(info: FrameInfo, picture: int, index: int, plane: str,
               shape: tuple[int, int]) -> np.ndarray:
    """Boolean mask of the visible samples of one slice in one plane."""
    pic = info.pictures[picture]
    sl = pic.slices[index]
    mbw = 8 if plane in ("Cb", "Cr") and info.chroma_format == "422" else 16
    first, step = {"frame": (0, 1), "top": (0, 2), "bottom": (1, 2)}[pic.field]
    rows = first + step * np.arange(sl.mb_y * 16, sl.mb_y * 16 + 16)
    rows = rows[rows < shape[0]]
    mask = np.zeros(shape, bool)
    x0 = sl.mb_x * mbw
    mask[rows[:, None], np.arange(x0, min(shape[1], x0 + sl.mb_count * mbw))[None, :]] = True
    return mask


# ---------------------------------------------------------------------------- basics

def test_extension_loads(ffmpeg_bin):
    """The extension loads the libraries of the build under test (its ffmpeg's version)."""
    assert HAS_EXT, "pyprores._native is not built: run ./scripts/setup"
    first = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-version"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert first[:2] == ["ffmpeg", "version"] and native.ffmpeg_version() == first[2], first[:3]
    assert native.has_hwaccel("software")
    assert not native.has_hwaccel("nonsense")


def test_codec_tag_forms():
    assert native.codec_tag_int("apch") == native.codec_tag_int(b"apch") == 0x68637061
    assert native.codec_tag_int(0x68637061) == 0x68637061
    with pytest.raises(ValueError):
        native.codec_tag_int("apc")


def test_software_session_basics(sessions):
    s = sessions("software")
    assert s.device_name == "cpu"
    assert s.validation_messages == [] and s.validation_count == 0
    with pytest.raises(ValueError):
        native.Session(backend="cuda")


# ---------------------------------------------------------------------------- inspect

@pytest.mark.parametrize("name", CLIP_IDS)
def test_inspect_agrees_with_decoder(clips, name):
    clip = clips[name]
    for packet in clip.packets:
        info = native.inspect(packet, clip.tag)
        ref = reference(packet, clip.tag)
        assert (info.height, info.width) == ref.planes["Y"].shape
        assert info.pix_fmt == ref.pix_fmt == clip.spec.pix_fmt
        assert info.bit_depth == ref.bit_depth
        assert info.alpha == ("A" in ref.planes)
        assert info.chroma_format == ("444" if "444" in info.pix_fmt else "422")
        assert info.interlace_mode == clip.spec.interlace
        if info.interlace_mode == 0:
            assert [p.field for p in info.pictures] == ["frame"]
        elif info.interlace_mode == 1:
            assert [p.field for p in info.pictures] == ["top", "bottom"]
        else:
            assert [p.field for p in info.pictures] == ["bottom", "top"]

        mb_w = (info.width + 15) // 16
        mb_h = (info.height + 15) // 16 if not info.interlace_mode else (info.height + 31) // 32
        end = 0
        for pic in info.pictures:
            assert (pic.mb_width, pic.mb_height) == (mb_w, mb_h)
            assert pic.offset >= end
            grid = np.zeros((mb_h, mb_w), int)
            pos = pic.offset + 8 + 2 * len(pic.slices)   # prores_ks writes 8-byte picture headers
            for i, sl in enumerate(pic.slices):
                assert sl.index == i
                assert sl.mb_count in (1, 2, 4, 8) and sl.mb_count <= 1 << pic.log2_slice_mb_width
                grid[sl.mb_y, sl.mb_x:sl.mb_x + sl.mb_count] += 1
                assert sl.offset == pos and sl.size >= 6
                assert sl.qscale == packet[sl.offset + 1]
                pos += sl.size
            assert (grid == 1).all(), "slices must tile the macroblock grid exactly once"
            assert pos <= len(packet) and pos == pic.offset + pic.size
            end = pos
        # slice count: computed from mb_width and log2_slice_mb_width, as proresdec.c does
        for pic in info.pictures:
            log2 = pic.log2_slice_mb_width
            per_row = (mb_w >> log2) + bin(mb_w & ((1 << log2) - 1)).count("1")
            assert len(pic.slices) == mb_h * per_row


@pytest.mark.parametrize("name", CLIP_IDS)
def test_inspect_matches_python_parser(clips, name):
    """The C parser and pyprores.bitstream (written independently) agree."""
    from pyprores.bitstream import parse_frame
    clip = clips[name]
    for packet in clip.packets:
        assert native.inspect(packet, clip.tag) == parse_frame(packet, clip.tag)


def test_inspect_bit_depth_follows_codec_tag(clips):
    packet = clips["hq422"].packets[0]
    assert native.inspect(packet, "apch").pix_fmt == "yuv422p10le"
    assert native.inspect(packet, "ap4x").pix_fmt == "yuv422p12le"
    assert native.inspect(packet, 0).bit_depth == 10


# ---------------------------------------------------------------------------- decode

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CLIP_IDS)
def test_decode_matches_pyav(clips, sessions, backend, name):
    clip = clips[name]
    s = sessions(backend)
    for n, packet in enumerate(clip.packets):
        got = s.decode(packet, clip.tag)
        assert not got.corrupt
        assert_frames_equal(got, reference(packet, clip.tag), f"{name} frame {n} ({backend})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_alternating_streams(clips, sessions, backend):
    """Tag/size/format changes between calls reopen the decoder correctly."""
    s = sessions(backend)
    for name in ("hq422", "4444a16", "tff422", "hq422", "bff444"):
        clip = clips[name]
        assert_frames_equal(s.decode(clip.packets[1], clip.tag),
                            reference(clip.packets[1], clip.tag), name)


@pytest.mark.skipif(not HAS_VK, reason=NO_VK_REASON)
def test_vulkan_sessions_share_one_device(clips):
    """Sessions on the same device share one VkDevice (NVIDIA's driver 580
    crashes creating a fifth in one process), yet each keeps its own decoder:
    interleaved streams of different formats decode exactly, and closing one
    session leaves the device to the others."""
    a = unvalidated_session("vulkan")
    b = unvalidated_session("vulkan")
    try:
        n = a.device_sessions
        assert n >= 2 and b.device_sessions == n
        for name_a, name_b in (("hq422", "4444a16"), ("tff422", "bff444")):
            for s, name in ((a, name_a), (b, name_b)):
                clip = clips[name]
                assert_frames_equal(s.decode(clip.packets[1], clip.tag),
                                    reference(clip.packets[1], clip.tag), name)
        a.close()
        assert b.device_sessions == n - 1
        clip = clips["4444a8"]
        assert_frames_equal(b.decode(clip.packets[0], clip.tag),
                            reference(clip.packets[0], clip.tag), "4444a8")
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_accepts_buffers(clips, sessions, backend):
    clip = clips["hq422"]
    s = sessions(backend)
    want = s.decode(clip.packets[0], clip.tag)
    for buf in (bytearray(clip.packets[0]), memoryview(clip.packets[0]),
                np.frombuffer(clip.packets[0], np.uint8)):
        assert_frames_equal(s.decode(buf, native.codec_tag_int(clip.tag)), want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["hq422", "4444a16"])
def test_decode_into_padded_and_partial_planes(clips, sessions, backend, name):
    """ppr_decode into caller planes whose rows are padded, or with a plane left
    out. Such planes cannot take the Vulkan download directly (hwcontext_vulkan
    copies whole rows of its staging buffer, padding included), so the frame is
    copied in: the planes equal the usual decode, and neither the padding nor
    the plane left out is written."""
    clip = clips[name]
    s = sessions(backend)
    packet = clip.packets[1]
    want = list(s.decode(packet, clip.tag).planes.values())
    L, ffi = native._lib(), native.ffi
    data, size = native._buffer(packet)
    tag = native.codec_tag_int(clip.tag)
    info = ffi.new("ppr_frame_info *")
    assert L.ppr_inspect_header(data, size, tag, info) >= 0
    for skip in (None, 1):
        planes = ffi.new("ppr_planes *")
        assert L.ppr_frame_layout(info, planes) >= 0
        arrays, keep = [], []
        for i in range(planes.count):
            p = planes.plane[i]
            arr = np.full((p.height, p.width + 8), 0xABCD, np.uint16)
            arrays.append(arr)
            if i == skip:
                p.data = ffi.NULL
                continue
            keep.append(ffi.from_buffer("uint16_t[]", arr, require_writable=True))
            p.data = keep[-1]
            p.stride = arr.strides[0]
        rc = L.ppr_decode(s._live(), data, size, tag, planes)
        assert rc >= 0, ffi.string(L.ppr_strerror(rc))
        for i, plane in enumerate(want):
            if i == skip:
                assert (arrays[i] == 0xABCD).all(), f"plane {i} was left out but written"
                continue
            w = plane.shape[1]
            np.testing.assert_array_equal(arrays[i][:, :w], plane, err_msg=f"{name} plane {i} ({backend})")
            assert (arrays[i][:, w:] == 0xABCD).all(), f"the padding of plane {i} was written"


# ---------------------------------------------------------------------------- slices

def _submit_all(s: native.Session, packet: bytes, tag: str, replace=None) -> FrameInfo:
    info = s.begin_frame(packet, tag)
    for p, pic in enumerate(info.pictures):
        for sl in pic.slices:
            data = packet[sl.offset:sl.offset + sl.size]
            if replace is not None and (p, sl.index) in replace:
                data = replace[(p, sl.index)](data)
            s.submit_slice(p, sl.index, data)
    return info


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["hq422", "4444a16", "tff422", "bff444"])
def test_resubmitted_slices_decode_identically(clips, sessions, backend, name):
    clip = clips[name]
    s = sessions(backend)
    packet = clip.packets[2]
    _submit_all(s, packet, clip.tag)
    assert_frames_equal(s.end_frame(), reference(packet, clip.tag), name)


def _requantise(data: bytes) -> bytes:
    b = bytearray(data)
    b[1] = 1 if b[1] > 8 else b[1] + 24     # another quantiser: valid, but different samples
    return bytes(b)


def _garbage(data: bytes) -> bytes:
    rng = np.random.default_rng(len(data))
    return rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()


def _pick_slices(info: FrameInfo) -> list[tuple[int, int]]:
    picks = []
    for p, pic in enumerate(info.pictures):
        n = len(pic.slices)
        picks += [(p, i) for i in sorted({0, n // 2, n - 1})]
    return picks


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["hq422", "4444a16", "4444a8", "tff422", "bff444"])
@pytest.mark.parametrize("damage", ["requantise", "garbage"])
def test_slice_isolation(clips, sessions, backend, name, damage):
    """Changing slice k changes nothing outside slice k's macroblocks."""
    clip = clips[name]
    s = sessions(backend)
    packet = clip.packets[1]
    base = s.decode(packet, clip.tag)
    info = native.inspect(packet, clip.tag)
    fn = _requantise if damage == "requantise" else _garbage
    for p, k in _pick_slices(info):
        _submit_all(s, packet, clip.tag, replace={(p, k): fn})
        got = s.end_frame()
        changed = False
        for plane, ref in base.planes.items():
            mask = slice_mask(info, p, k, plane, ref.shape)
            arr = got.planes[plane]
            outside = ~mask
            if not np.array_equal(arr[outside], ref[outside]):
                bad = np.argwhere((arr != ref) & outside)[0]
                raise AssertionError(f"{name} picture {p} slice {k} ({damage}): plane {plane} "
                                     f"changed outside the slice, at (row, col) {tuple(bad)}")
            changed |= not np.array_equal(arr[mask], ref[mask])
        if damage == "requantise":
            assert changed, f"{name} picture {p} slice {k}: a new quantiser changed nothing"
            assert not got.corrupt


def test_left_out_slice_fails_the_frame(clips, sessions):
    """Documented: a slice never submitted gets a zero-size index entry, which
    FFmpeg 7.1.5's decoder rejects for the whole picture."""
    clip = clips["hq422"]
    s = sessions("software")
    packet = clip.packets[0]
    info = s.begin_frame(packet, clip.tag)
    for sl in info.pictures[0].slices[1:]:
        s.submit_slice(0, sl.index, packet[sl.offset:sl.offset + sl.size])
    with pytest.raises(DecodeError, match="(?i)slice|picture"):
        s.end_frame()
    # the session is still usable
    assert_frames_equal(s.decode(packet, clip.tag), reference(packet, clip.tag))


def test_slice_submission_errors(clips, sessions):
    clip = clips["tff422"]
    s = sessions("software")
    packet = clip.packets[0]
    with pytest.raises(ValueError, match="no frame begun"):
        s.submit_slice(0, 0, b"x" * 8)
    with pytest.raises(ValueError, match="no frame begun"):
        s.end_frame()
    info = s.begin_frame(packet, clip.tag)
    with pytest.raises(ValueError, match="picture 2 out of range"):
        s.submit_slice(2, 0, b"x" * 8)
    with pytest.raises(ValueError, match="out of range"):
        s.submit_slice(1, len(info.pictures[1].slices), b"x" * 8)
    with pytest.raises(ValueError, match="65535"):
        s.submit_slice(0, 0, bytes(70000))
    # a rebuilt frame with the original slices still decodes after the errors
    _submit_all(s, packet, clip.tag)
    assert_frames_equal(s.end_frame(), reference(packet, clip.tag))
    with pytest.raises(NotProResError):
        s.begin_frame(b"\0" * 64, clip.tag)


# ---------------------------------------------------------------------------- errors

def _bad_packets(packet: bytes) -> dict[str, tuple[bytes, type]]:
    version = bytearray(packet)
    version[10:12] = b"\0\x05"                         # frame header version 5
    alpha = bytearray(packet)
    alpha[8 + 17] = 0x0f                               # alpha_info 15
    slices = bytearray(packet)
    hdr = int.from_bytes(packet[8:10], "big")
    slices[8 + hdr + 7] = 0x40                         # log2 slice width 4
    zero_size = bytearray(packet)
    zero_size[8 + hdr + 8:8 + hdr + 10] = b"\0\0"      # first slice of size 0
    return {
        "empty": (b"", DecodeError),
        "short": (packet[:6], DecodeError),
        "not-prores": (b"\0\0\0\x40RIFF" + bytes(56), NotProResError),
        "text": (b"hello, this is not a video frame at all" * 3, NotProResError),
        "header-only": (packet[:27], DecodeError),
        "truncated-header": (packet[:8 + hdr - 4], DecodeError),
        "truncated-half": (packet[:len(packet) // 2], DecodeError),
        "truncated-last-byte": (packet[:-1], DecodeError),
        "version": (bytes(version), DecodeError),
        "alpha-mode": (bytes(alpha), DecodeError),
        "slice-width": (bytes(slices), DecodeError),
        "zero-size-slice": (bytes(zero_size), DecodeError),
    }


BAD_IDS = list(_bad_packets(b"\0" * 200))


@pytest.mark.parametrize("case", BAD_IDS)
def test_inspect_errors(clips, case):
    packet, exc = _bad_packets(clips["hq422"].packets[0])[case]
    with pytest.raises(exc) as ei:
        native.inspect(packet, "apch")
    assert str(ei.value), "errors carry a message"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", BAD_IDS)
def test_decode_errors(clips, sessions, backend, case):
    clip = clips["hq422"]
    s = sessions(backend)
    packet, exc = _bad_packets(clip.packets[0])[case]
    if backend == "vulkan" and exc is DecodeError and case not in (
            "empty", "short", "header-only", "truncated-header", "version", "alpha-mode"):
        # picture-level damage goes to the hwaccel, which may decode what it can
        try:
            s.decode(packet, clip.tag)
        except DecodeError:
            pass
    else:
        with pytest.raises(exc) as ei:
            s.decode(packet, clip.tag)
        assert str(ei.value)
    # the session survives and still decodes correctly
    assert_frames_equal(s.decode(clip.packets[0], clip.tag), reference(clip.packets[0], clip.tag))


def test_truncated_packet_message(clips, sessions):
    packet = clips["hq422"].packets[0]
    with pytest.raises(DecodeError, match="out of bounds|exceeds"):
        sessions("software").decode(packet[:len(packet) // 2], "apch")


# ---------------------------------------------------------------------------- vulkan

@pytest.mark.skipif(HAS_VK, reason="the build has a ProRes Vulkan hwaccel")
def test_vulkan_without_hwaccel_never_falls_back(clips):
    """Without the hwaccel a vulkan session refuses to open, and when forced
    open (require_hwaccel=False) it refuses to decode: no software fallback."""
    if not HAS_EXT:
        pytest.fail("pyprores._native is not built: run ./scripts/setup")
    with pytest.raises(DeviceError, match="no ProRes Vulkan hwaccel"):
        native.Session("vulkan")
    try:
        s = native.Session("vulkan", require_hwaccel=False)
    except DeviceError as e:
        pytest.skip(f"no Vulkan device here: {e}")
    with s:
        assert s.device_name and s.device_name != "cpu"
        clip = clips["hq422"]
        for _ in range(2):   # also on the second try, after the failed get_format
            with pytest.raises(DeviceError, match="not falling back to software"):
                s.decode(clip.packets[0], clip.tag)
        if os.environ.get("PYPRORES_VALIDATION") == "1":
            assert s.validation_enabled
            assert s.validation_messages == [], s.validation_messages


def test_vulkan_bad_device_is_device_error():
    if not HAS_EXT:
        pytest.fail("pyprores._native is not built: run ./scripts/setup")
    with pytest.raises(DeviceError):
        native.Session("vulkan", device="no-such-vulkan-device-xyz", require_hwaccel=False)


@pytest.mark.skipif(not HAS_VK, reason=NO_VK_REASON)
def test_vulkan_session_facts(sessions):
    s = sessions("vulkan")
    assert s.device_name and s.device_name != "cpu"
    assert not s.validation_enabled   # unvalidated_session() turned it off


@pytest.mark.skipif(not HAS_VK, reason=NO_VK_REASON)
@pytest.mark.skipif(os.environ.get("PYPRORES_VALIDATION") != "1",
                    reason="PYPRORES_VALIDATION=1 not set (./scripts/test sets it)")
def test_vulkan_no_validation_messages(clips):
    """A fresh validated session decoding a 4:4:4 clip with 16-bit alpha (all
    three shaders) logs no validation message. One clip format only: each
    decoder reopen costs minutes under Debian 12's layer (see
    unvalidated_session); the other formats are validated through ffmpeg in
    tests/test_hwaccel.py."""
    clip = clips["4444a16"]
    with native.Session("vulkan") as s:
        # FFmpeg 9 on Debian 12's old layer: left off, and the session says why (csrc/README.md)
        assert s.validation_enabled or "VK_EXT_host_image_copy" in s.note, s.note
        for packet in clip.packets:
            s.decode(packet, clip.tag)
        assert s.validation_count == 0, s.validation_messages[:5]


# ---------------------------------------------------------------------------- PyAV coexistence

def test_coexists_with_pyav_in_one_process(clips):
    """import av, decode with PyAV, decode with the extension, PyAV again: one
    process, two FFmpeg builds (PyAV bundles its own), no symbol clash."""
    clip = clips["4444a16"]
    script = textwrap.dedent(f"""
        import av, numpy as np
        from pyprores.decode.demux import frame_from_av
        path, tag = {str(clip.path)!r}, {clip.tag!r}
        def pyav_frames():
            with av.open(path) as c:
                return [frame_from_av(f) for f in c.decode(video=0)]
        first = pyav_frames()
        from pyprores.decode import native
        with av.open(path) as c:
            packets = [bytes(p) for p in c.demux(video=0) if p.size]
        with native.Session("software") as s:
            mine = [s.decode(p, tag) for p in packets]
        again = pyav_frames()
        assert len(first) == len(mine) == len(again) == {len(clip.packets)}
        for a, b, c in zip(first, mine, again):
            for k in a.planes:
                assert np.array_equal(a.planes[k], b.planes[k]), k
                assert np.array_equal(a.planes[k], c.planes[k]), k
        # two libavcodec copies are mapped: the build's (which the extension
        # uses: its version string) and the one bundled with PyAV
        import re
        maps = set(re.findall(r"\\S*libavcodec\\S*", open("/proc/self/maps").read()))
        assert len(maps) >= 2, maps
        assert native.ffmpeg_version() == {native.ffmpeg_version() if HAS_EXT else ''!r}, native.ffmpeg_version()
        print("ok", native.ffmpeg_version(), av.ffmpeg_version_info, sorted(maps))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=str(REPO), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("ok"), res.stdout
