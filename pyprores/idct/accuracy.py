"""IEEE 1180-1990 IDCT accuracy of FFmpeg's ProRes decoders, measured through
real bitstreams.

The IEEE 1180 procedure, scaled to ProRes' sample ranges (see
docs/CONFORMANCE.md, "IDCT accuracy (IEEE 1180-1990)", for the reasoning):

1. For each range ``(L, H)`` in ``(256, 255), (5, 5), (300, 300)`` and each sign
   (+1, then the same numbers negated), draw ``blocks`` 8x8 blocks of integers
   in ``[-k*L, k*H]`` with the IEEE 1180 generator (restarted from
   ``randx = 1`` for each run), ``k = 2^(b - 9)`` for ``b``-bit output (2 for 10
   bits, 8 for 12): the IEEE range of 9-bit samples becomes the full ``b``-bit
   sample range around the mid-level.
2. Forward DCT in double precision, rounded to the nearest integer, clipped to
   ``[-2048*k, 2048*k - 1]``: the test coefficients ``F``.
3. Write them into ProRes frames with :mod:`pyprores.idct.writer` such that
   FFmpeg's dequantised coefficients are ``D = F * 2^(12 - b)``: 10 bits with
   the default matrix (all 4) and qscale 1, codec tag ``apch``; 12 bits with a
   custom matrix of all 1 and qscale 1, codec tag ``ap4h``. FFmpeg's
   transform maps ``D`` to ``IDCT(D) / 2^(12 - b) + 2^(b - 1)`` (the +8192
   column bias), clipped to ``[4, 2^b - 5]``, so the decoder output is the
   IDCT of ``F`` around the mid-level.
4. Decode with FFmpeg's software decoder and with the Vulkan hwaccel; both
   must agree exactly.
5. Reference: the double-precision IDCT of the same ``D``, scaled, rounded,
   offset and clipped the same way (:func:`pyprores.idct.model.reference_put`).
6. Error = decoded - reference, per sample. Limits (IEEE 1180): peak |error|
   <= 1; per position (of the 64) mean square error <= 0.06 and |mean error|
   <= 0.015; overall mean square error <= 0.02 and |mean error| <= 0.0015; an
   all-zero block decodes to exactly zero (the mid-level).
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import writer as W
from .model import reference_fdct, reference_put

__all__ = ["RANGES", "LIMITS", "ieee_random_indices", "ieee_blocks", "test_coefficients",
           "RangeResult", "AccuracyReport", "run", "format_text", "format_markdown"]

#: (L, H) of the three IEEE 1180 runs; each is done with both signs
RANGES = ((256, 255), (5, 5), (300, 300))

#: IEEE 1180-1990 limits
LIMITS = {
    "peak": 1,                 # max |error| of any sample
    "pixel_mse": 0.06,         # worst of the 64 positions: mean of error^2
    "overall_mse": 0.02,       # mean of error^2 over all samples
    "pixel_mean": 0.015,       # worst of the 64 positions: |mean error|
    "overall_mean": 0.0015,    # |mean error| over all samples
}

LIMIT_NAMES = {
    "peak": "peak error (absolute)",
    "pixel_mse": "per-position mean square error (worst position)",
    "overall_mse": "overall mean square error",
    "pixel_mean": "per-position mean error (absolute, worst position)",
    "overall_mean": "overall mean error (absolute)",
    "zero": "zero in -> zero out",
}

#: codec tag, chroma format, luma matrix per output bit depth
_FORMATS = {10: ("apch", "422", None), 12: ("ap4h", "444", np.ones(64, np.uint8))}

_MB_COLS = 64             # macroblocks per row of a test frame (1024 pixels)
_MAX_MB_ROWS = 48         # at most 768 rows per frame


# -- IEEE 1180 random numbers -----------------------------------------------------

_IEEE_CACHE: dict[str, np.ndarray] = {}


def ieee_random_indices(count: int) -> np.ndarray:
    """The first ``count`` values ``i = randx & 0x7ffffffe`` of the IEEE 1180
    generator (randx = randx * 1103515245 + 12345, 32-bit, from randx = 1)."""
    have = _IEEE_CACHE.get("i")
    if have is None or have.size < count:
        out = np.empty(count, np.int64)
        randx = 1
        for n in range(count):
            randx = (randx * 1103515245 + 12345) & 0xFFFFFFFF
            out[n] = randx & 0x7FFFFFFE
        _IEEE_CACHE["i"] = have = out
    return have[:count]


def ieee_blocks(blocks: int, L: int, H: int, sign: int = 1) -> np.ndarray:
    """``blocks`` 8x8 blocks of the IEEE 1180 generator's integers in [-L, H]
    (``x = i / (2^31 - 1) * (L + H + 1)``, truncated, minus L), times ``sign``."""
    i = ieee_random_indices(64 * blocks).astype(np.float64)
    x = (i / float(0x7FFFFFFF)) * (L + H + 1)
    vals = x.astype(np.int64) - L
    return (sign * vals).reshape(blocks, 8, 8)


def test_coefficients(blocks: int, L: int, H: int, sign: int, bit_depth: int) -> np.ndarray:
    """Steps 1-2: the rounded, clipped forward DCT of the scaled IEEE blocks."""
    k = 1 << (bit_depth - 9)
    samples = ieee_blocks(blocks, k * L, k * H, sign)
    f = np.floor(reference_fdct(samples) + 0.5)
    return np.clip(f, -2048 * k, 2048 * k - 1).astype(np.int64)


# -- results -----------------------------------------------------------------------

@dataclass
class RangeResult:
    bit_depth: int
    L: int
    H: int
    sign: int
    blocks: int
    sample_range: tuple[int, int]      # the scaled range the samples were drawn from
    peak: int
    pixel_mse: float
    overall_mse: float
    pixel_mean: float
    overall_mean: float                # signed; the limit applies to its magnitude
    zero_ok: bool
    zero_blocks: int
    mismatches: dict[str, int] = field(default_factory=dict)   # backend -> samples != first
    model_mismatches: dict[str, int] = field(default_factory=dict)  # backend -> != C model

    def checks(self) -> list[tuple[str, float, float, bool]]:
        """(limit name, measured, limit, passed) for every IEEE 1180 limit."""
        out = [(name, float(abs(getattr(self, name))), float(lim),
                abs(getattr(self, name)) <= lim) for name, lim in LIMITS.items()]
        out.append(("zero", float(self.zero_ok), 1.0, self.zero_ok))
        return out

    @property
    def passed(self) -> bool:
        return all(ok for *_, ok in self.checks())

    @property
    def label(self) -> str:
        lo, hi = self.sample_range
        return f"L={self.L} H={self.H}{'' if self.sign > 0 else ' negated'} [{lo}, {hi}]"


@dataclass
class AccuracyReport:
    blocks: int
    backends: list[str]
    devices: dict[str, str]
    results: list[RangeResult]
    date: str
    ffmpeg: str
    seconds: float
    command: str = ""

    @property
    def backends_agree(self) -> bool:
        return all(v == 0 for r in self.results for v in r.mismatches.values())

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def limit_summary(self, bit_depth: int) -> dict[str, tuple[float, bool]]:
        """Per limit, the worst measured value over all runs of ``bit_depth``
        and whether every run passed it."""
        rs = [r for r in self.results if r.bit_depth == bit_depth]
        out = {}
        for name in list(LIMITS) + ["zero"]:
            vals = [c for r in rs for c in r.checks() if c[0] == name]
            worst = min(v for _, v, _, _ in vals) if name == "zero" else max(v for _, v, _, _ in vals)
            out[name] = (worst, all(ok for *_, ok in vals))
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["backends_agree"] = self.backends_agree
        d["passed"] = self.passed
        d["limits"] = LIMITS
        for r, rd in zip(self.results, d["results"]):
            rd["checks"] = {n: {"value": v, "limit": lim, "passed": ok} for n, v, lim, ok in r.checks()}
        return d


# -- running it --------------------------------------------------------------------

def _frames(coeffs: np.ndarray, bit_depth: int) -> list[tuple[W.FrameSpec, list[tuple]]]:
    """Spread the coefficient blocks over frames: the Y, then the Cb, then the
    Cr blocks of each picture, in raster order of blocks. Returns, per frame,
    the spec and [(plane, block rows, block cols, blocks used)] in coefficient
    order. The unused blocks of the last frame (at least one) stay zero: the
    zero-in, zero-out test."""
    tag, chroma, qmat = _FORMATS[bit_depth]
    # levels = F: with qmat 4 (10 bits) or 1 (12 bits) and qscale 1, FFmpeg's
    # dequantised coefficients are D = F * 2^(12 - b)
    levels = coeffs
    per_row = {"422": 8, "444": 12}[chroma] * _MB_COLS      # blocks per macroblock row
    n = len(levels)
    need = n + 1
    out = []
    start = 0
    while need > 0:
        rows = min(_MAX_MB_ROWS, -(-need // per_row))
        need -= rows * per_row
        spec = W.blank_spec(16 * _MB_COLS, 16 * rows, chroma, luma_qmat=qmat)
        pic = spec.pictures[0]
        positions = []
        for name in ("Y", "Cb", "Cr"):
            arr = getattr(pic, name.lower())
            R, C = arr.shape[:2]
            rr, cc = np.divmod(np.arange(R * C), C)
            take = min(R * C, n - start)
            arr[rr[:take], cc[:take]] = levels[start:start + take]
            positions.append((name, rr, cc, take))
            start += take
        out.append((spec, positions))
    return out


def _blocks_of(plane: np.ndarray, rr: np.ndarray, cc: np.ndarray) -> np.ndarray:
    R, C = plane.shape[0] // 8, plane.shape[1] // 8
    b = plane.reshape(R, 8, C, 8).transpose(0, 2, 1, 3)
    return b[rr, cc].astype(np.int64)


def run(blocks: int = 10000, bit_depths: Sequence[int] = (10, 12),
        backends: Sequence[str] = ("software", "vulkan"), device: str | None = None,
        progress: Callable[[str], None] | None = None) -> AccuracyReport:
    """Run the scaled IEEE 1180 procedure through the decoders of ``backends``
    (the first one is the one measured; the others must agree with it)."""
    from ..decode import native

    t0 = time.monotonic()
    sessions = {}
    try:
        for b in backends:
            sessions[b] = native.Session(b, device=device if b == "vulkan" else None)
        devices = {b: s.device_name for b, s in sessions.items()}
        results = []
        for bit_depth in bit_depths:
            tag = _FORMATS[bit_depth][0]
            for L, H in RANGES:
                for sign in (1, -1):
                    if progress:
                        progress(f"{bit_depth}-bit L={L} H={H} sign={sign:+d}")
                    results.append(_one_range(sessions, tag, bit_depth, blocks, L, H, sign))
    finally:
        for s in sessions.values():
            s.close()
    return AccuracyReport(
        blocks=blocks, backends=list(backends), devices=devices, results=results,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        ffmpeg=native.ffmpeg_version(), seconds=round(time.monotonic() - t0, 1))


def _one_range(sessions: dict, tag: str, bit_depth: int, blocks: int, L: int, H: int,
               sign: int) -> RangeResult:
    from .model import idct_put, scaled_qmat

    k = 1 << (bit_depth - 9)
    coeffs = test_coefficients(blocks, L, H, sign, bit_depth)
    dequant = coeffs * (1 << (12 - bit_depth))
    ref = reference_put(dequant, bit_depth)
    bias = 1 << (bit_depth - 1)
    got = {b: [] for b in sessions}
    zero_got = {b: [] for b in sessions}
    model_mm = {b: 0 for b in sessions}
    for spec, positions in _frames(coeffs, bit_depth):
        packet = W.write_frame(spec)
        model = W.expected_planes(spec, bit_depth)
        for b, s in sessions.items():
            frame = s.decode(packet, tag)
            for name, rr, cc, take in positions:
                model_mm[b] += int((frame.planes[name] != model[name]).sum())
                bl = _blocks_of(frame.planes[name], rr, cc)
                got[b].append(bl[:take])
                zero_got[b].append(bl[take:])
    first = next(iter(sessions))
    out = {b: np.concatenate(v) for b, v in got.items()}
    zeros = {b: np.concatenate(v) for b, v in zero_got.items()}
    mismatches = {b: int((out[b] != out[first]).sum() + (zeros[b] != zeros[first]).sum())
                  for b in sessions if b != first}
    err = out[first] - ref
    # the last frame always has unused, all-zero blocks (at least one)
    zero_ok = bool((zeros[first] == bias).all())
    sample_range = (-k * L, k * H) if sign > 0 else (-k * H, k * L)
    return RangeResult(
        bit_depth=bit_depth, L=L, H=H, sign=sign, blocks=blocks, sample_range=sample_range,
        peak=int(np.abs(err).max()),
        pixel_mse=float((err.astype(np.float64) ** 2).mean(axis=0).max()),
        overall_mse=float((err.astype(np.float64) ** 2).mean()),
        pixel_mean=float(np.abs(err.mean(axis=0)).max()),
        overall_mean=float(err.mean()),
        zero_ok=zero_ok, zero_blocks=int(len(zeros[first])),
        mismatches=mismatches, model_mismatches=model_mm)


# -- output ------------------------------------------------------------------------

def _fmt(name: str, v: float) -> str:
    if name == "zero":
        return "yes" if v else "no"
    if name == "peak":
        return str(int(v))
    return f"{v:.5f}" if name in ("pixel_mean", "overall_mean") else f"{v:.4f}"


def format_text(report: AccuracyReport) -> str:
    lines = [f"IDCT accuracy, IEEE 1180-1990 scaled to ProRes sample ranges: "
             f"{report.blocks} blocks per range, FFmpeg {report.ffmpeg}"]
    for b in report.backends:
        lines.append(f"  {b}: {report.devices.get(b, '')}")
    if len(report.backends) > 1:
        total = sum(v for r in report.results for v in r.mismatches.values())
        lines.append(f"  backends agree exactly: {'yes' if report.backends_agree else f'NO ({total} samples differ)'}")
    short = {"peak": "peak", "pixel_mse": "pos. MSE", "overall_mse": "MSE",
             "pixel_mean": "pos. |mean|", "overall_mean": "|mean|", "zero": "0->0"}
    header = ["bits", "run (sample range)"] + [
        f"{short[n]} <= {LIMITS[n]}" if n in LIMITS else short[n] for n in list(LIMITS) + ["zero"]]
    rows = [header]
    for r in report.results:
        cells = []
        for n, v, _, ok in r.checks():
            val = f"{r.overall_mean:+.5f}" if n == "overall_mean" else _fmt(n, v)
            cells.append(f"{val} {'ok' if ok else 'FAIL'}")
        rows.append([str(r.bit_depth), r.label] + cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for bd in sorted({r.bit_depth for r in report.results}):
        failed = [LIMIT_NAMES[n] for n, (_, ok) in report.limit_summary(bd).items() if not ok]
        lines.append(f"  {bd}-bit: " + ("meets every IEEE 1180 limit" if not failed
                                         else "fails: " + ", ".join(failed)))
    lines.append(f"  ({report.seconds} s)")
    return "\n".join(lines)


def format_markdown(report: AccuracyReport) -> str:
    """The body of the docs/CONFORMANCE.md section (tables of measured values)."""
    out = []
    backends = ", ".join(f"{b} ({report.devices.get(b, '')})" for b in report.backends)
    out.append(f"Measured {report.date} with FFmpeg {report.ffmpeg}, {report.blocks} blocks per "
               f"run (6 runs per bit depth), decoders: {backends}.")
    if report.command:
        out.append(f"Command: `{report.command}`")
    agree = ("identical on every sample" if report.backends_agree else "**NOT identical**")
    out.append(f"Software and Vulkan outputs: {agree}.")
    out.append("")
    for bd in sorted({r.bit_depth for r in report.results}):
        summary = report.limit_summary(bd)
        out.append(f"**{bd}-bit** ({_FORMATS[bd][0]}, worst over the six runs):")
        out.append("")
        out.append("| limit | IEEE 1180 | measured (worst run) | result |")
        out.append("| --- | --- | --- | --- |")
        for name in list(LIMITS) + ["zero"]:
            v, ok = summary[name]
            lim = f"<= {LIMITS[name]}" if name in LIMITS else "exact"
            out.append(f"| {LIMIT_NAMES[name]} | {lim} | {_fmt(name, v)} | {'pass' if ok else '**FAIL**'} |")
        out.append("")
        out.append("| run (sample range) | peak | pos. MSE | MSE | pos. mean | mean | 0->0 |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        for r in (r for r in report.results if r.bit_depth == bd):
            cells = []
            for n, v, _, ok in r.checks():
                s = _fmt(n, v) if n != "overall_mean" else f"{r.overall_mean:+.5f}"
                cells.append(s if ok else f"**{s}**")
            out.append(f"| {r.label} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)
