"""pyprores.idct.writer: ProRes frames written from chosen coefficients.

* The codewords decode, with a Python transcription of DECODE_CODEWORD, to the
  values written, for every codebook FFmpeg uses.
* Headers and slice layout read back as written (Python parser and the
  native inspect).
* FFmpeg's software decoder accepts every frame of the matrix chroma x
  interlace x alpha x slice size x odd sizes, at 10 and 12 bits, and outputs
  exactly what the model of its arithmetic (pyprores.idct.model) predicts:
  the decoder computes exactly the IDCT of the coefficients written. Alpha
  round-trips exactly.
* The Vulkan backend gives the same samples as the software backend.
* PyAV reads the .mov files write_mov makes, with the codec tag choosing the
  output depth.
* Malformed slices: what each decoder does with them.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from pyprores.decode import native
from pyprores.idct import writer as W
from pyprores.bitstream import parse_frame
from pyprores.errors import DecodeError
from pyprores.idct.model import idct_put, prores_idct, reference_put, scaled_qmat

HAS_EXT = native.available()
HAS_VK = HAS_EXT and native.has_hwaccel("vulkan")
needs_ext = pytest.mark.skipif(not HAS_EXT, reason="native extension not built (./scripts/setup)")
needs_vk = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")

TAGS = {10: "apch", 12: "ap4h"}


@pytest.fixture(scope="module")
def sw():
    if not HAS_EXT:
        pytest.skip("native extension not built (./scripts/setup)")
    with native.Session("software") as s:
        yield s


@pytest.fixture(scope="module")
def vk():
    """A Vulkan session opened without the validation layer, even under
    ./scripts/test (PYPRORES_VALIDATION=1): on lavapipe the layer makes every
    new pipeline variant (bit depth x chroma x alpha) cost about two minutes
    to create. These tests check arithmetic; tests/test_native.py runs the
    hwaccel under the layer."""
    if not HAS_VK:
        pytest.skip("this FFmpeg build has no prores_vulkan hwaccel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYPRORES_VALIDATION", "0")
        try:
            s = native.Session("vulkan")
        except Exception as e:  # no device: say why
            pytest.skip(f"no Vulkan device: {e}")
    with s:
        yield s


def assert_planes(got, want: dict, what: str = "") -> None:
    assert set(got.planes) == set(want), f"{what}: planes {sorted(got.planes)} vs {sorted(want)}"
    for k, w in want.items():
        g = got.planes[k]
        assert g.shape == w.shape, f"{what} {k}: shape {g.shape} vs {w.shape}"
        if not np.array_equal(g, w):
            bad = np.argwhere(g != w)
            y, x = bad[0]
            raise AssertionError(f"{what} {k}: {len(bad)} samples differ, first at (y={y}, x={x}): "
                                 f"{g[y, x]} vs {w[y, x]}")


def assert_software_model(got, spec, bd: int, what: str = "") -> None:
    """The software decoder's output is the C model's, or (10 bits, x86-64
    builds with assembly) the SIMD model's: FFmpeg's SSE2/AVX IDCT saturates
    where the C code wraps. Either must match the whole frame."""
    want_c = W.expected_planes(spec, bd)
    if bd == 10 and not all(np.array_equal(got.planes[k], v) for k, v in want_c.items()):
        assert_planes(got, W.expected_planes(spec, bd, simd=True), f"{what} {bd}-bit (simd)")
    else:
        assert_planes(got, want_c, f"{what} {bd}-bit")


# ---------------------------------------------------------------- codewords

def _read_codeword(bits: str, pos: int, codebook: int) -> tuple[int, int]:
    """DECODE_CODEWORD over a string of '0'/'1' (zero-padded): (value, new pos)."""
    switch_bits = codebook & 3
    rice = codebook >> 5
    exp = (codebook >> 2) & 7
    window = bits[pos:pos + 32].ljust(32, "0")
    q = window.index("1") if "1" in window else 31
    if q > switch_bits:
        n = exp - switch_bits + (q << 1)
        assert n <= 31
        val = int(bits[pos:pos + n], 2) - (1 << exp) + ((switch_bits + 1) << rice)
        return val, pos + n
    if rice:
        return (q << rice) + int(bits[pos + q + 1:pos + q + 1 + rice], 2), pos + q + 1 + rice
    return q, pos + q + 1


CODEBOOKS = sorted({W.FIRST_DC_CB, *W.DC_CODEBOOK, *W.RUN_TO_CB, *W.LEV_TO_CB})


@pytest.mark.parametrize("codebook", CODEBOOKS, ids=[f"0x{c:02X}" for c in CODEBOOKS])
def test_codewords_decode_to_their_values(codebook):
    top = W.max_codeword_value(codebook)
    vals = np.concatenate([np.arange(600), [1000, 4095, 4096, 16383, 30000, 65000], [top - 1, top]])
    vals = vals[vals <= top]
    with pytest.raises(W.CodewordTooLong):
        W._vlc(np.array([top + 1]), np.array([codebook]))
    codes, lens = W._vlc(vals, np.full(vals.size, codebook))
    bits = "".join(format(int(c), f"0{int(n)}b") for c, n in zip(codes, lens))
    pos = 0
    for v, n in zip(vals, lens):
        got, new = _read_codeword(bits, pos, codebook)
        assert (got, new - pos) == (v, n), f"value {v} in 0x{codebook:02X}"
        pos = new


def test_codeword_too_long_is_refused():
    with pytest.raises(W.CodewordTooLong, match="at most 31 bits"):
        W._vlc(np.array([1 << 20]), np.array([0x04]))
    spec = W.blank_spec(16, 16)
    spec.pictures[0].y[0, 1, 3, 3] = 1 << 20
    with pytest.raises(W.CodewordTooLong):
        W.write_frame(spec)


def test_oversized_slice_is_refused():
    """Slice sizes are 16-bit in the slice index (coded slices stay far below)."""
    spec = W.blank_spec(32, 16)
    spec.raw_slices = {(0, 0): bytes(70000)}
    with pytest.raises(ValueError, match="0..65535"):
        W.write_frame(spec)
    spec.index_sizes = {(0, 0): 6}                    # a lie that fits is written as asked
    assert struct.unpack(">H", W.write_frame(spec)[8 + 20 + 8:8 + 20 + 10])[0] == 6


def test_slice_layout_narrows_at_the_right_edge():
    widths = [s.mb_count for s in W.slice_layout(15, 1, 3)]
    assert widths == [8, 4, 2, 1]
    assert [s.mb_count for s in W.slice_layout(13, 2, 2)] == [4, 4, 4, 1] * 2
    assert [s.mb_x for s in W.slice_layout(7, 1, 1)] == [0, 2, 4, 6]
    assert len(W.slice_layout(5, 3, 0)) == 15


# ---------------------------------------------------------------- headers

@pytest.mark.parametrize("interlace", [0, 1, 2])
@pytest.mark.parametrize("log2", [0, 1, 2, 3])
def test_headers_read_back(interlace, log2):
    rng = np.random.default_rng(10 * interlace + log2)
    spec = W.random_spec(rng, 200, 70, "444", interlace, 16, log2_slice_mb_width=log2,
                         qscale="random", luma_qmat=rng.integers(1, 64, 64),
                         chroma_qmat=rng.integers(1, 64, 64))
    pkt = W.write_frame(spec)
    assert struct.unpack(">I", pkt[:4])[0] == len(pkt) and pkt[4:8] == b"icpf"
    info = parse_frame(pkt, "ap4h")
    assert (info.width, info.height, info.chroma_format, info.alpha_info,
            info.interlace_mode) == (200, 70, "444", 2, interlace)
    mbw, mbh = W.geometry(200, 70, interlace)
    layout = W.slice_layout(mbw, mbh, log2)
    assert len(info.pictures) == (2 if interlace else 1)
    for p, pic in enumerate(info.pictures):
        assert (pic.mb_width, pic.mb_height, pic.log2_slice_mb_width) == (mbw, mbh, log2)
        assert [(s.mb_x, s.mb_y, s.mb_count) for s in pic.slices] == \
               [(s.mb_x, s.mb_y, s.mb_count) for s in layout]
        assert [s.qscale for s in pic.slices] == list(spec.pictures[p].qscale)
    if HAS_EXT:
        assert native.inspect(pkt, "ap4h") == info
    # the frame header carries both matrices after the 20 fixed bytes
    hdr = pkt[8:]
    assert struct.unpack(">H", hdr[:2])[0] == 20 + 128 and hdr[19] == 3
    assert list(hdr[20:84]) == list(spec.luma_qmat) and list(hdr[84:148]) == list(spec.chroma_qmat)


def test_default_matrix_and_version():
    spec = W.blank_spec(16, 16)
    pkt = W.write_frame(spec)
    hdr = pkt[8:]
    assert struct.unpack(">HH", hdr[:4]) == (20, 0) and hdr[19] == 0
    assert W.blank_spec(16, 16, "444").luma_qmat_array.tolist() == [4] * 64
    assert W.write_frame(W.blank_spec(16, 16, "422", alpha_bits=8))[8 + 3] == 1


# ---------------------------------------------------------------- round trips

MATRIX = [(chroma, interlace, alpha, log2, size)
          for chroma in ("422", "444")
          for interlace in (0, 1, 2)
          for alpha in (0, 8, 16)
          for log2 in (0, 1, 2, 3)
          for size in ((72, 40), (37, 23))]


def _matrix_spec(chroma, interlace, alpha, log2, size, **kw):
    seed = zlib.crc32(repr((chroma, interlace, alpha, log2, size)).encode())
    rng = np.random.default_rng(seed)
    kw.setdefault("qscale", "random")
    return W.random_spec(rng, *size, chroma, interlace, alpha, log2_slice_mb_width=log2, **kw)


@needs_ext
@pytest.mark.parametrize("chroma,interlace", [(c, i) for c in ("422", "444") for i in (0, 1, 2)])
def test_software_decodes_the_model(sw, chroma, interlace):
    """Every frame of the matrix (this chroma and interlace: alpha x slice size x
    size) decodes, at 10 and 12 bits, to the model's samples. The quantiser
    bytes are random (1..224), so q > 128 and int16 wrap-around are exercised.

    At 10 bits on x86-64, FFmpeg's software decoder uses its SSE2/AVX IDCT,
    which saturates where the C code wraps: the model's ``simd`` variant.
    Either the C or the SIMD model must match, for the whole frame."""
    for case in (m for m in MATRIX if m[:2] == (chroma, interlace)):
        spec = _matrix_spec(*case)
        pkt = W.write_frame(spec)
        for bd in (10, 12):
            got = sw.decode(pkt, TAGS[bd])
            assert not got.corrupt
            assert got.pix_fmt == f"yuv{'a' if case[2] else ''}{chroma}p{bd}le"
            assert_software_model(got, spec, bd, str(case))


@needs_ext
@pytest.mark.parametrize("bd", [10, 12])
def test_identity_quantisation_gives_the_idct_of_the_levels(sw, bd):
    """qmat * qscale = 2^(12 - b) (10 bits: the default matrix 4, qscale 1;
    12 bits: a matrix of 1, qscale 1): the decoder outputs the IDCT of the
    levels, within FFmpeg's IDCT error of the double-precision IDCT, and
    exactly the model's integer IDCT."""
    rng = np.random.default_rng(bd)
    qmat = None if bd == 10 else np.ones(64, np.uint8)
    spec = W.random_spec(rng, 96, 48, "444", 0, 0, dc_range=400, ac_range=60, density=0.5,
                         luma_qmat=qmat)
    got = sw.decode(W.write_frame(spec), TAGS[bd])
    pic = spec.pictures[0]
    for name in ("Y", "Cb", "Cr"):
        levels = getattr(pic, name.lower())
        step = 1 << (12 - bd)
        exact = prores_idct(levels * step, bd)            # the integer transform, unclipped
        ref = reference_put(levels * step, bd)            # the double-precision IDCT
        R, C = levels.shape[:2]
        plane = got.planes[name].reshape(R, 8, C, 8).transpose(0, 2, 1, 3).astype(np.int64)
        assert np.array_equal(plane, np.clip(exact, 4, (1 << bd) - 5))
        assert np.abs(plane - ref).max() <= 1


