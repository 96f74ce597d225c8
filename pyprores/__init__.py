"""pyprores: Vulkan ProRes decoding in FFmpeg, checked against the software decoder."""

from .errors import (DecodeError, DeviceError, NativeLibraryError,
                     NotProResError, PyproresError)
from .model import Frame, FrameInfo, PictureInfo, SliceInfo

__version__ = "0.1.0"

from .demux import ProResSource, open  # noqa: E402,A001 - pyprores.open(path), like av.open

__all__ = [
    "DecodeError", "DeviceError", "Frame", "FrameInfo", "NativeLibraryError",
    "NotProResError", "PictureInfo", "ProResSource", "PyproresError", "SliceInfo", "__version__", "open",
]
