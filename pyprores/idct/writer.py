"""A ProRes bitstream writer: quantised coefficients in, one packet out.

:func:`write_frame` builds the bytes of one ProRes frame (what one packet of
a ``.mov`` holds: frame size, ``'icpf'``, frame header, one picture — or two
field pictures — each with its picture header, slice index and slices) from
*quantised* coefficients chosen per 8x8 block. It writes exactly what FFmpeg
7.1.5's ``libavcodec/proresdec.c`` reads, which is the specification here:

* frame header: 4:2:2 or 4:4:4, progressive or interlaced (top or bottom
  field first: two pictures of ``ceil(height / 32)`` macroblock rows each),
  8- or 16-bit alpha, custom luma / chroma quantisation matrices or the
  default (all 4), version 0 or 1;
* picture header with ``log2_desired_slice_size_in_mb`` 0..3; slices are laid
  out as ``decode_picture_header`` derives them (at the right edge of a row
  the slice width halves until it fits, so a row of 15 macroblocks with
  8-macroblock slices has slices of 8, 4, 2 and 1);
* slice header with a raw quantiser byte per slice (1..224; the decoder maps
  q > 128 to (q - 96) * 4);
* per plane: the first DC with codebook ``FIRST_DC_CB``, the others as
  sign-folded differences with ``dc_codebook`` adapting to the previous
  code (``decode_dc_coeffs``), then the AC coefficients of all blocks of the
  slice interleaved (scan position by scan position, block by block, in the
  progressive or the interlaced scan) as run / level / sign with the
  ``run_to_cb`` / ``lev_to_cb`` adaptive Rice / exp-Golomb codes
  (``decode_ac_coeffs``);
* alpha: raster order over the slice (16 rows of 16 * mb_count samples),
  differences from the previous value (short 4- or 7-bit form or the full
  value) and run lengths, as ``unpack_alpha`` reads them.

Malformed streams for robustness tests: :attr:`FrameSpec.raw_slices`
replaces the bytes of a slice, :attr:`FrameSpec.index_sizes` writes another
size into the slice index, :attr:`FrameSpec.slice_header_size` changes the
slice header (6 bytes: the Cr size is implied; 8: explicit), and the
returned packet can of course be cut or edited.

Block order inside a slice (what the decoder expects):

* luma, per macroblock left to right: top-left, top-right, bottom-left,
  bottom-right;
* 4:2:2 chroma (8x16 per macroblock): top, bottom;
* 4:4:4 chroma: top-left, **bottom-left, top-right**, bottom-right (not the
  luma order: ``decode_slice_chroma`` walks columns first).

Coefficients are given per picture and plane as an array of shape
``(block_rows, block_cols, 8, 8)`` indexed ``[v, u]`` (vertical frequency,
horizontal frequency; FFmpeg's ``block[8*v + u]``). Block ``(r, c)`` covers
rows ``8r..8r+7`` and columns ``8c..8c+7`` of that picture's plane (a field
picture's plane holds every other frame row). Values are the quantised
levels the decoder stores (it keeps them in ``int16_t``: larger values are
written as given and wrap there).

Everything is vectorised with numpy (the IDCT accuracy run writes hundreds of
thousands of blocks).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable, Mapping, Sequence, Union

import numpy as np

from ..bitstream import TWELVE_BIT_TAGS, bit_depth_for_tag
from .model import effective_qscale, i16, idct_put, scaled_qmat

__all__ = [
    "FIRST_DC_CB", "DC_CODEBOOK", "RUN_TO_CB", "LEV_TO_CB", "PROGRESSIVE_SCAN",
    "INTERLACED_SCAN", "DEFAULT_QMAT", "Picture", "FrameSpec", "SliceGeometry", "geometry",
    "slice_layout", "plane_block_shapes", "blank_spec", "random_spec", "write_frame",
    "expected_planes", "decode", "write_mov", "default_codec_tag", "CodewordTooLong",
    "max_codeword_value",
]

# -- FFmpeg's tables (proresdec.c, proresdata.c) ----------------------------------

FIRST_DC_CB = 0xB8
DC_CODEBOOK = (0x04, 0x28, 0x28, 0x4D, 0x4D, 0x70, 0x70)
RUN_TO_CB = (0x06, 0x06, 0x05, 0x05, 0x04, 0x29, 0x29, 0x29, 0x29, 0x28, 0x28, 0x28, 0x28,
             0x28, 0x28, 0x4C)
LEV_TO_CB = (0x04, 0x0A, 0x05, 0x06, 0x04, 0x28, 0x28, 0x28, 0x28, 0x4C)

#: scan index -> raster index (8*v + u)
PROGRESSIVE_SCAN = np.array([
    0, 1, 8, 9, 2, 3, 10, 11, 16, 17, 24, 25, 18, 19, 26, 27,
    4, 5, 12, 20, 13, 6, 7, 14, 21, 28, 29, 22, 15, 23, 30, 31,
    32, 33, 40, 48, 41, 34, 35, 42, 49, 56, 57, 50, 43, 36, 37, 44,
    51, 58, 59, 52, 45, 38, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63], dtype=np.int64)
INTERLACED_SCAN = np.array([
    0, 8, 1, 9, 16, 24, 17, 25, 2, 10, 3, 11, 18, 26, 19, 27,
    32, 40, 33, 34, 41, 48, 56, 49, 42, 35, 43, 50, 57, 58, 51, 59,
    4, 12, 5, 6, 13, 20, 28, 21, 14, 7, 15, 22, 29, 36, 44, 37,
    30, 23, 31, 38, 45, 52, 60, 53, 46, 39, 47, 54, 61, 62, 55, 63], dtype=np.int64)

#: the matrix decode_frame_header uses when the frame header carries none
DEFAULT_QMAT = np.full(64, 4, dtype=np.uint8)

#: DECODE_CODEWORD refuses exp-Golomb codes longer than FFMIN(MIN_CACHE_BITS, 31)
MAX_CODEWORD_BITS = 31

PLANES = ("Y", "Cb", "Cr")

ArrayLike = Union[np.ndarray, Sequence]


class CodewordTooLong(ValueError):
    """A value is too large for the codebook FFmpeg would read it with."""


# -- what to write ------------------------------------------------------------------

@dataclass
class Picture:
    """The coded content of one picture (the frame, or one field).

    ``y``, ``cb``, ``cr``: quantised levels, shape (block_rows, block_cols, 8, 8)
    (see :func:`plane_block_shapes`). ``alpha``: the coded alpha values (0..255
    or 0..65535), shape (16 * mb_height, 16 * mb_width), or None without alpha.
    ``qscale``: the raw quantiser byte, one for all slices or one per slice.
    """

    y: np.ndarray
    cb: np.ndarray
    cr: np.ndarray
    alpha: np.ndarray | None = None
    qscale: int | ArrayLike = 1


@dataclass
class FrameSpec:
    """One ProRes frame to write.

    ``pictures``: one for a progressive frame; two for an interlaced one, in
    coding order (for ``interlace=1``, top field first: pictures[0] is the top
    field, frame rows 0, 2, 4...; for ``interlace=2`` pictures[0] is the
    bottom field, rows 1, 3, 5...).

    ``luma_qmat`` / ``chroma_qmat``: 64 values 0..255 in raster order (8*v + u)
    written into the frame header, or None: no luma matrix means all 4; no
    chroma matrix means the luma one (the decoder's rules).
    """

    width: int
    height: int
    pictures: Sequence[Picture]
    chroma: str = "422"                 # "422" or "444"
    interlace: int = 0                  # 0 progressive, 1 top field first, 2 bottom field first
    alpha_bits: int = 0                 # 0, 8 or 16
    luma_qmat: ArrayLike | None = None
    chroma_qmat: ArrayLike | None = None
    log2_slice_mb_width: int = 3        # log2_desired_slice_size_in_mb, 0..3
    version: int | None = None          # None: 0 for 4:2:2 without alpha, else 1 (as prores_ks)
    creator: bytes = b"pypr"
    color: tuple[int, int, int] = (2, 2, 2)  # primaries, transfer, matrix (2: unspecified)
    #: bytes of the slice header: None = 6 without alpha (Cr size implied), 8 with
    slice_header_size: int | None = None
    #: (picture, slice index) -> bytes written verbatim instead of the coded slice
    raw_slices: Mapping[tuple[int, int], bytes] = field(default_factory=dict)
    #: (picture, slice index) -> size written into the slice index instead of the real one
    index_sizes: Mapping[tuple[int, int], int] = field(default_factory=dict)

    @property
    def picture_count(self) -> int:
        return 2 if self.interlace else 1

    @property
    def luma_qmat_array(self) -> np.ndarray:
        return DEFAULT_QMAT if self.luma_qmat is None else _qmat(self.luma_qmat)

    @property
    def chroma_qmat_array(self) -> np.ndarray:
        return self.luma_qmat_array if self.chroma_qmat is None else _qmat(self.chroma_qmat)


@dataclass(frozen=True)
class SliceGeometry:
    index: int
    mb_x: int
    mb_y: int
    mb_count: int


def geometry(width: int, height: int, interlace: int) -> tuple[int, int]:
    """(mb_width, mb_height) of each picture, as decode_picture_header computes them."""
    mb_width = (width + 15) >> 4
    mb_height = (height + 31) >> 5 if interlace else (height + 15) >> 4
    return mb_width, mb_height


def slice_layout(mb_width: int, mb_height: int, log2_slice_mb_width: int) -> list[SliceGeometry]:
    """Slices of a picture in index order: at the right end of a macroblock row
    the width halves until the slice fits (decode_picture_header)."""
    if not 0 <= log2_slice_mb_width <= 3:
        raise ValueError(f"log2_slice_mb_width must be 0..3, not {log2_slice_mb_width}")
    out = []
    for mb_y in range(mb_height):
        mb_x, n = 0, 1 << log2_slice_mb_width
        while mb_x < mb_width:
            while mb_width - mb_x < n:
                n >>= 1
            out.append(SliceGeometry(len(out), mb_x, mb_y, n))
            mb_x += n
    return out


def plane_block_shapes(width: int, height: int, chroma: str = "422",
                       interlace: int = 0) -> dict[str, tuple[int, int]]:
    """(block_rows, block_cols) of Y, Cb and Cr in each picture; "A" gives the
    alpha array shape (rows, cols) in samples."""
    _check_chroma(chroma)
    mbw, mbh = geometry(width, height, interlace)
    cw = 2 * mbw if chroma == "444" else mbw
    return {"Y": (2 * mbh, 2 * mbw), "Cb": (2 * mbh, cw), "Cr": (2 * mbh, cw),
            "A": (16 * mbh, 16 * mbw)}


def blank_spec(width: int, height: int, chroma: str = "422", interlace: int = 0,
               alpha_bits: int = 0, **kwargs) -> FrameSpec:
    """A FrameSpec whose pictures hold only zero coefficients (and opaque alpha)."""
    shapes = plane_block_shapes(width, height, chroma, interlace)
    pics = []
    for _ in range(2 if interlace else 1):
        planes = {p: np.zeros(shapes[p] + (8, 8), np.int64) for p in PLANES}
        alpha = (np.full(shapes["A"], (1 << alpha_bits) - 1, np.int64) if alpha_bits else None)
        pics.append(Picture(planes["Y"], planes["Cb"], planes["Cr"], alpha))
    return FrameSpec(width, height, pics, chroma=chroma, interlace=interlace,
                     alpha_bits=alpha_bits, **kwargs)


def random_spec(rng: np.random.Generator, width: int, height: int, chroma: str = "422",
                interlace: int = 0, alpha_bits: int = 0, *, dc_range: int = 200,
                ac_range: int = 40, density: float = 0.3, qscale: int | str = 1,
                **kwargs) -> FrameSpec:
    """Random coefficients: DC levels uniform in [-dc_range, dc_range], AC levels
    uniform in [-ac_range, ac_range] with probability ``density`` (else 0);
    alpha: flat regions, ramps and noise so that both the run-length and the
    difference codes are used. ``qscale="random"``: a random byte 1..224 per
    slice."""
    spec = blank_spec(width, height, chroma, interlace, alpha_bits, **kwargs)
    mbw, mbh = geometry(width, height, interlace)
    n_slices = len(slice_layout(mbw, mbh, spec.log2_slice_mb_width))
    for pic in spec.pictures:
        for name in ("y", "cb", "cr"):
            arr = getattr(pic, name)
            ac = rng.integers(-ac_range, ac_range + 1, size=arr.shape)
            ac *= rng.random(arr.shape) < density
            ac[..., 0, 0] = rng.integers(-dc_range, dc_range + 1, size=arr.shape[:2])
            arr[...] = ac
        if alpha_bits:
            pic.alpha = _random_alpha(rng, pic.alpha.shape, alpha_bits)
        pic.qscale = (rng.integers(1, 225, size=n_slices) if qscale == "random" else qscale)
    return spec


def _random_alpha(rng: np.random.Generator, shape: tuple[int, int], bits: int) -> np.ndarray:
    h, w = shape
    top = (1 << bits) - 1
    y, x = np.mgrid[0:h, 0:w]
    a = np.full(shape, top, np.int64)                       # opaque: long runs
    ramp = (x * 3 + y) % (top + 1)
    a = np.where((x // 16 + y // 8) % 3 == 1, ramp, a)       # small steps: short diffs
    noise = rng.integers(0, top + 1, size=shape)
    a = np.where((x // 16 + y // 8) % 3 == 2, noise, a)      # large jumps: full values
    a[(y % 7 == 3) & (x % 11 < 5)] = 0                       # runs of zeros
    a[-1, :] = rng.integers(0, top + 1, size=w)              # a value at the very end
    return a


# -- entropy coding ---------------------------------------------------------------

def _vlc(vals: np.ndarray, codebooks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rice / exp-Golomb codewords (as DECODE_CODEWORD reads them) for unsigned
    ``vals`` with per-value ``codebooks``: (code, length in bits)."""
    vals = np.asarray(vals, dtype=np.int64)
    cb = np.asarray(codebooks, dtype=np.int64)
    if vals.size == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    if (vals < 0).any():
        raise ValueError("negative value for an unsigned codeword")
    switch_bits = cb & 3
    rice = cb >> 5
    exp = (cb >> 2) & 7
    switch_val = (switch_bits + 1) << rice
    is_rice = vals < switch_val
    # Rice: q = val >> rice zeros, a one, the rice low bits
    q = vals >> rice
    rice_code = (np.int64(1) << rice) | (vals & ((np.int64(1) << rice) - 1))
    rice_len = q + 1 + rice
    # exp-Golomb: v' = val - switch_val + 2^exp, written in 2e + 1 - exp + switch_bits + 1 bits
    v = np.where(is_rice, 1, vals - switch_val + (np.int64(1) << exp))
    e = np.frexp(v.astype(np.float64))[1].astype(np.int64) - 1
    zeros = e - exp + switch_bits + 1
    exp_len = zeros + e + 1
    if not is_rice.all():
        too_long = ~is_rice & (exp_len > MAX_CODEWORD_BITS)
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise CodewordTooLong(
                f"value {int(vals[i])} needs a {int(exp_len[i])}-bit codeword in codebook "
                f"0x{int(cb[i]):02X}; FFmpeg reads at most {MAX_CODEWORD_BITS} bits")
    code = np.where(is_rice, rice_code, v).astype(np.uint64)
    length = np.where(is_rice, rice_len, exp_len)
    return code, length


def max_codeword_value(codebook: int) -> int:
    """The largest value FFmpeg can read in ``codebook``: its exp-Golomb
    codewords may be at most 31 bits long (DECODE_CODEWORD)."""
    switch_bits, rice, exp = codebook & 3, codebook >> 5, (codebook >> 2) & 7
    q = (MAX_CODEWORD_BITS - exp + switch_bits) // 2        # leading zeros
    e = q + exp - switch_bits - 1
    return (1 << (e + 1)) - 1 + ((switch_bits + 1) << rice) - (1 << exp)


def _make_code(x: np.ndarray) -> np.ndarray:
    """Signed -> unsigned as TOSIGNED undoes it: 2x for x >= 0, -2x - 1 otherwise."""
    return np.where(x >= 0, 2 * x, -2 * x - 1)


def _plane_codewords(levels: np.ndarray, scan: np.ndarray) -> tuple[np.ndarray, ...]:
    """Codewords of one plane for S slices of B blocks each.

    ``levels``: (S, B, 64) raster-order levels. Returns (slice, seq, code, length)
    arrays: seq orders the codewords inside each slice."""
    S, B, _ = levels.shape
    slices, seqs, codes, lens = [], [], [], []

    # DC: decode_dc_coeffs
    dc = i16(levels[:, :, 0])
    c0, l0 = _vlc(_make_code(dc[:, 0]), np.full(S, FIRST_DC_CB))
    slices.append(np.arange(S))
    seqs.append(np.zeros(S, np.int64))
    codes.append(c0)
    lens.append(l0)
    if B > 1:
        delta = i16(dc[:, 1:] - dc[:, :-1])       # the decoder adds modulo 2^16
        neg = delta < 0
        prev_neg = np.concatenate([np.zeros((S, 1), bool), neg[:, :-1]], axis=1)
        code = _make_code(np.where(prev_neg, -delta, delta))
        cbi = np.concatenate([np.full((S, 1), 5), np.minimum(code[:, :-1], 6)], axis=1)
        c, ln = _vlc(code.ravel(), np.asarray(DC_CODEBOOK)[cbi.ravel()])
        slices.append(np.repeat(np.arange(S), B - 1))
        seqs.append(np.tile(np.arange(1, B), S))
        codes.append(c)
        lens.append(ln)

    # AC: decode_ac_coeffs, positions p = scan_index * B + block for p >= B
    scanned = levels[:, :, scan]                       # (S, B, 64) in scan order
    lin = scanned.transpose(0, 2, 1).reshape(S, 64 * B)[:, B:]
    s_idx, p_idx = np.nonzero(lin)
    if s_idx.size:
        vals = lin[s_idx, p_idx]
        pos = p_idx + B
        first = np.ones(s_idx.size, bool)
        first[1:] = s_idx[1:] != s_idx[:-1]
        prev_pos = np.where(first, B - 1, np.concatenate([[0], pos[:-1]]))
        run = pos - prev_pos - 1
        level = np.abs(vals)
        prev_run = np.where(first, 4, np.concatenate([[0], run[:-1]]))
        prev_level = np.where(first, 2, np.concatenate([[0], level[:-1]]))
        rc, rl = _vlc(run, np.asarray(RUN_TO_CB)[np.minimum(prev_run, 15)])
        lc, ll = _vlc(level - 1, np.asarray(LEV_TO_CB)[np.minimum(prev_level, 9)])
        sc = (vals < 0).astype(np.uint64)
        n = s_idx.size
        base = B + 3 * np.arange(n)
        slices += [s_idx, s_idx, s_idx]
        seqs += [base, base + 1, base + 2]
        codes += [rc, lc, sc]
        lens += [rl, ll, np.ones(n, np.int64)]
    return (np.concatenate(slices), np.concatenate(seqs), np.concatenate(codes),
            np.concatenate(lens))


def _alpha_codewords(values: np.ndarray, bits: int) -> tuple[list[int], list[int]]:
    """Codewords of one slice's alpha (raster order), as unpack_alpha reads them."""
    mask = (1 << bits) - 1
    dbits = 4 if bits == 8 else 7        # short difference: dbits - 1 magnitude bits + sign
    dmax = 1 << (dbits - 1)
    vals = [int(v) & mask for v in np.asarray(values).ravel()]
    n = len(vals)
    codes: list[int] = []
    lens: list[int] = []

    def put(code: int, length: int) -> None:
        codes.append(code)
        lens.append(length)

    def put_run(run: int) -> None:       # val = get_bits(4); if (!val) val = get_bits(11)
        if 1 <= run <= 15:
            put(run, 4)
        else:
            put(run, 15)                 # 4 zero bits, then 11 bits

    prev, i = mask, 0
    while i < n:
        v = vals[i]
        diff = (v - prev) & mask
        if diff >= (1 << bits) - dmax:
            diff -= 1 << bits
        if 1 <= abs(diff) <= dmax:       # '0', then ((|d| - 1) << 1 | sign) in dbits bits
            put(((abs(diff) - 1) << 1) | (diff < 0), 1 + dbits)
        else:                            # '1', then the difference modulo 2^bits
            put((1 << bits) | (diff & mask), 1 + bits)
        prev = v
        i += 1
        j = i
        while j < n and vals[j] == v:
            j += 1
        run = j - i
        if i >= n:                       # the decoder still reads a (clamped) run length
            put_run(0)
        elif run == 0:
            put(1, 1)                    # another value follows
        else:
            if run > 2047:
                raise ValueError("alpha run longer than 2047 samples")  # slices hold <= 2048
            put(0, 1)
            put_run(run)
            i = j
    return codes, lens


def _pack(units: np.ndarray, codes: np.ndarray, lens: np.ndarray,
          n_units: int) -> tuple[bytes, np.ndarray]:
    """Pack codewords (already ordered, units non-decreasing) MSB first, each
    unit padded with zero bits to a byte boundary. Returns (bytes, byte offsets
    of the units, n_units + 1 entries)."""
    lens = lens.astype(np.int64)
    unit_bits = np.bincount(units, weights=lens, minlength=n_units).astype(np.int64)
    unit_bytes = (unit_bits + 7) >> 3
    offsets = np.concatenate([[0], np.cumsum(unit_bytes)])
    total = int(offsets[-1])
    if units.size == 0:
        return bytes(total), offsets
    unit_bit_base = np.concatenate([[0], np.cumsum(unit_bits)])[:-1]
    start = np.cumsum(lens) - lens
    pos = offsets[units] * 8 + (start - unit_bit_base[units])
    words = np.zeros(total // 8 + 2, np.uint64)
    w = pos >> 6
    end = (pos & 63) + lens                     # end bit inside word w (may pass 64)
    fits = end <= 64
    c = codes.astype(np.uint64)
    sh1 = np.where(fits, 64 - end, 0).astype(np.uint64)
    sh2 = np.where(fits, 0, end - 64).astype(np.uint64)
    part1 = np.where(fits, c << sh1, c >> sh2)
    bounds = np.flatnonzero(np.diff(w)) + 1
    starts = np.concatenate([[0], bounds])
    words[w[starts]] |= np.bitwise_or.reduceat(part1, starts)
    if not fits.all():
        spill = ~fits
        sh3 = (128 - end[spill]).astype(np.uint64)   # 64 < end <= 95: 33..63
        words[w[spill] + 1] |= c[spill] << sh3
    return words.astype(">u8").tobytes()[:total], offsets


# -- the frame ----------------------------------------------------------------------

def _check_chroma(chroma: str) -> None:
    if chroma not in ("422", "444"):
        raise ValueError(f"chroma must be '422' or '444', not {chroma!r}")


def _qmat(q: ArrayLike) -> np.ndarray:
    a = np.asarray(q).reshape(-1)
    if a.size != 64 or (a < 0).any() or (a > 255).any():
        raise ValueError("a quantisation matrix is 64 values 0..255")
    return a.astype(np.uint8)


def _slice_block_index(slices: list[SliceGeometry], plane: str,
                       chroma: str) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per slice width (MBs): (slice indices, block rows (S, B), block cols (S, B))
    in the order decode_slice_luma / decode_slice_chroma consume the blocks."""
    if plane == "Y" or chroma == "444":
        # luma: TL TR BL BR; 4:4:4 chroma: TL BL TR BR
        dr, dc = ((0, 0, 1, 1), (0, 1, 0, 1)) if plane == "Y" else ((0, 1, 0, 1), (0, 0, 1, 1))
        per_mb, mb_cols = 4, 2
    else:
        dr, dc = (0, 1), (0, 0)
        per_mb, mb_cols = 2, 1
    groups: dict[int, list[SliceGeometry]] = {}
    for s in slices:
        groups.setdefault(s.mb_count, []).append(s)
    out = {}
    for n, ss in groups.items():
        idx = np.array([s.index for s in ss])
        mx = np.array([s.mb_x for s in ss])[:, None]
        my = np.array([s.mb_y for s in ss])[:, None]
        m = np.repeat(np.arange(n), per_mb)[None, :]
        k = np.tile(np.arange(per_mb), n)[None, :]
        rows = 2 * my + np.asarray(dr)[k]
        cols = mb_cols * (mx + m) + np.asarray(dc)[k]
        out[n] = (idx, rows, cols)
    return out


def _check_picture(spec: FrameSpec, p: int, pic: Picture, n_slices: int) -> None:
    shapes = plane_block_shapes(spec.width, spec.height, spec.chroma, spec.interlace)
    for name in PLANES:
        arr = np.asarray(getattr(pic, name.lower()))
        if arr.shape != shapes[name] + (8, 8):
            raise ValueError(f"picture {p} plane {name}: shape {arr.shape}, expected "
                             f"{shapes[name] + (8, 8)}")
    if spec.alpha_bits:
        if pic.alpha is None or np.asarray(pic.alpha).shape != shapes["A"]:
            raise ValueError(f"picture {p}: alpha must have shape {shapes['A']}")
    q = np.asarray(pic.qscale)
    if q.ndim and q.shape != (n_slices,):
        raise ValueError(f"picture {p}: qscale must be one value or {n_slices} values")
    if ((q < 0) | (q > 255)).any():
        raise ValueError("a qscale byte is 0..255")


def _encode_slices(spec: FrameSpec, p: int, slices: list[SliceGeometry]) -> list[bytes]:
    """The bytes of every slice of picture ``p`` (raw_slices not applied)."""
    pic = spec.pictures[p]
    scan = INTERLACED_SCAN if spec.interlace else PROGRESSIVE_SCAN
    n_planes = 4 if spec.alpha_bits else 3
    n = len(slices)
    all_units, all_seq, all_codes, all_lens = [], [], [], []
    for pl, name in enumerate(PLANES):
        arr = np.asarray(getattr(pic, name.lower()), dtype=np.int64)
        for width, (idx, rows, cols) in _slice_block_index(slices, name, spec.chroma).items():
            levels = arr[rows, cols].reshape(len(idx), rows.shape[1], 64)
            s, seq, c, ln = _plane_codewords(levels, scan)
            all_units.append(idx[s] * n_planes + pl)
            all_seq.append(seq)
            all_codes.append(c)
            all_lens.append(ln)
    if spec.alpha_bits:
        alpha = np.asarray(pic.alpha, dtype=np.int64)
        for s in slices:
            region = alpha[16 * s.mb_y:16 * s.mb_y + 16, 16 * s.mb_x:16 * (s.mb_x + s.mb_count)]
            c, ln = _alpha_codewords(region, spec.alpha_bits)
            all_units.append(np.full(len(c), s.index * n_planes + 3))
            all_seq.append(np.arange(len(c)))
            all_codes.append(np.array(c, dtype=np.uint64))
            all_lens.append(np.array(ln, dtype=np.int64))
    units = np.concatenate(all_units)
    seq = np.concatenate(all_seq)
    order = np.lexsort((seq, units))
    data, offsets = _pack(units[order], np.concatenate(all_codes)[order],
                          np.concatenate(all_lens)[order], n * n_planes)

    hdr = spec.slice_header_size or (8 if spec.alpha_bits else 6)
    if hdr < 6 or hdr > 31:
        raise ValueError("slice_header_size must be 6..31 bytes")
    if spec.alpha_bits and hdr < 8:
        raise ValueError("with alpha the slice header needs the Cr size (8 bytes)")
    q = np.broadcast_to(np.asarray(pic.qscale, dtype=np.int64), (n,))
    out = []
    for s in slices:
        parts = [data[offsets[s.index * n_planes + k]:offsets[s.index * n_planes + k + 1]]
                 for k in range(n_planes)]
        if hdr + sum(len(x) for x in parts) > 0xFFFF:
            raise ValueError(f"picture {p} slice {s.index} needs {hdr + sum(len(x) for x in parts)} "
                             "bytes; the slice index holds 16-bit sizes (use narrower slices)")
        header = bytes([hdr << 3, int(q[s.index])]) + struct.pack(">HH", len(parts[0]), len(parts[1]))
        if hdr >= 8:
            header += struct.pack(">H", len(parts[2]))
        header = header.ljust(hdr, b"\0")
        out.append(header + b"".join(parts))
    return out


def write_frame(spec: FrameSpec) -> bytes:
    """The bytes of one ProRes frame (one packet) for ``spec``."""
    _check_chroma(spec.chroma)
    if spec.interlace not in (0, 1, 2, 3):
        raise ValueError("interlace is 0 (progressive), 1 (top field first) or 2 (bottom first)")
    if spec.alpha_bits not in (0, 8, 16):
        raise ValueError("alpha_bits is 0, 8 or 16")
    if not (1 <= spec.width <= 65535 and 1 <= spec.height <= 65535):
        raise ValueError("width and height must be 1..65535")
    if len(spec.pictures) != spec.picture_count:
        raise ValueError(f"{'an interlaced' if spec.interlace else 'a progressive'} frame has "
                         f"{spec.picture_count} picture(s), not {len(spec.pictures)}")
    mbw, mbh = geometry(spec.width, spec.height, spec.interlace)
    slices = slice_layout(mbw, mbh, spec.log2_slice_mb_width)

    # frame header (decode_frame_header)
    qflags, qbytes = 0, b""
    if spec.luma_qmat is not None:
        qflags |= 2
        qbytes += _qmat(spec.luma_qmat).tobytes()
    if spec.chroma_qmat is not None:
        qflags |= 1
        qbytes += _qmat(spec.chroma_qmat).tobytes()
    version = spec.version
    if version is None:
        version = 0 if spec.chroma == "422" and not spec.alpha_bits else 1
    chroma_bits = 3 if spec.chroma == "444" else 2
    flags = (chroma_bits << 6) | (spec.interlace << 2)
    alpha_info = {0: 0, 8: 1, 16: 2}[spec.alpha_bits]
    creator = spec.creator[:4].ljust(4, b" ")
    body = struct.pack(">HH4sHHBBBBBBBB", 20 + len(qbytes), version, creator, spec.width,
                       spec.height, flags, 0, *spec.color, alpha_info, 0, qflags) + qbytes

    pictures = []
    for p, pic in enumerate(spec.pictures):
        _check_picture(spec, p, pic, len(slices))
        coded = _encode_slices(spec, p, slices)
        for (pp, i), raw in spec.raw_slices.items():
            if pp == p:
                coded[i] = bytes(raw)
        sizes = [spec.index_sizes.get((p, i), len(b)) for i, b in enumerate(coded)]
        if any(not 0 <= n <= 0xFFFF for n in sizes):
            raise ValueError(f"picture {p}: a slice index entry must be 0..65535")
        index = struct.pack(f">{len(sizes)}H", *sizes)
        data = b"".join(coded)
        size = 8 + len(index) + len(data)
        header = struct.pack(">BIHB", 8 << 3, size, len(slices) & 0xFFFF,
                             spec.log2_slice_mb_width << 4)
        pictures.append(header + index + data)
    payload = b"icpf" + body + b"".join(pictures)
    return struct.pack(">I", 4 + len(payload)) + payload


# -- what the decoder gives back -----------------------------------------------------

def _picture_rows(spec: FrameSpec, p: int) -> int:
    """0 when picture ``p`` holds frame rows 0, 2, 4... (or all rows), 1 for rows 1, 3..."""
    if not spec.interlace:
        return 0
    top_first = spec.interlace == 1
    return 0 if (p == 0) == top_first else 1


def _slice_qscale_map(spec: FrameSpec, p: int, plane: str) -> np.ndarray:
    """The raw qscale byte of the slice each block of ``plane`` belongs to."""
    shapes = plane_block_shapes(spec.width, spec.height, spec.chroma, spec.interlace)
    mbw, mbh = geometry(spec.width, spec.height, spec.interlace)
    slices = slice_layout(mbw, mbh, spec.log2_slice_mb_width)
    q = np.broadcast_to(np.asarray(spec.pictures[p].qscale, dtype=np.int64), (len(slices),))
    out = np.zeros(shapes[plane], np.int64)
    per_mb = 2 if plane == "Y" or spec.chroma == "444" else 1
    for s in slices:
        out[2 * s.mb_y:2 * s.mb_y + 2, per_mb * s.mb_x:per_mb * (s.mb_x + s.mb_count)] = q[s.index]
    return out


def _alpha_samples(a: np.ndarray, alpha_bits: int, bit_depth: int) -> np.ndarray:
    """ALPHA_SHIFT_*: the coded alpha value as a 10- or 12-bit sample."""
    a = np.asarray(a, dtype=np.int64) & ((1 << alpha_bits) - 1)
    if alpha_bits == 16:
        return a >> (16 - bit_depth)
    return (a << (bit_depth - 8)) | (a >> (16 - bit_depth))


def expected_planes(spec: FrameSpec, bit_depth: int, simd: bool = False) -> dict[str, np.ndarray]:
    """The planes FFmpeg's decoder outputs for ``spec`` at ``bit_depth`` (10 or
    12, chosen by the codec tag), computed with the exact model of its
    arithmetic (:mod:`pyprores.idct.model`): Y, Cb, Cr (and A), uint16, of the
    visible size. Not meaningful with raw_slices / index_sizes.

    ``simd=True`` models the x86-64 assembly IDCT FFmpeg's software decoder
    uses for 10 bits (12 bits has none: the C code either way); it differs
    from the C code only where an IDCT intermediate leaves the int16 range."""
    if bit_depth not in (10, 12):
        raise ValueError("bit_depth is 10 or 12")
    w, h = spec.width, spec.height
    cw = w if spec.chroma == "444" else (w + 1) >> 1
    qmats = {"Y": spec.luma_qmat_array, "Cb": spec.chroma_qmat_array, "Cr": spec.chroma_qmat_array}
    out = {}
    for name in PLANES + (("A",) if spec.alpha_bits else ()):
        full = None
        for p, pic in enumerate(spec.pictures):
            if name == "A":
                plane = _alpha_samples(pic.alpha, spec.alpha_bits, bit_depth)
            else:
                lv = np.asarray(getattr(pic, name.lower()), dtype=np.int64)
                qm = scaled_qmat(qmats[name], _slice_qscale_map(spec, p, name))
                px = idct_put(lv, qm, bit_depth, simd and bit_depth == 10).astype(np.int64)      # (R, C, 8, 8)
                R, C = px.shape[:2]
                plane = px.transpose(0, 2, 1, 3).reshape(R * 8, C * 8)
            if full is None:
                step = 2 if spec.interlace else 1
                full = np.zeros((plane.shape[0] * step, plane.shape[1]), np.int64)
            r0 = _picture_rows(spec, p)
            full[r0::(2 if spec.interlace else 1)] = plane
        out[name] = full[:h, :(cw if name in ("Cb", "Cr") else w)].astype(np.uint16)
    return out


# -- using the packets ----------------------------------------------------------------

def default_codec_tag(bit_depth: int = 10, spec: FrameSpec | None = None) -> str:
    """A codec tag that makes FFmpeg decode at ``bit_depth``: 'apch' (422 HQ) for
    10 bits, 'ap4h' (4444) for 12. FFmpeg takes the bit depth from the tag only."""
    if bit_depth not in (10, 12):
        raise ValueError("bit_depth is 10 or 12")
    return "ap4h" if bit_depth == 12 else "apch"


def decode(packet: bytes | FrameSpec, backend: str = "software", codec_tag: str = "apch",
           device: str | None = None, session=None):
    """Decode one packet (or ``write_frame(spec)``) with pyprores.decode.native: a
    :class:`pyprores.model.Frame`. Pass an open ``session`` to reuse it."""
    from ..decode import native

    if isinstance(packet, FrameSpec):
        packet = write_frame(packet)
    if session is not None:
        return session.decode(packet, codec_tag)
    with native.Session(backend, device=device) as s:
        return s.decode(packet, codec_tag)


#: prores_aw profile number for each codec tag: the encoder PyAV opens for the
#: stream sets the tag from its profile (nothing is encoded with it)
_PROFILE_FOR_TAG = {"apco": 0, "apcs": 1, "apcn": 2, "apch": 3, "ap4h": 4, "ap4x": 5}


def write_mov(path: str | os.PathLike, packets: Iterable[bytes], width: int, height: int,
              codec_tag: str = "apch", rate: int = 25) -> str:
    """Mux ProRes ``packets`` into a QuickTime file with PyAV (no re-encoding).

    The codec tag matters: FFmpeg decodes 'ap4h' / 'ap4x' at 12 bits, the
    others ('apco', 'apcs', 'apcn', 'apch') at 10, whatever the frame header
    says about chroma or alpha."""
    import av

    if codec_tag not in _PROFILE_FOR_TAG:
        raise ValueError(f"codec tag must be one of {', '.join(_PROFILE_FOR_TAG)}, not {codec_tag!r}")
    path = os.fspath(path)
    profile = _PROFILE_FOR_TAG[codec_tag]
    with av.open(path, "w", format="mov") as out:
        stream = out.add_stream("prores", rate=rate, options={"profile": str(profile)})
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv444p10le" if profile >= 4 else "yuv422p10le"
        stream.time_base = Fraction(1, rate)
        for n, data in enumerate(packets):
            pkt = av.Packet(bytes(data))
            pkt.stream = stream
            pkt.pts = pkt.dts = n
            pkt.time_base = stream.time_base
            pkt.is_keyframe = True
            out.mux(pkt)
    return path


__all__ += ["bit_depth_for_tag", "effective_qscale"]
