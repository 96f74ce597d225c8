"""pyprores: Vulkan ProRes decoding in FFmpeg, checked against the software decoder."""

from .errors import (DecodeError, DeviceError, NativeLibraryError,
                     NotProResError, PyproresError)
from .model import Frame, FrameInfo, PictureInfo, SliceInfo

__version__ = "0.1.0"

from .demux import ProResSource, open  # noqa: E402,A001 - pyprores.open(path), like av.open
from .stream import DecodedFrame, StreamDecoder, open_decoder  # noqa: E402

__all__ = [
    "DecodedFrame", "DecodeError", "DeviceError", "Frame", "FrameInfo", "NativeLibraryError",
    "NotProResError", "PictureInfo", "ProResSource", "PyproresError", "SliceInfo", "StreamDecoder",
    "__version__", "open", "open_decoder",
]
