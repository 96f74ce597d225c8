"""The deviation map: one PNG cell per slice, coloured by its worst deviation.

Layout (documented in docs/COMPARE.md):

* One panel per plane (Y, Cb, Cr, A), stacked top to bottom with a
  :data:`GAP`-pixel grey row between panels.
* A panel is the slice grid of the frame: a macroblock is ``unit`` x
  ``unit`` pixels and a slice is ``mb_count`` macroblocks wide, so a panel
  has the aspect of the coded frame (whole macroblocks) in every plane —
  chroma cells cover the same slices as luma.  Interlaced frames show each
  field macroblock row as two half-height strips, top field above bottom
  field, so the panel keeps the frame's aspect too.
* Colour: black for a slice that matches exactly; otherwise a ramp on
  log2(deviation) from blue (1) through cyan, green and yellow to red
  (2^bits - 1, the largest possible).  A fixed scale keeps maps of
  different runs comparable.  Slice borders are dark grey.

PyAV (a dependency already) encodes the PNG.
"""

from __future__ import annotations

import os

import av
import numpy as np

from .metrics import PlaneStats, SliceGrid

GAP = 1                       # grey rows between stacked plane panels
TARGET_WIDTH = 1024           # a panel is about this wide (at most)
GAP_RGB = (128, 128, 128)
BORDER_RGB = (48, 48, 48)
RAMP = np.array([[40, 60, 255], [0, 200, 255], [0, 220, 0], [255, 220, 0], [255, 0, 0]], float)


def unit_for(mb_width: int) -> int:
    """Pixels per macroblock: big enough to see a slice, small for 4K."""
    return max(2, min(32, TARGET_WIDTH // max(1, mb_width)))


def colorize(values: np.ndarray, bit_depth: int) -> np.ndarray:
    """Map max deviations to RGB: 0 → black, 1..peak → the log ramp."""
    peak = (1 << bit_depth) - 1
    t = np.log2(np.maximum(values, 1)) / np.log2(peak)
    pos = np.clip(t, 0, 1) * (len(RAMP) - 1)
    lo = np.minimum(pos.astype(int), len(RAMP) - 2)
    frac = (pos - lo)[..., None]
    rgb = RAMP[lo] * (1 - frac) + RAMP[lo + 1] * frac
    rgb[values == 0] = 0
    return np.rint(rgb).astype(np.uint8)


def grid_cells(grid: SliceGrid) -> tuple[np.ndarray, np.ndarray]:
    """Per-macroblock (value, is-last-MB-of-its-slice) arrays of the panel.

    Rows are frame macroblock rows; for field pictures each field MB row
    gets its own row, the top field's first.
    """
    interlaced = any(field != "frame" for field, _, _ in grid.pictures)
    mb_width = max(w for _, w, _ in grid.pictures)
    mb_rows = max(h for _, _, h in grid.pictures) * (2 if interlaced else 1)
    values = np.zeros((mb_rows, mb_width), np.int64)
    ends = np.zeros((mb_rows, mb_width), bool)
    for (_, field, mb_y, mb_x, count), v in zip(grid.layout, grid.values.tolist()):
        row = 2 * mb_y + (field == "bottom") if interlaced else mb_y
        if row < mb_rows and mb_x < mb_width:
            values[row, mb_x:mb_x + count] = v
            ends[row, min(mb_width, mb_x + count) - 1] = True
    return values, ends


def render_panel(grid: SliceGrid, bit_depth: int, unit: int) -> np.ndarray:
    """RGB image (H, W, 3) of one plane's slice grid."""
    values, ends = grid_cells(grid)
    cell_h = unit   # a field MB row spans 32 frame rows: two unit-high strips
    rgb = colorize(values, bit_depth)
    img = np.repeat(np.repeat(rgb, cell_h, axis=0), unit, axis=1)
    if unit >= 8:   # thinner cells would be mostly border
        ys = np.arange(img.shape[0])
        xs = np.arange(img.shape[1])
        right = (xs % unit == unit - 1)[None, :] & np.repeat(np.repeat(ends, cell_h, 0), unit, 1)
        bottom = (ys % cell_h == cell_h - 1)[:, None]
        img[right | bottom] = BORDER_RGB
    return img


def render(planes: dict[str, PlaneStats]) -> np.ndarray:
    """All planes' panels stacked vertically with GAP grey rows between."""
    grids = [(s.grid, s.bit_depth) for s in planes.values() if s.grid is not None]
    if not grids:
        raise ValueError("no slice information to draw a deviation map from")
    unit = unit_for(max(w for g, _ in grids for _, w, _ in g.pictures))
    panels = [render_panel(g, bits, unit) for g, bits in grids]
    width = max(p.shape[1] for p in panels)
    out = []
    for i, panel in enumerate(panels):
        if i:
            out.append(np.full((GAP, width, 3), GAP_RGB, np.uint8))
        out.append(panel)
    return np.concatenate(out, axis=0)


def write_map(planes: dict[str, PlaneStats], path: str | os.PathLike) -> tuple[int, int]:
    """Render and write the map; returns (width, height) of the PNG."""
    img = render(planes)
    write_png(path, img)
    return img.shape[1], img.shape[0]


def write_png(path: str | os.PathLike, rgb: np.ndarray) -> None:
    """Write an 8-bit RGB image (H, W, 3) as PNG, encoded by FFmpeg's png encoder through PyAV."""
    h, w, _ = rgb.shape
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = w, h, "rgb24"
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb, np.uint8), format="rgb24")
    packets = [*codec.encode(frame), *codec.encode(None)]
    with open(path, "wb") as f:
        for packet in packets:
            f.write(bytes(packet))
