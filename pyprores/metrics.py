"""How far a candidate decode is from the reference, plane by plane.

Everything here is exact integer bookkeeping (sums of errors, squared errors,
counts) so that results of many frames, or many files, combine without
rounding: derived figures (means, RMSE, PSNR) are computed from the sums on
demand.  Per-slice maxima come from a per-macroblock maximum map (one
reshape), reduced per slice with ``np.maximum.reduceat``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .geometry import field_rows, mb_size, slice_layout, slice_rect
from .model import PLANE_NAMES, Frame, FrameInfo

#: deviations beyond +-HIST_RANGE are counted in the outermost bins
HIST_RANGE = 16
#: how many worst slices a plane keeps by default
WORST_SLICES = 5


@dataclass(frozen=True)
class SliceDeviation:
    """The largest deviation inside one slice of one frame."""

    max_abs: int
    frame: int
    picture: int
    field: str
    slice: int
    mb_x: int
    mb_y: int
    mb_count: int
    x: int          # visible rectangle in plane samples (frame coordinates)
    y: int
    width: int
    height: int
    row_step: int   # 2 for a field picture: the slice covers every other row
    file: str | None = None

    def sort_key(self) -> tuple:
        # worst first; ties go to the earliest frame/picture/slice
        return (-self.max_abs, self.file or "", self.frame, self.picture, self.slice)


@dataclass
class SliceGrid:
    """Per-slice maximum deviation over frames, for one plane of one stream.

    ``layout`` is :func:`geometry.slice_layout` of the frames; ``pictures``
    keeps (field, mb_width, mb_height) per picture for drawing the map.
    """

    layout: tuple
    pictures: tuple[tuple[str, int, int], ...]
    values: np.ndarray

    def merge(self, other: "SliceGrid") -> "SliceGrid":
        if other.layout == self.layout:
            return SliceGrid(self.layout, self.pictures, np.maximum(self.values, other.values))
        # A layout change mid-stream (a resolution change): keep the newest
        # layout, folding in whatever slices the older one shares with it.
        old = dict(zip(self.layout, self.values.tolist()))
        merged = np.array([max(v, old.get(k, 0)) for k, v in zip(other.layout, other.values.tolist())],
                          dtype=np.int64)
        return SliceGrid(other.layout, other.pictures, merged)


@dataclass
class PlaneStats:
    """Accumulated deviation of one plane; add frames with :meth:`merge`."""

    plane: str
    bit_depth: int
    samples: int = 0
    max_abs: int = 0
    mismatches: int = 0
    sum_error: int = 0          # sum of (candidate - reference)
    sum_abs_error: int = 0
    sum_sq_error: int = 0
    sse_over_peak2: float = 0.0  # sum_sq_error / peak^2, so PSNR survives mixed bit depths
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(2 * HIST_RANGE + 1, np.int64))
    worst: list[SliceDeviation] = field(default_factory=list)
    grid: SliceGrid | None = None
    worst_n: int = WORST_SLICES

    @property
    def peak(self) -> int:
        return (1 << self.bit_depth) - 1

    @property
    def identical(self) -> bool:
        return self.mismatches == 0

    @property
    def mismatch_share(self) -> float:
        return self.mismatches / self.samples if self.samples else 0.0

    @property
    def mean_error(self) -> float:
        return self.sum_error / self.samples if self.samples else 0.0

    @property
    def mean_abs_error(self) -> float:
        return self.sum_abs_error / self.samples if self.samples else 0.0

    @property
    def rmse(self) -> float:
        return math.sqrt(self.sum_sq_error / self.samples) if self.samples else 0.0

    @property
    def psnr_db(self) -> float:
        """PSNR against peak 2^bits - 1; ``inf`` when the planes are identical."""
        if self.sum_sq_error == 0 or not self.samples:
            return math.inf
        return 10.0 * math.log10(self.samples / self.sse_over_peak2)

    def merge(self, other: "PlaneStats", keep_grid: bool = True) -> "PlaneStats":
        """Combine with ``other`` (more frames, or another file for a total).

        ``keep_grid=False`` drops the slice grid: grids of different files
        have different geometry and make no sense combined.
        """
        grid = None
        if keep_grid:
            grid = other.grid if self.grid is None else self.grid if other.grid is None \
                else self.grid.merge(other.grid)
        worst = sorted(self.worst + other.worst, key=SliceDeviation.sort_key)[: self.worst_n]
        return PlaneStats(
            plane=self.plane, bit_depth=max(self.bit_depth, other.bit_depth),
            samples=self.samples + other.samples, max_abs=max(self.max_abs, other.max_abs),
            mismatches=self.mismatches + other.mismatches,
            sum_error=self.sum_error + other.sum_error,
            sum_abs_error=self.sum_abs_error + other.sum_abs_error,
            sum_sq_error=self.sum_sq_error + other.sum_sq_error,
            sse_over_peak2=self.sse_over_peak2 + other.sse_over_peak2,
            histogram=self.histogram + other.histogram, worst=worst, grid=grid,
            worst_n=self.worst_n)


def compare_plane(reference: np.ndarray, candidate: np.ndarray, plane: str, bit_depth: int,
                  info: FrameInfo | None = None, frame_index: int = 0,
                  worst_n: int = WORST_SLICES, layout: tuple | None = None) -> PlaneStats:
    """Deviation statistics of one plane of one frame.

    ``info`` (the frame's headers) enables per-slice attribution; without it
    only the whole-plane figures are filled in.
    """
    if reference.shape != candidate.shape:
        raise ValueError(f"plane {plane}: candidate shape {candidate.shape} != reference {reference.shape}")
    diff = candidate.astype(np.int32) - reference.astype(np.int32)
    absdiff = np.abs(diff)
    peak = (1 << bit_depth) - 1
    flat = diff.ravel()
    sq = int(np.einsum("i,i->", flat, flat, dtype=np.int64))   # no int64 copy of the plane
    hist = np.bincount((np.clip(diff, -HIST_RANGE, HIST_RANGE) + HIST_RANGE).ravel(),
                       minlength=2 * HIST_RANGE + 1).astype(np.int64)
    stats = PlaneStats(
        plane=plane, bit_depth=bit_depth, samples=int(diff.size),
        max_abs=int(absdiff.max()) if diff.size else 0,
        mismatches=int(diff.size - hist[HIST_RANGE]),
        sum_error=int(diff.sum(dtype=np.int64)), sum_abs_error=int(absdiff.sum(dtype=np.int64)),
        sum_sq_error=sq, sse_over_peak2=sq / (peak * peak), histogram=hist, worst_n=worst_n)
    if info is not None and info.pictures:
        values, devs = slice_maxima(absdiff, info, plane, frame_index)
        layout = layout if layout is not None else slice_layout(info)
        pictures = tuple((p.field, p.mb_width, p.mb_height) for p in info.pictures)
        stats.grid = SliceGrid(layout, pictures, values)
        nonzero = [d for d in devs if d.max_abs > 0]
        stats.worst = sorted(nonzero, key=SliceDeviation.sort_key)[:worst_n]
    return stats


def slice_maxima(absdiff: np.ndarray, info: FrameInfo, plane: str,
                 frame_index: int = 0) -> tuple[np.ndarray, list[SliceDeviation]]:
    """Max |deviation| per slice, in :func:`geometry.slice_layout` order.

    Builds, per picture, a macroblock max map by padding the picture's rows to
    whole macroblocks and reshaping; each slice is then a contiguous run of
    that map in raster order, reduced with one ``maximum.reduceat``.
    """
    rows, cols = absdiff.shape
    mbw, mbh = mb_size(plane, info.chroma_format)
    values: list[np.ndarray] = []
    devs: list[SliceDeviation] = []
    for p, pic in enumerate(info.pictures):
        if not pic.slices:
            continue
        first, step = field_rows(pic.field)
        part = absdiff[first::step, :]
        h, w = pic.mb_height * mbh, pic.mb_width * mbw
        padded = np.zeros((h, w), dtype=absdiff.dtype)
        ch, cw = min(h, part.shape[0]), min(w, part.shape[1])
        padded[:ch, :cw] = part[:ch, :cw]
        mb_map = padded.reshape(pic.mb_height, mbh, pic.mb_width, mbw).max(axis=(1, 3)).ravel()
        starts = np.array([s.mb_y * pic.mb_width + s.mb_x for s in pic.slices], dtype=np.intp)
        ends = starts + np.array([s.mb_count for s in pic.slices], dtype=np.intp)
        contiguous = (starts[0] == 0 and ends[-1] == mb_map.size
                      and np.array_equal(starts[1:], ends[:-1]))
        if contiguous:
            per_slice = np.maximum.reduceat(mb_map, starts)
        else:  # damaged or unusual slice index: fall back to one slice at a time
            per_slice = np.array([mb_map[a:b].max() if 0 <= a < b <= mb_map.size else 0
                                  for a, b in zip(starts, ends)], dtype=absdiff.dtype)
        values.append(per_slice.astype(np.int64))
        for s, m in zip(pic.slices, per_slice.tolist()):
            if m:
                r = slice_rect(pic, s, plane, info.chroma_format, rows, cols)
                devs.append(SliceDeviation(int(m), frame_index, p, pic.field, s.index, s.mb_x, s.mb_y,
                                           s.mb_count, r.x, r.y, r.width, r.height, r.row_step))
    joined = np.concatenate(values) if values else np.zeros(0, np.int64)
    return joined, devs


def compare_frames(reference: Frame, candidate: Frame, info: FrameInfo | None = None,
                   frame_index: int = 0, worst_n: int = WORST_SLICES) -> dict[str, PlaneStats]:
    """Per-plane statistics of one decoded frame; planes in Y, Cb, Cr, A order.

    A plane present in only one of the frames is a structural mismatch that
    no sample statistic can express, so it raises ``ValueError``.
    """
    names = [n for n in PLANE_NAMES if n in reference.planes or n in candidate.planes]
    missing = [n for n in names if n not in reference.planes or n not in candidate.planes]
    if missing:
        raise ValueError(f"plane(s) {', '.join(missing)} present in only one of the two decodes")
    layout = slice_layout(info) if info is not None else None
    return {n: compare_plane(reference.planes[n], candidate.planes[n], n, reference.bit_depth,
                             info, frame_index, worst_n, layout) for n in names}


def merge_stats(total: dict[str, PlaneStats] | None, more: dict[str, PlaneStats],
                keep_grid: bool = True) -> dict[str, PlaneStats]:
    """Fold ``more`` into ``total`` plane by plane (``total`` may be None)."""
    out = dict(total or {})
    for n, s in more.items():
        if n in out:
            out[n] = out[n].merge(s, keep_grid)
        else:
            out[n] = s if keep_grid else replace(s, grid=None)
    return {n: out[n] for n in PLANE_NAMES if n in out}
