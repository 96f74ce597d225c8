"""Where a slice's samples lie in a decoded plane.

ProRes codes 16x16 luma macroblocks; a slice is a horizontal run of
``mb_count`` of them in one macroblock row of one picture.  An interlaced
frame carries two pictures (fields) that each cover every other frame row.
Metrics and the deviation map both need this mapping, so it lives here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import FrameInfo, PictureInfo, SliceInfo

MB_SIZE = 16  # luma samples per macroblock side


def mb_size(plane: str, chroma_format: str) -> tuple[int, int]:
    """(width, height) in samples of one macroblock in ``plane``.

    Chroma is horizontally halved in 4:2:2 only; alpha is always full size.
    """
    if plane in ("Cb", "Cr") and chroma_format == "422":
        return MB_SIZE // 2, MB_SIZE
    return MB_SIZE, MB_SIZE


def plane_shape(plane: str, chroma_format: str, width: int, height: int) -> tuple[int, int]:
    """(rows, columns) of the visible ``plane`` of a ``width`` x ``height`` frame."""
    if plane in ("Cb", "Cr") and chroma_format == "422":
        return height, (width + 1) // 2
    return height, width


def field_rows(field: str) -> tuple[int, int]:
    """(first frame row, row step) that a picture of kind ``field`` covers."""
    if field == "top":
        return 0, 2
    if field == "bottom":
        return 1, 2
    return 0, 1


@dataclass(frozen=True)
class SliceRect:
    """A slice's samples in one plane: frame columns x..x+width, and
    ``height`` frame rows starting at ``y`` with step ``row_step``
    (2 for a field picture).  Already clipped to the visible plane."""

    x: int
    y: int
    width: int
    height: int
    row_step: int


def slice_rect(picture: PictureInfo, sl: SliceInfo, plane: str, chroma_format: str,
               plane_rows: int, plane_cols: int) -> SliceRect:
    """Visible rectangle of ``sl`` in ``plane``; width/height may be 0 when the
    slice lies wholly in the coded padding beyond the visible size."""
    mbw, mbh = mb_size(plane, chroma_format)
    first, step = field_rows(picture.field)
    field_len = max(0, (plane_rows - first + step - 1) // step)   # rows this picture covers
    x0 = sl.mb_x * mbw
    x1 = min(plane_cols, x0 + sl.mb_count * mbw)
    r0 = sl.mb_y * mbh                                              # row within the picture
    r1 = min(field_len, r0 + mbh)
    return SliceRect(x=x0, y=first + r0 * step, width=max(0, x1 - x0),
                     height=max(0, r1 - r0), row_step=step)


def slice_layout(info: FrameInfo) -> tuple[tuple, ...]:
    """Hashable description of every slice's position, in picture order.

    Entries are ``(picture_index, field, mb_y, mb_x, mb_count)``.  Frames of
    one stream nearly always share a layout, which lets per-slice results of
    many frames be combined with one numpy ``maximum``.
    """
    return tuple((p, pic.field, s.mb_y, s.mb_x, s.mb_count)
                 for p, pic in enumerate(info.pictures) for s in pic.slices)
