"""cffi (API mode) build of ``pyprores._native`` over the C library in csrc/.

Used by setup.py as ``cffi_modules=["csrc/build_ffi.py:ffibuilder"]``, so
``pip install -e .`` compiles it; ``python csrc/build_ffi.py`` builds it in
place (into pyprores/) for development.

FFmpeg comes from ``$PYPRORES_FFMPEG_DIR`` (default: ``<repo>/build/ffmpeg``,
made by ``./scripts/setup``), which must hold ``include/`` and ``lib/`` with
the shared libavcodec/libavutil; the extension gets an rpath to that ``lib/``.
Vulkan headers: ``$PYPRORES_VULKAN_INCLUDE`` if set, else the vendored
``shared/vendor/vulkan-headers-*`` beside or inside the repo when present,
else the system's.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEADER = os.path.join(HERE, "pyprores.h")
SOURCES = ["pyprores.c", "prores_headers.c"]


def ffmpeg_dir() -> str:
    d = os.environ.get("PYPRORES_FFMPEG_DIR") or os.path.join(REPO, "build", "ffmpeg")
    return os.path.abspath(d)


def vulkan_include_dirs() -> list[str]:
    env = os.environ.get("PYPRORES_VULKAN_INCLUDE")
    if env:
        return [os.path.abspath(env)]
    for base in (os.path.join(REPO, "shared"), os.path.join(os.path.dirname(REPO), "shared")):
        found = sorted(glob.glob(os.path.join(base, "vendor", "vulkan-headers-*", "include")))
        if found:
            return [found[-1]]
    return []


def cdef_from_header(path: str = HEADER) -> str:
    text = open(path, encoding="utf-8").read()
    start = text.index("/* CFFI_BEGIN */") + len("/* CFFI_BEGIN */")
    end = text.index("/* CFFI_END */")
    return text[start:end]


def _source_path(name: str) -> str:
    path = os.path.join(HERE, name)
    try:  # setuptools prefers paths relative to setup.py's directory
        rel = os.path.relpath(path, os.getcwd())
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def make_builder(absolute_sources: bool = False) -> FFI:
    fdir = ffmpeg_dir()
    inc = os.path.join(fdir, "include")
    lib = os.path.join(fdir, "lib")
    if not os.path.isfile(os.path.join(inc, "libavcodec", "avcodec.h")):
        raise RuntimeError(
            f"FFmpeg headers not found in {inc}: run ./scripts/setup to build FFmpeg "
            "into build/ffmpeg, or set PYPRORES_FFMPEG_DIR to an FFmpeg 7.1 install "
            "(with include/ and lib/)")
    builder = FFI()
    builder.cdef(cdef_from_header())
    builder.set_source(
        "pyprores._native",
        '#include "pyprores.h"\n',
        sources=[os.path.join(HERE, s) if absolute_sources else _source_path(s)
                 for s in SOURCES],
        include_dirs=[HERE, inc] + vulkan_include_dirs(),
        library_dirs=[lib],
        libraries=["avcodec", "avutil", "pthread"],
        extra_compile_args=["-std=gnu11", "-O2", "-Wall"],
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )
    return builder


ffibuilder = make_builder()


def build_in_place() -> str:
    """Compile the extension and copy it into the pyprores package."""
    tmp = os.path.join(REPO, "build", "cffi")
    os.makedirs(tmp, exist_ok=True)
    # cffi compiles from inside tmpdir: give it absolute source paths
    built = make_builder(absolute_sources=True).compile(tmpdir=tmp, verbose=False)
    dest = os.path.join(REPO, "pyprores", os.path.basename(built))
    # drop other builds (e.g. pip's _native.abi3.so): Python would pick one by suffix order
    for old in glob.glob(os.path.join(REPO, "pyprores", "_native*.so")):
        if os.path.abspath(old) != os.path.abspath(dest):
            os.remove(old)
    shutil.copy2(built, dest)
    return dest


if __name__ == "__main__":
    print(build_in_place())
    sys.exit(0)
