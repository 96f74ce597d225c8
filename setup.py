"""Build hook for the cffi extension; the metadata lives in pyproject.toml.

csrc/build_ffi.py (exporting `ffibuilder`) is compiled against the FFmpeg in
$PYPRORES_FFMPEG_DIR (scripts/setup points it at build/ffmpeg). Until that file
exists the package installs as pure Python.
"""
import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
kwargs = {}
if os.path.exists(os.path.join(HERE, "csrc", "build_ffi.py")):
    kwargs["cffi_modules"] = ["csrc/build_ffi.py:ffibuilder"]

setup(**kwargs)