@needs_ext
@pytest.mark.parametrize("bd", [10, 12])
@pytest.mark.parametrize("qscale", [1, 2, 57, 128, 129, 200, 224])
def test_custom_matrices_and_qscale(sw, bd, qscale):
    rng = np.random.default_rng(qscale)
    spec = W.random_spec(rng, 48, 32, "422", 0, 0, dc_range=20, ac_range=6, qscale=qscale,
                         luma_qmat=rng.integers(1, 40, 64), chroma_qmat=rng.integers(1, 40, 64))
    got = sw.decode(W.write_frame(spec), TAGS[bd])
    assert_software_model(got, spec, bd, f"q={qscale}")
    # the scaled matrix the model uses (decode_slice_thread's arithmetic)
    q = qscale if qscale <= 128 else (qscale - 96) * 4
    assert np.array_equal(scaled_qmat(spec.luma_qmat, qscale).ravel(),
                          (np.asarray(spec.luma_qmat) * q + 32768) % 65536 - 32768)


@needs_ext
@pytest.mark.parametrize("bits", [8, 16])
def test_alpha_round_trips_exactly(sw, bits):
    """Flat regions, long runs (11-bit run codes), ramps (short differences),
    noise (full values), a run reaching the end of a slice and a value at the
    very end: decoded alpha == the coded value shifted as ALPHA_SHIFT_* does."""
    spec = W.blank_spec(136, 40, "444", 0, bits, log2_slice_mb_width=3)
    top = (1 << bits) - 1
    rng = np.random.default_rng(bits)
    a = spec.pictures[0].alpha
    a[:16, :] = top                                  # whole slices opaque (one long run)
    a[16:32, :64] = rng.integers(0, top + 1, (16, 64))
    a[16:32, 64:] = (np.arange(80)[None, :] * (3 if bits == 8 else 97) + np.arange(16)[:, None]) % (top + 1)
    a[32:, :] = 0
    a[32:, 100:] = top - 5
    a[-1, -1] = 7
    frames = {bd: sw.decode(W.write_frame(spec), TAGS[bd]) for bd in (10, 12)}
    for bd, f in frames.items():
        a8 = a[:40, :136]
        if bits == 16:
            want = a8 >> (16 - bd)
        else:
            want = (a8 << (bd - 8)) | (a8 >> (16 - bd))
        assert np.array_equal(f.planes["A"], want.astype(np.uint16)), f"{bits}-bit alpha at {bd} bits"


