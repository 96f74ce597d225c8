"""An exact numpy model of FFmpeg 7.1.5's ProRes dequantisation and IDCT.

This is the arithmetic of ``ff_prores_idct_10`` / ``ff_prores_idct_12``
(``libavcodec/simple_idct.c``, the row and column passes of
``simple_idct_template.c`` for ``BIT_DEPTH`` 10 with ``EXTRA_SHIFT`` and for
``BIT_DEPTH`` 12) followed by ``put_pixels_10/12`` of ``proresdsp.c``, ported
operation by operation, including every place where the C code narrows a
value to 16 bits:

* the scaled quantiser ``qmat[i] * qscale`` is stored in an ``int16_t``;
* each coefficient is stored in an ``int16_t`` block, and so is its product
  with the scaled quantiser (``block[i] *= qmat[i]``);
* the row pass stores its results in the ``int16_t`` block, and so does the
  ``block[i] += 8192`` bias of the column pass;
* sums are formed in unsigned 32-bit arithmetic and converted to ``int``
  before the arithmetic right shift.

The row pass has the DC-only shortcut of ``idctRowCondDC`` (a row whose AC
coefficients are all zero becomes ``(row[0] + 1) >> 1`` everywhere). For
10 bits it equals the full formula; for 12 bits it does not (``W4`` is
32767, not 32768, so the full formula would round differently), so the
shortcut is part of the specification here.

Blocks are numpy arrays of shape ``(..., 8, 8)`` indexed ``[v, u]`` (vertical
frequency, horizontal frequency), i.e. FFmpeg's ``block[8*v + u]`` with the
identity permutation; outputs are indexed ``[y, x]``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CONSTANTS", "i16", "i32", "scaled_qmat", "effective_qscale", "dequantise",
           "prores_idct", "idct_put", "reference_idct", "reference_fdct", "reference_put", "clip_range",
           "output_bias"]

#: per bit depth: W1..W7, row shift (including EXTRA_SHIFT), column shift
CONSTANTS = {
    10: dict(W=(None, 22725, 21407, 19265, 16384, 12873, 8867, 4520), row_shift=13 + 2,
             col_shift=18),
    12: dict(W=(None, 45451, 42813, 38531, 32767, 25746, 17734, 9041), row_shift=16 + 0,
             col_shift=17),
}

#: the bias added to the first row before the column pass (both depths)
COLUMN_BIAS = 8192


def i16(x: np.ndarray) -> np.ndarray:
    """Store into int16_t (two's complement wrap), kept as int64."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + 0x8000) & 0xFFFF) - 0x8000


def i32(x: np.ndarray) -> np.ndarray:
    """(int) of an unsigned 32-bit result (two's complement wrap), as int64."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def clip_range(bit_depth: int) -> tuple[int, int]:
    """proresdsp.c's CLIP_MIN / CLIP_MAX_10 / CLIP_MAX_12: [4, 2^b - 5]."""
    return 4, (1 << bit_depth) - 4 - 1


def output_bias(bit_depth: int) -> int:
    """Mid-level the +8192 column bias becomes in the output: 512 or 2048."""
    return 1 << (bit_depth - 1)


def effective_qscale(qscale_byte) -> np.ndarray:
    """decode_slice_thread: av_clip(q, 1, 224), then q > 128 -> (q - 96) << 2."""
    q = np.clip(np.asarray(qscale_byte, dtype=np.int64), 1, 224)
    return np.where(q > 128, (q - 96) << 2, q)


def scaled_qmat(qmat, qscale_byte) -> np.ndarray:
    """qmat_luma_scaled[i] = qmat[i] * qscale, stored in int16_t.

    ``qmat``: 64 uint8 values in raster order (or shape (8, 8)); ``qscale_byte``:
    the raw slice-header byte, scalar or any shape (broadcast in front of (8, 8))."""
    qm = np.asarray(qmat, dtype=np.int64).reshape(8, 8)
    q = effective_qscale(qscale_byte)
    return i16(q[..., None, None] * qm)


def dequantise(levels: np.ndarray, qmat_scaled: np.ndarray) -> np.ndarray:
    """The coefficients as stored by decode_dc/ac_coeffs (int16_t), times the
    scaled quantiser, stored in int16_t (``block[i] *= qmat[i]``)."""
    return i16(i16(levels) * np.asarray(qmat_scaled, dtype=np.int64))


def _sat16(x: np.ndarray) -> np.ndarray:
    """packssdw: int32 -> int16 with saturation."""
    return np.clip(x, -0x8000, 0x7FFF)


def prores_idct(block: np.ndarray, bit_depth: int, simd: bool = False) -> np.ndarray:
    """ff_prores_idct_10/12 after the dequantisation: int16 results (int64 array).

    ``block``: dequantised coefficients, shape (..., 8, 8), int16 values.

    ``simd=True`` (10 bits only) models ``ff_prores_idct_put_10_sse2/avx``
    (libavcodec/x86/proresdsp.asm), which FFmpeg uses instead of the C code on
    x86-64 builds with assembly: the same products and shifts, but the row
    results are *saturated* to int16 (packssdw) instead of wrapped, the row
    rounding is a 16-bit ``row[0] + 1`` (paddw) and the column bias a 16-bit
    ``+ 8200`` (8192 + 8) — identical to the C code unless an intermediate
    leaves the int16 range."""
    if simd and bit_depth != 10:
        raise ValueError("FFmpeg has a SIMD ProRes IDCT for 10 bits only")
    c = CONSTANTS[bit_depth]
    _, W1, W2, W3, W4, W5, W6, W7 = c["W"]
    rs, cs = c["row_shift"], c["col_shift"]
    b = i16(block).astype(np.int64)

    # -- rows: idctRowCondDC_extrashift_10(row, 2) / idctRowCondDC_int16_12bit(row, 0)
    r = [b[..., k] for k in range(8)]
    dc_only = np.all(b[..., 1:] == 0, axis=-1)
    # DC_SHIFT - extra_shift is -1 for both depths: ((row[0] + 1) >> 1) & 0xffff
    dc_val = i16((r[0] + 1) >> 1)
    if simd:        # paddw pw_1, then W4 * (row[0] + 1): the rounding term, 16-bit wrap
        a0 = W4 * i16(r[0] + 1)
    else:
        a0 = W4 * r[0] + (1 << (rs - 1))
    a1, a2, a3 = a0, a0, a0
    a0 = a0 + W2 * r[2]
    a1 = a1 + W6 * r[2]
    a2 = a2 - W6 * r[2]
    a3 = a3 - W2 * r[2]
    b0 = W1 * r[1] + W3 * r[3]
    b1 = W3 * r[1] - W7 * r[3]
    b2 = W5 * r[1] - W1 * r[3]
    b3 = W7 * r[1] - W5 * r[3]
    # the `if (AV_RN64A(row + 4))` branch only skips terms that are zero
    a0 = a0 + W4 * r[4] + W6 * r[6]
    a1 = a1 - W4 * r[4] - W2 * r[6]
    a2 = a2 - W4 * r[4] + W2 * r[6]
    a3 = a3 + W4 * r[4] - W6 * r[6]
    b0 = b0 + W5 * r[5] + W7 * r[7]
    b1 = b1 - W1 * r[5] - W5 * r[7]
    b2 = b2 + W7 * r[5] + W3 * r[7]
    b3 = b3 + W3 * r[5] - W1 * r[7]
    full = [a0 + b0, a1 + b1, a2 + b2, a3 + b3, a3 - b3, a2 - b2, a1 - b1, a0 - b0]
    narrow = _sat16 if simd else i16
    rows = np.stack([narrow(i32(v) >> rs) for v in full], axis=-1)
    if not simd:    # the asm has no DC-only shortcut (for 10 bits it is the same)
        rows = np.where(dc_only[..., None], dc_val[..., None], rows)

    # -- columns: block[i] += 8192 (int16_t), then idctSparseCol_*
    col = [rows[..., k, :] for k in range(8)]
    if simd:        # paddw pw_88 (0x2008 = 8192 + 8): bias and rounding in one 16-bit add
        a0 = W4 * i16(col[0] + COLUMN_BIAS + ((1 << (cs - 1)) // W4))
    else:
        a0 = W4 * (i16(col[0] + COLUMN_BIAS) + ((1 << (cs - 1)) // W4))
    a1, a2, a3 = a0, a0, a0
    a0 = a0 + W2 * col[2]
    a1 = a1 + W6 * col[2]
    a2 = a2 - W6 * col[2]
    a3 = a3 - W2 * col[2]
    b0 = W1 * col[1] + W3 * col[3]
    b1 = W3 * col[1] - W7 * col[3]
    b2 = W5 * col[1] - W1 * col[3]
    b3 = W7 * col[1] - W5 * col[3]
    a0 = a0 + W4 * col[4] + W6 * col[6]
    a1 = a1 - W4 * col[4] - W2 * col[6]
    a2 = a2 - W4 * col[4] + W2 * col[6]
    a3 = a3 + W4 * col[4] - W6 * col[6]
    b0 = b0 + W5 * col[5] + W7 * col[7]
    b1 = b1 - W1 * col[5] - W5 * col[7]
    b2 = b2 + W7 * col[5] + W3 * col[7]
    b3 = b3 + W3 * col[5] - W1 * col[7]
    full = [a0 + b0, a1 + b1, a2 + b2, a3 + b3, a3 - b3, a2 - b2, a1 - b1, a0 - b0]
    return np.stack([narrow(i32(v) >> cs) for v in full], axis=-2)


def idct_put(levels: np.ndarray, qmat_scaled: np.ndarray, bit_depth: int,
             simd: bool = False) -> np.ndarray:
    """prores_idct_put_10/12_c (or, ``simd=True``, the x86-64 asm for 10 bits):
    dequantise, transform, clip. uint16 samples."""
    out = prores_idct(dequantise(levels, qmat_scaled), bit_depth, simd)
    lo, hi = clip_range(bit_depth)
    return np.clip(out, lo, hi).astype(np.uint16)


# -- the double-precision reference ------------------------------------------------

def _dct_matrix() -> np.ndarray:
    """Orthonormal 8-point DCT-II matrix: X = M @ x, x = M.T @ X."""
    k = np.arange(8)[:, None]
    n = np.arange(8)[None, :]
    m = np.cos(np.pi * (2 * n + 1) * k / 16) * np.sqrt(2 / 8)
    m[0] /= np.sqrt(2)
    return m


DCT_MATRIX = _dct_matrix()


def reference_idct(coeffs: np.ndarray) -> np.ndarray:
    """Separable orthonormal 2-D IDCT in double precision (IEEE 1180's f(x,y))."""
    m = DCT_MATRIX
    return m.T @ np.asarray(coeffs, dtype=np.float64) @ m


def reference_fdct(samples: np.ndarray) -> np.ndarray:
    """Orthonormal 2-D forward DCT in double precision."""
    m = DCT_MATRIX
    return m @ np.asarray(samples, dtype=np.float64) @ m.T


def reference_put(dequantised: np.ndarray, bit_depth: int) -> np.ndarray:
    """What an ideal decoder outputs for FFmpeg's dequantised coefficients D:
    round(IDCT(D) / 2^(12 - b)) + 2^(b - 1), clipped to [4, 2^b - 5].

    FFmpeg's transform has gain 1 on the orthonormal IDCT for 12 bits and
    1/4 for 10 bits (see docs/CONFORMANCE.md), and its +8192 column bias
    becomes 2048 / 512: the dequantised coefficients are in 12-bit units."""
    x = reference_idct(dequantised) / (1 << (12 - bit_depth))
    lo, hi = clip_range(bit_depth)
    return np.clip(np.floor(x + 0.5) + (1 << (bit_depth - 1)), lo, hi).astype(np.int64)
