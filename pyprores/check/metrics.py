"""How far a candidate decode is from the reference, plane by plane.

Everything here is exact integer bookkeeping (sums of errors, squared errors,
counts) so that results of many frames, or many files, combine without
rounding: derived figures (means, RMSE, PSNR) are computed from the sums on
demand.  The sums come from one full-range histogram of the signed
deviations; per-slice maxima from a per-macroblock maximum map (one
reshape), reduced per slice with ``np.maximum.reduceat``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..geometry import field_rows, mb_size, slice_layout, slice_rect
from ..model import PLANE_NAMES, Frame, FrameInfo

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
    only the whole-plane figures are filled in.  A bit-exact plane — the
    case that matters most — costs one comparison pass; otherwise every
    figure comes from one histogram of the signed deviations.
    """
    if reference.shape != candidate.shape:
        raise ValueError(f"plane {plane}: candidate shape {candidate.shape} != reference {reference.shape}")
    mismatches = int(np.count_nonzero(candidate != reference))
    hist = np.zeros(2 * HIST_RANGE + 1, np.int64)
    hist[HIST_RANGE] = reference.size - mismatches
    stats = PlaneStats(plane=plane, bit_depth=bit_depth, samples=int(reference.size),
                       mismatches=mismatches, histogram=hist, worst_n=worst_n)
    absdiff = None
    if mismatches:
        diff = _difference(reference, candidate)
        absdiff = np.abs(diff)
        _fill_from_histogram(stats, diff)
    if info is not None and info.pictures:
        layout = layout if layout is not None else slice_layout(info)
        pictures = tuple((p.field, p.mb_width, p.mb_height) for p in info.pictures)
        if absdiff is not None:
            values = slice_maxima(absdiff, info, plane)
            stats.worst = worst_slices(values, info, plane, reference.shape, frame_index, worst_n)
        else:
            values = np.zeros(len(layout), np.int64)
        stats.grid = SliceGrid(layout, pictures, values)
    return stats


def _difference(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """candidate - reference, in int16 when both fit (10/12-bit samples
    always do; halves the memory traffic), else in int32."""
    if int(candidate.max()) < 32768 and int(reference.max()) < 32768:
        return np.subtract(candidate.view(np.int16), reference.view(np.int16))
    return np.subtract(candidate, reference, dtype=np.int32)


def _fill_from_histogram(stats: PlaneStats, diff: np.ndarray) -> None:
    """Exact sums from one full-range histogram of the signed deviations:
    a single bincount pass instead of one pass per figure."""
    offset = 1 << 15 if diff.dtype == np.int16 else 1 << 16
    if diff.dtype == np.int16:   # wraps -32767..32767 onto 1..65535
        keys = (diff.view(np.uint16) + np.uint16(offset)).ravel()
    else:
        keys = (diff.astype(np.int64) + offset).ravel()
    full = np.bincount(keys)
    used = np.flatnonzero(full)
    values, counts = used.astype(np.int64) - offset, full[used].astype(np.int64)
    peak = stats.peak
    stats.max_abs = int(np.abs(values).max())
    stats.sum_error = int((values * counts).sum())
    stats.sum_abs_error = int((np.abs(values) * counts).sum())
    stats.sum_sq_error = int((values * values * counts).sum())
    stats.sse_over_peak2 = stats.sum_sq_error / (peak * peak)
    clipped = np.clip(values, -HIST_RANGE, HIST_RANGE) + HIST_RANGE
    stats.histogram = np.bincount(clipped, weights=counts, minlength=2 * HIST_RANGE + 1).astype(np.int64)


def slice_maxima(absdiff: np.ndarray, info: FrameInfo, plane: str) -> np.ndarray:
    """Max |deviation| per slice, in :func:`geometry.slice_layout` order.

    Builds, per picture, a macroblock max map by padding the picture's rows to
    whole macroblocks and reshaping; each slice is then a contiguous run of
    that map in raster order, reduced with one ``maximum.reduceat``.
    """
    mbw, mbh = mb_size(plane, info.chroma_format)
    values: list[np.ndarray] = []
    for pic in info.pictures:
        if not pic.slices:
            continue
        first, step = field_rows(pic.field)
        part = absdiff[first::step, :]
        h, w = pic.mb_height * mbh, pic.mb_width * mbw
        if part.shape != (h, w):   # partial macroblocks: pad with zeros (or crop bad headers)
            padded = np.zeros((h, w), dtype=absdiff.dtype)
            ch, cw = min(h, part.shape[0]), min(w, part.shape[1])
            padded[:ch, :cw] = part[:ch, :cw]
            part = padded
        mb_map = part.reshape(pic.mb_height, mbh, pic.mb_width, mbw).max(axis=(1, 3)).ravel()
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
    return np.concatenate(values) if values else np.zeros(0, np.int64)


def worst_slices(values: np.ndarray, info: FrameInfo, plane: str, shape: tuple[int, int],
                 frame_index: int = 0, n: int | None = WORST_SLICES) -> list[SliceDeviation]:
    """The ``n`` slices (all when None) with the largest non-zero ``values``,
    worst first, with their rectangles in ``plane``.  Only those few become
    objects, so a frame where every slice deviates stays cheap."""
    order = np.argsort(-values, kind="stable")
    order = order[values[order] > 0][:n]
    where = [(p, pic, s) for p, pic in enumerate(info.pictures) for s in pic.slices]
    out = []
    for i in order.tolist():
        p, pic, s = where[i]
        r = slice_rect(pic, s, plane, info.chroma_format, *shape)
        out.append(SliceDeviation(int(values[i]), frame_index, p, pic.field, s.index, s.mb_x, s.mb_y,
                                  s.mb_count, r.x, r.y, r.width, r.height, r.row_step))
    return out


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
