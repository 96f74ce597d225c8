"""pyprores: Vulkan ProRes decoding in FFmpeg, checked against the software decoder."""

from .errors import (DecodeError, DeviceError, NativeLibraryError,
                     NotProResError, PyproresError)
from .model import Frame, FrameInfo, PictureInfo, SliceInfo

__version__ = "0.1.0"

__all__ = [
    "DecodeError", "DeviceError", "Frame", "FrameInfo", "NativeLibraryError",
    "NotProResError", "PictureInfo", "PyproresError", "SliceInfo", "__version__",
]
