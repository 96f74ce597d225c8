"""pyprores: Vulkan ProRes decoding in FFmpeg, checked against the software decoder."""

from .errors import (DecodeError, DeviceError, NativeLibraryError,
                     NotProResError, PyproresError)
from .model import Frame, FrameInfo, PictureInfo, SliceInfo

__version__ = "0.1.0"

from .decode.demux import ProResSource, open  # noqa: E402,A001 - pyprores.open(path), like av.open


def open_decoder(source, backend="vulkan", device=None, threads=0, max_in_flight=None, **kwargs):
    """Stream a file's frames as numpy planes (or CUDA tensors): see
    :class:`pyprores.decode.stream.StreamDecoder`. (Imported on first use: the native extension loads only once a build is chosen.)"""
    from .decode.stream import open_decoder as _open_decoder
    return _open_decoder(source, backend, device, threads, max_in_flight, **kwargs)


def __getattr__(name):
    if name in ("StreamDecoder", "DecodedFrame"):
        from .decode import stream
        return getattr(stream, name)
    raise AttributeError(f"module 'pyprores' has no attribute {name!r}")

__all__ = [
    "DecodedFrame", "DecodeError", "DeviceError", "Frame", "FrameInfo", "NativeLibraryError",
    "NotProResError", "PictureInfo", "ProResSource", "PyproresError", "SliceInfo", "StreamDecoder",
    "__version__", "open", "open_decoder",
]
