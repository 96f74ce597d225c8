"""A pure-Python reader of ProRes frame and picture headers.

The native extension has its own ``inspect``; this one exists so that the
comparison pipeline (and its tests) can attribute deviations to slices even
when the candidate decoder is not the native session, and as an independent
cross-check of the native parser.  It follows FFmpeg 7.1's ``proresdec.c``
(``decode_frame_header`` / ``decode_picture_header``), including how it
derives the slice count and slice widths rather than trusting the header.
"""

from __future__ import annotations

import struct

from .errors import DecodeError, NotProResError
from .model import FrameInfo, PictureInfo, SliceInfo

#: codec tags for which FFmpeg's decoder outputs 12-bit samples
TWELVE_BIT_TAGS = ("ap4h", "ap4x")


def bit_depth_for_tag(codec_tag: str) -> int:
    """FFmpeg picks the output depth from the container's codec tag alone."""
    return 12 if codec_tag in TWELVE_BIT_TAGS else 10


def pix_fmt_name(chroma_format: str, alpha: bool, bit_depth: int) -> str:
    """FFmpeg pixel format name the software decoder produces."""
    return f"yuv{'a' if alpha else ''}{chroma_format}p{bit_depth}le"


def parse_frame(packet: bytes, codec_tag: str = "apch") -> FrameInfo:
    """Parse the frame header, picture headers and slice indexes of ``packet``.

    Raises ``NotProResError`` when the packet has no ``icpf`` frame header and
    ``DecodeError`` when a header points outside the packet (a truncated or
    damaged frame).
    """
    if len(packet) < 28 or packet[4:8] != b"icpf":
        raise NotProResError("packet has no ProRes frame header ('icpf')")
    buf = memoryview(packet)[8:]
    hdr_size, version = struct.unpack_from(">HH", buf, 0)
    if hdr_size > len(buf) or hdr_size < 20:
        raise DecodeError(f"frame header size {hdr_size} does not fit the {len(packet)}-byte packet")
    if version > 1:
        raise DecodeError(f"unsupported ProRes frame header version {version}")
    width, height = struct.unpack_from(">HH", buf, 8)
    flags = buf[12]
    chroma_format = "444" if (flags & 0xC0) == 0xC0 else "422"
    interlace_mode = (flags >> 2) & 3
    alpha_info = buf[17] & 0xF
    bit_depth = bit_depth_for_tag(codec_tag)

    pictures = []
    pos = 8 + hdr_size
    # FFmpeg treats the reserved mode 3 like 2: only mode 1 is top field first.
    fields = ("frame",) if interlace_mode == 0 else ("top", "bottom") if interlace_mode == 1 else ("bottom", "top")
    for field in fields:
        if pos >= len(packet):
            break
        pic = _parse_picture(packet, pos, field, width, height, interlace_mode != 0)
        pictures.append(pic)
        pos += pic.size
    return FrameInfo(width=width, height=height, chroma_format=chroma_format,
                     bit_depth=bit_depth, pix_fmt=pix_fmt_name(chroma_format, alpha_info != 0, bit_depth),
                     alpha_info=alpha_info, interlace_mode=interlace_mode, pictures=tuple(pictures))


def _parse_picture(packet: bytes, pos: int, field: str, width: int, height: int,
                   interlaced: bool) -> PictureInfo:
    """One picture header plus its slice index, as FFmpeg lays the slices out."""
    if pos + 8 > len(packet):
        raise DecodeError(f"picture header at byte {pos} is cut off (packet has {len(packet)} bytes)")
    hdr_size = packet[pos] >> 3
    pic_size = struct.unpack_from(">I", packet, pos + 1)[0]
    log2_w = packet[pos + 7] >> 4
    if hdr_size < 8 or pic_size > len(packet) - pos or pic_size < hdr_size:
        raise DecodeError(f"picture at byte {pos} claims {pic_size} bytes, packet has {len(packet) - pos} left")
    if log2_w > 3 or packet[pos + 7] & 0xF:
        raise DecodeError(f"unsupported slice size in picture at byte {pos}")
    mb_width = (width + 15) >> 4
    mb_height = (height + 31) >> 5 if interlaced else (height + 15) >> 4
    per_row = (mb_width >> log2_w) + bin(mb_width & ((1 << log2_w) - 1)).count("1")
    count = mb_height * per_row
    index = pos + hdr_size
    data = index + 2 * count
    if data > pos + pic_size:
        raise DecodeError(f"slice index of picture at byte {pos} is cut off")
    sizes = struct.unpack_from(f">{count}H", packet, index)
    slices = []
    mb_x = mb_y = 0
    mb_count = 1 << log2_w
    for i, size in enumerate(sizes):
        while mb_width - mb_x < mb_count:
            mb_count >>= 1
        if data + size > len(packet):
            raise DecodeError(f"slice {i} of picture at byte {pos} ends past the packet")
        qscale = packet[data + 1] if size > 1 else 0
        slices.append(SliceInfo(index=i, mb_x=mb_x, mb_y=mb_y, mb_count=mb_count,
                                offset=data, size=size, qscale=qscale))
        data += size
        mb_x += mb_count
        if mb_x == mb_width:
            mb_x, mb_y, mb_count = 0, mb_y + 1, 1 << log2_w
    return PictureInfo(field=field, offset=pos, size=pic_size, log2_slice_mb_width=log2_w,
                       mb_width=mb_width, mb_height=mb_height, slices=tuple(slices))
