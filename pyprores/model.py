"""Plain data types shared by the native session, the demuxer and the metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PLANE_NAMES = ("Y", "Cb", "Cr", "A")


@dataclass(frozen=True)
class SliceInfo:
    """One slice of one picture, as the picture's slice index describes it."""

    index: int
    mb_x: int
    mb_y: int          # macroblock row within the picture (field rows for interlaced)
    mb_count: int      # width of the slice in macroblocks (1, 2, 4 or 8)
    offset: int        # byte offset of the slice data in the packet
    size: int          # byte size of the slice data
    qscale: int        # raw quantiser byte of the slice header


@dataclass(frozen=True)
class PictureInfo:
    """One coded picture: the frame itself, or one field of an interlaced frame."""

    field: str                 # "frame", "top" or "bottom"
    offset: int                # byte offset of the picture header in the packet
    size: int                  # picture size from the picture header
    log2_slice_mb_width: int
    mb_width: int
    mb_height: int
    slices: tuple[SliceInfo, ...] = ()


@dataclass(frozen=True)
class FrameInfo:
    """Frame header facts, read without decoding any slice."""

    width: int
    height: int
    chroma_format: str         # "422" or "444"
    bit_depth: int             # 10 or 12, as FFmpeg's decoder chooses
    pix_fmt: str               # FFmpeg pixel format name, e.g. "yuv422p10le"
    alpha_info: int            # 0 none, 1 8-bit, 2 16-bit
    interlace_mode: int        # 0 progressive, 1 top field first, 2 bottom field first
    pictures: tuple[PictureInfo, ...] = ()

    @property
    def alpha(self) -> bool:
        return self.alpha_info != 0


@dataclass
class Frame:
    """Decoded planes, one uint16 array per plane (Y, Cb, Cr and optionally A)."""

    planes: dict[str, np.ndarray]
    pix_fmt: str
    bit_depth: int
    corrupt: bool = False
    extra: dict = field(default_factory=dict)
    #: the frame's decode_error_flags (FF_DECODE_ERROR_*; 1 = invalid bitstream)
    error_flags: int = 0
    #: the slices the decoder concealed, as (picture, slice index) pairs
    #: (picture 1 is the second field); None where the decoder cannot say
    #: (PyAV's reference frames)
    concealed: tuple[tuple[int, int], ...] | None = None
