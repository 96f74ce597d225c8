"""Exceptions raised by pyprores; each message says what the user can do."""


class PyproresError(Exception):
    """Base class for every error pyprores reports to a user."""


class NotProResError(PyproresError):
    """The input has no ProRes video stream."""


class DeviceError(PyproresError):
    """No usable Vulkan device, or the hwaccel is missing from the build."""


class DecodeError(PyproresError):
    """A packet could not be decoded."""


class NativeLibraryError(PyproresError):
    """The compiled extension is missing or does not match the FFmpeg build."""