@needs_ext
def test_dc_prediction_wraps_like_int16(sw):
    """DC levels far apart: the writer codes differences modulo 2^16 as the
    decoder accumulates them in an int16_t (12 bits: the C IDCT, no asm)."""
    spec = W.blank_spec(64, 16, "422", log2_slice_mb_width=3)
    y = spec.pictures[0].y
    y[..., 0, 0] = np.array([[30000, -30000, 32767, -32768, 5, -5, 0, 12345]])
    spec.luma_qmat = np.ones(64, np.uint8)
    got = sw.decode(W.write_frame(spec), "ap4h")
    assert_planes(got, W.expected_planes(spec, 12), "dc wrap")


@needs_ext
def test_slice_header_size(sw):
    """An 8-byte slice header (explicit Cr size) without alpha decodes the same."""
    spec = _matrix_spec("422", 0, 0, 2, (72, 40))
    a = sw.decode(W.write_frame(spec), "apch")
    spec.slice_header_size = 8
    b = sw.decode(W.write_frame(spec), "apch")
    for k in a.planes:
        assert np.array_equal(a.planes[k], b.planes[k])


# ---------------------------------------------------------------- Vulkan

def _in_range_spec(case):
    """Levels and quantisers whose IDCT intermediates stay inside int16, so that
    FFmpeg's C IDCT, its x86 SIMD IDCT and the Vulkan port all agree."""
    return _matrix_spec(*case, qscale=4, dc_range=100, ac_range=12)


