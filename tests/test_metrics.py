"""Deviation metrics on hand-made planes, and slice attribution per geometry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pyprores.geometry import plane_shape, slice_layout, slice_rect
from pyprores.check.metrics import (HIST_RANGE, PlaneStats, compare_frames, compare_plane, merge_stats,
                              slice_maxima, worst_slices)
from pyprores.model import Frame, FrameInfo, PictureInfo, SliceInfo


# -- helpers: FrameInfo built by hand, independently of the parsers ----------------

def picture(field: str, mb_width: int, mb_height: int, widths: list[int]) -> PictureInfo:
    """A picture whose every MB row is cut into slices of ``widths`` MBs."""
    assert sum(widths) == mb_width
    slices, index = [], 0
    for mb_y in range(mb_height):
        mb_x = 0
        for w in widths:
            slices.append(SliceInfo(index=index, mb_x=mb_x, mb_y=mb_y, mb_count=w, offset=0, size=8,
                                    qscale=4))
            index, mb_x = index + 1, mb_x + w
    return PictureInfo(field=field, offset=0, size=0, log2_slice_mb_width=3, mb_width=mb_width,
                       mb_height=mb_height, slices=tuple(slices))


def frame_info(width: int, height: int, chroma: str = "422", interlace: int = 0,
               widths: list[int] | None = None, bits: int = 10) -> FrameInfo:
    mb_w = (width + 15) // 16
    widths = widths or [8] * (mb_w // 8) + [w for w in (4, 2, 1) if mb_w % 8 & w]
    if interlace:
        mb_h = (height + 31) // 32
        fields = ("top", "bottom") if interlace == 1 else ("bottom", "top")
        pics = tuple(picture(f, mb_w, mb_h, widths) for f in fields)
    else:
        pics = (picture("frame", mb_w, (height + 15) // 16, widths),)
    return FrameInfo(width=width, height=height, chroma_format=chroma, bit_depth=bits,
                     pix_fmt=f"yuv{chroma}p{bits}le", alpha_info=0, interlace_mode=interlace,
                     pictures=pics)


def planes_for(info: FrameInfo, fill: int = 500, alpha: bool = False) -> dict[str, np.ndarray]:
    names = ("Y", "Cb", "Cr", "A") if alpha else ("Y", "Cb", "Cr")
    return {n: np.full(plane_shape(n, info.chroma_format, info.width, info.height), fill, np.uint16)
            for n in names}


# -- whole-plane figures ------------------------------------------------------------

def test_identical_planes():
    ref = np.random.default_rng(0).integers(0, 1024, (36, 50), dtype=np.uint16)
    s = compare_plane(ref, ref.copy(), "Y", 10)
    assert (s.max_abs, s.mismatches, s.mismatch_share) == (0, 0, 0.0)
    assert s.mean_error == s.mean_abs_error == s.rmse == 0
    assert math.isinf(s.psnr_db) and s.identical
    assert s.histogram[HIST_RANGE] == ref.size and s.histogram.sum() == ref.size


def test_one_sample_off_by_three():
    ref = np.full((40, 64), 512, np.uint16)
    cand = ref.copy()
    cand[7, 9] += 3
    s = compare_plane(ref, cand, "Y", 10)
    n = ref.size
    assert s.max_abs == 3 and s.mismatches == 1
    assert s.mismatch_share == pytest.approx(1 / n)
    assert s.mean_error == pytest.approx(3 / n) and s.mean_abs_error == pytest.approx(3 / n)
    assert s.rmse == pytest.approx(math.sqrt(9 / n))
    mse = np.mean((cand.astype(float) - ref) ** 2)           # computed independently
    assert s.psnr_db == pytest.approx(10 * math.log10(1023 ** 2 / mse))
    assert s.histogram[HIST_RANGE + 3] == 1 and s.histogram[HIST_RANGE] == n - 1
    assert not s.identical


def test_psnr_uses_the_bit_depth():
    ref = np.full((16, 16), 2000, np.uint16)
    cand = ref + np.uint16(1)
    assert compare_plane(ref, cand, "Y", 12).psnr_db == pytest.approx(20 * math.log10(4095))
    assert compare_plane(ref, cand, "Y", 10).psnr_db == pytest.approx(20 * math.log10(1023))


def test_biased_plane():
    ref = np.random.default_rng(1).integers(100, 900, (32, 48), dtype=np.uint16)
    s = compare_plane(ref, ref - np.uint16(2), "Cb", 10)
    assert s.mean_error == pytest.approx(-2) and s.mean_abs_error == pytest.approx(2)
    assert s.rmse == pytest.approx(2) and s.max_abs == 2 and s.mismatches == ref.size
    assert s.psnr_db == pytest.approx(20 * math.log10(1023 / 2))
    assert s.histogram[HIST_RANGE - 2] == ref.size


def test_symmetric_errors_have_no_bias():
    ref = np.full((4, 4), 300, np.uint16)
    cand = ref.copy()
    cand[:2] += 1
    cand[2:] -= 1
    s = compare_plane(ref, cand, "Y", 10)
    assert s.mean_error == 0 and s.mean_abs_error == 1 and s.rmse == 1


def test_histogram_clips_large_deviations_into_end_bins():
    ref = np.full((1, 4), 500, np.uint16)
    cand = np.array([[500 - 300, 500 - 16, 500 + 17, 500 + 400]], np.uint16)
    h = compare_plane(ref, cand, "Y", 10).histogram
    assert len(h) == 2 * HIST_RANGE + 1
    assert h[0] == 2 and h[-1] == 2 and h.sum() == 4


def test_shape_mismatch_and_missing_plane_raise():
    info = frame_info(32, 16)
    ref = Frame(planes=planes_for(info), pix_fmt="yuv422p10le", bit_depth=10)
    with pytest.raises(ValueError):
        compare_plane(np.zeros((4, 4), np.uint16), np.zeros((4, 5), np.uint16), "Y", 10)
    cand = Frame(planes=dict(ref.planes), pix_fmt="yuv422p10le", bit_depth=10)
    del cand.planes["Cr"]
    with pytest.raises(ValueError, match="Cr"):
        compare_frames(ref, cand, info)


# -- per-slice attribution --------------------------------------------------------

def only_worst(info: FrameInfo, plane: str, row: int, col: int, dev: int = 5):
    ref = planes_for(info)[plane]
    cand = ref.copy()
    cand[row, col] += dev
    s = compare_plane(ref, cand, plane, 10, info, frame_index=3)
    assert s.max_abs == dev and len(s.worst) == 1
    assert int(np.count_nonzero(s.grid.values)) == 1 and s.grid.values.max() == dev
    return s.worst[0]


def test_slice_attribution_422_chroma_is_half_width():
    info = frame_info(256, 144, "422")
    w = only_worst(info, "Cb", 20, 70)       # chroma column 70 = luma MB 8
    assert (w.frame, w.picture, w.field, w.slice) == (3, 0, "frame", 3)
    assert (w.mb_x, w.mb_y, w.mb_count) == (8, 1, 8)
    assert (w.x, w.y, w.width, w.height, w.row_step) == (64, 16, 64, 16, 1)
    w = only_worst(info, "Y", 20, 70)        # the same spot in luma is slice 2
    assert (w.slice, w.x, w.width) == (2, 0, 128)


def test_slice_attribution_444_partial_last_mb_row():
    info = frame_info(240, 136, "444")       # 15 MBs: slices 8, 4, 2, 1; 8.5 MB rows
    w = only_worst(info, "Cr", 130, 235)
    assert (w.mb_x, w.mb_y, w.mb_count, w.slice) == (14, 8, 1, 8 * 4 + 3)
    assert (w.x, w.y, w.width, w.height) == (224, 128, 16, 8)


def test_slice_attribution_interlaced_top_field_first():
    info = frame_info(256, 144, "422", interlace=1)    # fields of 72 rows, 5 MB rows each
    w = only_worst(info, "Y", 101, 10)                  # odd row: bottom field row 50
    assert (w.picture, w.field, w.mb_y, w.slice) == (1, "bottom", 3, 6)
    assert (w.y, w.height, w.row_step) == (97, 16, 2)
    w = only_worst(info, "Cb", 142, 100)                # even row: top field row 71, partial MB row
    assert (w.picture, w.field, w.mb_y, w.mb_x) == (0, "top", 4, 8)
    assert (w.x, w.y, w.width, w.height, w.row_step) == (64, 128, 64, 8, 2)


def test_slice_attribution_interlaced_bottom_field_first():
    info = frame_info(256, 144, "422", interlace=2)
    w = only_worst(info, "Y", 1, 0)
    assert (w.picture, w.field, w.y) == (0, "bottom", 1)
    w = only_worst(info, "Y", 0, 0)
    assert (w.picture, w.field, w.y) == (1, "top", 0)


def test_slice_attribution_odd_sizes():
    info = frame_info(250, 142, "422")       # 16 MBs, the last one 10 samples wide
    w = only_worst(info, "Y", 141, 249)
    assert (w.slice, w.mb_y, w.x, w.y, w.width, w.height) == (17, 8, 128, 128, 122, 14)
    w = only_worst(info, "Cr", 141, 124)     # 4:2:2 chroma is 125 wide
    assert (w.x, w.width) == (64, 61)


@pytest.mark.parametrize("width,height,chroma,interlace", [
    (256, 144, "422", 0), (240, 136, "444", 0), (250, 142, "422", 1), (200, 90, "444", 2),
    (1, 1, "422", 0), (33, 47, "444", 1),
])
def test_slice_maxima_match_brute_force(width, height, chroma, interlace):
    """The reshape/reduceat path agrees with cutting each slice out directly."""
    info = frame_info(width, height, chroma, interlace)
    rng = np.random.default_rng(width * height)
    for plane in ("Y", "Cb"):
        shape = plane_shape(plane, chroma, width, height)
        absdiff = (rng.random(shape) < 0.05) * rng.integers(1, 50, shape)
        values = slice_maxima(absdiff, info, plane)
        devs = worst_slices(values, info, plane, shape, n=None)
        expected = []
        for pic in info.pictures:
            for s in pic.slices:
                r = slice_rect(pic, s, plane, chroma, *shape)
                cut = absdiff[r.y:r.y + r.row_step * r.height:r.row_step, r.x:r.x + r.width]
                expected.append(int(cut.max()) if cut.size else 0)
        assert values.tolist() == expected
        assert len(values) == len(slice_layout(info))
        assert sorted(d.max_abs for d in devs) == sorted(v for v in expected if v)


def test_irregular_slice_index_falls_back_to_per_slice():
    # slices listed right to left: not a raster-order run, so no reduceat
    odd = PictureInfo("frame", 0, 0, 1, 4, 1, slices=(
        SliceInfo(0, 2, 0, 2, 0, 0, 0), SliceInfo(1, 0, 0, 2, 0, 0, 0)))
    info = FrameInfo(64, 16, "444", 10, "yuv444p10le", 0, 0, (odd,))
    absdiff = np.zeros((16, 64), np.int32)
    absdiff[3, 40] = 9
    values = slice_maxima(absdiff, info, "Y")
    devs = worst_slices(values, info, "Y", absdiff.shape)
    assert values.tolist() == [9, 0] and len(devs) == 1 and devs[0].slice == 0 and devs[0].x == 32


# -- aggregation ----------------------------------------------------------------------

def test_aggregation_over_frames():
    info = frame_info(64, 32, "422")
    ref = Frame(planes_for(info), "yuv422p10le", 10)
    totals = None
    for n, (row, col, dev) in enumerate([(0, 0, 2), (20, 40, -7), (1, 1, 1)]):
        cand = Frame({k: v.copy() for k, v in ref.planes.items()}, "yuv422p10le", 10)
        cand.planes["Y"][row, col] = 500 + dev
        totals = merge_stats(totals, compare_frames(ref, cand, info, n, worst_n=2))
    y = totals["Y"]
    assert y.max_abs == 7 and y.mismatches == 3 and y.samples == 3 * 64 * 32
    assert y.sum_error == 2 - 7 + 1 and y.sum_abs_error == 10 and y.sum_sq_error == 4 + 49 + 1
    assert y.histogram.sum() == y.samples and y.histogram[HIST_RANGE - 7] == 1
    assert [(w.max_abs, w.frame) for w in y.worst] == [(7, 1), (2, 0)]
    assert y.grid.values.tolist() == [2, 7]    # one 4-MB slice per row; max over frames
    assert totals["Cb"].identical and math.isinf(totals["Cb"].psnr_db)


def test_total_over_bit_depths_keeps_each_peak():
    a = compare_plane(np.zeros((2, 2), np.uint16), np.full((2, 2), 1, np.uint16), "Y", 10)
    b = compare_plane(np.zeros((2, 2), np.uint16), np.full((2, 2), 4, np.uint16), "Y", 12)
    t = a.merge(b, keep_grid=False)
    expected = 10 * math.log10(8 / (4 / 1023 ** 2 + 4 * 16 / 4095 ** 2))
    assert t.psnr_db == pytest.approx(expected) and t.max_abs == 4


def test_empty_stats_are_identical():
    s = PlaneStats("Y", 10)
    assert s.identical and math.isinf(s.psnr_db) and s.mismatch_share == 0


@pytest.mark.parametrize("high", [1024, 4096, 65536])
def test_figures_match_a_naive_computation(high):
    """Random planes, incl. garbage above 32767 (the int32 path), against plain float maths."""
    rng = np.random.default_rng(high)
    ref = rng.integers(0, min(high, 4096), (37, 53)).astype(np.uint16)
    cand = ref.copy()
    hit = rng.random(ref.shape) < 0.3
    cand[hit] = rng.integers(0, high, int(hit.sum())).astype(np.uint16)
    s = compare_plane(ref, cand, "Y", 12)
    d = cand.astype(np.int64) - ref
    assert s.max_abs == np.abs(d).max() and s.mismatches == np.count_nonzero(d)
    assert s.sum_error == d.sum() and s.sum_abs_error == np.abs(d).sum() and s.sum_sq_error == (d * d).sum()
    assert s.psnr_db == pytest.approx(10 * math.log10(4095 ** 2 / np.mean(d.astype(float) ** 2)))
    expected = np.bincount(np.clip(d, -HIST_RANGE, HIST_RANGE).ravel() + HIST_RANGE, minlength=33)
    assert s.histogram.tolist() == expected.tolist()