VK_CASES = [(c, i, a, (i + a // 8 + (c == "444")) % 4, s)
            for c in ("422", "444") for i in (0, 1, 2) for a in (0, 8, 16)
            for s in ((37, 23),)]


@needs_vk
@pytest.mark.parametrize("case", VK_CASES, ids=[f"{c}-il{i}-a{a}-s{l}" for c, i, a, l, _ in VK_CASES])
def test_vulkan_matches_software(sw, vk, case):
    spec = _in_range_spec(case)
    pkt = W.write_frame(spec)
    for bd in (10, 12):
        want = sw.decode(pkt, TAGS[bd])
        got = vk.decode(pkt, TAGS[bd])
        assert got.pix_fmt == want.pix_fmt
        assert_planes(got, want.planes, f"vulkan {case} {bd}-bit")
        assert_planes(got, W.expected_planes(spec, bd), f"vulkan vs model {case} {bd}-bit")


@needs_vk
def test_vulkan_follows_the_c_idct_where_the_x86_asm_saturates(sw, vk):
    """Out-of-range streams (dequantised coefficients wrapping int16, row
    results beyond int16): the Vulkan port reproduces FFmpeg's C IDCT exactly
    (so does ``ffmpeg -cpuflags 0``); FFmpeg's software decoder on x86-64
    uses the SSE2/AVX IDCT for 10 bits, which saturates instead of wrapping.
    Streams a real encoder writes never get there (see test_vulkan_matches_software
    and the IDCT accuracy run)."""
    spec = _matrix_spec("422", 0, 0, 3, (72, 40))        # random qscale up to 224
    pkt = W.write_frame(spec)
    got = vk.decode(pkt, "apch")
    assert_planes(got, W.expected_planes(spec, 10), "vulkan vs C model")
    soft = sw.decode(pkt, "apch")
    simd = W.expected_planes(spec, 10, simd=True)
    if all(np.array_equal(soft.planes[k], v) for k, v in simd.items()):
        differ = sum(int((soft.planes[k] != got.planes[k]).sum()) for k in simd)
        assert differ > 0      # this stream does reach the saturation
    else:                      # a build without x86 assembly: the C code
        assert_planes(soft, W.expected_planes(spec, 10), "software vs C model")
    # 12 bits has no assembly: everything agrees
    assert_planes(vk.decode(pkt, "ap4h"), sw.decode(pkt, "ap4h").planes, "12-bit")


# ---------------------------------------------------------------- .mov and PyAV

@needs_ext
@pytest.mark.parametrize("bd,chroma,interlace,alpha", [(10, "422", 0, 0), (12, "444", 1, 16),
                                                       (10, "422", 2, 8)])
def test_mov_through_pyav(tmp_path, sw, bd, chroma, interlace, alpha):
    import av

    rng = np.random.default_rng(bd + interlace)
    specs = [W.random_spec(rng, 40, 26, chroma, interlace, alpha, qscale=3, ac_range=10)
             for _ in range(3)]
    path = W.write_mov(tmp_path / "w.mov", [W.write_frame(s) for s in specs], 40, 26, TAGS[bd])
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        assert st.codec_context.codec_tag == TAGS[bd]
        frames = [f for f in c.decode(st)]
    assert len(frames) == 3
    for f, spec in zip(frames, specs):
        want = W.expected_planes(spec, bd)
        assert f.format.name == f"yuv{'a' if alpha else ''}{chroma}p{bd}le"
        for i, name in enumerate(want):
            p = f.planes[i]
            arr = np.frombuffer(p, "<u2").reshape(p.height, p.line_size // 2)[:, :p.width]
            assert np.array_equal(arr, want[name]), name
    # the file's packets are the ones written
    from pyprores.decode import demux
    with demux.open(path) as src:
        assert src.info.codec_tag == TAGS[bd]
        assert list(src.packets()) == [W.write_frame(s) for s in specs]


# ---------------------------------------------------------------- malformed slices

def _slice_bytes(pkt: bytes, picture: int, index: int) -> bytes:
    s = parse_frame(pkt).pictures[picture].slices[index]
    return pkt[s.offset:s.offset + s.size]


@needs_ext
def test_missing_chroma_fills_511(sw):
    """A slice whose Cb and Cr sizes are 0: FFmpeg 7.1 fills its chroma with 511
    (10 bits) or 2044 (12 bits), not the mid-level 512 / 2048; FFmpeg 9.0
    (libavcodec 63) with the mid-level."""
    spec = _matrix_spec("422", 0, 0, 1, (64, 32), qscale=2)
    raw = _slice_bytes(W.write_frame(spec), 0, 1)
    ysize = struct.unpack(">H", raw[2:4])[0]
    spec.raw_slices = {(0, 1): bytes([6 << 3, raw[1]]) + struct.pack(">HH", ysize, 0) + raw[6:6 + ysize]}
    pkt = W.write_frame(spec)
    mid = (native.avcodec_version() >> 16) >= 63
    for bd, fill in ((10, 512 if mid else 511), (12, 2048 if mid else 2044)):
        got = sw.decode(pkt, TAGS[bd])
        want = W.expected_planes(spec, bd)
        for k in ("Cb", "Cr"):
            assert (got.planes[k][:16, 16:32] == fill).all()
            want[k][:16, 16:32] = fill
        assert_planes(got, want, f"no chroma {bd}")


@needs_ext
def test_malformed_slices_software(sw):
    spec = _matrix_spec("422", 0, 0, 1, (64, 32), qscale=2)
    good = W.write_frame(spec)
    rng = np.random.default_rng(5)
    # garbage in one slice: the frame decodes, flagged corrupt
    spec.raw_slices = {(0, 2): bytes([6 << 3, 4]) + rng.integers(0, 256, 40, np.uint8).tobytes()}
    assert sw.decode(W.write_frame(spec), "apch").corrupt
    # a slice shorter than its 6-byte header: the picture is rejected
    spec.raw_slices = {(0, 2): b"\x30\x01\x00"}
    with pytest.raises(DecodeError, match="slice data size"):
        sw.decode(W.write_frame(spec), "apch")
    # slice index sizes that run past the picture
    spec.raw_slices = {}
    spec.index_sizes = {(0, 3): 60000}
    with pytest.raises(DecodeError):
        sw.decode(W.write_frame(spec), "apch")
    # a truncated packet
    with pytest.raises(DecodeError):
        sw.decode(good[:len(good) // 2], "apch")
    # plane sizes larger than the slice
    raw = bytearray(_slice_bytes(good, 0, 0))
    raw[2:4] = struct.pack(">H", 5000)
    spec.index_sizes = {}
    spec.raw_slices = {(0, 0): bytes(raw)}
    assert sw.decode(W.write_frame(spec), "apch").corrupt


@needs_vk
def test_malformed_slices_vulkan_never_crash(sw, vk):
    """Every malformed frame the software decoder survives, Vulkan survives
    too, and untouched slices decode identically."""
    spec = _matrix_spec("422", 0, 0, 1, (64, 32), qscale=2)
    rng = np.random.default_rng(6)
    spec.raw_slices = {(0, 2): bytes([6 << 3, 4]) + rng.integers(0, 256, 40, np.uint8).tobytes()}
    pkt = W.write_frame(spec)
    a, b = sw.decode(pkt, "apch"), vk.decode(pkt, "apch")
    for k in a.planes:      # slice 2 is the third 2-MB slice: row 1, MBs 0-1
        cols = 32 if k == "Y" else 16
        a.planes[k][16:, :cols] = b.planes[k][16:, :cols] = 0
        assert np.array_equal(a.planes[k], b.planes[k]), k


@needs_vk
def test_vulkan_rejects_what_software_rejects(vk):
    """A slice index giving a slice fewer than 6 bytes: the software decoder
    refuses the picture (decode_picture_header: 'wrong slice data size'), and
    so does the Vulkan path since issue 35 (it used to decode the others)."""
    spec = _matrix_spec("422", 0, 0, 1, (64, 32), qscale=2)
    spec.raw_slices = {(0, 2): b"\x30\x01\x00"}
    with pytest.raises(DecodeError):
        vk.decode(W.write_frame(spec), "apch")


@needs_vk
def test_vulkan_flags_corrupt_slices(vk):
    """7.1.5 patch 19: a frame with an undecodable slice is flagged corrupt, as software does."""
    spec = _matrix_spec("422", 0, 0, 1, (64, 32), qscale=2)
    rng = np.random.default_rng(5)
    spec.raw_slices = {(0, 2): bytes([6 << 3, 4]) + rng.integers(0, 256, 40, np.uint8).tobytes()}
    assert vk.decode(W.write_frame(spec), "apch").corrupt
